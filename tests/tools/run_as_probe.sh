#!/bin/sh
# Run as another user (run_as): records who it runs as and what of taskgate's
# it could read or replace, as its JSON result.
set -u
can() { if "$@" >/dev/null 2>&1; then echo true; else echo false; fi; }
run="$TASKGATE_RUN_DIR"
spool=$(dirname "$run")
replace_meta() { echo '{}' > "$run/forged" && mv -f "$run/forged" "$run/meta.json"; }
printf '{"uid": %s, "gid": %s, "groups": "%s", "server_environ": %s, "parent_environ": %s, "command": %s, "meta": %s, "pid": %s, "replace_meta": %s, "list_spool": %s, "other_run": %s, "args": %s}' \
  "$(id -u)" "$(id -g)" "$(id -G)" \
  "$(can cat "/proc/$TASKGATE_ARG_SERVER_PID/environ")" \
  "$(can cat "/proc/$PPID/environ")" \
  "$(can cat "$run/command.json")" \
  "$(can cat "$run/meta.json")" \
  "$(can cat "$run/pid.json")" \
  "$(can replace_meta)" \
  "$(can ls "$spool")" \
  "$(can ls "$spool/$TASKGATE_ARG_OTHER_RUN")" \
  "$(can cat "$TASKGATE_ARGS_FILE")" \
  > "$run/result.tmp"
mv "$run/result.tmp" "$TASKGATE_RESULT_FILE"
