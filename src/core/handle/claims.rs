//! What a task handle holds, and the reader of its plaintext that needs no
//! JSON parser for what a seal writes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{de::DeserializeOwned, Deserialize, Serialize};

use super::trace_ref::{TraceRef, TEXT_LEN};

/// What a task handle holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskClaims {
    /// The dialect that created the task; a task is only found by its own dialect.
    #[serde(rename = "d")]
    pub dialect: Dialect,
    /// Tool name.
    #[serde(rename = "t")]
    pub tool: String,
    /// The engine's native reference.
    #[serde(rename = "r")]
    pub native: String,
    /// Creation time, milliseconds since the Unix epoch.
    #[serde(rename = "c")]
    pub created_ms: u64,
    /// Time to live from creation, milliseconds; `None` is unlimited.
    #[serde(rename = "l")]
    pub ttl_ms: Option<u64>,
    /// The span that started the run, when tracing was on and that span was
    /// sampled; every later request on the task links to it. Absent (not
    /// written at all) otherwise, and in every handle sealed before it
    /// existed, which open unchanged.
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceRef>,
}

impl TaskClaims {
    /// Creation time.
    #[must_use]
    pub fn created_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.created_ms)
    }

    /// The claims from a handle's plaintext. What [`Keyring::seal`] writes
    /// (`serde_json`'s text of this struct: its members in order, no spaces,
    /// strings without escapes) is read member by member without a parser;
    /// any other text (escapes, another order, a member more or less) goes
    /// through `serde_json`, so both read every plaintext alike. The plaintext
    /// is authenticated: only a taskgate that holds the key wrote it.
    #[must_use]
    pub fn from_sealed(plaintext: &[u8]) -> Option<Self> {
        Self::from_canonical(plaintext).or_else(|| from_json(plaintext))
    }

    /// The claims from exactly the text `serde_json` writes for them; `None`
    /// for anything else (which may still be valid JSON).
    pub(super) fn from_canonical(text: &[u8]) -> Option<Self> {
        let rest = text.strip_prefix(br#"{"d":""#)?;
        let (&d, rest) = rest.split_first()?;
        let dialect = match d {
            b'm' => Dialect::TasksExtension,
            b't' => Dialect::TasksSep1686,
            b'h' => Dialect::PlainHandle,
            _ => return None,
        };
        let rest = rest.strip_prefix(br#"","t":""#)?;
        let (tool, rest) = plain_string(rest)?;
        let rest = rest.strip_prefix(br#","r":""#)?;
        let (native, rest) = plain_string(rest)?;
        let rest = rest.strip_prefix(br#","c":"#)?;
        let (created_ms, rest) = plain_u64(rest)?;
        let rest = rest.strip_prefix(br#","l":"#)?;
        let (ttl_ms, rest) = match rest.strip_prefix(b"null") {
            Some(rest) => (None, rest),
            None => {
                let (ttl, rest) = plain_u64(rest)?;
                (Some(ttl), rest)
            }
        };
        let trace = match rest.strip_prefix(br#","s":""#) {
            None if rest == b"}" => None,
            None => return None,
            Some(rest) => {
                let (text, rest) = plain_string(rest)?;
                if rest != b"}" || text.len() != TEXT_LEN {
                    return None;
                }
                Some(TraceRef::parse(text)?)
            }
        };
        Some(Self {
            dialect,
            tool: tool.to_owned(),
            native: native.to_owned(),
            created_ms,
            ttl_ms,
            trace,
        })
    }

    /// True when the TTL has passed at `now`.
    #[must_use]
    pub fn expired_at(&self, now: SystemTime) -> bool {
        match self.ttl_ms {
            Some(ttl) => unix_ms(now) >= self.created_ms.saturating_add(ttl),
            None => false,
        }
    }
}

/// Which dialect issued a task handle: the one place the core names the
/// protocol generations, as a tag sealed into the handle (so a handle opens only
/// in the dialect that issued it) and a label for audit events. The core knows
/// nothing else of them: their wire shapes live in `crate::dialect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Dialect {
    /// MCP 2026-07-28 with the tasks extension.
    #[serde(rename = "m")]
    TasksExtension,
    /// MCP 2025-11-25 tasks (SEP-1686).
    #[serde(rename = "t")]
    TasksSep1686,
    /// A handle returned to a plain (task-less) client by the `handles` policy.
    #[serde(rename = "h")]
    PlainHandle,
}

impl Dialect {
    /// The dialect's name in audit events.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::TasksExtension => "tasks-2026-07-28",
            Self::TasksSep1686 => "tasks-2025-11-25",
            Self::PlainHandle => "plain",
        }
    }
}

/// Claims from their JSON, its UTF-8 checked once as a whole rather than
/// string by string.
pub(super) fn from_json<T: DeserializeOwned>(plaintext: &[u8]) -> Option<T> {
    serde_json::from_str(std::str::from_utf8(plaintext).ok()?).ok()
}

/// The text of a JSON string whose opening quote has been read, and what
/// follows its closing quote; `None` for a string `serde_json` would have
/// written with an escape (a quote, a backslash, a control character), or
/// that is not UTF-8.
fn plain_string(text: &[u8]) -> Option<(&str, &[u8])> {
    let end = text
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
    if text[end] != b'"' {
        return None;
    }
    let s = std::str::from_utf8(&text[..end]).ok()?;
    Some((s, &text[end + 1..]))
}

/// A JSON number as `serde_json` writes a `u64` (digits, no leading zero),
/// and what follows it; `None` for anything else.
fn plain_u64(text: &[u8]) -> Option<(u64, &[u8])> {
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || (digits > 1 && text[0] == b'0') {
        return None;
    }
    let mut n: u64 = 0;
    for &b in &text[..digits] {
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    let rest = &text[digits..];
    // A fraction or an exponent is not a u64 as written by serde_json.
    if matches!(rest.first(), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    Some((n, rest))
}

/// Milliseconds since the Unix epoch.
#[must_use]
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
