//! Bounds on requests that block: how many may wait for runs at once, in all and
//! per caller. A slot is held for the life of one blocking request and given
//! back when it ends; a caller with no request waiting has no entry. Past a
//! bound a request is refused at once with a retryable error, before any
//! engine call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The slots of one server.
#[derive(Debug)]
pub struct WaitSlots {
    total: usize,
    per_caller: usize,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_caller: HashMap<String, usize>,
}

/// Which bound refused a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// `server.max_waits`: the server as a whole.
    Server(usize),
    /// `server.max_waits_per_caller`: this caller.
    Caller(usize),
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Server(n) => write!(f, "{n} requests are already waiting for runs (server.max_waits)"),
            Self::Caller(n) => write!(
                f,
                "this caller already has {n} requests waiting for runs (server.max_waits_per_caller)"
            ),
        }
    }
}

/// One held slot; dropping it gives the slot back.
#[derive(Debug)]
pub struct WaitSlot {
    slots: Arc<WaitSlots>,
    caller: String,
}

impl WaitSlots {
    /// Slots for `total` waits at once, at most `per_caller` of them per caller.
    #[must_use]
    pub fn new(total: usize, per_caller: usize) -> Self {
        Self {
            total,
            per_caller,
            held: Mutex::default(),
        }
    }

    /// Takes a slot for `caller`.
    ///
    /// # Errors
    ///
    /// [`Full`] naming the bound that is reached.
    pub fn take(self: &Arc<Self>, caller: &str) -> Result<WaitSlot, Full> {
        let mut held = self.held.lock().expect("lock");
        if held.total >= self.total {
            return Err(Full::Server(self.total));
        }
        let mine = held.by_caller.get(caller).copied().unwrap_or(0);
        if mine >= self.per_caller {
            return Err(Full::Caller(self.per_caller));
        }
        held.total += 1;
        held.by_caller.insert(caller.to_owned(), mine + 1);
        Ok(WaitSlot {
            slots: self.clone(),
            caller: caller.to_owned(),
        })
    }

    /// Waits held right now (in all).
    #[must_use]
    pub fn held(&self) -> usize {
        self.held.lock().expect("lock").total
    }
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().expect("lock");
        held.total -= 1;
        if let Some(n) = held.by_caller.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                held.by_caller.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_in_all_and_per_caller_and_nothing_kept() {
        let slots = Arc::new(WaitSlots::new(3, 2));
        let a1 = slots.take("alice").unwrap();
        let a2 = slots.take("alice").unwrap();
        assert_eq!(slots.take("alice").unwrap_err(), Full::Caller(2));
        let b1 = slots.take("bob").unwrap();
        assert_eq!(slots.take("carol").unwrap_err(), Full::Server(3));
        drop(a1);
        let c1 = slots.take("carol").unwrap();
        drop((a2, b1, c1));
        assert_eq!(slots.held(), 0);
        assert!(
            slots.held.lock().unwrap().by_caller.is_empty(),
            "no caller entry outlives its waits"
        );
    }
}
