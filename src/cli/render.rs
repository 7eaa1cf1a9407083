//! What the person (or the script) sees: a spinner with the status message and
//! the elapsed time on a terminal, plain lines otherwise, and the result —
//! pretty, or one JSON object with `--json`.
//!
//! Escape codes are written only to terminals: the spinner and colours need
//! stderr (or stdout) to be one, and `NO_COLOR` turns colours off.

use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};
use serde_json::{json, Value};

/// How the client talks to the person.
#[derive(Debug, Clone, Copy)]
pub struct Ui {
    /// stdin and stderr are terminals: prompts and the interrupt menu work.
    pub interactive: bool,
    /// stderr is a terminal: the spinner and coloured notes.
    pub spinner: bool,
    /// Colours on stdout.
    pub color_out: bool,
    /// Colours on stderr.
    pub color_err: bool,
    /// `--json`: stdout holds one JSON object.
    pub json: bool,
    /// `--quiet`: no status lines.
    pub quiet: bool,
}

impl Ui {
    /// Looks at the terminals.
    #[must_use]
    pub fn detect(json: bool, quiet: bool) -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let err_tty = std::io::stderr().is_terminal();
        Self {
            interactive: std::io::stdin().is_terminal() && err_tty,
            spinner: err_tty && !quiet,
            color_out: std::io::stdout().is_terminal() && !no_color && !json,
            color_err: err_tty && !no_color,
            json,
            quiet,
        }
    }

    /// A note on stderr (always shown, even with `--quiet`).
    pub fn note(&self, text: &str) {
        tell!("{}", paint(self.color_err, Paint::Dim, text));
    }

    /// An error on stderr.
    pub fn error(&self, text: &str) {
        tell!(
            "{} {text}",
            paint(self.color_err, Paint::Red, "taskgate: error:")
        );
    }
}

/// A colour.
#[derive(Debug, Clone, Copy)]
pub enum Paint {
    /// Dim grey.
    Dim,
    /// Bold.
    Bold,
    /// Red.
    Red,
    /// Green.
    Green,
    /// Yellow.
    Yellow,
}

/// `text` in `paint` when `on`, else as is.
#[must_use]
pub fn paint(on: bool, paint: Paint, text: &str) -> String {
    if !on {
        return text.to_owned();
    }
    let s = console::style(text).force_styling(true);
    match paint {
        Paint::Dim => s.dim(),
        Paint::Bold => s.bold(),
        Paint::Red => s.red().bold(),
        Paint::Green => s.green(),
        Paint::Yellow => s.yellow(),
    }
    .to_string()
}

/// `d` as a person reads it: `4s`, `1m 05s`, `1h 02m`.
#[must_use]
pub fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s / 60) % 60),
    }
}

/// The running status: a spinner on a terminal, a line per change otherwise.
pub struct Progress {
    ui: Ui,
    label: String,
    started: Instant,
    bar: Option<ProgressBar>,
    last: Option<(String, String)>,
}

impl Progress {
    /// Starts showing progress of `label` (the tool's name).
    #[must_use]
    pub fn start(ui: Ui, label: &str) -> Self {
        let mut p = Self {
            ui,
            label: label.to_owned(),
            started: Instant::now(),
            bar: None,
            last: None,
        };
        p.resume();
        p
    }

    /// Shows `status` and `message`.
    pub fn update(&mut self, status: &str, message: Option<&str>) {
        // On one line: a line feed in a status message would scroll the spinner.
        let message = super::sanitize::line(message.unwrap_or_default());
        let line = (super::sanitize::line(status), message);
        if self.last.as_ref() == Some(&line) {
            return;
        }
        if let Some(bar) = &self.bar {
            bar.set_message(spinner_text(&line.0, &line.1, self.ui.color_err));
        } else if !self.ui.quiet {
            let (status, message) = &line;
            let sep = if message.is_empty() { "" } else { ": " };
            tell!(
                "[{}] {} {status}{sep}{message}",
                short_duration(self.started.elapsed()),
                self.label
            );
        }
        self.last = Some(line);
    }

    /// Takes the spinner off the screen (before a prompt or the result).
    pub fn pause(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    /// Puts the spinner back, keeping the elapsed time.
    pub fn resume(&mut self) {
        if !self.ui.spinner || self.bar.is_some() {
            return;
        }
        let bar = ProgressBar::with_draw_target(
            None,
            ProgressDrawTarget::term_like_with_hz(Box::new(Narrower(console::Term::stderr())), 20),
        )
        .with_elapsed(self.started.elapsed());
        let template = if self.ui.color_err {
            "{spinner:.cyan} {prefix:.bold} {elapsed:.dim} {msg}"
        } else {
            "{spinner} {prefix} {elapsed} {msg}"
        };
        bar.set_style(
            ProgressStyle::with_template(template)
                .expect("spinner template")
                .tick_chars("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏ "),
        );
        bar.set_prefix(self.label.clone());
        if let Some((status, message)) = &self.last {
            bar.set_message(spinner_text(status, message, self.ui.color_err));
        } else {
            bar.set_message("starting");
        }
        bar.enable_steady_tick(Duration::from_millis(120));
        self.bar = Some(bar);
    }

    /// Time since the call started.
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.pause();
    }
}

/// stderr as indicatif's terminal, two columns narrower than it is: indicatif
/// pads its line to the full width, and the `^C` the terminal echoes would
/// wrap onto a new line, leaving the spinner behind when it is cleared.
#[derive(Debug)]
struct Narrower(console::Term);

