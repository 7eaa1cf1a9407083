//! Steering a running run: the cancel marker (and the signals to its process
//! group) and the answers to its input requests.

use std::io::ErrorKind;
use std::time::SystemTime;

use nix::sys::signal::Signal;
use taskgate_engine::{EngineError, InputResponse, RunState};

use super::*;
use crate::layout::{self, CANCELLED, INPUT_DIR, RESPONSE_SUFFIX};
use crate::proc;

pub(super) fn signal(pgid: i32, signal: Signal) -> Result<(), EngineError> {
    proc::signal_group(pgid, Some(signal))
        .map(|_| ())
        .map_err(|e| map_error(Action::Signal(signal), std::io::Error::other(e)))
}

pub(super) fn not_outstanding(key: &str) -> EngineError {
    EngineError::Conflict {
        message: format!("no outstanding input request {key:?}"),
    }
}

impl Spool {
    /// Marks the run cancelled and signals its process group.
    pub(crate) fn cancel(&self, name: &str) -> Result<(), EngineError> {
        let dir = self.run_dir(name)?;
        let view = self.view(&dir)?;
        let snapshot = self.judge(&dir, &view)?;
        let child_alive = view.child.as_ref().is_some_and(proc::is_alive);
        let pgid = view.child.map_or(0, |c| c.pid);
        match snapshot.state {
            RunState::Cancelled { .. } => {
                // Asked again: past the grace period, escalate.
                let overdue = view
                    .cancelled_at
                    .is_some_and(|at| at + self.settings.grace_period <= SystemTime::now());
                if child_alive && overdue {
                    signal(pgid, Signal::SIGKILL)?;
                }
                Ok(())
            }
            RunState::Completed(_) | RunState::Failed { .. } => Err(EngineError::Conflict {
                message: "the run has already finished".to_owned(),
            }),
            RunState::Working { .. } | RunState::InputRequired { .. } => {
                match std::fs::File::create_new(dir.join(CANCELLED)) {
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                    Err(e) => {
                        return Err(map_error(Action::Spool("cannot mark the run cancelled"), e))
                    }
                }
                if child_alive {
                    signal(pgid, Signal::SIGTERM)?;
                }
                // Without a live process yet, the supervisor sees the marker.
                tracing::info!(run = name, "exec run cancelled");
                Ok(())
            }
        }
    }

    /// Writes the answer to outstanding request `key`.
    pub(crate) fn answer(
        &self,
        name: &str,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        let dir = self.run_dir(name)?;
        let view = self.view(&dir)?;
        let snapshot = self.judge(&dir, &view)?;
        let outstanding = match &snapshot.state {
            RunState::InputRequired { requests, .. } => requests.contains_key(key),
            _ => false,
        };
        if !outstanding {
            return Err(not_outstanding(key));
        }
        if response
            .content
            .as_ref()
            .is_some_and(|content| !content.is_object())
        {
            return Err(EngineError::InvalidInput {
                message: "the answer's content must be a JSON object".to_owned(),
            });
        }
        let bytes = serde_json::to_vec(response)
            .map_err(|e| EngineError::internal(format!("cannot encode the answer: {e}")))?;
        let input = dir.join(INPUT_DIR);
        match layout::write_exclusive(&input, &format!("{key}{RESPONSE_SUFFIX}"), &bytes) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(not_outstanding(key)),
            Err(e) => Err(map_error(Action::Spool("cannot write the answer"), e)),
        }
    }
}
