//! A DAG run's task logs as pages: the pure parts (the task instances in
//! reading order, which try of which task a read works on, a log answer →
//! lines, and the cursor). The reads themselves are in `api.rs`; the page loop
//! is `AirflowPipeline::logs` in `lib.rs`.
//!
//! Reading order: the run's task instances in the DAG's task order (a
//! topological order of its tasks, upstream first, ties by task id; a mapped
//! task's instances by map index), and each one's tries in order. A read moves
//! past a try only once the try has ended and its log was read to the end, and
//! past a task instance only once it will run no more tries, so a later task
//! that runs first waits for the earlier one.
//!
//! Within a try the place is Airflow's continuation token (the position Airflow
//! itself hands out, signed by the API server) plus how many log entries, and
//! lines of the next entry, were given since that token. Airflow answers
//! everything after a token at once, so a page that stops early (at `limit`
//! lines, or at `MAX_PAGE_BYTES` read) keeps the token it read from and counts
//! what it gave; a page that read the whole answer moves on to the token it
//! returned.
//!
//! The cursor: `a1/s` (nothing read), `a1/i/<map index>/<try>/<entries>/<lines>/<token>/<task id>`
//! (inside a try; an empty token is the try's start), `a1/p/<map index>/<try>/<task id>`
//! (past that try; try 0: past a task instance that never ran).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::Value;
use taskgate_engine::{EngineError, LogLine, MAX_CURSOR_BYTES};

use crate::translate::TaskInstance;

/// The most log reads (tries) one page makes.
pub(crate) const MAX_TRIES_PER_PAGE: usize = 8;

/// The longest Airflow continuation token a cursor carries (Airflow's file log
/// handler signs about 80 bytes). A longer one is not kept: the read goes on
/// from the token before it.
const MAX_TOKEN_BYTES: usize = 256;

/// Airflow's longest task id.
const MAX_TASK_ID_BYTES: usize = 250;

/// The first event of the group Airflow puts before a try's log when it is read
/// from its start: where the log was read from (file paths, log server URLs).
/// Not what the task printed, and its length changes as the task ends, so it is
/// left out and not counted.
const SOURCE_GROUP: &str = "::group::Log message source details";

/// A task of the DAG (`TaskResponse`), the fields the reading order needs.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct DagTask {
    /// The task.
    pub task_id: String,
    /// The tasks that run after it.
    #[serde(default)]
    pub downstream_task_ids: Vec<String>,
}

/// The DAG's tasks (`TaskCollectionResponse`).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct DagTasks {
    /// The tasks.
    pub tasks: Vec<DagTask>,
}

/// A task instance: its task and map index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskKey {
    /// The task.
    pub task_id: String,
    /// The map index (-1 for an unmapped task).
    pub map_index: i64,
}

impl TaskKey {
    fn of(ti: &TaskInstance) -> Self {
        Self {
            task_id: ti.task_id.clone(),
            map_index: ti.map_index,
        }
    }
}

/// Where a read of a run's logs stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pos {
    /// Nothing read yet.
    Start,
    /// Inside try `try_number` of `task`: from Airflow's `token` (none: the
    /// try's start), `entries` entries and `lines` lines of the next one given.
    In {
        /// The task instance.
        task: TaskKey,
        /// The try.
        try_number: u64,
        /// Airflow's continuation token read from.
        token: Option<String>,
        /// Log entries given since the token.
        entries: u64,
        /// Lines of the next entry given.
        lines: u64,
    },
    /// Try `try_number` of `task` was read whole (try 0: the task instance
    /// never ran).
    Past {
        /// The task instance.
        task: TaskKey,
        /// The try.
        try_number: u64,
    },
}

