#!/bin/sh
# Starts a grandchild that sleeps, records its pid, reports status, and waits.
# With STUBBORN=1 it (and so its grandchild) ignores SIGTERM.
if [ "${STUBBORN:-0}" = 1 ]; then trap '' TERM; fi
sleep 300 &
echo $! > "$TASKGATE_RUN_DIR/grandchild.pid.tmp"
mv "$TASKGATE_RUN_DIR/grandchild.pid.tmp" "$TASKGATE_RUN_DIR/grandchild.pid"
printf '{"message": "sleeping", "progress": 3, "total": 10}' > "$TASKGATE_STATUS_FILE.tmp"
mv "$TASKGATE_STATUS_FILE.tmp" "$TASKGATE_STATUS_FILE"
wait
