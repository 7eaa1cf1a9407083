//! Per-caller quotas: how fast one caller may start runs, look up SEP-1391
//! tokens and make a waiting request re-read its run, and how many runs its
//! open listen streams may watch at once.
//!
//! Like the wait slots (`slots.rs`), this state lives in memory, in one
//! replica: a caller served by three replicas may use each quota three times,
//! and a restart forgets it. A caller with nothing counted has no entry (rates
//! drop a caller once its allowance is whole again), so memory stays bounded
//! by the callers active in the last minute. Past a quota a request is refused
//! at once, before any engine call, with a retryable error naming the key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

use super::config::ServerConfig;
use super::metrics::QuotaRefusals;

/// A quota that refused: the configuration key that sets it, and when to retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeded {
    /// The key (`server.max_starts_per_minute`, …).
    pub key: &'static str,
    /// What the key allows, in words (`60 per minute`).
    pub allows: String,
    /// How long the client should wait before trying again.
    pub retry_after: Duration,
}

impl std::fmt::Display for Exceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "this caller reached its quota of {} (server.{}); retry in {} ms",
            self.allows,
            self.key,
            self.retry_after.as_millis().max(1)
        )
    }
}

/// At most `per_minute` events per caller in any minute, spread evenly once
/// the first `per_minute` (a whole minute's worth at once) are used: a
/// generic cell rate, one instant per caller.
#[derive(Debug)]
pub struct Rate {
    key: &'static str,
    per_minute: u32,
    /// The time one event costs.
    cost: Duration,
    /// Per caller: when its allowance is whole again.
    whole_at: Mutex<HashMap<String, Instant>>,
    /// Counts refusals (`taskgate_quota_refusals_total`).
    refused: Counter,
}

/// Callers kept before the stale ones are dropped.
const PRUNE_AT: usize = 1024;

impl Rate {
    /// A rate of `per_minute` events per caller, set by `server.KEY`.
    #[must_use]
    pub fn new(key: &'static str, per_minute: u32) -> Self {
        let per_minute = per_minute.max(1);
        Self {
            key,
            per_minute,
            cost: Duration::from_secs(60) / per_minute,
            whole_at: Mutex::default(),
            refused: Counter::default(),
        }
    }

    /// This rate, its refusals counted in `refusals`.
    #[must_use]
    pub fn counted(mut self, refusals: &QuotaRefusals) -> Self {
        self.refused = refusals.counter(self.key);
        self
    }

    /// Counts one event of `caller`.
    ///
    /// # Errors
    ///
    /// [`Exceeded`] when the caller used its allowance; nothing is counted then.
    pub fn take(&self, caller: &str) -> Result<(), Exceeded> {
        self.take_at(caller, Instant::now())
    }

    fn take_at(&self, caller: &str, now: Instant) -> Result<(), Exceeded> {
        let window = Duration::from_secs(60);
        let mut whole_at = self.whole_at.lock().expect("lock");
        let from = whole_at.get(caller).copied().filter(|t| *t > now);
        let next = from.unwrap_or(now) + self.cost;
        if next > now + window {
            self.refused.inc();
            return Err(Exceeded {
                key: self.key,
                allows: format!("{} per minute", self.per_minute),
                retry_after: next - (now + window),
            });
        }
        if whole_at.len() >= PRUNE_AT && !whole_at.contains_key(caller) {
            whole_at.retain(|_, t| *t > now);
        }
        whole_at.insert(caller.to_owned(), next);
        Ok(())
    }

    /// Callers with an entry right now (for tests).
    #[must_use]
    pub fn tracked(&self) -> usize {
        self.whole_at.lock().expect("lock").len()
    }
}

/// At most `limit` things held at once per caller (runs watched by its open
/// listen streams). A caller holding none has no entry.
#[derive(Debug)]
pub struct Held {
    key: &'static str,
    limit: usize,
    by_caller: Mutex<HashMap<String, usize>>,
    /// Counts refusals (`taskgate_quota_refusals_total`).
    refused: Counter,
}

/// Things held for one caller; dropping it gives them back.
#[derive(Debug)]
pub struct Holding {
    of: Arc<Held>,
    caller: String,
    count: usize,
}

impl Held {
    /// At most `limit` per caller, set by `server.KEY`.
    #[must_use]
    pub fn new(key: &'static str, limit: usize) -> Self {
        Self {
            key,
            limit,
            by_caller: Mutex::default(),
            refused: Counter::default(),
        }
    }

    /// This bound, its refusals counted in `refusals`.
    #[must_use]
    pub fn counted(mut self, refusals: &QuotaRefusals) -> Self {
        self.refused = refusals.counter(self.key);
        self
    }

