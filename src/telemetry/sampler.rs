//! Which traces are recorded: a parent-based, ratio sampler whose treatment of
//! a caller's `sampled` flag is configured (`telemetry.caller_sampling`).

use std::hash::{BuildHasher as _, Hasher as _};

use opentelemetry::trace::{Link, SpanKind, TraceContextExt as _, TraceId, TraceState};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, SamplingResult, ShouldSample};

/// - A span under a local parent (an engine call under its request) follows
///   the parent: a recorded request is recorded whole.
/// - A span without a parent (a request without a caller's context) is
///   recorded at `ratio`, by its trace id (which taskgate drew).
/// - A span under a caller's (remote) parent: with `follow`, the caller's
///   flag decides; otherwise a fresh random draw at `ratio` — not the trace
///   id, which the caller chose and could pick to pass any id-based test.
#[derive(Debug, Clone)]
pub struct CallerSampler {
    ratio: f64,
    follow: bool,
    root: Sampler,
}

impl CallerSampler {
    /// A sampler recording `ratio` of new traces; `follow` trusts callers' flags.
    #[must_use]
    pub fn new(ratio: f64, follow: bool) -> Self {
        Self {
            ratio,
            follow,
            root: Sampler::TraceIdRatioBased(ratio),
        }
    }

    fn draw(&self) -> bool {
        if self.ratio >= 1.0 {
            return true;
        }
        if self.ratio <= 0.0 {
            return false;
        }
        // A fresh random 64-bit number: the standard library's per-process
        // random hash keys, advanced on each call.
        let n = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        (n >> 11) as f64 / (1u64 << 53) as f64 >= 1.0 - self.ratio
    }
}

fn decided(sampled: bool, trace_state: TraceState) -> SamplingResult {
    SamplingResult {
        decision: if sampled {
            SamplingDecision::RecordAndSample
        } else {
            SamplingDecision::Drop
        },
        attributes: Vec::new(),
        trace_state,
    }
}

impl ShouldSample for CallerSampler {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        let parent = parent_context
            .filter(|cx| cx.has_active_span())
            .map(|cx| cx.span().span_context().clone())
            .filter(opentelemetry::trace::SpanContext::is_valid);
        match parent {
            Some(p) if !p.is_remote() => decided(p.is_sampled(), p.trace_state().clone()),
            Some(p) if self.follow => decided(p.is_sampled(), p.trace_state().clone()),
            Some(p) => decided(self.draw(), p.trace_state().clone()),
            None => self.root.should_sample(
                parent_context,
                trace_id,
                name,
                span_kind,
                attributes,
                links,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags};

    use super::*;

    fn remote(sampled: bool) -> Context {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        Context::new().with_remote_span_context(SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            flags,
            true,
            TraceState::default(),
        ))
    }

    fn sampled(s: &CallerSampler, parent: Option<&Context>) -> bool {
        let r = s.should_sample(
            parent,
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            "x",
            &SpanKind::Server,
            &[],
            &[],
        );
        r.decision == SamplingDecision::RecordAndSample
    }

    #[test]
    fn a_callers_flag_decides_only_when_followed() {
        let never = CallerSampler::new(0.0, false);
        assert!(
            !sampled(&never, Some(&remote(true))),
            "a caller cannot force recording"
        );
        let always = CallerSampler::new(1.0, false);
        assert!(sampled(&always, Some(&remote(false))));
        let follow = CallerSampler::new(0.0, true);
        assert!(sampled(&follow, Some(&remote(true))));
        assert!(!sampled(&follow, Some(&remote(false))));
    }

    #[test]
    fn a_ratio_draw_ignores_the_callers_trace_id() {
        let half = CallerSampler::new(0.5, false);
        let parent = remote(true);
        let recorded = (0..2000).filter(|_| sampled(&half, Some(&parent))).count();
        assert!(
            (800..1200).contains(&recorded),
            "one trace id, recorded {recorded} times of 2000"
        );
        let none = CallerSampler::new(0.0, false);
        assert!(!sampled(&none, None));
        assert!(sampled(&CallerSampler::new(1.0, false), None));
    }
}
