#!/bin/sh
# test_streaming_elicitation (server-stateless): asks a question at once; the
# 2026-07-28 response must then be an input_required result, never a
# server-to-client request on the response stream.
set -eu
. "$(dirname "$0")/lib.sh"
ask details "Please provide details" '{"type": "object", "properties": {"detail": {"type": "string"}}}'
reply=$(answer details)
printf 'Got: %s' "$reply"
