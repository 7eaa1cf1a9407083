//! The only module that touches the spool: it creates run folders, launches
//! supervisors, reads folders into a [`SpoolView`] and writes cancel markers
//! and answers. Everything it reads is interpreted by [`crate::translate`].

use std::collections::BTreeMap;
use std::fs::DirBuilder;
use std::io::ErrorKind;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::signal::Signal;
use serde_json::Value;
use taskgate_engine::{
    spec_hash, EngineError, InputResponse, LogLine, LogPage, NativeRef, RunState, Snapshot,
    MAX_PAGE_BYTES,
};

use crate::config::{RunAs, Settings, ToolTarget};
use crate::folder::{RunFolder, TooLarge};
use crate::layout::{
    self, to_ms, CommandSpec, ExitRecord, Meta, ProcRecord, StatusFile, ARGS, CANCELLED, COMMAND,
    EXIT, INPUT_DIR, META, PID, RESPONSE_SUFFIX, RESULT, STATUS, STDERR_TAIL, STDOUT_TAIL,
    SUPERVISOR,
};
use crate::proc;
use crate::translate::{self, split_lines, translate, LogCursor, SpoolView, Translation};

/// Where new run folders are assembled before they are renamed into place.
const STAGING: &str = ".staging";
/// The longest status message kept from a plain-text status file.
const MAX_STATUS_CHARS: usize = 500;

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

    /// Removes the run folders past their retention among at most `limit` of
    /// the spool's runs, starting at a varying place so that successive sweeps
    /// cover all of them. A run whose supervisor or process is alive is never
    /// removed (translation calls it removable only once both are gone), nor a
    /// folder that is not a run. Returns how many runs were looked at and removed.
    pub(crate) fn sweep(&self, limit: usize) -> Sweep {
        let mut names: Vec<String> = match std::fs::read_dir(&self.settings.spool_dir) {
            Ok(entries) => entries
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| layout::valid_run_name(n))
                .collect(),
            Err(_) => return Sweep::default(),
        };
        names.sort_unstable();
        let start = if names.is_empty() {
            0
        } else {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos() as usize);
            nanos % names.len()
        };
        let mut sweep = Sweep::default();
        let now = SystemTime::now();
        for name in names
            .iter()
            .cycle()
            .skip(start)
            .take(limit.min(names.len()))
        {
            let dir = self.settings.spool_dir.join(name);
            sweep.examined += 1;
            let Ok(view) = self.view(&dir) else { continue };
            if let Translation::Gone { removable: true } = translate(&view, now) {
                self.remove(&dir);
                sweep.removed += 1;
            }
        }
        sweep
    }

    /// The spool's size: its runs, their bytes and the oldest one's creation.
    pub(crate) fn size(&self) -> SpoolSize {
        let mut size = SpoolSize::default();
        let Ok(entries) = std::fs::read_dir(&self.settings.spool_dir) else {
            return size;
        };
        for entry in entries.filter_map(Result::ok) {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if !layout::valid_run_name(&name) {
                continue;
            }
            size.runs += 1;
            size.bytes += tree_bytes(&entry.path());
            if let Ok(Some(meta)) = layout::read_json::<Meta>(&entry.path().join(META)) {
                let created = layout::from_ms(meta.created_at_ms);
                size.oldest = Some(size.oldest.map_or(created, |o: SystemTime| o.min(created)));
            }
        }
        size
    }

    /// Creates the run folder and launches its supervisor; idempotent for the
    /// same run name and arguments. First sweeps a few runs past their retention.
    pub(crate) fn start(&self, launch: &Launch<'_>) -> Result<NativeRef, EngineError> {
        if !layout::valid_run_name(launch.run_name) {
            return Err(EngineError::InvalidInput {
                message: format!("run name {:?} is not usable", launch.run_name),
            });
        }
        // Arguments that cannot become the environment are refused before the
        // spool is touched.
        arg_env(launch.arguments)?;
        self.ensure_spool()?;
        if launch.run_as.is_some() {
            if let Some(problem) = proc::run_as_problem() {
                return Err(EngineError::PermissionDenied {
                    action: "run the tool as another user".to_owned(),
                    message: problem,
                });
            }
            self.open_spool_for_run_as()?;
        }
        let swept = self.sweep(SWEEP_AT_START);
        if swept.removed > 0 {
            tracing::debug!(
                removed = swept.removed,
                "exec runs past their retention removed"
            );
        }
        let dir = self.run_dir(launch.run_name)?;
        let args_hash = args_hash(launch.tool, launch.arguments);
        // A second attempt covers a folder whose retention passed and that was
        // removed on the way.
        for _ in 0..2 {
            if dir.exists() {
                match self.existing(&dir, &args_hash)? {
                    Some(()) => return Ok(launch.run_name.to_owned()),
                    None => continue,
                }
            }
            let staged = self.stage(launch, &dir, &args_hash)?;
            match std::fs::rename(&staged, &dir) {
                Ok(()) => {
                    self.launch(&dir, &launch.target.pass_env())?;
                    tracing::info!(
                        run = launch.run_name,
                        tool = launch.tool,
                        "exec run started"
                    );
                    return Ok(launch.run_name.to_owned());
                }
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&staged);
                    if !dir.exists() {
                        return Err(map_error(Action::Spool("cannot create the run folder"), e));
                    }
                    // Lost a race with a concurrent start: judge what won.
                }
            }
        }
        Err(EngineError::Conflict {
            message: "the run folder keeps changing under this start".to_owned(),
        })
    }

    /// Judges an existing folder for a start with `args_hash`: `Some` when it
    /// is the same run, `None` when it was expired and removed.
    fn existing(&self, dir: &Path, args_hash: &str) -> Result<Option<()>, EngineError> {
        let view = self.view(dir)?;
        if let Translation::Gone { removable } = translate(&view, SystemTime::now()) {
            if view.meta.is_none() {
                return Ok(None);
            }
            if removable {
                self.remove(dir);
                return Ok(None);
            }
        }
        // A read leaves out the run's record while its process runs: read it
        // here, where the arguments are compared.
        let meta = match view.meta {
            Some(meta) => Some(meta),
            None if view.runs_held() => read_meta(dir)?,
            None => None,
        };
        match meta {
            Some(meta) if meta.args_hash == args_hash => Ok(Some(())),
            Some(_) => Err(EngineError::Conflict {
                message: "a run with this name exists with other arguments".to_owned(),
            }),
            None => Ok(None),
        }
    }

    /// Assembles a complete run folder under the staging folder.
    fn stage(
        &self,
        launch: &Launch<'_>,
        dir: &Path,
        args_hash: &str,
    ) -> Result<PathBuf, EngineError> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let staged = self.settings.spool_dir.join(STAGING).join(format!(
            "{}.{}.{nanos}",
            launch.run_name,
            std::process::id()
        ));
        let outcome = (|| -> std::io::Result<()> {
            DirBuilder::new().mode(0o700).create(&staged)?;
            DirBuilder::new()
                .mode(0o700)
                .create(staged.join(INPUT_DIR))?;
            if let Some(run_as) = launch.run_as {
                // Shared with the process's group: it may create its result,
                // status and requests (setgid: every file takes the group),
                // but not remove or replace another's file (sticky), and it
                // reads only what is made readable by the group.
                for folder in [staged.clone(), staged.join(INPUT_DIR)] {
                    share_with_group(&folder, run_as.gid)?;
                }
            }
            // Only a saving for later polls: a folder that cannot take the mark
            // is listed on each poll instead.
            if let Err(error) = layout::mark_unwritten(&staged.join(INPUT_DIR)) {
                tracing::debug!(%error, "input folder not marked unwritten");
            }
            let args = serde_json::to_vec(launch.arguments).map_err(std::io::Error::other)?;
            layout::write_atomic_mode(&staged, ARGS, &args, layout::SHARED)?;
            layout::write_json(&staged, COMMAND, &self.command_spec(launch, dir))?;
            layout::write_json(
                &staged,
                META,
                &Meta {
                    tool: launch.tool.to_owned(),
                    args_hash: args_hash.to_owned(),
                    created_at_ms: to_ms(SystemTime::now()),
                    keep_alive_ms: launch
                        .keep_alive
                        .map(|k| u64::try_from(k.as_millis()).unwrap_or(u64::MAX)),
                },
            )
        })();
        match outcome {
            Ok(()) => Ok(staged),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staged);
                Err(map_error(Action::Spool("cannot prepare the run folder"), e))
            }
        }
    }

    fn command_spec(&self, launch: &Launch<'_>, dir: &Path) -> CommandSpec {
        let target = launch.target;
        let mut env = target.env.clone();
        let pass_env = target.pass_env();
        // Checked at the start of `start`, so no error is left here. An argument
        // never replaces a fixed variable, one passed through, or taskgate's own
        // (set below).
        for (name, value) in arg_env(launch.arguments).unwrap_or_default() {
            if !pass_env.contains(&name) {
                env.entry(name).or_insert(value);
            }
        }
        let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
        for (name, value) in [
            ("TASKGATE_ARGS_FILE", path(ARGS)),
            ("TASKGATE_RESULT_FILE", path(RESULT)),
            ("TASKGATE_STATUS_FILE", path(STATUS)),
            ("TASKGATE_INPUT_DIR", path(INPUT_DIR)),
            ("TASKGATE_RUN_DIR", dir.to_string_lossy().into_owned()),
            ("TASKGATE_RUN_NAME", launch.run_name.to_owned()),
            ("TASKGATE_TOOL", launch.tool.to_owned()),
        ] {
            env.insert(name.to_owned(), value);
        }
        CommandSpec {
            argv: target.command.clone(),
            env,
            pass_env,
            working_dir: target.working_dir.clone(),
            tail_bytes: self.settings.tail_bytes,
            grace_ms: u64::try_from(self.settings.grace_period.as_millis()).unwrap_or(u64::MAX),
            run_as: launch.run_as,
        }
    }

    /// Runs the supervisor's first stage, which returns once the process is
    /// spawned. On failure the folder is removed so a retry starts afresh.
    ///
    /// The supervisor starts from a cleared environment holding only the
    /// tool's `pass_env` variables: the process's parent, whose
    /// `/proc/PID/environ` the process can read, holds none of taskgate's
    /// keys, tokens or credentials.
    fn launch(&self, dir: &Path, pass_env: &[String]) -> Result<(), EngineError> {
        let argv = &self.settings.supervisor;
        let mut command = Command::new(&argv[0]);
        command.env_clear();
        for name in pass_env {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        let outcome = command
            .args(&argv[1..])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .output();
        let problem = match outcome {
            Ok(out) if out.status.success() => return Ok(()),
            Ok(out) => format!(
                "the supervisor {:?} failed ({}): {}",
                argv[0],
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => format!("cannot run the supervisor {:?}: {e}", argv[0]),
        };
        if dir.join(SUPERVISOR).exists() {
            // Slow, but it is there and will record what happens.
            tracing::warn!(%problem, "exec supervisor reported a problem after it started");
            return Ok(());
        }
        self.remove(dir);
        Err(EngineError::Unavailable {
            message: problem,
            source: None,
        })
    }

    /// Moves a run folder out of sight, then deletes it.
    fn remove(&self, dir: &Path) {
        let Some(name) = dir.file_name() else { return };
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let gone = self
            .settings
            .spool_dir
            .join(STAGING)
            .join(format!("gone.{}.{nanos}", name.to_string_lossy()));
        if std::fs::rename(dir, &gone).is_ok() {
            let _ = std::fs::remove_dir_all(&gone);
            tracing::debug!(run = %name.to_string_lossy(), "exec run removed after its retention");
        }
    }

    /// Reads the run once.
    pub(crate) fn read(&self, name: &str) -> Result<Snapshot, EngineError> {
        let dir = self.run_dir(name)?;
        let view = self.view(&dir)?;
        self.judge(&dir, &view)
    }

    fn judge(&self, dir: &Path, view: &SpoolView) -> Result<Snapshot, EngineError> {
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

    /// Reads up to `limit` lines of the run's output from `cursor`: standard
    /// output first, then standard error (each in order; the two are not
    /// interleaved, the spool keeps no times). At most [`MAX_PAGE_BYTES`] are
    /// read, half from each stream.
    pub(crate) fn logs(
        &self,
        name: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        let mut at = cursor
            .map(LogCursor::parse)
            .transpose()?
            .unwrap_or_default();
        let dir = self.run_dir(name)?;
        if read_meta(&dir)?.is_none() {
            return Err(EngineError::NotFound);
        }
        // Looked at before the tails: once the exit is recorded the tails are
        // final, so what is read after it is everything.
        let ended = dir.join(EXIT).exists();
        let mut lines = Vec::new();
        let mut complete = ended;
        for (file, source) in [(STDOUT_TAIL, "stdout"), (STDERR_TAIL, "stderr")] {
            let offset = match source {
                "stdout" => &mut at.stdout,
                _ => &mut at.stderr,
            };
            let left = limit.saturating_sub(lines.len());
            let read = read_stream(&dir.join(file), *offset, MAX_PAGE_BYTES / 2)?;
            if read.start > *offset {
                let lost = read.start - *offset;
                lines.push(LogLine::note(&format!(
                    "{lost} bytes of {source} are no longer kept (the engine's tail_bytes)"
                )));
                *offset = read.start;
            }
            let full = read.chunk.len() >= MAX_PAGE_BYTES / 2;
            let (mut taken, used) =
                split_lines(&read.chunk, source, left, ended && read.to_end, full);
            lines.append(&mut taken);
            *offset += used as u64;
            complete &= read.to_end && used == read.chunk.len();
        }
        Ok(LogPage {
            lines,
            cursor: at.encode(),
            complete,
        })
    }

    /// Reads everything translation needs from a run folder, and no more: on a
    /// working run, a handful of small files, one `/proc` stat, two folder
    /// stats and one listing of the input folder.
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

    fn view_once(&self, dir: &Path) -> Result<SpoolView, EngineError> {
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
        let exit: Option<ExitRecord> = folder.record(EXIT).map_err(record_error(EXIT))?;
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
        view.exit = exit;
        Ok(view)
    }
}

/// How many runs a start looks at for removal.
pub(crate) const SWEEP_AT_START: usize = 16;
/// How many runs the sweep at server start looks at.
pub(crate) const SWEEP_AT_SERVE: usize = 256;

/// What one sweep did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sweep {
    /// Runs looked at.
    pub examined: usize,
    /// Runs removed (past their retention, nothing alive).
    pub removed: usize,
}

/// The size of a spool.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SpoolSize {
    /// Run folders.
    pub runs: usize,
    /// Bytes of their files.
    pub bytes: u64,
    /// When the oldest run was created.
    pub oldest: Option<SystemTime>,
}

