//! A workflow run's logs as pages: the pure parts (the jobs in reading order,
//! the step events of a job, a log download → lines, and the cursor).
//!
//! A run's jobs are read one after another in the order of their ids (the
//! order GitHub created them). For each job a page first gives its step
//! events as the job runs — `started` when a step starts, `finished` with its
//! conclusion when it completes — and, once the job has completed, the log
//! GitHub keeps for it, read by byte ranges. A read moves past a job only when
//! its steps and its log were read to the end, so a later job that finishes
//! first waits for the earlier one.
//!
//! The cursor: `g1.s` (nothing read), `g1.i.<job id>.<step events>.<log
//! bytes>` (inside a job), `g1.a.<job id>` (after a job, read whole).

use taskgate_engine::{EngineError, LogLine};

use crate::translate::Job;

/// Where a read of a run's logs stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pos {
    /// Nothing read yet.
    Start,
    /// Inside job `job`: `steps` step events and `offset` bytes of its log read.
    In {
        /// The job id.
        job: u64,
        /// Step events given so far.
        steps: usize,
        /// Bytes of the job's log consumed so far.
        offset: u64,
    },
    /// Job `job` was read whole; the next job comes next.
    After {
        /// The job id.
        job: u64,
    },
}

impl Pos {
    /// The cursor text.
    pub(crate) fn cursor(self) -> String {
        match self {
            Self::Start => "g1.s".to_owned(),
            Self::In { job, steps, offset } => format!("g1.i.{job}.{steps}.{offset}"),
            Self::After { job } => format!("g1.a.{job}"),
        }
    }

    /// Reads a cursor made by [`Pos::cursor`]; none is [`Pos::Start`].
    ///
    /// # Errors
    ///
    /// [`EngineError::InvalidInput`] for anything else.
    pub(crate) fn parse(cursor: Option<&str>) -> Result<Self, EngineError> {
        let Some(text) = cursor else {
            return Ok(Self::Start);
        };
        let bad = || EngineError::InvalidInput {
            message: "not a log cursor of this run".to_owned(),
        };
        let parts: Vec<&str> = text.split('.').collect();
        let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
        match parts.as_slice() {
            ["g1", "s"] => Ok(Self::Start),
            ["g1", "i", job, steps, offset] => Ok(Self::In {
                job: num(job)?,
                steps: usize::try_from(num(steps)?).map_err(|_| bad())?,
                offset: num(offset)?,
            }),
            ["g1", "a", job] => Ok(Self::After { job: num(job)? }),
            _ => Err(bad()),
        }
    }
}

/// The job a read at `pos` works on, and the step events and log bytes of it
/// already read; `None` when every listed job was read. `jobs` sorted by id.
pub(crate) fn current(jobs: &[Job], pos: Pos) -> Option<(&Job, usize, u64)> {
    match pos {
        Pos::Start => jobs.first().map(|j| (j, 0, 0)),
        Pos::In { job, steps, offset } => match jobs.iter().find(|j| j.id == job) {
            Some(j) => Some((j, steps, offset)),
            // A job no longer listed (a re-run lists its own): go on after it.
            None => jobs.iter().find(|j| j.id > job).map(|j| (j, 0, 0)),
        },
        Pos::After { job } => jobs.iter().find(|j| j.id > job).map(|j| (j, 0, 0)),
    }
}

/// True once the job has completed (its steps and log change no more).
pub(crate) fn finished(job: &Job) -> bool {
    job.status.as_deref() == Some("completed")
}

/// True when the job can have a log: it completed and ran (a skipped job, or
/// one that never got a runner, has no steps and no log).
pub(crate) fn has_log(job: &Job) -> bool {
    finished(job) && !job.steps.is_empty() && job.conclusion.as_deref() != Some("skipped")
}

/// The step events the job shows so far, in order: for each step by number,
/// `started step N: NAME` once it has started and `finished step N: NAME
/// (CONCLUSION)` once it has completed. Events of a step come only after those
/// of the steps before it, so the list only ever grows.
pub(crate) fn step_events(job: &Job) -> Vec<String> {
    let mut steps: Vec<_> = job.steps.iter().collect();
    steps.sort_by_key(|s| s.number.unwrap_or(u64::MAX));
    let mut out = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let number = step.number.unwrap_or(i as u64 + 1);
        match step.status.as_deref() {
            Some("in_progress") => {
                out.push(format!("started step {number}: {}", step.name));
                break;
            }
            Some("completed") => {
                out.push(format!("started step {number}: {}", step.name));
                out.push(format!(
                    "finished step {number}: {} ({})",
                    step.name,
                    step.conclusion.as_deref().unwrap_or("done")
                ));
            }
            // Queued (or unknown): this step and the ones after it have not started.
            _ => break,
        }
    }
    out
}

