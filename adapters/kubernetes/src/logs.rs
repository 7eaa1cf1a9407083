//! Pod logs as pages, for Jobs and resource targets alike: the one read loop
//! ([`read_page`], over the pods a label selector names) and its pure parts
//! (which containers to read in what order, a log body read with
//! `timestamps=true` → lines, and the cursor).
//!
//! The sources of a Job are its pods' containers, ordered by the pod's
//! creation time, the pod's name and the container's place in the pod spec. A
//! read goes through them in that order and only moves past a container once
//! it has terminated and its log was read to the end; a pod that replaced a
//! failed one comes later and shows its lines under its own name.
//!
//! The cursor names the source being read and the timestamp of its last line
//! read plus how many lines carried that very timestamp:
//! `k1.<created secs>.<container index>.<nanos>.<seen>.<done 0|1>.<pod>`.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use taskgate_engine::{EngineError, LogLine, LogPage, MAX_CURSOR_BYTES, MAX_PAGE_BYTES};

use crate::api::KubeClient;
use crate::MAX_LOG_SOURCES_PER_READ;

/// One page of the logs of the pods `selector` names (none without one), from
/// `start` on: 1 pod list, then 1 log read per container visited (at most
/// [`MAX_LOG_SOURCES_PER_READ`]). `finished`: the run will start no more pods,
/// so the page is `complete` once every container was read to its end.
///
/// # Errors
///
/// The pod list's or a log read's error; a pod gone meanwhile is a note line.
pub(crate) async fn read_page(
    client: &KubeClient,
    selector: Option<&str>,
    start: LogCursor,
    finished: bool,
    limit: usize,
) -> Result<LogPage, EngineError> {
    let pods = match selector {
        Some(selector) => client.pods_labelled(selector).await?,
        None => Vec::new(),
    };
    let sources = sources(&pods);
    let (mut i, mut after) = start.position(&sources);
    let mut cursor = start;
    let mut lines: Vec<LogLine> = Vec::new();
    let mut visited = 0;
    while i < sources.len() && lines.len() < limit && visited < MAX_LOG_SOURCES_PER_READ {
        let source = &sources[i];
        if !source.started {
            break;
        }
        visited += 1;
        let limit_bytes = i64::try_from(MAX_PAGE_BYTES).unwrap_or(i64::MAX);
        let body = match client
            .pod_log_since(&source.pod, &source.container, since(after), limit_bytes)
            .await
        {
            Ok(body) => body,
            Err(EngineError::NotFound) => {
                lines.push(LogLine::note(&format!(
                    "{}: the pod is gone",
                    source.name()
                )));
                cursor = LogCursor {
                    done: true,
                    ..LogCursor::at(source)
                };
                i += 1;
                after = None;
                continue;
            }
            Err(e) => return Err(e),
        };
        let cut = body.len() >= MAX_PAGE_BYTES;
        let chunk = chunk(&body, &source.name(), after, limit - lines.len(), cut);
        lines.extend(chunk.lines);
        cursor = LogCursor {
            after: chunk.after,
            ..LogCursor::at(source)
        };
        if !(chunk.at_end && source.terminated) {
            break;
        }
        cursor.done = true;
        i += 1;
        after = None;
    }
    let complete = finished && i >= sources.len() && sources.iter().all(|s| s.terminated);
    Ok(LogPage {
        lines,
        cursor: cursor.encode(),
        complete,
    })
}

/// One container of one pod of the Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Source {
    /// Seconds since the epoch of the pod's creation.
    pub created: i64,
    /// The pod's name.
    pub pod: String,
    /// The container's place in the pod spec.
    pub index: usize,
    /// The container's name.
    pub container: String,
    /// The container has started (is running or has terminated).
    pub started: bool,
    /// The container has terminated: its log grows no more.
    pub terminated: bool,
}

impl Source {
    /// `<pod>/<container>`, the [`LogLine::source`] of its lines.
    pub(crate) fn name(&self) -> String {
        format!("{}/{}", self.pod, self.container)
    }

    fn key(&self) -> (i64, &str, usize) {
        (self.created, &self.pod, self.index)
    }
}

