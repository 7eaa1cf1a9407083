//! The exec engine of taskgate: a tool runs a local program, detached from the
//! server, its state kept in a spool folder on this host.
//!
//! - The tool's `target` names a fixed argv (`command`); arguments never pass
//!   through a shell. The process gets them as environment variables
//!   (`TASKGATE_ARG_<NAME>`) and as a JSON file (`TASKGATE_ARGS_FILE`).
//! - Each run is a folder `<spool_dir>/<run_name>`; its name is the
//!   [`NativeRef`]. A small detached supervisor (`taskgate supervise <dir>`,
//!   see [`supervise_main`]) launches the process in its own process group,
//!   records its pid and start time, keeps the tails of its output, waits for
//!   it and records its exit. A restarted server, or a second one on the same
//!   host, reads the same folder.
//! - The process may write a result (`TASKGATE_RESULT_FILE`, JSON), a status
//!   (`TASKGATE_STATUS_FILE`, `{"message", "progress", "total"}` or plain
//!   text), and ask for input (`TASKGATE_INPUT_DIR/<key>.request.json` with
//!   `{"message", "requestedSchema"}`, answered by
//!   `<key>.response.json` with `{"action", "content"}`). Write them to a
//!   temporary name and rename, so taskgate never reads half a file.
//!
//! The process also gets `TASKGATE_RUN_DIR`, `TASKGATE_RUN_NAME` and
//! `TASKGATE_TOOL`, and, when the server traces the call, `TRACEPARENT` (and
//! `TRACESTATE`) of its engine-start span, replacing any the tool's `env` or
//! `pass_env` would give. Of taskgate's own environment only the `pass_env` names
//! reach it (by default `PATH`, the user's name, locale and the like; not
//! `HOME`), and its supervisor starts from an environment cleared to those
//! names. With `run_as` it runs as another user, who cannot read the server's
//! or the supervisor's `/proc/PID/environ` nor taskgate's records.
//!
//! Note for service managers: supervisors and tool processes live outside the
//! server's process tree; under systemd use `KillMode=process` (or a separate
//! unit for them) so stopping taskgate does not stop running tools.

mod buffer;
mod config;
mod folder;
mod hold;
mod layout;
mod notice;
mod proc;
mod spool;
mod supervisor;
mod translate;

use std::sync::Arc;
use std::time::{Duration, Instant};

use taskgate_engine::{
    async_trait, Capabilities, ConfigError, Engine, EngineError, InputResponse, LogPage, NativeRef,
    Pipeline, Snapshot, StartRequest, ToolDecl,
};

pub use config::{EngineSettings, ToolTarget};
pub use supervisor::supervise_main;

use spool::{map_error, Action, Launch, Spool};

/// The `kind` of this engine in `[engines.NAME]`.
pub const KIND: &str = "exec";

/// How often [`Pipeline::wait_for_change`] looks at the spool folder while a
/// client request waits when file-system notification is not available (local
/// files only; nothing upstream).
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// With file-system notification, the longest a wait goes without reading the
/// run's files anyway: a change notification cannot be missed for longer.
const RECHECK_EVERY: Duration = Duration::from_secs(2);

/// Builds an exec engine from its `[engines.NAME]` table (without `kind` and
/// `call_timeout`). Writes no file: the spool folder is created on first use.
/// An existing spool folder owned by another user, or writable by group or
/// others, is refused here, so `serve` and `check-config` do not start on it.
///
/// # Errors
///
/// A [`ConfigError`] keyed by the offending setting (`spool_dir`,
/// `tail_bytes`, `supervisor`, `grace_period`, `max_result_bytes`, or an
/// unknown key).
pub async fn build(settings: serde_json::Value) -> Result<Arc<dyn Engine>, ConfigError> {
    let settings: EngineSettings = taskgate_engine::from_value(settings)?;
    let settings = settings.validate(
        |name| std::env::var(name).ok(),
        || std::env::current_exe().ok(),
    )?;
    if let Some(problem) = spool::spool_dir_problem(&settings.spool_dir) {
        return Err(ConfigError::new("spool_dir", problem));
    }
    Ok(Arc::new(ExecEngine {
        spool: Spool::new(Arc::new(settings)),
        folders: notice::Folders::default(),
    }))
}

/// An exec engine: one spool folder and one supervisor command. Built by
/// [`build`].
#[derive(Debug)]
pub struct ExecEngine {
    spool: Spool,
    /// The one file-system watch of the run folders waits look at, shared
    /// by the engine's tools.
    folders: notice::Folders,
}

