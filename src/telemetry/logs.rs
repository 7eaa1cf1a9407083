//! `trace_id` and `span_id` on JSON log lines written inside a traced span.

use opentelemetry::trace::TraceContextExt as _;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// A JSON event format with the active OpenTelemetry span's ids first:
/// `{"trace_id":"…","span_id":"…",…}`. A line written outside any traced span
/// is the inner format's, unchanged. Only installed when tracing is on.
pub struct WithTraceIds<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    F: FormatEvent<S, N>,
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        // The span entered last (tracing-opentelemetry makes an entered
        // span's context the current one).
        let cx = opentelemetry::Context::current();
        let span = cx.span();
        let ids = span.span_context();
        if !ids.is_valid() {
            return self.0.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(rest) => write!(
                writer,
                "{{\"trace_id\":\"{}\",\"span_id\":\"{}\",{rest}",
                ids.trace_id(),
                ids.span_id()
            ),
            None => writer.write_str(&line),
        }
    }
}
