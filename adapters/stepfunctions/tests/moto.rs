//! Integration tests of the Step Functions engine against moto's server with state
//! machine execution turned on (`scripts/moto/up.sh`), driven through the
//! `Pipeline` trait. Each test makes its own state machine.
//!
//! Skipped when `TASKGATE_MOTO_URL` is unset, failed when `TASKGATE_REQUIRE_E2E=1`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_sfn::config::{
    BehaviorVersion, Credentials, Intercept, Region, RuntimeComponents, SharedInterceptor,
};
use aws_sdk_sfn::types::{ExecutionStatus, StateMachineType};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextRef,
};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::http::{Response, StatusCode};
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use serde_json::{json, Value};
use taskgate_engine::testing::e2e_endpoint;
use taskgate_engine::{
    Engine, EngineError, InputAction, InputResponse, NativeRef, Pipeline, RunState, Snapshot,
    StartRequest, ToolDecl, TraceContext,
};
use taskgate_stepfunctions::{build, build_with, ClientOptions, DECLINED_ERROR};

const ROLE: &str = "arn:aws:iam::123456789012:role/taskgate-tests";
const DEADLINE: Duration = Duration::from_secs(30);

/// The emulator's URL, with the fake credentials the SDK's chain will find.
fn moto() -> Option<String> {
    let url = e2e_endpoint("TASKGATE_MOTO_URL")?;
    fake_credentials();
    Some(url)
}

/// Puts moto's fake credentials where the SDK's default chain finds them, unless
/// the environment has some.
fn fake_credentials() {
    static CREDS: Once = Once::new();
    CREDS.call_once(|| {
        for (k, v) in [
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
        ] {
            if std::env::var_os(k).is_none() {
                std::env::set_var(k, v);
            }
        }
    });
}

fn settings(url: &str) -> Value {
    json!({ "region": "us-east-1", "endpoint_url": url })
}

fn sdk_config(url: &str) -> aws_sdk_sfn::config::Builder {
    aws_sdk_sfn::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(Credentials::new("testing", "testing", None, None, "tests"))
}

fn admin(url: &str) -> aws_sdk_sfn::Client {
    aws_sdk_sfn::Client::from_conf(sdk_config(url).build())
}

fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{nanos}-{}", N.fetch_add(1, Ordering::Relaxed))
}

async fn state_machine(
    url: &str,
    prefix: &str,
    definition: Value,
    kind: StateMachineType,
) -> String {
    admin(url)
        .create_state_machine()
        .name(unique(prefix))
        .definition(definition.to_string())
        .role_arn(ROLE)
        .r#type(kind)
        .send()
        .await
        .expect("create state machine")
        .state_machine_arn()
        .to_owned()
}

async fn standard(url: &str, prefix: &str, definition: Value) -> String {
    state_machine(url, prefix, definition, StateMachineType::Standard).await
}

fn pass_wait_succeed(seconds: u64) -> Value {
    json!({"StartAt": "Prepare", "States": {
        "Prepare": {"Type": "Pass", "Result": {"prepared": true}, "ResultPath": "$.prep", "Next": "Pause"},
        "Pause": {"Type": "Wait", "Seconds": seconds, "Next": "Done"},
        "Done": {"Type": "Succeed"}}})
}

async fn queue(url: &str) -> String {
    let conf = aws_sdk_sqs::config::Builder::new()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "testing", "testing", None, None, "tests",
        ))
        .build();
    aws_sdk_sqs::Client::from_conf(conf)
        .create_queue()
        .queue_name(unique("taskgate-human"))
        .send()
        .await
        .expect("create queue")
        .queue_url()
        .expect("queue url")
        .to_owned()
}

fn human_definition(queue_url: &str) -> Value {
    json!({"StartAt": "Prepare", "States": {
        "Prepare": {"Type": "Pass", "Next": "Approve"},
        "Approve": {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
            "Parameters": {"QueueUrl": queue_url, "MessageBody": {"taskToken.$": "$$.Task.Token", "input.$": "$"}},
            "ResultPath": "$.approval", "Next": "Done"},
        "Done": {"Type": "Succeed"}}})
}

fn human_target(arn: &str) -> Value {
    json!({"state_machine_arn": arn, "human_step": {
        "state": "Approve",
        "message": "Approve the analysis?",
        "schema": {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]},
    }})
}

