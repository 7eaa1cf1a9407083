//! `taskgate_logs`, the companion tool every client generation gets for
//! reading what a run printed while it runs: a tool (not a resource) because
//! every client can call tools, including the plain ones that know nothing
//! of tasks or resources. Shared by the dialects; each one finds the run its
//! own way (a task id or handle here, an operation token in SEP-1391) and
//! hands it to [`page`].

use serde_json::{json, Value};
use taskgate_engine::MAX_LOG_LINES;

use super::wire::Version;
use crate::core::gateway::logs::LogsRead;
use crate::core::{Caller, Gateway, Tool};
use crate::rpc::RpcError;

/// The tool's name.
pub const TOOL: &str = "taskgate_logs";

/// The longest `cursor` argument accepted (a sealed cursor is far shorter).
const MAX_CURSOR_ARG: usize = 2048;

/// The arguments of one `taskgate_logs` call.
#[derive(Debug, Clone)]
pub struct LogsArgs {
    /// The task id, handle or (SEP-1391) operation token.
    pub task: String,
    /// The sealed cursor of an earlier page, if any.
    pub cursor: Option<String>,
    /// How many lines, at most.
    pub limit: Option<u64>,
}

/// True when `caller` may call the tool: some long-running tool it may use
/// keeps logs taskgate can read. Dialects list it only to clients that can
/// hold a task (tasks, operations, `handles`).
#[must_use]
pub fn listed(gw: &Gateway, caller: &Caller) -> bool {
    gw.tools()
        .iter()
        .any(|t| t.is_long_running() && t.capabilities.logs && gw.visible_to(caller, t))
}

/// The `tools/list` entry, for clients of `version`.
#[must_use]
pub fn entry(version: Version) -> Value {
    let mut entry = json!({
        "name": TOOL,
        "description": "Read what a long-running call has printed so far (its log), a page at a time. \
            Pass the task id or handle the call returned; pass back the cursor of the previous page \
            to get only the lines printed since.",
        "inputSchema": {
            "type": "object",
            "required": ["taskId"],
            "properties": {
                "taskId": { "type": "string", "description": "The task id, handle or operation token of the call" },
                "cursor": { "type": "string", "description": "The cursor the previous page returned; none reads from the start" },
                "limit": { "type": "integer", "minimum": 1, "maximum": MAX_LOG_LINES,
                    "description": "The most lines to return" },
            },
        },
    });
    if version.has_structured() {
        entry["outputSchema"] = json!({
            "type": "object",
            "required": ["lines", "cursor", "complete"],
            "properties": {
                "lines": { "type": "array", "items": {
                    "type": "object", "required": ["source", "text"],
                    "properties": { "source": { "type": "string" }, "text": { "type": "string" } } } },
                "cursor": { "type": "string" },
                "complete": { "type": "boolean" },
            },
        });
    }
    if version.has_annotations() {
        entry["annotations"] = json!({ "readOnlyHint": true, "openWorldHint": true });
    }
    entry
}

/// Reads the arguments of a call.
///
/// # Errors
///
/// -32602 naming the argument that is missing or of the wrong type.
pub fn args(params: &Value) -> Result<LogsArgs, RpcError> {
    let empty = json!({});
    let a = params.get("arguments").unwrap_or(&empty);
    let bad = |m: &str| RpcError::InvalidParams(format!("Invalid arguments for tool {TOOL}: {m}"));
    let task = a
        .get("taskId")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("taskId is required and must be a string"))?;
    let cursor = match a.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) if c.len() <= MAX_CURSOR_ARG => Some(c.clone()),
        Some(_) => return Err(bad("cursor must be a cursor an earlier page returned")),
    };
    let limit = match a.get("limit") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n @ 1..) if n <= MAX_LOG_LINES as u64 => Some(n),
            _ => {
                return Err(bad(&format!(
                    "limit must be an integer from 1 to {MAX_LOG_LINES}"
                )))
            }
        },
    };
    Ok(LogsArgs {
        task: task.to_owned(),
        cursor,
        limit,
    })
}

/// Reads one page of the logs of run `native` of `tool` and shapes the
/// result for clients of `version`: the lines as text (with the cursor, for
/// clients without structured content) and, where the version has it,
/// `structuredContent` `{lines, cursor, complete}`.
///
/// # Errors
///
/// -32602 for a cursor that is not this caller's for this run, or a tool
/// without logs; engine errors.
pub async fn page(
    gw: &Gateway,
    caller: &Caller,
    version: Version,
    tool: &Tool,
    native: &str,
    args: &LogsArgs,
) -> Result<Value, RpcError> {
    let read = gw
        .logs(caller, tool, native, args.cursor.as_deref(), args.limit)
        .await?;
    Ok(shape(&read, version))
}

fn shape(read: &LogsRead, version: Version) -> Value {
    let mut text: String = read
        .lines
        .iter()
        .map(|l| format!("[{}] {}\n", l.source, l.text))
        .collect();
    if read.complete {
        text.push_str("(the run has ended: this is the end of its log)\n");
    } else if read.lines.is_empty() {
        text.push_str("(nothing new yet)\n");
    }
    text.push_str(&format!("cursor: {}", read.cursor));
    let mut result = json!({ "content": [{ "type": "text", "text": text }], "isError": false });
    if version.has_structured() {
        let lines: Vec<Value> = read
            .lines
            .iter()
            .map(|l| json!({ "source": l.source, "text": l.text }))
            .collect();
        result["structuredContent"] =
            json!({ "lines": lines, "cursor": read.cursor, "complete": read.complete });
    }
    result
}
