#!/bin/sh
# Dialect-test pipeline: works for TASKGATE_ARG_STEPS steps of 0.2 s (default
# 3), writing its progress after each step, then writes a JSON result naming its
# label. The tool schemas restrict the label to [A-Za-z0-9_-].
set -eu
steps=${TASKGATE_ARG_STEPS:-3}
label=${TASKGATE_ARG_LABEL:-none}
i=0
while [ "$i" -lt "$steps" ]; do
  printf '{"message": "step %s of %s", "progress": %s, "total": %s}' "$i" "$steps" "$i" "$steps" > "$TASKGATE_STATUS_FILE.tmp"
  mv "$TASKGATE_STATUS_FILE.tmp" "$TASKGATE_STATUS_FILE"
  sleep 0.2
  i=$((i + 1))
done
printf '{"label": "%s", "steps": %s}' "$label" "$steps" > "$TASKGATE_RESULT_FILE.tmp"
mv "$TASKGATE_RESULT_FILE.tmp" "$TASKGATE_RESULT_FILE"
echo "worked on $label"
