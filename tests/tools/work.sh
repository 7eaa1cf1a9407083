#!/bin/sh
# A long-running test pipeline: works for a number of steps, writing its progress
# after each, then writes a JSON result naming its label. The tool schemas
# restrict the label to [A-Za-z0-9_-], so it can be written into JSON as is.
#
#   work.sh          TASKGATE_ARG_SECONDS steps of 1 s (default 1); result
#                    {"label", "seconds", "rows": 42}
#   work.sh steps    TASKGATE_ARG_STEPS steps of 0.2 s (default 3); result
#                    {"label", "steps"}
set -eu
label=${TASKGATE_ARG_LABEL:-none}
case "${1:-seconds}" in
  seconds) unit=seconds; n=${TASKGATE_ARG_SECONDS:-1}; pause=1 ;;
  steps) unit=steps; n=${TASKGATE_ARG_STEPS:-3}; pause=0.2 ;;
  *) echo "work.sh: unknown unit $1 (seconds or steps)" >&2; exit 2 ;;
esac
i=0
while [ "$i" -lt "$n" ]; do
  printf '{"message": "step %s of %s", "progress": %s, "total": %s}' "$i" "$n" "$i" "$n" > "$TASKGATE_STATUS_FILE.tmp"
  mv "$TASKGATE_STATUS_FILE.tmp" "$TASKGATE_STATUS_FILE"
  sleep "$pause"
  i=$((i + 1))
done
if [ "$unit" = seconds ]; then
  printf '{"label": "%s", "seconds": %s, "rows": 42}' "$label" "$n" > "$TASKGATE_RESULT_FILE.tmp"
else
  printf '{"label": "%s", "steps": %s}' "$label" "$n" > "$TASKGATE_RESULT_FILE.tmp"
fi
mv "$TASKGATE_RESULT_FILE.tmp" "$TASKGATE_RESULT_FILE"
echo "worked on $label"
