//! The caller's trace context: `params._meta.traceparent`/`tracestate` (where
//! OpenTelemetry's MCP conventions place them) first, else the HTTP headers of
//! the same names. A malformed one is ignored, never an error to the caller:
//! the request is then traced as if it had come without one.

use std::str::FromStr as _;

use axum::http::HeaderMap;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use opentelemetry::Context;
use serde_json::Value;
use taskgate_engine::TraceContext;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The length of a version-00 `traceparent`; anything longer is not read.
const TRACEPARENT_LEN: usize = 55;

/// A caller's context to continue: the parent of the request's span, and the
/// HTTP headers' context when `_meta` won over a different one (linked, as the
/// conventions ask for the transport's context).
#[derive(Debug, Clone)]
pub struct RemoteParent {
    parent: SpanContext,
    ambient: Option<SpanContext>,
}

/// The caller's context of a request: `meta` is its `params._meta`,
/// `headers` the HTTP request's (none on stdio). `None` when neither holds a
/// well-formed one.
#[must_use]
pub fn remote_parent(meta: Option<&Value>, headers: Option<&HeaderMap>) -> Option<RemoteParent> {
    let from_meta = meta.and_then(|m| {
        span_context(
            m.get("traceparent").and_then(Value::as_str),
            m.get("tracestate").and_then(Value::as_str),
        )
    });
    let from_headers = headers.and_then(|h| {
        let mut parents = h.get_all("traceparent").iter();
        let (Some(only), None) = (parents.next(), parents.next()) else {
            return None;
        };
        let states: Vec<&str> = h
            .get_all("tracestate")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let state = (!states.is_empty()).then(|| states.join(","));
        span_context(only.to_str().ok(), state.as_deref())
    });
    match (from_meta, from_headers) {
        (Some(parent), ambient) => Some(RemoteParent {
            ambient: ambient.filter(|a| a.span_id() != parent.span_id()),
            parent,
        }),
        (None, Some(parent)) => Some(RemoteParent {
            parent,
            ambient: None,
        }),
        (None, None) => None,
    }
}

/// Makes `span` (not yet entered) continue the caller's trace.
pub fn continue_remote(span: &Span, remote: RemoteParent) {
    if span.is_disabled() {
        return;
    }
    let _ = span.set_parent(Context::new().with_remote_span_context(remote.parent));
    if let Some(ambient) = remote.ambient {
        span.add_link(ambient);
    }
}

/// A checked context (the engine contract's own check: version 00, lower-case
/// hex, non-zero ids, a W3C `tracestate` of at most 512 bytes); a malformed
/// `tracestate` is dropped, the `traceparent` kept.
fn span_context(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<SpanContext> {
    let traceparent = traceparent.filter(|t| t.len() == TRACEPARENT_LEN)?;
    let tracestate = tracestate.filter(|s| s.len() <= 4 * taskgate_engine::MAX_TRACESTATE_BYTES);
    let checked = TraceContext::new(traceparent, tracestate)
        .or_else(|_| TraceContext::new(traceparent, None))
        .ok()?;
    let tp = checked.traceparent();
    let trace_id = TraceId::from_hex(&tp[3..35]).ok()?;
    let span_id = SpanId::from_hex(&tp[36..52]).ok()?;
    let flags = u8::from_str_radix(&tp[53..55], 16).ok()?;
    let state = checked
        .tracestate()
        .and_then(|s| TraceState::from_str(s).ok())
        .unwrap_or_default();
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
        true,
        state,
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const META: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const HEADER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn meta_wins_over_headers_and_links_them() {
        let meta = json!({ "traceparent": META, "tracestate": "rojo=00f067aa0ba902b7" });
        let h = headers(&[("traceparent", HEADER)]);
        let r = remote_parent(Some(&meta), Some(&h)).unwrap();
        assert_eq!(
            r.parent.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(r.parent.span_id().to_string(), "00f067aa0ba902b7");
        assert!(r.parent.is_sampled() && r.parent.is_remote());
        assert_eq!(r.parent.trace_state().get("rojo"), Some("00f067aa0ba902b7"));
        assert_eq!(r.ambient.unwrap().span_id().to_string(), "b7ad6b7169203331");
        let only_headers = remote_parent(Some(&json!({})), Some(&h)).unwrap();
        assert_eq!(
            only_headers.parent.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert!(!only_headers.parent.is_sampled());
    }

    #[test]
    fn malformed_contexts_are_ignored() {
        let long = format!("{META}{}", "0".repeat(10_000));
        for bad in [
            json!({ "traceparent": "00-zz-00f067aa0ba902b7-01" }),
            json!({ "traceparent": META.to_uppercase() }),
            json!({ "traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01" }),
            json!({ "traceparent": long }),
            json!({ "traceparent": 7 }),
            json!({ "traceparent": ["x"] }),
        ] {
            assert!(remote_parent(Some(&bad), None).is_none(), "{bad}");
        }
        // A malformed _meta one falls back to the headers'.
        let h = headers(&[("traceparent", HEADER)]);
        let r = remote_parent(Some(&json!({ "traceparent": "junk" })), Some(&h)).unwrap();
        assert_eq!(r.parent.span_id().to_string(), "b7ad6b7169203331");
        // Two traceparent headers: neither is believed.
        let two = headers(&[("traceparent", HEADER), ("traceparent", META)]);
        assert!(remote_parent(None, Some(&two)).is_none());
        // A bad tracestate is dropped, the traceparent kept.
        let meta = json!({ "traceparent": META, "tracestate": "k=v\u{1}" });
        let r = remote_parent(Some(&meta), None).unwrap();
        assert_eq!(r.parent.trace_state().header(), "");
        let huge =
            json!({ "traceparent": META, "tracestate": format!("a={}", "b".repeat(100_000)) });
        assert!(remote_parent(Some(&huge), None).is_some());
    }
}
