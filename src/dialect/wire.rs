//! Protocol versions and the wire shapes every dialect shares (tools and tool
//! results, the `_meta` keys, capability names), with the fields each version
//! knows.

use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use serde_json::{json, Map, Value};
use taskgate_engine::{Content, ToolOutput};

use crate::core::Tool;

/// Where the server sends messages to the client before a response (progress
/// notifications, input requests, a listen stream's notifications): the SSE
/// stream of the POST, or stdout. Unbounded: what a request sends is bounded
/// by the request (a listen stream sends a run's changes, deduplicated).
///
/// An idle channel holds ~150 bytes and a queued message one node of its own
/// (a queue that allocates slots in blocks would hold a 1 KiB block for each
/// of thousands of idle listen streams).
#[derive(Debug, Clone)]
pub struct Outbound(futures::channel::mpsc::UnboundedSender<Outgoing>);

/// The receiving end of an [`Outbound`]: the transport that writes its
/// messages.
#[derive(Debug)]
pub struct Queued(futures::channel::mpsc::UnboundedReceiver<Outgoing>);

/// The receiver is gone (the client closed its stream): a message sent now
/// reaches nobody.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone;

/// A new channel for the messages of one request (or one stdio connection).
#[must_use]
pub fn outbound() -> (Outbound, Queued) {
    let (tx, rx) = futures::channel::mpsc::unbounded();
    (Outbound(tx), Queued(rx))
}

impl Outbound {
    /// Queues `message` for the client.
    ///
    /// # Errors
    ///
    /// [`Gone`] when the receiving end was dropped.
    pub fn send(&self, message: Outgoing) -> Result<(), Gone> {
        self.0.unbounded_send(message).map_err(|_| Gone)
    }

    /// The receiving end was dropped (the client closed its stream).
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
}

impl Queued {
    /// The next message; `None` once every [`Outbound`] is dropped and the
    /// queue is empty.
    pub async fn recv(&mut self) -> Option<Outgoing> {
        futures::StreamExt::next(&mut self.0).await
    }

    /// The next message if one is queued now.
    pub fn try_recv(&mut self) -> Option<Outgoing> {
        self.0.try_recv().ok()
    }

    /// Polls for the next message (`None`: every sender is gone).
    pub fn poll_recv(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Outgoing>> {
        futures::StreamExt::poll_next_unpin(&mut self.0, cx)
    }
}

/// One message on an [`Outbound`] channel: a value the transport serializes,
/// or JSON text already written.
#[derive(Debug, Clone, PartialEq)]
pub enum Outgoing {
    /// A message as a value.
    Value(Value),
    /// One JSON value written in pieces, concatenated by the transport. A
    /// piece may be shared with other streams' messages (the part of a
    /// listen notification that depends on the run alone, written once per
    /// change): cloning a [`Bytes`] copies no text.
    Pieces(Vec<Bytes>),
}

impl Outgoing {
    /// The message as a value (stdio writes it; tests read it).
    #[must_use]
    pub fn into_value(self) -> Value {
        match self {
            Self::Value(value) => value,
            Self::Pieces(pieces) => serde_json::from_slice(&pieces.concat()).unwrap_or(Value::Null),
        }
    }

    /// The JSON text.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Self::Value(value) => {
                let mut bytes = Vec::with_capacity(256);
                // Serializing a `Value` into a `Vec` cannot fail.
                let _ = serde_json::to_writer(&mut bytes, value);
                bytes
            }
            Self::Pieces(pieces) => pieces.concat(),
        }
    }
}

impl From<Value> for Outgoing {
    fn from(value: Value) -> Self {
        Self::Value(value)
    }
}

/// The 2026-07-28 `_meta` keys and the tasks extension id: defined where a
/// request's params are read, which checks them on every request.
pub use crate::rpc::{META_CAPABILITIES, META_VERSION, TASKS_EXTENSION};
/// The experimental capability a legacy client declares at `initialize` to opt
/// in to SEP-1391 operations, and that taskgate echoes back.
pub const SEP1391_CAPABILITY: &str = "taskgate/sep-1391";

