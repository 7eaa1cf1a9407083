#!/bin/sh
# protocol_error_job (tasks-lifecycle): a run that ends without an outcome.
# It kills its own supervisor, then exits: no exit status is ever recorded, so
# the exec engine reports the run as lost, which taskgate surfaces as a
# protocol-level failure (status "failed" with a JSON-RPC error, no result).
# This is the only way an exec tool can end in a protocol error.
sleep 0.5
kill -KILL "$PPID"
exit 0
