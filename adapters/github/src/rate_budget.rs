//! GitHub's rate budget: reading the `x-ratelimit-*` headers, telling a rate-limit
//! refusal from a permission refusal, and the poll interval to suggest to clients
//! when the rate budget runs low. Pure functions over headers and the current time.

use std::time::Duration;

use http::HeaderMap;

/// What the `x-ratelimit-*` headers of one answer say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RateBudget {
    /// `x-ratelimit-limit`: requests per window.
    pub limit: Option<u64>,
    /// `x-ratelimit-remaining`: requests left in this window.
    pub remaining: Option<u64>,
    /// `x-ratelimit-reset`: when the window resets, in seconds since the epoch.
    pub reset: Option<u64>,
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

impl RateBudget {
    /// Reads the headers of an answer.
    #[must_use]
    pub fn from_headers(headers: &HeaderMap) -> Self {
        Self {
            limit: header_u64(headers, "x-ratelimit-limit"),
            remaining: header_u64(headers, "x-ratelimit-remaining"),
            reset: header_u64(headers, "x-ratelimit-reset"),
        }
    }

    /// The tighter of two budgets (the one with fewer requests left).
    #[must_use]
    pub fn tighter(self, other: Self) -> Self {
        match (self.remaining, other.remaining) {
            (Some(a), Some(b)) if b < a => other,
            (None, Some(_)) => other,
            _ => self,
        }
    }
}

/// When an answer is a rate-limit refusal, how long to wait before retrying.
///
/// GitHub answers 403 or 429 for both limits: the primary one with
/// `x-ratelimit-remaining: 0` (wait until `x-ratelimit-reset`), a secondary one with
/// a `retry-after` header or a message mentioning a secondary rate limit (wait
/// `retry-after`, else at least a minute). `None` means the answer is not a
/// rate-limit refusal (a 403 is then a permission problem).
#[must_use]
pub(crate) fn rate_limited(
    status: u16,
    headers: &HeaderMap,
    message: &str,
    now: u64,
) -> Option<Duration> {
    if status != 403 && status != 429 {
        return None;
    }
    let retry_after = header_u64(headers, "retry-after");
    let rate_budget = RateBudget::from_headers(headers);
    let lower = message.to_ascii_lowercase();
    let mentions = lower.contains("rate limit");
    if let Some(seconds) = retry_after {
        return Some(Duration::from_secs(seconds.max(1)));
    }
    if rate_budget.remaining == Some(0) {
        let wait = rate_budget
            .reset
            .map_or(60, |reset| reset.saturating_sub(now).max(1));
        return Some(Duration::from_secs(wait));
    }
    if mentions || status == 429 {
        return Some(Duration::from_secs(60));
    }
    None
}

/// The poll interval to suggest when the rate budget is low, or `None` when the
/// configured interval is fine.
///
/// Below `low_budget` remaining requests (default: a tenth of the limit), the
/// remaining requests are spread until the window resets: one poll costs
/// `calls_per_poll` requests, so polls are at least `window × calls_per_poll /
/// remaining` apart (never less than 10 s); with nothing left, wait for the reset.
#[must_use]
pub(crate) fn poll_hint(
    rate_budget: &RateBudget,
    now: u64,
    calls_per_poll: u64,
    low_budget: Option<u64>,
) -> Option<Duration> {
    let remaining = rate_budget.remaining?;
    let limit = rate_budget.limit.unwrap_or(5000);
    let threshold = low_budget.unwrap_or((limit / 10).max(1));
    if remaining >= threshold {
        return None;
    }
    let window = rate_budget
        .reset
        .map_or(3600, |r| r.saturating_sub(now))
        .max(1);
    if remaining == 0 {
        return Some(Duration::from_secs(window + 1));
    }
    let spread = window.saturating_mul(calls_per_poll.max(1)) / remaining;
    Some(Duration::from_secs(spread.clamp(10, window + 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn budgets_are_read_and_compared() {
        let a = RateBudget::from_headers(&headers(&[
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "4999"),
            ("x-ratelimit-reset", "1700000000"),
        ]));
        assert_eq!(a.remaining, Some(4999));
        let b = RateBudget {
            remaining: Some(3),
            ..a
        };
        assert_eq!(a.tighter(b), b);
        assert_eq!(b.tighter(a), b);
        assert_eq!(RateBudget::default().tighter(a), a);
    }

    #[test]
    fn rate_limit_refusals_are_told_from_permission_refusals() {
        let now = 1_000;
        // Primary: remaining 0, wait until reset.
        let primary = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1090"),
        ]);
        assert_eq!(
            rate_limited(403, &primary, "API rate limit exceeded for user ID 1.", now),
            Some(Duration::from_secs(90))
        );
        // Secondary with retry-after.
        let secondary = headers(&[("retry-after", "30"), ("x-ratelimit-remaining", "4000")]);
        assert_eq!(
            rate_limited(
                403,
                &secondary,
                "You have exceeded a secondary rate limit",
                now
            ),
            Some(Duration::from_secs(30))
        );
        // Secondary by message only: at least a minute.
        assert_eq!(
            rate_limited(
                403,
                &HeaderMap::new(),
                "You have exceeded a secondary rate limit.",
                now
            ),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            rate_limited(429, &HeaderMap::new(), "", now),
            Some(Duration::from_secs(60))
        );
        // A plain 403 is about permissions.
        assert_eq!(
            rate_limited(
                403,
                &headers(&[("x-ratelimit-remaining", "4000")]),
                "Resource not accessible by integration",
                now
            ),
            None
        );
        assert_eq!(rate_limited(404, &primary, "", now), None);
    }

    #[test]
    fn the_poll_hint_rises_as_the_budget_falls() {
        let now = 10_000;
        let b = |remaining| RateBudget {
            limit: Some(5000),
            remaining: Some(remaining),
            reset: Some(now + 3000),
        };
        assert_eq!(poll_hint(&b(4000), now, 2, None), None);
        assert_eq!(poll_hint(&b(500), now, 2, None), None);
        assert_eq!(
            poll_hint(&b(300), now, 2, None),
            Some(Duration::from_secs(20))
        );
        assert_eq!(
            poll_hint(&b(30), now, 2, None),
            Some(Duration::from_secs(200))
        );
        assert_eq!(
            poll_hint(&b(0), now, 2, None),
            Some(Duration::from_secs(3001))
        );
        assert_eq!(
            poll_hint(&b(499), now, 1, None),
            Some(Duration::from_secs(10))
        );
        // A configured threshold.
        assert_eq!(
            poll_hint(&b(1000), now, 2, Some(2000)),
            Some(Duration::from_secs(10))
        );
        // No headers (GitHub Enterprise Server with limits off): no hint.
        assert_eq!(poll_hint(&RateBudget::default(), now, 2, None), None);
        // Monotonic: less rate budget never means a shorter interval.
        let mut last = Duration::ZERO;
        for remaining in (0..500).rev() {
            let hint = poll_hint(&b(remaining), now, 2, None).unwrap();
            assert!(hint >= last);
            last = hint;
        }
    }
}