/// One request, as every dialect's `serve` takes it.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    /// The core.
    pub gw: &'a crate::core::Gateway,
    /// Who asks.
    pub caller: &'a crate::core::Caller,
    /// The protocol version the request is served in.
    pub version: Version,
    /// The HTTP request's headers; `None` on stdio and for session dialects.
    pub headers: Option<&'a axum::http::HeaderMap>,
    /// Where messages go before the response (progress, input requests),
    /// when the transport can stream.
    pub out: Option<&'a Outbound>,
    /// The JSON-RPC method.
    pub method: &'a str,
    /// Its params.
    pub params: &'a crate::rpc::Params,
}

/// A protocol version taskgate serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// 2024-11-05.
    V2024_11_05,
    /// 2025-03-26.
    V2025_03_26,
    /// 2025-06-18.
    V2025_06_18,
    /// 2025-11-25 (experimental tasks).
    V2025_11_25,
    /// 2026-07-28 (stateless; the tasks extension).
    V2026_07_28,
}

impl Version {
    /// Every version, newest first.
    pub const ALL: [Version; 5] = [
        Self::V2026_07_28,
        Self::V2025_11_25,
        Self::V2025_06_18,
        Self::V2025_03_26,
        Self::V2024_11_05,
    ];

    /// The legacy (`initialize`) versions, newest first.
    pub const LEGACY: [Version; 4] = [
        Self::V2025_11_25,
        Self::V2025_06_18,
        Self::V2025_03_26,
        Self::V2024_11_05,
    ];

    /// The version string.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2024_11_05 => "2024-11-05",
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    /// Parses a version string.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// `title`, `outputSchema`, `structuredContent`, `resource_link`, elicitation.
    #[must_use]
    pub fn has_structured(self) -> bool {
        self >= Self::V2025_06_18
    }

    /// Tool `annotations`.
    #[must_use]
    pub fn has_annotations(self) -> bool {
        self >= Self::V2025_03_26
    }
}

/// The list entry of `tool` in `version`; `extra` adds dialect fields
/// (`execution`, `invocationMode`).
#[must_use]
pub fn tool_entry(tool: &Tool, version: Version, extra: Option<(&str, Value)>) -> Value {
    let cfg = &tool.config;
    let mut entry = Map::new();
    entry.insert("name".into(), json!(cfg.name));
    if version.has_structured() {
        if let Some(title) = &cfg.title {
            entry.insert("title".into(), json!(title));
        }
    }
    if let Some(d) = &cfg.description {
        entry.insert("description".into(), json!(d));
    }
    entry.insert("inputSchema".into(), cfg.input_schema.clone());
    if version.has_structured() {
        if let Some(out) = &cfg.output_schema {
            entry.insert("outputSchema".into(), out.clone());
        }
    }
    if version.has_annotations() {
        let mut ann = json!({ "openWorldHint": true });
        if let Some(title) = &cfg.title {
            ann["title"] = json!(title);
        }
        entry.insert("annotations".into(), ann);
    }
    if let Some((k, v)) = extra {
        entry.insert(k.into(), v);
    }
    Value::Object(entry)
}

/// A `CallToolResult` for `version` (without `resultType`).
#[must_use]
pub fn call_tool_result(output: &ToolOutput, version: Version) -> Value {
    let content: Vec<Value> = output
        .content
        .iter()
        .map(|c| match c {
            Content::Text(text) => json!({ "type": "text", "text": text }),
            Content::Link {
                uri,
                name,
                mime_type,
            } if version.has_structured() => {
                let mut link = json!({ "type": "resource_link", "uri": uri, "name": name });
                if let Some(m) = mime_type {
                    link["mimeType"] = json!(m);
                }
                link
            }
            Content::Link { uri, name, .. } => {
                json!({ "type": "text", "text": format!("{name}: {uri}") })
            }
        })
        .collect();
    let mut result = json!({ "content": content, "isError": output.is_error });
    if version.has_structured() {
        if let Some(s) = &output.structured {
            result["structuredContent"] = s.clone();
        }
    }
    result
}

