#!/bin/sh
# Prints 1 MiB of 'a' and then END on standard output.
head -c 1048576 /dev/zero | tr '\0' a
printf END
