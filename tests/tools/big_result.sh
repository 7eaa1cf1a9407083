#!/bin/sh
# Leaves a result file of the size given (default 1 GiB) without writing it:
# a sparse file, as large to a reader as a real one.
set -eu
truncate -s "${1:-1G}" "$TASKGATE_RESULT_FILE"