/// The times every task view shows: when the task was created, when its run
/// last changed (never before the creation) as RFC 3339, and the poll interval
/// in milliseconds (the engine's hint, at least the tool's `poll_interval`).
#[must_use]
pub fn task_times(
    claims: &crate::core::handle::TaskClaims,
    tool: &Tool,
    snapshot: &taskgate_engine::Snapshot,
) -> (String, String, u64) {
    let created = claims.created_at();
    let updated = snapshot.updated_at.unwrap_or(created).max(created);
    let poll = snapshot
        .poll_hint
        .unwrap_or_default()
        .max(tool.config.poll_interval);
    (
        timestamp(created),
        timestamp(updated),
        u64::try_from(poll.as_millis()).unwrap_or(u64::MAX),
    )
}

/// RFC 3339 with milliseconds, UTC (`2026-12-04T22:15:00.123Z`).
///
/// Written digit by digit: two go into every `tasks/get` reply, and a
/// formatter (`Display` through `to_string`) cost more than the rest of the
/// task's members together. An instant before 1970 reads as 1970-01-01 and one
/// after 9999 as the last millisecond of 9999 (RFC 3339 has four digits for the
/// year); neither comes from an engine.
#[must_use]
pub fn timestamp(t: SystemTime) -> String {
    const DAY: u64 = 86_400;
    const LAST: &str = "9999-12-31T23:59:59.999Z";
    let since = t
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    let secs = since.as_secs();
    let (year, month, day) = civil_date(secs / DAY);
    if year > 9999 {
        return LAST.to_owned();
    }
    let of_day = secs % DAY;
    let mut text = *b"0000-00-00T00:00:00.000Z";
    for (at, width, value) in [
        (0, 4, u64::from(year)),
        (5, 2, u64::from(month)),
        (8, 2, u64::from(day)),
        (11, 2, of_day / 3600),
        (14, 2, of_day / 60 % 60),
        (17, 2, of_day % 60),
        (20, 3, u64::from(since.subsec_millis())),
    ] {
        let mut rest = value;
        for digit in text[at..at + width].iter_mut().rev() {
            *digit = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
    }
    // Digits and separators only: always UTF-8.
    String::from_utf8(text.to_vec()).unwrap_or_default()
}

/// JSON text written member by member, for the replies written straight to
/// bytes. Each piece writes what `serde_json` would: strings escaped the same
/// way, so a view written here and the same view serialized by `serde_json`
/// are the same text (tested where the views are).
pub mod json {
    use serde_json::Value;

    /// Writes `s` as a JSON string. Text without quotes, backslashes or control
    /// characters (a task id, a timestamp, most messages) is copied as it is;
    /// anything else goes through `serde_json`'s escaping.
    pub fn string(out: &mut Vec<u8>, s: &str) {
        if !needs_escape(s.as_bytes()) {
            out.reserve(s.len() + 2);
            out.push(b'"');
            out.extend_from_slice(s.as_bytes());
            out.push(b'"');
        } else {
            // Writing a `str` into a `Vec` cannot fail.
            let _ = serde_json::to_writer(&mut *out, s);
        }
    }

    /// Whether `bytes` hold a quote, a backslash or a control character (what
    /// JSON escapes), looked for eight bytes at a time: a byte is below 0x20,
    /// or equal to one of the two, exactly when the usual zero-byte test finds
    /// one in the word (minus 0x20 each; XOR each of the two).
    fn needs_escape(bytes: &[u8]) -> bool {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let below = |word: u64, n: u64| word.wrapping_sub(ONES * n) & !word & HIGH;
        let zero = |word: u64| word.wrapping_sub(ONES) & !word & HIGH;
        let mut words = bytes.chunks_exact(8);
        for chunk in &mut words {
            let mut eight = [0u8; 8];
            eight.copy_from_slice(chunk);
            let word = u64::from_le_bytes(eight);
            if below(word, 0x20)
                | zero(word ^ (ONES * u64::from(b'"')))
                | zero(word ^ (ONES * u64::from(b'\\')))
                != 0
            {
                return true;
            }
        }
        words
            .remainder()
            .iter()
            .any(|&b| b < 0x20 || b == b'"' || b == b'\\')
    }

    /// Writes `,"key":` (or `{"key":` for the first member); `key` is a plain
    /// member name.
    pub fn key(out: &mut Vec<u8>, key: &str, first: bool) {
        out.push(if first { b'{' } else { b',' });
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":");
    }

    /// Writes a number, or `null`.
    pub fn number(out: &mut Vec<u8>, n: Option<u64>) {
        match n {
            Some(n) => {
                let _ = serde_json::to_writer(&mut *out, &n);
            }
            None => out.extend_from_slice(b"null"),
        }
    }

    /// Writes a value.
    pub fn value(out: &mut Vec<u8>, v: &Value) {
        let _ = serde_json::to_writer(&mut *out, v);
    }
}

