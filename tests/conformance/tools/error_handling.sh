#!/bin/sh
# test_error_handling (tools-call-error): the process fails, which taskgate
# reports as a tool error (isError: true) carrying the end of standard error.
echo "This tool intentionally returns an error for testing" >&2
exit 1
