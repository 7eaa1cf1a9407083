#!/bin/sh
# test_tool_with_progress (tools-call-with-progress): reports 0/100, 50/100 and
# 100/100 through the status file, which taskgate turns into
# notifications/progress for a caller that sent a progressToken. The pauses are
# longer than the suite's ~50 ms so that each step is seen.
set -eu
. "$(dirname "$0")/lib.sh"
status "starting" 0 100
sleep 0.4
status "halfway" 50 100
sleep 0.4
status "done" 100 100
sleep 0.4
printf 'Progress test completed: 0/100, 50/100, 100/100.'
