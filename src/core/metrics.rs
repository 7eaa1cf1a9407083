//! The server's Prometheus series: MCP requests, engine calls (a
//! [`CallMeter`], fed by the deadline layer of `core::stack`), refused handles,
//! refusals by a quota or bound of `[server]` ([`QuotaRefusals`]) and at the
//! door or by an access rule ([`AuthRefusal`]), blocking waits, listen streams
//! and watched runs in flight, and build info. Every label value comes from a
//! fixed list or from the configuration: never a task id, a caller, a token or
//! an argument.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use taskgate_engine::EngineError;

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

/// Why a request was refused before it was served: at the HTTP door (its
/// credentials, its peer, its Host or Origin) or by a tool's access rule.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum AuthRefusal {
    /// No bearer token was presented where one is needed (401).
    NoToken,
    /// The token was refused: unknown, expired, another audience… (401).
    InvalidToken,
    /// The token could not be checked: its issuer could not be reached (503).
    IssuerUnavailable,
    /// The peer presented too many refused tokens (`[auth.failures]`, 429).
    TooManyFailures,
    /// An anonymous peer from the network, without `[auth]` (403).
    PeerNotAllowed,
    /// A Host header not allowed, or none (403).
    HostNotAllowed,
    /// An Origin header not allowed (403).
    OriginNotAllowed,
    /// A tool's access rule does not admit the caller.
    AccessRule,
    /// The caller's token lacks a scope the tool's access rule asks for.
    InsufficientScope,
}

impl AuthRefusal {
    /// Every reason, so each series shows from the start.
    const ALL: [Self; 9] = [
        Self::NoToken,
        Self::InvalidToken,
        Self::IssuerUnavailable,
        Self::TooManyFailures,
        Self::PeerNotAllowed,
        Self::HostNotAllowed,
        Self::OriginNotAllowed,
        Self::AccessRule,
        Self::InsufficientScope,
    ];

    /// The reason word (on `/metrics`).
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::NoToken => "no_token",
            Self::InvalidToken => "invalid_token",
            Self::IssuerUnavailable => "issuer_unavailable",
            Self::TooManyFailures => "too_many_failures",
            Self::PeerNotAllowed => "peer_not_allowed",
            Self::HostNotAllowed => "host_not_allowed",
            Self::OriginNotAllowed => "origin_not_allowed",
            Self::AccessRule => "access_rule",
            Self::InsufficientScope => "insufficient_scope",
        }
    }
}

/// The `[server]` keys whose quota or bound refuses requests, as the `key`
/// label of `taskgate_quota_refusals_total`.
pub const QUOTA_KEYS: [&str; 7] = [
    "max_starts_per_minute",
    "max_lookups_per_minute",
    "max_wait_reads_per_minute",
    "max_watched_runs_per_caller",
    "max_waits",
    "max_waits_per_caller",
    "max_engine_calls",
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyLabels {
    key: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// Counts requests refused by a per-caller quota or a bound of `[server]`,
/// by the key that sets it (one of [`QUOTA_KEYS`]). Cheap to clone: clones
/// count into the same series.
#[derive(Debug, Clone, Default)]
pub struct QuotaRefusals(Family<KeyLabels, Counter>);

impl QuotaRefusals {
    /// The counter of `key` (one of [`QUOTA_KEYS`]), to count refusals with.
    #[must_use]
    pub fn counter(&self, key: &'static str) -> Counter {
        debug_assert!(QUOTA_KEYS.contains(&key), "{key} is not in QUOTA_KEYS");
        self.0.get_or_create(&KeyLabels { key }).clone()
    }

    /// Counts one refusal by `key`.
    pub fn count(&self, key: &'static str) {
        self.counter(key).inc();
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_BUCKETS)
}

/// Seconds an engine call may take, as histogram bucket bounds: from a fast
/// read to a long wait for change.
const CALL_BUCKETS: [f64; 11] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0, 60.0, 300.0,
];

/// The operations of a [`taskgate_engine::Pipeline`], as the engine-call
/// series count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `start`.
    Start,
    /// `read`.
    Read,
    /// `cancel`.
    Cancel,
    /// `answer`.
    Answer,
    /// `locate`.
    Locate,
    /// `wait_for_change`.
    WaitForChange,
    /// `check`.
    Check,
    /// `logs`.
    Logs,
}

