//! taskgate: expose existing pipelines to MCP clients as long-running tools.