async fn engine(url: &str) -> Arc<dyn Engine> {
    build(settings(url)).await.expect("build engine")
}

fn bind(engine: &Arc<dyn Engine>, target: Value) -> Arc<dyn Pipeline> {
    engine
        .bind(&ToolDecl {
            input_schema: serde_json::json!({"type": "object"}),
            name: "analyze".into(),
            target,
            keep_alive: None,
        })
        .expect("bind")
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

/// Reads every 150 ms until `done` holds, failing with the last snapshot after
/// the deadline.
async fn wait_until(
    pipeline: &Arc<dyn Pipeline>,
    run: &NativeRef,
    what: &str,
    done: impl Fn(&Snapshot) -> bool,
) -> Snapshot {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < DEADLINE {
        match pipeline.read(run).await {
            Ok(snap) if done(&snap) => return snap,
            Ok(snap) => last = Some(Ok(snap)),
            Err(e) => last = Some(Err(e.to_string())),
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    panic!("{what}: not reached within {DEADLINE:?}; last read: {last:?}");
}

fn completed(s: &Snapshot) -> bool {
    matches!(s.state, RunState::Completed(_))
}

fn output(s: &Snapshot) -> &taskgate_engine::ToolOutput {
    match &s.state {
        RunState::Completed(out) => out,
        other => panic!("not completed: {other:?}"),
    }
}

#[tokio::test]
async fn pass_wait_succeed_is_working_then_completed_with_output() {
    let Some(url) = moto() else { return };
    let arn = standard(&url, "pws", pass_wait_succeed(2)).await;
    let engine = engine(&url).await;
    let pipeline = bind(
        &engine,
        json!({"state_machine_arn": arn, "input_key": "args", "state_in_status": true}),
    );
    let run = pipeline
        .start(request("tg-pws-1", json!({"dataset": "d1"})))
        .await
        .unwrap();
    assert!(
        run.starts_with(&arn.replace(":stateMachine:", ":execution:")),
        "{run}"
    );
    let working = pipeline.read(&run).await.unwrap();
    let RunState::Working { message, .. } = &working.state else {
        panic!("expected working right after start: {working:?}")
    };
    eprintln!("working: {message:?}");
    assert!(working.created_at.is_some());
    let in_wait = wait_until(&pipeline, &run, "in the Wait state", |s| {
        completed(s)
            || matches!(&s.state, RunState::Working { message: Some(m), .. } if m.contains("Pause"))
    })
    .await;
    assert!(
        !completed(&in_wait),
        "the 2 s Wait should still be running: {in_wait:?}"
    );
    let done = wait_until(&pipeline, &run, "completion", completed).await;
    let out = output(&done);
    assert!(!out.is_error);
    assert_eq!(
        out.structured,
        Some(json!({"args": {"dataset": "d1"}, "prep": {"prepared": true}}))
    );
    assert!(done.ended_at.is_some());
    // locate finds the run again from its name alone.
    assert_eq!(
        pipeline.locate("tg-pws-1").await.unwrap(),
        Some(run.clone())
    );
    assert_eq!(pipeline.locate("tg-pws-none").await.unwrap(), None);
    // A reference of this machine that never existed is not found.
    let missing = run.replace("tg-pws-1", "tg-pws-none");
    assert!(matches!(
        pipeline.read(&missing).await,
        Err(EngineError::NotFound)
    ));
}

#[tokio::test]
async fn a_fail_state_is_a_tool_error_with_error_and_cause() {
    let Some(url) = moto() else { return };
    let arn = standard(
        &url,
        "fail",
        json!({"StartAt": "Check", "States": {
            "Check": {"Type": "Fail", "Error": "Dataset.Missing", "Cause": "no dataset named d1"}}}),
    )
    .await;
    let pipeline = bind(&engine(&url).await, json!({"state_machine_arn": arn}));
    let run = pipeline
        .start(request("tg-fail-1", json!({"dataset": "d1"})))
        .await
        .unwrap();
    let done = wait_until(&pipeline, &run, "failure", completed).await;
    let out = output(&done);
    assert!(out.is_error);
    assert_eq!(
        out.structured,
        Some(json!({"error": "Dataset.Missing", "cause": "no dataset named d1"}))
    );
}

#[tokio::test]
async fn cancel_stops_the_execution() {
    let Some(url) = moto() else { return };
    let arn = standard(
        &url,
        "cancel",
        json!({"StartAt": "Sleep", "States": {"Sleep": {"Type": "Wait", "Seconds": 120, "End": true}}}),
    )
    .await;
    let pipeline = bind(
        &engine(&url).await,
        json!({"state_machine_arn": arn, "state_in_status": true}),
    );
    let run = pipeline
        .start(request("tg-cancel-1", json!({})))
        .await
        .unwrap();
    wait_until(
        &pipeline,
        &run,
        "in Sleep",
        |s| matches!(&s.state, RunState::Working { message: Some(m), .. } if m.contains("Sleep")),
    )
    .await;
    pipeline.cancel(&run).await.unwrap();
    let done = wait_until(&pipeline, &run, "cancelled", |s| {
        matches!(s.state, RunState::Cancelled { .. })
    })
    .await;
    assert!(done.ended_at.is_some());
    let upstream = admin(&url)
        .describe_execution()
        .execution_arn(&run)
        .send()
        .await
        .unwrap();
    assert_eq!(upstream.status(), &ExecutionStatus::Aborted);
}

#[tokio::test]
async fn starts_are_idempotent_and_other_input_conflicts() {
    let Some(url) = moto() else { return };
    let arn = standard(&url, "idem", pass_wait_succeed(1)).await;
    let pipeline = bind(&engine(&url).await, json!({"state_machine_arn": arn}));
    let args = json!({"dataset": "d1", "depth": 2});
    let first = pipeline
        .start(request("tg-idem-1", args.clone()))
        .await
        .unwrap();
    // While running: the same name and input is the same execution...
    let again = pipeline
        .start(request("tg-idem-1", args.clone()))
        .await
        .unwrap();
    assert_eq!(first, again);
    // ...and other input is a conflict.
    let err = pipeline
        .start(request("tg-idem-1", json!({"dataset": "d2"})))
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Conflict { .. }), "{err:?}");
    wait_until(&pipeline, &first, "completion", completed).await;
    // After completion (Step Functions answers ExecutionAlreadyExists): the same
    // input still finds the same execution; other input still conflicts. Key order
    // does not matter.
    let after = pipeline
        .start(request("tg-idem-1", json!({"depth": 2, "dataset": "d1"})))
        .await
        .unwrap();
    assert_eq!(first, after);
    let err = pipeline
        .start(request("tg-idem-1", json!({"dataset": "d3"})))
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Conflict { .. }), "{err:?}");
}

