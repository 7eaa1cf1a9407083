#!/bin/sh
# A pipeline that never ends by itself: starts a grandchild that sleeps,
# records the grandchild's pid in its run folder, reports status and waits.
# Cancel tests check that the whole process group is gone afterwards.
sleep 300 &
echo $! > "$TASKGATE_RUN_DIR/grandchild.pid.tmp"
mv "$TASKGATE_RUN_DIR/grandchild.pid.tmp" "$TASKGATE_RUN_DIR/grandchild.pid"
printf '{"message": "sleeping"}' > "$TASKGATE_STATUS_FILE.tmp"
mv "$TASKGATE_STATUS_FILE.tmp" "$TASKGATE_STATUS_FILE"
wait
