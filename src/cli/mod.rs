//! `taskgate call` and `taskgate tasks`: a client for people; `taskgate
//! discover` ([`discover`]), which reads the configuration to ask its engines;
//! and `taskgate host-config` ([`host_config`]), which prints an AI host's
//! entry for taskgate.
//!
//! The top layer of the binary, beside the server. `call` and `tasks` import
//! none of it (only the header names of `taskgate::rpc::header`, shared
//! vocabulary): they speak MCP 2026-07-28 with the tasks extension to a server at `--url`, or
//! to `taskgate serve --stdio` started on `--config`. `tools/call` creates a
//! task; the client polls `tasks/get` at the server's `pollIntervalMs`, showing
//! the status; asks input requests in the terminal and answers them with
//! `tasks/update`; prints the result; and on Ctrl-C asks whether to
//! `tasks/cancel`.
//!
//! Everything the server says is passed through [`sanitize`] as it arrives,
//! so questions, status messages, results and errors reach the terminal as
//! text, without escape sequences or other control characters. Each answer is
//! bounded in size (`--max-response-bytes`) and time (`--timeout`), and the
//! whole command in time (`--max-time`). A bearer token about to go over plain
//! `http://` to a host that is not this machine gets a warning first.
//!
//! Exit codes ([`Exit`]): 0 completed, 1 failed (the task failed or its result
//! is an error), 2 usage or invalid arguments, 3 cancelled, 4 input needed but
//! no way to answer it (no terminal, no `--answer`), 5 error talking to the
//! server, 130 interrupted and left running.
//!
//! `host_config` alone also reads a config file, through the pure parser
//! `taskgate::core::config::load` (nothing is built, no engine is called), to
//! name the environment variables a spawned server needs.

/// A line on stdout; a closed stdout (a pipe whose reader went away) is not
/// an error worth a panic.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// A line on stderr, ignoring a closed stderr.
macro_rules! tell {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

/// Text on stderr, ignoring a closed stderr.
macro_rules! tell_raw {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($t)*);
    }};
}

pub mod args;
pub mod discover;
pub mod host_config;
pub mod prompt;
pub mod render;
pub mod sanitize;
pub mod watch;
pub mod wire;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::signal::unix::{signal, Signal, SignalKind};

use self::prompt::{Interrupt, Presets};
use self::render::{Progress, Ui};
use self::watch::{answer_requests, finish, poll_interval, wire_failure, Answered, Watch};
use self::wire::{Connection, Target};

/// The exit codes, for `--help`.
pub const EXIT_CODES: &str = "Exit codes: 0 completed (tasks get: read; tasks cancel: ended), \
1 failed or an error result, 2 usage, arguments or answers refused, 3 cancelled, \
4 input needed but no terminal and no --answer (the task keeps waiting), \
5 server unreachable or request refused, 130 interrupted and left running.";

/// How a `taskgate call` or `taskgate tasks` command ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: the task completed (or the command did what it was asked).
    Completed,
    /// 1: the task failed, or its result is an error (`isError`).
    Failed,
    /// 2: bad usage, arguments refused (no task started), or an `--answer`
    /// the server refused.
    Usage,
    /// 3: the task was cancelled.
    Cancelled,
    /// 4: the task asks for input and there is no way to answer it (no
    /// terminal, no `--answer`); it is left waiting.
    InputNeeded,
    /// 5: the server could not be reached or refused a request.
    Error,
    /// 130: interrupted (Ctrl-C), the task left running.
    Detached,
}

impl Exit {
    /// The process exit code.
    #[must_use]
    pub fn code(self) -> u8 {
        match self {
            Self::Completed => 0,
            Self::Failed => 1,
            Self::Usage => 2,
            Self::Cancelled => 3,
            Self::InputNeeded => 4,
            Self::Error => 5,
            Self::Detached => 130,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e.code())
    }
}

/// The least deadline of a `tools/call`.
const SYNC_CALL_WAIT: Duration = Duration::from_secs(600);

