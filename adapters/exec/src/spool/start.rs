//! Starting a run: the run folder assembled under `.staging` and renamed into
//! place, the arguments as environment variables, and the supervisor launched.

use std::collections::BTreeMap;
use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use taskgate_engine::{spec_hash, EngineError, NativeRef};

use super::*;
use crate::layout::{
    self, to_ms, CommandSpec, Meta, ARGS, COMMAND, INPUT_DIR, META, RESULT, STATUS, SUPERVISOR,
};
use crate::proc;
use crate::translate::{translate, Translation};

/// The hash that decides whether two starts are the same run: the tool and
/// the arguments with object keys sorted (whatever serde_json's map order).
pub(crate) fn args_hash(tool: &str, arguments: &Value) -> String {
    let mut bytes = tool.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend(
        taskgate_engine::canonical_json(arguments)
            .to_string()
            .into_bytes(),
    );
    spec_hash(&bytes)
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

/// Gives the new folder `dir` to group `gid` with mode 3770: the group may
/// create entries (each taking the folder's group), not remove or rename
/// others' entries.
pub(super) fn share_with_group(dir: &Path, gid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(dir, None, Some(gid))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o3770))
}

impl Spool {
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
    pub(super) fn existing(&self, dir: &Path, args_hash: &str) -> Result<Option<()>, EngineError> {
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
    pub(super) fn stage(
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

    pub(super) fn command_spec(&self, launch: &Launch<'_>, dir: &Path) -> CommandSpec {
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
        // The run's place in the caller's trace (W3C names, as OpenTelemetry's
        // SDKs read them). When there is one it replaces a same-named variable
        // the tool's `env` or `pass_env` gives: the run belongs to this trace,
        // not to a fixed or inherited one. Without one (tracing off) those stay
        // as configured. No argument can set them (arguments are
        // `TASKGATE_ARG_*`).
        if let Some(trace) = launch.trace {
            env.insert("TRACEPARENT".to_owned(), trace.traceparent().to_owned());
            match trace.tracestate() {
                Some(state) => env.insert("TRACESTATE".to_owned(), state.to_owned()),
                None => env.remove("TRACESTATE"),
            };
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
    pub(super) fn launch(&self, dir: &Path, pass_env: &[String]) -> Result<(), EngineError> {
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
}
