#!/bin/sh
# A pipeline that fails: complains on standard error and exits with code 3.
echo "checking $TASKGATE_ARG_LABEL"
echo "dataset $TASKGATE_ARG_LABEL not found" >&2
exit 3
