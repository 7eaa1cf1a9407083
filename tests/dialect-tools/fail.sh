#!/bin/sh
# Dialect-test pipeline that reports a tool error: exits 3 after a complaint.
echo "checking $TASKGATE_ARG_LABEL"
echo "dataset $TASKGATE_ARG_LABEL not found" >&2
exit 3
