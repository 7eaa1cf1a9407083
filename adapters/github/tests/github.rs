//! The GitHub engine against a stateful double of GitHub's REST API whose payloads
//! are GitHub's published examples. Every request is checked by the double
//! (method, path, headers, bodies); each test drives the run's state explicitly.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use double::{Double, Throttle, OWNER, REF, REPO, TOKEN, WORKFLOW};
use serde_json::{json, Value};
use taskgate_engine::{
    Content, Engine, EngineError, InputAction, InputResponse, NativeRef, Pipeline, RunState,
    Snapshot, StartRequest, ToolDecl, TraceContext,
};
use taskgate_github_double as double;

static FILES: AtomicU32 = AtomicU32::new(0);

fn token_file() -> std::path::PathBuf {
    let n = FILES.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(
        "taskgate-github-test-{}-{n}.token",
        std::process::id()
    ));
    std::fs::write(&path, format!("{TOKEN}\n")).unwrap();
    path
}

async fn engine(d: &Double) -> Arc<dyn Engine> {
    taskgate_github::build(json!({
        "token_file": token_file(),
        "base_url": d.url,
        "lookup_delay": "10ms",
    }))
    .await
    .unwrap()
}

fn target(extra: Value) -> Value {
    let mut t = json!({"owner": OWNER, "repo": REPO, "workflow": WORKFLOW, "ref": REF});
    for (k, v) in extra.as_object().unwrap() {
        t[k] = v.clone();
    }
    t
}

async fn pipeline(d: &Double, extra: Value) -> Arc<dyn Pipeline> {
    engine(d)
        .await
        .bind(&ToolDecl {
            input_schema: serde_json::json!({"type": "object"}),
            name: "deploy".into(),
            target: target(extra),
            keep_alive: None,
        })
        .unwrap()
}

fn request(run_name: &str, arguments: Value) -> StartRequest {
    StartRequest {
        run_name: run_name.into(),
        arguments,
        caller_tag: "0123456789abcdef".into(),
        keep_alive: None,
        trace: None,
    }
}

fn run_id(native: &NativeRef) -> u64 {
    native.rsplit('/').next().unwrap().parse().unwrap()
}

fn working_message(s: &Snapshot) -> String {
    match &s.state {
        RunState::Working { message, .. } => message.clone().unwrap_or_default(),
        other => panic!("not working: {other:?}"),
    }
}

const RUNS: &str = "/repos/octo-org/octo-repo/actions/runs";
const DISPATCH: &str = "POST /repos/octo-org/octo-repo/actions/workflows/deploy.yml/dispatches";
const LIST: &str = "GET /repos/octo-org/octo-repo/actions/workflows/deploy.yml/runs";

#[tokio::test]
async fn dispatch_with_run_details_then_queued_in_progress_success() {
    let d = Double::start().await;
    let p = pipeline(&d, json!({})).await;
    let native = p
        .start(request(
            "tg-first",
            json!({"version": "1.2.3", "replicas": 3, "dry_run": false, "environment": null}),
        ))
        .await
        .unwrap();
    let id = run_id(&native);
    assert_eq!(native, format!("{OWNER}/{REPO}/{id}"));
    let seen = d.seen();
    assert_eq!(d.lines(), [DISPATCH]);
    assert_eq!(
        seen[0].body,
        Some(json!({
            "ref": "main",
            "inputs": {"version": "1.2.3", "replicas": "3", "dry_run": "false"},
            "return_run_details": true,
        }))
    );
    d.clear_seen();

    // queued: one call.
    let s = p.read(&native).await.unwrap();
    assert!(working_message(&s).contains("queued"), "{s:?}");
    assert!(s.created_at.is_some());
    assert_eq!(s.poll_hint, None);
    assert_eq!(d.lines(), [format!("GET {RUNS}/{id}")]);
    d.clear_seen();

    // in progress: the run and its jobs.
    d.set_run(id, "in_progress", None);
    let s = p.read(&native).await.unwrap();
    assert_eq!(
        working_message(&s),
        "running job build, step 7/10: Run Tests"
    );
    assert_eq!(
        d.lines(),
        [format!("GET {RUNS}/{id}"), format!("GET {RUNS}/{id}/jobs")]
    );
    d.clear_seen();

    // success: the run, its jobs and its artifacts.
    d.set_run(id, "completed", Some("success"));
    let s = p.read(&native).await.unwrap();
    let RunState::Completed(out) = &s.state else {
        panic!("{s:?}")
    };
    assert!(!out.is_error);
    let st = out.structured.as_ref().unwrap();
    assert_eq!(st["conclusion"], "success");
    assert_eq!(
        st["html_url"],
        format!("https://github.com/{OWNER}/{REPO}/actions/runs/{id}")
    );
    assert_eq!(
        st["jobs"],
        json!([{"name": "build", "conclusion": "success"}])
    );
    assert_eq!(st["artifacts"].as_array().unwrap().len(), 2);
    assert_eq!(st["artifacts"][0]["name"], "Rails");
    assert!(out
        .content
        .iter()
        .any(|c| matches!(c, Content::Link { uri, .. }
        if *uri == format!("https://github.com/{OWNER}/{REPO}/actions/runs/{id}"))));
    assert!(s.ended_at.is_some());
    assert_eq!(
        d.lines(),
        [
            format!("GET {RUNS}/{id}"),
            format!("GET {RUNS}/{id}/jobs"),
            format!("GET {RUNS}/{id}/artifacts"),
        ]
    );
    d.assert_clean();
}

