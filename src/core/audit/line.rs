//! One audit event as one line of bytes, in the layout the log uses for every
//! other event, so one reader parses both:
//!
//! - text: `TIME  INFO taskgate::audit: audit name="value" …`, each value
//!   quoted and escaped as Rust writes a string's `Debug` form;
//! - JSON: `{"timestamp":TIME,"level":"INFO","fields":{"message":"audit",
//!   name:value,…},"target":"taskgate::audit"}`.
//!
//! TIME is RFC 3339 in UTC with microseconds. A line is written into a buffer
//! the caller reuses: no allocation for an event whose values need no
//! escaping, which is every event of a well-behaved caller.

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::SystemTime;

use super::{RequestId, TARGET};

/// How a line is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineFormat {
    /// The text log's layout.
    Text,
    /// One JSON object per line.
    Json,
}

/// One value of an event.
#[derive(Debug, Clone, Copy)]
pub(super) enum Value<'a> {
    /// Text from the request or the configuration: escaped as it is written.
    Str(&'a str),
    /// A socket address (digits, dots, colons, brackets: never escaped).
    Addr(SocketAddr),
    /// A request id (letters, digits, a dash: never escaped).
    Request(RequestId),
}

/// Appends the line of an event with `fields` (name, value; in order) at `at`,
/// ending in a newline, to `out`.
pub(super) fn write(
    out: &mut Vec<u8>,
    format: LineFormat,
    at: SystemTime,
    fields: &[(&str, Value<'_>)],
) {
    match format {
        LineFormat::Text => {
            time(out, at);
            out.extend_from_slice(b"  INFO ");
            out.extend_from_slice(TARGET.as_bytes());
            out.extend_from_slice(b": audit");
            for (name, value) in fields {
                out.push(b' ');
                out.extend_from_slice(name.as_bytes());
                out.push(b'=');
                match value {
                    Value::Str(s) => debug_str(out, s),
                    Value::Addr(_) | Value::Request(_) => {
                        out.push(b'"');
                        plain(out, *value);
                        out.push(b'"');
                    }
                }
            }
        }
        LineFormat::Json => {
            out.extend_from_slice(b"{\"timestamp\":\"");
            time(out, at);
            out.extend_from_slice(b"\",\"level\":\"INFO\",\"fields\":{\"message\":\"audit\"");
            for (name, value) in fields {
                out.extend_from_slice(b",\"");
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(b"\":");
                match value {
                    Value::Str(s) => {
                        // Writing a string into a Vec cannot fail.
                        let _ = serde_json::to_writer(&mut *out, s);
                    }
                    Value::Addr(_) | Value::Request(_) => {
                        out.push(b'"');
                        plain(out, *value);
                        out.push(b'"');
                    }
                }
            }
            out.extend_from_slice(b"},\"target\":\"");
            out.extend_from_slice(TARGET.as_bytes());
            out.extend_from_slice(b"\"}");
        }
    }
    out.push(b'\n');
}

/// `at` as RFC 3339 in UTC with microseconds (`2026-12-07T13:37:28.140314Z`).
fn time(out: &mut Vec<u8>, at: SystemTime) {
    let _ = write!(out, "{}", humantime::format_rfc3339_micros(at));
}

/// A string as its `Debug` form: quoted, with quotes, backslashes and anything
/// but printable ASCII escaped. The common case (nothing to escape) is copied.
fn debug_str(out: &mut Vec<u8>, s: &str) {
    if s.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        let _ = write!(out, "{s:?}");
    }
}

/// A value that never needs escaping, unquoted.
fn plain(out: &mut Vec<u8>, value: Value<'_>) {
    match value {
        Value::Str(s) => out.extend_from_slice(s.as_bytes()),
        Value::Addr(SocketAddr::V4(addr)) => {
            for (i, octet) in addr.ip().octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                number(out, u64::from(octet));
            }
            out.push(b':');
            number(out, u64::from(addr.port()));
        }
        Value::Addr(addr @ SocketAddr::V6(_)) => {
            let _ = write!(out, "{addr}");
        }
        Value::Request(id) => {
            out.extend_from_slice(RequestId::prefix().as_bytes());
            out.push(b'-');
            number(out, id.0);
        }
    }
}

