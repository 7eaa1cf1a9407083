#!/bin/sh
# greet (tasks scenarios): a sync-only tool returning "Hello, {name}!".
printf 'Hello, %s!' "${TASKGATE_ARG_NAME:-World}"