#[tokio::test]
async fn every_other_status_and_conclusion() {
    let d = Double::start().await;
    let p = pipeline(&d, json!({})).await;
    let native = p
        .start(request("tg-statuses", json!({"version": "1"})))
        .await
        .unwrap();
    let id = run_id(&native);
    for (status, want) in [
        ("requested", "requested"),
        ("pending", "pending"),
        ("waiting", "protection rule"),
    ] {
        d.set_run(id, status, None);
        let s = p.read(&native).await.unwrap();
        assert!(working_message(&s).contains(want), "{status}: {s:?}");
    }
    for conclusion in ["failure", "timed_out", "startup_failure"] {
        d.set_run(id, "completed", Some(conclusion));
        let s = p.read(&native).await.unwrap();
        let RunState::Completed(out) = &s.state else {
            panic!("{conclusion}: {s:?}")
        };
        assert!(out.is_error, "{conclusion}");
        let st = out.structured.as_ref().unwrap();
        assert_eq!(st["conclusion"], conclusion);
        assert_eq!(st["failed_jobs"][0]["name"], "build");
        assert_eq!(st["failed_jobs"][0]["failed_steps"][0]["name"], "Run Tests");
        let Content::Text(text) = &out.content[0] else {
            panic!()
        };
        assert!(text.contains("job build"), "{text}");
    }
    d.set_run(id, "completed", Some("cancelled"));
    let s = p.read(&native).await.unwrap();
    assert!(matches!(s.state, RunState::Cancelled { .. }), "{s:?}");
    d.assert_clean();
}

#[tokio::test]
async fn an_older_server_gets_the_correlation_fallback() {
    let d = Double::start().await;
    d.without_run_details();
    let p = pipeline(&d, json!({})).await;
    let native = p
        .start(request("tg-fallback", json!({"version": "2"})))
        .await
        .unwrap();
    let id = run_id(&native);
    assert_eq!(d.lines(), [DISPATCH, DISPATCH, LIST]);
    let seen = d.seen();
    assert_eq!(seen[0].body.as_ref().unwrap()["return_run_details"], true);
    let body = seen[1].body.clone().unwrap();
    assert_eq!(body["ref"], "main");
    assert_eq!(body["inputs"]["version"], "2");
    // The run name, then a tag of the inputs (so a retry can compare them).
    let correlation = body["inputs"]["taskgate_run"].as_str().unwrap();
    assert!(correlation.starts_with("tg-fallback."), "{correlation}");
    assert_eq!(body["inputs"].as_object().unwrap().len(), 2, "{body}");
    assert_eq!(seen[2].query["event"], "workflow_dispatch");
    assert!(
        seen[2].query["created"].starts_with(">="),
        "{:?}",
        seen[2].query
    );
    assert_eq!(d.run(id)["display_title"], format!("deploy {correlation}"));
    d.set_run(id, "completed", Some("success"));
    assert!(matches!(
        p.read(&native).await.unwrap().state,
        RunState::Completed(_)
    ));
    d.assert_clean();
}

#[tokio::test]
async fn a_run_listed_late_is_found_by_name_on_read() {
    let d = Double::start().await;
    d.without_run_details();
    d.hide_new_runs_from_lists(4);
    let p = pipeline(&d, json!({})).await;
    let native = p
        .start(request("tg-late", json!({"version": "3"})))
        .await
        .unwrap();
    // Three listings within the start found nothing: the reference names the run.
    assert_eq!(d.lines(), [DISPATCH, DISPATCH, LIST, LIST, LIST]);
    assert!(
        native.starts_with(&format!("{OWNER}/{REPO}/~tg-late~")),
        "{native}"
    );
    let s = p.read(&native).await.unwrap();
    assert!(
        working_message(&s).contains("waiting for GitHub to list the run"),
        "{s:?}"
    );
    // Listed now: the read finds it (the listing carries the run's state).
    let id = d.run_ids()[0];
    d.set_run(id, "completed", Some("success"));
    d.clear_seen();
    let s = p.read(&native).await.unwrap();
    assert!(
        matches!(s.state, RunState::Completed(ref o) if !o.is_error),
        "{s:?}"
    );
    assert_eq!(
        d.lines(),
        [
            LIST.to_owned(),
            format!("GET {RUNS}/{id}/jobs"),
            format!("GET {RUNS}/{id}/artifacts")
        ]
    );
    // Cancel resolves the name too (and the run has finished: 409 -> Ok).
    p.cancel(&native).await.unwrap();
    d.assert_clean();
}