async fn human_run(url: &str, run_name: &str) -> (Arc<dyn Pipeline>, NativeRef, String) {
    human_run_on(&engine(url).await, url, run_name).await
}

async fn human_run_on(
    engine: &Arc<dyn Engine>,
    url: &str,
    run_name: &str,
) -> (Arc<dyn Pipeline>, NativeRef, String) {
    let queue_url = queue(url).await;
    let arn = standard(url, "human", human_definition(&queue_url)).await;
    let pipeline = bind(engine, human_target(&arn));
    assert!(pipeline.capabilities().input);
    pipeline
        .check()
        .await
        .expect("the human step passes check()");
    let run = pipeline
        .start(request(run_name, json!({"dataset": "d1"})))
        .await
        .unwrap();
    let waiting = wait_until(&pipeline, &run, "input required", |s| {
        matches!(s.state, RunState::InputRequired { .. })
    })
    .await;
    let RunState::InputRequired { requests, message } = &waiting.state else {
        unreachable!()
    };
    assert_eq!(requests.len(), 1);
    let (key, req) = requests.iter().next().unwrap();
    assert!(key.starts_with("Approve#"), "{key}");
    assert_eq!(req.message, "Approve the analysis?");
    assert_eq!(req.requested_schema["required"], json!(["approved"]));
    assert!(message.as_deref().unwrap_or_default().contains("Approve"));
    // The same key on every read while it waits.
    let again = pipeline.read(&run).await.unwrap();
    assert_eq!(again.state, waiting.state);
    (pipeline, run, key.clone())
}

