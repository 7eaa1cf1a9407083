#!/bin/sh
# failing_job (tasks scenarios): runs ~1 s, then fails: a tool execution error
# (the task completes with result.isError: true).
sleep 1
echo "failing_job always fails" >&2
exit 2