/// The containers of `pods`, in reading order.
pub(crate) fn sources(pods: &[Pod]) -> Vec<Source> {
    let mut out = Vec::new();
    for pod in pods {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let created = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second());
        let status = pod.status.as_ref();
        let pod_ended = status
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        let statuses = status
            .and_then(|s| s.container_statuses.as_ref())
            .cloned()
            .unwrap_or_default();
        let containers = pod
            .spec
            .as_ref()
            .map(|s| s.containers.clone())
            .unwrap_or_default();
        for (index, container) in containers.iter().enumerate() {
            let state = statuses
                .iter()
                .find(|c| c.name == container.name)
                .and_then(|c| c.state.clone());
            let terminated = state.as_ref().is_some_and(|s| s.terminated.is_some()) || pod_ended;
            let started = terminated || state.as_ref().is_some_and(|s| s.running.is_some());
            out.push(Source {
                created,
                pod: pod_name.clone(),
                index,
                container: container.name.clone(),
                started,
                terminated,
            });
        }
    }
    out.sort_by(|a, b| a.key().cmp(&b.key()));
    out
}

/// Where a read starts or resumes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct LogCursor {
    /// The source: creation seconds, pod, container index.
    pub created: i64,
    /// The pod's name (empty: before the first source).
    pub pod: String,
    /// The container's place in the pod spec.
    pub index: usize,
    /// The last line read: its timestamp in nanoseconds and how many lines
    /// with exactly that timestamp were read. `None`: nothing read yet.
    pub after: Option<(i128, u32)>,
    /// The source was read to its end; the next read starts after it.
    pub done: bool,
}

impl LogCursor {
    /// The cursor at the start of `source`.
    pub(crate) fn at(source: &Source) -> Self {
        Self {
            created: source.created,
            pod: source.pod.clone(),
            index: source.index,
            after: None,
            done: false,
        }
    }

    /// Writes the cursor (at most [`MAX_CURSOR_BYTES`]: a pod name has at most
    /// 253 bytes).
    pub(crate) fn encode(&self) -> String {
        let (nanos, seen) = self
            .after
            .map_or((String::new(), 0), |(n, s)| (n.to_string(), s));
        format!(
            "k1.{}.{}.{nanos}.{seen}.{}.{}",
            self.created,
            self.index,
            u8::from(self.done),
            self.pod
        )
    }

    /// Reads what [`LogCursor::encode`] wrote.
    ///
    /// # Errors
    ///
    /// [`EngineError::InvalidInput`] for anything else.
    pub(crate) fn parse(text: &str) -> Result<Self, EngineError> {
        let bad = || EngineError::InvalidInput {
            message: "the log cursor is not one this engine made".to_owned(),
        };
        if text.len() > MAX_CURSOR_BYTES {
            return Err(bad());
        }
        let mut parts = text.splitn(7, '.');
        let mut next = || parts.next().ok_or_else(bad);
        if next()? != "k1" {
            return Err(bad());
        }
        let created = next()?.parse::<i64>().map_err(|_| bad())?;
        let index = next()?.parse::<usize>().map_err(|_| bad())?;
        let nanos = next()?;
        let seen = next()?.parse::<u32>().map_err(|_| bad())?;
        let done = match next()? {
            "0" => false,
            "1" => true,
            _ => return Err(bad()),
        };
        let pod = next()?.to_owned();
        let after = if nanos.is_empty() {
            None
        } else {
            Some((nanos.parse::<i128>().map_err(|_| bad())?, seen))
        };
        Ok(Self {
            created,
            pod,
            index,
            after,
            done,
        })
    }

    /// The place in `sources` where reading goes on, and the point within that
    /// source to read after.
    pub(crate) fn position(&self, sources: &[Source]) -> (usize, Option<(i128, u32)>) {
        let key = (self.created, self.pod.as_str(), self.index);
        for (i, s) in sources.iter().enumerate() {
            match s.key().cmp(&key) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal if self.done => return (i + 1, None),
                std::cmp::Ordering::Equal => return (i, self.after),
                std::cmp::Ordering::Greater => return (i, None),
            }
        }
        (sources.len(), None)
    }
}

/// What one log body yielded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// The new lines, oldest first.
    pub lines: Vec<LogLine>,
    /// The point after the last line returned (or the one read after).
    pub after: Option<(i128, u32)>,
    /// Every line of the body was returned and the body was not cut by
    /// `limitBytes`: the log was read up to its current end.
    pub at_end: bool,
}