#[tokio::test]
async fn locate_finds_a_correlated_run() {
    let d = Double::start().await;
    let p = pipeline(&d, json!({"correlate": "always"})).await;
    let native = p
        .start(request("tg-token-1", json!({"version": "4"})))
        .await
        .unwrap();
    // A start with correlation first looks for a run of its name, then dispatches.
    assert_eq!(d.lines(), [LIST, DISPATCH]);
    let dispatched = d.seen()[1].body.clone().unwrap();
    assert!(
        dispatched["inputs"]["taskgate_run"]
            .as_str()
            .is_some_and(|c| c.starts_with("tg-token-1.")),
        "{dispatched}"
    );
    assert_eq!(p.locate("tg-token-1").await.unwrap(), Some(native.clone()));
    assert_eq!(p.locate("tg-token-2").await.unwrap(), None);
    assert!(p.capabilities().locate);
    assert!(p.capabilities().idempotent_start);
    // A retried start finds the run: the same inputs are the same run, other
    // inputs under the same name a conflict; neither dispatches.
    d.clear_seen();
    let again = p
        .start(request("tg-token-1", json!({"version": "4"})))
        .await
        .unwrap();
    assert_eq!(again, native);
    let other = p
        .start(request("tg-token-1", json!({"version": "5"})))
        .await
        .unwrap_err();
    assert!(matches!(other, EngineError::Conflict { .. }), "{other:?}");
    assert_eq!(d.lines(), [LIST, LIST]);
    d.assert_clean();
}

#[tokio::test]
async fn cancel_answers_202_and_409() {
    let d = Double::start().await;
    let p = pipeline(&d, json!({})).await;
    let native = p
        .start(request("tg-cancel", json!({"version": "5"})))
        .await
        .unwrap();
    let id = run_id(&native);
    d.set_run(id, "in_progress", None);
    d.clear_seen();
    p.cancel(&native).await.unwrap();
    assert_eq!(d.lines(), [format!("POST {RUNS}/{id}/cancel")]);
    assert!(matches!(
        p.read(&native).await.unwrap().state,
        RunState::Cancelled { .. }
    ));

    // A finished run: GitHub answers 409, the engine reads the run and says Ok;
    // the next read reports the real final state.
    let other = p
        .start(request("tg-done", json!({"version": "6"})))
        .await
        .unwrap();
    let other_id = run_id(&other);
    d.set_run(other_id, "completed", Some("success"));
    d.clear_seen();
    p.cancel(&other).await.unwrap();
    assert_eq!(
        d.lines(),
        [
            format!("POST {RUNS}/{other_id}/cancel"),
            format!("GET {RUNS}/{other_id}")
        ]
    );
    assert!(
        matches!(p.read(&other).await.unwrap().state, RunState::Completed(ref o) if !o.is_error)
    );
    d.assert_clean();
}

#[tokio::test]
async fn an_environment_approval_is_asked_and_approved() {
    let d = Double::start().await;
    let p = pipeline(
        &d,
        json!({"environment_approval": {"message": "Approve deployment to {environment}?"}}),
    )
    .await;
    assert!(p.capabilities().input);
    let native = p
        .start(request("tg-approve", json!({"version": "7"})))
        .await
        .unwrap();
    let id = run_id(&native);
    d.wait_on_environment(id);
    d.clear_seen();
    let s = p.read(&native).await.unwrap();
    let RunState::InputRequired { requests, .. } = &s.state else {
        panic!("{s:?}")
    };
    let (key, req) = requests.iter().next().unwrap();
    assert_eq!(key, "environment-161088068");
    assert_eq!(req.message, "Approve deployment to staging?");
    assert_eq!(
        d.lines(),
        [
            format!("GET {RUNS}/{id}"),
            format!("GET {RUNS}/{id}/pending_deployments")
        ]
    );
    d.clear_seen();
    let accept = InputResponse {
        action: InputAction::Accept,
        content: Some(json!({"comment": "ship it"})),
    };
    p.answer(&native, key, &accept).await.unwrap();
    assert_eq!(d.lines(), [format!("POST {RUNS}/{id}/pending_deployments")]);
    assert_eq!(
        d.reviews(),
        [json!({"environment_ids": [161_088_068], "state": "approved", "comment": "ship it"})]
    );
    assert!(working_message(&p.read(&native).await.unwrap()).contains("running job"));
    // The same answer again: no longer outstanding.
    assert!(matches!(
        p.answer(&native, key, &accept).await.unwrap_err(),
        EngineError::Conflict { .. }
    ));
    d.assert_clean();
}

#[tokio::test]
async fn an_environment_approval_is_rejected() {
    let d = Double::start().await;
    let p = pipeline(&d, json!({"environment_approval": {}})).await;
    let native = p
        .start(request("tg-reject", json!({"version": "8"})))
        .await
        .unwrap();
    let id = run_id(&native);
    d.wait_on_environment(id);
    let s = p.read(&native).await.unwrap();
    let RunState::InputRequired { requests, .. } = &s.state else {
        panic!("{s:?}")
    };
    assert_eq!(
        requests["environment-161088068"].message,
        "Approve deployment to staging?"
    );
    let decline = InputResponse {
        action: InputAction::Decline,
        content: None,
    };
    p.answer(&native, "environment-161088068", &decline)
        .await
        .unwrap();
    assert_eq!(
        d.reviews(),
        [
            json!({"environment_ids": [161_088_068], "state": "rejected", "comment": "Rejected through taskgate"})
        ]
    );
    let s = p.read(&native).await.unwrap();
    assert!(
        matches!(s.state, RunState::Completed(ref o) if o.is_error),
        "{s:?}"
    );
    d.assert_clean();
}