/// Which server to talk to.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// The MCP endpoint of a running server (http://127.0.0.1:8808/mcp).
    #[arg(
        long,
        value_name = "URL",
        required_unless_present = "config",
        conflicts_with = "config"
    )]
    pub url: Option<String>,
    /// A config file: run `taskgate serve --stdio` on it for this command.
    #[arg(long, short, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The environment variable holding the bearer token (with --url).
    #[arg(long, value_name = "VAR", requires = "url")]
    pub token_env: Option<String>,
    /// Deadline of each request (a tools/call gets at least 10 minutes: a
    /// synchronous tool answers when its run ends).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Largest answer accepted from the server, in bytes (an HTTP body, or a
    /// line from the stdio server); a larger one is an error (exit 5).
    #[arg(long, value_name = "BYTES", default_value_t = wire::MAX_RESPONSE_BYTES)]
    pub max_response_bytes: usize,
    /// Longest the whole command may take (every request and the watching of
    /// the task); past it the command stops (exit 5) and a started task keeps
    /// running.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = humantime::parse_duration)]
    pub max_time: Duration,
}

/// True when `url` is `http://` (not TLS) to a host that is not loopback.
fn plain_http_off_host(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host_port.rsplit_once(':').map_or(host_port, |(h, _)| h)
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    !loopback
}

impl ServerArgs {
    fn target(&self) -> Result<Target, String> {
        if let Some(config) = &self.config {
            return Ok(Target::Stdio {
                config: config.clone(),
            });
        }
        let url = self.url.clone().unwrap_or_default();
        let token = match &self.token_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(t) if !t.is_empty() => Some(t),
                _ => return Err(format!("--token-env: the variable {var} is not set")),
            },
        };
        if token.is_some() && plain_http_off_host(&url) {
            tell!(
                "taskgate: warning: the bearer token goes to {url} over plain http://, readable by \
                 anyone on the way to a host that is not this machine; use https://"
            );
        }
        Ok(Target::Http { url, token })
    }

    /// These options, to repeat in a command the person can run later.
    fn flags(&self) -> String {
        match (&self.config, &self.url) {
            (Some(c), _) => format!("--config {}", c.display()),
            (None, Some(u)) => match &self.token_env {
                Some(v) => format!("--url {u} --token-env {v}"),
                None => format!("--url {u}"),
            },
            (None, None) => String::new(),
        }
    }
}

/// How results are shown.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputArgs {
    /// Print one JSON object on stdout (for scripts); status lines stay on stderr.
    #[arg(long)]
    pub json: bool,
    /// No status lines.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Answers given in advance.
#[derive(Debug, Clone, clap::Args)]
pub struct AnswerArgs {
    /// Answer a field of an input request (FIELD=VALUE, or FIELD:=JSON); repeat
    /// for more fields. Without a terminal, input requests are answered only this way.
    #[arg(long = "answer", value_name = "FIELD=VALUE")]
    pub answers: Vec<String>,
    /// Decline every input request.
    #[arg(long)]
    pub decline: bool,
}

impl AnswerArgs {
    fn presets(&self) -> Presets {
        Presets {
            words: self.answers.clone(),
            decline: self.decline,
        }
    }
}

/// `taskgate call`.
#[derive(Debug, Clone, clap::Args)]
pub struct CallArgs {
    #[command(flatten)]
    server: ServerArgs,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    answers: AnswerArgs,
    /// Print the task's handle as soon as the task exists, and exit.
    #[arg(long)]
    detach: bool,
    /// The tool.
    tool: String,
    /// Its arguments: KEY=VALUE (typed by the tool's input schema) or KEY:=JSON.
    #[arg(value_name = "KEY=VALUE")]
    arguments: Vec<String>,
}

/// `taskgate tasks …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum TasksCommand {
    /// Print a task's status once (exit 0 when it was read).
    Get {
        #[command(flatten)]
        server: ServerArgs,
        #[command(flatten)]
        output: OutputArgs,
        /// The task handle.
        handle: String,
    },
    /// Watch a task to its end and print its result (exit codes as `call`).
    Result {
        #[command(flatten)]
        server: ServerArgs,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        answers: AnswerArgs,
        /// The task handle.
        handle: String,
    },
    /// Cancel a task and wait until it stops (exit 0 once it has ended).
    Cancel {
        #[command(flatten)]
        server: ServerArgs,
        #[command(flatten)]
        output: OutputArgs,
        /// Only ask for the cancel; do not wait for the task to stop.
        #[arg(long)]
        no_wait: bool,
        /// The task handle.
        handle: String,
    },
}

