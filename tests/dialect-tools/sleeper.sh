#!/bin/sh
# Dialect-test pipeline that never ends by itself: records its own pid and its
# child's in the run folder (sleeper.pids, "<shell> <child>"), then waits.
# Cancel tests check that both processes are gone afterwards.
sleep 600 &
printf '%s %s\n' "$$" "$!" > "$TASKGATE_RUN_DIR/sleeper.pids.tmp"
mv "$TASKGATE_RUN_DIR/sleeper.pids.tmp" "$TASKGATE_RUN_DIR/sleeper.pids"
printf '{"message": "sleeping"}' > "$TASKGATE_STATUS_FILE.tmp"
mv "$TASKGATE_STATUS_FILE.tmp" "$TASKGATE_STATUS_FILE"
wait
