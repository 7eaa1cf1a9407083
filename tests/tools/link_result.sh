#!/bin/sh
# A hostile tool: leaves as its result a symbolic link to the file named by its
# argument `target`, hoping taskgate reads it with the rights it has.
set -eu
ln -s "$TASKGATE_ARG_TARGET" "$TASKGATE_RESULT_FILE"