#[tokio::test]
async fn an_accepted_human_step_continues_with_the_answer() {
    let Some(url) = moto() else { return };
    let (pipeline, run, key) = human_run(&url, "tg-human-ok").await;
    // A key that is not outstanding is refused without touching the task.
    let wrong = pipeline
        .answer(
            &run,
            "Approve#999",
            &InputResponse {
                action: InputAction::Accept,
                content: Some(json!({"approved": false})),
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(wrong, EngineError::Conflict { .. }), "{wrong:?}");
    let accept = InputResponse {
        action: InputAction::Accept,
        content: Some(json!({"approved": true})),
    };
    pipeline.answer(&run, &key, &accept).await.unwrap();
    let done = wait_until(&pipeline, &run, "completion", completed).await;
    let out = output(&done);
    assert!(!out.is_error, "{out:?}");
    assert_eq!(
        out.structured,
        Some(json!({"dataset": "d1", "approval": {"approved": true}}))
    );
    // The token is spent: a second answer conflicts.
    let err = pipeline.answer(&run, &key, &accept).await.unwrap_err();
    assert!(matches!(err, EngineError::Conflict { .. }), "{err:?}");
}

#[tokio::test]
async fn a_declined_human_step_fails_the_execution() {
    let Some(url) = moto() else { return };
    let (pipeline, run, key) = human_run(&url, "tg-human-no").await;
    let decline = InputResponse {
        action: InputAction::Decline,
        content: None,
    };
    pipeline.answer(&run, &key, &decline).await.unwrap();
    let done = wait_until(&pipeline, &run, "completion", completed).await;
    let out = output(&done);
    assert!(out.is_error, "{out:?}");
    assert_eq!(out.structured.as_ref().unwrap()["error"], DECLINED_ERROR);
    let err = pipeline.answer(&run, &key, &decline).await.unwrap_err();
    assert!(matches!(err, EngineError::Conflict { .. }), "{err:?}");
}

/// Keeps the body of every StartExecution request the SDK sends.
#[derive(Debug, Default)]
struct StartBodies(std::sync::Mutex<Vec<Value>>);

#[derive(Debug)]
struct StartBodiesRef(Arc<StartBodies>);

impl Intercept for StartBodiesRef {
    fn name(&self) -> &'static str {
        "StartBodies"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if cfg.load::<Metadata>().map(Metadata::name) == Some("StartExecution") {
            let bytes = context.request().body().bytes().unwrap_or_default();
            let body: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
            self.0 .0.lock().unwrap().push(body);
        }
        Ok(())
    }
}

/// The trace context travels as StartExecution's X-Ray `traceHeader`. moto
/// accepts the field but does not record it (DescribeExecution has no trace
/// header either), so the test reads the request the SDK sent; a retried start
/// under another trace is still the same execution.
#[tokio::test]
async fn the_trace_context_is_sent_as_the_xray_trace_header() {
    let Some(url) = moto() else { return };
    let arn = standard(&url, "trace", pass_wait_succeed(1)).await;
    let bodies = Arc::new(StartBodies::default());
    let options = ClientOptions {
        interceptors: vec![SharedInterceptor::new(StartBodiesRef(bodies.clone()))],
        ..ClientOptions::default()
    };
    let engine = build_with(settings(&url), options).await.unwrap();
    let pipeline = bind(&engine, json!({"state_machine_arn": arn}));
    let mut first = request("tg-trace-1", json!({"a": 1}));
    first.trace = Some(
        TraceContext::new(
            "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01",
            Some("vendor=abc"),
        )
        .unwrap(),
    );
    let run = pipeline.start(first).await.unwrap();
    let mut again = request("tg-trace-1", json!({"a": 1}));
    again.trace = Some(
        TraceContext::new(
            "00-11111111111111111111111111111111-2222222222222222-00",
            None,
        )
        .unwrap(),
    );
    assert_eq!(pipeline.start(again).await.unwrap(), run);
    assert_eq!(
        pipeline
            .start(request("tg-trace-1", json!({"a": 1})))
            .await
            .unwrap(),
        run
    );
    let sent = bodies.0.lock().unwrap().clone();
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(
        sent[0]["traceHeader"],
        "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    );
    assert_eq!(
        sent[1]["traceHeader"],
        "Root=1-11111111-111111111111111111111111;Parent=2222222222222222;Sampled=0"
    );
    assert!(sent[2].get("traceHeader").is_none(), "{:?}", sent[2]);
    assert!(!sent[0].to_string().contains("vendor=abc"));
    let done = wait_until(&pipeline, &run, "completion", completed).await;
    assert!(!output(&done).is_error);
}

/// Replaces the response of the next `remaining` calls with a Step Functions
/// error (ThrottlingException unless `code` says otherwise); the request itself
/// still reaches the emulator.
#[derive(Debug, Default)]
struct Throttle {
    remaining: AtomicU32,
    injected: AtomicU32,
    code: std::sync::Mutex<Option<&'static str>>,
    /// Only calls of this operation (such as `SendTaskSuccess`), when set.
    only: std::sync::Mutex<Option<&'static str>>,
}

impl Intercept for Throttle {
    fn name(&self) -> &'static str {
        "Throttle"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(only) = *self.only.lock().unwrap() {
            let operation = cfg.load::<Metadata>().map(Metadata::name);
            if operation != Some(only) {
                return Ok(());
            }
        }
        let take = self
            .remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if take {
            self.injected.fetch_add(1, Ordering::SeqCst);
            let code = self.code.lock().unwrap().unwrap_or("ThrottlingException");
            let body = json!({"__type": code, "message": "injected by the test"});
            let mut response = Response::new(
                StatusCode::try_from(400).unwrap(),
                SdkBody::from(body.to_string()),
            );
            response
                .headers_mut()
                .insert("content-type", "application/x-amz-json-1.0");
            response.headers_mut().insert("x-amzn-errortype", code);
            *context.response_mut() = response;
        }
        Ok(())
    }
}

