//! The W3C trace context a run is started under, for engines that can carry
//! it into the run (an environment variable, an annotation, a header, a conf
//! key, a workflow input) so the pipeline's own spans join the caller's trace.

use std::fmt;

/// A checked W3C trace context: `traceparent` in version-00 form and an
/// optional `tracestate`. The server builds it from its own span (never the
/// caller's text unchecked); engines only copy it where their run can read it.
#[derive(Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

/// Why a trace context was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceContextError {
    /// `traceparent` is not `00-<32 hex>-<16 hex>-<2 hex>` with non-zero ids.
    #[error("traceparent is not a version-00 W3C trace context")]
    Traceparent,
    /// `tracestate` is longer than 512 bytes, has more than 32 members or a
    /// member that is not `key=value` of printable ASCII.
    #[error("tracestate is not a valid W3C tracestate")]
    Tracestate,
}

/// The longest `tracestate` W3C lets a vendor propagate.
pub const MAX_TRACESTATE_BYTES: usize = 512;

impl TraceContext {
    /// Checks and builds a trace context.
    ///
    /// # Errors
    ///
    /// [`TraceContextError`] when either header is malformed.
    pub fn new(traceparent: &str, tracestate: Option<&str>) -> Result<Self, TraceContextError> {
        if !valid_traceparent(traceparent) {
            return Err(TraceContextError::Traceparent);
        }
        let tracestate = match tracestate.map(str::trim) {
            None | Some("") => None,
            Some(s) if valid_tracestate(s) => Some(s.to_owned()),
            Some(_) => return Err(TraceContextError::Tracestate),
        };
        Ok(Self {
            traceparent: traceparent.to_owned(),
            tracestate,
        })
    }

    /// The `traceparent` value (`00-<trace id>-<span id>-<flags>`).
    #[must_use]
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` value, when there is one.
    #[must_use]
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The 32-hex-digit trace id.
    #[must_use]
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceContext")
            .field("traceparent", &self.traceparent)
            .field("tracestate", &self.tracestate.as_ref().map(|_| "…"))
            .finish()
    }
}

fn lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn valid_traceparent(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let [version, trace, span, flags] = parts.as_slice() else {
        return false;
    };
    *version == "00"
        && trace.len() == 32
        && span.len() == 16
        && flags.len() == 2
        && lower_hex(trace)
        && lower_hex(span)
        && lower_hex(flags)
        && trace.bytes().any(|b| b != b'0')
        && span.bytes().any(|b| b != b'0')
}

fn valid_tracestate(s: &str) -> bool {
    if s.len() > MAX_TRACESTATE_BYTES {
        return false;
    }
    let members: Vec<&str> = s
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .collect();
    !members.is_empty()
        && members.len() <= 32
        && members.iter().all(|m| {
            let Some((key, value)) = m.split_once('=') else {
                return false;
            };
            !key.is_empty()
                && key.len() <= 256
                && key
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/@".contains(&b))
                && !value.is_empty()
                && value.len() <= 256
                && value
                    .bytes()
                    .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn accepts_a_version_00_context() {
        let t = TraceContext::new(GOOD, Some("vendor=abc,other@x=1")).unwrap();
        assert_eq!(t.traceparent(), GOOD);
        assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.tracestate(), Some("vendor=abc,other@x=1"));
        assert_eq!(
            TraceContext::new(GOOD, Some(" ")).unwrap().tracestate(),
            None
        );
    }

    #[test]
    fn refuses_malformed_headers() {
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\n",
        ] {
            assert_eq!(
                TraceContext::new(bad, None),
                Err(TraceContextError::Traceparent),
                "{bad:?}"
            );
        }
        let long = format!("a={}", "b".repeat(600));
        let many = (0..33)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        for bad in [
            "novalue",
            "k=",
            "K=v",
            "k=v\nx",
            long.as_str(),
            many.as_str(),
        ] {
            assert_eq!(
                TraceContext::new(GOOD, Some(bad)),
                Err(TraceContextError::Tracestate),
                "{bad:?}"
            );
        }
    }
}