/// Splits a piece of a job's log that starts at byte `offset` into at most
/// `limit` lines; returns them and the bytes they consumed. A line not yet
/// ended by `\n` is held back unless `at_end` (the log ends there) or the
/// piece is that one line (`full`: it filled the page, so it is cut).
/// A byte-order mark at the log's start is dropped.
pub(crate) fn split(
    bytes: &[u8],
    offset: u64,
    at_end: bool,
    full: bool,
    limit: usize,
    source: &str,
) -> (Vec<LogLine>, usize) {
    let mut lines = Vec::new();
    let mut used = 0;
    if offset == 0 && bytes.starts_with(b"\xEF\xBB\xBF") {
        used = 3;
    }
    while lines.len() < limit && used < bytes.len() {
        let rest = &bytes[used..];
        let (line, step) = match rest.iter().position(|&b| b == b'\n') {
            Some(n) => (&rest[..n], n + 1),
            None if at_end || (full && used == 0) => (rest, rest.len()),
            None => break,
        };
        lines.push(LogLine::new(source, &String::from_utf8_lossy(line)));
        used += step;
    }
    (lines, used)
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskgate_github_double::fixture;

    fn job(steps: &[(&str, Option<&str>)]) -> Job {
        let mut j = fixture("job-paginated.json")["jobs"][0].clone();
        j["steps"] = steps
            .iter()
            .enumerate()
            .map(|(i, (status, conclusion))| {
                serde_json::json!({"name": format!("s{}", i + 1), "number": i + 1, "status": status, "conclusion": conclusion})
            })
            .collect();
        serde_json::from_value(j).unwrap()
    }

    #[test]
    fn cursors_round_trip_and_strangers_are_refused() {
        for pos in [
            Pos::Start,
            Pos::In {
                job: 399_444_496,
                steps: 3,
                offset: 1024,
            },
            Pos::After { job: 7 },
        ] {
            assert_eq!(Pos::parse(Some(&pos.cursor())).unwrap(), pos);
        }
        assert_eq!(Pos::parse(None).unwrap(), Pos::Start);
        for bad in [
            "",
            "g1",
            "g1.i.1.2",
            "g2.s",
            "g1.a.x",
            "g1.i.1.-2.0",
            "k1.0.0",
        ] {
            assert!(
                matches!(Pos::parse(Some(bad)), Err(EngineError::InvalidInput { .. })),
                "{bad}"
            );
        }
    }

    type Steps<'a> = &'a [(&'a str, Option<&'a str>)];

    #[test]
    fn step_events_grow_in_order() {
        let cases: [(Steps<'_>, &[&str]); 4] = [
            (&[("queued", None), ("queued", None)], &[]),
            (
                &[("in_progress", None), ("queued", None)],
                &["started step 1: s1"],
            ),
            (
                &[("completed", Some("success")), ("in_progress", None)],
                &[
                    "started step 1: s1",
                    "finished step 1: s1 (success)",
                    "started step 2: s2",
                ],
            ),
            (
                &[
                    ("completed", Some("success")),
                    ("completed", Some("failure")),
                ],
                &[
                    "started step 1: s1",
                    "finished step 1: s1 (success)",
                    "started step 2: s2",
                    "finished step 2: s2 (failure)",
                ],
            ),
        ];
        for (steps, want) in cases {
            assert_eq!(step_events(&job(steps)), want, "{steps:?}");
        }
    }

    #[test]
    fn the_published_job_has_every_step_finished() {
        let j: Job =
            serde_json::from_value(fixture("job-paginated.json")["jobs"][0].clone()).unwrap();
        let events = step_events(&j);
        assert_eq!(events.len(), 2 * j.steps.len());
        assert_eq!(events[0], "started step 1: Set up job");
        assert!(has_log(&j));
    }

    #[test]
    fn jobs_are_read_in_id_order_and_a_vanished_job_is_passed() {
        let mut a = job(&[]);
        a.id = 10;
        let mut b = job(&[]);
        b.id = 20;
        let jobs = [a, b];
        let id = |p| current(&jobs, p).map(|(j, s, o)| (j.id, s, o));
        assert_eq!(id(Pos::Start), Some((10, 0, 0)));
        assert_eq!(
            id(Pos::In {
                job: 10,
                steps: 2,
                offset: 5
            }),
            Some((10, 2, 5))
        );
        assert_eq!(id(Pos::After { job: 10 }), Some((20, 0, 0)));
        assert_eq!(
            id(Pos::In {
                job: 15,
                steps: 1,
                offset: 0
            }),
            Some((20, 0, 0))
        );
        assert_eq!(id(Pos::After { job: 20 }), None);
    }

    #[test]
    fn log_pieces_become_whole_lines() {
        let log = "\u{feff}2020-01-20T17:42:40.1234567Z ##[group]Run actions/checkout@v2\r\n2020-01-20T17:42:41.0000000Z done\npartial";
        let texts = |(lines, used): (Vec<LogLine>, usize)| {
            (lines.into_iter().map(|l| l.text).collect::<Vec<_>>(), used)
        };
        let (t, used) = texts(split(log.as_bytes(), 0, false, false, 100, "build"));
        assert_eq!(
            t,
            [
                "2020-01-20T17:42:40.1234567Z ##[group]Run actions/checkout@v2",
                "2020-01-20T17:42:41.0000000Z done"
            ]
        );
        assert_eq!(
            &log.as_bytes()[used..],
            b"partial",
            "the unended line waits"
        );
        let (t, used) = texts(split(log.as_bytes(), 0, true, false, 100, "build"));
        assert_eq!(t.last().unwrap(), "partial");
        assert_eq!(used, log.len());
        let (t, used) = texts(split(log.as_bytes(), 0, false, false, 1, "build"));
        assert_eq!(t.len(), 1);
        assert!(log.as_bytes()[used..].starts_with(b"2020-01-20T17:42:41"));
        // Not at the start: the bytes are taken as they are.
        let (t, _) = texts(split(b"x\n", 5, false, false, 10, "build"));
        assert_eq!(t, ["x"]);
        // One line longer than a page is given cut, so a read goes on.
        let (t, used) = texts(split(b"yyyy", 0, false, true, 10, "build"));
        assert_eq!((t.len(), used), (1, 4));
    }
}
