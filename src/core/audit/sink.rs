//! Where audit events go: installed once, at start, by `taskgate serve` (see
//! `--audit-log`), and the same for every event after.
//!
//! Every read is audited, so an event is written on the path of every
//! `tasks/get`: a [`Sink::Lines`] sink formats it straight into a buffer of the
//! thread's own (see [`super::line`]) and writes the line with one `write`, in
//! the layout the log uses. Events go through `tracing` only where its
//! formatter adds something ([`Sink::Tracing`]: colour on a terminal), and
//! when nothing was installed (the library used on its own, tests in process).

use std::cell::RefCell;
use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use super::line::{self, LineFormat, Value};
use super::{dialect_label, Context, Event, Origin, Outcome, TARGET};

/// Where audit events go.
pub enum Sink {
    /// As `tracing` events of target [`TARGET`] at `info`, for whatever layer
    /// takes them (the default).
    Tracing,
    /// Nowhere (`--audit-log off`).
    Off,
    /// As lines in `format`, each written whole to `out`.
    Lines {
        /// How each line is laid out.
        format: LineFormat,
        /// Where lines are written: stderr, or the audit file.
        out: Mutex<Box<dyn Write + Send>>,
    },
}

impl Sink {
    /// Lines in `format` written to `out`.
    #[must_use]
    pub fn lines(format: LineFormat, out: Box<dyn Write + Send>) -> Self {
        Self::Lines {
            format,
            out: Mutex::new(out),
        }
    }
}

static SINK: OnceLock<Sink> = OnceLock::new();

/// Makes `sink` where every later event goes. Only the first call takes
/// effect: it returns `sink` back when one was installed already.
///
/// # Errors
///
/// The sink given, when another was installed before.
pub fn install(sink: Sink) -> Result<(), Sink> {
    SINK.set(sink)
}

thread_local! {
    /// The line being written, reused by every event of the thread.
    static LINE: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(512));
}

/// Writes one event, with the request's `context` when it has one.
pub(super) fn write(event: &Event<'_>, context: Option<&Context>) {
    match SINK.get().unwrap_or(&Sink::Tracing) {
        Sink::Off => {}
        Sink::Tracing => through_tracing(event, context),
        Sink::Lines { format, out } => {
            let write_line = |line: &mut Vec<u8>| {
                line.clear();
                line::write(line, *format, SystemTime::now(), &fields(event, context));
                // A line the sink refuses (a full disk, a closed stderr) cannot
                // be written anywhere better; the request goes on, as with any
                // log line.
                let _ = out
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .write_all(line);
            };
            // The thread's buffer, or a fresh one when it is in use (an event
            // written while another is being written): no event is dropped.
            LINE.with(|cell| match cell.try_borrow_mut() {
                Ok(mut line) => write_line(&mut line),
                Err(_) => write_line(&mut Vec::new()),
            });
        }
    }
}

/// The outcome's word and its reason (empty unless refused).
fn outcome(event: &Event<'_>) -> (&'static str, &'static str) {
    match event.outcome {
        Outcome::Ok => ("ok", ""),
        Outcome::Failed => ("failed", ""),
        Outcome::Refused(why) => ("refused", why),
    }
}

/// The peer of the request `context` (empty without one).
fn peer(context: Option<&Context>) -> Value<'static> {
    match context.map(|c| c.origin) {
        Some(Origin::Socket(addr)) => Value::Addr(addr),
        Some(Origin::Unknown) => Value::Str("unknown"),
        Some(Origin::Stdio) => Value::Str("stdio"),
        None => Value::Str(""),
    }
}

/// Every field of an event, in the order lines hold them.
fn fields<'a>(
    event: &'a Event<'a>,
    context: Option<&'a Context>,
) -> [(&'static str, Value<'a>); 12] {
    let (word, reason) = outcome(event);
    let peer = peer(context);
    let request = context.map_or(Value::Str(""), |c| Value::Request(c.request));
    let method = context.map_or("", |c| &c.method);
    [
        ("action", Value::Str(event.action.label())),
        ("caller", Value::Str(event.caller)),
        ("starter", Value::Str(event.starter)),
        ("approver", Value::Str(event.approver)),
        ("peer", peer),
        ("request", request),
        ("method", Value::Str(method)),
        ("tool", Value::Str(event.tool)),
        (
            "dialect",
            Value::Str(event.dialect.map_or("", dialect_label)),
        ),
        ("run", Value::Str(event.run.unwrap_or(""))),
        ("outcome", Value::Str(word)),
        ("reason", Value::Str(reason)),
    ]
}

/// The event as a `tracing` event, its fields as strings (the same text a
/// [`Sink::Lines`] line holds).
fn through_tracing(event: &Event<'_>, context: Option<&Context>) {
    let (word, reason) = outcome(event);
    let peer = match peer(context) {
        Value::Addr(addr) => addr.to_string(),
        Value::Str(text) => text.to_owned(),
        Value::Request(id) => id.to_string(),
    };
    let request = context.map_or_else(String::new, |c| c.request.to_string());
    tracing::info!(
        target: TARGET,
        action = event.action.label(),
        caller = event.caller,
        starter = event.starter,
        approver = event.approver,
        peer = peer.as_str(),
        request = request.as_str(),
        method = context.map_or("", |c| &*c.method),
        tool = event.tool,
        dialect = event.dialect.map_or("", dialect_label),
        run = event.run.unwrap_or(""),
        outcome = word,
        reason = reason,
        "audit"
    );
}