fn token_ok(token: &str) -> bool {
    !token.is_empty()
        && token.len() <= MAX_TOKEN_BYTES
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn task_id_ok(task_id: &str) -> bool {
    !task_id.is_empty()
        && task_id.len() <= MAX_TASK_ID_BYTES
        && task_id
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Whether Airflow's continuation token can be carried in a cursor.
pub(crate) fn usable_token(token: &str) -> bool {
    token_ok(token)
}

impl Pos {
    /// The cursor text.
    pub(crate) fn cursor(&self) -> String {
        match self {
            Self::Start => "a1/s".to_owned(),
            Self::In {
                task,
                try_number,
                token,
                entries,
                lines,
            } => format!(
                "a1/i/{}/{try_number}/{entries}/{lines}/{}/{}",
                task.map_index,
                token.as_deref().unwrap_or_default(),
                task.task_id
            ),
            Self::Past { task, try_number } => {
                format!("a1/p/{}/{try_number}/{}", task.map_index, task.task_id)
            }
        }
    }

    /// Reads a cursor made by [`Pos::cursor`]; none is [`Pos::Start`]. Only
    /// the exact text [`Pos::cursor`] writes is accepted.
    ///
    /// # Errors
    ///
    /// [`EngineError::InvalidInput`] for anything else.
    pub(crate) fn parse(cursor: Option<&str>) -> Result<Self, EngineError> {
        let Some(text) = cursor else {
            return Ok(Self::Start);
        };
        let bad = || EngineError::InvalidInput {
            message: "the log cursor is not one this engine made".to_owned(),
        };
        if text.len() > MAX_CURSOR_BYTES {
            return Err(bad());
        }
        let parts: Vec<&str> = text.split('/').collect();
        let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
        let map_index = |s: &str| match s.parse::<i64>() {
            Ok(m) if m >= -1 => Ok(m),
            _ => Err(bad()),
        };
        let task = |map: &str, id: &str| {
            if task_id_ok(id) {
                Ok(TaskKey {
                    task_id: id.to_owned(),
                    map_index: map_index(map)?,
                })
            } else {
                Err(bad())
            }
        };
        let pos = match parts.as_slice() {
            ["a1", "s"] => Self::Start,
            ["a1", "i", map, try_number, entries, lines, token, id] => Self::In {
                task: task(map, id)?,
                try_number: match num(try_number)? {
                    0 => return Err(bad()),
                    n => n,
                },
                token: match *token {
                    "" => None,
                    t if token_ok(t) => Some(t.to_owned()),
                    _ => return Err(bad()),
                },
                entries: num(entries)?,
                lines: num(lines)?,
            },
            ["a1", "p", map, try_number, id] => Self::Past {
                task: task(map, id)?,
                try_number: num(try_number)?,
            },
            _ => return Err(bad()),
        };
        // One spelling only (no signs, no leading zeros).
        if pos.cursor() == text {
            Ok(pos)
        } else {
            Err(bad())
        }
    }
}

/// Each task's place in the DAG's task order: a topological order of
/// `downstream_task_ids` (upstream first), ties by task id.
pub(crate) fn task_ranks(tasks: &[DagTask]) -> BTreeMap<String, usize> {
    let mut upstream: BTreeMap<&str, usize> =
        tasks.iter().map(|t| (t.task_id.as_str(), 0)).collect();
    for t in tasks {
        for d in &t.downstream_task_ids {
            if let Some(n) = upstream.get_mut(d.as_str()) {
                *n += 1;
            }
        }
    }
    let downstream: BTreeMap<&str, &[String]> = tasks
        .iter()
        .map(|t| (t.task_id.as_str(), t.downstream_task_ids.as_slice()))
        .collect();
    let mut ready: BTreeSet<&str> = upstream
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(id, _)| *id)
        .collect();
    let mut ranks = BTreeMap::new();
    while let Some(id) = ready.pop_first() {
        ranks.insert(id.to_owned(), ranks.len());
        for d in downstream.get(id).copied().unwrap_or_default() {
            if let Some(n) = upstream.get_mut(d.as_str()) {
                *n -= 1;
                if *n == 0 {
                    ready.insert(d.as_str());
                }
            }
        }
    }
    // A cycle (Airflow refuses one): its tasks after the others, by id.
    for t in tasks {
        if !ranks.contains_key(&t.task_id) {
            ranks.insert(t.task_id.clone(), ranks.len());
        }
    }
    ranks
}

type Order<'a> = (usize, &'a str, i64);

fn order_of<'a>(ranks: &BTreeMap<String, usize>, task: &'a TaskKey) -> Order<'a> {
    (
        ranks.get(&task.task_id).copied().unwrap_or(usize::MAX),
        task.task_id.as_str(),
        task.map_index,
    )
}

