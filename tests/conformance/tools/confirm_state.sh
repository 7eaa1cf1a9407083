#!/bin/sh
# test_input_required_result_request_state and
# test_input_required_result_tampered_state (input-required-result-*): asks for
# a confirmation under the key confirm. The run only gets the answer when the
# retry's requestState opened (taskgate seals it: an altered one is refused
# with -32602), hence "state-ok".
set -eu
. "$(dirname "$0")/lib.sh"
ask confirm "Please confirm" '{"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}'
reply=$(answer confirm)
printf 'state-ok: action=%s' "$(action "$reply")"
