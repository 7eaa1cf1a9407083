//! Temporary configurations: a folder holding `taskgate.toml` and the exec
//! engine's spool, removed (with every process its runs left) on drop.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::procs::{kill_group_if_present, recorded_pid};
use super::server::Server;
use super::{tool_script, KEY_SECRET, KEY_VAR};

/// A bearer token: the caller it names, the variable that holds it, its value.
#[derive(Debug, Clone)]
pub struct Bearer {
    /// The caller.
    pub caller: String,
    /// The environment variable (set on the server child).
    pub var: String,
    /// The token.
    pub token: String,
}

impl Bearer {
    /// A token for `caller`, held in `TASKGATE_TEST_TOKEN_<CALLER>`.
    pub fn new(caller: &str) -> Self {
        Self {
            caller: caller.to_owned(),
            var: format!("TASKGATE_TEST_TOKEN_{}", caller.to_ascii_uppercase()),
            token: format!("token-of-{caller}-0123456789"),
        }
    }
}

/// What goes into a test configuration besides the defaults.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `[auth] bearer` entries.
    pub bearer: Vec<Bearer>,
    /// `server.max_body_bytes` (the core tools default to 65536; otherwise the
    /// server's default).
    pub max_body_bytes: Option<usize>,
    /// `server.max_wait` (default "30s").
    pub max_wait: Option<&'static str>,
    /// Extra TOML appended as is (more `[[tools]]`, or a whole engine).
    pub extra: String,
    /// `server.call_timeout` (default "10s").
    pub call_timeout: Option<&'static str>,
}

/// Argument schema with a required `label` and an optional `steps` (for
/// `work.sh steps`).
pub const WORK_SCHEMA: &str = r#"{ type = "object", required = ["label"], properties = { label = { type = "string", pattern = "^[A-Za-z0-9_-]+$" }, steps = { type = "integer", minimum = 0, maximum = 600 } } }"#;
/// Argument schema with a required `label`.
pub const LABEL_SCHEMA: &str = r#"{ type = "object", required = ["label"], properties = { label = { type = "string", pattern = "^[A-Za-z0-9_-]+$" } } }"#;

/// The `label` property of the core tools' schemas.
const LABEL_PROPERTY: &str =
    r#"label = { type = "string", pattern = "^[A-Za-z0-9_-]+$", minLength = 1 }"#;

/// One `[[tools]]` entry of the exec engine `local`, running a script in
/// `tests/tools/`.
#[derive(Debug, Clone)]
pub struct Tool {
    /// Its name.
    pub name: String,
    /// `async`, `hybrid` or `sync`.
    pub mode: &'static str,
    /// The script in `tests/tools/`.
    pub script: &'static str,
    /// The script's arguments.
    pub args: Vec<&'static str>,
    /// The input schema (TOML inline table).
    pub schema: String,
    /// `keep_alive`.
    pub keep_alive: &'static str,
    /// `legacy` policy, when set.
    pub legacy: Option<&'static str>,
    /// `max_wait`, when set.
    pub max_wait: Option<&'static str>,
}

impl Tool {
    /// A tool with keep_alive 1h, no script arguments, no legacy policy or max_wait.
    pub fn new(name: &str, mode: &'static str, script: &'static str, schema: &str) -> Self {
        Self {
            name: name.to_owned(),
            mode,
            script,
            args: Vec::new(),
            schema: schema.to_owned(),
            keep_alive: "1h",
            legacy: None,
            max_wait: None,
        }
    }

    /// Adds an argument of the script (`work.sh steps`, `ask.sh Approve`).
    pub fn arg(mut self, arg: &'static str) -> Self {
        self.args.push(arg);
        self
    }

    /// Sets `legacy`.
    pub fn legacy(mut self, policy: &'static str) -> Self {
        self.legacy = Some(policy);
        self
    }

    /// Sets `keep_alive`.
    pub fn keep_alive(mut self, keep: &'static str) -> Self {
        self.keep_alive = keep;
        self
    }

    /// Sets `max_wait`.
    pub fn max_wait(mut self, wait: &'static str) -> Self {
        self.max_wait = Some(wait);
        self
    }

    /// The `[[tools]]` table.
    pub fn toml(&self) -> String {
        let mut command = vec![toml_str(&tool_script(self.script))];
        command.extend(self.args.iter().map(|a| serde_json::to_string(a).unwrap()));
        let mut t = format!(
            "[[tools]]\nname = \"{}\"\ndescription = \"test tool {}\"\nengine = \"local\"\nmode = \"{}\"\n\
             poll_interval = \"200ms\"\nkeep_alive = \"{}\"\ninput_schema = {}\ntarget = {{ command = [{}] }}\n",
            self.name,
            self.name,
            self.mode,
            self.keep_alive,
            self.schema,
            command.join(", ")
        );
        if let Some(p) = self.legacy {
            writeln!(t, "legacy = \"{p}\"").unwrap();
        }
        if let Some(w) = self.max_wait {
            writeln!(t, "max_wait = \"{w}\"").unwrap();
        }
        t.push('\n');
        t
    }
}

