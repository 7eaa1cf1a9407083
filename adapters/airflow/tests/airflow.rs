//! Integration tests of the Airflow engine against a real Airflow 3.3
//! (`scripts/airflow/up.sh`, DAGs from `tests/airflow/dags`), driven through the
//! `Pipeline` trait.
//!
//! Skipped when `TASKGATE_AIRFLOW_URL` is unset, failed when `TASKGATE_REQUIRE_E2E=1`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use taskgate_airflow::{AirflowEngine, AirflowPipeline};
use taskgate_engine::testing::e2e_endpoint;
use taskgate_engine::{
    Content, Engine, EngineError, InputAction, InputResponse, LogLine, NativeRef, Pipeline,
    RunState, Snapshot, StartRequest, ToolDecl, TraceContext,
};

const DEADLINE: Duration = Duration::from_secs(180);

struct Airflow {
    url: String,
    username: String,
    password: String,
}

fn airflow() -> Option<Airflow> {
    let url = e2e_endpoint("TASKGATE_AIRFLOW_URL")?;
    Some(Airflow {
        url,
        username: std::env::var("TASKGATE_AIRFLOW_USERNAME").unwrap_or_else(|_| "taskgate".into()),
        password: std::env::var("TASKGATE_AIRFLOW_PASSWORD")
            .unwrap_or_else(|_| "taskgate-test-password".into()),
    })
}

