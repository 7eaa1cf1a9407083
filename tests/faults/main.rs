//! Faults survived and "never polls / no state" proven where the engines
//! receive requests, through the server binary:
//!
//! - **outages**: the upstream goes away mid-run (a [`TcpProxy`] in front of
//!   moto or the Kubernetes API server refuses connections; the GitHub double
//!   answers 502), then comes back: while it is away every `tasks/get` is a
//!   retryable JSON-RPC error and never a failed task; afterwards the task
//!   completes with its result;
//! - **hangs**: the upstream accepts and never answers (the proxy holds, the
//!   double hangs): the per-call deadline (`server.call_timeout`, 2 s here)
//!   answers with a retryable error naming it;
//! - **idleness at the upstream**: after a task was read, while a
//!   `tasks/result` on another task (another engine entry, its own upstream)
//!   is waiting, the idle task's upstream receives nothing — counted by the
//!   proxy, the double's request log, or the API server's audit log;
//! - **two replicas / a restart**, each server with its own fresh HOME,
//!   working directory and TMPDIR: a task started on one is read, cancelled
//!   and its result fetched on the other.
//!
//! Idleness is also proven for exec (inotify on the run folders: no file event)
//! and Airflow (the api-server's access log), and Airflow has a two-replica test.
//!
//! Step Functions tests skip without `TASKGATE_MOTO_URL`, Kubernetes ones without
//! `TASKGATE_KUBECONFIG` (the idle one also without the API server's audit log),
//! Airflow ones without `TASKGATE_AIRFLOW_URL`; all fail instead when
//! `TASKGATE_REQUIRE_E2E=1`.
//!
//! One test binary of its own (every engine in one program, so it needs every
//! engine feature: `required-features` in `Cargo.toml`), kept apart from
//! `tests/engines/` so its upstream counts and deadlines share no process with
//! those tests. A test's name: `cargo test --test faults github_`.

#[path = "../common/mod.rs"]
mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_sdk_sfn::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sfn::types::{ExecutionStatus, StateMachineType};
use common::{tool_entry, wait_for, Client, Legacy, Mode, Options, Reply, Server, Setup, TcpProxy};
use serde_json::{json, Value};
use taskgate_engine::testing::e2e_endpoint;
use taskgate_github_double::{Double, Fault, OWNER, REF, REPO, TOKEN, WORKFLOW};

const LIMIT: Duration = Duration::from_secs(60);
/// The short per-call deadline of the hang tests.
const SHORT_DEADLINE: &str = "2s";
/// The tools' poll interval (`tool_entry`).
const POLL: Duration = Duration::from_millis(200);
/// The idle window: many poll intervals (at least three are required).
const WINDOW: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------------------
// What a client sees during an outage
// ---------------------------------------------------------------------------

/// The distinct (code, retryAfterMs, message) triples clients saw during one outage.
#[derive(Default)]
struct Seen(BTreeSet<(i64, Option<u64>, String)>);

impl Seen {
    /// Asserts that `reply` to `tasks/get` is a retryable JSON-RPC error (never a
    /// task, in particular never a failed one) and records it.
    #[track_caller]
    fn retryable(&mut self, reply: &Reply) {
        let body = reply.response();
        assert!(
            body.get("result").is_none(),
            "during the outage a read answered a task: {body}"
        );
        let e = reply.error();
        assert_eq!(e["data"]["retryable"], true, "{e}");
        let message = e["message"].as_str().unwrap_or_default().to_owned();
        assert!(message.contains("The task itself is unaffected"), "{e}");
        let after = e["data"]["retryAfterMs"].as_u64();
        self.0.insert((e["code"].as_i64().unwrap(), after, message));
    }

    /// Prints what was seen (for the report; `--nocapture`).
    fn report(&self, what: &str) {
        for (code, after, message) in &self.0 {
            eprintln!("[{what}] client saw {code} (retryAfterMs {after:?}): {message}");
        }
    }
}

/// Reads `task` `n` times during an outage, each a retryable error.
async fn reads_during_outage(c: &Client, task: &str, n: usize, seen: &mut Seen) {
    for _ in 0..n {
        seen.retryable(&c.get_reply(task).await);
    }
}

/// One read during a hang: a retryable error naming the short deadline; how
/// long the answer took (printed, never asserted).
async fn read_during_hang(c: &Client, task: &str, seen: &mut Seen) -> Duration {
    let began = Instant::now();
    let reply = c.get_reply(task).await;
    let took = began.elapsed();
    seen.retryable(&reply);
    let message = reply.message();
    assert!(
        message.contains(&format!("within {SHORT_DEADLINE}")),
        "not the per-call deadline: {message}"
    );
    took
}

fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{nanos}-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// Waits `WINDOW` (and at least `busy_reads` changes of `busy`, the waiting
/// request's own upstream traffic, so the server is demonstrably at work).
async fn idle_window(mut busy: impl FnMut() -> u64, busy_reads: u32) {
    let began = Instant::now();
    let mut last = busy();
    let mut changes = 0;
    wait_for("the idle window", LIMIT, || {
        let now = busy();
        if now != last {
            changes += 1;
            last = now;
        }
        let elapsed = began.elapsed();
        let result = if elapsed >= WINDOW && changes >= busy_reads {
            Ok(())
        } else {
            Err(format!("{elapsed:?}, {changes} busy reads"))
        };
        async move { result }
    })
    .await;
}

// ---------------------------------------------------------------------------
// Step Functions (moto)
// ---------------------------------------------------------------------------

