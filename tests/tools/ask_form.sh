#!/bin/sh
# A pipeline asking a form: a choice (env), a bounded integer (count) and an
# optional short note, through TASKGATE_INPUT_DIR; waits (at most 120 s) for
# the answer and returns it as its result.
set -eu
req="$TASKGATE_INPUT_DIR/form.request.json"
resp="$TASKGATE_INPUT_DIR/form.response.json"
printf '%s' '{"message": "Release details?", "requestedSchema": {"type": "object", "required": ["env", "count"], "properties": {"env": {"type": "string", "enum": ["staging", "production"]}, "count": {"type": "integer", "minimum": 1, "maximum": 5}, "note": {"type": "string", "maxLength": 10}}}}' > "$req.tmp"
mv "$req.tmp" "$req"
i=0
while [ ! -e "$resp" ]; do
  i=$((i + 1)); [ "$i" -gt 1200 ] && exit 9
  sleep 0.1
done
{ printf '{"answer": '; cat "$resp"; printf '}'; } > "$TASKGATE_RESULT_FILE.tmp"
mv "$TASKGATE_RESULT_FILE.tmp" "$TASKGATE_RESULT_FILE"
