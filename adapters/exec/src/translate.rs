//! Pure translation of a spool folder into the canonical [`RunState`].
//!
//! [`crate::spool`] reads the folder and asks the kernel whether the recorded
//! processes still run; everything that follows from those facts is decided
//! here, without I/O, and table-tested.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use taskgate_engine::{
    Content, EngineError, InputRequest, LogLine, Progress, RunState, Snapshot, ToolOutput,
};

use crate::layout::{from_ms, ExitRecord, Meta, ProcRecord, StatusFile};

/// How long a run may show no supervisor before it counts as lost: start
/// returns only after the supervisor has written its pid, so this covers only a
/// server that died between creating the folder and launching the supervisor.
pub(crate) const LAUNCH_TIMEOUT: Duration = Duration::from_secs(60);

/// Everything one read found in a run folder.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpoolView {
    /// `meta.json`; not read (`None`) while a process its supervisor holds
    /// runs ([`SpoolView::runs_held`]), when it decides nothing.
    pub meta: Option<Meta>,
    /// `supervisor.json`.
    pub supervisor: Option<ProcRecord>,
    /// The start time of whatever runs under the supervisor's pid now; not
    /// looked up (`None`) while the process runs on, when it decides nothing.
    pub supervisor_now: Option<u64>,
    /// `pid.json`.
    pub child: Option<ProcRecord>,
    /// The start time of whatever runs under the process's pid now; not
    /// looked up (`None`) when its supervisor holds `pid.json`.
    pub child_now: Option<u64>,
    /// The supervisor holds `pid.json` ([`crate::hold`]): it has not yet
    /// reaped the process, which therefore runs.
    pub child_held: bool,
    /// `exit.json`.
    pub exit: Option<ExitRecord>,
    /// The mtime of the `cancelled` marker, when it exists.
    pub cancelled_at: Option<SystemTime>,
    /// `status.json`, parsed leniently.
    pub status: Option<StatusFile>,
    /// Requests without a response.
    pub requests: BTreeMap<String, InputRequest>,
    /// `result.json`: its value, or why it could not be parsed.
    pub result: Option<Result<Value, String>>,
    /// `stdout.tail`.
    pub stdout_tail: Vec<u8>,
    /// `stderr.tail`.
    pub stderr_tail: Vec<u8>,
    /// The newest change: the mtimes of the run folder and the input folder
    /// (every record is renamed, linked or created into them) and of the
    /// status file (which the process may rewrite in place).
    pub updated_at: Option<SystemTime>,
}

impl SpoolView {
    /// Whether the run reads as lost: started, no exit recorded, neither its
    /// supervisor nor its process alive. Either it was, or it ended while the
    /// view was being read.
    pub(crate) fn looks_lost(&self) -> bool {
        self.meta.is_some()
            && self.exit.is_none()
            && (self.child.is_some() || self.supervisor.is_some())
            && !self.child_alive()
            && !alive(self.supervisor.as_ref(), self.supervisor_now)
    }

    /// Whether the process runs by its supervisor's hold, with no exit
    /// recorded and no cancellation asked: the one state read without the
    /// run's own record.
    pub(crate) fn runs_held(&self) -> bool {
        self.child_held && self.exit.is_none() && self.cancelled_at.is_none()
    }

    /// Whether the recorded process runs: held by its supervisor, or found
    /// under its pid with its start time.
    pub(crate) fn child_alive(&self) -> bool {
        self.child_held || alive(self.child.as_ref(), self.child_now)
    }
}

/// Whether a recorded process is the one still running under its pid: a
/// different start time means the pid was reused by another process.
pub(crate) fn alive(record: Option<&ProcRecord>, observed_start: Option<u64>) -> bool {
    match record {
        Some(r) => observed_start == Some(r.start_time),
        None => false,
    }
}

/// The outcome of translating a run folder.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Translation {
    /// The run, as the client should see it.
    Run(Snapshot),
    /// The folder is not a run (no meta) or its retention has passed.
    Gone {
        /// True when the folder may be removed (retention passed and no
        /// supervisor still writes into it).
        removable: bool,
    },
}

