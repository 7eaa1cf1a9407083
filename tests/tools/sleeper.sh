#!/bin/sh
# A pipeline that never ends by itself: starts a child that sleeps, records the
# child's pid (grandchild.pid) and both pids (sleeper.pids, "<shell> <child>")
# in its run folder, reports status and waits. Cancel tests check that the
# whole process group is gone afterwards.
sleep 600 &
echo $! > "$TASKGATE_RUN_DIR/grandchild.pid.tmp"
printf '%s %s\n' "$$" "$!" > "$TASKGATE_RUN_DIR/sleeper.pids.tmp"
mv "$TASKGATE_RUN_DIR/grandchild.pid.tmp" "$TASKGATE_RUN_DIR/grandchild.pid"
mv "$TASKGATE_RUN_DIR/sleeper.pids.tmp" "$TASKGATE_RUN_DIR/sleeper.pids"
printf '{"message": "sleeping"}' > "$TASKGATE_STATUS_FILE.tmp"
mv "$TASKGATE_STATUS_FILE.tmp" "$TASKGATE_STATUS_FILE"
wait
