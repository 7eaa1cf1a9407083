//! `taskgate call` and `taskgate tasks`: a client for people.
//!
//! The top layer of the binary, beside the server and importing none of it:
//! it speaks MCP 2026-07-28 with the tasks extension to a server at `--url`, or
//! to `taskgate serve --stdio` started on `--config`. `tools/call` creates a
//! task; the client polls `tasks/get` at the server's `pollIntervalMs`, showing
//! the status; asks input requests in the terminal and answers them with
//! `tasks/update`; prints the result; and on Ctrl-C asks whether to
//! `tasks/cancel`.
//!
//! Exit codes ([`Exit`]): 0 completed, 1 failed (the task failed or its result
//! is an error), 2 usage or invalid arguments, 3 cancelled, 4 input needed but
//! no way to answer it (no terminal, no `--answer`), 5 error talking to the
//! server, 130 interrupted and left running.

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
pub mod prompt;
pub mod render;
pub mod wire;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio::signal::unix::{signal, Signal, SignalKind};

use self::prompt::{Answer, Interrupt, Presets, Request};
use self::render::{Progress, Ui};
use self::wire::{Connection, Target, WireError};

/// How a `taskgate call` or `taskgate tasks` command ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: the task completed (or the command did what it was asked).
    Completed,
    /// 1: the task failed, or its result is an error (`isError`).
    Failed,
    /// 2: bad usage or arguments (refused before any task started).
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
    /// Deadline of each request.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
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

/// How long a cancelled task may take to stop before the client gives up
/// waiting (the task goes on stopping on the server's side).
const CANCEL_WAIT: Duration = Duration::from_secs(120);
/// Connection failures tolerated in a row while watching a task.
const TRANSIENT_RETRIES: u32 = 5;

fn interrupts() -> Signal {
    signal(SignalKind::interrupt()).expect("SIGINT handler")
}

fn connect(ui: &Ui, server: &ServerArgs, elicitation: bool) -> Result<Connection, Exit> {
    let target = server.target().map_err(|e| {
        ui.error(&e);
        Exit::Usage
    })?;
    Connection::open(&target, elicitation, server.timeout).map_err(|e| {
        ui.error(&e.to_string());
        Exit::Error
    })
}