#[async_trait]
impl Engine for ExecEngine {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn bind(&self, tool: &ToolDecl) -> Result<Arc<dyn Pipeline>, ConfigError> {
        let mut target: ToolTarget = tool.target()?;
        target.validate()?;
        let run_as = target.run_as()?;
        target.resolve_relative_program();
        Ok(Arc::new(ExecPipeline {
            spool: self.spool.clone(),
            folders: self.folders.clone(),
            tool: tool.name.clone(),
            target: Arc::new(target),
            keep_alive: tool.keep_alive,
            run_as,
            owned: std::sync::Mutex::default(),
        }))
    }

    async fn probe(&self) -> Result<Vec<String>, EngineError> {
        let spool = self.spool.clone();
        blocking(move || {
            spool.ensure_spool()?;
            let settings = spool.settings();
            let probe = settings.spool_dir.join(".staging").join(".probe");
            std::fs::write(&probe, b"")
                .and_then(|()| std::fs::remove_file(&probe))
                .map_err(|e| map_error(Action::Probe(&settings.spool_dir), e))?;
            let program = &settings.supervisor[0];
            if !is_executable(std::path::Path::new(program)) {
                return Err(EngineError::InvalidInput {
                    message: format!("the supervisor {program:?} is not an executable file"),
                });
            }
            let size = spool.size();
            let oldest = size.oldest.map_or_else(
                || "none".to_owned(),
                |t| humantime::format_rfc3339_seconds(t).to_string(),
            );
            Ok(vec![
                format!("spool folder {} is writable", settings.spool_dir.display()),
                format!(
                    "spool: {} runs, {} bytes, oldest created {oldest}",
                    size.runs, size.bytes
                ),
                format!("supervisor: {}", settings.supervisor.join(" ")),
            ])
        })
        .await
    }

    /// Removes run folders past their retention, looking at no more than
    /// 256 of them; a live run is never removed.
    async fn tidy(&self) -> Vec<String> {
        let spool = self.spool.clone();
        let swept = blocking(move || Ok(spool.sweep(spool::SWEEP_AT_SERVE))).await;
        match swept {
            Ok(s) if s.removed > 0 => vec![format!(
                "exec spool: {} of {} runs looked at were past their retention and removed",
                s.removed, s.examined
            )],
            _ => Vec::new(),
        }
    }
}

