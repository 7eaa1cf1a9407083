//! Settings of an exec engine (`[engines.NAME]` with `kind = "exec"`) and the
//! `target` of its tools. The doc comments are the user documentation.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use taskgate_engine::ConfigError;

/// The default number of bytes kept from each output stream (64 KiB).
pub(crate) const DEFAULT_TAIL_BYTES: usize = 64 * 1024;
/// The largest `tail_bytes` accepted (16 MiB).
pub(crate) const MAX_TAIL_BYTES: usize = 16 * 1024 * 1024;
/// The default grace period between SIGTERM and SIGKILL on cancel.
pub(crate) const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(5);

/// The default cap on the size of a run's `result.json` (4 MiB).
pub(crate) const DEFAULT_MAX_RESULT_BYTES: u64 = 4 * 1024 * 1024;
/// The largest `max_result_bytes` accepted (256 MiB).
pub(crate) const MAX_MAX_RESULT_BYTES: u64 = 256 * 1024 * 1024;

/// Variables passed through from taskgate's own environment when a tool does
/// not say otherwise. Everything else (taskgate's keys, cloud credentials,
/// `HOME` and the files under it) is withheld from tool processes.
pub(crate) const DEFAULT_PASS_ENV: &[&str] = &[
    "PATH", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
];

/// `[engines.NAME]` for `kind = "exec"`: tools run as local processes, each
/// run's state kept in a spool folder on this host.
///
/// ```toml
/// [engines.local]
/// kind = "exec"
/// spool_dir = "/var/lib/taskgate/spool"   # optional
/// tail_bytes = 65536                      # optional
/// grace_period = "5s"                     # optional
/// max_result_bytes = 4194304              # optional
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSettings {
    /// The folder holding one sub-folder per run. Every taskgate server on this
    /// host that should see the same runs must use the same folder. Absolute.
    /// Default: `$XDG_STATE_HOME/taskgate/spool`, or
    /// `$HOME/.local/state/taskgate/spool` when `XDG_STATE_HOME` is unset.
    /// It must be owned by the server's user and not writable by group or
    /// others: `serve` and `check-config` refuse it otherwise. Created (mode
    /// 0700) on first use when missing.
    #[serde(default)]
    pub spool_dir: Option<PathBuf>,

    /// How many bytes of the end of each of standard output and standard error
    /// are kept (the rest is discarded as it is read). Default 65536; at most
    /// 16 MiB.
    #[serde(default)]
    pub tail_bytes: Option<usize>,

    /// The command that launches a run's supervisor, the small detached
    /// process that waits for the tool process and records how it ended; the
    /// run folder is appended as its last argument. Default: this taskgate
    /// binary with `supervise` (`["/path/to/taskgate", "supervise"]`). It
    /// starts from a cleared environment holding only the tool's `pass_env`
    /// variables (the process can read its parent's environment).
    #[serde(default)]
    pub supervisor: Option<Vec<String>>,

    /// How long a cancelled process may take to exit after SIGTERM before its
    /// process group gets SIGKILL, as a duration such as `"5s"`. Default 5s.
    #[serde(default)]
    pub grace_period: Option<String>,

    /// The largest `result.json` a run may leave, in bytes. A larger one is not
    /// read: the run completes as a tool error naming this cap. Default
    /// 4194304 (4 MiB); at most 256 MiB.
    #[serde(default)]
    pub max_result_bytes: Option<u64>,
}

/// The validated engine settings.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub spool_dir: PathBuf,
    pub tail_bytes: usize,
    pub supervisor: Vec<String>,
    pub grace_period: Duration,
    pub max_result_bytes: u64,
}