/// The proleptic Gregorian date `days` after 1970-01-01: the days are counted
/// in 400-year eras (146,097 days each) from 0000-03-01, so that the leap day
/// falls at the end of each counted year.
fn civil_date(days: u64) -> (u32, u32, u32) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (
        u32::try_from(year).unwrap_or(u32::MAX),
        month as u32,
        day as u32,
    )
}

/// The server's name and version.
#[must_use]
pub fn server_info() -> Value {
    json!({ "name": "taskgate", "version": env!("CARGO_PKG_VERSION") })
}

/// Server-level instructions shown to models.
pub const INSTRUCTIONS: &str = "taskgate runs existing pipelines as long-running tools. \
A call may return a task handle: keep it, poll its status, then fetch the result. \
Only handles returned by a call are valid; never make one up.";

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn general(t: SystemTime) -> String {
        humantime::format_rfc3339_millis(t).to_string()
    }

    #[test]
    fn timestamps_read_as_the_general_formatter_writes_them() {
        for (secs, millis, text) in [
            (0, 0, "1970-01-01T00:00:00.000Z"),
            (951_782_400, 7, "2000-02-29T00:00:00.007Z"),
            (4_107_542_399, 999, "2100-02-28T23:59:59.999Z"),
            (4_107_542_400, 0, "2100-03-01T00:00:00.000Z"),
            (1_796_422_500, 123, "2026-12-04T22:15:00.123Z"),
            (253_402_300_799, 999, "9999-12-31T23:59:59.999Z"),
        ] {
            let t = UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis);
            assert_eq!(timestamp(t), text);
            assert_eq!(general(t), text);
        }
        // Every 7 hours, 13 minutes and 17.389 seconds from 1970 to past 2400:
        // each hour, minute, month, leap year and century boundary comes by.
        let step = Duration::from_millis(26_997_389);
        let mut t = UNIX_EPOCH;
        while t < UNIX_EPOCH + Duration::from_secs(14_000_000_000) {
            assert_eq!(timestamp(t), general(t), "{t:?}");
            t += step;
        }
        // Outside 1970..=9999 (where the general formatter fails): the ends.
        let late = UNIX_EPOCH + Duration::from_secs(253_402_300_800);
        assert_eq!(timestamp(late), "9999-12-31T23:59:59.999Z");
        let early = UNIX_EPOCH - Duration::from_secs(86_400);
        assert_eq!(timestamp(early), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        // Every byte value that can start or sit in a UTF-8 string, at every
        // offset of a word and in the tail, among plain text on both sides.
        let mut samples: Vec<String> = vec![String::new(), "plain".into(), "é✓🙂".into()];
        for c in (0u32..0x80).chain([0xe9, 0x2713, 0x1f642]) {
            let c = char::from_u32(c).unwrap();
            for at in 0..17 {
                let mut text: String = "abcdefghijklmnopqrstuvwx".chars().take(at).collect();
                text.push(c);
                text.push_str("yz0123456789");
                samples.push(text);
            }
        }
        for text in &samples {
            let mut ours = Vec::new();
            json::string(&mut ours, text);
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                serde_json::to_string(text).unwrap(),
                "{text:?}"
            );
        }
    }
}
