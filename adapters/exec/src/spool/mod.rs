//! The spool: the only code that touches run folders. One concern per file:
//! [`start`] creates run folders and launches supervisors, [`read`] reads a folder
//! into a [`SpoolView`] (interpreted by [`crate::translate`]), [`logs`] reads log
//! pages, [`control`] writes cancel markers and answers, [`sweep`] removes runs
//! past their retention. This file holds the [`Spool`] handle, the spool folder's
//! own checks and [`map_error`], where failed spool and process calls become
//! [`EngineError`]s.

use std::fs::DirBuilder;
use std::io::ErrorKind;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use taskgate_engine::EngineError;

use crate::config::{RunAs, Settings, ToolTarget};
use crate::layout::{self};

mod control;
mod logs;
mod read;
mod start;
mod sweep;
#[cfg(test)]
mod tests;

use read::read_meta;
pub(crate) use sweep::{SWEEP_AT_SERVE, SWEEP_AT_START};

/// Where new run folders are assembled before they are renamed into place.
const STAGING: &str = ".staging";

/// A handle on the spool folder of one engine.
#[derive(Debug, Clone)]
pub(crate) struct Spool {
    settings: Arc<Settings>,
}

/// What a start needs to know about the tool.
pub(crate) struct Launch<'a> {
    pub tool: &'a str,
    pub target: &'a ToolTarget,
    pub run_name: &'a str,
    pub arguments: &'a Value,
    pub keep_alive: Option<Duration>,
    /// The user the process runs as, when not the server's own.
    pub run_as: Option<RunAs>,
    /// The trace context the run is started under (tracing on): its
    /// `TRACEPARENT` and `TRACESTATE`.
    pub trace: Option<&'a taskgate_engine::TraceContext>,
}

/// Why `dir` must not be used as (part of) the spool: another user owns it, or
/// group or others may write it (and so plant or replace run records); `None`
/// when it is fine or does not exist yet.
pub(crate) fn spool_dir_problem(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir).ok()?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() {
        return Some(format!("{} is not a folder", dir.display()));
    }
    if meta.uid() != me {
        return Some(format!(
            "{} is owned by uid {}, not by this server's user (uid {me}): another user \
             could change its runs; give it to this user (chown) or choose another spool_dir",
            dir.display(),
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Some(format!(
            "{} is writable by group or others (mode {mode:04o}): another user could plant \
             or replace run records; chmod go-w it (0700 is usual)",
            dir.display()
        ));
    }
    None
}

/// The prefix of argument variables. `target.env` may not use `TASKGATE_`
/// names, so an argument never replaces one of the tool's fixed variables.
pub(crate) const ARG_ENV_PREFIX: &str = "TASKGATE_ARG_";

/// What a failed local call was doing; it decides which [`EngineError`] the
/// failure becomes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Action<'a> {
    /// A spool operation, as the message names it ("cannot create the run
    /// folder").
    Spool(&'a str),
    /// Reading the record `name` that taskgate itself wrote into a run folder.
    Record(&'a str),
    /// Writing the probe file of `taskgate check-config` into this spool folder.
    Probe(&'a Path),
    /// Sending this signal to a run's process group.
    Signal(Signal),
}

/// The one place where failed spool and process calls become
/// [`EngineError`]s: a damaged record is `Internal`; a refused probe write or
/// signal, and any spool operation refused for lack of permission, is
/// `PermissionDenied`; any other spool failure is `Unavailable` (retryable).
pub(crate) fn map_error(action: Action<'_>, error: std::io::Error) -> EngineError {
    match action {
        Action::Record(name) if error.kind() == ErrorKind::InvalidData => EngineError::Internal {
            message: format!("the spool file {name} is damaged"),
            source: Some(Box::new(error)),
        },
        Action::Record(_) => map_error(Action::Spool("cannot read the spool"), error),
        Action::Probe(dir) => EngineError::PermissionDenied {
            action: "write the spool folder".to_owned(),
            message: format!("{}: {error}", dir.display()),
        },
        Action::Signal(signal) => EngineError::PermissionDenied {
            action: format!("kill({signal})"),
            message: error.to_string(),
        },
        Action::Spool(what) if error.kind() == ErrorKind::PermissionDenied => {
            EngineError::PermissionDenied {
                action: "write the spool folder".to_owned(),
                message: format!("{what}: {error}"),
            }
        }
        Action::Spool(what) => EngineError::unavailable(what.to_owned(), error),
    }
}

impl Spool {
    pub(crate) fn new(settings: Arc<Settings>) -> Self {
        Self { settings }
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The folder of run `name`; a name taskgate cannot have produced is
    /// never a path and reads as not found.
    fn run_dir(&self, name: &str) -> Result<PathBuf, EngineError> {
        if layout::valid_run_name(name) {
            Ok(self.settings.spool_dir.join(name))
        } else {
            Err(EngineError::NotFound)
        }
    }

    /// The tool that started run `name` (from its record); `None` when there
    /// is no such run.
    ///
    /// # Errors
    ///
    /// A damaged or unreadable record.
    pub(crate) fn tool_of(&self, name: &str) -> Result<Option<String>, EngineError> {
        let dir = self.run_dir(name)?;
        Ok(read_meta(&dir)?.map(|meta| meta.tool))
    }

    /// The folder of run `name`, to watch for changes of its files.
    ///
    /// # Errors
    ///
    /// [`EngineError::NotFound`] for a name taskgate cannot have produced.
    pub(crate) fn folder_of(&self, name: &str) -> Result<PathBuf, EngineError> {
        self.run_dir(name)
    }

    /// Creates the spool folder (private to this user) if needed, and checks
    /// that it is this user's and not writable by group or others.
    pub(crate) fn ensure_spool(&self) -> Result<(), EngineError> {
        let staging = self.settings.spool_dir.join(STAGING);
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&staging)
            .map_err(|e| map_error(Action::Spool("cannot create the spool folder"), e))?;
        for dir in [&self.settings.spool_dir, &staging] {
            if let Some(problem) = spool_dir_problem(dir) {
                return Err(EngineError::PermissionDenied {
                    action: "use the spool folder".to_owned(),
                    message: problem,
                });
            }
        }
        Ok(())
    }

    /// Lets other users pass through (not list) the spool folder, so a process
    /// running as another user reaches its own run folder: mode 0711.
    fn open_spool_for_run_as(&self) -> Result<(), EngineError> {
        use std::os::unix::fs::PermissionsExt;
        let spool = &self.settings.spool_dir;
        let fail = |e| map_error(Action::Spool("cannot open the spool folder to run_as"), e);
        let mode = std::fs::metadata(spool).map_err(fail)?.permissions().mode() & 0o7777;
        if mode & 0o011 != 0o011 {
            std::fs::set_permissions(spool, std::fs::Permissions::from_mode(mode | 0o011))
                .map_err(fail)?;
        }
        Ok(())
    }
}
