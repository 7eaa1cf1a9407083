//! Where audit events go: installed once, at start, by `taskgate serve` (see
//! `--audit-log`), and the same for every event after.
//!
//! Every read is audited, so an event is written on the path of every
//! `tasks/get`: a [`Sink::Lines`] sink formats it straight into a buffer of the
//! thread's own (see [`super::line`]), in the layout the log uses. Events go
//! through `tracing` only where its formatter adds something
//! ([`Sink::Tracing`]: colour on a terminal), and when nothing was installed
//! (the library used on its own, tests in process).
//!
//! A line is written with one `write`, at once, on most threads. A serving
//! thread (see [`Batch`]) keeps the lines of events that change nothing —
//! reads, and requests refused at the front door — and writes them together
//! when its event loop goes idle ([`flush`]), when they reach [`BATCH_BYTES`],
//! or just before the line of an event that changes something (a start, a
//! cancel, an answer), which is written before its request is answered, in
//! order after the thread's earlier lines. On a loaded server one `write`
//! then carries many reads' lines (the write is the largest part of a read's
//! cost on a local file), each at most an event-loop turn after its answer;
//! what a crash of the process can lose is the reads of that last turn.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

use super::line::{self, LineFormat, Value};
use super::{dialect_label, Action, Context, Event, Origin, Outcome, TARGET};

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

/// How many bytes of kept lines a serving thread writes at once without
/// waiting for its event loop to go idle (about 40 reads' lines).
pub const BATCH_BYTES: usize = 16 * 1024;

thread_local! {
    /// The thread's lines not yet written, and the line being written: the
    /// buffer is reused by every event of the thread.
    static LINES: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(512));
    /// Whether this thread keeps the lines of reads until [`flush`] (a
    /// serving thread, while its [`Batch`] lives).
    static BATCHING: Cell<bool> = const { Cell::new(false) };
}

/// While it lives, the thread that made it keeps the lines of events that
/// change nothing until [`flush`] is called (its event loop going idle) or
/// they reach [`BATCH_BYTES`]; dropping it writes what is kept. Made by a
/// serving thread for its whole life (`transport::lanes`).
#[must_use = "lines are kept only while the batch lives"]
pub struct Batch(());

impl Batch {
    /// Keeps this thread's read lines from now on.
    pub fn start() -> Self {
        BATCHING.with(|on| on.set(true));
        Self(())
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        BATCHING.with(|on| on.set(false));
        flush();
    }
}

/// Writes the lines this thread keeps, if any: called as a serving thread's
/// event loop goes idle.
pub fn flush() {
    if let Some(Sink::Lines { out, .. }) = SINK.get() {
        flush_to(out);
    }
}

/// Writes the lines this thread keeps to `out`.
fn flush_to(out: &Mutex<Box<dyn Write + Send>>) {
    LINES.with(|cell| {
        if let Ok(mut lines) = cell.try_borrow_mut() {
            write_out(out, &mut lines);
        }
    });
}

/// Writes `lines` whole to `out`, and empties them.
fn write_out(out: &Mutex<Box<dyn Write + Send>>, lines: &mut Vec<u8>) {
    if lines.is_empty() {
        return;
    }
    // Lines the sink refuses (a full disk, a closed stderr) cannot be written
    // anywhere better; the requests go on, as with any log line.
    let _ = out
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .write_all(lines);
    lines.clear();
}

/// Whether an event of `action` may wait for its thread's next [`flush`]: it
/// changes nothing (a read, a request refused at the front door).
fn may_wait(action: Action) -> bool {
    matches!(action, Action::Read | Action::Request)
}

/// Writes one event, with the request's `context` when it has one.
pub(super) fn write(event: &Event<'_>, context: Option<&Context>) {
    match SINK.get().unwrap_or(&Sink::Tracing) {
        Sink::Off => {}
        Sink::Tracing => through_tracing(event, context),
        Sink::Lines { format, out } => write_line(*format, out, event, context),
    }
}

