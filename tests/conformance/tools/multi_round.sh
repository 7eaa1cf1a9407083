#!/bin/sh
# test_input_required_result_multi_round (input-required-result-multi-round):
# two questions one after the other (step1, then step2), so the first retry
# gets a second input_required result.
set -eu
. "$(dirname "$0")/lib.sh"
ask step1 "Step 1: What is your name?" '{"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}'
name=$(field "$(answer step1)" name)
ask step2 "Step 2: What is your favorite color?" '{"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}'
color=$(field "$(answer step2)" color)
printf '%s likes %s.' "$name" "$color"
