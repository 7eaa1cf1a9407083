//! Links from every request on a task to the span that started its run.
//!
//! taskgate keeps no state, so the start span's ids travel in the task handle
//! ([`TraceRef`], sealed: a caller can neither read nor choose them). When a
//! later request opens the handle — a status read, a result, a cancel, an
//! answer, a logs read, a listen, on whichever replica — its current span gets
//! one link to that start span. Only the `tracing` API and
//! `tracing-opentelemetry`'s span extension are used: with no OpenTelemetry
//! layer installed (tracing off) nothing is captured, handles carry no
//! reference and no link is made.

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use opentelemetry::KeyValue;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::core::handle::TraceRef;

/// The attribute on each link naming what the linked span is to this one.
pub const RELATION_KEY: &str = "taskgate.link.relation";
/// Its value on the link to the span that started the task's run.
pub const RELATION_START: &str = "task.start";

/// The current span as the start of a run, for its task handle: `None` unless
/// an OpenTelemetry layer records it and it is sampled (an unsampled span is
/// never exported, so a link to it would lead nowhere).
#[must_use]
pub fn current_start() -> Option<TraceRef> {
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    if !sc.is_valid() || !sc.is_sampled() {
        return None;
    }
    TraceRef::new(
        sc.trace_id().to_bytes(),
        sc.span_id().to_bytes(),
        sc.trace_flags().to_u8(),
    )
}

/// Adds to the current span a link to `start`, the span that started the
/// task's run, with [`RELATION_KEY`] = [`RELATION_START`] and no other
/// attribute. Nothing happens without an OpenTelemetry layer.
pub fn link_to_start(start: &TraceRef) {
    let target = SpanContext::new(
        TraceId::from_bytes(start.trace_id()),
        SpanId::from_bytes(start.span_id()),
        TraceFlags::new(start.flags()),
        // Possibly another process: any replica may have started the run.
        true,
        TraceState::NONE,
    );
    tracing::Span::current()
        .add_link_with_attributes(target, vec![KeyValue::new(RELATION_KEY, RELATION_START)]);
}