/// Translates what one read found into a snapshot at time `now`.
pub(crate) fn translate(view: &SpoolView, now: SystemTime) -> Translation {
    if view.meta.is_none() && !view.runs_held() {
        return Translation::Gone { removable: false };
    }
    let supervisor_alive = alive(view.supervisor.as_ref(), view.supervisor_now);
    let child_alive = view.child_alive();
    // Not read while a held process runs: the times then come from the
    // folders (the task's creation time is in its handle).
    let created_at = view.meta.as_ref().map(|m| from_ms(m.created_at_ms));
    let exit_at = view.exit.as_ref().map(|e| from_ms(e.ended_at_ms));

    let (state, ended_at) = if let Some(cancelled_at) = view.cancelled_at {
        (
            RunState::Cancelled {
                message: Some("cancelled".to_owned()),
            },
            Some(exit_at.unwrap_or(cancelled_at)),
        )
    } else if let Some(exit) = &view.exit {
        (RunState::Completed(output(view, exit)), exit_at)
    } else if view.child.is_some() {
        if child_alive {
            (running(view), None)
        } else if supervisor_alive {
            // The process ended; its supervisor is writing down how.
            (RunState::working("finishing"), None)
        } else {
            (lost(), Some(view.updated_at.unwrap_or(now)))
        }
    } else if view.supervisor.is_some() {
        if supervisor_alive {
            (RunState::working("starting"), None)
        } else {
            (lost(), Some(view.updated_at.unwrap_or(now)))
        }
    } else {
        // Only a held process is read without the run's record, and it has one.
        let created_at = created_at.unwrap_or(now);
        if now < created_at + LAUNCH_TIMEOUT {
            (RunState::working("starting"), None)
        } else {
            (lost(), Some(created_at + LAUNCH_TIMEOUT))
        }
    };

    let keep_alive = view.meta.as_ref().and_then(|m| m.keep_alive_ms);
    if let (Some(ended), Some(keep)) = (ended_at, keep_alive) {
        if now >= ended + Duration::from_millis(keep) {
            return Translation::Gone {
                removable: !supervisor_alive && !child_alive,
            };
        }
    }

    Translation::Run(Snapshot {
        state,
        created_at,
        // File mtimes are coarse; never report an update before the start or
        // the end.
        updated_at: [view.updated_at, created_at, ended_at]
            .into_iter()
            .flatten()
            .max(),
        ended_at,
        poll_hint: None,
        revision: None,
    })
}

fn lost() -> RunState {
    RunState::Failed {
        message: "the process was lost: it is no longer running and no exit status was recorded"
            .to_owned(),
    }
}

fn running(view: &SpoolView) -> RunState {
    let status = view.status.clone().unwrap_or_default();
    if !view.requests.is_empty() {
        return RunState::InputRequired {
            requests: view.requests.clone(),
            message: status
                .message
                .or_else(|| Some("waiting for input".to_owned())),
        };
    }
    RunState::Working {
        message: status.message.or_else(|| Some("running".to_owned())),
        progress: status.progress.map(|done| Progress {
            done,
            total: status.total,
        }),
    }
}

fn output(view: &SpoolView, exit: &ExitRecord) -> ToolOutput {
    if let Some(error) = &exit.error {
        return ToolOutput::error(format!("the process could not be started: {error}"));
    }
    let structured = match &view.result {
        Some(Ok(value)) => Some(value),
        Some(Err(problem)) => {
            return ToolOutput::error(format!("the process's result cannot be used: {problem}"))
        }
        None => None,
    };
    if exit.code == Some(0) {
        return match structured {
            Some(value) => ToolOutput::from_json(value.clone(), false),
            None => ToolOutput::text(tail_text(&view.stdout_tail)),
        };
    }
    let how = match (exit.code, exit.signal) {
        (Some(code), _) => format!("the process exited with code {code}"),
        (None, Some(signal)) => format!("the process was killed by signal {signal}"),
        (None, None) => "the process ended without an exit status".to_owned(),
    };
    let stderr = tail_text(&view.stderr_tail);
    let text = if stderr.trim().is_empty() {
        how
    } else {
        format!("{how}; the end of its standard error:\n{stderr}")
    };
    ToolOutput {
        content: vec![Content::Text(text)],
        structured: structured.filter(|v| v.is_object()).cloned(),
        is_error: true,
    }
}

/// A tail as text: a tail may start in the middle of a UTF-8 sequence, whose
/// leftover continuation bytes are dropped; other invalid bytes become U+FFFD.
/// Where a log read goes on from: the byte offset reached in each stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LogCursor {
    /// Bytes of standard output read.
    pub stdout: u64,
    /// Bytes of standard error read.
    pub stderr: u64,
}