/// The tools of the core tests, by name:
/// - `work` (hybrid): `work.sh`, arguments `label` (required) and `seconds`;
/// - `fail` (hybrid): `fail.sh`, exits 3;
/// - `ask` (async only): `ask.sh`, asks "Deploy <label>?";
/// - `sleeper` (async only): `sleeper.sh`, never ends by itself;
/// - `brief` (hybrid, keep_alive 1 s): `work.sh`.
pub fn core_tools() -> Vec<Tool> {
    let work = format!(
        "{{ type = \"object\", required = [\"label\"], properties = {{ {LABEL_PROPERTY}, seconds = {{ type = \"integer\", minimum = 0, maximum = 120 }} }} }}"
    );
    let label = format!(
        "{{ type = \"object\", required = [\"label\"], properties = {{ {LABEL_PROPERTY} }} }}"
    );
    vec![
        Tool::new("work", "hybrid", "work.sh", &work),
        Tool::new("fail", "hybrid", "fail.sh", &label),
        Tool::new("ask", "async", "ask.sh", &label),
        Tool::new("sleeper", "async", "sleeper.sh", "{ type = \"object\" }"),
        Tool::new("brief", "hybrid", "work.sh", &work).keep_alive("1s"),
    ]
}

/// The names of [`core_tools`], in order.
pub const TOOL_NAMES: &[&str] = &["work", "fail", "ask", "sleeper", "brief"];

