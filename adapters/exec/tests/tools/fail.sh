#!/bin/sh
# Fails with exit code 3 after complaining on standard error.
echo "starting" 
echo "something broke: $TASKGATE_ARG_WHAT" >&2
exit 3