/// The task instances in reading order (tasks the DAG no longer lists last, by id).
pub(crate) fn ordered<'a>(
    tis: &'a [TaskInstance],
    ranks: &BTreeMap<String, usize>,
) -> Vec<&'a TaskInstance> {
    let mut out: Vec<&TaskInstance> = tis.iter().collect();
    out.sort_by_key(|t| {
        (
            ranks.get(&t.task_id).copied().unwrap_or(usize::MAX),
            t.task_id.clone(),
            t.map_index,
        )
    });
    out
}

/// The try has started: the task instance is past `scheduled`/`queued`.
fn started(ti: &TaskInstance) -> bool {
    !matches!(
        ti.state.as_deref(),
        None | Some("none" | "scheduled" | "queued")
    )
}

/// Try `try_number` of `ti` has ended: a later try exists, or the instance
/// ended (or waits for its next try).
pub(crate) fn try_over(ti: &TaskInstance, try_number: u64) -> bool {
    try_number < ti.try_number
        || matches!(
            ti.state.as_deref(),
            Some("success" | "failed" | "skipped" | "upstream_failed" | "removed" | "up_for_retry")
        )
}

/// The task instance runs no more tries: it ended, or the run ended and it is
/// not running.
fn ti_final(ti: &TaskInstance, run_ended: bool) -> bool {
    crate::translate::task_done(ti.state.as_deref())
        || (run_ended
            && !matches!(
                ti.state.as_deref(),
                Some(
                    "running"
                        | "deferred"
                        | "awaiting_input"
                        | "restarting"
                        | "up_for_reschedule"
                        | "up_for_retry"
                )
            ))
}

/// What a page does next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step<'a> {
    /// Read the try [`Pos::In`] names, of this task instance; `over`: the try
    /// has ended (as the task instance list said before the read).
    Read {
        /// The task instance.
        ti: &'a TaskInstance,
        /// The try has ended.
        over: bool,
    },
    /// Nothing to read now: the try or task instance in turn has not started,
    /// or it ran a try and may run another.
    Wait,
    /// Every task instance was read to its end.
    End,
}

fn find<'a>(tis: &[&'a TaskInstance], task: &TaskKey) -> Option<&'a TaskInstance> {
    tis.iter()
        .find(|t| t.task_id == task.task_id && t.map_index == task.map_index)
        .copied()
}

fn after<'a>(
    tis: &[&'a TaskInstance],
    ranks: &BTreeMap<String, usize>,
    task: &TaskKey,
) -> Option<&'a TaskInstance> {
    let at = order_of(ranks, task);
    tis.iter()
        .find(|t| order_of(ranks, &TaskKey::of(t)) > at)
        .copied()
}

/// Moves `pos` to the next thing to read among `tis` (in reading order) and
/// says what it is. `run_ended`: the DAG run has ended (read before the list).
pub(crate) fn next<'a>(
    tis: &[&'a TaskInstance],
    ranks: &BTreeMap<String, usize>,
    pos: &mut Pos,
    run_ended: bool,
) -> Step<'a> {
    // Each turn moves forward through the list: at most four per instance.
    for _ in 0..=4 * tis.len() + 4 {
        let enter = |ti: &TaskInstance| Pos::Past {
            task: TaskKey::of(ti),
            try_number: 0,
        };
        match pos.clone() {
            Pos::Start => match tis.first() {
                Some(ti) => *pos = enter(ti),
                None => return Step::End,
            },
            Pos::In {
                task, try_number, ..
            } => match find(tis, &task) {
                Some(ti) if try_number <= ti.try_number => {
                    if try_number == ti.try_number && !started(ti) {
                        if !ti_final(ti, run_ended) {
                            return Step::Wait;
                        }
                        // It will not run this try: nothing to read.
                        *pos = Pos::Past { task, try_number };
                        continue;
                    }
                    return Step::Read {
                        ti,
                        over: try_over(ti, try_number) || ti_final(ti, run_ended),
                    };
                }
                // A try the instance does not have (yet): as if past the last one.
                Some(ti) => {
                    *pos = Pos::Past {
                        task,
                        try_number: ti.try_number,
                    };
                }
                None => match after(tis, ranks, &task) {
                    Some(ti) => *pos = enter(ti),
                    None => return Step::End,
                },
            },
            Pos::Past { task, try_number } => match find(tis, &task) {
                Some(ti) if ti.try_number > try_number => {
                    *pos = Pos::In {
                        task,
                        try_number: try_number + 1,
                        token: None,
                        entries: 0,
                        lines: 0,
                    };
                }
                Some(ti) if !ti_final(ti, run_ended) => return Step::Wait,
                _ => match after(tis, ranks, &task) {
                    Some(ti) => *pos = enter(ti),
                    None => return Step::End,
                },
            },
        }
    }
    Step::Wait
}

