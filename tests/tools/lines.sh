#!/bin/sh
# A test pipeline that logs while it runs: prints "line 1" … "line N" on
# standard output, one a second (N = TASKGATE_ARG_LINES, default 3), then
# "note on stderr" on standard error; when TASKGATE_ARG_GO names a file, waits
# until that file exists; then prints "done" and exits 0.
set -eu
n=${TASKGATE_ARG_LINES:-3}
i=1
while [ "$i" -le "$n" ]; do
  echo "line $i"
  [ "$i" -lt "$n" ] && sleep 1
  i=$((i + 1))
done
echo "note on stderr" >&2
if [ -n "${TASKGATE_ARG_GO:-}" ]; then
  while [ ! -e "$TASKGATE_ARG_GO" ]; do sleep 0.1; done
fi
echo "done"