#[tokio::test]
async fn without_approval_settings_a_protected_environment_just_waits() {
    let d = Double::start().await;
    let p = pipeline(&d, json!({})).await;
    assert!(!p.capabilities().input);
    let native = p
        .start(request("tg-wait", json!({"version": "9"})))
        .await
        .unwrap();
    d.wait_on_environment(run_id(&native));
    let s = p.read(&native).await.unwrap();
    assert!(working_message(&s).contains("reviewer on GitHub"), "{s:?}");
    let accept = InputResponse {
        action: InputAction::Accept,
        content: None,
    };
    assert!(matches!(
        p.answer(&native, "environment-161088068", &accept)
            .await
            .unwrap_err(),
        EngineError::Unsupported { .. }
    ));
    d.assert_clean();
}

#[tokio::test]
async fn rate_limits_are_retryable_and_raise_the_poll_hint() {
    let d = Double::start().await;
    let p = pipeline(&d, json!({})).await;
    let native = p
        .start(request("tg-rate", json!({"version": "10"})))
        .await
        .unwrap();

    d.throttle_next(Throttle::Secondary { retry_after: 30 });
    let err = p.read(&native).await.unwrap_err();
    assert!(matches!(err, EngineError::Throttled { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(err.retry_after(), Some(Duration::from_secs(30)));

    for status in [403, 429] {
        d.throttle_next(Throttle::Primary {
            status,
            reset_in: 600,
        });
        let err = p.read(&native).await.unwrap_err();
        let wait = err.retry_after().unwrap();
        assert!(err.is_retryable(), "{status}");
        assert!(
            wait > Duration::from_secs(590) && wait <= Duration::from_secs(600),
            "{wait:?}"
        );
    }

    // A throttled dispatch is an error to retry, never a failed run.
    d.throttle_next(Throttle::Secondary { retry_after: 5 });
    let err = p
        .start(request("tg-rate-2", json!({"version": "11"})))
        .await
        .unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(5)));

    // Plenty of budget: no hint. A low budget: a longer interval.
    assert_eq!(p.read(&native).await.unwrap().poll_hint, None);
    d.set_budget(100, 1800);
    let hint = p.read(&native).await.unwrap().poll_hint.unwrap();
    assert!(hint >= Duration::from_secs(17), "{hint:?}");
    d.set_budget(1, 900);
    let hint = p.read(&native).await.unwrap().poll_hint.unwrap();
    assert!(hint >= Duration::from_secs(890), "{hint:?}");
    d.assert_clean();
}

#[tokio::test]
async fn a_restarted_server_reads_the_same_reference_to_the_end() {
    let d = Double::start().await;
    let native = {
        let p = pipeline(&d, json!({})).await;
        p.start(request("tg-restart", json!({"version": "12"})))
            .await
            .unwrap()
    };
    // A new engine, a new pipeline, nothing carried over but the reference.
    let p = pipeline(&d, json!({})).await;
    let id = run_id(&native);
    let mut seen = Vec::new();
    for (status, conclusion) in [
        ("queued", None),
        ("in_progress", None),
        ("completed", Some("success")),
    ] {
        d.set_run(id, status, conclusion);
        let s = p.read(&native).await.unwrap();
        seen.push(s.state.is_terminal());
    }
    assert_eq!(seen, [false, false, true]);
    d.assert_clean();
}

#[tokio::test]
async fn refused_inputs_and_unknown_runs() {
    let d = Double::start().await;
    let p = pipeline(&d, json!({})).await;
    let err = p
        .start(request("tg-bad", json!({"nope": "x"})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EngineError::InvalidInput { ref message } if message.contains("Unexpected inputs")),
        "{err:?}"
    );
    let err = p
        .start(request(
            "tg-bad",
            json!({"taskgate_run": "x", "version": "1"}),
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::InvalidInput { .. }), "{err:?}");
    assert!(matches!(
        p.read(&format!("{OWNER}/{REPO}/1")).await.unwrap_err(),
        EngineError::NotFound
    ));
    assert!(matches!(
        p.read(&"garbage".to_owned()).await.unwrap_err(),
        EngineError::NotFound
    ));
    assert!(matches!(
        p.cancel(&format!("{OWNER}/{REPO}/1")).await.unwrap_err(),
        EngineError::NotFound
    ));
    d.assert_clean();
}

#[tokio::test]
async fn check_reads_the_workflow_file_and_suggests_a_schema() {
    let d = Double::start().await;
    let e = engine(&d).await;
    let findings = e.probe().await.unwrap();
    assert!(
        findings
            .iter()
            .any(|f| f.contains("accepts the credentials")),
        "{findings:?}"
    );
    // A tool whose schema leaves out the workflow's required input is refused,
    // with the schema the workflow suggests.
    let p = pipeline(&d, json!({})).await;
    let err = p.check().await.unwrap_err();
    assert!(
        matches!(&err, EngineError::InvalidInput { message }
            if message.contains("\"version\" is required") && message.contains("suggested input_schema")),
        "{err:?}"
    );
    // The suggested schema matches the workflow the double serves.
    // (That it matches the workflow's inputs is a unit test of the crate.)
    let schema = double::suggested_input_schema();
    assert_eq!(schema["required"], json!(["version"]));
    let p = engine(&d)
        .await
        .bind(&ToolDecl {
            input_schema: schema,
            name: "deploy".into(),
            target: target(json!({})),
            keep_alive: None,
        })
        .unwrap();
    let findings = p.check().await.unwrap();
    let all = findings.join("\n");
    assert!(
        all.contains("(.github/workflows/deploy.yml) is active"),
        "{all}"
    );
    assert!(all.contains("declared inputs"), "{all}");
    assert!(all.contains("matches the workflow's inputs"), "{all}");
    assert!(!all.contains("does not declare"), "{all}");
    let check_calls = [
        "GET /repos/octo-org/octo-repo/actions/workflows/deploy.yml".to_owned(),
        "GET /repos/octo-org/octo-repo/contents/.github/workflows/deploy.yml".to_owned(),
    ];
    let mut expected = vec!["GET /rate_limit".to_owned()];
    expected.extend(check_calls.iter().cloned());
    expected.extend(check_calls.iter().cloned());
    assert_eq!(d.lines(), expected);
    d.assert_clean();
}

/// With `trace_input`, the dispatch carries the `traceparent` as that input
/// (the double refuses inputs its workflow does not declare, as GitHub does);
/// a retry under another trace finds the run it made; an argument of that name
/// is refused before any call; a schema that declares it is refused at bind;
/// check refuses a trace input the workflow does not declare.
#[tokio::test]
async fn the_trace_context_is_the_declared_trace_input() {
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let d = Double::start().await;
    let p = pipeline(
        &d,
        json!({"trace_input": "traceparent", "correlate": "always"}),
    )
    .await;
    let mut first = request("tg-trace", json!({"version": "1.0.0"}));
    first.trace = Some(TraceContext::new(TP, Some("vendor=abc")).unwrap());
    let native = p.start(first).await.unwrap();
    let dispatched: Vec<Value> = d
        .seen()
        .into_iter()
        .filter(|s| s.line() == DISPATCH)
        .filter_map(|s| s.body)
        .collect();
    assert_eq!(dispatched.len(), 1);
    assert_eq!(dispatched[0]["inputs"]["traceparent"], TP);
    assert_eq!(dispatched[0]["inputs"]["version"], "1.0.0");
    assert!(!dispatched[0].to_string().contains("vendor=abc"));
    d.clear_seen();
    // A retry under another trace finds the run; no second dispatch.
    let mut again = request("tg-trace", json!({"version": "1.0.0"}));
    again.trace = Some(
        TraceContext::new(
            "00-11111111111111111111111111111111-2222222222222222-01",
            None,
        )
        .unwrap(),
    );
    assert_eq!(p.start(again).await.unwrap(), native);
    assert!(!d.lines().contains(&DISPATCH.to_owned()), "{:?}", d.lines());
    d.clear_seen();
    // Without a trace context the input is left out.
    p.start(request("tg-untraced", json!({"version": "1.0.0"})))
        .await
        .unwrap();
    let body = d
        .seen()
        .into_iter()
        .find(|s| s.line() == DISPATCH)
        .unwrap()
        .body
        .unwrap();
    assert!(body["inputs"].get("traceparent").is_none(), "{body}");
    d.clear_seen();
    // Hostile: an argument may not fill the trace input.
    let err = p
        .start(request(
            "tg-hostile",
            json!({"version": "1", "traceparent": "00-forged"}),
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::InvalidInput { .. }), "{err:?}");
    assert!(d.lines().is_empty(), "{:?}", d.lines());
    let mut schema = double::suggested_input_schema();
    let refused = engine(&d).await.bind(&ToolDecl {
        input_schema: schema.clone(),
        name: "deploy".into(),
        target: target(json!({"trace_input": "traceparent"})),
        keep_alive: None,
    });
    assert_eq!(refused.err().unwrap().key, "target.trace_input");
    // check: the workflow declares the trace input, and the schema need not.
    schema["properties"]
        .as_object_mut()
        .unwrap()
        .remove("traceparent");
    let bind = |trace_input: &str| {
        let schema = schema.clone();
        let trace_input = trace_input.to_owned();
        let d = &d;
        async move {
            engine(d)
                .await
                .bind(&ToolDecl {
                    input_schema: schema,
                    name: "deploy".into(),
                    target: target(json!({"trace_input": trace_input})),
                    keep_alive: None,
                })
                .unwrap()
        }
    };
    let findings = bind("traceparent").await.check().await.unwrap();
    assert!(
        findings
            .join("\n")
            .contains("matches the workflow's inputs"),
        "{findings:?}"
    );
    let err = bind("otel_parent").await.check().await.unwrap_err();
    assert!(
        matches!(&err, EngineError::InvalidInput { message } if message.contains("does not declare the trace input")),
        "{err:?}"
    );
    d.assert_clean();
}

/// A fresh RSA key as PEM (PKCS#8), for GitHub App authentication.
fn app_key_file() -> std::path::PathBuf {
    use aws_lc_rs::encoding::AsDer;
    use base64::Engine as _;
    let key = aws_lc_rs::rsa::KeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).unwrap();
    let der = AsDer::<aws_lc_rs::encoding::Pkcs8V1Der>::as_der(&key).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    let pem = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        lines.join("\n")
    );
    let n = FILES.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(
        "taskgate-github-test-{}-{n}.pem",
        std::process::id()
    ));
    std::fs::write(&path, pem).unwrap();
    path
}

