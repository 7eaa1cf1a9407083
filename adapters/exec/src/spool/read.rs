//! Reading a run folder into a [`SpoolView`] and judging it (through
//! [`crate::translate`]) into a [`Snapshot`].

use std::path::Path;
use std::time::SystemTime;

use serde_json::Value;
use taskgate_engine::{EngineError, NativeRef, Snapshot};

use super::*;
use crate::folder::{RunFolder, TooLarge};
use crate::layout::{
    self, ExitRecord, Meta, ProcRecord, StatusFile, CANCELLED, EXIT, INPUT_DIR, META, PID, RESULT,
    STATUS, STDERR_TAIL, STDOUT_TAIL, SUPERVISOR,
};
use crate::translate::{self, translate, SpoolView, Translation};

/// The longest status message kept from a plain-text status file.
pub(super) const MAX_STATUS_CHARS: usize = 500;

/// The run's own record (`meta.json`) alone; `None` when the folder or the
/// record is not there.
pub(super) fn read_meta(dir: &Path) -> Result<Option<Meta>, EngineError> {
    match RunFolder::open(dir) {
        Ok(Some(mut folder)) => folder.record::<Meta>(META),
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    }
    .map_err(|e| map_error(Action::Record(META), e))
}

/// How much of the status file is read.
pub(super) const MAX_STATUS_BYTES: u64 = 1 << 20;

/// The status file: JSON `{"message", "progress", "total"}`, a JSON string, or
/// plain text (its first non-empty line); and its mtime. Unreadable → none.
pub(super) fn status_of(
    read: Option<(&[u8], Option<SystemTime>)>,
) -> (Option<StatusFile>, Option<SystemTime>) {
    match read {
        Some((bytes, at)) => (parse_status(&String::from_utf8_lossy(bytes)), at),
        None => (None, None),
    }
}

pub(super) fn parse_status(text: &str) -> Option<StatusFile> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => serde_json::from_value(Value::Object(map)).ok(),
        Ok(Value::String(message)) => Some(StatusFile {
            message: Some(message),
            ..StatusFile::default()
        }),
        _ => {
            let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
            Some(StatusFile {
                message: Some(line.chars().take(MAX_STATUS_CHARS).collect()),
                ..StatusFile::default()
            })
        }
    }
}

/// What a result file that could not be read becomes: its size and the cap
/// when it is over the cap (it was not read), else the system's word.
pub(super) fn result_problem(error: &std::io::Error) -> String {
    match error.get_ref().and_then(|e| e.downcast_ref::<TooLarge>()) {
        Some(big) => format!(
            "the result file holds {} bytes, more than the engine's max_result_bytes ({}): \
             it was not read",
            big.size, big.max
        ),
        None => format!("the result file cannot be read: {error}"),
    }
}

impl Spool {
    /// Reads the run once.
    pub(crate) fn read(&self, name: &str) -> Result<Snapshot, EngineError> {
        let dir = self.run_dir(name)?;
        let view = self.view(&dir)?;
        self.judge(&dir, &view)
    }

    pub(super) fn judge(&self, dir: &Path, view: &SpoolView) -> Result<Snapshot, EngineError> {
        match translate(view, SystemTime::now()) {
            Translation::Run(snapshot) => Ok(snapshot),
            Translation::Gone { removable } => {
                if removable {
                    self.remove(dir);
                }
                Err(EngineError::NotFound)
            }
        }
    }

