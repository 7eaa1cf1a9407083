#!/bin/sh
# slow_compute {seconds, label} (tasks scenarios): sleeps `seconds` seconds,
# reporting progress each second, then returns a result. A cancel ends it with
# SIGTERM, which taskgate reports as cancelled.
set -eu
. "$(dirname "$0")/lib.sh"
seconds=${TASKGATE_ARG_SECONDS:-1}
i=0
while [ "$i" -lt "$seconds" ]; do
  status "computing: $i of $seconds seconds" "$i" "$seconds"
  sleep 1
  i=$((i + 1))
done
printf 'Computed %s in %s seconds.' "${TASKGATE_ARG_LABEL:-slow_compute}" "$seconds"
