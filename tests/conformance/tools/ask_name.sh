#!/bin/sh
# test_input_required_result_elicitation (input-required-result-*) and
# test_tool_with_task (tasks-mrtr-composition): asks for the user's name under
# the key user_name, then greets them. taskgate turns the question into an
# input_required result (MRTR) whose requestState names this run, and the
# client's retry answers it.
set -eu
. "$(dirname "$0")/lib.sh"
ask user_name "What is your name?" '{"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}'
reply=$(answer user_name)
if [ "${WORK_SECONDS:-0}" -gt 0 ]; then sleep "$WORK_SECONDS"; fi
printf 'Hello, %s!' "$(field "$reply" name)"
