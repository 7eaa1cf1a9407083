#!/bin/sh
# multi_input (tasks-mrtr-input): asks two questions at once, completes when
# both are answered (in any order, one update at a time or together).
set -eu
. "$(dirname "$0")/lib.sh"
schema='{"type": "object", "properties": {"name": {"type": "string"}, "confirm": {"type": "boolean"}}}'
ask first "First input?" "$schema"
ask second "Second input?" "$schema"
a=$(answer first)
b=$(answer second)
printf 'Received: first=%s, second=%s.' "$(field "$a" name)" "$(field "$b" name)"
