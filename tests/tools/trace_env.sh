#!/bin/sh
# Prints the trace context taskgate gave the run (or "none"), one variable a line.
echo "TRACEPARENT=${TRACEPARENT:-none}"
echo "TRACESTATE=${TRACESTATE:-none}"
