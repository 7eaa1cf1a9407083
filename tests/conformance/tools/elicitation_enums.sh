#!/bin/sh
# test_elicitation_sep1330_enums (elicitation-sep1330-enums): a form with the
# five enum variants.
set -eu
. "$(dirname "$0")/lib.sh"
ask enums "Please select options from the enum fields" '{"type": "object", "properties": {
 "untitledSingle": {"type": "string", "description": "Untitled single-select", "enum": ["option1", "option2", "option3"]},
 "titledSingle": {"type": "string", "description": "Titled single-select", "oneOf": [{"const": "value1", "title": "First Option"}, {"const": "value2", "title": "Second Option"}, {"const": "value3", "title": "Third Option"}]},
 "legacyEnum": {"type": "string", "description": "Legacy titled enum", "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]},
 "untitledMulti": {"type": "array", "description": "Untitled multi-select", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
 "titledMulti": {"type": "array", "description": "Titled multi-select", "items": {"anyOf": [{"const": "value1", "title": "First Choice"}, {"const": "value2", "title": "Second Choice"}, {"const": "value3", "title": "Third Choice"}]}}}}'
reply=$(answer enums)
printf 'Elicitation completed: action=%s, content=%s' "$(action "$reply")" "$reply"