/// The run's own record (`meta.json`) alone; `None` when the folder or the
/// record is not there.
fn read_meta(dir: &Path) -> Result<Option<Meta>, EngineError> {
    match RunFolder::open(dir) {
        Ok(Some(mut folder)) => folder.record::<Meta>(META),
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    }
    .map_err(|e| map_error(Action::Record(META), e))
}

/// What one read of a tail file found.
#[derive(Debug, Default)]
struct StreamRead {
    /// The stream offset of the first byte the file keeps.
    start: u64,
    /// The bytes from the cursor (or from `start`, if the cursor is older).
    chunk: Vec<u8>,
    /// True when `chunk` reaches the end of the file.
    to_end: bool,
}

/// Reads at most `max` bytes of a tail file from stream offset `from`: its
/// header, one seek, one read. A missing file is an empty stream.
fn read_stream(path: &Path, from: u64, max: usize) -> Result<StreamRead, EngineError> {
    use std::io::{Read, Seek, SeekFrom};
    let fail = |e| map_error(Action::Spool("cannot read the run's output"), e);
    let mut file = match layout::open_plain(path) {
        Ok((file, _)) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if from > 0 {
                return Err(beyond());
            }
            return Ok(StreamRead {
                to_end: true,
                ..StreamRead::default()
            });
        }
        Err(e) => return Err(fail(e)),
    };
    let size = file.metadata().map_err(fail)?.len();
    let mut head = Vec::with_capacity(layout::MAX_TAIL_HEADER + 8);
    (&mut file)
        .take(layout::MAX_TAIL_HEADER as u64 + 8)
        .read_to_end(&mut head)
        .map_err(fail)?;
    let (start, header) = layout::tail_header(&head);
    let kept = size - header as u64;
    let from = from.max(start);
    if from > start + kept {
        return Err(beyond());
    }
    file.seek(SeekFrom::Start(header as u64 + (from - start)))
        .map_err(fail)?;
    let mut chunk = Vec::with_capacity(max.min(64 * 1024));
    file.take(max as u64)
        .read_to_end(&mut chunk)
        .map_err(fail)?;
    let to_end = from + chunk.len() as u64 >= start + kept;
    Ok(StreamRead {
        start,
        chunk,
        to_end,
    })
}

