#!/bin/sh
# What a tool can see of taskgate's secrets: its parent's (the supervisor's)
# environment and its own, written into its run folder for the test to read.
set -eu
tr '\0' '\n' < "/proc/$PPID/environ" > "$TASKGATE_RUN_DIR/parent-env"
env > "$TASKGATE_RUN_DIR/own-env"
echo "$PPID" > "$TASKGATE_RUN_DIR/parent-pid"