/// What one log answer (`TaskInstancesLogResponse`) holds, perhaps only its start.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Body {
    /// The log entries, in order (each an object with `event`, or a string).
    pub entries: Vec<Value>,
    /// Airflow's continuation token (none when the log has ended, or the
    /// answer was cut before it).
    pub token: Option<String>,
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// Reads a log answer. A whole one is parsed as it is; one `cut` at the page's
/// byte bound gives the entries complete before the cut (Airflow writes
/// `content` first), and no token.
///
/// # Errors
///
/// A message when a whole answer is not a log answer.
pub(crate) fn parse_body(body: &str, cut: bool) -> Result<Body, String> {
    #[derive(Deserialize)]
    struct Whole {
        #[serde(default)]
        content: Vec<Value>,
        #[serde(default)]
        continuation_token: Option<String>,
    }
    if !cut {
        let whole: Whole = serde_json::from_str(body)
            .map_err(|e| format!("Airflow answered a log taskgate cannot read: {e}"))?;
        return Ok(Body {
            entries: whole.content,
            token: whole.continuation_token,
        });
    }
    let b = body.as_bytes();
    let mut entries = Vec::new();
    let mut i = skip_ws(b, 0);
    for expected in [&b"{"[..], b"\"content\"", b":", b"["] {
        if !b[i..].starts_with(expected) {
            return Ok(Body::default());
        }
        i = skip_ws(b, i + expected.len());
    }
    while i < b.len() && b[i] != b']' {
        let mut values = serde_json::Deserializer::from_slice(&b[i..]).into_iter::<Value>();
        let Some(Ok(value)) = values.next() else {
            break;
        };
        // Complete only when what follows it was read too.
        let j = skip_ws(b, i + values.byte_offset());
        match b.get(j) {
            Some(b',') => i = skip_ws(b, j + 1),
            Some(b']') => i = j,
            _ => break,
        }
        entries.push(value);
    }
    Ok(Body {
        entries,
        token: None,
    })
}

/// The entries of an answer that the task's log holds: without the source
/// group Airflow puts first when a try is read from its start.
pub(crate) fn log_entries(entries: &[Value], from_start: bool) -> &[Value] {
    if !from_start || event(entries.first()) != Some(SOURCE_GROUP) {
        return entries;
    }
    match entries
        .iter()
        .position(|e| event(Some(e)) == Some("::endgroup::"))
    {
        Some(end) => &entries[end + 1..],
        // The group is not over in what was read.
        None => &[],
    }
}

fn event(entry: Option<&Value>) -> Option<&str> {
    match entry? {
        Value::String(s) => Some(s),
        other => other.get("event").and_then(Value::as_str),
    }
}

/// The lines of one log entry: its `event` (an entry Airflow could not parse
/// is its text), each line of it, then any exception it carries as Python
/// prints one (its frames, then `Type: value`). A group marker (`::group::`,
/// `::endgroup::`) has none.
pub(crate) fn entry_lines(entry: &Value) -> Vec<String> {
    let text = event(Some(entry)).unwrap_or_default();
    if text.starts_with("::group::") || text.starts_with("::endgroup::") {
        return Vec::new();
    }
    let mut out: Vec<String> = text.split('\n').map(str::to_owned).collect();
    for e in entry
        .get("error_detail")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let frames = e
            .get("frames")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if !frames.is_empty() {
            out.push("Traceback (most recent call last):".to_owned());
        }
        for f in frames {
            out.push(format!(
                "  File \"{}\", line {}, in {}",
                f.get("filename").and_then(Value::as_str).unwrap_or("?"),
                f.get("lineno").and_then(Value::as_u64).unwrap_or(0),
                f.get("name").and_then(Value::as_str).unwrap_or("?")
            ));
        }
        let kind = e.get("exc_type").and_then(Value::as_str).unwrap_or("error");
        let value = e.get("exc_value").and_then(Value::as_str).unwrap_or("");
        out.extend(format!("{kind}: {value}").split('\n').map(str::to_owned));
    }
    out
}