/// A tool bound to a local program. Made by [`ExecEngine`]'s
/// [`Engine::bind`].
#[derive(Debug)]
pub struct ExecPipeline {
    spool: Spool,
    folders: notice::Folders,
    tool: String,
    target: Arc<ToolTarget>,
    keep_alive: Option<Duration>,
    run_as: Option<config::RunAs>,
    /// Names of runs already seen to be this tool's. A run's record (its tool)
    /// is written before the run exists under its name and never changes, so
    /// it is read once per run, not once per poll. Cleared when full.
    owned: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// The most run names [`ExecPipeline::owned`] remembers.
const OWNED_NAMES: usize = 4096;

impl ExecPipeline {
    /// Refuses a run that is not this tool's: the engine's spool holds the
    /// runs of every tool bound to it, and a reference to another tool's run
    /// (even inside a validly sealed handle) reads as not found.
    fn own(&self, run: &str) -> Result<(), EngineError> {
        let mut owned = self
            .owned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if owned.contains(run) {
            return Ok(());
        }
        if self.spool.tool_of(run)?.as_deref() != Some(self.tool.as_str()) {
            return Err(EngineError::NotFound);
        }
        if owned.len() >= OWNED_NAMES {
            owned.clear();
        }
        owned.insert(run.to_owned());
        Ok(())
    }
}

#[async_trait]
impl Pipeline for ExecPipeline {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            cancel: true,
            input: true,
            idempotent_start: true,
            locate: true,
            logs: true,
            max_retention: None,
        }
    }

    async fn start(&self, request: StartRequest) -> Result<NativeRef, EngineError> {
        let spool = self.spool.clone();
        let tool = self.tool.clone();
        let target = Arc::clone(&self.target);
        let keep_alive = request.keep_alive.or(self.keep_alive);
        let run_as = self.run_as;
        blocking(move || {
            spool.start(&Launch {
                tool: &tool,
                target: &target,
                run_name: &request.run_name,
                arguments: &request.arguments,
                keep_alive,
                run_as,
                trace: request.trace.as_ref(),
            })
        })
        .await
    }

    /// Made on the spot, on the async thread that serves the request: 11 to
    /// 14 system calls on local files cost less than handing the read to a
    /// worker thread and back (two wake-ups and their context switches). A
    /// crowd polling one run shares one read (single-flight gathers it before
    /// the read begins), so a read on the spot holds up no crowd. This is why
    /// `spool_dir` must be a local folder.
    async fn read(&self, run: &NativeRef) -> Result<Snapshot, EngineError> {
        self.own(run)?;
        self.spool.read(run)
    }

    async fn cancel(&self, run: &NativeRef) -> Result<(), EngineError> {
        self.own(run)?;
        let spool = self.spool.clone();
        let run = run.clone();
        blocking(move || spool.cancel(&run)).await
    }

    async fn answer(
        &self,
        run: &NativeRef,
        key: &str,
        response: &InputResponse,
    ) -> Result<(), EngineError> {
        self.own(run)?;
        let spool = self.spool.clone();
        let (run, key, response) = (run.clone(), key.to_owned(), response.clone());
        blocking(move || spool.answer(&run, &key, &response)).await
    }

    async fn locate(&self, run_name: &str) -> Result<Option<NativeRef>, EngineError> {
        match self.own(run_name) {
            Ok(()) => {}
            Err(EngineError::NotFound) => return Ok(None),
            Err(e) => return Err(e),
        }
        let spool = self.spool.clone();
        let run_name = run_name.to_owned();
        blocking(move || spool.locate(&run_name)).await
    }

    /// Waits on file-system notification of the run's folder (the `notify`
    /// crate: inotify on Linux; one watcher for the whole engine, see
    /// `notice.rs`) until the state differs from `last` or `wait` has passed,
    /// reading the files after each change (and at least every
    /// [`RECHECK_EVERY`]). Where no watch can be set up (no inotify, its limit
    /// reached) it looks every 100 ms instead. Local files only, and only while
    /// a client request waits; the folder's watch ends with the last wait on it.
    async fn wait_for_change(
        &self,
        run: &NativeRef,
        last: &Snapshot,
        wait: Duration,
    ) -> Result<Snapshot, EngineError> {
        let deadline = Instant::now() + wait;
        self.own(run)?;
        let folder = self.spool.folder_of(run)?;
        let mut notice = match self.folders.watch(&folder) {
            Ok(notice) => Some(notice),
            Err(e) => {
                tracing::debug!(error = %e, "no file-system watch on a run folder; looking every 100 ms");
                None
            }
        };
        // Read once the watch is set: a change just before it is not missed.
        let mut snapshot = self.read(run).await?;
        loop {
            let now = Instant::now();
            if snapshot.state != last.state || now >= deadline {
                return Ok(snapshot);
            }
            let left = deadline - now;
            match notice.as_mut() {
                Some(n) => {
                    // Changes that came together are taken as one.
                    if let Ok(Err(_)) =
                        tokio::time::timeout(left.min(RECHECK_EVERY), n.changed()).await
                    {
                        notice = None;
                    }
                }
                None => tokio::time::sleep(WATCH_EVERY.min(left)).await,
            }
            snapshot = self.read(run).await?;
        }
    }

    async fn logs(
        &self,
        run: &NativeRef,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, EngineError> {
        self.own(run)?;
        let spool = self.spool.clone();
        let (run, cursor) = (run.clone(), cursor.map(str::to_owned));
        blocking(move || spool.logs(&run, cursor.as_deref(), limit)).await
    }

    async fn check(&self) -> Result<Vec<String>, EngineError> {
        let target = Arc::clone(&self.target);
        let run_as = self.run_as;
        blocking(move || {
            let program = std::path::Path::new(&target.command[0]);
            if program.is_absolute() && !is_executable(program) {
                return Err(EngineError::InvalidInput {
                    message: format!("{} is not an executable file", program.display()),
                });
            }
            if let Some(dir) = &target.working_dir {
                if !dir.is_dir() {
                    return Err(EngineError::InvalidInput {
                        message: format!("working_dir {} is not a folder", dir.display()),
                    });
                }
            }
            let Some(run_as) = run_as else {
                return Ok(vec![format!("runs {}", target.command[0])]);
            };
            if let Some(problem) = proc::run_as_problem() {
                return Err(EngineError::InvalidInput { message: problem });
            }
            Ok(vec![format!(
                "runs {} as uid {} gid {}",
                target.command[0], run_as.uid, run_as.gid
            )])
        })
        .await
    }
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs spool I/O off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, EngineError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| EngineError::Internal {
            message: "a spool task failed".to_owned(),
            source: Some(Box::new(e)),
        })?
}