impl Operation {
    /// Every operation, in the order of their label values in [`Self::label`].
    const ALL: [Self; 8] = [
        Self::Start,
        Self::Read,
        Self::Cancel,
        Self::Answer,
        Self::Locate,
        Self::WaitForChange,
        Self::Check,
        Self::Logs,
    ];

    /// The label value.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Read => "read",
            Self::Cancel => "cancel",
            Self::Answer => "answer",
            Self::Locate => "locate",
            Self::WaitForChange => "wait_for_change",
            Self::Check => "check",
            Self::Logs => "logs",
        }
    }
}

/// The labels of one engine call series. Engine and tool names come from the
/// configuration only; the operation from [`Operation::label`].
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// The engine's name in the configuration.
    pub engine: String,
    /// The tool's name in the configuration.
    pub tool: String,
    /// The pipeline operation.
    pub operation: &'static str,
}

/// The labels of one engine error series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// The engine's name in the configuration.
    pub engine: String,
    /// The tool's name in the configuration.
    pub tool: String,
    /// [`EngineError::kind`].
    pub kind: &'static str,
}

fn call_histogram() -> Histogram {
    Histogram::new(CALL_BUCKETS)
}

/// Counts and times calls made to engines. Shared by every pipeline of a server
/// and shown on its metrics endpoint; an idle server's counts do not move.
#[derive(Debug)]
pub struct CallMeter {
    calls: AtomicU64,
    failures: AtomicU64,
    by_call: Family<CallLabels, Counter>,
    durations: Family<CallLabels, Histogram, fn() -> Histogram>,
    errors: Family<ErrorLabels, Counter>,
}

impl Default for CallMeter {
    fn default() -> Self {
        Self {
            calls: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            by_call: Family::default(),
            durations: Family::new_with_constructor(call_histogram),
            errors: Family::default(),
        }
    }
}

impl CallMeter {
    /// Calls made so far.
    #[must_use]
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Calls that ended in an error so far.
    #[must_use]
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Adds this meter's series to `registry`: `taskgate_engine_calls_total`,
    /// `taskgate_engine_call_duration_seconds` and `taskgate_engine_errors_total`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "taskgate_engine_calls",
            "Calls made to engines, by engine, tool and operation",
            self.by_call.clone(),
        );
        registry.register_with_unit(
            "taskgate_engine_call_duration",
            "How long engine calls took, by engine, tool and operation",
            Unit::Seconds,
            self.durations.clone(),
        );
        registry.register(
            "taskgate_engine_errors",
            "Engine calls that ended in an error, by engine, tool and kind",
            self.errors.clone(),
        );
    }

    /// The series of one tool, created now so a call only touches atomics.
    #[must_use]
    pub fn for_tool(self: &Arc<Self>, engine: &str, tool: &str) -> ToolMeter {
        let handles = Operation::ALL.map(|operation| {
            let labels = CallLabels {
                engine: engine.to_owned(),
                tool: tool.to_owned(),
                operation: operation.label(),
            };
            (
                self.by_call.get_or_create(&labels).clone(),
                self.durations.get_or_create(&labels).clone(),
            )
        });
        ToolMeter {
            meter: self.clone(),
            engine: engine.to_owned(),
            tool: tool.to_owned(),
            handles,
        }
    }
}

/// The engine call series of one tool.
#[derive(Debug)]
pub struct ToolMeter {
    meter: Arc<CallMeter>,
    engine: String,
    tool: String,
    handles: [(Counter, Histogram); Operation::ALL.len()],
}