#[tokio::test]
async fn a_github_app_installation_mints_its_token_once() {
    let d = Double::start().await;
    let e = taskgate_github::build(json!({
        "app_id": double::APP_ID.parse::<u64>().unwrap(),
        "installation_id": double::INSTALLATION_ID.parse::<u64>().unwrap(),
        "private_key_file": app_key_file(),
        "base_url": d.url,
    }))
    .await
    .unwrap();
    // Building made no request.
    assert!(d.lines().is_empty());
    let p = e
        .bind(&ToolDecl {
            input_schema: serde_json::json!({"type": "object"}),
            name: "deploy".into(),
            target: target(json!({})),
            keep_alive: None,
        })
        .unwrap();
    let native = p
        .start(request("tg-app", json!({"version": "13"})))
        .await
        .unwrap();
    p.read(&native).await.unwrap();
    assert_eq!(d.token_exchanges(), 1);
    assert_eq!(
        d.lines(),
        [
            format!(
                "POST /app/installations/{}/access_tokens",
                double::INSTALLATION_ID
            ),
            DISPATCH.to_owned(),
            format!("GET {RUNS}/{}", run_id(&native)),
        ]
    );
    d.assert_clean();
}

/// A job of the published example with the given id, name, status and steps
/// (`(status, conclusion)` each).
fn job(id: u64, name: &str, status: &str, steps: &[(&str, Option<&str>)]) -> Value {
    let mut j = double::fixture("job-paginated.json")["jobs"][0].clone();
    j["id"] = json!(id);
    j["name"] = json!(name);
    j["status"] = json!(status);
    j["conclusion"] = if status == "completed" {
        json!("success")
    } else {
        Value::Null
    };
    j["steps"] = steps
        .iter()
        .enumerate()
        .map(|(i, (status, conclusion))| {
            json!({"name": format!("step {}", i + 1), "number": i + 1, "status": status, "conclusion": conclusion})
        })
        .collect();
    j
}