const ROLE: &str = "arn:aws:iam::123456789012:role/taskgate-tests";
const AWS_ENV: [(&str, &str); 4] = [
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_REGION", "us-east-1"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

fn sfn(url: &str) -> aws_sdk_sfn::Client {
    let conf = aws_sdk_sfn::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(Credentials::new("testing", "testing", None, None, "tests"))
        .build();
    aws_sdk_sfn::Client::from_conf(conf)
}

async fn state_machine(url: &str, definition: Value) -> String {
    sfn(url)
        .create_state_machine()
        .name(unique("e2e-faults"))
        .definition(definition.to_string())
        .role_arn(ROLE)
        .r#type(StateMachineType::Standard)
        .send()
        .await
        .expect("create state machine")
        .state_machine_arn()
        .to_owned()
}

fn wait_then_succeed(seconds: u64) -> Value {
    json!({"StartAt": "Prepare", "States": {
        "Prepare": {"Type": "Pass", "Result": {"prepared": true}, "ResultPath": "$.prep", "Next": "Pause"},
        "Pause": {"Type": "Wait", "Seconds": seconds, "Next": "Done"},
        "Done": {"Type": "Succeed"}}})
}

fn sleeper() -> Value {
    json!({"StartAt": "Sleep", "States": {"Sleep": {"Type": "Wait", "Seconds": 300, "End": true}}})
}

/// The only execution of `machine`, as moto has it.
async fn only_execution(url: &str, machine: &str) -> (String, ExecutionStatus) {
    let list = sfn(url)
        .list_executions()
        .state_machine_arn(machine)
        .send()
        .await
        .expect("list executions");
    let all = list.executions();
    assert_eq!(all.len(), 1, "expected one execution: {all:?}");
    let arn = all[0].execution_arn().to_owned();
    let status = sfn(url)
        .describe_execution()
        .execution_arn(&arn)
        .send()
        .await
        .expect("describe execution")
        .status()
        .clone();
    (arn, status)
}

/// An engine entry `name` on `endpoint` with one tool `tool` on `arn`.
fn sfn_engine(name: &str, endpoint: &str, tool: &str, arn: &str) -> String {
    format!(
        "[engines.{name}]\nkind = \"stepfunctions\"\nregion = \"us-east-1\"\nendpoint_url = \"{endpoint}\"\n\n{}\n",
        tool_entry(
            tool,
            "A Step Functions state machine",
            name,
            r#"{ type = "object", properties = { dataset = { type = "string" } } }"#,
            &format!(r#"state_machine_arn = "{arn}", input_key = "args""#),
        )
    )
}

fn sfn_setup(body: &str, call_timeout: Option<&'static str>) -> Setup {
    Setup::config_with(
        Options {
            call_timeout,
            ..Options::default()
        },
        body,
        &AWS_ENV,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stepfunctions_outage_mid_run_is_retryable_then_the_task_completes() {
    let Some(url) = e2e_endpoint("TASKGATE_MOTO_URL") else {
        return;
    };
    let arn = state_machine(&url, wait_then_succeed(3)).await;
    let proxy = TcpProxy::in_front_of(&url).await;
    let s = sfn_setup(
        &sfn_engine("aws", &proxy.url_for(&url), "analyze", &arn),
        None,
    );
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("analyze", json!({"dataset": "d1"})).await;
    assert_eq!(c.get(&task).await["status"], "working");

    // Step Functions goes away while the execution runs (moto keeps running it).
    proxy.set(Mode::Refuse).await;
    let mut seen = Seen::default();
    reads_during_outage(&c, &task, 3, &mut seen).await;
    // The execution finishes while taskgate cannot reach it: still no failure.
    wait_for("the execution to finish upstream", LIMIT, || async {
        match only_execution(&url, &arn).await.1 {
            ExecutionStatus::Succeeded => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    reads_during_outage(&c, &task, 2, &mut seen).await;
    seen.report("stepfunctions refused");

    proxy.set(Mode::Pass).await;
    let done = c.get(&task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"args": {"dataset": "d1"}, "prep": {"prepared": true}}),
        "{done}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stepfunctions_hang_is_answered_by_the_call_deadline() {
    let Some(url) = e2e_endpoint("TASKGATE_MOTO_URL") else {
        return;
    };
    let arn = state_machine(&url, wait_then_succeed(1)).await;
    let proxy = TcpProxy::in_front_of(&url).await;
    let s = sfn_setup(
        &sfn_engine("aws", &proxy.url_for(&url), "analyze", &arn),
        Some(SHORT_DEADLINE),
    );
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("analyze", json!({"dataset": "d1"})).await;

    proxy.set(Mode::Hold).await;
    let mut seen = Seen::default();
    let took = read_during_hang(&c, &task, &mut seen).await;
    assert!(
        proxy.held() + proxy.frozen() >= 1,
        "the read never met the hung upstream"
    );
    seen.report("stepfunctions hung");
    eprintln!("[stepfunctions hung] the read answered after {took:?}");

    proxy.set(Mode::Pass).await;
    let done = c.until_status(&task, "completed", LIMIT).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stepfunctions_idle_task_gets_no_upstream_request_while_another_waits() {
    let Some(url) = e2e_endpoint("TASKGATE_MOTO_URL") else {
        return;
    };
    let (idle_arn, busy_arn) = (
        state_machine(&url, sleeper()).await,
        state_machine(&url, sleeper()).await,
    );
    let idle = TcpProxy::in_front_of(&url).await;
    let busy = TcpProxy::in_front_of(&url).await;
    let body = sfn_engine("idle", &idle.url_for(&url), "quiet", &idle_arn)
        + &sfn_engine("busy", &busy.url_for(&url), "waited", &busy_arn);
    let s = sfn_setup(&body, None);
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("quiet", json!({"dataset": "idle"})).await;
    assert_eq!(c.get(&task).await["status"], "working");

    let legacy = Legacy::connect(&server.url(), "2025-11-25", json!({"tasks": {}})).await;
    let other = legacy
        .start_task("waited", json!({"dataset": "busy"}))
        .await;
    let waiting = {
        let (legacy, other) = (legacy.clone(), other.clone());
        tokio::spawn(async move {
            legacy
                .request("tasks/result", json!({"taskId": other}))
                .await
        })
    };

    let (bytes, connections) = (idle.bytes_to_upstream(), idle.connections());
    let busy_before = busy.bytes_to_upstream();
    let began = Instant::now();
    idle_window(|| busy.bytes_to_upstream(), 3).await;
    let watched = began.elapsed();
    assert!(!waiting.is_finished(), "tasks/result answered early");
    assert_eq!(
        (
            idle.bytes_to_upstream() - bytes,
            idle.connections() - connections
        ),
        (0, 0),
        "the idle task's upstream received bytes/connections during {watched:?}"
    );
    eprintln!(
        "[stepfunctions idle] {watched:?} (poll interval {POLL:?}): idle upstream 0 bytes, 0 connections; \
         the waiting request's upstream {} bytes",
        busy.bytes_to_upstream() - busy_before
    );

    // The idle task reads again on request; the waiting one ends when cancelled.
    assert_eq!(c.get(&task).await["status"], "working");
    assert!(idle.bytes_to_upstream() > bytes);
    c.cancel(&task).await;
    legacy
        .request("tasks/cancel", json!({"taskId": other}))
        .await;
    let _ = tokio::time::timeout(LIMIT, waiting).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stepfunctions_two_replicas_with_separate_homes_share_every_task() {
    let Some(url) = e2e_endpoint("TASKGATE_MOTO_URL") else {
        return;
    };
    let (long_arn, short_arn) = (
        state_machine(&url, sleeper()).await,
        state_machine(&url, wait_then_succeed(1)).await,
    );
    let body =
        sfn_engine("aws", &url, "long", &long_arn) + &sfn_engine("aws2", &url, "short", &short_arn);
    // Two configurations in two folders, the same keys: two replicas.
    let (sa, sb) = (sfn_setup(&body, None), sfn_setup(&body, None));
    let a = sa.isolated_server().await;
    let b = sb.isolated_server().await;
    two_replicas(&a, &b, "long", "short", json!({"dataset": "r"})).await;
    assert_eq!(
        only_execution(&url, &long_arn).await.1,
        ExecutionStatus::Aborted
    );
    assert_eq!(
        only_execution(&url, &short_arn).await.1,
        ExecutionStatus::Succeeded
    );
    assert_nothing_written(&a);
    assert_nothing_written(&b);
}

/// Starts `long` and `short` on replica `a`; on `b`: reads `long`, cancels it;
/// fetches `short`'s result through `tasks/result` (2025-11-25) and reads it
/// completed (2026-07-28). Each call on `b` uses only what `a` handed out.
async fn two_replicas(a: &Server, b: &Server, long: &str, short: &str, args: Value) {
    let ca = a.client();
    let cb = ca.at(&b.url());
    let task = ca.start_task(long, args.clone()).await;
    let read = cb.get(&task).await;
    assert_eq!(read["status"], "working", "{read}");
    assert_eq!(read["taskId"], task.as_str(), "{read}");
    let cancelled = cb.cancel(&task).await;
    assert_eq!(cancelled["resultType"], "complete", "{cancelled}");
    cb.until_status(&task, "cancelled", LIMIT).await;
    assert_eq!(ca.get(&task).await["status"], "cancelled");

    let la = Legacy::connect(&a.url(), "2025-11-25", json!({"tasks": {}})).await;
    let lb = Legacy::connect(&b.url(), "2025-11-25", json!({"tasks": {}})).await;
    let other = la.start_task(short, args).await;
    let result = lb.request("tasks/result", json!({"taskId": other})).await;
    let result = result.result();
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        other.as_str()
    );
    let status = lb.request("tasks/get", json!({"taskId": other})).await;
    assert_eq!(status.result()["status"], "completed", "{:?}", status.body);
}

/// The replica wrote nothing into its HOME, working directory or TMPDIR.
#[track_caller]
fn assert_nothing_written(server: &Server) {
    let private = server.private().expect("an isolated server");
    assert_eq!(private.files(), Vec::<std::path::PathBuf>::new());
}

// ---------------------------------------------------------------------------
// GitHub Actions (the double)
// ---------------------------------------------------------------------------

const GH_TOKEN_VAR: &str = "TASKGATE_E2E_GITHUB_TOKEN";

/// An engine entry `name` on the double `d` with one tool `tool`.
fn gh_engine(name: &str, d: &Double, tool: &str) -> String {
    format!(
        "[engines.{name}]\nkind = \"github\"\ntoken_env = \"{GH_TOKEN_VAR}\"\nbase_url = \"{}\"\nlookup_delay = \"10ms\"\n\n{}\n",
        d.url,
        tool_entry(
            tool,
            "A GitHub Actions workflow",
            name,
            r#"{ type = "object", required = ["version"], properties = { version = { type = "string" } } }"#,
            &format!(r#"owner = "{OWNER}", repo = "{REPO}", workflow = "{WORKFLOW}", ref = "{REF}""#),
        )
    )
}

fn gh_setup(body: &str, call_timeout: Option<&'static str>) -> Setup {
    Setup::config_with(
        Options {
            call_timeout,
            ..Options::default()
        },
        body,
        &[(GH_TOKEN_VAR, TOKEN)],
    )
}

fn only_run(d: &Double) -> u64 {
    let ids = d.run_ids();
    assert_eq!(ids.len(), 1, "expected one run: {ids:?}");
    ids[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_502s_are_retryable_then_the_task_completes() {
    let d = Double::start().await;
    let s = gh_setup(&gh_engine("gh", &d, "deploy"), None);
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("deploy", json!({"version": "1"})).await;
    let id = only_run(&d);
    assert_eq!(c.get(&task).await["status"], "working");

    d.fail_with(Fault::BadGateway);
    let before = d.seen().len();
    let mut seen = Seen::default();
    reads_during_outage(&c, &task, 2, &mut seen).await;
    // The run finishes during the outage.
    d.set_run(id, "completed", Some("success"));
    reads_during_outage(&c, &task, 2, &mut seen).await;
    assert!(
        d.seen().len() > before,
        "the reads never reached the double"
    );
    seen.report("github 502");

    d.heal();
    let done = c.get(&task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(done["result"]["structuredContent"]["run_id"], id, "{done}");
    assert_eq!(
        d.run_ids().len(),
        1,
        "the outage made taskgate dispatch again"
    );
    d.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_hang_is_answered_by_the_call_deadline() {
    let d = Double::start().await;
    let s = gh_setup(&gh_engine("gh", &d, "deploy"), Some(SHORT_DEADLINE));
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("deploy", json!({"version": "2"})).await;
    let id = only_run(&d);

    d.fail_with(Fault::Hang);
    let mut seen = Seen::default();
    let took = read_during_hang(&c, &task, &mut seen).await;
    seen.report("github hung");
    eprintln!("[github hung] the read answered after {took:?}");

    d.heal();
    d.set_run(id, "completed", Some("success"));
    let done = c.until_status(&task, "completed", LIMIT).await;
    assert_eq!(done["result"]["structuredContent"]["run_id"], id, "{done}");
    d.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_idle_task_gets_no_upstream_request_while_another_waits() {
    let (idle, busy) = (Double::start().await, Double::start().await);
    let body = gh_engine("idle", &idle, "quiet") + &gh_engine("busy", &busy, "waited");
    let s = gh_setup(&body, None);
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("quiet", json!({"version": "idle"})).await;
    assert_eq!(c.get(&task).await["status"], "working");

    let legacy = Legacy::connect(&server.url(), "2025-11-25", json!({"tasks": {}})).await;
    let other = legacy
        .start_task("waited", json!({"version": "busy"}))
        .await;
    let waiting = {
        let (legacy, other) = (legacy.clone(), other.clone());
        tokio::spawn(async move {
            legacy
                .request("tasks/result", json!({"taskId": other}))
                .await
        })
    };

    let before = idle.lines();
    let busy_before = busy.seen().len();
    let began = Instant::now();
    idle_window(|| busy.seen().len() as u64, 3).await;
    let watched = began.elapsed();
    assert!(!waiting.is_finished(), "tasks/result answered early");
    assert_eq!(
        idle.lines(),
        before,
        "the idle task's double received requests during {watched:?}"
    );
    eprintln!(
        "[github idle] {watched:?} (poll interval {POLL:?}): idle double 0 requests; \
         the waiting request's double {} requests",
        busy.seen().len() - busy_before
    );

    busy.set_run(only_run(&busy), "completed", Some("success"));
    let reply = tokio::time::timeout(LIMIT, waiting)
        .await
        .expect("tasks/result answered")
        .unwrap();
    assert_eq!(reply.result()["isError"], false, "{:?}", reply.body);
    c.cancel(&task).await;
    idle.assert_clean();
    busy.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_two_replicas_with_separate_homes_share_every_task() {
    let (d, d2) = (Double::start().await, Double::start().await);
    let body = gh_engine("gh", &d, "long") + &gh_engine("gh2", &d2, "short");
    let (sa, sb) = (gh_setup(&body, None), gh_setup(&body, None));
    let a = sa.isolated_server().await;
    let b = sb.isolated_server().await;
    let (ca, cb) = (a.client(), a.client().at(&b.url()));
    let task = ca.start_task("long", json!({"version": "r"})).await;
    assert_eq!(cb.get(&task).await["status"], "working");
    assert_eq!(cb.cancel(&task).await["resultType"], "complete");
    cb.until_status(&task, "cancelled", LIMIT).await;
    assert_eq!(ca.get(&task).await["status"], "cancelled");
    let cancels: Vec<String> = d
        .lines()
        .into_iter()
        .filter(|l| l.ends_with("/cancel"))
        .collect();
    assert_eq!(cancels.len(), 1, "{:?}", d.lines());

    let la = Legacy::connect(&a.url(), "2025-11-25", json!({"tasks": {}})).await;
    let lb = Legacy::connect(&b.url(), "2025-11-25", json!({"tasks": {}})).await;
    let other = la.start_task("short", json!({"version": "r"})).await;
    let id = only_run(&d2);
    d2.set_run(id, "completed", Some("success"));
    let result = lb.request("tasks/result", json!({"taskId": other})).await;
    assert_eq!(
        result.result()["structuredContent"]["run_id"],
        id,
        "{:?}",
        result.body
    );
    assert_eq!(d2.run_ids().len(), 1);
    assert_nothing_written(&a);
    assert_nothing_written(&b);
    d.assert_clean();
    d2.assert_clean();
}

// ---------------------------------------------------------------------------
// Kubernetes (the control plane of scripts/k8s/cluster-up.sh)
// ---------------------------------------------------------------------------

mod k8s {
    use std::path::{Path, PathBuf};

    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use kube::api::{Api, DeleteParams, ListParams, PostParams};
    use serde_json::{json, Value};
    use taskgate_engine::testing::e2e_endpoint;

    use super::common::cluster::rbac_namespace;
    use super::common::{tool_entry, Options, Setup};

    /// A namespace holding `deploy/rbac.yaml`, a token of its ServiceAccount,
    /// and the admin client.
    pub struct Ns {
        pub admin: kube::Client,
        pub ns: String,
        /// The ServiceAccount's user name in the API server's audit log.
        pub user: String,
        token: String,
        admin_path: String,
        pub dir: tempfile::TempDir,
    }

    impl Ns {
        pub async fn new(test: &str) -> Option<Self> {
            let admin_path = e2e_endpoint("TASKGATE_KUBECONFIG")?;
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            taskgate_kubernetes::choose_tls_backend();
            let file = kube::config::Kubeconfig::read_from(&admin_path).expect("admin kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .expect("admin kubeconfig");
            let admin = kube::Client::try_from(config).expect("admin client");
            let ns = super::unique(&format!("tg-e2e-faults-{test}"))
                .chars()
                .take(60)
                .collect::<String>();
            let sa = rbac_namespace(&admin, &ns).await;
            let request = TokenRequest {
                spec: Some(TokenRequestSpec {
                    expiration_seconds: Some(3600),
                    ..TokenRequestSpec::default()
                }),
                ..TokenRequest::default()
            };
            let token = Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
                .create_token_request(&sa, &PostParams::default(), &request)
                .await
                .expect("TokenRequest")
                .status
                .expect("token status")
                .token
                .expect("a token");
            let dir = tempfile::Builder::new()
                .prefix("taskgate-faults-k8s-")
                .tempdir()
                .unwrap();
            Some(Self {
                admin,
                user: format!("system:serviceaccount:{ns}:{sa}"),
                ns,
                token,
                admin_path,
                dir,
            })
        }

        /// The API server's URL in the admin kubeconfig.
        pub fn server_url(&self) -> String {
            let admin: Value =
                serde_yaml::from_str(&std::fs::read_to_string(&self.admin_path).unwrap()).unwrap();
            admin["clusters"][0]["cluster"]["server"]
                .as_str()
                .expect("a server")
                .to_owned()
        }

        /// A kubeconfig with the ServiceAccount's token, reaching the API
        /// server at `server` (its own URL, or a proxy's).
        pub fn kubeconfig(&self, server: &str) -> PathBuf {
            let admin: Value =
                serde_yaml::from_str(&std::fs::read_to_string(&self.admin_path).unwrap()).unwrap();
            let mut cluster = admin["clusters"][0].clone();
            cluster["cluster"]["server"] = json!(server);
            let config = json!({
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "taskgate", "user": {"token": self.token}}],
                "contexts": [{"name": "taskgate", "context": {"cluster": cluster["name"], "user": "taskgate"}}],
                "current-context": "taskgate",
            });
            let path = self
                .dir
                .path()
                .join(format!("kubeconfig-{}", super::unique("k")));
            std::fs::write(&path, serde_yaml::to_string(&config).unwrap()).unwrap();
            path
        }

        /// An engine entry `name` reaching the API server at `server`, with
        /// one tool `tool` whose Job runs `duration` under kwok; `extra` goes
        /// into the target table.
        pub fn engine(
            &self,
            name: &str,
            server: &str,
            tool: &str,
            duration: &str,
            extra: &str,
        ) -> String {
            let template = self.dir.path().join(format!("{tool}.yaml"));
            std::fs::write(&template, job_template(duration)).unwrap();
            format!(
                "[engines.{name}]\nkind = \"kubernetes\"\nkubeconfig = {}\nnamespace = \"{}\"\n\n{}\n",
                toml(&self.kubeconfig(server)),
                self.ns,
                tool_entry(
                    tool,
                    "A Kubernetes Job",
                    name,
                    r#"{ type = "object", properties = { dataset = { type = "string" } } }"#,
                    &format!("template_file = {}{extra}", toml(&template)),
                )
            )
        }

        /// The Jobs in the namespace.
        pub async fn jobs(&self) -> Vec<Job> {
            Api::<Job>::namespaced(self.admin.clone(), &self.ns)
                .list(&ListParams::default())
                .await
                .expect("list jobs")
                .items
        }

        pub async fn done(self) {
            let _ = Api::<Namespace>::all(self.admin.clone())
                .delete(&self.ns, &DeleteParams::background())
                .await;
        }
    }

    pub fn setup(body: &str, call_timeout: Option<&'static str>) -> Setup {
        Setup::config_with(
            Options {
                call_timeout,
                ..Options::default()
            },
            body,
            &[],
        )
    }

    /// True when the Job has the condition `kind` (`Complete`, `Failed`).
    pub fn has_condition(job: &Job, kind: &str) -> bool {
        job.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
    }

    fn toml(path: &Path) -> String {
        serde_json::to_string(path.to_str().unwrap()).unwrap()
    }

    /// A Job whose pod runs `duration` under kwok (`tests/k8s/stages.yaml`).
    fn job_template(duration: &str) -> String {
        serde_yaml::to_string(&json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"labels": {"app": "taskgate-e2e"}},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": {"annotations": {"taskgate.test/duration": duration}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "busybox:fake", "command": ["sh", "-c", "run"]}],
                    },
                },
            },
        }))
        .unwrap()
    }

    /// The API server's audit log (`TASKGATE_K8S_AUDIT_LOG`, else the one
    /// `cluster.env` beside the admin kubeconfig names). `None` (skip) when
    /// there is none; a clear failure instead under `TASKGATE_REQUIRE_E2E=1`.
    pub fn audit_log() -> Option<PathBuf> {
        let named = std::env::var("TASKGATE_K8S_AUDIT_LOG").ok().or_else(|| {
            let kubeconfig = std::env::var("TASKGATE_KUBECONFIG").ok()?;
            let env = Path::new(&kubeconfig).parent()?.join("cluster.env");
            std::fs::read_to_string(env)
                .ok()?
                .lines()
                .find_map(|l| l.strip_prefix("TASKGATE_K8S_AUDIT_LOG=").map(str::to_owned))
        });
        let found = named.map(PathBuf::from).filter(|p| p.is_file());
        if found.is_none() {
            assert!(
                std::env::var("TASKGATE_REQUIRE_E2E").as_deref() != Ok("1"),
                "the API server writes no audit log and TASKGATE_REQUIRE_E2E=1: \
                 restart the cluster with scripts/k8s/cluster-up.sh \
                 (its audit policy takes effect on the next start)"
            );
            eprintln!("skipping: no API server audit log (restart the cluster with scripts/k8s/cluster-up.sh)");
        }
        found
    }

    /// The audit events of `user` from byte `from` of the log: their request
    /// ids and `verb requestURI` lines.
    pub fn audited(log: &Path, from: u64, user: &str) -> Vec<(String, String)> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = std::fs::File::open(log).expect("open the audit log");
        // A log shorter than the mark was rotated: all of it is new.
        let from = if file.metadata().unwrap().len() < from {
            0
        } else {
            from
        };
        file.seek(SeekFrom::Start(from)).unwrap();
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["user"]["username"] == user)
            .map(|e| {
                (
                    e["auditID"].as_str().unwrap_or_default().to_owned(),
                    format!(
                        "{} {}",
                        e["verb"].as_str().unwrap_or_default(),
                        e["requestURI"].as_str().unwrap_or_default()
                    ),
                )
            })
            .collect()
    }

    /// The distinct requests among audit events.
    pub fn requests(events: &[(String, String)]) -> usize {
        events
            .iter()
            .map(|(id, _)| id)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_outage_mid_job_is_retryable_then_the_task_completes() {
    let Some(ns) = k8s::Ns::new("outage").await else {
        return;
    };
    let api = ns.server_url();
    let proxy = TcpProxy::in_front_of(&api).await;
    let s = k8s::setup(
        &ns.engine("k8s", &proxy.url_for(&api), "report", "4s", ""),
        None,
    );
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("report", json!({"dataset": "d1"})).await;
    assert_eq!(c.get(&task).await["status"], "working");

    proxy.set(Mode::Refuse).await;
    let mut seen = Seen::default();
    reads_during_outage(&c, &task, 3, &mut seen).await;
    // The Job finishes while the API server is out of taskgate's reach.
    wait_for("the Job to complete", LIMIT, || async {
        let jobs = ns.jobs().await;
        if jobs.len() == 1 && k8s::has_condition(&jobs[0], "Complete") {
            Ok(())
        } else {
            Err(format!("{} jobs", jobs.len()))
        }
    })
    .await;
    reads_during_outage(&c, &task, 2, &mut seen).await;
    seen.report("kubernetes refused");

    proxy.set(Mode::Pass).await;
    let done = c.get(&task).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        ns.jobs().await.len(),
        1,
        "the outage made taskgate create another Job"
    );
    ns.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_hang_is_answered_by_the_call_deadline() {
    let Some(ns) = k8s::Ns::new("hang").await else {
        return;
    };
    let api = ns.server_url();
    let proxy = TcpProxy::in_front_of(&api).await;
    let s = k8s::setup(
        &ns.engine("k8s", &proxy.url_for(&api), "report", "1s", ""),
        Some(SHORT_DEADLINE),
    );
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("report", json!({"dataset": "d1"})).await;

    proxy.set(Mode::Hold).await;
    let mut seen = Seen::default();
    let took = read_during_hang(&c, &task, &mut seen).await;
    assert!(
        proxy.held() + proxy.frozen() >= 1,
        "the read never met the hung upstream"
    );
    seen.report("kubernetes hung");
    eprintln!("[kubernetes hung] the read answered after {took:?}");

    proxy.set(Mode::Pass).await;
    let done = c.until_status(&task, "completed", LIMIT).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    ns.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_idle_task_gets_no_api_request_while_another_waits() {
    let Some(log) = k8s::audit_log() else {
        return;
    };
    let (Some(idle), Some(busy)) = (k8s::Ns::new("idle").await, k8s::Ns::new("busy").await) else {
        return;
    };
    let api = idle.server_url();
    let body = idle.engine("idle", &api, "quiet", "300s", "")
        + &busy.engine("busy", &api, "waited", "300s", "");
    let s = k8s::setup(&body, None);
    let server = s.server().await;
    let c = server.client();
    let start = std::fs::metadata(&log).unwrap().len();
    let task = c.start_task("quiet", json!({"dataset": "idle"})).await;
    assert_eq!(c.get(&task).await["status"], "working");

    let legacy = Legacy::connect(&server.url(), "2025-11-25", json!({"tasks": {}})).await;
    let other = legacy
        .start_task("waited", json!({"dataset": "busy"}))
        .await;
    let waiting = {
        let (legacy, other) = (legacy.clone(), other.clone());
        tokio::spawn(async move {
            legacy
                .request("tasks/result", json!({"taskId": other}))
                .await
        })
    };

    // The idle task's reads so far are in the log (it is written as requests end).
    wait_for("the idle task's read in the audit log", LIMIT, || async {
        let n = k8s::requests(&k8s::audited(&log, start, &idle.user));
        if n > 0 {
            Ok(())
        } else {
            Err("none".to_owned())
        }
    })
    .await;
    let mark = std::fs::metadata(&log).unwrap().len();
    let began = Instant::now();
    idle_window(
        || k8s::requests(&k8s::audited(&log, mark, &busy.user)) as u64,
        3,
    )
    .await;
    let watched = began.elapsed();
    assert!(!waiting.is_finished(), "tasks/result answered early");
    let during = k8s::audited(&log, mark, &idle.user);
    assert_eq!(
        during,
        Vec::<(String, String)>::new(),
        "the idle task's ServiceAccount made API requests during {watched:?}"
    );
    eprintln!(
        "[kubernetes idle] {watched:?} (poll interval {POLL:?}): idle ServiceAccount 0 requests \
         in the audit log; the waiting request's ServiceAccount {} requests",
        k8s::requests(&k8s::audited(&log, mark, &busy.user))
    );

    c.cancel(&task).await;
    legacy
        .request("tasks/cancel", json!({"taskId": other}))
        .await;
    let _ = tokio::time::timeout(LIMIT, waiting).await;
    idle.done().await;
    busy.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_two_replicas_with_separate_homes_share_every_task() {
    let Some(ns) = k8s::Ns::new("replicas").await else {
        return;
    };
    let api = ns.server_url();
    let body = ns.engine("k8s", &api, "long", "300s", ", cancel = \"suspend\"")
        + &ns.engine("k8s2", &api, "short", "1s", "");
    let (sa, sb) = (k8s::setup(&body, None), k8s::setup(&body, None));
    let a = sa.isolated_server().await;
    let b = sb.isolated_server().await;
    two_replicas(&a, &b, "long", "short", json!({"dataset": "r"})).await;
    assert_eq!(
        ns.jobs().await.len(),
        2,
        "one Job per task, whichever replica"
    );
    assert_nothing_written(&a);
    assert_nothing_written(&b);
    ns.done().await;
}

// ---------------------------------------------------------------------------
// exec (the spool and the supervisor beside each run are its upstream)
// ---------------------------------------------------------------------------

/// File-system events in run folders, as the kernel reports them (inotify):
/// every open, read, write, create, delete or attribute change.
struct SpoolWatch {
    inotify: nix::sys::inotify::Inotify,
    folders: Vec<(nix::sys::inotify::WatchDescriptor, usize)>,
    counts: Vec<u64>,
}

impl SpoolWatch {
    /// Watches each of `folders` (its files and itself).
    fn new(folders: &[&std::path::Path]) -> Self {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK).expect("inotify");
        let flags = AddWatchFlags::IN_OPEN
            | AddWatchFlags::IN_ACCESS
            | AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_ATTRIB;
        let folders = folders
            .iter()
            .enumerate()
            .map(|(i, f)| (inotify.add_watch(*f, flags).expect("watch"), i))
            .collect();
        Self {
            inotify,
            folders,
            counts: vec![0; 2],
        }
    }

    /// The events of each folder so far.
    fn counts(&mut self) -> Vec<u64> {
        while let Ok(events) = self.inotify.read_events() {
            if events.is_empty() {
                break;
            }
            for event in events {
                if let Some((_, i)) = self.folders.iter().find(|(wd, _)| *wd == event.wd) {
                    self.counts[*i] += 1;
                }
            }
        }
        self.counts.clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_idle_run_folder_sees_no_access_while_another_waits() {
    let s = Setup::new();
    let server = s.server().await;
    let c = server.client();
    let task = c.start_task("sleeper", json!({})).await;
    let idle = s.only_run();
    // The run has settled: the script reported its status.
    wait_for("the sleeper's status", LIMIT, || {
        let f = idle.join("sleeper.pids");
        async move { f.exists().then_some(()) }
    })
    .await;
    assert_eq!(c.get(&task).await["status"], "working");

    let legacy = Legacy::connect(&server.url(), "2025-11-25", json!({"tasks": {}})).await;
    let other = legacy.start_task("sleeper", json!({})).await;
    let busy = s
        .runs()
        .into_iter()
        .find(|r| *r != idle)
        .expect("the second run");
    let waiting = {
        let (legacy, other) = (legacy.clone(), other.clone());
        tokio::spawn(async move {
            legacy
                .request("tasks/result", json!({"taskId": other}))
                .await
        })
    };
    wait_for("the second sleeper's status", LIMIT, || {
        let f = busy.join("sleeper.pids");
        async move { f.exists().then_some(()) }
    })
    .await;

    let mut watch = SpoolWatch::new(&[&idle, &busy]);
    let began = Instant::now();
    let counts = std::cell::RefCell::new(vec![0; 2]);
    idle_window(
        || {
            *counts.borrow_mut() = watch.counts();
            counts.borrow()[1]
        },
        3,
    )
    .await;
    let watched = began.elapsed();
    let counts = watch.counts();
    assert!(!waiting.is_finished(), "tasks/result answered early");
    assert_eq!(
        counts[0], 0,
        "the idle run's folder was touched during {watched:?}"
    );
    eprintln!(
        "[exec idle] {watched:?} (poll interval {POLL:?}): idle run folder 0 file events; \
         the waiting request's run folder {} events",
        counts[1]
    );
    // A read of the idle task is seen by the same watch.
    assert_eq!(c.get(&task).await["status"], "working");
    assert!(watch.counts()[0] > 0, "the watch does not see reads");

    c.cancel(&task).await;
    legacy
        .request("tasks/cancel", json!({"taskId": other}))
        .await;
    let _ = tokio::time::timeout(LIMIT, waiting).await;
}

// ---------------------------------------------------------------------------
// Airflow (scripts/airflow/up.sh)
// ---------------------------------------------------------------------------

/// Tools on one Airflow engine: each `(name, dag_id, extra target fields)`.
/// A loaded Airflow answers slowly: calls get 45 s, waits 150 s.
fn airflow_setup(url: &str, tools: &[(&str, &str, &str)]) -> Setup {
    let mut body = format!(
        "[engines.af]\nkind = \"airflow\"\nbase_url = \"{url}\"\nusername = \"taskgate\"\n\
         password_env = \"TG_TEST_AIRFLOW_PASSWORD\"\nconnect_timeout = \"20s\"\nread_timeout = \"40s\"\n\n"
    );
    for (name, dag, extra) in tools {
        body.push_str(&tool_entry(
            name,
            "Run a DAG on Airflow",
            "af",
            r#"{ type = "object", properties = { dataset = { type = "string" }, rows = { type = "integer" } } }"#,
            &format!("dag_id = \"{dag}\"{extra}"),
        ));
        body.push('\n');
    }
    let password = std::env::var("TASKGATE_AIRFLOW_PASSWORD")
        .unwrap_or_else(|_| "taskgate-test-password".into());
    Setup::config_with(
        Options {
            call_timeout: Some("45s"),
            max_wait: Some("150s"),
            ..Options::default()
        },
        &body,
        &[("TG_TEST_AIRFLOW_PASSWORD", password.as_str())],
    )
}

/// One Airflow test at a time: Airflow (then on SQLite) was seen holding a DAG-run
/// trigger 30 s and answering 500 "Database error" when these two overlapped.
static AIRFLOW: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Requests naming `dag` in the api-server's access log.
fn airflow_requests(dag: &str) -> u64 {
    common::airflow::requests_for(dag).len() as u64
}

/// Requests for `dag` made (taken by the api-server) in `[from, to)`: its lines
/// are written as they end, so when a line shows up says nothing of when its
/// request was made (see `common::airflow`).
fn airflow_requests_made(dag: &str, from: SystemTime, to: SystemTime) -> Vec<String> {
    common::airflow::requests_for(dag)
        .into_iter()
        .filter(|a| a.made_in(from, to))
        .map(|a| a.line)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn airflow_idle_task_gets_no_request_while_another_waits() {
    let Some(url) = e2e_endpoint("TASKGATE_AIRFLOW_URL") else {
        return;
    };
    let _one_at_a_time = AIRFLOW.lock().await;
    let s = airflow_setup(&url, &[("quiet", "tg_idle", ""), ("waited", "tg_long", "")]);
    let server = s.server().await;
    let c = server.client();
    let since = SystemTime::now();
    let task = c.start_task("quiet", json!({})).await;
    assert_eq!(c.get(&task).await["status"], "working");
    // Not a log that shows nothing: the read's request is in it.
    wait_for("the idle task's read in the access log", LIMIT, || async {
        airflow_requests_made("tg_idle", since, SystemTime::now())
            .iter()
            .any(|l| l.contains("method=GET path=/api/v2/dags/tg_idle/dagRuns/"))
            .then_some(())
    })
    .await;

    let legacy = Legacy::connect(&server.url(), "2025-11-25", json!({"tasks": {}})).await;
    let other = legacy.start_task("waited", json!({})).await;
    let waiting = {
        let (legacy, other) = (legacy.clone(), other.clone());
        tokio::spawn(async move {
            legacy
                .request("tasks/result", json!({"taskId": other}))
                .await
        })
    };

    let opened = SystemTime::now();
    let busy_before = airflow_requests("tg_long");
    let began = Instant::now();
    idle_window(|| airflow_requests("tg_long"), 3).await;
    let watched = began.elapsed();
    let closed = SystemTime::now();
    assert!(!waiting.is_finished(), "tasks/result answered early");
    assert!(c.cancel_reply(&task).await.is_ok());
    // Lines are written as requests end: once the idle task's cancel (made
    // after the window) is logged, a request made inside the window has had
    // the whole cancel to end and be written too.
    wait_for(
        "the idle task's cancel in the access log",
        LIMIT,
        || async {
            airflow_requests_made("tg_idle", closed, SystemTime::now())
                .iter()
                .any(|l| l.contains("method=PATCH"))
                .then_some(())
        },
    )
    .await;
    let idle = airflow_requests_made("tg_idle", opened, closed);
    assert!(
        idle.is_empty(),
        "Airflow received requests for the idle task during {watched:?}:\n{}",
        idle.join("\n")
    );
    eprintln!(
        "[airflow idle] {watched:?} (poll interval {POLL:?}): idle DAG 0 requests in the access log; \
         the waiting request's DAG {} requests",
        airflow_requests("tg_long") - busy_before
    );
    legacy
        .request("tasks/cancel", json!({"taskId": other}))
        .await;
    let _ = tokio::time::timeout(LIMIT, waiting).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn airflow_two_replicas_with_separate_homes_share_every_task() {
    let Some(url) = e2e_endpoint("TASKGATE_AIRFLOW_URL") else {
        return;
    };
    let _one_at_a_time = AIRFLOW.lock().await;
    let tools = [
        ("long", "tg_long", ""),
        ("short", "tg_success", r#", result = { task_id = "load" }"#),
    ];
    let (sa, sb) = (airflow_setup(&url, &tools), airflow_setup(&url, &tools));
    let a = sa.isolated_server().await;
    let b = sb.isolated_server().await;
    two_replicas(
        &a,
        &b,
        "long",
        "short",
        json!({"dataset": "replicas", "rows": 1}),
    )
    .await;
    assert_nothing_written(&a);
    assert_nothing_written(&b);
}