#[tokio::test]
async fn throttling_is_retryable_and_never_a_failed_run() {
    let Some(url) = moto() else { return };
    let arn = standard(&url, "throttle", pass_wait_succeed(1)).await;
    let throttle = Arc::new(Throttle::default());
    let options = ClientOptions {
        interceptors: vec![SharedInterceptor::new(ThrottleRef(throttle.clone()))],
        ..ClientOptions::default()
    };
    let engine = build_with(settings(&url), options).await.unwrap();
    let pipeline = bind(&engine, json!({"state_machine_arn": arn}));
    let run = pipeline
        .start(request("tg-throttle-1", json!({})))
        .await
        .unwrap();
    // Every attempt the SDK makes for the next read is throttled.
    throttle
        .remaining
        .store(taskgate_stepfunctions::MAX_ATTEMPTS, Ordering::SeqCst);
    let err = pipeline.read(&run).await.unwrap_err();
    let EngineError::Throttled {
        retry_after,
        message,
    } = &err
    else {
        panic!("expected throttled, got {err:?}")
    };
    assert!(retry_after.is_some(), "{err:?}");
    assert!(message.contains("ThrottlingException"), "{message}");
    assert!(message.contains("states:DescribeExecution"), "{message}");
    assert!(err.is_retryable());
    assert_eq!(
        throttle.injected.load(Ordering::SeqCst),
        taskgate_stepfunctions::MAX_ATTEMPTS
    );
    // One throttled attempt is absorbed by the SDK's single retry.
    throttle.remaining.store(1, Ordering::SeqCst);
    let snap = pipeline.read(&run).await.unwrap();
    assert!(!matches!(snap.state, RunState::Failed { .. }), "{snap:?}");
    // The run itself is unaffected.
    let done = wait_until(&pipeline, &run, "completion", completed).await;
    assert!(!output(&done).is_error);
    // A throttled start is throttled too, not a conflict or a failure.
    throttle
        .remaining
        .store(taskgate_stepfunctions::MAX_ATTEMPTS, Ordering::SeqCst);
    let err = pipeline
        .start(request("tg-throttle-2", json!({})))
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Throttled { .. }), "{err:?}");
    // Access denied names the refused IAM action, and is not retried.
    *throttle.code.lock().unwrap() = Some("AccessDeniedException");
    throttle.remaining.store(1, Ordering::SeqCst);
    let err = pipeline.read(&run).await.unwrap_err();
    let EngineError::PermissionDenied { action, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(action, "states:DescribeExecution");
    assert_eq!(throttle.remaining.load(Ordering::SeqCst), 0);
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn a_spent_task_token_is_a_conflict() {
    let Some(url) = moto() else { return };
    let fault = Arc::new(Throttle::default());
    let options = ClientOptions {
        interceptors: vec![SharedInterceptor::new(ThrottleRef(fault.clone()))],
        ..ClientOptions::default()
    };
    let engine = build_with(settings(&url), options).await.unwrap();
    let (pipeline, run, key) = human_run_on(&engine, &url, "tg-human-spent").await;
    // Step Functions answers InvalidToken for a token that is no longer valid,
    // though the history may still show the task waiting. (The injected answer
    // replaces the real one: the request itself reached the emulator.)
    *fault.only.lock().unwrap() = Some("SendTaskSuccess");
    *fault.code.lock().unwrap() = Some("InvalidToken");
    fault.remaining.store(1, Ordering::SeqCst);
    let accept = InputResponse {
        action: InputAction::Accept,
        content: Some(json!({"approved": true})),
    };
    let err = pipeline.answer(&run, &key, &accept).await.unwrap_err();
    let EngineError::Conflict { message } = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("InvalidToken"), "{message}");
    assert_eq!(fault.injected.load(Ordering::SeqCst), 1);
    let done = wait_until(&pipeline, &run, "completion", completed).await;
    assert!(!output(&done).is_error);
}