/// A cursor past the end of what the run printed: not one of this run's.
fn beyond() -> EngineError {
    EngineError::InvalidInput {
        message: "the log cursor is beyond this run's output".to_owned(),
    }
}

/// Bytes of the files under `dir` (not following links).
fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// How much of the status file is read.
const MAX_STATUS_BYTES: u64 = 1 << 20;

/// The status file: JSON `{"message", "progress", "total"}`, a JSON string, or
/// plain text (its first non-empty line); and its mtime. Unreadable → none.
fn status_of(
    read: Option<(&[u8], Option<SystemTime>)>,
) -> (Option<StatusFile>, Option<SystemTime>) {
    match read {
        Some((bytes, at)) => (parse_status(&String::from_utf8_lossy(bytes)), at),
        None => (None, None),
    }
}

fn parse_status(text: &str) -> Option<StatusFile> {
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

/// The hash that decides whether two starts are the same run: the tool and
/// the arguments with object keys sorted (whatever serde_json's map order).
pub(crate) fn args_hash(tool: &str, arguments: &Value) -> String {
    let mut bytes = tool.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend(canonical(arguments).to_string().into_bytes());
    spec_hash(&bytes)
}

fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<_> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), canonical(&map[k])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// `TASKGATE_ARG_<NAME>` for each top-level argument, by the one mapping of
/// the engine contract ([`taskgate_engine::arguments_env`]).
///
/// # Errors
///
/// [`EngineError::InvalidInput`] for two arguments on one name or a value with
/// a NUL byte.
pub(crate) fn arg_env(arguments: &Value) -> Result<BTreeMap<String, String>, EngineError> {
    taskgate_engine::arguments_env(ARG_ENV_PREFIX, arguments)
}

