#!/bin/sh
# confirm_delete {filename} (tasks-mrtr-input, tasks-dispatch-and-envelope):
# asks for one confirmation, then completes with what was answered.
set -eu
. "$(dirname "$0")/lib.sh"
file=${TASKGATE_ARG_FILENAME:-file}
ask confirm "Delete $file?" '{"type": "object", "properties": {"confirm": {"type": "boolean", "description": "Delete the file"}}}'
reply=$(answer confirm)
case "$(action "$reply")" in
  accept) printf 'Deleted %s.' "$file" ;;
  *) printf 'Kept %s (%s).' "$file" "$(action "$reply")" ;;
esac