/// Shares one [`Throttle`] between the test and the SDK.
#[derive(Debug)]
struct ThrottleRef(Arc<Throttle>);

impl Intercept for ThrottleRef {
    fn name(&self) -> &'static str {
        "ThrottleRef"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.modify_before_deserialization(context, rc, cfg)
    }
}

#[tokio::test]
async fn a_restarted_engine_reads_the_same_reference_to_completion() {
    let Some(url) = moto() else { return };
    let arn = standard(&url, "restart", pass_wait_succeed(2)).await;
    let target = json!({"state_machine_arn": arn});
    let run = {
        let first = engine(&url).await;
        let pipeline = bind(&first, target.clone());
        pipeline
            .start(request("tg-restart-1", json!({"n": 1})))
            .await
            .unwrap()
        // The engine and pipeline are dropped here: nothing survives but `run`.
    };
    let second = engine(&url).await;
    let pipeline = bind(&second, target);
    let done = wait_until(&pipeline, &run, "completion", completed).await;
    assert_eq!(output(&done).structured.as_ref().unwrap()["n"], 1);
}

#[tokio::test]
async fn check_refuses_express_and_missing_machines_and_probe_answers() {
    let Some(url) = moto() else { return };
    let engine = engine(&url).await;
    assert!(!engine.probe().await.unwrap().is_empty());

    let express = state_machine(
        &url,
        "express",
        json!({"StartAt": "S", "States": {"S": {"Type": "Succeed"}}}),
        StateMachineType::Express,
    )
    .await;
    let err = bind(&engine, json!({"state_machine_arn": express}))
        .check()
        .await
        .unwrap_err();
    let EngineError::InvalidInput { message } = &err else {
        panic!("{err:?}")
    };
    assert!(
        message.contains("Express workflows cannot be described; taskgate needs Standard"),
        "{message}"
    );

    let missing = "arn:aws:states:us-east-1:123456789012:stateMachine:taskgate-never-created";
    let err = bind(&engine, json!({"state_machine_arn": missing}))
        .check()
        .await
        .unwrap_err();
    let EngineError::InvalidInput { message } = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains(missing), "{message}");

    let plain = standard(&url, "plain", pass_wait_succeed(1)).await;
    let findings = bind(&engine, json!({"state_machine_arn": plain}))
        .check()
        .await
        .unwrap();
    assert!(
        findings.iter().any(|f| f.contains("Standard")),
        "{findings:?}"
    );
    // A human step must name a .waitForTaskToken task.
    let mut target = human_target(&plain);
    target["human_step"]["state"] = json!("Pause");
    let err = bind(&engine, target).check().await.unwrap_err();
    assert!(matches!(err, EngineError::InvalidInput { .. }), "{err:?}");
}

