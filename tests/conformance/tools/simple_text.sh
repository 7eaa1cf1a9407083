#!/bin/sh
# test_simple_text (tools-call-simple-text): one fixed text block.
printf 'This is a simple text response for testing.'
