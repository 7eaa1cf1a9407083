//! `subscriptions/listen` with `notifications.taskIds` (the tasks extension's
//! push): a request that stays open and sends `notifications/tasks` — the
//! task's `DetailedTask`, exactly as `tasks/get` builds it — whenever a watched
//! task changes, then ends with its result.
//!
//! This file serves the request: its checks, the first read of each run, the
//! acknowledgement and the first notifications; what follows is the
//! [`Following`] it returns (`following.rs`), and the text of a notification
//! is `notification.rs`'s. The stream holds a wait slot for its life, reads
//! the engines only while open (through the shared watches of
//! [`crate::core::watch`]), and leaves nothing behind when it ends. It ends
//! when every watched task is terminal, at `server.max_listen`, or when the
//! client cancels it (HTTP: closes the stream; stdio: `notifications/cancelled`).

use axum::http::HeaderMap;
use serde_json::{json, Value};

use super::super::wire::{Outbound, Outgoing};
use super::following::{Following, Held, Watched};
use super::notification::{render, Own, SUBSCRIPTION_ID};
use super::{check_headers, check_meta, missing_tasks, require_header};
use crate::core::handle::Dialect;
use crate::core::watch::Seen;
use crate::core::{Caller, CoreError, Gateway};
use crate::rpc::header;
use crate::rpc::{Params, RpcError};

/// Most task ids one listen request may name; more is refused with -32602.
pub const MAX_TASK_IDS: usize = 32;