impl ToolMeter {
    /// The engine's configured name.
    #[must_use]
    pub fn engine(&self) -> &str {
        &self.engine
    }

    /// The tool's name.
    #[must_use]
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// Counts one call of `op` that took `took` and failed with `error`, if any.
    pub fn record(&self, op: Operation, took: Duration, error: Option<&EngineError>) {
        let (count, duration) = &self.handles[op as usize];
        count.inc();
        duration.observe(took.as_secs_f64());
        self.meter.calls.fetch_add(1, Ordering::Relaxed);
        if let Some(e) = error {
            self.meter.failures.fetch_add(1, Ordering::Relaxed);
            self.meter
                .errors
                .get_or_create(&ErrorLabels {
                    engine: self.engine.clone(),
                    tool: self.tool.clone(),
                    kind: e.kind(),
                })
                .inc();
        }
    }
}

/// The series of one server and the registry that shows them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: Family<RequestTimeLabels, Histogram, fn() -> Histogram>,
    refused: Family<RefusedLabels, Counter>,
    auth_refused: Family<ReasonLabels, Counter>,
    waits: Gauge,
    listens: Gauge,
    watched: Gauge,
}

/// One listen stream in flight; dropping it ends it on `/metrics`.
#[derive(Debug)]
pub struct Listening(Gauge);

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// The series of a server whose engine calls `meter` counts and whose
    /// quota and bound refusals `quotas` counts.
    #[must_use]
    pub fn new(meter: &Arc<CallMeter>, quotas: &QuotaRefusals) -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let durations =
            Family::<RequestTimeLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                request_histogram,
            );
        let refused = Family::<RefusedLabels, Counter>::default();
        let waits = Gauge::default();
        let listens = Gauge::default();
        let watched = Gauge::default();
        let auth_refused = Family::<ReasonLabels, Counter>::default();
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
            "taskgate_quota_refusals",
            "Requests refused by a per-caller quota or a bound of [server], by its key",
            quotas.0.clone(),
        );
        for key in QUOTA_KEYS {
            let _ = quotas.counter(key);
        }
        registry.register(
            "taskgate_auth_refusals",
            "Requests refused at the HTTP door or by a tool's access rule, by reason",
            auth_refused.clone(),
        );
        for reason in AuthRefusal::ALL {
            let _ = auth_refused.get_or_create(&ReasonLabels {
                reason: reason.label(),
            });
        }
        registry.register(
            "taskgate_waits_in_flight",
            "Blocking requests waiting for runs right now (listen streams included)",
            waits.clone(),
        );
        registry.register(
            "taskgate_listen_streams_in_flight",
            "subscriptions/listen streams open right now",
            listens.clone(),
        );
        registry.register(
            "taskgate_watched_runs",
            "Runs watched for open listen streams right now (one watch per run, shared by its streams)",
            watched.clone(),
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
            auth_refused,
            waits,
            listens,
            watched,
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

    /// Counts one request refused at the door or by an access rule.
    pub fn auth_refused(&self, why: AuthRefusal) {
        self.auth_refused
            .get_or_create(&ReasonLabels {
                reason: why.label(),
            })
            .inc();
    }

    /// Counts a listen stream as in flight until the returned guard is dropped.
    #[must_use]
    pub fn listening(&self) -> Listening {
        self.listens.inc();
        Listening(self.listens.clone())
    }

    /// Every series as OpenMetrics text, with `now` as the gauges sampled at
    /// the scrape.
    #[must_use]
    pub fn render(&self, now: InFlight) -> String {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.waits.set(gauge(now.waits));
        self.watched.set(gauge(now.watched_runs));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }

    /// Every series in the classic Prometheus text format (0.0.4), for scrapers
    /// that do not ask for OpenMetrics: counter families are named with their
    /// `_total` suffix, and the `# UNIT` and `# EOF` lines are left out.
    #[must_use]
    pub fn render_classic(&self, now: InFlight) -> String {
        classic(&self.render(now))
    }
}