impl EngineSettings {
    /// Checks the values and fills in defaults from `env` (a lookup of
    /// environment variables) and `current_exe`.
    pub(crate) fn validate(
        self,
        env: impl Fn(&str) -> Option<String>,
        current_exe: impl FnOnce() -> Option<PathBuf>,
    ) -> Result<Settings, ConfigError> {
        let spool_dir = match self.spool_dir {
            Some(dir) => dir,
            None => default_spool_dir(env).ok_or_else(|| {
                ConfigError::new(
                    "spool_dir",
                    "neither XDG_STATE_HOME nor HOME is set: set spool_dir",
                )
            })?,
        };
        if !spool_dir.is_absolute() {
            return Err(ConfigError::new(
                "spool_dir",
                format!("must be an absolute path, not {}", spool_dir.display()),
            ));
        }
        let tail_bytes = self.tail_bytes.unwrap_or(DEFAULT_TAIL_BYTES);
        if tail_bytes == 0 || tail_bytes > MAX_TAIL_BYTES {
            return Err(ConfigError::new(
                "tail_bytes",
                format!("must be between 1 and {MAX_TAIL_BYTES}, not {tail_bytes}"),
            ));
        }
        let supervisor = match self.supervisor {
            Some(argv) => {
                if argv.first().is_none_or(String::is_empty) {
                    return Err(ConfigError::new(
                        "supervisor",
                        "must name a program: [\"/path/to/taskgate\", \"supervise\"]",
                    ));
                }
                argv
            }
            None => {
                let exe = current_exe().ok_or_else(|| {
                    ConfigError::new(
                        "supervisor",
                        "cannot find this program's own path: set supervisor",
                    )
                })?;
                vec![exe.to_string_lossy().into_owned(), "supervise".to_owned()]
            }
        };
        let grace_period = match self.grace_period {
            Some(text) => humantime::parse_duration(&text).map_err(|e| {
                ConfigError::new("grace_period", format!("{text:?} is not a duration: {e}"))
            })?,
            None => DEFAULT_GRACE_PERIOD,
        };
        let max_result_bytes = self.max_result_bytes.unwrap_or(DEFAULT_MAX_RESULT_BYTES);
        if max_result_bytes == 0 || max_result_bytes > MAX_MAX_RESULT_BYTES {
            return Err(ConfigError::new(
                "max_result_bytes",
                format!("must be between 1 and {MAX_MAX_RESULT_BYTES}, not {max_result_bytes}"),
            ));
        }
        Ok(Settings {
            spool_dir,
            tail_bytes,
            supervisor,
            grace_period,
            max_result_bytes,
        })
    }
}

fn default_spool_dir(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let nonempty = |name: &str| env(name).filter(|v| !v.is_empty());
    let state = nonempty("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|home| PathBuf::from(home).join(".local/state")))?;
    Some(state.join("taskgate").join("spool"))
}

/// A tool's `target` table for an exec engine.
///
/// ```toml
/// target = { command = ["/opt/pipelines/analyze.sh", "--fast"], env = { MODE = "batch" } }
/// ```
///
/// The process never sees a shell: `command` is executed as is, and the tool's
/// arguments reach it only as environment variables (`TASKGATE_ARG_<NAME>`)
/// and as a JSON file (`TASKGATE_ARGS_FILE`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolTarget {
    /// The program and its fixed arguments. The program is an absolute path, a
    /// relative path with a `/` (resolved against the folder taskgate was started
    /// in), or a name looked up in the `PATH` passed to the process.
    pub command: Vec<String>,

    /// Extra environment variables, fixed for every run. Names may not start
    /// with `TASKGATE_`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,

    /// The folder the process starts in (absolute). Default: the run's spool
    /// folder.
    #[serde(default)]
    pub working_dir: Option<PathBuf>,

    /// Names of taskgate's own environment variables passed through to the
    /// process. Default: `PATH`, `USER`, `LOGNAME`, `SHELL`, `LANG`, `LC_ALL`,
    /// `LC_CTYPE`, `TZ`, `TMPDIR` (not `HOME`: name it to pass it); nothing
    /// else of taskgate's environment reaches the process, nor its supervisor.
    /// Never name a variable holding a secret of taskgate's own.
    #[serde(default)]
    pub pass_env: Option<Vec<String>>,

    /// Runs the process as another user: a user name (its uid and primary
    /// group, looked up when the configuration is loaded) or `"uid:gid"`.
    /// Supplementary groups are dropped. Not root (uid 0). Needs the server to
    /// run as root, or to hold CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_FOWNER
    /// and CAP_DAC_OVERRIDE as file capabilities (ambient capabilities would
    /// pass on to the process: a run is refused then). The run folder is then
    /// shared with that group (sticky, setgid): the process reads its
    /// arguments and answers and writes its result, status and requests, but
    /// cannot read or replace taskgate's records, nor see other runs.
    /// Default: the server's own user.
    #[serde(default)]
    pub run_as: Option<String>,
}

/// The user a tool's process runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
pub(crate) struct RunAs {
    /// The user id.
    pub uid: u32,
    /// The group id (the only group the process keeps).
    pub gid: u32,
}