/// The tools most dialect tests use:
/// - `work` (hybrid): `work.sh steps` (0.2 s steps);
/// - `fail` (hybrid): `fail.sh`, a tool error;
/// - `ask` (async): `ask.sh Approve`, asks "Approve <label>?";
/// - `sleeper` (async): `sleeper.sh`, never ends by itself;
/// - `brief` (hybrid, keep_alive 2 s): `work.sh steps`;
/// - `quick` (sync): `work.sh steps`.
pub fn dialect_tools() -> Vec<Tool> {
    vec![
        Tool::new("work", "hybrid", "work.sh", WORK_SCHEMA).arg("steps"),
        Tool::new("fail", "hybrid", "fail.sh", LABEL_SCHEMA),
        Tool::new("ask", "async", "ask.sh", LABEL_SCHEMA).arg("Approve"),
        Tool::new("sleeper", "async", "sleeper.sh", r#"{ type = "object" }"#),
        Tool::new("brief", "hybrid", "work.sh", WORK_SCHEMA)
            .arg("steps")
            .keep_alive("2s"),
        Tool::new("quick", "sync", "work.sh", WORK_SCHEMA).arg("steps"),
    ]
}

/// A temporary folder holding a config file and the exec engine's spool.
pub struct Setup {
    /// The folder (removed on drop).
    pub dir: tempfile::TempDir,
    /// The config file.
    pub config: PathBuf,
    /// The exec engine's spool folder.
    pub spool: PathBuf,
    /// The options it was written with.
    pub options: Options,
    /// More variables for the server child.
    pub extra_env: Vec<(String, String)>,
}

impl Setup {
    /// The core configuration: [`core_tools`].
    pub fn new() -> Self {
        Self::with(Options::default())
    }

    /// [`core_tools`] with `options` (`max_body_bytes` 65536 unless set).
    pub fn with(mut options: Options) -> Self {
        options.max_body_bytes.get_or_insert(65536);
        Self::write(options, Some(&core_tools()), "", &[])
    }

    /// A configuration whose exec engine serves `tools`.
    pub fn with_tools(tools: &[Tool]) -> Self {
        Self::write(Options::default(), Some(tools), "", &[])
    }

    /// The `[server]` and `[keys]` head followed by `body` (engines and tools of
    /// the test's own); `env` goes to the server child besides the key.
    pub fn config(body: &str, env: &[(&str, &str)]) -> Self {
        Self::write(Options::default(), None, body, env)
    }

    /// [`Setup::config`] with `options` (such as a short `call_timeout`).
    pub fn config_with(options: Options, body: &str, env: &[(&str, &str)]) -> Self {
        Self::write(options, None, body, env)
    }

    fn write(options: Options, tools: Option<&[Tool]>, body: &str, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("taskgate-it-")
            .tempdir()
            .expect("tempdir");
        let spool = dir.path().join("spool");
        let config = dir.path().join("taskgate.toml");
        let mut text = String::from("[server]\nlisten = \"127.0.0.1:0\"\n");
        if let Some(max) = options.max_body_bytes {
            writeln!(text, "max_body_bytes = {max}").unwrap();
        }
        writeln!(
            text,
            "call_timeout = \"{}\"\nmax_wait = \"{}\"\n",
            options.call_timeout.unwrap_or("10s"),
            options.max_wait.unwrap_or("30s"),
        )
        .unwrap();
        writeln!(
            text,
            "[keys]\nseal = [{{ id = \"k1\", secret_env = \"{KEY_VAR}\" }}]\n"
        )
        .unwrap();
        if !options.bearer.is_empty() {
            let entries: Vec<String> = options
                .bearer
                .iter()
                .map(|b| format!("{{ caller = \"{}\", token_env = \"{}\" }}", b.caller, b.var))
                .collect();
            writeln!(text, "[auth]\nbearer = [{}]\n", entries.join(", ")).unwrap();
        }
        if let Some(tools) = tools {
            writeln!(
                text,
                "[engines.local]\nkind = \"exec\"\nspool_dir = {}\ngrace_period = \"1s\"\n",
                toml_str(&spool)
            )
            .unwrap();
            for tool in tools {
                text.push_str(&tool.toml());
            }
        }
        text.push_str(body);
        text.push_str(&options.extra);
        std::fs::write(&config, text).expect("write config");
        Self {
            dir,
            config,
            spool,
            options,
            extra_env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    /// The variables the server child needs (the key, the bearer tokens, and
    /// those given to [`Setup::config`]).
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![(KEY_VAR.to_owned(), KEY_SECRET.to_owned())];
        for b in &self.options.bearer {
            env.push((b.var.clone(), b.token.clone()));
        }
        env.extend(self.extra_env.iter().cloned());
        env
    }

    /// Starts a server on this setup.
    pub async fn server(&self) -> Server {
        Server::start(self).await
    }

    /// Starts a server on this setup with its own fresh HOME, working
    /// directory and TMPDIR.
    pub async fn isolated_server(&self) -> Server {
        Server::start_isolated(self).await
    }

    /// A `Command` running `taskgate ARGS` with this setup's environment.
    pub fn command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(super::bin());
        cmd.args(args);
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        cmd.env("TASKGATE_LOG", "info");
        cmd
    }

    /// True when the spool holds no file at all (folders, such as the
    /// engine's staging folder, may exist but must be empty).
    pub fn spool_has_no_files(&self) -> bool {
        fn walk(dir: &Path) -> bool {
            std::fs::read_dir(dir).map_or(true, |entries| {
                entries
                    .flatten()
                    .all(|e| e.path().is_dir() && walk(&e.path()))
            })
        }
        walk(&self.spool)
    }

    /// The run folders in the spool (each run the engine started; hidden
    /// folders such as the engine's staging area are not runs).
    pub fn runs(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.spool) else {
            return Vec::new();
        };
        let mut runs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        runs.sort();
        runs
    }

    /// The run folders whose `meta.json` names `tool`.
    pub fn runs_of(&self, tool: &str) -> Vec<PathBuf> {
        self.runs()
            .into_iter()
            .filter(|dir| {
                std::fs::read(dir.join("meta.json"))
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                    .is_some_and(|m| m["tool"] == tool)
            })
            .collect()
    }

    /// The only run folder (panics unless there is exactly one).
    pub fn only_run(&self) -> PathBuf {
        let runs = self.runs();
        assert_eq!(
            runs.len(),
            1,
            "expected exactly one run folder, found {runs:?}"
        );
        runs.into_iter().next().unwrap()
    }
}

impl Default for Setup {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Setup {
    /// Runs outlive servers by design: end every process group this setup's
    /// runs started (identified by their recorded pids), then the folder goes.
    fn drop(&mut self) {
        for run in self.runs() {
            for file in ["pid.json", "supervisor.json"] {
                if let Some(pid) = recorded_pid(&run.join(file)) {
                    kill_group_if_present(pid);
                }
            }
        }
    }
}

/// A hybrid `[[tools]]` table on the engine `engine` (polled every 200 ms,
/// kept an hour); `schema` is its input schema and `target` the inside of its
/// target table, both TOML.
pub fn tool_entry(
    name: &str,
    description: &str,
    engine: &str,
    schema: &str,
    target: &str,
) -> String {
    format!(
        "[[tools]]\nname = \"{name}\"\ndescription = \"{description}\"\nengine = \"{engine}\"\n\
         mode = \"hybrid\"\npoll_interval = \"200ms\"\nkeep_alive = \"1h\"\n\
         input_schema = {schema}\ntarget = {{ {target} }}\n"
    )
}

/// `, EXTRA` to append to an inline table, or nothing when `extra` is empty.
pub fn more_fields(extra: &str) -> String {
    if extra.is_empty() {
        String::new()
    } else {
        format!(", {extra}")
    }
}

/// A TOML basic string holding `path`.
pub fn toml_str(path: &Path) -> String {
    serde_json::to_string(&path.display().to_string()).unwrap()
}
