#!/bin/sh
# Prints a greeting on standard output and writes no result file.
printf 'hello %s\n' "$TASKGATE_ARG_NAME"