/// Turns a log body read with `timestamps=true` (each line
/// `<RFC3339 nanos> <text>`) into the lines after `after`, at most `limit`.
/// `cut`: the body hit `limitBytes`, so its last line may be partial and is
/// left for the next read. A line whose timestamp cannot be read is kept with
/// the previous line's timestamp.
pub(crate) fn chunk(
    body: &str,
    source: &str,
    after: Option<(i128, u32)>,
    limit: usize,
    cut: bool,
) -> Chunk {
    let mut pieces: Vec<&str> = body.split('\n').collect();
    // The piece after the last '\n' is empty for a whole body, partial for a cut one.
    let tail = pieces.pop().unwrap_or_default();
    let mut at_end = !cut || tail.is_empty();
    if !cut && !tail.is_empty() {
        pieces.push(tail);
    }
    let mut lines = Vec::new();
    let mut last = after;
    let mut skipped_at_after = 0;
    for piece in pieces {
        let (stamp, text) = piece.split_once(' ').unwrap_or((piece, ""));
        let nanos = match stamp.parse::<Timestamp>() {
            Ok(t) => t.as_nanosecond(),
            Err(_) => last.map_or(0, |(n, _)| n),
        };
        if let Some((n, s)) = after {
            // Already read: earlier, or among the first `s` at that instant.
            if nanos < n {
                continue;
            }
            if nanos == n && skipped_at_after < s {
                skipped_at_after += 1;
                continue;
            }
        }
        if lines.len() == limit {
            at_end = false;
            break;
        }
        lines.push(LogLine::new(source, text));
        last = Some(match last {
            Some((n, s)) if n == nanos => (n, s + 1),
            _ => (nanos, 1),
        });
    }
    Chunk {
        lines,
        after: last,
        at_end,
    }
}