/// Writes the line of one event to `out`, or keeps it for the thread's next
/// [`flush`] (see [`Batch`]).
fn write_line(
    format: LineFormat,
    out: &Mutex<Box<dyn Write + Send>>,
    event: &Event<'_>,
    context: Option<&Context>,
) {
    let keep = may_wait(event.action) && BATCHING.with(Cell::get);
    let add_line = |lines: &mut Vec<u8>| {
        line::write(lines, format, SystemTime::now(), &fields(event, context));
        if !keep || lines.len() >= BATCH_BYTES {
            write_out(out, lines);
        }
    };
    // The thread's buffer (after the lines it keeps, so they are written
    // first), or a fresh one when it is in use (an event written while another
    // is being written): no event is dropped.
    LINES.with(|cell| match cell.try_borrow_mut() {
        Ok(mut lines) => add_line(&mut lines),
        Err(_) => add_line(&mut Vec::new()),
    });
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A writer whose bytes the test can read, counting its writes.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let mut inner = self.0.lock().unwrap();
            inner.0.extend_from_slice(buf);
            inner.1 += 1;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        /// The runs of the lines written so far, in order, and the writes.
        fn seen(&self) -> (Vec<String>, usize) {
            let inner = self.0.lock().unwrap();
            let text = String::from_utf8(inner.0.clone()).unwrap();
            let runs = text
                .lines()
                .map(|l| {
                    let at = l.find("run=").unwrap();
                    l[at..].split(' ').next().unwrap().replace('"', "")
                })
                .collect();
            (runs, inner.1)
        }
    }

    fn event(action: Action, run: &str) -> Event<'_> {
        Event {
            action,
            caller: "alice",
            starter: "",
            approver: "",
            tool: "build",
            dialect: None,
            run: Some(run),
            outcome: Outcome::Ok,
        }
    }

    /// Each test on a thread of its own: the batch flag and buffer are the
    /// thread's.
    fn on_own_thread(test: impl FnOnce() + Send + 'static) {
        std::thread::spawn(test).join().unwrap();
    }

    #[test]
    fn without_a_batch_every_line_is_written_at_once() {
        on_own_thread(|| {
            let seen = Shared::default();
            let out: Mutex<Box<dyn Write + Send>> = Mutex::new(Box::new(seen.clone()));
            write_line(LineFormat::Text, &out, &event(Action::Read, "r1"), None);
            write_line(LineFormat::Text, &out, &event(Action::Read, "r2"), None);
            assert_eq!(seen.seen().1, 2);
        });
    }

    #[test]
    fn a_batch_keeps_reads_until_flushed_and_writes_them_at_once() {
        on_own_thread(|| {
            let seen = Shared::default();
            let out: Mutex<Box<dyn Write + Send>> = Mutex::new(Box::new(seen.clone()));
            let _batch = Batch::start();
            write_line(LineFormat::Text, &out, &event(Action::Read, "r1"), None);
            write_line(LineFormat::Text, &out, &event(Action::Request, "r2"), None);
            assert_eq!(seen.seen(), (vec![], 0), "kept until the loop goes idle");
            flush_to(&out);
            assert_eq!(seen.seen(), (vec!["run=r1".into(), "run=r2".into()], 1));
            flush_to(&out);
            assert_eq!(seen.seen().1, 1, "nothing kept, nothing written");
        });
    }

    #[test]
    fn an_event_that_changes_something_is_written_at_once_after_the_kept_reads() {
        on_own_thread(|| {
            let seen = Shared::default();
            let out: Mutex<Box<dyn Write + Send>> = Mutex::new(Box::new(seen.clone()));
            let _batch = Batch::start();
            write_line(LineFormat::Text, &out, &event(Action::Read, "r1"), None);
            for (action, run) in [
                (Action::Start, "s"),
                (Action::Cancel, "c"),
                (Action::Answer, "a"),
            ] {
                write_line(LineFormat::Text, &out, &event(action, run), None);
            }
            let (runs, writes) = seen.seen();
            assert_eq!(runs, ["run=r1", "run=s", "run=c", "run=a"]);
            assert_eq!(writes, 3);
        });
    }

    #[test]
    fn a_batch_is_written_when_it_is_large_and_when_it_ends() {
        on_own_thread(|| {
            let seen = Shared::default();
            let out: Mutex<Box<dyn Write + Send>> = Mutex::new(Box::new(seen.clone()));
            let batch = Batch::start();
            let mut reads = 0;
            while seen.seen().1 == 0 {
                write_line(LineFormat::Text, &out, &event(Action::Read, "r"), None);
                reads += 1;
                assert!(reads < 1000, "never written");
            }
            let (runs, _) = seen.seen();
            assert_eq!(runs.len(), reads);
            assert!(reads > 10, "{reads} lines");
            write_line(LineFormat::Text, &out, &event(Action::Read, "last"), None);
            // Dropping the batch writes through the installed sink, which in
            // a unit test is none: what it keeps stays unwritten here, so
            // flush by hand, as the drop does with the installed sink.
            drop(batch);
            assert!(!BATCHING.with(Cell::get));
            flush_to(&out);
            assert_eq!(seen.seen().0.last().map(String::as_str), Some("run=last"));
        });
    }
}
