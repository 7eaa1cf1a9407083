#!/bin/sh
# A long-running test pipeline: works for TASKGATE_ARG_SECONDS seconds (default
# 1), reporting progress each second, then writes a JSON result naming its
# label. The tool's schema restricts the label to [A-Za-z0-9_-], so it can be
# written into JSON as is.
set -eu
seconds=${TASKGATE_ARG_SECONDS:-1}
label=${TASKGATE_ARG_LABEL:-none}
i=0
while [ "$i" -lt "$seconds" ]; do
  printf '{"message": "step %s of %s", "progress": %s, "total": %s}' "$i" "$seconds" "$i" "$seconds" > "$TASKGATE_STATUS_FILE.tmp"
  mv "$TASKGATE_STATUS_FILE.tmp" "$TASKGATE_STATUS_FILE"
  sleep 1
  i=$((i + 1))
done
printf '{"label": "%s", "seconds": %s, "rows": 42}' "$label" "$seconds" > "$TASKGATE_RESULT_FILE.tmp"
mv "$TASKGATE_RESULT_FILE.tmp" "$TASKGATE_RESULT_FILE"
echo "worked on $label"