impl LogCursor {
    /// Reads `o<stdout>.e<stderr>`, as [`LogCursor::encode`] writes it.
    pub(crate) fn parse(text: &str) -> Result<Self, EngineError> {
        let bad = || EngineError::InvalidInput {
            message: "the log cursor is not one this engine made".to_owned(),
        };
        let (out, err) = text.split_once(".e").ok_or_else(bad)?;
        let out = out.strip_prefix('o').ok_or_else(bad)?;
        let number = |n: &str| {
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            n.parse::<u64>().map_err(|_| bad())
        };
        Ok(Self {
            stdout: number(out)?,
            stderr: number(err)?,
        })
    }

    /// The cursor as text.
    pub(crate) fn encode(self) -> String {
        format!("o{}.e{}", self.stdout, self.stderr)
    }
}

/// Splits `chunk` (output read from a stream) into at most `limit` lines from
/// `source`. Only whole lines are taken, unless `at_end` (the stream is closed
/// and `chunk` reaches its end: the last line may lack its newline) or the
/// chunk is `full` without any newline (a line longer than a read, taken cut).
/// Returns the lines and how many bytes of `chunk` they used.
pub(crate) fn split_lines(
    chunk: &[u8],
    source: &str,
    limit: usize,
    at_end: bool,
    full: bool,
) -> (Vec<LogLine>, usize) {
    let mut lines = Vec::new();
    let mut used = 0;
    while lines.len() < limit && used < chunk.len() {
        let rest = &chunk[used..];
        let (line, step) = match rest.iter().position(|b| *b == b'\n') {
            Some(end) => (&rest[..end], end + 1),
            None if at_end || (full && used == 0) => (rest, rest.len()),
            None => break,
        };
        lines.push(LogLine::new(source, &String::from_utf8_lossy(line)));
        used += step;
    }
    (lines, used)
}

