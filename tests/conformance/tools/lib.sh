# Helpers shared by the conformance tool scripts (sourced, POSIX sh).
# The exec engine contract: arguments arrive as TASKGATE_ARG_<NAME> and in
# TASKGATE_ARGS_FILE; a JSON object written to TASKGATE_RESULT_FILE becomes
# structuredContent, otherwise standard output is the text result; progress goes
# to TASKGATE_STATUS_FILE; input is asked for with <key>.request.json in
# TASKGATE_INPUT_DIR and answered in <key>.response.json.

# status MESSAGE PROGRESS TOTAL: replaces the status file atomically.
status() {
  printf '{"message": "%s", "progress": %s, "total": %s}' "$1" "$2" "$3" > "$TASKGATE_STATUS_FILE.tmp"
  mv "$TASKGATE_STATUS_FILE.tmp" "$TASKGATE_STATUS_FILE"
}

# ask KEY MESSAGE SCHEMA: writes the input request for KEY (atomically).
ask() {
  printf '{"message": "%s", "requestedSchema": %s}' "$2" "$3" > "$TASKGATE_INPUT_DIR/$1.request.json.tmp"
  mv "$TASKGATE_INPUT_DIR/$1.request.json.tmp" "$TASKGATE_INPUT_DIR/$1.request.json"
}

# answer KEY: waits (at most 120 s) for the answer to KEY and prints it.
answer() {
  i=0
  while [ ! -e "$TASKGATE_INPUT_DIR/$1.response.json" ]; do
    i=$((i + 1))
    if [ "$i" -gt 1200 ]; then
      echo "no answer to $1 within 120 s" >&2
      exit 9
    fi
    sleep 0.1
  done
  cat "$TASKGATE_INPUT_DIR/$1.response.json"
}

# field JSON NAME: the string value of "NAME" in a flat JSON text (enough for
# the answers these fixtures get).
field() {
  printf '%s' "$1" | sed -n "s/.*\"$2\" *: *\"\([^\"]*\)\".*/\1/p"
}

# action JSON: the action of an input response.
action() {
  field "$1" action
}