impl Airflow {
    fn settings(&self) -> Value {
        // The password reaches the engine through a file, as an operator would set it.
        let dir = std::env::temp_dir().join(format!("taskgate-airflow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Tests run in parallel: each engine gets its own file, written whole before
        // it is named, so no engine reads one another test is still writing.
        static FILES: AtomicU64 = AtomicU64::new(0);
        let n = FILES.fetch_add(1, Ordering::Relaxed);
        let file = dir.join(format!("password-{n}"));
        let partial = dir.join(format!(".password-{n}"));
        std::fs::write(&partial, &self.password).unwrap();
        std::fs::rename(&partial, &file).unwrap();
        json!({"base_url": self.url, "username": self.username, "password_file": file})
    }

    fn engine(&self) -> AirflowEngine {
        AirflowEngine::new(self.settings()).expect("engine")
    }

    fn pipeline(&self, target: Value, input_schema: Value) -> AirflowPipeline {
        self.engine()
            .bind_pipeline(&ToolDecl {
                name: "tool".into(),
                target,
                input_schema,
                keep_alive: None,
            })
            .expect("bind")
    }

    /// A direct API call, for checking what Airflow itself says.
    async fn admin(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let token: Value = http
            .post(format!("{}/auth/token", self.url))
            .json(&json!({"username": self.username, "password": self.password}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut req = http
            .request(method, format!("{}/api/v2{path}", self.url))
            .bearer_auth(token["access_token"].as_str().unwrap());
        if let Some(body) = body {
            req = req.json(&body);
        }
        req.send().await.unwrap().json().await.unwrap()
    }
}

fn run_name(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_000_000;
    format!("{prefix}-{nanos}-{}", N.fetch_add(1, Ordering::Relaxed))
}

fn request(name: &str, arguments: Value) -> StartRequest {
    StartRequest {
        run_name: name.to_owned(),
        arguments,
        caller_tag: "0123456789abcdef".into(),
        keep_alive: None,
        trace: None,
    }
}

fn text(state: &RunState) -> String {
    match state {
        RunState::Completed(out) => out
            .content
            .iter()
            .map(|c| match c {
                Content::Text(t) => t.clone(),
                Content::Link { uri, .. } => uri.clone(),
            })
            .collect(),
        other => format!("{other:?}"),
    }
}

/// Retries `op` while it fails with a retryable error (a loaded Airflow
/// answered "Database error" now and then when its database was SQLite), as a client would, up to the
/// deadline.
async fn retrying<T, F, Fut>(what: &str, op: F) -> Result<T, EngineError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, EngineError>>,
{
    let end = Instant::now() + DEADLINE;
    loop {
        match op().await {
            Err(e) if e.is_retryable() && Instant::now() < end => {
                eprintln!("{what}: retrying after {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            other => return other,
        }
    }
}

/// Sends an answer, again while Airflow answers with a retryable error (under CI
/// load, on SQLite, it held a write past the 30 s read timeout). An attempt that
/// timed out may still have landed, so a later attempt that finds the request
/// answered (`Conflict`) counts as sent: every caller then checks what Airflow
/// recorded (the chosen option, the run's result), which fails if no attempt landed.
async fn answering(
    p: &AirflowPipeline,
    run: &NativeRef,
    key: &str,
    response: &InputResponse,
) -> Result<(), EngineError> {
    let end = Instant::now() + DEADLINE;
    let mut failed_before = false;
    loop {
        match p.answer(run, key, response).await {
            Err(e) if e.is_retryable() && Instant::now() < end => {
                eprintln!("answer: retrying after {e}");
                failed_before = true;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(EngineError::Conflict { message }) if failed_before => {
                eprintln!("answer: an earlier attempt landed ({message})");
                return Ok(());
            }
            other => return other,
        }
    }
}

/// Reads until `done` holds, every 200 ms up to the deadline.
async fn wait_for(
    p: &AirflowPipeline,
    run: &NativeRef,
    what: &str,
    done: impl Fn(&RunState) -> bool,
) -> Snapshot {
    let end = Instant::now() + DEADLINE;
    let mut last = None;
    while Instant::now() < end {
        let snap = retrying("read", || p.read(run)).await.expect("read");
        if done(&snap.state) {
            return snap;
        }
        last = Some(snap);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("timed out waiting for {what}; last snapshot: {last:?}");
}

fn terminal(s: &RunState) -> bool {
    s.is_terminal()
}

fn success_target() -> Value {
    json!({"dag_id": "tg_success", "result": {"task_id": "load"}})
}

fn success_schema() -> Value {
    json!({"type": "object", "properties": {
        "dataset": {"type": "string"}, "rows": {"type": "integer", "minimum": 0}}})
}

#[tokio::test]
async fn success_returns_the_xcom_and_counts_calls() {
    let Some(af) = airflow() else { return };
    let p = af.pipeline(success_target(), success_schema());
    let name = run_name("ok");
    let run = retrying("start", || {
        p.start(request(&name, json!({"dataset": "sales", "rows": 4})))
    })
    .await
    .expect("start");
    // Reads while running: count the calls of each.
    let mut running_calls = Vec::new();
    let mut saw_progress = false;
    let end = Instant::now() + DEADLINE;
    let snap = loop {
        assert!(Instant::now() < end, "the run did not finish");
        let before = p.api_calls();
        let snap = p.read(&run).await.expect("read");
        let calls = p.api_calls() - before;
        if snap.state.is_terminal() {
            eprintln!("API calls for a read of a finished run (with the XCom): {calls}");
            break snap;
        }
        if let RunState::Working { message, progress } = &snap.state {
            if progress.is_some() {
                saw_progress = true;
                assert!(
                    message.as_deref().unwrap_or("").contains("of 3 tasks done"),
                    "{message:?}"
                );
            }
        }
        running_calls.push(calls);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!("API calls per read while queued/running: {running_calls:?}");
    assert!(saw_progress, "no read showed task progress");
    let RunState::Completed(out) = &snap.state else {
        panic!("{snap:?}")
    };
    assert!(!out.is_error, "{out:?}");
    assert_eq!(
        out.structured,
        Some(json!({"dataset": "sales", "total": 12, "count": 4}))
    );
    assert!(snap.ended_at.is_some());
    let before = p.api_calls();
    p.read(&run).await.unwrap();
    eprintln!(
        "API calls for a read of a finished run: {}",
        p.api_calls() - before
    );
}

#[tokio::test]
async fn failure_names_the_task_and_the_tail_of_its_log() {
    let Some(af) = airflow() else { return };
    let p = af.pipeline(
        json!({"dag_id": "tg_fail", "log_lines": 8}),
        json!({"type": "object"}),
    );
    let name = run_name("fail");
    let run = retrying("start", || p.start(request(&name, json!({}))))
        .await
        .expect("start");
    let snap = wait_for(&p, &run, "the failure", terminal).await;
    let RunState::Completed(out) = &snap.state else {
        panic!("{snap:?}")
    };
    assert!(out.is_error);
    let t = text(&snap.state);
    assert!(t.contains("failed task(s): explode"), "{t}");
    assert!(t.contains("taskgate-log-line 5 of 5"), "{t}");
    assert!(t.contains("RuntimeError: taskgate test failure"), "{t}");
    let structured = out.structured.as_ref().unwrap();
    assert_eq!(structured["failed_tasks"][0]["task_id"], "explode");
    assert!(
        structured["failed_tasks"][0]["log_tail"]
            .as_array()
            .unwrap()
            .len()
            <= 8
    );
}

#[tokio::test]
async fn cancel_stops_the_run_and_reads_cancelled() {
    let Some(af) = airflow() else { return };
    let p = af.pipeline(json!({"dag_id": "tg_long"}), json!({"type": "object"}));
    let name = run_name("cancel");
    let run = retrying("start", || p.start(request(&name, json!({}))))
        .await
        .expect("start");
    wait_for(&p, &run, "sleep_long to run", |s| {
        matches!(s, RunState::Working { message: Some(m), .. } if m.contains("running: sleep_long"))
    })
    .await;
    retrying("cancel", || p.cancel(&run)).await.expect("cancel");
    // A second cancel is accepted (already cancelled), not a conflict.
    p.cancel(&run).await.expect("cancel again");
    let snap = p.read(&run).await.unwrap();
    assert!(matches!(snap.state, RunState::Cancelled { .. }), "{snap:?}");
    // Airflow itself ended the run and stopped the task.
    let dag_run = af
        .admin(
            reqwest::Method::GET,
            &format!("/dags/tg_long/dagRuns/{name}"),
            None,
        )
        .await;
    assert_eq!(dag_run["state"], "failed");
    let end = Instant::now() + DEADLINE;
    loop {
        let tis = af
            .admin(
                reqwest::Method::GET,
                &format!("/dags/tg_long/dagRuns/{name}/taskInstances"),
                None,
            )
            .await;
        let sleeping = tis["task_instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["task_id"] == "sleep_long")
            .unwrap()
            .clone();
        if sleeping["state"] != "running" && sleeping["end_date"].is_string() {
            break;
        }
        assert!(Instant::now() < end, "sleep_long still running: {sleeping}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A fresh engine (a restarted server) reads the same.
    let again = af.pipeline(json!({"dag_id": "tg_long"}), json!({"type": "object"}));
    assert!(matches!(
        again.read(&run).await.unwrap().state,
        RunState::Cancelled { .. }
    ));
}

#[tokio::test]
async fn cancel_of_a_finished_run_is_a_conflict() {
    let Some(af) = airflow() else { return };
    let p = af.pipeline(
        json!({"dag_id": "tg_fail", "log_lines": 0}),
        json!({"type": "object"}),
    );
    let name = run_name("done");
    let run = retrying("start", || p.start(request(&name, json!({}))))
        .await
        .expect("start");
    wait_for(&p, &run, "the end", terminal).await;
    assert!(matches!(
        p.cancel(&run).await,
        Err(EngineError::Conflict { .. })
    ));
    let snap = p.read(&run).await.unwrap();
    assert!(
        matches!(&snap.state, RunState::Completed(o) if o.is_error),
        "{snap:?}"
    );
}

async fn waiting_request(
    p: &AirflowPipeline,
    run: &NativeRef,
) -> (String, taskgate_engine::InputRequest) {
    let snap = wait_for(p, run, "the question", |s| {
        matches!(s, RunState::InputRequired { .. })
    })
    .await;
    let RunState::InputRequired { requests, .. } = snap.state else {
        unreachable!()
    };
    assert_eq!(requests.len(), 1, "{requests:?}");
    requests.into_iter().next().unwrap()
}

#[tokio::test]
async fn approval_accepted_continues_the_run() {
    let Some(af) = airflow() else { return };
    let p = af.pipeline(
        json!({"dag_id": "tg_approval", "result": {"task_id": "release"}}),
        json!({"type": "object"}),
    );
    let name = run_name("approve");
    let run = retrying("start", || {
        p.start(request(&name, json!({"version": "2.0.1"})))
    })
    .await
    .expect("start");
    let (key, req) = waiting_request(&p, &run).await;
    assert!(req.message.starts_with("Release 2.0.1?"), "{}", req.message);
    assert_eq!(
        req.requested_schema["properties"]["option"]["enum"],
        json!(["Approve", "Reject"])
    );
    let before = p.api_calls();
    p.read(&run).await.unwrap();
    eprintln!(
        "API calls for a read of a run awaiting input: {}",
        p.api_calls() - before
    );
    let accept = InputResponse {
        action: InputAction::Accept,
        content: Some(json!({"option": "Approve"})),
    };
    answering(&p, &run, &key, &accept).await.expect("answer");
    // The same answer again is stale.
    assert!(matches!(
        p.answer(&run, &key, &accept).await,
        Err(EngineError::Conflict { .. })
    ));
    let snap = wait_for(&p, &run, "the release", terminal).await;
    let RunState::Completed(out) = &snap.state else {
        panic!("{snap:?}")
    };
    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.structured, Some(json!({"released": "2.0.1"})));
}

#[tokio::test]
async fn approval_declined_takes_the_reject_option() {
    let Some(af) = airflow() else { return };
    let p = af.pipeline(json!({"dag_id": "tg_approval"}), json!({"type": "object"}));
    let name = run_name("reject");
    let run = retrying("start", || {
        p.start(request(&name, json!({"version": "9.9"})))
    })
    .await
    .expect("start");
    let (key, _) = waiting_request(&p, &run).await;
    let decline = InputResponse {
        action: InputAction::Decline,
        content: None,
    };
    answering(&p, &run, &key, &decline).await.expect("decline");
    wait_for(&p, &run, "the end", terminal).await;
    let detail = af
        .admin(
            reqwest::Method::GET,
            &format!(
                "/dags/tg_approval/dagRuns/{name}/taskInstances/approve_release/-1/hitlDetails"
            ),
            None,
        )
        .await;
    assert_eq!(detail["chosen_options"], json!(["Reject"]), "{detail}");
    let tis = af
        .admin(
            reqwest::Method::GET,
            &format!("/dags/tg_approval/dagRuns/{name}/taskInstances"),
            None,
        )
        .await;
    let release = tis["task_instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_id"] == "release")
        .unwrap()
        .clone();
    assert_eq!(release["state"], "skipped", "{release}");
}

#[tokio::test]
async fn form_answer_reaches_the_dag() {
    let Some(af) = airflow() else { return };
    let p = af.pipeline(
        json!({"dag_id": "tg_form", "result": {"task_id": "use_details"}}),
        json!({"type": "object"}),
    );
    let name = run_name("form");
    let run = retrying("start", || p.start(request(&name, json!({}))))
        .await
        .expect("start");
    let (key, req) = waiting_request(&p, &run).await;
    assert_eq!(
        req.requested_schema["properties"]["replicas"]["type"],
        "integer"
    );
    assert!(req.requested_schema["properties"].get("option").is_none());
    // An answer that does not fit is refused and changes nothing.
    let bad = InputResponse {
        action: InputAction::Decline,
        content: None,
    };
    assert!(matches!(
        p.answer(&run, &key, &bad).await,
        Err(EngineError::InvalidInput { .. })
    ));
    let answer = InputResponse {
        action: InputAction::Accept,
        content: Some(json!({"region": "us-east-1", "replicas": 5})),
    };
    answering(&p, &run, &key, &answer).await.expect("answer");
    let snap = wait_for(&p, &run, "the end", terminal).await;
    let RunState::Completed(out) = &snap.state else {
        panic!("{snap:?}")
    };
    assert_eq!(
        out.structured,
        Some(json!({"chosen": ["OK"], "details": {"region": "us-east-1", "replicas": 5}}))
    );
}

#[tokio::test]
async fn starts_are_idempotent_and_other_conf_conflicts() {
    let Some(af) = airflow() else { return };
    let p = af.pipeline(success_target(), success_schema());
    let name = run_name("idem");
    let args = json!({"dataset": "a", "rows": 1});
    let first = retrying("start", || p.start(request(&name, args.clone())))
        .await
        .expect("start");
    let again = retrying("retry", || p.start(request(&name, args.clone())))
        .await
        .expect("retry");
    assert_eq!(first, again);
    let other = p
        .start(request(&name, json!({"dataset": "b", "rows": 1})))
        .await;
    assert!(
        matches!(other, Err(EngineError::Conflict { .. })),
        "{other:?}"
    );
    assert_eq!(p.locate(&name).await.unwrap(), Some(first.clone()));
    assert_eq!(p.locate("tg-never-started").await.unwrap(), None);
    // A fresh engine (a restarted server) finds and finishes the same run.
    let fresh = af.pipeline(success_target(), success_schema());
    let snap = wait_for(&fresh, &first, "the end", terminal).await;
    assert!(
        matches!(&snap.state, RunState::Completed(o) if !o.is_error),
        "{snap:?}"
    );
}

/// With `trace_conf_key`, the run's conf carries the trace context as a
/// propagator carrier on the real Airflow (a DAG with params accepts the
/// extra key); a retry under another trace is the same run; an argument of
/// that name is refused before any call, and a schema that declares it at bind.
#[tokio::test]
async fn the_trace_context_travels_in_the_conf_under_its_key() {
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let Some(af) = airflow() else { return };
    let mut target = success_target();
    target["trace_conf_key"] = json!("trace");
    let p = af.pipeline(target.clone(), success_schema());
    let name = run_name("trace");
    let args = json!({"dataset": "a", "rows": 1});
    let mut first = request(&name, args.clone());
    first.trace = Some(TraceContext::new(TP, Some("vendor=abc")).unwrap());
    let run = retrying("start", || p.start(first.clone()))
        .await
        .expect("start");
    let dag_run = af
        .admin(
            reqwest::Method::GET,
            &format!("/dags/tg_success/dagRuns/{name}"),
            None,
        )
        .await;
    assert_eq!(
        dag_run["conf"],
        json!({"dataset": "a", "rows": 1, "trace": {"traceparent": TP, "tracestate": "vendor=abc"}}),
        "{dag_run}"
    );
    let mut again = request(&name, args.clone());
    again.trace = Some(
        TraceContext::new(
            "00-11111111111111111111111111111111-2222222222222222-01",
            None,
        )
        .unwrap(),
    );
    assert_eq!(
        retrying("retry", || p.start(again.clone()))
            .await
            .expect("retry"),
        run
    );
    assert_eq!(
        retrying("retry", || p.start(request(&name, args.clone())))
            .await
            .expect("retry"),
        run
    );
    let other = p
        .start(request(&name, json!({"dataset": "b", "rows": 1})))
        .await;
    assert!(
        matches!(other, Err(EngineError::Conflict { .. })),
        "{other:?}"
    );
    let before = p.api_calls();
    let hostile = p
        .start(request(
            &run_name("trace"),
            json!({"dataset": "a", "trace": {"traceparent": "x"}}),
        ))
        .await;
    assert!(
        matches!(&hostile, Err(EngineError::InvalidInput { message }) if message.contains("reserved")),
        "{hostile:?}"
    );
    assert_eq!(p.api_calls(), before, "a refused start called Airflow");
    let refused = af.engine().bind_pipeline(&ToolDecl {
        name: "tool".into(),
        target,
        input_schema: json!({"type": "object", "properties": {"trace": {"type": "string"}}}),
        keep_alive: None,
    });
    assert_eq!(refused.err().unwrap().key, "target.trace_conf_key");
    let snap = wait_for(&p, &run, "the end", terminal).await;
    assert!(
        matches!(&snap.state, RunState::Completed(o) if !o.is_error),
        "{snap:?}"
    );
}

#[tokio::test]
async fn paused_and_unknown_dags_are_refused_before_any_run() {
    let Some(af) = airflow() else { return };
    let p = af.pipeline(json!({"dag_id": "tg_paused"}), json!({"type": "object"}));
    let name = run_name("paused");
    let e = p.start(request(&name, json!({}))).await.unwrap_err();
    assert!(
        matches!(&e, EngineError::InvalidInput { message } if message.contains("paused")),
        "{e:?}"
    );
    assert_eq!(p.locate(&name).await.unwrap(), None, "a run was queued");
    let findings = p.check().await.expect("check");
    assert!(
        findings.iter().any(|f| f.contains("paused")),
        "{findings:?}"
    );
    let p = af.pipeline(
        json!({"dag_id": "tg_no_such_dag"}),
        json!({"type": "object"}),
    );
    let e = p
        .start(request(&run_name("unknown"), json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, EngineError::InvalidInput { message } if message.contains("no DAG")),
        "{e:?}"
    );
    assert!(matches!(
        p.check().await,
        Err(EngineError::InvalidInput { .. })
    ));
}

#[tokio::test]
async fn check_compares_the_input_schema_with_the_dag_params() {
    let Some(af) = airflow() else { return };
    let ok = af.pipeline(success_target(), success_schema());
    let findings = ok.check().await.expect("check");
    assert!(
        findings.iter().any(|f| f.contains("matches")),
        "{findings:?}"
    );
    let wrong = af.pipeline(
        success_target(),
        json!({"type": "object", "properties": {"dataset": {"type": "integer"}}}),
    );
    let e = wrong.check().await.unwrap_err();
    let EngineError::InvalidInput { message } = e else {
        panic!("{e:?}")
    };
    assert!(
        message.contains("suggested input_schema") && message.contains("\"rows\""),
        "{message}"
    );
    let probe = af.engine().probe().await.expect("probe");
    assert!(probe[0].contains("Airflow 3.3"), "{probe:?}");
}

#[tokio::test]
async fn bad_credentials_are_a_permission_error() {
    let Some(af) = airflow() else { return };
    std::env::set_var("TASKGATE_TEST_BAD_AIRFLOW_TOKEN", "not-a-token");
    let engine = AirflowEngine::new(
        json!({"base_url": af.url, "token_env": "TASKGATE_TEST_BAD_AIRFLOW_TOKEN"}),
    )
    .unwrap();
    let p = engine
        .bind(&ToolDecl {
            name: "t".into(),
            target: success_target(),
            input_schema: json!({}),
            keep_alive: None,
        })
        .unwrap();
    let e = p
        .start(request(&run_name("denied"), json!({})))
        .await
        .unwrap_err();
    assert!(matches!(e, EngineError::PermissionDenied { .. }), "{e:?}");
    let engine = AirflowEngine::new(json!({"base_url": af.url, "username": "taskgate", "password_env": "TASKGATE_TEST_BAD_AIRFLOW_TOKEN"})).unwrap();
    let e = engine.probe().await.unwrap_err();
    assert!(
        matches!(&e, EngineError::PermissionDenied { action, .. } if action == "authentication"),
        "{e:?}"
    );
    // A run of another DAG, or a made-up one, is not found.
    let p = af.pipeline(success_target(), success_schema());
    assert!(matches!(
        p.read(&"tg_fail/x".to_owned()).await,
        Err(EngineError::NotFound)
    ));
    assert!(matches!(
        p.read(&"tg_success/tg-no-such-run".to_owned()).await,
        Err(EngineError::NotFound)
    ));
}

/// Every page of a run's logs from `cursor` until one is `complete` (reading
/// every 200 ms up to the deadline): the lines of each page, and the last cursor.
async fn read_logs_to_the_end(
    p: &AirflowPipeline,
    run: &NativeRef,
    limit: usize,
) -> (Vec<Vec<LogLine>>, String) {
    let end = Instant::now() + DEADLINE;
    let mut cursor: Option<String> = None;
    let mut pages = Vec::new();
    loop {
        let page = retrying("logs", || p.logs(run, cursor.as_deref(), limit))
            .await
            .expect("logs");
        assert!(page.lines.len() <= limit);
        let complete = page.complete;
        let got_lines = !page.lines.is_empty();
        pages.push(page.lines);
        cursor = Some(page.cursor);
        if complete {
            return (pages, cursor.unwrap());
        }
        assert!(
            Instant::now() < end,
            "the logs were not complete in time; read so far: {pages:?}"
        );
        if !got_lines {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn texts_of(pages: &[Vec<LogLine>], source: &str) -> Vec<String> {
    pages
        .iter()
        .flatten()
        .filter(|l| l.source == source)
        .map(|l| l.text.clone())
        .collect()
}

#[tokio::test]
async fn logs_are_read_while_the_task_runs_each_line_once_in_order() {
    let Some(af) = airflow() else { return };
    let p = af.pipeline(json!({"dag_id": "tg_logs"}), json!({"type": "object"}));
    assert!(p.capabilities().logs);
    let name = run_name("logs");
    let n = 12;
    let run = retrying("start", || {
        p.start(request(&name, json!({"lines": n, "interval": 0.5})))
    })
    .await
    .expect("start");
    let (pages, last) = read_logs_to_the_end(&p, &run, 1000).await;
    let all: Vec<&LogLine> = pages.iter().flatten().collect();
    // Task order: the first task's lines before the second's.
    let first_talk = all.iter().position(|l| l.source == "talk try 1").unwrap();
    assert!(all[..first_talk].iter().any(|l| l.text == "tg-logs begin"));
    assert!(all[first_talk..].iter().all(|l| l.source == "talk try 1"));
    let talk = texts_of(&pages, "talk try 1");
    let numbered: Vec<&String> = talk
        .iter()
        .filter(|t| t.starts_with("tg-logs line "))
        .collect();
    let want: Vec<String> = (1..=n)
        .map(|i| format!("tg-logs line {i} of {n}"))
        .collect();
    assert_eq!(
        numbered,
        want.iter().collect::<Vec<_>>(),
        "each line once, in order"
    );
    assert_eq!(talk.iter().filter(|t| *t == "tg-logs done").count(), 1);
    // Read while it ran: the first numbered line and the last came on different pages.
    let page_of = |text: &str| {
        pages
            .iter()
            .position(|p| p.iter().any(|l| l.text == text))
            .unwrap()
    };
    assert!(
        page_of(&format!("tg-logs line 1 of {n}")) < page_of("tg-logs done"),
        "the lines were not read while the task ran: {pages:?}"
    );
    // What a pipeline prints is kept as text (the terminal client strips controls),
    // one line per line, a huge line cut.
    assert!(talk.contains(&"tg-logs \u{1b}[31mred\u{1b}[0m and a bell\u{7}".to_owned()));
    let two = talk.iter().position(|t| t == "tg-logs two").unwrap();
    assert_eq!(talk[two + 1], "tg-logs lines");
    let long = talk.iter().find(|t| t.starts_with("tg-logs long")).unwrap();
    assert!(long.len() <= taskgate_engine::MAX_LINE_BYTES + 20 && long.ends_with("[… line cut]"));
    // The end stays the end.
    let after = p.logs(&run, Some(&last), 1000).await.unwrap();
    assert!(after.lines.is_empty() && after.complete, "{after:?}");
    // Read again from the start in pages of three: the same lines.
    let (small, _) = read_logs_to_the_end(&p, &run, 3).await;
    let again: Vec<&LogLine> = small.iter().flatten().collect();
    assert_eq!(again, all);
    let before = p.api_calls();
    p.logs(&run, None, 1000).await.unwrap();
    eprintln!(
        "API calls for one page of a finished two-task run: {}",
        p.api_calls() - before
    );
}

#[tokio::test]
async fn logs_of_a_retried_task_show_both_tries_in_order() {
    let Some(af) = airflow() else { return };
    let p = af.pipeline(json!({"dag_id": "tg_retry"}), json!({"type": "object"}));
    let name = run_name("retry");
    let run = retrying("start", || p.start(request(&name, json!({}))))
        .await
        .expect("start");
    let (pages, _) = read_logs_to_the_end(&p, &run, 1000).await;
    let all: Vec<&LogLine> = pages.iter().flatten().collect();
    let sources: Vec<&str> = all.iter().map(|l| l.source.as_str()).collect();
    let last_first = sources.iter().rposition(|s| *s == "flaky try 1").unwrap();
    let first_second = sources.iter().position(|s| *s == "flaky try 2").unwrap();
    assert!(last_first < first_second, "{sources:?}");
    let one = texts_of(&pages, "flaky try 1");
    let two = texts_of(&pages, "flaky try 2");
    for (lines, k) in [(&one, 1), (&two, 2)] {
        for i in [1, 2] {
            let line = format!("tg-retry try {k} line {i}");
            assert_eq!(
                lines.iter().filter(|t| **t == line).count(),
                1,
                "{line}: {lines:?}"
            );
        }
    }
    assert!(
        one.contains(&"RuntimeError: tg-retry: the first try fails".to_owned()),
        "{one:?}"
    );
    assert!(!two.iter().any(|t| t.contains("RuntimeError")), "{two:?}");
    let snap = wait_for(&p, &run, "the end", terminal).await;
    assert!(
        matches!(snap.state, RunState::Completed(ref o) if !o.is_error),
        "{snap:?}"
    );
}

#[tokio::test]
async fn forged_log_cursors_are_refused() {
    let Some(af) = airflow() else { return };
    let p = af.pipeline(json!({"dag_id": "tg_retry"}), json!({"type": "object"}));
    let name = run_name("forged");
    let run = retrying("start", || p.start(request(&name, json!({}))))
        .await
        .expect("start");
    // Malformed: refused before any request.
    let before = p.api_calls();
    for bad in [
        "a1/x",
        "a1/p/-1/1/flaky/../../x",
        "a1/i/-1/1/0/0/a%20b/flaky",
    ] {
        let e = p.logs(&run, Some(bad), 10).await.unwrap_err();
        assert!(
            matches!(e, EngineError::InvalidInput { .. }),
            "{bad}: {e:?}"
        );
    }
    assert_eq!(p.api_calls(), before);
    // Well formed, but with a continuation token Airflow did not sign.
    wait_for(&p, &run, "the end", terminal).await;
    let forged =
        "a1/i/-1/1/0/0/eyJlbmRfb2ZfbG9nIjpmYWxzZSwibG9nX3BvcyI6MH0.bm90LWEtc2lnbmF0dXJl/flaky";
    let e = p.logs(&run, Some(forged), 10).await.unwrap_err();
    assert!(
        matches!(&e, EngineError::InvalidInput { message } if message.contains("cursor")),
        "{e:?}"
    );
}

/// A try whose log holds more than a page's byte bound after the last token
/// (here: the whole log of a finished try, which Airflow gives no token for)
/// is shown up to the bound, each line once and in order, then a note; the
/// logs still end.
#[tokio::test]
async fn a_log_beyond_the_page_bound_is_cut_with_a_note() {
    let Some(af) = airflow() else { return };
    let p = af.pipeline(json!({"dag_id": "tg_logs"}), json!({"type": "object"}));
    let name = run_name("big");
    let filler = 2000;
    let run = retrying("start", || {
        p.start(request(
            &name,
            json!({"lines": 1, "interval": 0.1, "filler": filler}),
        ))
    })
    .await
    .expect("start");
    wait_for(&p, &run, "the end", terminal).await;
    let (pages, _) = read_logs_to_the_end(&p, &run, 1000).await;
    let talk = texts_of(&pages, "talk try 1");
    let filled: Vec<&String> = talk
        .iter()
        .filter(|t| t.starts_with("tg-logs filler "))
        .collect();
    assert!(
        !filled.is_empty() && filled.len() < filler,
        "{}",
        filled.len()
    );
    for (i, t) in filled.iter().enumerate() {
        assert!(
            t.starts_with(&format!("tg-logs filler {i:05} ")),
            "line {i}: {t}"
        );
    }
    let notes = texts_of(&pages, "taskgate");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("talk try 1") && notes[0].contains("256 KiB"),
        "{notes:?}"
    );
    eprintln!(
        "a finished try with {filler} lines of 200 bytes: {} lines shown over {} pages",
        filled.len(),
        pages.len()
    );
}