/// Serves `subscriptions/listen` (request `id`): acknowledges the task ids the
/// caller may read and sends each one's `DetailedTask` now, on `out`; returns
/// the closing result and the [`Following`] that sends each change after
/// this, which the transport drives and ends with that result (see
/// [`super::following`]).
///
/// Ids that do not open for this caller (forged, altered, expired, another
/// caller's) and ids of runs the engine does not know are left out of the
/// acknowledgement alike: no oracle.
///
/// # Errors
///
/// As every 2026-07-28 request for `_meta` and headers; -32021 when `taskIds`
/// is sent without the tasks extension; -32602 for a malformed filter or too
/// many ids; -32600 without a stream to send on; a retryable error when the
/// wait bounds are full or an engine cannot be read.
pub async fn listen(
    gw: &Gateway,
    caller: &Caller,
    headers: Option<&HeaderMap>,
    out: Option<&Outbound>,
    id: &Value,
    params: &Params,
) -> Result<(Value, Following), RpcError> {
    if let (Some(headers), Some(version)) = (headers, params.meta_version()) {
        require_header(headers, &header::PROTOCOL_VERSION, version)?;
    }
    let declared = check_meta(params)?;
    if let Some(headers) = headers {
        check_headers(gw, headers, "subscriptions/listen", params)?;
    }
    // The ids read from a parse of their own, freed here: the request's
    // params are not kept as a tree for the stream's life.
    let ids: Vec<Box<str>> = task_ids(&params.uncached(), declared.tasks)?
        .into_iter()
        .map(Box::from)
        .collect();
    let out = out.ok_or_else(|| {
        RpcError::InvalidRequest(
            "subscriptions/listen needs a stream: send Accept: text/event-stream".into(),
        )
    })?;
    let slot = gw.hold_wait(caller)?;
    let listening = gw.metrics.listening();

    // Each id that opens for this caller and names a run its engine knows;
    // the runs it opens count against server.max_watched_runs_per_caller
    // (before any engine call) for the life of the stream.
    let opened: Vec<_> = ids
        .iter()
        .map(|id| &**id)
        .filter_map(|task_id| {
            gw.open(caller, Dialect::TasksExtension, task_id)
                .ok()
                .map(|(claims, tool)| (task_id, claims, tool))
        })
        .collect();
    let watched_runs = gw.hold_watched(caller.id(), opened.len())?;
    let mut read = Vec::new();
    for (task_id, claims, tool) in opened {
        match gw.read(tool, &claims.native).await {
            Ok(snapshot) => read.push((task_id, claims, tool, snapshot)),
            Err(CoreError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // Made for each message, not kept: a map is a few hundred bytes, held
    // by every open stream.
    let meta = || json!({ SUBSCRIPTION_ID: id });
    let accepted: Vec<&str> = read.iter().map(|(t, ..)| *t).collect();
    send(
        out,
        "notifications/subscriptions/acknowledged",
        json!({ "_meta": meta(), "notifications": { "taskIds": accepted } }),
    );

    // Each task's first notification now; a task not yet terminal is
    // watched from here on.
    let mut watched = Vec::new();
    for (task_id, claims, tool, first) in read {
        let own = Own::new(id, declared.elicitation, task_id, &claims);
        let poll_interval = tool.config.poll_interval;
        if first.state.is_terminal() {
            let rendered = render(poll_interval, &Seen::Run(first.clone()));
            let _ = out.send(Outgoing::Pieces(own.pieces(&first, &rendered).to_vec()));
            continue;
        }
        let poll = first.poll_hint.unwrap_or_default().max(poll_interval);
        let rx = gw
            .watches
            .subscribe(tool.name(), &tool.pipeline, &claims.native, poll, &first);
        // The run's text as its watch has it, shared with the run's other
        // streams, when the watch saw what this read saw (it usually has).
        let change = std::sync::Arc::clone(&rx.borrow());
        let last = match change.seen() {
            Seen::Run(seen) if *seen == first => {
                own.pieces(&first, change.rendered(|seen| render(poll_interval, seen)))
            }
            _ => own.pieces(&first, &render(poll_interval, &Seen::Run(first.clone()))),
        };
        drop(change);
        let _ = out.send(Outgoing::Pieces(last.to_vec()));
        watched.push(Watched {
            own,
            last,
            rx,
            poll_interval,
        });
    }
    let held = Held {
        slot,
        watched: watched_runs,
        listening,
    };
    let following = Following::new(watched, gw.server.max_listen, held);
    Ok((
        json!({ "resultType": "complete", "_meta": meta() }),
        following,
    ))
}

/// The task ids of the subscription filter `notifications.taskIds`, each
/// once; naming them needs the tasks extension (`tasks`).
fn task_ids(params: &Value, tasks: bool) -> Result<Vec<&str>, RpcError> {
    let filter = match params.get("notifications") {
        Some(Value::Object(f)) => f,
        _ => {
            return Err(RpcError::InvalidParams(
                "notifications must be an object (a subscription filter)".into(),
            ))
        }
    };
    match filter.get("taskIds") {
        None => Ok(Vec::new()),
        Some(Value::Array(ids)) => {
            if !tasks {
                return Err(missing_tasks());
            }
            let mut seen = Vec::new();
            for v in ids {
                let id = v.as_str().ok_or_else(|| {
                    RpcError::InvalidParams("notifications.taskIds must hold strings".into())
                })?;
                if !seen.contains(&id) {
                    seen.push(id);
                }
            }
            if seen.len() > MAX_TASK_IDS {
                return Err(RpcError::InvalidParams(format!(
                    "notifications.taskIds names {} tasks; one listen stream watches at most {MAX_TASK_IDS}",
                    seen.len()
                )));
            }
            Ok(seen)
        }
        Some(_) => Err(RpcError::InvalidParams(
            "notifications.taskIds must be an array".into(),
        )),
    }
}

fn send(out: &Outbound, method: &str, params: Value) {
    let _ = out.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }).into());
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, UNIX_EPOCH};

    use taskgate_engine::{InputRequest, RunState, Snapshot, ToolOutput};

    use super::super::notification::UNDECLARED_INPUT;
    use super::*;
    use crate::core::handle::{Dialect, TaskClaims};
    use crate::core::watch::Change;
    use crate::core::Tool;
    use axum::body::Bytes;

    async fn gateway(dir: &std::path::Path) -> Gateway {
        let text = format!(
            "[keys]\nseal = [{{ id = \"k\", dev_secret = \"pMB786Hyqn13qKAg6PJpP+906egOk+Zaf0+qlrAiAeU=\" }}]\n\n\
             [engines.local]\nkind = \"exec\"\nspool_dir = \"{}\"\n\n\
             [[tools]]\nname = \"slow\"\nengine = \"local\"\nmode = \"async\"\npoll_interval = \"3s\"\n\
             target = {{ command = [\"/bin/true\"] }}\n",
            dir.join("spool").display(),
        );
        let path = dir.join("listen.toml");
        std::fs::write(&path, text).unwrap();
        crate::load(&path).await.expect("the config loads")
    }

    fn claims(created_ms: u64, ttl_ms: Option<u64>) -> TaskClaims {
        TaskClaims {
            dialect: Dialect::TasksExtension,
            tool: "slow".into(),
            native: "run-1".into(),
            created_ms,
            ttl_ms,
            trace: None,
        }
    }

    const CREATED_MS: u64 = 1_796_000_000_123;

    /// A run in each state, with update times before, after and without one.
    fn snapshots() -> Vec<Snapshot> {
        let ask = BTreeMap::from([(
            "name".to_owned(),
            InputRequest {
                message: "Who \"runs\" this?\n".into(),
                requested_schema: json!({ "type": "object" }),
                approval: false,
            },
        )]);
        let states = [
            RunState::Working {
                message: Some("step 2 of 3 — \u{7} é".into()),
                progress: None,
            },
            RunState::Working {
                message: None,
                progress: None,
            },
            RunState::InputRequired {
                requests: ask,
                message: Some("waiting".into()),
            },
            RunState::Completed(ToolOutput::text("done \"quoted\"")),
            RunState::Failed {
                message: "lost".into(),
            },
            RunState::Cancelled { message: None },
        ];
        let mut all = Vec::new();
        for state in states {
            for updated in [
                None,
                Some(UNIX_EPOCH + Duration::from_millis(CREATED_MS - 5_000)),
                Some(UNIX_EPOCH + Duration::from_millis(CREATED_MS + 61_000)),
            ] {
                let mut s = Snapshot::new(state.clone());
                s.updated_at = updated;
                s.poll_hint = Some(Duration::from_secs(7));
                all.push(s);
            }
        }
        all
    }

    /// The notification as it was made before it was written in pieces: the
    /// `DetailedTask` of `tasks/get`, less `resultType`, plus the
    /// subscription id; the question hidden from a request without
    /// elicitation.
    fn as_tasks_get(
        (id, elicitation): (&Value, bool),
        task_id: &str,
        claims: &TaskClaims,
        tool: &Tool,
        snapshot: &Snapshot,
    ) -> Value {
        let mut task =
            super::super::detailed_task(task_id, claims, tool, snapshot, &super::super::no_tickets);
        let t = task.as_object_mut().unwrap();
        t.remove("resultType");
        if !elicitation && t.remove("inputRequests").is_some() {
            t.insert("statusMessage".into(), json!(UNDECLARED_INPUT));
        }
        t.insert("_meta".into(), json!({ SUBSCRIPTION_ID: id }));
        json!({ "jsonrpc": "2.0", "method": "notifications/tasks", "params": task })
    }

    fn text(pieces: &[Bytes]) -> Vec<u8> {
        pieces.concat()
    }

    #[tokio::test]
    async fn a_notification_is_the_detailed_task_of_tasks_get_for_every_state() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path()).await;
        let tool = gw.tool("slow").unwrap();
        for id in [json!("listen-1"), json!(7), json!("odd \"id\"\n")] {
            for elicitation in [false, true] {
                for ttl in [Some(3_600_000), None] {
                    let claims = claims(CREATED_MS, ttl);
                    let to = (&id, elicitation);
                    let own = Own::new(&id, elicitation, "tg3.k.task-Id_1", &claims);
                    for snapshot in snapshots() {
                        let rendered =
                            render(tool.config.poll_interval, &Seen::Run(snapshot.clone()));
                        let written = text(&own.pieces(&snapshot, &rendered));
                        let value: Value = serde_json::from_slice(&written).unwrap_or_else(|e| {
                            panic!("{e}: {}", String::from_utf8_lossy(&written))
                        });
                        assert_eq!(
                            value,
                            as_tasks_get(to, "tg3.k.task-Id_1", &claims, tool, &snapshot),
                            "{snapshot:?}, elicitation {elicitation}"
                        );
                        assert!(!written.contains(&b'\n'), "one line of JSON text");
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn streams_on_one_run_share_its_text_and_keep_their_own_ids() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path()).await;
        let tool = gw.tool("slow").unwrap();
        let claims = claims(CREATED_MS, Some(60_000));
        let (a_id, b_id) = (json!("listen-a"), json!("listen-b"));
        let a = Own::new(&a_id, true, "tg3.k.A", &claims);
        let a_again = Own::new(&a_id, true, "tg3.k.A", &claims);
        let b = Own::new(&b_id, false, "tg3.k.B", &claims);
        let renders = AtomicUsize::new(0);
        for snapshot in snapshots() {
            // One change, as a watch publishes it, seen by three streams.
            let change = Change::for_test(Seen::Run(snapshot.clone()));
            let render_once = |seen: &Seen| {
                renders.fetch_add(1, Ordering::SeqCst);
                render(tool.config.poll_interval, seen)
            };
            let pa = a.pieces(&snapshot, change.rendered(render_once));
            let pa2 = a_again.pieces(
                &snapshot,
                change.rendered(|seen| render(tool.config.poll_interval, seen)),
            );
            let pb = b.pieces(
                &snapshot,
                change.rendered(|seen| render(tool.config.poll_interval, seen)),
            );
            // The same request on the same task: the same bytes.
            assert_eq!(text(&pa), text(&pa2));
            // The run's state is one copy for every stream that may see it.
            assert_eq!(pa[2].as_ptr(), pa2[2].as_ptr(), "shared, not copied");
            if !matches!(snapshot.state, RunState::InputRequired { .. }) {
                assert_eq!(pa[2].as_ptr(), pb[2].as_ptr(), "shared, not copied");
            }
            // Each stream's own members stay its own.
            let va: Value = serde_json::from_slice(&text(&pa)).unwrap();
            let vb: Value = serde_json::from_slice(&text(&pb)).unwrap();
            assert_eq!(va["params"]["_meta"][SUBSCRIPTION_ID], "listen-a");
            assert_eq!(vb["params"]["_meta"][SUBSCRIPTION_ID], "listen-b");
            assert_eq!(va["params"]["taskId"], "tg3.k.A");
            assert_eq!(vb["params"]["taskId"], "tg3.k.B");
            // A question is shown only to the stream that declared elicitation.
            if matches!(snapshot.state, RunState::InputRequired { .. }) {
                assert!(va["params"]["inputRequests"].is_object());
                assert!(vb["params"].get("inputRequests").is_none());
                assert_eq!(vb["params"]["statusMessage"], UNDECLARED_INPUT);
            }
        }
        assert_eq!(
            renders.load(Ordering::SeqCst),
            snapshots().len(),
            "written once per change"
        );
    }

    /// The text of one notification, as a value.
    fn sent(message: Outgoing) -> Value {
        message.into_value()
    }

    #[tokio::test]
    async fn a_following_sends_each_new_text_ends_at_the_terminal_one_and_frees_its_bounds() {
        use futures::{FutureExt as _, StreamExt as _};
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path()).await;
        let poll = gw.tool("slow").unwrap().config.poll_interval;
        let held = Held {
            slot: gw.hold_wait("alice").unwrap(),
            watched: gw.hold_watched("alice", 1).unwrap(),
            listening: gw.metrics.listening(),
        };
        assert_eq!(gw.waits_in_flight(), 1);
        let working = |message: &str| Snapshot::new(RunState::working(message));
        let first = working("step 1");
        let (tx, rx) = tokio::sync::watch::channel(Change::for_test(Seen::Run(first.clone())));
        let own = Own::new(
            &json!("listen-1"),
            false,
            "tg3.k.A",
            &claims(CREATED_MS, None),
        );
        let last = own.pieces(&first, &render(poll, &Seen::Run(first.clone())));
        let mut following = Following::new(
            vec![Watched {
                own,
                last,
                rx,
                poll_interval: poll,
            }],
            Duration::from_secs(3600),
            held,
        );
        assert!(following.next().now_or_never().is_none(), "nothing new yet");
        // The run read again, the same: nothing is sent.
        tx.send_replace(Change::for_test(Seen::Run(first.clone())));
        assert!(following.next().now_or_never().is_none(), "the same text");
        tx.send_replace(Change::for_test(Seen::Run(working("step 2"))));
        let note = sent(following.next().await.expect("a notification"));
        assert_eq!(note["params"]["statusMessage"], "step 2");
        assert_eq!(note["params"]["taskId"], "tg3.k.A");
        assert!(!following.is_done());
        tx.send_replace(Change::for_test(Seen::Run(Snapshot::new(
            RunState::Completed(ToolOutput::text("done")),
        ))));
        let note = sent(following.next().await.expect("the terminal notification"));
        assert_eq!(note["params"]["status"], "completed");
        assert!(following.is_done(), "the transport closes the stream now");
        assert!(following.next().await.is_none());
        assert_eq!(gw.waits_in_flight(), 1, "held while the stream is");
        drop(following);
        assert_eq!(
            gw.waits_in_flight(),
            0,
            "the wait slot is freed with the stream"
        );
        assert!(gw.hold_watched("alice", 1).is_ok());
        assert!(
            gw.metrics
                .render(crate::core::metrics::InFlight::default())
                .contains("taskgate_listen_streams_in_flight 0\n"),
            "the gauge drops with the stream"
        );
    }

    #[tokio::test]
    async fn a_following_ends_at_max_listen_and_when_its_run_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path()).await;
        let poll = gw.tool("slow").unwrap().config.poll_interval;
        let held = || Held {
            slot: gw.hold_wait("alice").unwrap(),
            watched: gw.hold_watched("alice", 1).unwrap(),
            listening: gw.metrics.listening(),
        };
        let first = Snapshot::new(RunState::working("step 1"));
        let watched = |rx| {
            let own = Own::new(&json!(1), true, "tg3.k.A", &claims(CREATED_MS, None));
            let last = own.pieces(&first, &render(poll, &Seen::Run(first.clone())));
            Watched {
                own,
                last,
                rx,
                poll_interval: poll,
            }
        };
        // Nothing changes: send_all returns at the deadline.
        let (_tx, rx) = tokio::sync::watch::channel(Change::for_test(Seen::Run(first.clone())));
        let following = Following::new(vec![watched(rx)], Duration::from_millis(50), held());
        let (out, mut queued) = crate::dialect::wire::outbound();
        tokio::time::timeout(Duration::from_secs(30), following.send_all(&out))
            .await
            .expect("send_all returns at server.max_listen");
        assert!(queued.try_recv().is_none(), "nothing was sent");
        assert_eq!(gw.waits_in_flight(), 0);
        // The engine no longer knows the run: the stream ends, nothing sent.
        let (tx, rx) = tokio::sync::watch::channel(Change::for_test(Seen::Run(first.clone())));
        let following = Following::new(vec![watched(rx)], Duration::from_secs(3600), held());
        tx.send_replace(Change::for_test(Seen::Gone));
        tokio::time::timeout(Duration::from_secs(30), following.send_all(&out))
            .await
            .expect("send_all returns when the run is gone");
        assert!(queued.try_recv().is_none(), "nothing was sent");
        assert_eq!(gw.waits_in_flight(), 0);
    }
}
