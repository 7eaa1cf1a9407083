#!/bin/sh
# Writes what it received into its run folder for the test to inspect.
set -eu
printf '%s' "$TASKGATE_ARG_TEXT" > "$TASKGATE_RUN_DIR/seen-text"
printf '%s' "$TASKGATE_ARG_LIST" > "$TASKGATE_RUN_DIR/seen-list"
printf '%s' "$FIXED" > "$TASKGATE_RUN_DIR/seen-fixed"
printf '%s\n' "$@" > "$TASKGATE_RUN_DIR/seen-argv"
pwd > "$TASKGATE_RUN_DIR/seen-pwd"
env > "$TASKGATE_RUN_DIR/seen-env"
cp "$TASKGATE_ARGS_FILE" "$TASKGATE_RESULT_FILE"
