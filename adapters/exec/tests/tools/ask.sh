#!/bin/sh
# Asks for approval through the input folder, waits (at most 60 s) for the
# answer, and returns it as its result.
set -eu
req="$TASKGATE_INPUT_DIR/approve.request.json"
resp="$TASKGATE_INPUT_DIR/approve.response.json"
printf '%s' '{"message": "Deploy?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}' > "$req.tmp"
mv "$req.tmp" "$req"
i=0
while [ ! -e "$resp" ]; do
  i=$((i + 1)); [ "$i" -gt 600 ] && exit 9
  sleep 0.1
done
{ printf '{"answer": '; cat "$resp"; printf '}'; } > "$TASKGATE_RESULT_FILE.tmp"
mv "$TASKGATE_RESULT_FILE.tmp" "$TASKGATE_RESULT_FILE"