/// Reads pages from `cursor` until one adds nothing; returns every line as
/// `source: text`, the last cursor and whether the last page was complete.
async fn drain(
    p: &Arc<dyn Pipeline>,
    run: &NativeRef,
    mut cursor: Option<String>,
    limit: usize,
) -> (Vec<String>, Option<String>, bool) {
    let mut all = Vec::new();
    loop {
        let page = p.logs(run, cursor.as_deref(), limit).await.unwrap();
        assert!(page.lines.len() <= limit);
        let empty = page.lines.is_empty();
        all.extend(
            page.lines
                .into_iter()
                .map(|l| format!("{}: {}", l.source, l.text)),
        );
        cursor = Some(page.cursor);
        if empty || page.complete {
            return (all, cursor, page.complete);
        }
    }
}

#[tokio::test]
async fn job_logs_are_step_events_while_running_then_the_log_each_line_once() {
    let d = Double::start().await;
    let p = pipeline(&d, json!({})).await;
    let run = p
        .start(request("tg-logs", json!({"version": "1"})))
        .await
        .unwrap();
    let id = run_id(&run);
    d.set_run(id, "in_progress", None);
    d.set_jobs(
        id,
        json!([
            job(2, "test", "queued", &[]),
            job(
                1,
                "build",
                "in_progress",
                &[("completed", Some("success")), ("in_progress", None)]
            ),
        ]),
    );
    let (first, cursor, complete) = drain(&p, &run, None, 100).await;
    assert_eq!(
        first,
        [
            "build: started step 1: step 1",
            "build: finished step 1: step 1 (success)",
            "build: started step 2: step 2",
        ]
    );
    assert!(!complete);
    assert!(
        d.downloads().is_empty(),
        "no log is asked for a running job"
    );

    // build finishes (its log is kept); test starts.
    let build_log = "\u{feff}2026-12-04T06:00:00.0000000Z ##[group]Run ./build.sh\n2026-12-04T06:00:01.0000000Z compiled 3 crates\n2026-12-04T06:00:02.0000000Z ##[endgroup]\n";
    d.set_job_log(1, build_log);
    d.set_jobs(
        id,
        json!([
            job(
                1,
                "build",
                "completed",
                &[
                    ("completed", Some("success")),
                    ("completed", Some("success"))
                ]
            ),
            job(2, "test", "in_progress", &[("in_progress", None)]),
        ]),
    );
    // Two lines a page: the cursor stops inside the log and goes on from there.
    let (second, cursor, complete) = drain(&p, &run, cursor, 2).await;
    assert_eq!(
        second,
        [
            "build: finished step 2: step 2 (success)",
            "build: 2026-12-04T06:00:00.0000000Z ##[group]Run ./build.sh",
            "build: 2026-12-04T06:00:01.0000000Z compiled 3 crates",
            "build: 2026-12-04T06:00:02.0000000Z ##[endgroup]",
            "test: started step 1: step 1",
        ]
    );
    assert!(!complete);
    let downloads = d.downloads();
    assert!(
        downloads.iter().all(|r| r.starts_with("bytes=")),
        "logs are read by range: {downloads:?}"
    );

    d.set_job_log(
        2,
        "2026-12-04T06:01:00.0000000Z 12 passed\nno newline at the end",
    );
    d.set_jobs(
        id,
        json!([
            job(
                1,
                "build",
                "completed",
                &[
                    ("completed", Some("success")),
                    ("completed", Some("success"))
                ]
            ),
            job(2, "test", "completed", &[("completed", Some("success"))]),
        ]),
    );
    let (third, cursor, complete) = drain(&p, &run, cursor, 100).await;
    assert_eq!(
        third,
        [
            "test: finished step 1: step 1 (success)",
            "test: 2026-12-04T06:01:00.0000000Z 12 passed",
            "test: no newline at the end",
        ]
    );
    assert!(!complete, "the run itself has not completed");
    d.set_run(id, "completed", Some("success"));
    let (rest, cursor, complete) = drain(&p, &run, cursor, 100).await;
    assert!(rest.is_empty(), "{rest:?}");
    assert!(complete);
    // From the start again: everything, in the same order.
    let (all, _, complete) = drain(&p, &run, None, 1000).await;
    assert!(complete);
    assert_eq!(all.len(), first.len() + second.len() + third.len());
    assert_eq!(all[..3], first[..]);
    // A page ending in nothing new keeps its cursor.
    let again = p.logs(&run, cursor.as_deref(), 10).await.unwrap();
    assert!(again.lines.is_empty() && again.complete);
    assert!(
        matches!(
            p.logs(&run, Some("k1.0.0.0.0.0.pod"), 10).await,
            Err(EngineError::InvalidInput { .. })
        ),
        "another engine's cursor"
    );
    d.assert_clean();
}