/// What the gateway holds right now, sampled at each scrape.
#[derive(Debug, Clone, Copy, Default)]
pub struct InFlight {
    /// Blocking requests waiting for runs (wait slots held).
    pub waits: usize,
    /// Runs watched for open listen streams.
    pub watched_runs: usize,
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
    fn each_operation_counts_under_its_own_label() {
        let meter = Arc::new(CallMeter::default());
        let tool = meter.for_tool("e", "t");
        for (n, op) in Operation::ALL.into_iter().enumerate() {
            for _ in 0..=n {
                tool.record(op, Duration::from_millis(1), None);
            }
        }
        let text = Metrics::new(&meter, &QuotaRefusals::default()).render(InFlight::default());
        for (n, op) in Operation::ALL.into_iter().enumerate() {
            let series = format!(
                "taskgate_engine_calls_total{{engine=\"e\",tool=\"t\",operation=\"{}\"}} {}\n",
                op.label(),
                n + 1
            );
            assert!(text.contains(&series), "{series} in {text}");
        }
    }

    #[test]
    fn the_classic_text_names_counters_with_total_and_drops_openmetrics_lines() {
        let meter = Arc::new(CallMeter::default());
        let m = Metrics::new(&meter, &QuotaRefusals::default());
        m.request("tools/call", "2026-07-28", true, Duration::from_millis(3));
        let two = InFlight {
            waits: 2,
            watched_runs: 0,
        };
        let open = m.render(two);
        assert!(
            open.contains("# TYPE taskgate_mcp_requests counter\n"),
            "{open}"
        );
        assert!(open.ends_with("# EOF\n"), "{open}");
        let text = m.render_classic(two);
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
    fn refusals_listen_streams_and_watched_runs_show_from_zero_and_move() {
        let meter = Arc::new(CallMeter::default());
        let quotas = QuotaRefusals::default();
        let m = Metrics::new(&meter, &quotas);
        let text = m.render_classic(InFlight::default());
        for key in QUOTA_KEYS {
            assert!(
                text.contains(&format!(
                    "taskgate_quota_refusals_total{{key=\"{key}\"}} 0\n"
                )),
                "{key} in {text}"
            );
        }
        for reason in AuthRefusal::ALL {
            let series = format!(
                "taskgate_auth_refusals_total{{reason=\"{}\"}} 0\n",
                reason.label()
            );
            assert!(text.contains(&series), "{series} in {text}");
        }
        assert!(
            text.contains("taskgate_listen_streams_in_flight 0\n"),
            "{text}"
        );
        assert!(text.contains("taskgate_watched_runs 0\n"), "{text}");

        quotas.count("max_starts_per_minute");
        quotas.counter("max_waits").inc();
        m.auth_refused(AuthRefusal::InvalidToken);
        let one = m.listening();
        let two = m.listening();
        let now = InFlight {
            waits: 2,
            watched_runs: 1,
        };
        let text = m.render_classic(now);
        for series in [
            "taskgate_quota_refusals_total{key=\"max_starts_per_minute\"} 1\n",
            "taskgate_quota_refusals_total{key=\"max_waits\"} 1\n",
            "taskgate_auth_refusals_total{reason=\"invalid_token\"} 1\n",
            "taskgate_listen_streams_in_flight 2\n",
            "taskgate_watched_runs 1\n",
        ] {
            assert!(text.contains(series), "{series} in {text}");
        }
        drop((one, two));
        let text = m.render_classic(InFlight::default());
        assert!(
            text.contains("taskgate_listen_streams_in_flight 0\n"),
            "{text}"
        );
        assert!(text.contains("taskgate_watched_runs 0\n"), "{text}");
    }

    #[test]
    fn unlisted_methods_share_one_label() {
        assert_eq!(Metrics::method_label("tools/call"), "tools/call");
        assert_eq!(Metrics::method_label("tasks/abc123"), OTHER);
    }
}