#[tokio::test]
async fn an_unreachable_endpoint_is_unavailable() {
    // Runs without the emulator: nothing listens on port 9 of the loopback.
    fake_credentials();
    let engine = engine("http://127.0.0.1:9").await;
    let pipeline = bind(
        &engine,
        json!({"state_machine_arn": "arn:aws:states:us-east-1:123456789012:stateMachine:A"}),
    );
    let err = pipeline
        .read(&"arn:aws:states:us-east-1:123456789012:execution:A:tg-x".to_owned())
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Unavailable { .. }), "{err:?}");
    assert!(err.is_retryable());
    // What clients read is short; the connector's details stay in the source.
    let EngineError::Unavailable { message, .. } = &err else {
        unreachable!()
    };
    assert_eq!(
        message,
        "states:DescribeExecution: Step Functions could not be reached"
    );
}

/// Issue 35: `discover` lists Standard state machines (Express ones left
/// out), described by their definition's `Comment`; with `sample` N the
/// input schema is inferred from the N most recent executions — types and
/// keys every one had — and no sampled value appears anywhere in the
/// output. Each target binds on this engine.
#[tokio::test]
async fn discover_infers_a_schema_from_recent_executions_without_their_values() {
    let Some(url) = moto() else { return };
    let definition = json!({"Comment": "Loads a dataset into the warehouse", "StartAt": "Done",
                            "States": {"Done": {"Type": "Succeed"}}});
    let arn = standard(&url, "discover", definition).await;
    let express = state_machine(
        &url,
        "discover-express",
        pass_wait_succeed(0),
        StateMachineType::Express,
    )
    .await;
    let secret = "sk_live_51HsecretVALUEnever-shown";
    let inputs = [
        json!({"dataset": "sales", "limit": 5, "api_token": secret, "opts": {"dry": true}}),
        json!({"dataset": "hr", "limit": 7, "api_token": secret}),
        json!({"dataset": "ops", "limit": 9.5, "api_token": secret, "tags": ["x"]}),
        // The oldest: not among the 3 most recent, so "extra" never shows.
    ];
    let sfn = admin(&url);
    sfn.start_execution()
        .state_machine_arn(&arn)
        .name(unique("old"))
        .input(json!({"extra": 1}).to_string())
        .send()
        .await
        .unwrap();
    for input in &inputs {
        // Distinct start dates, so "most recent" is well defined.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        sfn.start_execution()
            .state_machine_arn(&arn)
            .name(unique("run"))
            .input(input.to_string())
            .send()
            .await
            .unwrap();
    }
    let engine = engine(&url).await;
    let options = taskgate_engine::DiscoverOptions {
        sample: 3,
        ..Default::default()
    };
    let found = engine.discover(&options).await.unwrap();
    assert!(
        found
            .iter()
            .all(|d| d.target["state_machine_arn"] != express),
        "an Express state machine was listed"
    );
    let tool = found
        .iter()
        .find(|d| d.target["state_machine_arn"] == arn)
        .expect("the state machine is listed");
    assert!(
        tool.description
            .starts_with("Loads a dataset into the warehouse"),
        "{}",
        tool.description
    );
    assert!(
        tool.description
            .contains("inferred from the inputs of its 3"),
        "{}",
        tool.description
    );
    assert_eq!(
        tool.input_schema,
        json!({"type": "object",
               "properties": {
                   "dataset": {"type": "string"},
                   "limit": {"type": "number"},
                   "api_token": {"type": "string"},
                   "opts": {"type": "object", "properties": {"dry": {"type": "boolean"}}, "required": ["dry"]},
                   "tags": {"type": "array", "items": {"type": "string"}}
               },
               "required": ["api_token", "dataset", "limit"]})
    );
    let everything = format!("{found:?}");
    for value in [secret, "sales", "\"hr\"", "ops", "9.5"] {
        assert!(
            !everything.contains(value),
            "{value} leaked into the output"
        );
    }
    // Without samples: the same tool, no schema, a note saying how to get one.
    let plain = engine.discover(&Default::default()).await.unwrap();
    let plain = plain
        .iter()
        .find(|d| d.target["state_machine_arn"] == arn)
        .unwrap();
    assert_eq!(plain.input_schema, json!({"type": "object"}));
    assert!(plain.notes.iter().any(|n| n.contains("--sample")));
    engine
        .bind(&ToolDecl {
            name: "load".into(),
            target: tool.target.clone(),
            input_schema: tool.input_schema.clone(),
            keep_alive: None,
        })
        .unwrap()
        .check()
        .await
        .unwrap();
}
