//! The supervisor: a small detached process, one per run, that launches the
//! tool's process, records its identity, keeps the tails of its output, waits
//! for it and records how it ended. The server is not the process's parent (it
//! may restart at any time), so this is what calls `wait()`.
//!
//! Synchronous and std-only on purpose: it runs as `taskgate supervise <dir>`
//! before any async runtime exists.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;

use crate::layout::{
    self, to_ms, CommandSpec, ExitRecord, ProcRecord, CANCELLED, COMMAND, EXIT, PID, STDERR_TAIL,
    STDOUT_TAIL, SUPERVISOR,
};
use crate::{hold, proc};

/// Set (to `detached`) in the environment of the second stage.
const STAGE_VAR: &str = "TASKGATE_EXEC_SUPERVISOR_STAGE";
/// How long the first stage waits for the process to be spawned.
const SPAWN_WAIT: Duration = Duration::from_secs(10);
/// How often the supervisor looks for a cancel marker while it waits.
const TICK: Duration = Duration::from_millis(100);
/// How often output tails are rewritten while the process runs.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How long output is still collected after the process ended (a grandchild
/// may hold the pipes open).
const DRAIN_WAIT: Duration = Duration::from_secs(2);

/// Runs a run's supervisor; the taskgate binary calls it for
/// `taskgate supervise <run-dir>`, with `args` being the arguments after
/// `supervise` (exactly one: the run folder).
///
/// It detaches by starting its own program again with the same command line
/// (`std::env::current_exe()` and `std::env::args_os()`), so the host binary
/// must route that command line here again. The first invocation returns once
/// the tool's process has been spawned (or failed to spawn); the detached
/// second one returns when the process has ended and its exit is recorded.
/// Call it before any async runtime or logging is set up.
///
/// # Errors
///
/// Returns a failure exit code (after a message on standard error, for the
/// first stage) when the arguments are wrong or the run folder is unusable.
#[must_use]
pub fn supervise_main(args: &[OsString]) -> ExitCode {
    let [dir] = args else {
        eprintln!("usage: supervise <run-dir>");
        return ExitCode::from(2);
    };
    let dir = PathBuf::from(dir);
    let outcome = if std::env::var_os(STAGE_VAR).is_some_and(|v| v == "detached") {
        supervise(&dir)
    } else {
        detach(&dir)
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("taskgate supervise: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Stage one: start stage two detached (so it is nobody's child once we exit,
/// and nobody's zombie), then wait until it has spawned the process.
fn detach(dir: &Path) -> Result<(), String> {
    if !dir.join(COMMAND).is_file() {
        return Err(format!("{} is not a run folder", dir.display()));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find my own program: {e}"))?;
    let mut second = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(STAGE_VAR, "detached")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the detached supervisor: {e}"))?;
    let deadline = Instant::now() + SPAWN_WAIT;
    loop {
        if dir.join(PID).exists() || dir.join(EXIT).exists() {
            return Ok(());
        }
        if let Ok(Some(status)) = second.try_wait() {
            // It may have finished everything between the two checks.
            if dir.join(PID).exists() || dir.join(EXIT).exists() {
                return Ok(());
            }
            return Err(format!("the detached supervisor ended early ({status})"));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the process was not spawned within {SPAWN_WAIT:?} (the supervisor still runs)"
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Stage two: own session, spawn, pump, wait, record.
fn supervise(dir: &Path) -> Result<(), String> {
    // A new session: no terminal, no signals meant for the server's group.
    let _ = nix::unistd::setsid();
    let me = i32::try_from(std::process::id()).map_err(|e| e.to_string())?;
    let me = ProcRecord {
        pid: me,
        start_time: proc::start_time_any(me).unwrap_or(0),
    };
    layout::write_json(dir, SUPERVISOR, &me).map_err(|e| format!("cannot write: {e}"))?;

    let spec: CommandSpec = match layout::read_json(&dir.join(COMMAND)) {
        Ok(Some(spec)) => spec,
        other => {
            let why = match other {
                Err(e) => e.to_string(),
                _ => "command.json is missing".to_owned(),
            };
            return record_exit(dir, spawn_error(&why));
        }
    };
    if dir.join(CANCELLED).exists() {
        return record_exit(dir, spawn_error("cancelled before it started"));
    }

    let mut command = Command::new(&spec.argv[0]);
    command
        .args(&spec.argv[1..])
        .env_clear()
        .current_dir(spec.working_dir.as_deref().unwrap_or(dir))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(run_as) = spec.run_as {
        if let Some(problem) = proc::ambient_problem() {
            return record_exit(dir, spawn_error(&problem));
        }
        // std sets the group, drops the supplementary groups, then the user,
        // in the child before it runs the program.
        command.uid(run_as.uid).gid(run_as.gid);
    }
    for name in &spec.pass_env {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command.envs(&spec.env);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return record_exit(dir, spawn_error(&format!("{}: {e}", spec.argv[0]))),
    };
    let pid = i32::try_from(child.id()).map_err(|e| e.to_string())?;
    let record = ProcRecord {
        pid,
        start_time: proc::start_time_any(pid).unwrap_or(0),
    };
    // If this fails the run reads as lost once we are gone; keep going anyway.
    let _ = layout::write_json(dir, PID, &record);
    // Held while the process runs (crate::hold); without the hold, reads ask
    // `/proc` instead, so a failure here costs only speed.
    let hold = std::fs::File::open(dir.join(PID))
        .and_then(|file| hold::take(&file).map(|()| file))
        .ok();

    let (done_tx, done_rx) = mpsc::channel();
    let tails = [
        (
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            STDOUT_TAIL,
        ),
        (
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            STDERR_TAIL,
        ),
    ]
    .map(|(stream, name)| {
        let tail = Arc::new(Mutex::new(Tail::new(dir, name, spec.tail_bytes)));
        if let Some(stream) = stream {
            let (tail, done) = (Arc::clone(&tail), done_tx.clone());
            std::thread::spawn(move || {
                pump(stream, &tail);
                let _ = done.send(());
            });
        }
        tail
    });

    let (exit_tx, exit_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = exit_tx.send(child.wait());
    });
    let grace = Duration::from_millis(spec.grace_ms);
    let mut terminated_at: Option<Instant> = None;
    let mut killed = false;
    let status: ExitStatus = loop {
        match exit_rx.recv_timeout(TICK) {
            Ok(Ok(status)) => break status,
            Ok(Err(e)) => return record_exit(dir, spawn_error(&format!("wait failed: {e}"))),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return record_exit(dir, spawn_error("wait failed"))
            }
        }
        // Output that came before a quiet spell is on disk within a second.
        for tail in &tails {
            tail.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .flush_if_due();
        }
        if terminated_at.is_none() && dir.join(CANCELLED).exists() {
            let _ = proc::signal_group(pid, Some(Signal::SIGTERM));
            terminated_at = Some(Instant::now());
        }
        if let Some(at) = terminated_at {
            if !killed && at.elapsed() >= grace {
                let _ = proc::signal_group(pid, Some(Signal::SIGKILL));
                killed = true;
            }
        }
    };
    // Reaped: from here until the exit is recorded, reads find the process
    // gone and this supervisor alive ("finishing").
    drop(hold);

    if dir.join(CANCELLED).exists() {
        // Cancelled: what the process left behind in its group gets the rest
        // of the grace period, then SIGKILL.
        let deadline = terminated_at.unwrap_or_else(Instant::now) + grace;
        while Instant::now() < deadline && proc::signal_group(pid, None).unwrap_or(false) {
            std::thread::sleep(TICK.min(deadline.saturating_duration_since(Instant::now())));
        }
        let _ = proc::signal_group(pid, Some(Signal::SIGKILL));
    }

    let drain_deadline = Instant::now() + DRAIN_WAIT;
    for _ in 0..2 {
        let left = drain_deadline.saturating_duration_since(Instant::now());
        if done_rx.recv_timeout(left).is_err() {
            break;
        }
    }
    for tail in &tails {
        tail.lock().unwrap_or_else(PoisonError::into_inner).close();
    }
    record_exit(
        dir,
        ExitRecord {
            code: status.code(),
            signal: status.signal(),
            error: None,
            ended_at_ms: to_ms(SystemTime::now()),
        },
    )
}

fn spawn_error(why: &str) -> ExitRecord {
    ExitRecord {
        error: Some(why.to_owned()),
        ended_at_ms: to_ms(SystemTime::now()),
        ..ExitRecord::default()
    }
}

fn record_exit(dir: &Path, exit: ExitRecord) -> Result<(), String> {
    layout::write_json(dir, EXIT, &exit).map_err(|e| format!("cannot record the exit: {e}"))
}

fn pump(mut stream: Box<dyn Read + Send>, tail: &Mutex<Tail>) {
    let mut buf = vec![0_u8; 64 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => tail
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

/// The last `limit` bytes of a stream, rewritten to its file now and then.
struct Tail {
    dir: PathBuf,
    name: &'static str,
    limit: usize,
    bytes: Vec<u8>,
    /// Bytes of the stream dropped from the front of `bytes` so far.
    dropped: u64,
    dirty: bool,
    flushed_at: Instant,
    closed: bool,
}

impl Tail {
    fn new(dir: &Path, name: &'static str, limit: usize) -> Self {
        Self {
            dir: dir.to_owned(),
            name,
            limit,
            bytes: Vec::new(),
            dropped: 0,
            // Nothing to write until the process prints: a quiet run's folder
            // stays untouched (a missing tail reads as empty).
            dirty: false,
            flushed_at: Instant::now(),
            closed: false,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        if self.closed {
            return;
        }
        self.bytes.extend_from_slice(chunk);
        // Amortized: drop the front only once twice the limit has piled up.
        if self.bytes.len() > self.limit.saturating_mul(2) {
            let cut = self.bytes.len() - self.limit;
            self.bytes.drain(..cut);
            self.dropped += cut as u64;
        }
        self.dirty = true;
        self.flush_if_due();
    }

    fn flush_if_due(&mut self) {
        if self.dirty && !self.closed && self.flushed_at.elapsed() >= FLUSH_EVERY {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if self.dirty {
            let start = self.bytes.len().saturating_sub(self.limit);
            let record = layout::tail_record(self.dropped + start as u64, &self.bytes[start..]);
            let _ = layout::write_atomic(&self.dir, self.name, &record);
            self.dirty = false;
        }
        self.flushed_at = Instant::now();
    }

    /// The final write; later output (from a straggler) is ignored.
    fn close(&mut self) {
        self.flush();
        self.closed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_only_the_last_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let mut tail = Tail::new(dir.path(), "t", 10);
        for i in 0..1000_u32 {
            tail.push(format!("{i:05}").as_bytes());
            assert!(tail.bytes.len() <= 20 + 5);
        }
        tail.close();
        // 5000 bytes in all: the last 10 start at offset 4990.
        let kept = b"tg-tail 4990\n0099800999";
        assert_eq!(std::fs::read(dir.path().join("t")).unwrap(), kept);
        tail.push(b"late");
        assert_eq!(std::fs::read(dir.path().join("t")).unwrap(), kept);
    }
}