pub(crate) fn tail_text(tail: &[u8]) -> String {
    let skip = tail
        .iter()
        .take(3)
        .take_while(|b| (0x80..0xC0).contains(*b))
        .count();
    String::from_utf8_lossy(&tail[skip..]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_becomes_whole_lines() {
        // (chunk, limit, at_end, full) → (texts, bytes used)
        type Case<'a> = (&'a [u8], usize, bool, bool, &'a [&'a str], usize);
        let cases: [Case; 7] = [
            (b"a\nb\n", 10, false, false, &["a", "b"], 4),
            (b"a\nhalf", 10, false, false, &["a"], 2),
            (b"a\nhalf", 10, true, false, &["a", "half"], 6),
            (b"a\nb\nc\n", 2, false, false, &["a", "b"], 4),
            (b"crlf\r\n\n", 10, false, false, &["crlf", ""], 7),
            (
                b"no newline at all",
                10,
                false,
                true,
                &["no newline at all"],
                17,
            ),
            (b"\xff\xfe\n", 10, false, false, &["\u{fffd}\u{fffd}"], 3),
        ];
        for (chunk, limit, at_end, full, texts, used) in cases {
            let (lines, n) = split_lines(chunk, "stdout", limit, at_end, full);
            let got: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
            assert_eq!((got.as_slice(), n), (texts, used), "{chunk:?}");
            assert!(lines.iter().all(|l| l.source == "stdout"));
        }
    }

    #[test]
    fn log_cursors_round_trip_and_refuse_the_rest() {
        let c = LogCursor {
            stdout: 12,
            stderr: u64::MAX,
        };
        assert_eq!(LogCursor::parse(&c.encode()).unwrap(), c);
        for bad in [
            "",
            "o1",
            "o.e1",
            "o1.e",
            "o-1.e2",
            "x1.e2",
            "o1.e2.e3",
            "o99999999999999999999.e0",
            "o+1.e0",
        ] {
            assert!(
                matches!(LogCursor::parse(bad), Err(EngineError::InvalidInput { .. })),
                "{bad}"
            );
        }
    }
    use serde_json::json;

    const T0: u64 = 1_700_000_000_000;

    fn at(ms_after: u64) -> SystemTime {
        from_ms(T0 + ms_after)
    }

    fn base() -> SpoolView {
        SpoolView {
            meta: Some(Meta {
                tool: "t".into(),
                args_hash: "h".into(),
                created_at_ms: T0,
                keep_alive_ms: None,
            }),
            updated_at: Some(at(10)),
            ..SpoolView::default()
        }
    }

    fn sup(mut v: SpoolView, alive: bool) -> SpoolView {
        v.supervisor = Some(ProcRecord {
            pid: 100,
            start_time: 5,
        });
        v.supervisor_now = alive.then_some(5);
        v
    }

    fn child(mut v: SpoolView, now_start: Option<u64>) -> SpoolView {
        v.child = Some(ProcRecord {
            pid: 101,
            start_time: 7,
        });
        v.child_now = now_start;
        v
    }

    fn exited(mut v: SpoolView, code: Option<i32>, signal: Option<i32>) -> SpoolView {
        v.exit = Some(ExitRecord {
            code,
            signal,
            error: None,
            ended_at_ms: T0 + 500,
        });
        v
    }

    fn state(v: &SpoolView, now: SystemTime) -> RunState {
        match translate(v, now) {
            Translation::Run(s) => s.state,
            Translation::Gone { .. } => panic!("expected a run, got gone"),
        }
    }

    fn text(s: &RunState) -> (String, bool, Option<Value>) {
        match s {
            RunState::Completed(out) => match &out.content[0] {
                Content::Text(t) => (t.clone(), out.is_error, out.structured.clone()),
                Content::Link { .. } => panic!("link"),
            },
            other => panic!("not completed: {other:?}"),
        }
    }

    #[test]
    fn table() {
        let now = at(1000);
        let lost_msg = lost();
        // (name, view, expected state)
        let cases: Vec<(&str, SpoolView, RunState)> = vec![
            (
                "nothing launched yet",
                base(),
                RunState::working("starting"),
            ),
            (
                "supervisor up, no pid yet",
                sup(base(), true),
                RunState::working("starting"),
            ),
            (
                "supervisor died before spawning",
                sup(base(), false),
                lost_msg.clone(),
            ),
            (
                "running",
                child(sup(base(), true), Some(7)),
                RunState::working("running"),
            ),
            (
                "running without its supervisor",
                child(sup(base(), false), Some(7)),
                RunState::working("running"),
            ),
            (
                "ended, supervisor writing the exit",
                child(sup(base(), true), None),
                RunState::working("finishing"),
            ),
            (
                "process and supervisor gone, no exit",
                child(sup(base(), false), None),
                lost_msg.clone(),
            ),
            (
                "pid reused by another process",
                child(sup(base(), false), Some(99)),
                lost_msg.clone(),
            ),
            (
                "cancelled while running",
                {
                    let mut v = child(sup(base(), true), Some(7));
                    v.cancelled_at = Some(at(600));
                    v
                },
                RunState::Cancelled {
                    message: Some("cancelled".into()),
                },
            ),
            (
                "cancelled and killed",
                {
                    let mut v = exited(child(sup(base(), false), None), None, Some(15));
                    v.cancelled_at = Some(at(400));
                    v
                },
                RunState::Cancelled {
                    message: Some("cancelled".into()),
                },
            ),
        ];
        for (name, view, expected) in cases {
            // A view that reads as lost is read once more (the run may have
            // ended between the file reads and the process lookups).
            assert_eq!(
                view.looks_lost(),
                expected == lost_msg,
                "case {name}: looks_lost"
            );
            assert_eq!(state(&view, now), expected, "case {name}");
        }
    }

    #[test]
    fn never_launched_is_lost_after_the_launch_timeout() {
        let late = at(u64::try_from(LAUNCH_TIMEOUT.as_millis()).unwrap() + 1);
        assert_eq!(state(&base(), late), lost());
    }

    #[test]
    fn pid_reuse_is_detected_by_start_time() {
        let rec = ProcRecord {
            pid: 42,
            start_time: 1000,
        };
        assert!(alive(Some(&rec), Some(1000)));
        assert!(!alive(Some(&rec), Some(1001)), "same pid, other process");
        assert!(!alive(Some(&rec), None), "no such process");
        assert!(!alive(None, Some(1000)));
    }

    #[test]
    fn working_carries_status_and_progress() {
        let mut v = child(sup(base(), true), Some(7));
        v.status = Some(StatusFile {
            message: Some("step 3".into()),
            progress: Some(3.0),
            total: Some(10.0),
        });
        assert_eq!(
            state(&v, at(1000)),
            RunState::Working {
                message: Some("step 3".into()),
                progress: Some(Progress {
                    done: 3.0,
                    total: Some(10.0)
                })
            }
        );
    }

    #[test]
    fn outstanding_request_means_input_required() {
        let mut v = child(sup(base(), true), Some(7));
        let req = InputRequest {
            message: "ok?".into(),
            requested_schema: json!({"type": "object"}),
            approval: false,
        };
        v.requests.insert("approve".into(), req.clone());
        match state(&v, at(1000)) {
            RunState::InputRequired { requests, .. } => {
                assert_eq!(requests.get("approve"), Some(&req));
            }
            other => panic!("{other:?}"),
        }
        // Once the process has ended, its open questions no longer matter.
        let v = exited(v, Some(0), None);
        assert!(matches!(state(&v, at(1000)), RunState::Completed(_)));
    }

    #[test]
    fn exit_zero_with_result_object_is_structured() {
        let mut v = exited(base(), Some(0), None);
        v.result = Some(Ok(json!({"n": 1})));
        v.stdout_tail = b"ignored".to_vec();
        let (t, err, structured) = text(&state(&v, at(1000)));
        assert!(!err);
        assert_eq!(structured, Some(json!({"n": 1})));
        assert_eq!(t, r#"{"n":1}"#);
    }

    #[test]
    fn exit_zero_without_result_is_stdout() {
        let mut v = exited(base(), Some(0), None);
        v.stdout_tail = b"hello\n".to_vec();
        assert_eq!(
            text(&state(&v, at(1000))),
            ("hello\n".to_owned(), false, None)
        );
    }

    #[test]
    fn exit_non_zero_is_a_tool_error_with_stderr() {
        let mut v = exited(base(), Some(3), None);
        v.stderr_tail = b"boom\n".to_vec();
        let (t, err, _) = text(&state(&v, at(1000)));
        assert!(err);
        assert!(t.contains("code 3") && t.contains("boom"), "{t}");
        let v = exited(base(), None, Some(9));
        let (t, err, _) = text(&state(&v, at(1000)));
        assert!(err && t.contains("signal 9"), "{t}");
    }

    #[test]
    fn spawn_error_and_bad_result_are_tool_errors() {
        let mut v = exited(base(), None, None);
        v.exit.as_mut().unwrap().error = Some("No such file".into());
        let (t, err, _) = text(&state(&v, at(1000)));
        assert!(err && t.contains("No such file"));
        let mut v = exited(base(), Some(0), None);
        v.result = Some(Err("eof".into()));
        let (_, err, _) = text(&state(&v, at(1000)));
        assert!(err);
    }

    #[test]
    fn timestamps() {
        let v = exited(base(), Some(0), None);
        let Translation::Run(s) = translate(&v, at(1000)) else {
            panic!()
        };
        assert_eq!(s.created_at, Some(at(0)));
        assert_eq!(s.ended_at, Some(at(500)));
        assert_eq!(s.updated_at, Some(at(500)), "never before the end");
    }

    #[test]
    fn retention() {
        let mut v = exited(base(), Some(0), None);
        v.meta.as_mut().unwrap().keep_alive_ms = Some(1000);
        assert!(matches!(translate(&v, at(1499)), Translation::Run(_)));
        assert_eq!(
            translate(&v, at(1500)),
            Translation::Gone { removable: true }
        );
        // A running process is never expired.
        let mut r = child(sup(base(), true), Some(7));
        r.meta.as_mut().unwrap().keep_alive_ms = Some(0);
        assert!(matches!(translate(&r, at(10_000)), Translation::Run(_)));
        // Cancelled but still dying: gone for the client, not yet removable.
        r.cancelled_at = Some(at(1));
        assert_eq!(
            translate(&r, at(10_000)),
            Translation::Gone { removable: false }
        );
        // No meta: not a run.
        assert_eq!(
            translate(&SpoolView::default(), at(0)),
            Translation::Gone { removable: false }
        );
    }

    #[test]
    fn tails_cut_mid_character() {
        let s = "é".repeat(3);
        let bytes = s.as_bytes();
        assert_eq!(tail_text(&bytes[1..]), "éé");
        assert_eq!(tail_text(b"abc"), "abc");
    }
}
