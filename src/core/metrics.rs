//! The server's Prometheus series: MCP requests, engine calls (counted by the
//! [`CallMeter`] in the engine layer), refused handles, blocking waits in flight
//! and build info. Every label value comes from a fixed list or from the
//! configuration: never a task id, a token or an argument.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use taskgate_engine::CallMeter;

/// MCP methods that get their own label value; any other is `_other`.
pub const METHODS: [&str; 17] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/result",
    "tasks/cancel",
    "tasks/list",
    "tasks/update",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "prompts/list",
    "prompts/get",
    "logging/setLevel",
    "completion/complete",
    "subscriptions/listen",
];

/// The label value for an unlisted method (or dialect).
pub const OTHER: &str = "_other";

/// Seconds a request may take, as histogram bucket bounds: from a cached
/// `tasks/get` to a long blocking wait.
const REQUEST_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0, 60.0, 300.0,
];

/// The labels of one request series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// One of [`METHODS`] or [`OTHER`].
    pub method: &'static str,
    /// The protocol version the request was served in, or [`OTHER`].
    pub dialect: &'static str,
    /// `ok` or `error`.
    pub outcome: &'static str,
}

/// The labels of the request duration series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestTimeLabels {
    /// One of [`METHODS`] or [`OTHER`].
    pub method: &'static str,
    /// The protocol version, or [`OTHER`].
    pub dialect: &'static str,
}

/// Why a task handle was refused.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Refusal {
    /// It does not open: made up, altered, sealed by an unknown key, or sealed
    /// for another caller.
    Unopenable,
    /// It opens but was issued in another dialect.
    WrongDialect,
    /// Its lifetime has passed.
    Expired,
    /// It names a tool the configuration no longer has.
    UnknownTool,
}

impl Refusal {
    /// The reason word (on `/metrics` and in audit events).
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Unopenable => "unopenable",
            Self::WrongDialect => "wrong_dialect",
            Self::Expired => "expired",
            Self::UnknownTool => "unknown_tool",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_BUCKETS)
}

/// The series of one server and the registry that shows them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: Family<RequestTimeLabels, Histogram, fn() -> Histogram>,
    refused: Family<RefusedLabels, Counter>,
    waits: Gauge,
}

impl Metrics {
    /// The series of a server whose engine calls `meter` counts.
    #[must_use]
    pub fn new(meter: &Arc<CallMeter>) -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let durations =
            Family::<RequestTimeLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                request_histogram,
            );
        let refused = Family::<RefusedLabels, Counter>::default();
        let waits = Gauge::default();
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register(
            "taskgate_mcp_requests",
            "MCP requests served, by method, dialect and outcome",
            requests.clone(),
        );
        registry.register_with_unit(
            "taskgate_mcp_request_duration",
            "How long MCP requests took to answer, by method and dialect",
            Unit::Seconds,
            durations.clone(),
        );
        meter.register(&mut registry);
        registry.register(
            "taskgate_refused_handles",
            "Task handles refused, by reason",
            refused.clone(),
        );
        // Every reason shows from the start, at 0, so alerts need no `absent`.
        for reason in [
            Refusal::Unopenable,
            Refusal::WrongDialect,
            Refusal::Expired,
            Refusal::UnknownTool,
        ] {
            let _ = refused.get_or_create(&RefusedLabels {
                reason: reason.label(),
            });
        }
        registry.register(
            "taskgate_waits_in_flight",
            "Blocking requests waiting for runs right now",
            waits.clone(),
        );
        registry.register(
            "taskgate_build_info",
            "The running taskgate's version (always 1)",
            build,
        );
        Self {
            registry,
            requests,
            durations,
            refused,
            waits,
        }
    }

    /// The label value of `method`: itself when listed in [`METHODS`], else [`OTHER`].
    #[must_use]
    pub fn method_label(method: &str) -> &'static str {
        METHODS
            .iter()
            .find(|m| **m == method)
            .copied()
            .unwrap_or(OTHER)
    }

    /// Counts one answered request.
    pub fn request(&self, method: &'static str, dialect: &'static str, ok: bool, took: Duration) {
        let outcome = if ok { "ok" } else { "error" };
        self.requests
            .get_or_create(&RequestLabels {
                method,
                dialect,
                outcome,
            })
            .inc();
        self.durations
            .get_or_create(&RequestTimeLabels { method, dialect })
            .observe(took.as_secs_f64());
    }

    /// Counts one refused task handle.
    pub fn refused(&self, why: Refusal) {
        self.refused
            .get_or_create(&RefusedLabels {
                reason: why.label(),
            })
            .inc();
    }

    /// Every series as OpenMetrics text, with `waits` as the waits in flight.
    #[must_use]
    pub fn render(&self, waits: usize) -> String {
        self.waits.set(i64::try_from(waits).unwrap_or(i64::MAX));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }

    /// Every series in the classic Prometheus text format (0.0.4), for scrapers
    /// that do not ask for OpenMetrics: counter families are named with their
    /// `_total` suffix, and the `# UNIT` and `# EOF` lines are left out.
    #[must_use]
    pub fn render_classic(&self, waits: usize) -> String {
        classic(&self.render(waits))
    }
}

/// OpenMetrics text rewritten in the classic text format.
fn classic(open: &str) -> String {
    let counters: Vec<&str> = open
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open.len() + 16 * counters.len());
    for line in open.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(prefix);
                out.push_str(name);
                if counters.contains(&name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_classic_text_names_counters_with_total_and_drops_openmetrics_lines() {
        let meter = Arc::new(CallMeter::default());
        let m = Metrics::new(&meter);
        m.request("tools/call", "2026-07-28", true, Duration::from_millis(3));
        let open = m.render(2);
        assert!(
            open.contains("# TYPE taskgate_mcp_requests counter\n"),
            "{open}"
        );
        assert!(open.ends_with("# EOF\n"), "{open}");
        let text = m.render_classic(2);
        assert!(
            text.contains("# TYPE taskgate_mcp_requests_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# HELP taskgate_mcp_requests_total MCP requests"),
            "{text}"
        );
        assert!(text.contains("taskgate_mcp_requests_total{method=\"tools/call\",dialect=\"2026-07-28\",outcome=\"ok\"} 1\n"), "{text}");
        assert!(
            text.contains("# TYPE taskgate_waits_in_flight gauge\ntaskgate_waits_in_flight 2\n"),
            "{text}"
        );
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
    }

    #[test]
    fn unlisted_methods_share_one_label() {
        assert_eq!(Metrics::method_label("tools/call"), "tools/call");
        assert_eq!(Metrics::method_label("tasks/abc123"), OTHER);
    }
}