/// Runs `taskgate call`.
pub async fn call(args: CallArgs) -> ExitCode {
    let ui = Ui::detect(args.output.json, args.output.quiet);
    match call_inner(&args, ui).await {
        Ok(e) | Err(e) => e.into(),
    }
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
    loop {
        let answer = tokio::select! {
            a = conn.request("tools/call", params.clone(), &headers) => a,
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
                        render::print_json(&ui, &render::outcome_json(Some(&task_id), &result));
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
    match tasks_inner(command).await {
        Ok(e) | Err(e) => e.into(),
    }
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
                render::print_json(&ui, &render::outcome_json(Some(&handle), &task));
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
                    render::print_json(&ui, &json!({ "taskId": handle, "cancelRequested": true }));
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

fn wire_failure(ui: &Ui, method: &str, e: &WireError) -> Exit {
    ui.error(&format!("{method}: {e}"));
    Exit::Error
}

fn poll_interval(task: &Value) -> Duration {
    Duration::from_millis(task["pollIntervalMs"].as_u64().unwrap_or(1000).max(50))
}

/// What came of asking a set of input requests.
enum Answered {
    /// The answers, by request key.
    Responses(Map<String, Value>),
    /// Nothing to send now.
    KeepWaiting,
    /// Ctrl-C during a prompt, and what the person chose then.
    Interrupted(Interrupt),
    /// No terminal and the presets do not answer: why.
    Unanswerable(String),
}

async fn answer_requests(
    ui: &Ui,
    progress: &mut Progress,
    presets: &Presets,
    sig: &mut Signal,
    requests: &[Request],
) -> Answered {
    let mut responses = Map::new();
    for request in requests {
        let answer = if ui.interactive {
            progress.pause();
            let (r, p) = (request.clone(), presets.clone());
            let asked = tokio::task::spawn_blocking(move || prompt::ask(&r, &p))
                .await
                .expect("prompt thread");
            match asked {
                Ok(a) => a,
                Err(prompt::PromptError::Interrupted) => {
                    // The terminal raised SIGINT as well: take it off the queue.
                    let _ = tokio::time::timeout(Duration::from_millis(500), sig.recv()).await;
                    return Answered::Interrupted(menu(progress).await);
                }
                Err(e) => return Answered::Unanswerable(e.to_string()),
            }
        } else {
            match prompt::from_presets(request, presets) {
                Ok(a) => a,
                Err(why) => return Answered::Unanswerable(format!("{:?}: {why}", request.message)),
            }
        };
        if !ui.interactive && !ui.quiet {
            let what = match &answer {
                Answer::Accept(_) => "answered",
                Answer::Decline => "declined",
                Answer::Cancel => "dismissed",
            };
            ui.note(&format!("{what} {:?} (from --answer)", request.message));
        }
        responses.insert(request.key.clone(), answer.to_json());
    }
    progress.resume();
    if responses.is_empty() {
        Answered::KeepWaiting
    } else {
        Answered::Responses(responses)
    }
}

/// The interrupt menu (on a terminal).
async fn menu(progress: &mut Progress) -> Interrupt {
    progress.pause();
    let chosen = tokio::task::spawn_blocking(prompt::interrupt_menu)
        .await
        .expect("prompt thread")
        .unwrap_or(Interrupt::Cancel);
    progress.resume();
    chosen
}

/// Prints the final state and returns its exit code.
fn finish(ui: &Ui, progress: &mut Progress, task_id: Option<&str>, task: &Value) -> Exit {
    let status = task["status"].as_str().unwrap_or("unknown");
    let is_error = task["result"]["isError"] == json!(true);
    let exit = match status {
        "completed" if is_error => Exit::Failed,
        "completed" => Exit::Completed,
        "cancelled" => Exit::Cancelled,
        "failed" => Exit::Failed,
        _ => Exit::Error,
    };
    let elapsed = render::short_duration(progress.elapsed());
    progress.pause();
    if !ui.quiet && (ui.spinner || task_id.is_some()) {
        let word = if is_error {
            "completed with an error"
        } else {
            status
        };
        let line = format!("{word} after {elapsed}");
        let painted = match exit {
            Exit::Completed => render::paint(ui.color_err, render::Paint::Green, &line),
            Exit::Cancelled => render::paint(ui.color_err, render::Paint::Yellow, &line),
            _ => render::paint(ui.color_err, render::Paint::Red, &line),
        };
        tell!("{painted}");
    }
    if ui.json {
        render::print_json(ui, &render::outcome_json(task_id, task));
        return exit;
    }
    match status {
        "completed" => render::print_result(ui, &task["result"]),
        "failed" => ui.error(&format!(
            "the task failed: {}",
            task["statusMessage"]
                .as_str()
                .or(task["error"]["message"].as_str())
                .unwrap_or("no reason given")
        )),
        "cancelled" => {
            if let Some(m) = task["statusMessage"].as_str() {
                ui.note(m);
            }
        }
        other => ui.error(&format!("unexpected task status {other:?}")),
    }
    exit
}

/// Watching one task to its end.
struct Watch {
    conn: Connection,
    ui: Ui,
    progress: Progress,
    presets: Presets,
    sig: Signal,
    task_id: String,
    /// The server flags to repeat in a `taskgate tasks` hint.
    resume: String,
}

impl Watch {
    fn hint(&self) {
        self.ui.note(&format!(
            "the task goes on; follow it with:\n  taskgate tasks result {} {}",
            self.resume, self.task_id
        ));
    }

    async fn get(&mut self) -> Result<Value, WireError> {
        self.conn
            .request("tasks/get", json!({ "taskId": self.task_id }), &[])
            .await
    }

    /// Polls until the task ends; the first read after `first`.
    async fn run(&mut self, first: Duration) -> Exit {
        let mut wait = first;
        let mut answered: HashSet<String> = HashSet::new();
        let mut transient = 0;
        loop {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = self.sig.recv() => {
                    if let Some(exit) = self.interrupted().await {
                        return exit;
                    }
                    wait = Duration::ZERO;
                    continue;
                }
            }
            let task = match self.get().await {
                Ok(t) => {
                    transient = 0;
                    t
                }
                Err(e) => {
                    if let Some(after) = e.retry_after() {
                        self.progress.update("throttled", Some("retrying"));
                        wait = after;
                        continue;
                    }
                    if e.is_transient() && transient < TRANSIENT_RETRIES {
                        transient += 1;
                        self.progress.update("unreachable", Some("retrying"));
                        wait = Duration::from_secs(1);
                        continue;
                    }
                    self.progress.pause();
                    wire_failure(&self.ui, "tasks/get", &e);
                    self.hint();
                    return Exit::Error;
                }
            };
            wait = poll_interval(&task);
            let status = task["status"].as_str().unwrap_or_default();
            let message = task["statusMessage"].as_str();
            match status {
                "working" => self.progress.update("working", message),
                "input_required" => {
                    self.progress.update("input_required", message);
                    let open: Vec<Request> = prompt::requests(&task["inputRequests"]);
                    answered.retain(|k| open.iter().any(|r| &r.key == k));
                    let fresh: Vec<Request> = open
                        .into_iter()
                        .filter(|r| !answered.contains(&r.key))
                        .collect();
                    if fresh.is_empty() {
                        continue;
                    }
                    let responses = match answer_requests(
                        &self.ui,
                        &mut self.progress,
                        &self.presets,
                        &mut self.sig,
                        &fresh,
                    )
                    .await
                    {
                        Answered::Responses(r) => r,
                        Answered::KeepWaiting | Answered::Interrupted(Interrupt::KeepWaiting) => {
                            continue
                        }
                        Answered::Interrupted(Interrupt::Cancel) => return self.cancel().await,
                        Answered::Interrupted(Interrupt::Detach) => {
                            self.progress.pause();
                            self.hint();
                            return Exit::Detached;
                        }
                        Answered::Unanswerable(why) => {
                            self.progress.pause();
                            if self.ui.json {
                                render::print_json(
                                    &self.ui,
                                    &render::outcome_json(Some(&self.task_id), &task),
                                );
                            }
                            self.ui.error(&format!(
                                "the task asks for input: {why}\n  answer with: taskgate tasks result {} --answer FIELD=VALUE {}",
                                self.resume, self.task_id
                            ));
                            return Exit::InputNeeded;
                        }
                    };
                    let keys: Vec<String> = responses.keys().cloned().collect();
                    let sent = self
                        .conn
                        .request(
                            "tasks/update",
                            json!({ "taskId": self.task_id, "inputResponses": responses }),
                            &[],
                        )
                        .await;
                    match sent {
                        Ok(_) => {
                            answered.extend(keys);
                            self.progress.update("working", Some("answer sent"));
                            wait = Duration::ZERO;
                        }
                        Err(e) if e.code() == Some(-32602) && self.ui.interactive => {
                            self.progress.pause();
                            self.ui.error(&format!("the answer was refused: {e}"));
                            self.progress.resume();
                            wait = Duration::ZERO;
                        }
                        Err(e) => {
                            self.progress.pause();
                            let exit = wire_failure(&self.ui, "tasks/update", &e);
                            self.hint();
                            return if e.code() == Some(-32602) {
                                Exit::Usage
                            } else {
                                exit
                            };
                        }
                    }
                }
                _ => {
                    return finish(&self.ui, &mut self.progress, Some(&self.task_id), &task);
                }
            }
        }
    }

    /// After Ctrl-C: asks (on a terminal) or cancels (otherwise). `None` means
    /// go on watching.
    async fn interrupted(&mut self) -> Option<Exit> {
        if !self.ui.interactive {
            if !self.ui.quiet {
                self.ui.note("interrupted: cancelling the task");
            }
            return Some(self.cancel().await);
        }
        match menu(&mut self.progress).await {
            Interrupt::Cancel => Some(self.cancel().await),
            Interrupt::KeepWaiting => None,
            Interrupt::Detach => {
                self.progress.pause();
                self.hint();
                Some(Exit::Detached)
            }
        }
    }

    /// Cancels the task and waits until it stops (another Ctrl-C stops
    /// waiting).
    async fn cancel(&mut self) -> Exit {
        self.progress.update("cancelling", None);
        if let Err(e) = self
            .conn
            .request("tasks/cancel", json!({ "taskId": self.task_id }), &[])
            .await
        {
            self.progress.pause();
            let exit = wire_failure(&self.ui, "tasks/cancel", &e);
            self.hint();
            return exit;
        }
        let deadline = Instant::now() + CANCEL_WAIT;
        let mut wait = Duration::ZERO;
        loop {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = self.sig.recv() => {
                    self.progress.pause();
                    self.ui.note("stopped waiting; the cancel goes on");
                    self.hint();
                    return Exit::Detached;
                }
            }
            match self.get().await {
                Ok(task) => match task["status"].as_str() {
                    Some("completed" | "failed" | "cancelled") => {
                        return finish(&self.ui, &mut self.progress, Some(&self.task_id), &task);
                    }
                    _ => wait = poll_interval(&task).min(Duration::from_secs(1)),
                },
                Err(e) if e.is_transient() || e.retry_after().is_some() => {
                    wait = e.retry_after().unwrap_or(Duration::from_secs(1));
                }
                Err(e) => {
                    self.progress.pause();
                    let exit = wire_failure(&self.ui, "tasks/get", &e);
                    self.hint();
                    return exit;
                }
            }
            if Instant::now() >= deadline {
                self.progress.pause();
                self.ui
                    .error(&format!("the task has not stopped within {CANCEL_WAIT:?}"));
                self.hint();
                return Exit::Error;
            }
        }
    }
}