#[tokio::test]
async fn a_job_whose_log_is_gone_gets_a_note_and_the_next_job_is_read() {
    let d = Double::start().await;
    let p = pipeline(&d, json!({})).await;
    let run = p
        .start(request("tg-logs-gone", json!({"version": "1"})))
        .await
        .unwrap();
    let id = run_id(&run);
    d.set_run(id, "completed", Some("success"));
    d.set_jobs(
        id,
        json!([
            job(1, "old", "completed", &[("completed", Some("success"))]),
            job(2, "new", "completed", &[("completed", Some("success"))]),
        ]),
    );
    d.set_job_log(2, "kept\n");
    let (lines, _, complete) = drain(&p, &run, None, 100).await;
    assert!(complete);
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert!(
        lines[2].starts_with("taskgate: GitHub keeps no log of job old"),
        "{lines:?}"
    );
    assert_eq!(lines[5], "new: kept");
    d.assert_clean();
}

#[tokio::test]
async fn an_unchanged_run_is_asked_with_its_etags_and_spends_no_budget() {
    let d = Double::start().await;
    let p = pipeline(&d, json!({})).await;
    let run = p
        .start(request("tg-etag", json!({"version": "1"})))
        .await
        .unwrap();
    let id = run_id(&run);
    d.set_run(id, "in_progress", None);
    let first = p.read(&run).await.unwrap();
    assert!(first.revision.is_some(), "a read keeps the ETags it saw");
    let before = d.remaining();
    d.clear_seen();
    let mut last = first.clone();
    for _ in 0..3 {
        last = p
            .wait_for_change(&run, &last, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(last, first, "nothing changed");
    }
    let seen = d.seen();
    assert_eq!(seen.len(), 6, "the run and its jobs, three times: {seen:?}");
    assert!(seen
        .iter()
        .all(|r| r.if_none_match.is_some() && r.not_modified));
    assert_eq!(d.remaining(), before, "304s spend no rate budget");

    // A change is seen on the next ask, read in full.
    d.set_run(id, "completed", Some("failure"));
    let changed = p
        .wait_for_change(&run, &last, Duration::ZERO)
        .await
        .unwrap();
    assert!(changed.state.is_terminal(), "{changed:?}");
    assert!(d.remaining() < before);
    d.assert_clean();
}

/// Item 9 of the security issue: a reference to a run of another repository
/// (another owner, another repository, a case variant, the same run id) is not
/// found by read, cancel, answer and logs, and GitHub is never asked about it:
/// the double sees no request at all, so nothing of the other repository is
/// read, cancelled or approved with taskgate's token.
#[tokio::test]
async fn a_reference_to_another_repositorys_run_goes_nowhere() {
    let d = Double::start().await;
    let p = pipeline(
        &d,
        json!({"environment_approval": {"message": "Approve deployment to {environment}?"}}),
    )
    .await;
    let native = p
        .start(request("tg-own", json!({"version": "7"})))
        .await
        .unwrap();
    let id = run_id(&native);
    d.wait_on_environment(id);
    let key = {
        let s = p.read(&native).await.unwrap();
        let RunState::InputRequired { requests, .. } = &s.state else {
            panic!("{s:?}")
        };
        requests.keys().next().unwrap().clone()
    };
    d.clear_seen();
    let accept = InputResponse {
        action: InputAction::Accept,
        content: Some(json!({})),
    };
    for foreign in [
        format!("evil-org/{REPO}/{id}"),
        format!("{OWNER}/other-repo/{id}"),
        "evil-org/evil-repo/~tg-own~1700000000".to_owned(),
        format!("{}/{REPO}/{id}", OWNER.to_uppercase()),
        format!("{OWNER}/{REPO}/../../evil-org/evil-repo/{id}"),
    ] {
        let not_found = |what: &str, r: Result<(), EngineError>| {
            assert!(
                matches!(r, Err(EngineError::NotFound)),
                "{what} {foreign}: {r:?}"
            );
        };
        not_found("read", p.read(&foreign).await.map(|_| ()));
        not_found("cancel", p.cancel(&foreign).await);
        not_found("answer", p.answer(&foreign, &key, &accept).await);
        not_found("logs", p.logs(&foreign, None, 10).await.map(|_| ()));
    }
    assert!(d.seen().is_empty(), "GitHub was asked: {:?}", d.lines());
    assert!(d.reviews().is_empty());
    // The tool's own run is untouched and still asks.
    assert!(matches!(
        p.read(&native).await.unwrap().state,
        RunState::InputRequired { .. }
    ));
    d.assert_clean();
}

/// `discover` only reads, in the bounded order its module documents: the
/// repositories (here an App installation's), each one's workflows and
/// environments, and the file of each candidate workflow.
#[tokio::test]
async fn discover_reads_an_installations_repositories_workflows_and_files() {
    let d = Double::start().await;
    d.add_workflow(
        "ci.yml",
        "CI",
        "active",
        "on:\n  push:\njobs:\n  a:\n    runs-on: x\n",
    );
    d.add_workflow(
        "nightly.yml",
        "Nightly",
        "disabled_inactivity",
        "on: workflow_dispatch\njobs:\n  a:\n    runs-on: x\n",
    );
    let e = taskgate_github::build(json!({
        "app_id": double::APP_ID.parse::<u64>().unwrap(),
        "installation_id": double::INSTALLATION_ID.parse::<u64>().unwrap(),
        "private_key_file": app_key_file(),
        "base_url": d.url,
    }))
    .await
    .unwrap();
    let found = e
        .discover(&taskgate_engine::DiscoverOptions::default())
        .await
        .unwrap();
    let names: Vec<&str> = found.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["Deploy"]);
    // The schema check-config suggests, but for the `traceparent` input,
    // which carries the trace context (`trace_input`).
    let mut want = double::suggested_input_schema();
    want["properties"]
        .as_object_mut()
        .unwrap()
        .remove("traceparent");
    assert_eq!(found[0].input_schema, want);
    assert_eq!(found[0].target["trace_input"], "traceparent");
    let repo = format!("/repos/{OWNER}/{REPO}");
    assert_eq!(
        d.lines(),
        [
            format!(
                "POST /app/installations/{}/access_tokens",
                double::INSTALLATION_ID
            ),
            "GET /installation/repositories".to_owned(),
            format!("GET {repo}/actions/workflows"),
            format!("GET {repo}/environments"),
            format!("GET {repo}/contents/.github/workflows/{WORKFLOW}"),
            format!("GET {repo}/contents/.github/workflows/ci.yml"),
        ]
    );
    // With `all`, the disabled workflow too, noted.
    let all = e
        .discover(&taskgate_engine::DiscoverOptions {
            all: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 2);
    assert!(all[1].notes[0].contains("disabled_inactivity"), "{all:?}");
    d.assert_clean();
}

/// Configured repositories are read by name; a throttled GitHub is a
/// retryable error, not an empty answer.
#[tokio::test]
async fn discover_reads_configured_repositories_and_reports_throttling() {
    let d = Double::start().await;
    let e = taskgate_github::build(json!({
        "token_file": token_file(),
        "base_url": d.url,
        "discover_repos": [format!("{OWNER}/{REPO}")],
    }))
    .await
    .unwrap();
    let found = e
        .discover(&taskgate_engine::DiscoverOptions::default())
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(d.lines()[0], format!("GET /repos/{OWNER}/{REPO}"));
    d.throttle_next(Throttle::Secondary { retry_after: 3 });
    let err = e
        .discover(&taskgate_engine::DiscoverOptions::default())
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    assert_eq!(err.retry_after(), Some(Duration::from_secs(3)));
    // A repository that is not owner/repo is refused when the engine is built.
    let Err(bad) = taskgate_github::build(json!({
        "token_file": token_file(),
        "discover_repos": ["octo-org"],
    }))
    .await
    else {
        panic!("a bad discover_repos entry was accepted");
    };
    assert_eq!(bad.key, "discover_repos[0]");
    d.assert_clean();
}