impl RunAs {
    /// Parses `"uid:gid"`, or looks up a user name with `lookup` (its uid and
    /// primary gid); uid 0 is refused.
    pub(crate) fn parse(
        text: &str,
        lookup: impl FnOnce(&str) -> Option<(u32, u32)>,
    ) -> Result<Self, String> {
        let pair = if let Some((uid, gid)) = text.split_once(':') {
            match (uid.parse::<u32>(), gid.parse::<u32>()) {
                (Ok(uid), Ok(gid)) => (uid, gid),
                _ => return Err(format!("{text:?} is neither a user name nor \"uid:gid\"")),
            }
        } else if text.is_empty() {
            return Err("must name a user or \"uid:gid\"".to_owned());
        } else if let Ok(uid) = text.parse::<u32>() {
            return Err(format!(
                "a bare number is ambiguous: write \"{uid}:GID\" with the group id"
            ));
        } else {
            lookup(text).ok_or_else(|| format!("no user named {text:?} on this host"))?
        };
        if pair.0 == 0 {
            return Err("running tools as root (uid 0) is no separation".to_owned());
        }
        Ok(Self {
            uid: pair.0,
            gid: pair.1,
        })
    }
}

impl ToolTarget {
    /// Makes a relative program path (one with a `/`) absolute against the
    /// current folder, since the process itself starts in its run folder.
    pub(crate) fn resolve_relative_program(&mut self) {
        let program = std::path::Path::new(&self.command[0]);
        if program.is_relative() && self.command[0].contains('/') {
            if let Ok(cwd) = std::env::current_dir() {
                self.command[0] = cwd.join(program).to_string_lossy().into_owned();
            }
        }
    }

