#!/bin/sh
# Reports progress, then copies its arguments file to the result file.
set -eu
printf '{"message": "copying", "progress": 1, "total": 2}' > "$TASKGATE_STATUS_FILE.tmp"
mv "$TASKGATE_STATUS_FILE.tmp" "$TASKGATE_STATUS_FILE"
cp "$TASKGATE_ARGS_FILE" "$TASKGATE_RESULT_FILE.tmp"
mv "$TASKGATE_RESULT_FILE.tmp" "$TASKGATE_RESULT_FILE"