    /// Finds a run by its name.
    pub(crate) fn locate(&self, name: &str) -> Result<Option<NativeRef>, EngineError> {
        match self.read(name) {
            Ok(_) => Ok(Some(name.to_owned())),
            Err(EngineError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads everything translation needs from a run folder, and no more: on a
    /// working run its supervisor holds, `pid.json` and the hold on it, the
    /// cancel marker's and the status file's absence, two folder stats (and
    /// the input folder's listing once it has had a request).
    ///
    /// The files are read before the processes are looked up, so a run that
    /// ends between the two reads as "no exit recorded, nothing alive". The
    /// supervisor writes `exit.json` before it exits: once it is seen gone,
    /// a second read finds the record if there will ever be one. Only a run
    /// that looks lost pays for it.
    pub(crate) fn view(&self, dir: &Path) -> Result<SpoolView, EngineError> {
        let view = self.view_once(dir)?;
        if view.looks_lost() {
            return self.view_once(dir);
        }
        Ok(view)
    }

    pub(super) fn view_once(&self, dir: &Path) -> Result<SpoolView, EngineError> {
        let record_error = |name| move |e| map_error(Action::Record(name), e);
        let Some(mut folder) = RunFolder::open(dir).map_err(record_error(META))? else {
            return Ok(SpoolView::default());
        };
        let (child, child_held) = match folder
            .held_record::<ProcRecord>(PID)
            .map_err(record_error(PID))?
        {
            Some((record, held)) => (Some(record), held),
            None => (None, false),
        };
        // The supervisor lets go of its hold before it records the exit: a
        // held record means no exit is recorded yet, without a look.
        let exit: Option<ExitRecord> = if child_held {
            None
        } else {
            folder.record(EXIT).map_err(record_error(EXIT))?
        };
        let cancelled_at = folder.modified_at(CANCELLED);
        // A process its supervisor holds, neither ended nor cancelled, runs:
        // the run's own record (tool, creation time, retention) decides
        // nothing then, and is not read. Otherwise a folder without it is no run.
        let runs_held = child_held && exit.is_none() && cancelled_at.is_none();
        let meta: Option<Meta> = if runs_held {
            None
        } else {
            let meta = folder.record(META).map_err(record_error(META))?;
            if meta.is_none() {
                return Ok(SpoolView::default());
            }
            meta
        };
        // A record its supervisor holds is a process that runs: no look at
        // `/proc` (crate::hold).
        let child_now = if child_held {
            None
        } else {
            child.as_ref().and_then(|c| folder.start_time(c.pid))
        };
        // While the process runs on (not ended, not cancelled), its supervisor
        // decides nothing: neither its record nor its liveness is looked up.
        let child_runs = exit.is_none()
            && cancelled_at.is_none()
            && (child_held || translate::alive(child.as_ref(), child_now));
        let (supervisor, supervisor_now) = if child_runs {
            (None, None)
        } else {
            let supervisor: Option<ProcRecord> = folder
                .record(SUPERVISOR)
                .map_err(record_error(SUPERVISOR))?;
            let now = supervisor.as_ref().and_then(|s| folder.start_time(s.pid));
            (supervisor, now)
        };
        let (status, status_at) = status_of(folder.text(STATUS, MAX_STATUS_BYTES));
        // Every record in the folders is written by a rename, a link or a create,
        // each of which sets its folder's mtime: the two folders' mtimes and the
        // status file's (which the process may rewrite in place) are the newest
        // change, without a look at each file.
        let (input_at, requests) = folder.requests(dir, INPUT_DIR);
        let updated_at = [folder.modified(), input_at, status_at]
            .into_iter()
            .flatten()
            .max();
        let mut view = SpoolView {
            meta,
            supervisor_now,
            supervisor,
            child_now,
            child_held,
            child,
            cancelled_at,
            status,
            requests,
            updated_at,
            ..SpoolView::default()
        };
        if exit.is_some() {
            self.read_ended(&mut folder, &mut view);
        }
        view.exit = exit;
        Ok(view)
    }

    /// What an ended run left: its result (at most `max_result_bytes`, else
    /// why not) and the bodies of its output tails.
    fn read_ended(&self, folder: &mut RunFolder, view: &mut SpoolView) {
        // Its size is asked first: a result over the cap is never read.
        let max = self.settings.max_result_bytes;
        view.result = match folder.capped(RESULT, max) {
            Ok(Some(bytes)) => Some(
                serde_json::from_slice(&bytes)
                    .map_err(|e| format!("the result file is not JSON: {e}")),
            ),
            Ok(None) => None,
            Err(e) => Some(Err(result_problem(&e))),
        };
        // A tail is at most `tail_bytes` (16 MiB at most) and its header;
        // of a larger file, which no supervisor wrote, only the start is read.
        let limit = (crate::config::MAX_TAIL_BYTES + layout::MAX_TAIL_HEADER) as u64;
        let mut body = |name| {
            folder
                .text(name, limit)
                .map(|(bytes, _)| layout::tail_body(bytes).to_vec())
                .unwrap_or_default()
        };
        view.stdout_tail = body(STDOUT_TAIL);
        view.stderr_tail = body(STDERR_TAIL);
    }
}