    /// Checks the values; error keys are relative to the tool (`target.x`).
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.command.first().is_none_or(String::is_empty) {
            return Err(ConfigError::new(
                "target.command",
                "must name a program: [\"/path/to/program\", \"arg\", ...]",
            ));
        }
        if let Some(i) = self.command.iter().position(|a| a.contains('\0')) {
            return Err(ConfigError::new(
                format!("target.command[{i}]"),
                "must not contain a NUL byte",
            ));
        }
        for (name, value) in &self.env {
            if !valid_env_name(name) {
                return Err(ConfigError::new(
                    format!("target.env.{name}"),
                    "is not a valid environment variable name",
                ));
            }
            if name.starts_with("TASKGATE_") {
                return Err(ConfigError::new(
                    format!("target.env.{name}"),
                    "names starting with TASKGATE_ are reserved for taskgate",
                ));
            }
            if value.contains('\0') {
                return Err(ConfigError::new(
                    format!("target.env.{name}"),
                    "must not contain a NUL byte",
                ));
            }
        }
        if let Some(dir) = &self.working_dir {
            if !dir.is_absolute() {
                return Err(ConfigError::new(
                    "target.working_dir",
                    format!("must be an absolute path, not {}", dir.display()),
                ));
            }
        }
        if let Some(run_as) = &self.run_as {
            RunAs::parse(run_as, |_| Some((u32::MAX, u32::MAX)))
                .map_err(|e| ConfigError::new("target.run_as", e))?;
        }
        for (i, name) in self.pass_env.iter().flatten().enumerate() {
            if !valid_env_name(name) {
                return Err(ConfigError::new(
                    format!("target.pass_env[{i}]"),
                    "is not a valid environment variable name",
                ));
            }
        }
        Ok(())
    }

    /// The user the process runs as, when `run_as` is set; a user name is
    /// looked up in the host's user database.
    pub(crate) fn run_as(&self) -> Result<Option<RunAs>, ConfigError> {
        let Some(text) = &self.run_as else {
            return Ok(None);
        };
        RunAs::parse(text, |name| {
            nix::unistd::User::from_name(name)
                .ok()
                .flatten()
                .map(|u| (u.uid.as_raw(), u.gid.as_raw()))
        })
        .map(Some)
        .map_err(|e| ConfigError::new("target.run_as", e))
    }

    /// The names passed through from taskgate's environment.
    pub(crate) fn pass_env(&self) -> Vec<String> {
        self.pass_env
            .clone()
            .unwrap_or_else(|| DEFAULT_PASS_ENV.iter().map(|s| (*s).to_owned()).collect())
    }
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use taskgate_engine::from_value;

    fn settings(v: serde_json::Value) -> Result<Settings, ConfigError> {
        from_value::<EngineSettings>(v)?.validate(
            |name| (name == "HOME").then(|| "/home/u".to_owned()),
            || Some(PathBuf::from("/usr/bin/taskgate")),
        )
    }

    #[test]
    fn defaults() {
        let s = settings(json!({})).unwrap();
        assert_eq!(
            s.spool_dir,
            PathBuf::from("/home/u/.local/state/taskgate/spool")
        );
        assert_eq!(s.tail_bytes, 65536);
        assert_eq!(s.supervisor, vec!["/usr/bin/taskgate", "supervise"]);
        assert_eq!(s.grace_period, Duration::from_secs(5));
        assert_eq!(s.max_result_bytes, 4 * 1024 * 1024);
        let xdg = EngineSettings::default()
            .validate(
                |name| (name == "XDG_STATE_HOME").then(|| "/state".to_owned()),
                || None::<PathBuf>.or(Some("/x".into())),
            )
            .unwrap();
        assert_eq!(xdg.spool_dir, PathBuf::from("/state/taskgate/spool"));
    }

    #[test]
    fn explicit_values() {
        let s = settings(json!({
            "spool_dir": "/tmp/s", "tail_bytes": 10, "supervisor": ["/bin/sup"], "grace_period": "250ms"
        }))
        .unwrap();
        assert_eq!(s.spool_dir, PathBuf::from("/tmp/s"));
        assert_eq!(s.tail_bytes, 10);
        assert_eq!(s.supervisor, vec!["/bin/sup"]);
        assert_eq!(s.grace_period, Duration::from_millis(250));
    }

    #[test]
    fn rejections_name_the_key() {
        let key = |v| settings(v).unwrap_err().key;
        assert_eq!(key(json!({"spool": "/x"})), "spool");
        assert_eq!(key(json!({"spool_dir": "rel"})), "spool_dir");
        assert_eq!(key(json!({"tail_bytes": 0})), "tail_bytes");
        assert_eq!(key(json!({"supervisor": []})), "supervisor");
        assert_eq!(key(json!({"grace_period": "soon"})), "grace_period");
        assert_eq!(key(json!({"max_result_bytes": 0})), "max_result_bytes");
        assert_eq!(
            key(json!({"max_result_bytes": 1_u64 << 40})),
            "max_result_bytes"
        );
        let none = EngineSettings::default().validate(|_| None, || Some("/x".into()));
        assert_eq!(none.unwrap_err().key, "spool_dir");
    }

    #[test]
    fn targets() {
        let target = |v| -> Result<ToolTarget, ConfigError> {
            let t: ToolTarget = from_value(v).map_err(|e| e.within("target"))?;
            t.validate()?;
            Ok(t)
        };
        let t = target(json!({"command": ["/bin/echo", "hi"], "env": {"A": "1"}})).unwrap();
        assert_eq!(t.pass_env()[0], "PATH");
        assert!(
            !t.pass_env().iter().any(|n| n == "HOME"),
            "HOME is not passed by default"
        );
        assert_eq!(t.run_as().unwrap(), None);
        let t = target(json!({"command": ["/x"], "run_as": "65534:65534"})).unwrap();
        assert_eq!(
            t.run_as().unwrap(),
            Some(RunAs {
                uid: 65534,
                gid: 65534
            })
        );
        let key = |v| target(v).unwrap_err().key;
        assert_eq!(key(json!({"command": []})), "target.command");
        assert_eq!(
            key(json!({"command": ["/x"], "shell": true})),
            "target.shell"
        );
        assert_eq!(
            key(json!({"command": ["/x"], "env": {"TASKGATE_X": "1"}})),
            "target.env.TASKGATE_X"
        );
        assert_eq!(
            key(json!({"command": ["/x"], "env": {"A=B": "1"}})),
            "target.env.A=B"
        );
        assert_eq!(
            key(json!({"command": ["/x"], "working_dir": "rel"})),
            "target.working_dir"
        );
        for bad in ["0:0", "", "65534", "a:b", "1:"] {
            assert_eq!(
                key(json!({"command": ["/x"], "run_as": bad})),
                "target.run_as",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn run_as_names_are_looked_up() {
        let lookup = |name: &str| (name == "builder").then_some((1500, 1600));
        assert_eq!(
            RunAs::parse("builder", lookup),
            Ok(RunAs {
                uid: 1500,
                gid: 1600
            })
        );
        assert!(RunAs::parse("nobody-here", lookup)
            .unwrap_err()
            .contains("no user named"));
        assert!(RunAs::parse("root", |_| Some((0, 0))).is_err());
    }
}