fn interrupts() -> Signal {
    signal(SignalKind::interrupt()).expect("SIGINT handler")
}

fn connect(ui: &Ui, server: &ServerArgs, elicitation: bool) -> Result<Connection, Exit> {
    let target = server.target().map_err(|e| {
        ui.error(&e);
        Exit::Usage
    })?;
    let mut conn = Connection::open(&target, elicitation, server.timeout).map_err(|e| {
        ui.error(&e.to_string());
        Exit::Error
    })?;
    conn.max_response_bytes = server.max_response_bytes;
    Ok(conn)
}

/// Runs `command` within `--max-time`.
async fn within(
    ui: Ui,
    max_time: Duration,
    command: impl std::future::Future<Output = Result<Exit, Exit>>,
) -> Exit {
    match tokio::time::timeout(max_time, command).await {
        Ok(Ok(e) | Err(e)) => e,
        Err(_) => {
            ui.error(&format!(
                "stopped after {} (--max-time); a started task keeps running",
                humantime::format_duration(max_time)
            ));
            Exit::Error
        }
    }
}

/// Runs `taskgate call`.
pub async fn call(args: CallArgs) -> ExitCode {
    let ui = Ui::detect(args.output.json, args.output.quiet);
    within(ui, args.server.max_time, call_inner(&args, ui))
        .await
        .into()
}

async fn call_inner(args: &CallArgs, ui: Ui) -> Result<Exit, Exit> {
    let mut sig = interrupts();
    let presets = args.answers.presets();
    let mut conn = connect(&ui, &args.server, ui.interactive || !presets.is_empty())?;
    let listed = conn
        .request("tools/list", json!({}), &[])
        .await
        .map_err(|e| wire_failure(&ui, "tools/list", &e))?;
    let tools = listed["tools"].as_array().cloned().unwrap_or_default();
    let Some(tool) = tools.iter().find(|t| t["name"] == json!(args.tool)) else {
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        ui.error(&format!(
            "no tool named {:?}; the server has: {}",
            args.tool,
            names.join(", ")
        ));
        return Err(Exit::Usage);
    };
    let schema = tool["inputSchema"].clone();
    let arguments =
        args::parse(&args.arguments, &schema, &format!("tool {}", args.tool)).map_err(|e| {
            ui.error(&e.to_string());
            Exit::Usage
        })?;
    let headers = wire::param_headers(&schema, &arguments);
    let mut progress = Progress::start(ui, &args.tool);
    let mut params = json!({ "name": args.tool, "arguments": arguments });
    // A synchronous tool answers tools/call only when its run ends (up to the
    // server's max_wait), as does a call waiting for the run's first question.
    let call_deadline = args.server.timeout.max(SYNC_CALL_WAIT);
    loop {
        let answer = tokio::select! {
            a = conn.request_within("tools/call", params.clone(), &headers, call_deadline) => a,
            _ = sig.recv() => {
                progress.pause();
                ui.note("interrupted before a task was created");
                return Err(Exit::Detached);
            }
        };
        let result = answer.map_err(|e| {
            progress.pause();
            if e.code() == Some(-32602) {
                ui.error(&format!("the server refused the arguments: {e}"));
                Exit::Usage
            } else {
                wire_failure(&ui, "tools/call", &e)
            }
        })?;
        match result["resultType"].as_str() {
            Some("task") => {
                let task_id = result["taskId"].as_str().unwrap_or_default().to_owned();
                if args.detach {
                    progress.pause();
                    if ui.json {
                        render::print_json(&render::outcome_json(Some(&task_id), &result));
                    } else {
                        say!("{task_id}");
                    }
                    return Ok(Exit::Completed);
                }
                let mut watch = Watch {
                    conn,
                    ui,
                    progress,
                    presets,
                    sig,
                    task_id,
                    resume: args.server.flags(),
                };
                watch.progress.update("working", None);
                let poll = poll_interval(&result);
                return Ok(watch.run(poll).await);
            }
            Some("input_required") => {
                // Asked before the task exists: answer, then call again with
                // the answers and the request state.
                let requests = prompt::requests(&result["inputRequests"]);
                let responses = match answer_requests(
                    &ui,
                    &mut progress,
                    &presets,
                    &mut sig,
                    &requests,
                )
                .await
                {
                    Answered::Responses(r) => r,
                    Answered::KeepWaiting => Map::new(),
                    Answered::Interrupted(Interrupt::KeepWaiting) => Map::new(),
                    Answered::Interrupted(_) => {
                        ui.note("interrupted before a task was created");
                        return Err(Exit::Detached);
                    }
                    Answered::Unanswerable(why) => {
                        progress.pause();
                        ui.error(&format!("the tool asks for input: {why}"));
                        return Err(Exit::InputNeeded);
                    }
                };
                params["inputResponses"] = Value::Object(responses);
                params["requestState"] = result["requestState"].clone();
            }
            _ => {
                // A synchronous result.
                let task = json!({ "status": "completed", "result": result });
                progress.pause();
                return Ok(finish(&ui, &mut progress, None, &task));
            }
        }
    }
}