/// `n` in decimal.
fn number(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::{Arc, Mutex};

    /// The values every test event carries: a hostile caller name (quote,
    /// backslash, newline, an escape character, non-ASCII), an IPv4 and an
    /// IPv6 peer, a request id.
    fn hostile() -> &'static str {
        "eve\"\\\n\u{1b}[31m\u{7f}é\u{200b}"
    }

    fn fields<'a>(
        caller: &'a str,
        peer: SocketAddr,
        id: RequestId,
    ) -> Vec<(&'static str, Value<'a>)> {
        vec![
            ("action", Value::Str("read")),
            ("caller", Value::Str(caller)),
            ("peer", Value::Addr(peer)),
            ("request", Value::Request(id)),
            ("reason", Value::Str("")),
        ]
    }

    /// A writer tracing's own formatter writes into, shared with the test.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The same event through tracing-subscriber's formatter (what wrote the
    /// audit lines before this module, and still writes every other log line).
    fn through_tracing(
        format: LineFormat,
        caller: &str,
        peer: SocketAddr,
        id: RequestId,
    ) -> String {
        use tracing_subscriber::layer::SubscriberExt as _;
        let captured = Captured::default();
        let writer = captured.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || writer.clone());
        let subscriber: Box<dyn tracing::Subscriber + Send + Sync> = match format {
            LineFormat::Text => Box::new(tracing_subscriber::registry().with(layer)),
            LineFormat::Json => Box::new(tracing_subscriber::registry().with(layer.json())),
        };
        let peer = peer.to_string();
        let id = id.to_string();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(
                target: TARGET,
                action = "read",
                caller = caller,
                peer = peer.as_str(),
                request = id.as_str(),
                reason = "",
                "audit"
            );
        });
        let bytes = captured.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    /// Everything after the time (text) or the object without it (JSON).
    fn without_time(format: LineFormat, line: &str) -> String {
        match format {
            LineFormat::Text => line.split_once(' ').unwrap().1.to_owned(),
            LineFormat::Json => {
                let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
                v.as_object_mut().unwrap().remove("timestamp");
                v.to_string()
            }
        }
    }

    #[test]
    fn lines_are_byte_for_byte_what_the_log_formatter_writes() {
        let peers: [SocketAddr; 3] = [
            "127.0.0.1:42984".parse().unwrap(),
            "203.0.113.250:9".parse().unwrap(),
            "[2001:db8::17]:65535".parse().unwrap(),
        ];
        for format in [LineFormat::Text, LineFormat::Json] {
            for caller in ["anonymous", "", hostile()] {
                for peer in peers {
                    let id = RequestId(18_446_744_073_709_551_615);
                    let mut ours = Vec::new();
                    write(
                        &mut ours,
                        format,
                        SystemTime::now(),
                        &fields(caller, peer, id),
                    );
                    let ours = String::from_utf8(ours).unwrap();
                    let theirs = through_tracing(format, caller, peer, id);
                    assert!(ours.ends_with('\n') && ours.lines().count() == 1, "{ours}");
                    assert_eq!(
                        without_time(format, &ours),
                        without_time(format, &theirs),
                        "{format:?} {caller:?} {peer}"
                    );
                    // JSON keeps the order: message first, then the fields.
                    if format == LineFormat::Json {
                        assert!(
                            ours.contains(
                                "\"fields\":{\"message\":\"audit\",\"action\":\"read\",\"caller\":"
                            ),
                            "{ours}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_hostile_value_stays_one_line_and_writes_no_escape_byte() {
        for format in [LineFormat::Text, LineFormat::Json] {
            let mut out = Vec::new();
            let peer = "127.0.0.1:1".parse().unwrap();
            write(
                &mut out,
                format,
                SystemTime::now(),
                &fields(hostile(), peer, RequestId(1)),
            );
            assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 1);
            assert!(
                !out.contains(&0x1b),
                "{format:?}: a raw ESC reached the line"
            );
            // JSON escapes only what it must (below 0x20); text escapes DEL too.
            if format == LineFormat::Text {
                assert!(!out.contains(&0x7f), "a raw DEL reached the text line");
            }
        }
    }

    #[test]
    fn the_time_is_rfc3339_utc_in_microseconds() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::new(1_796_650_648, 140_314_999);
        let mut out = Vec::new();
        time(&mut out, at);
        assert_eq!(out, b"2026-12-07T13:37:28.140314Z");
    }
}
