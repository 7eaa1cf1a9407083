#!/bin/sh
# test_custom_header (http-custom-header-server-validation): its `region`
# argument is mirrored in the Mcp-Param-Region header (x-mcp-header), which
# taskgate checks against the body before running anything.
printf 'Region: %s' "${TASKGATE_ARG_REGION:-}"