/// `extract try 2`, `extract[3] try 2` for a mapped instance: the
/// [`LogLine::source`] of a try's lines.
pub(crate) fn source(ti: &TaskInstance, try_number: u64) -> String {
    if ti.map_index < 0 {
        format!("{} try {try_number}", ti.task_id)
    } else {
        format!("{}[{}] try {try_number}", ti.task_id, ti.map_index)
    }
}

/// What [`take`] gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Taken {
    /// The lines.
    pub lines: Vec<LogLine>,
    /// Entries given since the token, counting those given before.
    pub entries: u64,
    /// Lines of the next entry given.
    pub lines_in_entry: u64,
    /// Every entry of `entries` was given.
    pub all: bool,
}

/// At most `limit` lines of `entries` (a try's log entries after a token),
/// after the first `skip` entries and `skip_lines` lines of the next.
pub(crate) fn take(
    entries: &[Value],
    skip: u64,
    skip_lines: u64,
    limit: usize,
    source: &str,
) -> Taken {
    let mut lines = Vec::new();
    let mut at = skip;
    let mut part = skip_lines;
    let start = usize::try_from(skip).unwrap_or(usize::MAX);
    for entry in entries.iter().skip(start) {
        let texts = entry_lines(entry);
        let first = usize::try_from(part).unwrap_or(usize::MAX);
        for text in texts.iter().skip(first) {
            if lines.len() == limit {
                return Taken {
                    lines,
                    entries: at,
                    lines_in_entry: part,
                    all: false,
                };
            }
            lines.push(LogLine::new(source, text));
            part += 1;
        }
        at += 1;
        part = 0;
    }
    Taken {
        lines,
        entries: at,
        lines_in_entry: part,
        all: usize::try_from(at).is_ok_and(|n| n >= entries.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::TaskInstances;
    use serde_json::json;

    fn fixture(name: &str) -> Value {
        let path = format!("{}/tests/fixtures/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        v["body"].clone()
    }

    fn texts(lines: &[LogLine]) -> Vec<&str> {
        lines.iter().map(|l| l.text.as_str()).collect()
    }

    fn key(task_id: &str) -> TaskKey {
        TaskKey {
            task_id: task_id.into(),
            map_index: -1,
        }
    }

    #[test]
    fn cursors_round_trip_and_strangers_are_refused() {
        let token = "eyJlbmRfb2ZfbG9nIjpmYWxzZSwibG9nX3BvcyI6MTB9.aWpY28eh5RFREQEl_UzF7izDjFY";
        for pos in [
            Pos::Start,
            Pos::In {
                task: key("talk.v2-x"),
                try_number: 2,
                token: Some(token.into()),
                entries: 10,
                lines: 3,
            },
            Pos::In {
                task: TaskKey {
                    task_id: "fan_out".into(),
                    map_index: 7,
                },
                try_number: 1,
                token: None,
                entries: 0,
                lines: 0,
            },
            Pos::Past {
                task: key("begin"),
                try_number: 0,
            },
        ] {
            assert_eq!(Pos::parse(Some(&pos.cursor())).unwrap(), pos);
        }
        assert_eq!(Pos::parse(None).unwrap(), Pos::Start);
        let long_id = format!("a1/p/-1/1/{}", "t".repeat(251));
        let long_token = format!("a1/i/-1/1/0/0/{}/t", "x".repeat(300));
        for bad in [
            "",
            "a1",
            "a1/s/",
            "a2/s",
            "g1.s",
            "a1/p/-1/1",
            "a1/p/-2/1/t",
            "a1/p/-1/+1/t",
            "a1/p/-1/01/t",
            "a1/p/-1/1/",
            "a1/p/-1/1/a b",
            "a1/p/-1/1/t/u",
            "a1/i/-1/0/0/0//t",
            "a1/i/-1/1/0/0/to ken/t",
            "a1/i/-1/1/0/0/tok%en/t",
            "a1/i/-1/1/x/0//t",
            long_id.as_str(),
            long_token.as_str(),
            &"a1/s".repeat(200),
        ] {
            assert!(
                matches!(Pos::parse(Some(bad)), Err(EngineError::InvalidInput { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn tasks_are_ranked_upstream_first() {
        let tasks: DagTasks = serde_json::from_value(fixture("logs_dag_tasks")).unwrap();
        let ranks = task_ranks(&tasks.tasks);
        assert_eq!(ranks["begin"], 0);
        assert_eq!(ranks["talk"], 1);
        // A diamond: ties by id, a join after both of its upstreams.
        let t = |id: &str, down: &[&str]| DagTask {
            task_id: id.into(),
            downstream_task_ids: down.iter().map(|s| (*s).to_owned()).collect(),
        };
        let ranks = task_ranks(&[
            t("z_join", &[]),
            t("m_left", &["z_join"]),
            t("b_right", &["z_join"]),
            t("start", &["m_left", "b_right"]),
        ]);
        let mut order: Vec<_> = ranks.iter().collect();
        order.sort_by_key(|(_, r)| **r);
        let order: Vec<&str> = order.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(order, ["start", "b_right", "m_left", "z_join"]);
    }

    fn ti(task_id: &str, map_index: i64, state: Option<&str>, try_number: u64) -> TaskInstance {
        TaskInstance {
            task_id: task_id.into(),
            map_index,
            state: state.map(str::to_owned),
            try_number,
            operator: None,
            operator_name: None,
        }
    }

    #[test]
    fn reads_go_task_by_task_and_try_by_try() {
        let ranks: BTreeMap<String, usize> = [
            ("begin".to_owned(), 0),
            ("gone".to_owned(), 1),
            ("talk".to_owned(), 2),
        ]
        .into();
        let step = |tis: &[TaskInstance], pos: &Pos, ended: bool| {
            let ordered = ordered(tis, &ranks);
            let mut pos = pos.clone();
            let step = match next(&ordered, &ranks, &mut pos, ended) {
                Step::Read { ti, over } => format!("read {} over={over}", ti.task_id),
                other => format!("{other:?}"),
            };
            (step, pos)
        };
        let in_try = |task: &str, t: u64| Pos::In {
            task: key(task),
            try_number: t,
            token: None,
            entries: 0,
            lines: 0,
        };
        let past = |task: &str, t: u64| Pos::Past {
            task: key(task),
            try_number: t,
        };
        // Queued: nothing to read yet.
        let queued = [ti("talk", -1, None, 0), ti("begin", -1, Some("queued"), 1)];
        assert_eq!(
            step(&queued, &Pos::Start, false),
            ("Wait".into(), in_try("begin", 1))
        );
        // The first task runs; the second (listed first) waits for it.
        let running = [ti("talk", -1, None, 0), ti("begin", -1, Some("running"), 1)];
        assert_eq!(
            step(&running, &Pos::Start, false),
            ("read begin over=false".into(), in_try("begin", 1))
        );
        // Read whole while it runs on: stay.
        assert_eq!(step(&running, &past("begin", 1), false).0, "Wait");
        // Waiting for its retry: stay; once retried: the next try.
        let retry = [ti("begin", -1, Some("up_for_retry"), 1)];
        assert_eq!(
            step(&retry, &in_try("begin", 1), false).0,
            "read begin over=true"
        );
        assert_eq!(step(&retry, &past("begin", 1), false).0, "Wait");
        let second = [ti("begin", -1, Some("queued"), 2)];
        assert_eq!(
            step(&second, &past("begin", 1), false),
            ("Wait".into(), in_try("begin", 2))
        );
        // Done: on to the next task; a task that never ran is passed once the run ended.
        let done = [
            ti("talk", -1, Some("running"), 1),
            ti("begin", -1, Some("success"), 2),
        ];
        assert_eq!(
            step(&done, &past("begin", 2), false),
            ("read talk over=false".into(), in_try("talk", 1))
        );
        let never = [
            ti("talk", -1, Some("upstream_failed"), 0),
            ti("begin", -1, Some("failed"), 1),
        ];
        assert_eq!(
            step(&never, &past("begin", 1), true),
            ("End".into(), past("talk", 0))
        );
        let unscheduled = [ti("talk", -1, None, 0), ti("begin", -1, Some("failed"), 1)];
        assert_eq!(step(&unscheduled, &past("begin", 1), false).0, "Wait");
        assert_eq!(step(&unscheduled, &past("begin", 1), true).0, "End");
        // A task instance no longer listed: go on after it.
        assert_eq!(
            step(&done, &in_try("gone", 1), false),
            ("read talk over=false".into(), in_try("talk", 1))
        );
        // A try that will not run now the run ended: passed unread.
        let cancelled = [ti("begin", -1, Some("queued"), 1)];
        assert_eq!(
            step(&cancelled, &Pos::Start, true),
            ("End".into(), past("begin", 1))
        );
        // Mapped instances by map index.
        let mapped = [
            ti("talk", 1, Some("success"), 1),
            ti("talk", 0, Some("success"), 1),
        ];
        let (s, p) = step(&mapped, &Pos::Start, true);
        assert_eq!(s, "read talk over=true");
        assert!(matches!(p, Pos::In { task, .. } if task.map_index == 0));
        // A try the instance does not have is read as past its last one.
        assert_eq!(
            step(&done, &in_try("begin", 5), false),
            ("read talk over=false".into(), in_try("talk", 1))
        );
        // Nothing listed.
        assert_eq!(step(&[], &Pos::Start, false).0, "End");
    }

    #[test]
    fn a_running_try_is_read_on_from_airflows_token() {
        let first = parse_body(&fixture("logs_running_first").to_string(), false).unwrap();
        assert!(first.token.is_some());
        let entries = log_entries(&first.entries, true);
        let got = take(entries, 0, 0, 1000, "talk try 1");
        assert!(got.all);
        let t = texts(&got.lines);
        // The source group (file paths) is left out, group markers too.
        assert!(!t.iter().any(|l| l.contains("attempt=1.log")), "{t:?}");
        assert!(!t.iter().any(|l| l.starts_with("::")), "{t:?}");
        assert_eq!(t[0], "DAG bundles loaded: dags-folder");
        // Untrusted output is kept as text, a long line cut to the bound.
        assert!(t.contains(&"tg-logs \u{1b}[31mred\u{1b}[0m and a bell\u{7}"));
        let long = t.iter().find(|l| l.starts_with("tg-logs long")).unwrap();
        assert!(
            long.ends_with("[… line cut]") && long.len() < 4200,
            "{}",
            long.len()
        );
        assert_eq!(t.last().unwrap(), &"tg-logs line 1 of 8");
        assert!(got.lines.iter().all(|l| l.source == "talk try 1"));
        // Read on from the token: only what is new, then the rest once it ended.
        let next = parse_body(&fixture("logs_running_next").to_string(), false).unwrap();
        let got = take(log_entries(&next.entries, false), 0, 0, 1000, "talk try 1");
        assert_eq!(texts(&got.lines), ["tg-logs line 2 of 8"]);
        let rest = parse_body(&fixture("logs_finished_rest").to_string(), false).unwrap();
        assert_eq!(rest.token, None, "the ended try has no token");
        let got = take(log_entries(&rest.entries, false), 0, 0, 1000, "talk try 1");
        let t = texts(&got.lines);
        assert_eq!(t[0], "tg-logs line 3 of 8");
        assert!(t.contains(&"tg-logs done"));
        assert_eq!(t.last().unwrap(), &"Done. Returned value was: None");
    }

    #[test]
    fn the_whole_log_equals_the_pieces() {
        let whole = parse_body(&fixture("logs_finished_whole").to_string(), false).unwrap();
        let all = take(log_entries(&whole.entries, true), 0, 0, 1000, "s");
        let mut pieces = Vec::new();
        for (name, from_start) in [
            ("logs_running_first", true),
            ("logs_running_next", false),
            ("logs_finished_rest", false),
        ] {
            let body = parse_body(&fixture(name).to_string(), false).unwrap();
            pieces.extend(take(log_entries(&body.entries, from_start), 0, 0, 1000, "s").lines);
        }
        assert_eq!(texts(&all.lines), texts(&pieces));
        // A page at a time, one line each: the same lines.
        let entries = log_entries(&whole.entries, true);
        let (mut at, mut part, mut one_by_one) = (0, 0, Vec::new());
        loop {
            let got = take(entries, at, part, 1, "s");
            one_by_one.extend(got.lines);
            (at, part) = (got.entries, got.lines_in_entry);
            if got.all {
                break;
            }
        }
        assert_eq!(texts(&all.lines), texts(&one_by_one));
    }

    #[test]
    fn a_failed_try_shows_its_exception() {
        let body = parse_body(&fixture("logs_retry_try1").to_string(), false).unwrap();
        let got = take(log_entries(&body.entries, true), 0, 0, 1000, "flaky try 1");
        let t = texts(&got.lines);
        let at = t
            .iter()
            .position(|l| *l == "Task failed with exception")
            .unwrap();
        assert_eq!(t[at + 1], "Traceback (most recent call last):");
        assert!(t[at + 2].starts_with("  File \"") && t[at + 2].contains(", line "));
        assert!(t.contains(&"RuntimeError: tg-retry: the first try fails"));
        assert!(t.contains(&"tg-retry try 1 line 1") && t.contains(&"tg-retry try 1 line 2"));
        let second = parse_body(&fixture("logs_retry_try2").to_string(), false).unwrap();
        let t2 = take(
            log_entries(&second.entries, true),
            0,
            0,
            1000,
            "flaky try 2",
        );
        assert!(texts(&t2.lines).contains(&"tg-retry try 2 line 1"));
        let tis: TaskInstances = serde_json::from_value(fixture("logs_retry_tis")).unwrap();
        assert_eq!(tis.task_instances[0].try_number, 2);
        assert!(try_over(&tis.task_instances[0], 1) && try_over(&tis.task_instances[0], 2));
    }

    #[test]
    fn a_cut_answer_gives_its_complete_entries() {
        let whole = fixture("logs_finished_whole").to_string();
        let all = parse_body(&whole, false).unwrap().entries;
        for cut_at in [0, 5, 13, 100, 2000, whole.len() / 2, whole.len() - 40] {
            let body = parse_body(&whole[..cut_at], true).unwrap();
            assert_eq!(body.token, None);
            assert!(body.entries.len() < all.len(), "{cut_at}");
            assert_eq!(body.entries[..], all[..body.entries.len()], "{cut_at}");
        }
        let body = parse_body(&whole[..whole.len() / 2], true).unwrap();
        assert!(body.entries.len() > 5);
        // Not a log answer: nothing.
        assert_eq!(
            parse_body("{\"other\":[{}]", true).unwrap(),
            Body::default()
        );
        assert!(parse_body("{\"content\":[", false).is_err());
        // An answer Airflow could not parse is a list of strings.
        let strings = parse_body(
            &json!({"content": ["a\nb", "c"], "continuation_token": null}).to_string(),
            false,
        )
        .unwrap();
        assert_eq!(
            texts(&take(&strings.entries, 0, 0, 10, "s").lines),
            ["a", "b", "c"]
        );
        // The source group cut before its end gives no entries yet.
        assert!(log_entries(&all[..2], true).is_empty());
        assert_eq!(log_entries(&all[..2], false).len(), 2);
    }

    #[test]
    fn lines_of_an_entry_are_split_and_counted() {
        let entries = [
            json!({"event": "one\ntwo\r\nthree"}),
            json!({"event": "four"}),
        ];
        let got = take(&entries, 0, 0, 2, "s");
        assert_eq!(texts(&got.lines), ["one", "two"]);
        assert_eq!((got.entries, got.lines_in_entry, got.all), (0, 2, false));
        let got = take(&entries, 0, 2, 2, "s");
        assert_eq!(texts(&got.lines), ["three", "four"]);
        assert_eq!((got.entries, got.lines_in_entry, got.all), (2, 0, true));
        let got = take(&entries, 2, 0, 2, "s");
        assert!(got.lines.is_empty() && got.all);
        let mapped = ti("fan", 3, Some("running"), 2);
        assert_eq!(source(&mapped, 2), "fan[3] try 2");
    }
}
