#!/bin/sh
# A pipeline with a human step: asks "<VERB> <label>?" (VERB is the first
# argument, default Deploy) through TASKGATE_INPUT_DIR, waits (at most 120 s)
# for the answer file, and returns the answer in its result.
set -eu
verb=${1:-Deploy}
req="$TASKGATE_INPUT_DIR/approve.request.json"
resp="$TASKGATE_INPUT_DIR/approve.response.json"
printf '{"message": "%s %s?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}' "$verb" "$TASKGATE_ARG_LABEL" > "$req.tmp"
mv "$req.tmp" "$req"
i=0
while [ ! -e "$resp" ]; do
  i=$((i + 1)); [ "$i" -gt 1200 ] && exit 9
  sleep 0.1
done
{ printf '{"label": "%s", "answer": ' "$TASKGATE_ARG_LABEL"; cat "$resp"; printf '}'; } > "$TASKGATE_RESULT_FILE.tmp"
mv "$TASKGATE_RESULT_FILE.tmp" "$TASKGATE_RESULT_FILE"
echo "approved $TASKGATE_ARG_LABEL"