    /// Takes `count` for `caller`, all or none.
    ///
    /// # Errors
    ///
    /// [`Exceeded`] when the caller would hold more than the limit.
    pub fn take(self: &Arc<Self>, caller: &str, count: usize) -> Result<Holding, Exceeded> {
        let mut by_caller = self.by_caller.lock().expect("lock");
        let mine = by_caller.get(caller).copied().unwrap_or(0);
        if mine + count > self.limit {
            self.refused.inc();
            return Err(Exceeded {
                key: self.key,
                allows: format!("{} at once ({mine} held now)", self.limit),
                retry_after: Duration::from_secs(1),
            });
        }
        if count > 0 {
            by_caller.insert(caller.to_owned(), mine + count);
        }
        Ok(Holding {
            of: self.clone(),
            caller: caller.to_owned(),
            count,
        })
    }

    /// What `caller` holds right now.
    #[must_use]
    pub fn held_by(&self, caller: &str) -> usize {
        self.by_caller
            .lock()
            .expect("lock")
            .get(caller)
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        if self.count == 0 {
            return;
        }
        let mut by_caller = self.of.by_caller.lock().expect("lock");
        if let Some(n) = by_caller.get_mut(&self.caller) {
            *n = n.saturating_sub(self.count);
            if *n == 0 {
                by_caller.remove(&self.caller);
            }
        }
    }
}

/// Every per-caller quota of one server.
#[derive(Debug)]
pub struct Quotas {
    /// `server.max_starts_per_minute`.
    pub starts: Rate,
    /// `server.max_lookups_per_minute`.
    pub lookups: Rate,
    /// `server.max_wait_reads_per_minute`.
    pub wait_reads: Rate,
    /// `server.max_watched_runs_per_caller`.
    pub watched: Arc<Held>,
    /// Counts the refusals of these quotas and of the server's other bounds
    /// (`max_waits`, `max_waits_per_caller`, `max_engine_calls`), by key.
    pub refusals: QuotaRefusals,
}

impl Quotas {
    /// The quotas `server` sets.
    #[must_use]
    pub fn new(server: &ServerConfig) -> Self {
        let refusals = QuotaRefusals::default();
        Self {
            starts: Rate::new("max_starts_per_minute", server.max_starts_per_minute)
                .counted(&refusals),
            lookups: Rate::new("max_lookups_per_minute", server.max_lookups_per_minute)
                .counted(&refusals),
            wait_reads: Rate::new(
                "max_wait_reads_per_minute",
                server.max_wait_reads_per_minute,
            )
            .counted(&refusals),
            watched: Arc::new(
                Held::new(
                    "max_watched_runs_per_caller",
                    server.max_watched_runs_per_caller,
                )
                .counted(&refusals),
            ),
            refusals,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_allows_a_minute_at_once_then_one_per_cost() {
        let rate = Rate::new("max_starts_per_minute", 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            rate.take_at("alice", t0).unwrap();
        }
        let refused = rate.take_at("alice", t0).unwrap_err();
        assert_eq!(refused.key, "max_starts_per_minute");
        assert_eq!(refused.retry_after, Duration::from_secs(20));
        assert!(refused.to_string().contains("server.max_starts_per_minute"));
        rate.take_at("bob", t0).expect("another caller has its own");
        rate.take_at("alice", t0 + Duration::from_secs(20))
            .expect("one more after one cost");
        assert!(rate.take_at("alice", t0 + Duration::from_secs(21)).is_err());
        // Once whole again, a caller's entry may go.
        let later = t0 + Duration::from_secs(200);
        rate.whole_at.lock().unwrap().retain(|_, t| *t > later);
        assert_eq!(rate.tracked(), 0);
    }

    #[test]
    fn refusals_are_counted_under_their_key() {
        let refusals = QuotaRefusals::default();
        let rate = Rate::new("max_starts_per_minute", 1).counted(&refusals);
        let held = Arc::new(Held::new("max_watched_runs_per_caller", 1).counted(&refusals));
        let t0 = Instant::now();
        rate.take_at("alice", t0).unwrap();
        let _one = held.take("alice", 1).unwrap();
        assert_eq!(refusals.counter("max_starts_per_minute").get(), 0);
        for _ in 0..2 {
            assert!(rate.take_at("alice", t0).is_err());
            assert!(held.take("alice", 1).is_err());
        }
        assert_eq!(refusals.counter("max_starts_per_minute").get(), 2);
        assert_eq!(refusals.counter("max_watched_runs_per_caller").get(), 2);
        assert_eq!(refusals.counter("max_lookups_per_minute").get(), 0);
    }

    #[test]
    fn held_counts_per_caller_and_gives_back_on_drop() {
        let held = Arc::new(Held::new("max_watched_runs_per_caller", 3));
        let a = held.take("alice", 2).unwrap();
        assert!(held.take("alice", 2).is_err(), "all or none");
        let b = held.take("alice", 1).unwrap();
        assert!(held.take("bob", 3).is_ok());
        drop(a);
        assert_eq!(held.held_by("alice"), 1);
        drop(b);
        assert_eq!(held.held_by("alice"), 0);
        assert!(held.by_caller.lock().unwrap().is_empty());
    }
}
