#!/bin/sh
# json_schema_2020_12_tool (json-schema-2020-12): the suite only lists it; a
# call echoes the arguments it got.
cat "$TASKGATE_ARGS_FILE"