/// The `sinceTime` to ask for when resuming after `after`: its whole second
/// (the API server reads `sinceTime` to the second).
pub(crate) fn since(after: Option<(i128, u32)>) -> Option<Timestamp> {
    let (nanos, _) = after?;
    let secs = i64::try_from(nanos.div_euclid(1_000_000_000)).ok()?;
    Timestamp::from_second(secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    type Case = (
        Option<(i128, u32)>,
        usize,
        bool,
        Vec<&'static str>,
        Option<(i128, u32)>,
        bool,
    );

    const T1: &str = "2026-12-04T00:00:01.5Z";
    const T2: &str = "2026-12-04T00:00:02.000000001Z";

    fn nanos(t: &str) -> i128 {
        t.parse::<Timestamp>().unwrap().as_nanosecond()
    }

    fn texts(c: &Chunk) -> Vec<&str> {
        c.lines.iter().map(|l| l.text.as_str()).collect()
    }

    #[test]
    fn bodies_become_new_lines() {
        let body = format!("{T1} a\n{T1} b\n{T2} c\n");
        let n1 = nanos(T1);
        let n2 = nanos(T2);
        // (after, limit, cut, lines, after', at_end)
        let cases: Vec<Case> = vec![
            (None, 10, false, vec!["a", "b", "c"], Some((n2, 1)), true),
            (
                Some((n1, 1)),
                10,
                false,
                vec!["b", "c"],
                Some((n2, 1)),
                true,
            ),
            (Some((n1, 2)), 10, false, vec!["c"], Some((n2, 1)), true),
            (Some((n2, 1)), 10, false, vec![], Some((n2, 1)), true),
            (None, 2, false, vec!["a", "b"], Some((n1, 2)), false),
            (Some((n1, 1)), 1, false, vec!["b"], Some((n1, 2)), false),
        ];
        for (after, limit, cut, want, next, end) in cases {
            let c = chunk(&body, "p/c", after, limit, cut);
            assert_eq!(texts(&c), want, "{after:?} {limit}");
            assert_eq!(c.after, next, "{after:?} {limit}");
            assert_eq!(c.at_end, end, "{after:?} {limit}");
            assert!(c.lines.iter().all(|l| l.source == "p/c"));
        }
        // A body cut by limitBytes: its partial last line waits for the next read.
        let c = chunk(&format!("{T1} a\n{T2} par"), "p/c", None, 10, true);
        assert_eq!((texts(&c), c.at_end), (vec!["a"], false));
        // A whole body without a final line end keeps its last line.
        let c = chunk(&format!("{T1} a\n{T2} z"), "p/c", None, 10, false);
        assert_eq!((texts(&c), c.at_end), (vec!["a", "z"], true));
        assert_eq!(chunk("", "p/c", None, 10, false).lines, vec![]);
    }

    #[test]
    fn reading_on_from_each_cursor_sees_every_line_once() {
        let body = format!("{T1} a\n{T1} b\n{T1} c\n{T2} d\n{T2} e\n");
        for limit in 1..=5 {
            let mut after = None;
            let mut seen = Vec::new();
            for _ in 0..10 {
                let c = chunk(&body, "s", after, limit, false);
                seen.extend(c.lines.iter().map(|l| l.text.clone()));
                after = c.after;
                if c.at_end {
                    break;
                }
            }
            assert_eq!(seen, ["a", "b", "c", "d", "e"], "limit {limit}");
        }
    }

    #[test]
    fn cursors_round_trip_and_bad_ones_are_refused() {
        let c = LogCursor {
            created: 1_700_000_000,
            pod: "job-abc12".into(),
            index: 1,
            after: Some((nanos(T2), 3)),
            done: false,
        };
        assert_eq!(LogCursor::parse(&c.encode()).unwrap(), c);
        let start = LogCursor::default();
        assert_eq!(LogCursor::parse(&start.encode()).unwrap(), start);
        let long = LogCursor {
            pod: "x".repeat(253),
            after: Some((i128::from(i64::MAX) * 1000, u32::MAX)),
            ..c.clone()
        };
        assert!(long.encode().len() <= MAX_CURSOR_BYTES);
        for bad in [
            "",
            "k1",
            "k2.1.0..0.0.p",
            "k1.x.0..0.0.p",
            "k1.1.0..0.2.p",
            "k1.1.0.zz.0.0.p",
        ] {
            assert!(
                matches!(LogCursor::parse(bad), Err(EngineError::InvalidInput { .. })),
                "{bad}"
            );
        }
        assert!(LogCursor::parse(&"k1.1.0..0.0.".repeat(60)).is_err());
    }

    fn pod(name: &str, created: &str, phase: &str, states: &[(&str, &str)]) -> Pod {
        let containers: Vec<_> = states
            .iter()
            .map(|(c, _)| serde_json::json!({"name": c, "image": "x"}))
            .collect();
        let statuses: Vec<_> = states
            .iter()
            .filter(|(_, s)| !s.is_empty())
            .map(|(c, s)| {
                serde_json::json!({"name": c, "image": "x", "imageID": "", "ready": false,
                    "restartCount": 0, "state": {*s: {}}})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"containers": containers},
            "status": {"phase": phase, "containerStatuses": statuses},
        }))
        .unwrap()
    }

    #[test]
    fn sources_are_ordered_and_cursors_find_their_place() {
        let pods = [
            pod(
                "job-b",
                "2026-12-04T00:00:05Z",
                "Running",
                &[("main", "running")],
            ),
            pod(
                "job-a",
                "2026-12-04T00:00:01Z",
                "Failed",
                &[("main", ""), ("side", "terminated")],
            ),
            pod(
                "job-c",
                "2026-12-04T00:00:05Z",
                "Pending",
                &[("main", "waiting")],
            ),
        ];
        let s = sources(&pods);
        let names: Vec<_> = s.iter().map(Source::name).collect();
        assert_eq!(
            names,
            ["job-a/main", "job-a/side", "job-b/main", "job-c/main"]
        );
        let flags: Vec<_> = s.iter().map(|s| (s.started, s.terminated)).collect();
        assert_eq!(
            flags,
            [(true, true), (true, true), (true, false), (false, false)]
        );
        let mut at_b = LogCursor::at(&s[2]);
        at_b.after = Some((7, 1));
        assert_eq!(at_b.position(&s), (2, Some((7, 1))));
        at_b.done = true;
        assert_eq!(at_b.position(&s), (3, None));
        assert_eq!(LogCursor::default().position(&s), (0, None));
        // The cursor's pod is gone: reading goes on with the next one after it.
        let gone = LogCursor {
            pod: "job-a0".into(),
            ..LogCursor::at(&s[0])
        };
        assert_eq!(gone.position(&s), (2, None));
    }

    #[test]
    fn since_is_the_whole_second() {
        assert_eq!(since(None), None);
        assert_eq!(
            since(Some((nanos(T1), 1))).unwrap().to_string(),
            "2026-12-04T00:00:01Z"
        );
    }
}
