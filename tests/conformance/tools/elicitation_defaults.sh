#!/bin/sh
# test_elicitation_sep1034_defaults (elicitation-sep1034-defaults): a form whose
# fields all carry defaults.
set -eu
. "$(dirname "$0")/lib.sh"
ask defaults "Please review and update the form fields with defaults" '{"type": "object", "properties": {"name": {"type": "string", "description": "User name", "default": "John Doe"}, "age": {"type": "integer", "description": "User age", "default": 30}, "score": {"type": "number", "description": "User score", "default": 95.5}, "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"}, "verified": {"type": "boolean", "description": "Verification status", "default": true}}}'
reply=$(answer defaults)
printf 'Elicitation completed: action=%s, content=%s' "$(action "$reply")" "$reply"
