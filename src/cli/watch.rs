//! Watching a task to its end: `tasks/get` at the server's poll interval,
//! input requests asked and answered with `tasks/update`, Ctrl-C handled, the
//! final state printed and turned into an exit code.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio::signal::unix::Signal;

use super::prompt::{self, Answer, Interrupt, Presets, Request};
use super::render::{self, Progress, Ui};
use super::wire::{Connection, WireError};
use super::Exit;

/// How long a cancelled task may take to stop before the client gives up
/// waiting (the task goes on stopping on the server's side).
const CANCEL_WAIT: Duration = Duration::from_secs(120);
/// Connection failures tolerated in a row while watching a task.
const TRANSIENT_RETRIES: u32 = 5;

pub(super) fn wire_failure(ui: &Ui, method: &str, e: &WireError) -> Exit {
    ui.error(&format!("{method}: {e}"));
    Exit::Error
}

pub(super) fn poll_interval(task: &Value) -> Duration {
    Duration::from_millis(task["pollIntervalMs"].as_u64().unwrap_or(1000).max(50))
}

/// What came of asking a set of input requests.
pub(super) enum Answered {
    /// The answers, by request key.
    Responses(Map<String, Value>),
    /// Nothing to send now.
    KeepWaiting,
    /// Ctrl-C during a prompt, and what the person chose then.
    Interrupted(Interrupt),
    /// No terminal and the presets do not answer: why.
    Unanswerable(String),
}

pub(super) async fn answer_requests(
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
pub(super) fn finish(
    ui: &Ui,
    progress: &mut Progress,
    task_id: Option<&str>,
    task: &Value,
) -> Exit {
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
        render::print_json(&render::outcome_json(task_id, task));
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
pub(super) struct Watch {
    pub(super) conn: Connection,
    pub(super) ui: Ui,
    pub(super) progress: Progress,
    pub(super) presets: Presets,
    pub(super) sig: Signal,
    pub(super) task_id: String,
    /// The server flags to repeat in a `taskgate tasks` hint.
    pub(super) resume: String,
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
    pub(super) async fn run(&mut self, first: Duration) -> Exit {
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
                                render::print_json(&render::outcome_json(
                                    Some(&self.task_id),
                                    &task,
                                ));
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
    pub(super) async fn cancel(&mut self) -> Exit {
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