/// Runs `taskgate tasks …`.
pub async fn tasks(command: TasksCommand) -> ExitCode {
    let (server, output) = match &command {
        TasksCommand::Get { server, output, .. }
        | TasksCommand::Result { server, output, .. }
        | TasksCommand::Cancel { server, output, .. } => (server, output),
    };
    let ui = Ui::detect(output.json, output.quiet);
    let max_time = server.max_time;
    within(ui, max_time, tasks_inner(command)).await.into()
}

async fn tasks_inner(command: TasksCommand) -> Result<Exit, Exit> {
    match command {
        TasksCommand::Get {
            server,
            output,
            handle,
        } => {
            let ui = Ui::detect(output.json, output.quiet);
            let mut conn = connect(&ui, &server, false)?;
            let task = conn
                .request("tasks/get", json!({ "taskId": handle }), &[])
                .await
                .map_err(|e| wire_failure(&ui, "tasks/get", &e))?;
            if ui.json {
                render::print_json(&render::outcome_json(Some(&handle), &task));
            } else {
                render::print_task(&ui, &task);
            }
            Ok(Exit::Completed)
        }
        TasksCommand::Result {
            server,
            output,
            answers,
            handle,
        } => {
            let ui = Ui::detect(output.json, output.quiet);
            let presets = answers.presets();
            let conn = connect(&ui, &server, ui.interactive || !presets.is_empty())?;
            let mut watch = Watch {
                conn,
                ui,
                progress: Progress::start(ui, "task"),
                presets,
                sig: interrupts(),
                task_id: handle,
                resume: server.flags(),
            };
            Ok(watch.run(Duration::ZERO).await)
        }
        TasksCommand::Cancel {
            server,
            output,
            no_wait,
            handle,
        } => {
            let ui = Ui::detect(output.json, output.quiet);
            let mut conn = connect(&ui, &server, false)?;
            if no_wait {
                conn.request("tasks/cancel", json!({ "taskId": handle }), &[])
                    .await
                    .map_err(|e| wire_failure(&ui, "tasks/cancel", &e))?;
                if ui.json {
                    render::print_json(&json!({ "taskId": handle, "cancelRequested": true }));
                } else if !ui.quiet {
                    ui.note("cancel requested");
                }
                return Ok(Exit::Completed);
            }
            let mut watch = Watch {
                conn,
                ui,
                progress: Progress::start(ui, "task"),
                presets: Presets::default(),
                sig: interrupts(),
                task_id: handle,
                resume: server.flags(),
            };
            Ok(match watch.cancel().await {
                Exit::Cancelled | Exit::Completed | Exit::Failed => Exit::Completed,
                other => other,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::plain_http_off_host;

    #[test]
    fn plain_http_off_this_machine_is_told_apart() {
        for url in [
            "http://taskgate.example.com/mcp",
            "http://10.0.0.5:8808/mcp",
            "http://user@192.0.2.1/mcp",
            "http://[2001:db8::1]:8808/mcp",
            "http://localhost.evil.example/mcp",
        ] {
            assert!(plain_http_off_host(url), "{url}");
        }
        for url in [
            "https://taskgate.example.com/mcp",
            "http://127.0.0.1:8808/mcp",
            "http://127.1.2.3/mcp",
            "http://localhost:8808/mcp",
            "http://[::1]:8808/mcp",
        ] {
            assert!(!plain_http_off_host(url), "{url}");
        }
    }
}
