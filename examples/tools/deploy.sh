#!/bin/sh
# Example pipeline with a human step: asks for approval before "deploying".
# It writes a request file into TASKGATE_INPUT_DIR and waits for the answer file.
set -eu
req="$TASKGATE_INPUT_DIR/approve.request.json"
resp="$TASKGATE_INPUT_DIR/approve.response.json"
printf '{"message": "Deploy %s to %s?", "requestedSchema": {"type": "object", "properties": {"approve": {"type": "boolean"}, "comment": {"type": "string"}}, "required": ["approve"]}}' \
  "$TASKGATE_ARG_VERSION" "$TASKGATE_ARG_ENVIRONMENT" > "$req.tmp"
mv "$req.tmp" "$req"
while [ ! -f "$resp" ]; do sleep 0.2; done
if grep -q '"action": *"accept"' "$resp" && grep -q '"approve": *true' "$resp"; then
  echo "deployed $TASKGATE_ARG_VERSION to $TASKGATE_ARG_ENVIRONMENT"
else
  echo "deployment declined" >&2
  exit 3
fi
