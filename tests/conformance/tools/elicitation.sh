#!/bin/sh
# test_elicitation {message} (tools-call-elicitation): asks the user for a user
# name and an email address.
set -eu
. "$(dirname "$0")/lib.sh"
ask user "${TASKGATE_ARG_MESSAGE:-Please provide your information}" '{"type": "object", "properties": {"username": {"type": "string", "description": "User'"'"'s response"}, "email": {"type": "string", "description": "User'"'"'s email address"}}, "required": ["username", "email"]}'
reply=$(answer user)
printf 'User response: action=%s, username=%s, email=%s' "$(action "$reply")" "$(field "$reply" username)" "$(field "$reply" email)"
