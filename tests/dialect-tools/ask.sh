#!/bin/sh
# Dialect-test pipeline with a human step: asks for approval through
# TASKGATE_INPUT_DIR, waits (at most 120 s) for the answer file, and returns the
# answer in its result.
set -eu
req="$TASKGATE_INPUT_DIR/approve.request.json"
resp="$TASKGATE_INPUT_DIR/approve.response.json"
printf '{"message": "Approve %s?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}' "$TASKGATE_ARG_LABEL" > "$req.tmp"
mv "$req.tmp" "$req"
i=0
while [ ! -e "$resp" ]; do
  i=$((i + 1)); [ "$i" -gt 1200 ] && exit 9
  sleep 0.1
done
{ printf '{"label": "%s", "answer": ' "$TASKGATE_ARG_LABEL"; cat "$resp"; printf '}'; } > "$TASKGATE_RESULT_FILE.tmp"
mv "$TASKGATE_RESULT_FILE.tmp" "$TASKGATE_RESULT_FILE"
echo "approved $TASKGATE_ARG_LABEL"
