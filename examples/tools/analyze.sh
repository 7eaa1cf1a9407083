#!/bin/sh
# Example pipeline: "analyses" a dataset for TASKGATE_ARG_SECONDS seconds, reporting
# progress each second, then writes a JSON result. Arguments arrive as environment
# variables (TASKGATE_ARG_*) and as a JSON file (TASKGATE_ARGS_FILE), never on a
# command line.
set -eu
seconds=${TASKGATE_ARG_SECONDS:-5}
i=0
while [ "$i" -lt "$seconds" ]; do
  printf '{"message": "step %s of %s", "progress": %s, "total": %s}' "$i" "$seconds" "$i" "$seconds" > "$TASKGATE_STATUS_FILE.tmp"
  mv "$TASKGATE_STATUS_FILE.tmp" "$TASKGATE_STATUS_FILE"
  sleep 1
  i=$((i + 1))
done
printf '{"dataset": %s, "rows": %s, "seconds": %s}' "$(cat "$TASKGATE_ARGS_FILE" | sed -n 's/.*"dataset": *\("[^"]*"\).*/\1/p')" 42 "$seconds" > "$TASKGATE_RESULT_FILE.tmp"
mv "$TASKGATE_RESULT_FILE.tmp" "$TASKGATE_RESULT_FILE"
echo "analysed $TASKGATE_ARG_DATASET"
