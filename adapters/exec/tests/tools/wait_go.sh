#!/bin/sh
# Waits (at most 60 s) until a file named "go" appears in its run folder.
i=0
while [ ! -e "$TASKGATE_RUN_DIR/go" ]; do
  i=$((i + 1)); [ "$i" -gt 600 ] && exit 9
  sleep 0.1
done
echo done