/// What a result file that could not be read becomes: its size and the cap
/// when it is over the cap (it was not read), else the system's word.
fn result_problem(error: &std::io::Error) -> String {
    match error.get_ref().and_then(|e| e.downcast_ref::<TooLarge>()) {
        Some(big) => format!(
            "the result file holds {} bytes, more than the engine's max_result_bytes ({}): \
             it was not read",
            big.size, big.max
        ),
        None => format!("the result file cannot be read: {error}"),
    }
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

/// Gives the new folder `dir` to group `gid` with mode 3770: the group may
/// create entries (each taking the folder's group), not remove or rename
/// others' entries.
fn share_with_group(dir: &Path, gid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(dir, None, Some(gid))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o3770))
}

/// The prefix of argument variables. `target.env` may not use `TASKGATE_`
/// names, so an argument never replaces one of the tool's fixed variables.
pub(crate) const ARG_ENV_PREFIX: &str = "TASKGATE_ARG_";

fn signal(pgid: i32, signal: Signal) -> Result<(), EngineError> {
    proc::signal_group(pgid, Some(signal))
        .map(|_| ())
        .map_err(|e| map_error(Action::Signal(signal), std::io::Error::other(e)))
}

fn not_outstanding(key: &str) -> EngineError {
    EngineError::Conflict {
        message: format!("no outstanding input request {key:?}"),
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::REQUEST_SUFFIX;
    use serde_json::json;
    use taskgate_engine::InputRequest;

    #[test]
    fn args_become_env_vars_by_the_shared_mapping() {
        let env = arg_env(&json!({
            "text": "$(touch /tmp/x); rm -rf /",
            "n": 3, "ok": true, "none": null,
            "list": [1, "a"], "obj": {"b": 1},
            "dash-name": "v"
        }))
        .unwrap();
        assert_eq!(env["TASKGATE_ARG_TEXT"], "$(touch /tmp/x); rm -rf /");
        assert_eq!(env["TASKGATE_ARG_N"], "3");
        assert_eq!(env["TASKGATE_ARG_OK"], "true");
        assert_eq!(env["TASKGATE_ARG_NONE"], "");
        assert_eq!(env["TASKGATE_ARG_LIST"], r#"[1,"a"]"#);
        assert_eq!(env["TASKGATE_ARG_OBJ"], r#"{"b":1}"#);
        assert_eq!(env["TASKGATE_ARG_DASH_NAME"], "v");
        assert!(arg_env(&json!([1])).unwrap().is_empty());
        // Two arguments on one name, and a NUL byte, are refused.
        assert!(arg_env(&json!({"targetEnv": "a", "targetenv": "b"})).is_err());
        assert!(arg_env(&json!({"nul": "a\u{0}b"})).is_err());
    }

    #[test]
    fn hash_ignores_key_order_but_not_values_or_tool() {
        let a = args_hash("t", &json!({"a": 1, "b": {"c": 2, "d": 3}}));
        let b: Value = serde_json::from_str(r#"{"b": {"d": 3, "c": 2}, "a": 1}"#).unwrap();
        assert_eq!(a, args_hash("t", &b));
        assert_ne!(a, args_hash("t", &json!({"a": 2, "b": {"c": 2, "d": 3}})));
        assert_ne!(a, args_hash("u", &b));
    }

    #[test]
    fn status_file_forms() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        let read_status = |path: &Path| {
            let mut folder = RunFolder::open(path.parent().unwrap()).unwrap().unwrap();
            let name = path.file_name().unwrap().to_str().unwrap();
            let (status, at) = status_of(folder.text(name, MAX_STATUS_BYTES));
            (status, at)
        };
        std::fs::write(&p, r#"{"message": "m", "progress": 3, "total": 10}"#).unwrap();
        let s = read_status(&p).0.unwrap();
        assert_eq!(
            (s.message.as_deref(), s.progress, s.total),
            (Some("m"), Some(3.0), Some(10.0))
        );
        std::fs::write(&p, "\n  step two \nmore").unwrap();
        assert_eq!(
            read_status(&p).0.unwrap().message.as_deref(),
            Some("step two")
        );
        std::fs::write(&p, r#""quoted""#).unwrap();
        assert_eq!(
            read_status(&p).0.unwrap().message.as_deref(),
            Some("quoted")
        );
        assert_eq!(read_status(&dir.path().join("none")), (None, None));
    }

    fn spool(dir: &Path) -> Spool {
        Spool::new(Arc::new(Settings {
            spool_dir: dir.to_owned(),
            tail_bytes: 1024,
            supervisor: vec!["/bin/false".to_owned()],
            grace_period: Duration::from_secs(1),
            max_result_bytes: 1024,
        }))
    }

    /// Sets the mtime of `path` to `ms` after the Unix epoch.
    fn set_mtime(path: &Path, ms: u64) {
        let file = std::fs::File::open(path).unwrap();
        file.set_modified(layout::from_ms(ms)).unwrap();
    }

    /// A run folder under `spool_dir` holding only its meta record and `input/`.
    fn meta_only_run(spool_dir: &Path) -> PathBuf {
        let dir = spool_dir.join("run");
        std::fs::create_dir_all(dir.join(INPUT_DIR)).unwrap();
        let meta = Meta {
            tool: "t".into(),
            args_hash: "h".into(),
            created_at_ms: 1_000,
            keep_alive_ms: None,
        };
        layout::write_json(&dir, META, &meta).unwrap();
        dir
    }

    #[test]
    fn updated_at_is_the_newest_of_the_folders_and_the_status_file() {
        let spool_dir = tempfile::tempdir().unwrap();
        let dir = meta_only_run(spool_dir.path());
        std::fs::write(dir.join(STATUS), "step one").unwrap();
        let s = spool(spool_dir.path());
        for (run_dir, input, status, newest) in [
            (5_000, 4_000, 3_000, 5_000),
            (5_000, 9_000, 3_000, 9_000),
            // A status file rewritten in place changes no folder.
            (5_000, 4_000, 7_000, 7_000),
        ] {
            set_mtime(&dir.join(STATUS), status);
            set_mtime(&dir.join(INPUT_DIR), input);
            set_mtime(&dir, run_dir);
            let view = s.view(&dir).unwrap();
            assert_eq!(view.updated_at, Some(layout::from_ms(newest)));
            assert_eq!(
                view.status.and_then(|st| st.message).as_deref(),
                Some("step one")
            );
        }
        // A record renamed into the folder moves the folder's mtime.
        set_mtime(&dir, 5_000);
        set_mtime(&dir.join(STATUS), 3_000);
        layout::write_json(&dir, EXIT, &layout::ExitRecord::default()).unwrap();
        let view = s.view(&dir).unwrap();
        assert!(view.updated_at.unwrap() > layout::from_ms(9_000));
    }

    #[test]
    fn an_input_folder_still_marked_unwritten_is_not_listed_and_the_first_request_clears_the_mark()
    {
        let spool_dir = tempfile::tempdir().unwrap();
        let dir = meta_only_run(spool_dir.path());
        let input = dir.join(INPUT_DIR);
        layout::mark_unwritten(&input).unwrap();
        set_mtime(&dir, 5_000);
        let s = spool(spool_dir.path());
        let view = s.view(&dir).unwrap();
        assert!(view.requests.is_empty());
        // The mark is no change: the run folder's mtime is the newest.
        assert_eq!(view.updated_at, Some(layout::from_ms(5_000)));
        // The process asks: creating the request moves the folder off the mark.
        let request = InputRequest {
            message: "which region?".into(),
            requested_schema: serde_json::json!({"type": "object"}),
            approval: false,
        };
        layout::write_json(&input, &format!("ask{REQUEST_SUFFIX}"), &request).unwrap();
        assert_ne!(
            std::fs::metadata(&input).unwrap().modified().unwrap(),
            layout::UNWRITTEN
        );
        let view = s.view(&dir).unwrap();
        assert_eq!(view.requests.get("ask"), Some(&request));
        assert!(view.updated_at.unwrap() > layout::from_ms(5_000));
        // The mark alone decides: with it put back by hand, the folder is not
        // listed, so the request is not seen.
        layout::mark_unwritten(&input).unwrap();
        assert!(s.view(&dir).unwrap().requests.is_empty());
    }

    #[test]
    fn a_running_process_needs_no_look_at_its_supervisor() {
        let spool_dir = tempfile::tempdir().unwrap();
        let dir = meta_only_run(spool_dir.path());
        let me = std::process::id() as i32;
        let record = ProcRecord {
            pid: me,
            start_time: proc::start_time(me).unwrap(),
        };
        layout::write_json(&dir, SUPERVISOR, &record).unwrap();
        layout::write_json(&dir, PID, &record).unwrap();
        let s = spool(spool_dir.path());
        let view = s.view(&dir).unwrap();
        assert_eq!(view.child_now, Some(record.start_time));
        assert_eq!(view.supervisor, None);
        assert_eq!(view.supervisor_now, None);
        assert!(matches!(
            s.read("run").unwrap().state,
            RunState::Working { .. }
        ));
        // Once it has ended, the supervisor is looked up (retention needs it).
        layout::write_json(&dir, EXIT, &layout::ExitRecord::default()).unwrap();
        assert_eq!(
            s.view(&dir).unwrap().supervisor_now,
            Some(record.start_time)
        );
    }

    #[test]
    fn a_process_record_its_supervisor_holds_runs_without_a_look_at_proc() {
        let spool_dir = tempfile::tempdir().unwrap();
        let dir = meta_only_run(spool_dir.path());
        // A pid no process has (above the kernel's pid_max), so by `/proc` the
        // process is gone and, without a supervisor, the run is lost.
        let record = ProcRecord {
            pid: i32::MAX,
            start_time: 7,
        };
        layout::write_json(&dir, PID, &record).unwrap();
        let s = spool(spool_dir.path());
        assert!(matches!(
            s.read("run").unwrap().state,
            RunState::Failed { .. }
        ));
        // Held (as a supervisor holds it while its process runs): working,
        // and `/proc` was not asked.
        let holder = std::fs::File::open(dir.join(PID)).unwrap();
        crate::hold::take(&holder).unwrap();
        let view = s.view(&dir).unwrap();
        assert!(view.child_held);
        assert_eq!(view.child_now, None);
        assert_eq!(view.supervisor, None);
        assert!(matches!(
            s.read("run").unwrap().state,
            RunState::Working { .. }
        ));
        // Held and running, the run's own record is not read: one that no
        // longer parses changes nothing. Once the hold ends it is read again.
        let meta_text = std::fs::read(dir.join(META)).unwrap();
        std::fs::write(dir.join(META), "{not json").unwrap();
        assert!(s.view(&dir).unwrap().meta.is_none());
        assert!(matches!(
            s.read("run").unwrap().state,
            RunState::Working { .. }
        ));
        // …but a cancellation asked (or an exit recorded) is judged with it.
        std::fs::File::create(dir.join(CANCELLED)).unwrap();
        assert!(s.read("run").is_err(), "the record is read once cancelled");
        std::fs::remove_file(dir.join(CANCELLED)).unwrap();
        std::fs::write(dir.join(META), &meta_text).unwrap();
        // Let go (the supervisor reaped it, or died): judged by `/proc` again.
        drop(holder);
        assert!(!s.view(&dir).unwrap().child_held);
        assert!(matches!(
            s.read("run").unwrap().state,
            RunState::Failed { .. }
        ));
    }
}