impl TermLike for Narrower {
    fn width(&self) -> u16 {
        self.0.size().1.saturating_sub(2).max(20)
    }
    fn height(&self) -> u16 {
        self.0.size().0
    }
    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_up(n)
    }
    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_down(n)
    }
    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_right(n)
    }
    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.0.move_cursor_left(n)
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.0.write_line(s)
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.0.write_str(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        self.0.clear_line()
    }
    fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
    }
}

fn spinner_text(status: &str, message: &str, color: bool) -> String {
    let status = match status {
        "input_required" => paint(color, Paint::Yellow, "input required"),
        other => other.to_owned(),
    };
    if message.is_empty() {
        status
    } else {
        format!("{status} · {message}")
    }
}

/// How a call or watch ended, as the JSON `--json` prints.
#[must_use]
pub fn outcome_json(task_id: Option<&str>, task: &Value) -> Value {
    let mut out = json!({});
    if let Some(id) = task_id {
        out["taskId"] = json!(id);
    }
    for field in [
        "status",
        "statusMessage",
        "result",
        "error",
        "inputRequests",
        "pollIntervalMs",
        "createdAt",
        "lastUpdatedAt",
        "ttlMs",
    ] {
        if let Some(v) = task.get(field) {
            out[field] = v.clone();
        }
    }
    if let Some(result) = out.get_mut("result").and_then(Value::as_object_mut) {
        result.remove("resultType");
    }
    out
}

/// Prints a JSON value on stdout: indented on a terminal, one line otherwise.
pub fn print_json(value: &Value) {
    let text = if std::io::stdout().is_terminal() {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    }
    .expect("JSON");
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

/// Prints a `CallToolResult` for a person: text content on stdout (stderr for
/// an error result), then `structuredContent` indented.
pub fn print_result(ui: &Ui, result: &Value) {
    let is_error = result["isError"] == json!(true);
    let mut text = String::new();
    for item in result["content"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("text") => {
                let t = item["text"].as_str().unwrap_or_default();
                text.push_str(t.trim_end_matches('\n'));
                text.push('\n');
            }
            Some("resource_link") => {
                text.push_str(&format!(
                    "link: {} ({})\n",
                    item["uri"].as_str().unwrap_or_default(),
                    item["name"].as_str().unwrap_or_default()
                ));
            }
            Some(other) => text.push_str(&format!(
                "[{other} content{}]\n",
                item["mimeType"]
                    .as_str()
                    .map(|m| format!(", {m}"))
                    .unwrap_or_default()
            )),
            None => {}
        }
    }
    if is_error {
        tell_raw!(
            "{}\n{text}",
            paint(ui.color_err, Paint::Red, "the tool reported an error:")
        );
        return;
    }
    let mut out = std::io::stdout().lock();
    match result.get("structuredContent") {
        Some(structured) => {
            // Text content that is the structured content itself is shown
            // once, indented.
            let same = serde_json::from_str::<Value>(text.trim()).ok().as_ref() == Some(structured);
            if !same {
                let _ = write!(out, "{text}");
            }
            let pretty = serde_json::to_string_pretty(structured).expect("JSON");
            let _ = writeln!(out, "{pretty}");
        }
        None => {
            let _ = write!(out, "{text}");
        }
    }
    let _ = out.flush();
}

/// Prints what a `tasks/get` says, for a person.
pub fn print_task(ui: &Ui, task: &Value) {
    let status = task["status"].as_str().unwrap_or("unknown");
    let shown = match status {
        "completed" => paint(ui.color_out, Paint::Green, status),
        "failed" => paint(ui.color_out, Paint::Red, status),
        "input_required" => paint(ui.color_out, Paint::Yellow, "input required"),
        other => paint(ui.color_out, Paint::Bold, other),
    };
    say!("status: {shown}");
    if let Some(m) = task["statusMessage"].as_str() {
        say!("message: {}", super::sanitize::line(m));
    }
    for field in ["createdAt", "lastUpdatedAt"] {
        if let Some(t) = task[field].as_str() {
            say!("{field}: {t}");
        }
    }
    if let Some(requests) = task["inputRequests"].as_object() {
        for (key, r) in requests {
            say!(
                "asks ({key}): {}",
                r["params"]["message"].as_str().unwrap_or_default()
            );
        }
    }
    if let Some(result) = task.get("result") {
        say!("result:");
        print_result(ui, result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_short() {
        assert_eq!(short_duration(Duration::from_secs(4)), "4s");
        assert_eq!(short_duration(Duration::from_secs(65)), "1m 05s");
        assert_eq!(short_duration(Duration::from_secs(3720)), "1h 02m");
    }

    #[test]
    fn paint_off_writes_no_escape() {
        assert_eq!(paint(false, Paint::Red, "x"), "x");
        assert!(paint(true, Paint::Red, "x").contains('\u{1b}'));
    }

    #[test]
    fn outcome_json_keeps_the_task_fields() {
        let task = json!({ "resultType": "complete", "taskId": "t", "status": "completed",
            "result": { "resultType": "complete", "content": [], "isError": false } });
        let out = outcome_json(Some("t"), &task);
        assert_eq!(
            out,
            json!({ "taskId": "t", "status": "completed", "result": { "content": [], "isError": false } })
        );
    }
}
