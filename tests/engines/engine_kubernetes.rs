//! The Kubernetes engine through the server binary, on the real control plane of
//! `scripts/k8s/cluster-up.sh` (kube-apiserver, controller manager, scheduler, a
//! kwok node; pod behaviour from pod-template annotations, `tests/k8s/README.md`).
//!
//! Each test makes its own namespace holding exactly `deploy/rbac.yaml`, mints a
//! token of that ServiceAccount (TokenRequest), writes a kubeconfig with it, and
//! runs `taskgate serve` with `[engines.k8s] kind = "kubernetes"` on that
//! kubeconfig — never as admin — so every test proves the minimal Role suffices
//! end to end. The tests drive the server as MCP clients over HTTP (2026-07-28
//! tasks, 2025-11-25 tasks, SEP-1391) and check upstream effects with the admin
//! client.
//!
//! The admin kubeconfig comes from `TASKGATE_KUBECONFIG`: skipped when unset,
//! failed when `TASKGATE_REQUIRE_E2E=1`. Every wait polls against a deadline.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::cluster::{rbac_namespace, E2E_LABEL};
use common::{tool_entry, wait_for, Client, Legacy, Setup};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{json, Value};
use taskgate_engine::testing::e2e_endpoint;

/// The longest any single wait of these tests lasts.
const LIMIT: Duration = Duration::from_secs(60);

/// A namespace with the objects of `deploy/rbac.yaml`, a kubeconfig carrying a
/// token of its ServiceAccount, and the admin client for checks.
struct Cluster {
    admin: kube::Client,
    ns: String,
    /// The kubeconfig of the ServiceAccount `taskgate` (what the server uses).
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

impl Cluster {
    async fn new(test: &str) -> Option<Self> {
        let admin_path = e2e_endpoint("TASKGATE_KUBECONFIG")?;
        // The one rustls crypto provider of the build, as the server installs it.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let file = kube::config::Kubeconfig::read_from(&admin_path).expect("admin kubeconfig");
        taskgate_kubernetes::choose_tls_backend();
        let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
            .await
            .expect("admin kubeconfig");
        let admin = kube::Client::try_from(config).expect("admin client");

        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let ns = format!(
            "tg-e2e-bin-{test}-{}-{}",
            std::process::id(),
            nanos % 100_000
        );
        let namespaces: Api<Namespace> = Api::all(admin.clone());
        sweep(&namespaces).await;
        let sa = rbac_namespace(&admin, &ns).await;
        let token = token(&admin, &ns, &sa).await;
        let dir = tempfile::Builder::new()
            .prefix(&format!("taskgate-{ns}-"))
            .tempdir()
            .expect("tempdir");
        let kubeconfig = token_kubeconfig(&admin_path, &token, dir.path());
        Some(Self {
            admin,
            ns,
            kubeconfig,
            dir,
        })
    }

    fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    /// Every Job in the namespace.
    async fn all_jobs(&self) -> Vec<Job> {
        self.jobs()
            .list(&ListParams::default())
            .await
            .expect("list jobs")
            .items
    }

    /// The only Job in the namespace.
    async fn only_job(&self) -> Job {
        let mut jobs = self.all_jobs().await;
        assert_eq!(
            jobs.len(),
            1,
            "expected one Job: {:?}",
            jobs.iter().map(|j| &j.metadata.name).collect::<Vec<_>>()
        );
        jobs.remove(0)
    }

    /// Writes a Job template (see [`job_template`]) as a YAML file; its path.
    fn template_file(&self, file: &str, spec: Value, annotations: Value) -> String {
        let path = self.dir.path().join(file);
        std::fs::write(&path, job_template(spec, annotations)).expect("write template");
        path.to_str().unwrap().to_owned()
    }

    /// A server configuration: the engine `k8s` with the ServiceAccount's
    /// kubeconfig and namespace, then `tools` (TOML `[[tools]]` blocks).
    fn setup(&self, tools: &str) -> Setup {
        let body = format!(
            "[engines.k8s]\nkind = \"kubernetes\"\nkubeconfig = {}\nnamespace = \"{}\"\n\n{tools}",
            toml_string(self.kubeconfig.to_str().unwrap()),
            self.ns
        );
        Setup::config(&body, &[])
    }

    async fn done(self) {
        let _ = Api::<Namespace>::all(self.admin.clone())
            .delete(&self.ns, &DeleteParams::background())
            .await;
    }
}

/// Deletes test namespaces older than ten minutes (left by failed runs: a
/// panicking test skips `done`).
async fn sweep(namespaces: &Api<Namespace>) {
    let Ok(stale) = namespaces
        .list(&ListParams::default().labels(&format!("{E2E_LABEL}=true")))
        .await
    else {
        return;
    };
    for old in stale.items {
        let age = old.metadata.creation_timestamp.map(|t| {
            SystemTime::now()
                .duration_since(SystemTime::from(t.0))
                .unwrap_or_default()
        });
        if age.is_some_and(|a| a > Duration::from_secs(600)) {
            let _ = namespaces
                .delete(
                    &old.metadata.name.unwrap_or_default(),
                    &DeleteParams::background(),
                )
                .await;
        }
    }
}

/// A one-hour token of ServiceAccount `sa` (TokenRequest API).
async fn token(admin: &kube::Client, ns: &str, sa: &str) -> String {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .expect("token status")
        .token
        .expect("a token")
}

/// A kubeconfig with the admin kubeconfig's cluster and `token` as its user.
fn token_kubeconfig(admin_path: &str, token: &str, dir: &Path) -> PathBuf {
    let admin: Value =
        serde_yaml::from_str(&std::fs::read_to_string(admin_path).unwrap()).expect("kubeconfig");
    let cluster = admin["clusters"][0].clone();
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "taskgate", "user": {"token": token}}],
        "contexts": [{"name": "taskgate", "context": {"cluster": cluster["name"], "user": "taskgate"}}],
        "current-context": "taskgate",
    });
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&config).unwrap()).unwrap();
    path
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A Job (YAML) whose pod runs under kwok for 1 s unless `annotations` say
/// otherwise (pod-template annotations of `tests/k8s/stages.yaml`); `spec` adds
/// to the Job spec.
fn job_template(spec: Value, annotations: Value) -> String {
    let mut ann = json!({"taskgate.test/duration": "1s"});
    for (k, v) in annotations.as_object().unwrap() {
        ann[k] = v.clone();
    }
    let mut job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"labels": {"app": "taskgate-e2e"}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": ann},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "busybox:fake", "command": ["sh", "-c", "run"]},
                    ],
                },
            },
        },
    });
    for (k, v) in spec.as_object().unwrap() {
        job["spec"][k] = v.clone();
    }
    serde_yaml::to_string(&job).unwrap()
}

/// A `[[tools]]` block for the engine `k8s`; `target` is the inside of the
/// target table.
fn tool(name: &str, target: &str) -> String {
    tool_entry(
        name,
        "A Kubernetes Job",
        "k8s",
        r#"{ type = "object", properties = { dataset = { type = "string" }, limit = { type = "integer" } } }"#,
        target,
    ) + "\n"
}

/// The text blocks of a `CallToolResult`.
fn texts(result: &Value) -> Vec<String> {
    result["content"]
        .as_array()
        .expect("content")
        .iter()
        .map(|c| c["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The `(name, value)` env of the first container of a Job.
fn job_env(job: &Job) -> Vec<(String, String)> {
    job.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

fn has_condition(job: &Job, kind: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
}

/// Polls `tasks/get` until the status message says `fragment` (failing if the
/// task ends first).
async fn until_message(c: &Client, task: &str, fragment: &str) -> Value {
    wait_for(
        &format!("statusMessage with {fragment:?}"),
        LIMIT,
        || async {
            let r = c.get(task).await;
            assert!(
                matches!(r["status"].as_str(), Some("working" | "input_required")),
                "ended before {fragment:?} was seen: {r}"
            );
            if r["statusMessage"]
                .as_str()
                .is_some_and(|m| m.contains(fragment))
            {
                Ok(r)
            } else {
                Err(r.to_string())
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_completes_with_its_termination_message_and_log() {
    let Some(c) = Cluster::new("ok").await else {
        return;
    };
    let file = c.template_file(
        "report.yaml",
        json!({}),
        json!({"taskgate.test/duration": "2s", "taskgate.test/termination-message": "{\"rows\": 42, \"table\": \"sales\"}"}),
    );
    let s = c.setup(&tool(
        "report",
        &format!(
            r#"template_file = {}, args_env_prefix = "ARG_""#,
            toml_string(&file)
        ),
    ));

    // check-config with the ServiceAccount's token: the rules review finds the
    // Role sufficient and the template passes a server-side dry run.
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_taskgate"))
        .args(["check-config", "--config"])
        .arg(&s.config)
        .envs(s.env().iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("run check-config");
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "check-config failed: {out}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(out.contains("engine k8s (kubernetes): ok"), "{out}");
    assert!(out.contains("dry run"), "{out}");
    assert!(c.all_jobs().await.is_empty(), "the dry run created a Job");

    let server = s.server().await;
    let c2 = server.client();
    let task = c2
        .start_task("report", json!({"dataset": "sales", "limit": 5}))
        .await;
    // The Job as created: the tool's label, the arguments in the env, the
    // keep_alive as its TTL.
    let job = c.only_job().await;
    let labels = job.metadata.labels.clone().unwrap();
    assert_eq!(labels["taskgate.io/tool"], "report");
    assert_eq!(labels["app"], "taskgate-e2e");
    assert_eq!(
        job.spec.as_ref().unwrap().ttl_seconds_after_finished,
        Some(3600)
    );
    let env = job_env(&job);
    assert!(
        env.contains(&("ARG_DATASET".into(), "sales".into())),
        "{env:?}"
    );
    assert!(env.contains(&("ARG_LIMIT".into(), "5".into())), "{env:?}");
    assert!(
        !task.contains(job.metadata.name.as_deref().unwrap()),
        "the handle is sealed"
    );

    // Working while the pod runs, then completed with the termination message.
    let working = c2.get_reply(&task).await;
    assert_eq!(working.result()["status"], "working", "{:?}", working.body);
    assert_eq!(working.result()["pollIntervalMs"], 200);
    let done = c2.until_status(&task, "completed", LIMIT).await;
    let result = &done["result"];
    assert_eq!(result["isError"], false, "{done}");
    assert_eq!(
        result["structuredContent"],
        json!({"rows": 42, "table": "sales"}),
        "{done}"
    );
    let t = texts(result);
    assert_eq!(t.len(), 2, "{done}");
    assert_eq!(
        serde_json::from_str::<Value>(&t[0]).unwrap(),
        json!({"rows": 42, "table": "sales"})
    );
    assert!(
        t[1].contains("taskgate kwok pod log line 1") && t[1].contains("log line 3"),
        "{t:?}"
    );
    let job = c
        .jobs()
        .get(job.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    assert!(has_condition(&job, "Complete"), "{:?}", job.status);
    // Reading it again answers the same (the engine is the database).
    let again = c2.get_reply(&task).await;
    assert_eq!(again.result()["result"], done["result"]);
    c.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_is_a_tool_error_with_its_reason() {
    let Some(c) = Cluster::new("fail").await else {
        return;
    };
    let file = c.template_file(
        "fail.yaml",
        json!({"backoffLimit": 0}),
        json!({"taskgate.test/fail": "true", "taskgate.test/exit-code": "3", "taskgate.test/termination-message": "disk full"}),
    );
    let s = c.setup(&tool(
        "report",
        &format!("template_file = {}", toml_string(&file)),
    ));
    let server = s.server().await;
    let m = server.client();
    let task = m.start_task("report", json!({"dataset": "x"})).await;
    let done = m.until_status(&task, "completed", LIMIT).await;
    let result = &done["result"];
    assert_eq!(result["isError"], true, "{done}");
    let t = texts(result);
    assert!(t[0].contains("failed: BackoffLimitExceeded"), "{t:?}");
    assert!(t[0].contains("exited with code 3"), "{t:?}");
    assert!(t[0].contains("disk full"), "{t:?}");
    assert!(
        t.last().unwrap().contains("taskgate kwok pod log line"),
        "{t:?}"
    );
    let job = c.only_job().await;
    assert!(has_condition(&job, "Failed"), "{:?}", job.status);
    c.done().await;
}

/// Issue 38: a cancel (default `cancel`) stops the Job's pods and leaves the Job
/// marked, so the task reads `cancelled` afterwards in every dialect (a deleted
/// Job would read "not found"); the Job ends through its own deadline and its
/// TTL (the tool's keep_alive) removes it later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_pods_and_reads_cancelled_in_every_dialect() {
    let Some(c) = Cluster::new("cancel").await else {
        return;
    };
    let file = c.template_file(
        "long.yaml",
        json!({}),
        json!({"taskgate.test/duration": "300s"}),
    );
    let s = c.setup(&tool(
        "long",
        &format!("template_file = {}", toml_string(&file)),
    ));
    let server = s.server().await;

    // 2026-07-28 tasks.
    let m = server.client();
    let modern = m.start_task("long", json!({"dataset": "modern"})).await;
    until_message(&m, &modern, "1 active").await;
    // 2025-11-25 tasks.
    let l25 = Legacy::connect(&server.url(), "2025-11-25", json!({"tasks": {}})).await;
    let legacy = l25.start_task("long", json!({"dataset": "legacy"})).await;
    // SEP-1391 operations.
    let op = Legacy::connect(
        &server.url(),
        "2025-06-18",
        json!({"experimental": {"taskgate/sep-1391": {}}}),
    )
    .await;
    let token = format!("op-cancel-{}", c.ns);
    let call_id = op.next_id();
    let started = op
        .post(
            &json!({ "jsonrpc": "2.0", "id": call_id, "method": "tools/call",
                       "params": { "name": "long", "arguments": {"dataset": "sep"},
                                   "operation": { "token": token } } }),
        )
        .await;
    assert_eq!(
        started.result()["operation"]["status"],
        "submitted",
        "{:?}",
        started.body
    );
    let pods = c.pods();
    wait_for("three running pods", LIMIT, || async {
        let list = pods.list(&ListParams::default()).await.expect("pods");
        let running = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == 3 {
            Ok(())
        } else {
            Err(format!("{running} running"))
        }
    })
    .await;

    let cancelled = m.cancel_reply(&modern).await;
    assert_eq!(
        cancelled.result()["resultType"],
        "complete",
        "{:?}",
        cancelled.body
    );
    let now = m.get_reply(&modern).await;
    assert_eq!(now.result()["status"], "cancelled", "{:?}", now.body);
    let reply = l25.request("tasks/cancel", json!({"taskId": legacy})).await;
    assert_eq!(reply.result()["status"], "cancelled", "{:?}", reply.body);
    let code = op
        .notify(
            "notifications/cancelled",
            json!({ "requestId": call_id, "_operation": { "token": token } }),
        )
        .await;
    assert_eq!(code, 202);

    // Upstream: every pod is gone, every Job ended (DeadlineExceeded) and
    // stays, marked as cancelled, with its TTL (the keep_alive) to remove it.
    wait_for("the pods to be deleted", LIMIT, || async {
        match pods.list(&ListParams::default()).await {
            Ok(list) if list.items.is_empty() => Ok(()),
            other => Err(format!("{:?}", other.map(|l| l.items.len()))),
        }
    })
    .await;
    wait_for("the Jobs to end", LIMIT, || async {
        let jobs = c.all_jobs().await;
        if jobs.len() == 3 && jobs.iter().all(|j| has_condition(j, "Failed")) {
            Ok(jobs)
        } else {
            Err(format!(
                "{:?}",
                jobs.iter().map(|j| &j.status).collect::<Vec<_>>()
            ))
        }
    })
    .await;
    for job in c.all_jobs().await {
        let annotations = job.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations.get("taskgate.io/cancelled").map(String::as_str),
            Some("true"),
            "{:?}",
            job.metadata
        );
        assert!(
            job.spec
                .as_ref()
                .unwrap()
                .ttl_seconds_after_finished
                .is_some_and(|ttl| ttl >= 3600),
            "{:?}",
            job.spec
        );
    }
    // Each dialect reads the task as cancelled after the Job ended.
    let after = m.get(&modern).await;
    assert_eq!(after["status"], "cancelled", "{after}");
    let after = l25.request("tasks/get", json!({"taskId": legacy})).await;
    assert_eq!(after.result()["status"], "cancelled", "{:?}", after.body);
    let after = op.op_status(&token).await;
    assert_eq!(after.result()["status"], "canceled", "{:?}", after.body);
    c.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_gate_asks_then_runs_on_accept_and_is_deleted_on_decline() {
    let Some(c) = Cluster::new("gate").await else {
        return;
    };
    let file = c.template_file(
        "migrate.yaml",
        json!({}),
        json!({"taskgate.test/termination-message": "{\"migrated\": true}"}),
    );
    let s = c.setup(&tool(
        "migrate",
        &format!(
            r#"template_file = {}, approval = {{ message = "Run the migration?", schema = {{ type = "object", properties = {{ note = {{ type = "string" }} }} }} }}"#,
            toml_string(&file)
        ),
    ));
    let server = s.server().await;
    let m = server.client();
    let task = m.start_task("migrate", json!({"dataset": "a"})).await;
    let asked = m.until_status(&task, "input_required", LIMIT).await;
    let request = &asked["inputRequests"]["approval"];
    assert_eq!(request["method"], "elicitation/create", "{asked}");
    assert_eq!(request["params"]["message"], "Run the migration?");
    assert_eq!(
        request["params"]["requestedSchema"]["properties"]["note"]["type"],
        "string"
    );
    // Upstream: created suspended, no pod runs.
    let job = c.only_job().await;
    let name = job.metadata.name.clone().unwrap();
    assert_eq!(job.spec.as_ref().unwrap().suspend, Some(true));
    let lp = ListParams::default().labels(&format!("job-name={name}"));
    assert!(c.pods().list(&lp).await.unwrap().items.is_empty());

    // An answer that does not fit the schema never reaches the cluster.
    let bad = m
        .update(
            &task,
            json!({"approval": {"action": "accept", "content": {"note": 5}}}),
        )
        .await;
    assert_eq!(bad.error()["code"], -32602, "{:?}", bad.body);
    assert_eq!(m.get(&task).await["status"], "input_required");

    let ok = m
        .update(
            &task,
            json!({"approval": {"action": "accept", "content": {"note": "go"}}}),
        )
        .await;
    assert_eq!(ok.result()["resultType"], "complete", "{:?}", ok.body);
    let done = m.until_status(&task, "completed", LIMIT).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"migrated": true})
    );
    let job = c.jobs().get(&name).await.unwrap();
    assert!(has_condition(&job, "Complete"), "{:?}", job.status);
    let ann = job.metadata.annotations.unwrap();
    assert_eq!(ann["taskgate.io/approval"], "accepted");
    assert_eq!(ann["taskgate.io/approval-answer"], r#"{"note":"go"}"#);
    let pods = c.pods().list(&lp).await.unwrap().items;
    assert_eq!(
        pods[0].metadata.annotations.as_ref().unwrap()["taskgate.io/approval-answer"],
        r#"{"note":"go"}"#
    );

    // Declined: the Job is deleted without ever running.
    let declined = m.start_task("migrate", json!({"dataset": "b"})).await;
    m.until_status(&declined, "input_required", LIMIT).await;
    let second = c
        .all_jobs()
        .await
        .into_iter()
        .find(|j| j.metadata.name.as_deref() != Some(name.as_str()))
        .expect("the second Job");
    let second = second.metadata.name.unwrap();
    let reply = m
        .update(&declined, json!({"approval": {"action": "decline"}}))
        .await;
    assert!(reply.is_ok(), "{:?}", reply.body);
    let jobs = c.jobs();
    wait_for("the declined Job to be deleted", LIMIT, || async {
        match jobs.get_opt(&second).await {
            Ok(None) => Ok(()),
            other => Err(format!("{:?}", other.map(|j| j.map(|j| j.status)))),
        }
    })
    .await;
    c.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_between_start_and_result_loses_nothing() {
    let Some(c) = Cluster::new("restart").await else {
        return;
    };
    let file = c.template_file(
        "job.yaml",
        json!({}),
        json!({"taskgate.test/duration": "3s", "taskgate.test/termination-message": "{\"survived\": true}"}),
    );
    let s = c.setup(&tool(
        "job",
        &format!("template_file = {}", toml_string(&file)),
    ));
    // Own HOME, working directory and TMPDIR each.
    let mut first = s.isolated_server().await;
    let m = first.client();
    let task = m.start_task("job", json!({})).await;
    assert_eq!(m.get(&task).await["status"], "working");
    first.kill();

    let second = s.isolated_server().await;
    let m = m.at(&second.url());
    let done = m.until_status(&task, "completed", LIMIT).await;
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"survived": true}),
        "{done}"
    );
    let job = c.only_job().await;
    assert!(has_condition(&job, "Complete"), "{:?}", job.status);
    c.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sep1391_token_retry_is_the_same_job_and_other_arguments_conflict() {
    let Some(c) = Cluster::new("sep1391").await else {
        return;
    };
    let file = c.template_file(
        "op.yaml",
        json!({}),
        json!({"taskgate.test/duration": "2s", "taskgate.test/termination-message": "{\"op\": \"done\"}"}),
    );
    let s = c.setup(&tool(
        "report",
        &format!(
            r#"template_file = {}, args_env_prefix = "ARG_""#,
            toml_string(&file)
        ),
    ));
    let server = s.server().await;
    let l = Legacy::connect(
        &server.url(),
        "2025-06-18",
        json!({"experimental": {"taskgate/sep-1391": {}}}),
    )
    .await;
    let tools = l.request("tools/list", json!({})).await;
    assert_eq!(
        tools.result()["tools"][0]["invocationMode"],
        "async",
        "{:?}",
        tools.body
    );

    let token = format!("op-{}", c.ns);
    let call = |args: Value| l.call_op("report", args, &token, 3600);
    let first = call(json!({"dataset": "d1", "limit": 2})).await;
    assert_eq!(
        first.result()["operation"]["token"],
        token.as_str(),
        "{:?}",
        first.body
    );
    assert_eq!(first.result()["operation"]["status"], "submitted");
    let job = c.only_job().await;
    let name = job.metadata.name.clone().unwrap();
    let uid = job.metadata.uid.clone().unwrap();
    // A retry with the same token and arguments (in another order): the same Job.
    let again = call(json!({"limit": 2, "dataset": "d1"})).await;
    assert_eq!(
        again.result()["operation"]["token"],
        token.as_str(),
        "{:?}",
        again.body
    );
    let job = c.only_job().await;
    assert_eq!(job.metadata.uid.as_deref(), Some(uid.as_str()));
    // The same token with other arguments: a conflict, and no second Job.
    let other = call(json!({"dataset": "d2"})).await;
    assert_eq!(other.error()["code"], -32602, "{:?}", other.body);
    assert!(
        other.error()["message"]
            .as_str()
            .unwrap()
            .contains("already used"),
        "{:?}",
        other.body
    );
    let job = c.only_job().await;
    assert_eq!(job.metadata.uid.as_deref(), Some(uid.as_str()));
    assert!(job_env(&job).contains(&("ARG_DATASET".into(), "d1".into())));

    l.until_op_status(&token, "completed", LIMIT).await;
    let result = l.op_result(&token).await;
    assert_eq!(
        result.result()["result"]["structuredContent"],
        json!({"op": "done"}),
        "{:?}",
        result.body
    );
    // After completion, the same retry is still the same operation and Job.
    let late = call(json!({"dataset": "d1", "limit": 2})).await;
    assert!(late.is_ok(), "{:?}", late.body);
    let job = c.only_job().await;
    assert_eq!(job.metadata.name.as_deref(), Some(name.as_str()));
    assert_eq!(job.metadata.uid.as_deref(), Some(uid.as_str()));
    c.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_2025_result_blocks_until_the_job_is_done() {
    let Some(c) = Cluster::new("t2025").await else {
        return;
    };
    let file = c.template_file(
        "job.yaml",
        json!({}),
        json!({"taskgate.test/duration": "3s", "taskgate.test/termination-message": "{\"blocked\": true}"}),
    );
    let s = c.setup(&tool(
        "job",
        &format!("template_file = {}", toml_string(&file)),
    ));
    let server = s.server().await;
    let l = Legacy::connect(&server.url(), "2025-11-25", json!({"tasks": {}})).await;
    let tools = l.request("tools/list", json!({})).await;
    assert_eq!(
        tools.result()["tools"][0]["execution"]["taskSupport"],
        "optional",
        "{:?}",
        tools.body
    );
    let task = l.start_task("job", json!({})).await;
    let polled = l.request("tasks/get", json!({"taskId": task})).await;
    assert_eq!(polled.result()["status"], "working", "{:?}", polled.body);

    // One tasks/result: it returns only once the Job is done.
    let asked = Instant::now();
    let reply = l.request("tasks/result", json!({"taskId": task})).await;
    let waited = asked.elapsed();
    let result = reply.result();
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"],
        json!({"blocked": true}),
        "{result}"
    );
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );
    let job = c.only_job().await;
    assert!(
        has_condition(&job, "Complete"),
        "tasks/result answered after {waited:?} before the Job completed: {:?}",
        job.status
    );
    let status = l.request("tasks/get", json!({"taskId": task})).await;
    assert_eq!(status.result()["status"], "completed");
    c.done().await;
}

/// Open WATCH requests on Jobs in the apiserver (all scopes), from its `/metrics`.
async fn job_watches(admin: &kube::Client) -> u64 {
    let request = axum::http::Request::get("/metrics")
        .body(Vec::new())
        .unwrap();
    let text = admin
        .request_text(request)
        .await
        .expect("apiserver /metrics");
    common::metric_sum(
        &text,
        "apiserver_longrunning_requests",
        &[("resource", "jobs"), ("verb", "WATCH")],
    )
}

/// Opens `subscriptions/listen` for `task` on `server`.
async fn listen(server: &common::Server, id: &str, task: &str) -> common::SseReader {
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": { "notifications": { "taskIds": [task] }, "_meta": common::modern_meta(true) } });
    let response = reqwest::Client::new()
        .post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", common::MODERN)
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .expect("POST /mcp");
    common::SseReader::new(response)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_notifies_a_job_completion_and_leaves_no_watch_open() {
    let Some(c) = Cluster::new("listen").await else {
        return;
    };
    let long = c.template_file(
        "long.yaml",
        json!({}),
        json!({"taskgate.test/duration": "300s"}),
    );
    let short = c.template_file(
        "short.yaml",
        json!({}),
        json!({"taskgate.test/duration": "3s", "taskgate.test/termination-message": "{\"pushed\": true}"}),
    );
    let s = c.setup(&format!(
        "{}{}",
        tool("long", &format!("template_file = {}", toml_string(&long))),
        tool("short", &format!("template_file = {}", toml_string(&short)))
    ));
    let server = s.server().await;
    let m = server.client();

    // A stream on a Job that keeps running: a watch is open while it is.
    let baseline = job_watches(&c.admin).await;
    let running = m.start_task("long", json!({})).await;
    let mut stream = listen(&server, "long", &running).await;
    let ack = stream.next(LIMIT).await.expect("ack");
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([running]),
        "{ack}"
    );
    wait_for("taskgate's watch on the Job", LIMIT, || async {
        let n = job_watches(&c.admin).await;
        (n > baseline).then_some(()).ok_or_else(|| n.to_string())
    })
    .await;
    drop(stream);
    wait_for("the stream's slot given back", LIMIT, || async {
        let text = server.metrics().await;
        let n = common::metric_sum(&text, "taskgate_waits_in_flight", &[]);
        (n == 0).then_some(()).ok_or_else(|| n.to_string())
    })
    .await;
    wait_for("no watch of taskgate's left", LIMIT, || async {
        let n = job_watches(&c.admin).await;
        (n == baseline).then_some(()).ok_or_else(|| n.to_string())
    })
    .await;
    // A watch taskgate still held would re-open (each lasts at most a poll
    // interval, 200 ms): five intervals later, still none and no engine call.
    let calls = server.engine_calls().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(job_watches(&c.admin).await, baseline, "no watch re-opened");
    assert_eq!(
        server.engine_calls().await,
        calls,
        "no engine call after the stream closed"
    );
    m.cancel(&running).await;

    // A stream on a Job that completes: the completion arrives as a notification.
    let task = m.start_task("short", json!({})).await;
    let mut stream = listen(&server, "short", &task).await;
    stream.next(LIMIT).await.expect("ack");
    let (done, arrived) = loop {
        let n = stream
            .next(LIMIT)
            .await
            .expect("notifications until the result");
        assert_eq!(n["method"], "notifications/tasks", "{n}");
        if n["params"]["status"] == "completed" {
            break (n, SystemTime::now());
        }
    };
    assert_eq!(
        done["params"]["result"]["structuredContent"],
        json!({"pushed": true}),
        "{done}"
    );
    let closing = stream.next(LIMIT).await.expect("the result");
    assert_eq!(closing["result"]["resultType"], "complete", "{closing}");
    // How long after the Job's Complete condition the notification arrived
    // (a number for the notes, not an assertion).
    let job = c
        .all_jobs()
        .await
        .into_iter()
        .find(|j| has_condition(j, "Complete"))
        .expect("the completed Job");
    let complete_at = job
        .status
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Complete"))
        .and_then(|c| c.last_transition_time)
        .map(|t| SystemTime::from(t.0))
        .expect("Complete condition time");
    println!(
        "notification latency after the Job's Complete condition: {:?} (condition times have 1 s resolution)",
        arrived.duration_since(complete_at).unwrap_or_default()
    );
    assert!(server.engine_calls().await > calls);
    c.done().await;
}

/// `taskgate_logs` on a running Job: a kwok `Logs` object (cluster-up.sh
/// enables that CRD) points the pod's container log at a file of this test;
/// the test appends a line to it every ~300 ms while the Job runs and follows
/// the cursor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_a_running_job_line_by_line() {
    let Some(c) = Cluster::new("logs").await else {
        return;
    };
    let file = c.template_file(
        "report.yaml",
        json!({}),
        json!({"taskgate.test/duration": "4s"}),
    );
    let s = c.setup(&tool(
        "report",
        &format!("template_file = {}", toml_string(&file)),
    ));
    let server = s.server().await;
    let client = server.client();
    let task = client.start_task("report", json!({})).await;
    let job = c.only_job().await;
    let name = job.metadata.name.clone().unwrap();
    let marker = format!("appended {name} ");
    let log_file = c.dir.path().join("pod.log");
    std::fs::write(&log_file, "").unwrap();
    let pod_name = wait_for("the Job's pod", LIMIT, || async {
        let items = c
            .pods()
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items;
        items
            .first()
            .and_then(|p| p.metadata.name.clone())
            .ok_or_else(|| "no pod yet".to_owned())
    })
    .await;
    let logs_kind = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("kwok.x-k8s.io", "v1alpha1", "Logs"),
        "logs",
    );
    let logs_api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(c.admin.clone(), &c.ns, &logs_kind);
    let mut own_log = kube::api::DynamicObject::new(&pod_name, &logs_kind);
    own_log.data = json!({"spec": {"logs": [{"containers": ["main"], "logsFile": log_file, "follow": false}]}});
    logs_api
        .create(&PostParams::default(), &own_log)
        .await
        .expect("create a kwok Logs object");
    let jobs = c.jobs();
    let pods = c.pods();
    let appender = tokio::spawn(async move {
        use std::io::Write;
        let mut n = 0u32;
        loop {
            // A container writes no more once it has terminated: stop then
            // (kwok marks the pod's container terminated before the Job's
            // Complete condition).
            let pods = pods.list(&ListParams::default()).await.unwrap().items;
            let terminated = pods.iter().any(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()))
                    })
            });
            if terminated || has_condition(&jobs.get(&name).await.unwrap(), "Complete") {
                return n;
            }
            n += 1;
            let stamp = k8s_openapi::jiff::Timestamp::now();
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&log_file)
                .unwrap();
            writeln!(f, "{stamp:?} stdout F appended {name} {n}").unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    let mut cursor: Option<String> = None;
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut complete = false;
    let deadline = Instant::now() + LIMIT;
    while !(complete && appender.is_finished()) {
        assert!(Instant::now() < deadline, "no complete page; seen {seen:?}");
        let mut args = json!({"taskId": task});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let reply = client.call("taskgate_logs", args).await;
        assert!(reply.is_ok(), "{}", reply.raw);
        let page = &reply.result()["structuredContent"];
        for l in page["lines"].as_array().unwrap() {
            seen.push((
                l["source"].as_str().unwrap().to_owned(),
                l["text"].as_str().unwrap().to_owned(),
            ));
        }
        cursor = Some(page["cursor"].as_str().unwrap().to_owned());
        complete = page["complete"].as_bool().unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let appended = appender.await.unwrap();
    assert!(appended >= 3, "the Job ran for {appended} appends only");
    let pods = c.pods().list(&ListParams::default()).await.unwrap().items;
    assert_eq!(pods.len(), 1);
    let source = format!("{}/main", pods[0].metadata.name.as_deref().unwrap());
    let texts: Vec<&str> = seen
        .iter()
        .map(|(_, t)| t.as_str())
        .filter(|t| t.starts_with(&marker))
        .collect();
    let want: Vec<String> = (1..=appended).map(|n| format!("{marker}{n}")).collect();
    assert_eq!(texts, want, "every appended line once, in order");
    assert!(seen.iter().all(|(s, _)| *s == source), "{seen:?}");
    c.done().await;
}

/// Issue 34: a 2026-07-28 call whose `_meta` carries a `traceparent`, on a server
/// with tracing on (`[telemetry]`, an unreachable collector is fine), starts a
/// Job whose container env holds `TRACEPARENT` of the caller's trace (taskgate's
/// own start span is the parent, so only the trace id is the caller's), and
/// whose annotation `taskgate.io/traceparent` says the same. Needs the
/// telemetry core to fill `StartRequest.trace` from the request's context.
#[tokio::test]
async fn a_traced_call_puts_its_trace_id_in_the_jobs_env() {
    const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    let Some(c) = Cluster::new("trace").await else {
        return;
    };
    let file = c.template_file(
        "traced.yaml",
        json!({}),
        json!({"taskgate.test/duration": "30s"}),
    );
    let tools = tool("traced", &format!("template_file = {}", toml_string(&file)));
    let s = c.setup(&format!(
        "[telemetry]\nendpoint = \"http://127.0.0.1:9\"\n\n{tools}"
    ));
    let server = s.server().await;
    let client = server.client();
    let mut params = json!({"name": "traced", "arguments": {"dataset": "sales"}});
    params["_meta"] = common::modern_meta(true);
    params["_meta"]["traceparent"] = json!(format!("00-{TRACE_ID}-00f067aa0ba902b7-01"));
    params["_meta"]["tracestate"] = json!("vendor=abc");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let reply = client
        .post_raw(
            &Client::headers_for("tools/call", &params),
            body.to_string(),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    assert_eq!(reply.result()["resultType"], "task", "{}", reply.raw);
    let job = c.only_job().await;
    let env = job_env(&job);
    let traceparent = env
        .iter()
        .find(|(name, _)| name == "TRACEPARENT")
        .map(|(_, value)| value.clone())
        .unwrap_or_else(|| panic!("no TRACEPARENT in {env:?}"));
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    assert_eq!(parts[1], TRACE_ID, "{traceparent}");
    assert_ne!(
        parts[2], "00f067aa0ba902b7",
        "the parent is taskgate's span"
    );
    let annotations = job.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("taskgate.io/traceparent"),
        Some(&traceparent)
    );
    // No label holds any of it.
    let labels = job.metadata.labels.clone().unwrap_or_default();
    assert!(
        labels
            .values()
            .all(|v| !v.contains(TRACE_ID) && !v.contains("vendor")),
        "{labels:?}"
    );
}

/// A CronJob (batch/v1) whose job template runs 1 s under kwok and ends with
/// `{"rows": 7}`, with a literal variable `REGION` and one from a Secret;
/// `description` is its `description` annotation.
async fn create_cronjob(c: &Cluster, name: &str, description: &str) {
    let cronjob: k8s_openapi::api::batch::v1::CronJob = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {"description": description}},
        "spec": {
            "schedule": "0 0 1 1 *",
            "jobTemplate": {"spec": {"backoffLimit": 0, "template": {
                "metadata": {"annotations": {
                    "taskgate.test/duration": "1s",
                    "taskgate.test/termination-message": "{\"rows\": 7}",
                }},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "busybox:fake",
                    "env": [
                        {"name": "REGION", "value": "eu-west-1"},
                        {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}
                    ]
                }]}
            }}}
        }
    }))
    .unwrap();
    Api::<k8s_openapi::api::batch::v1::CronJob>::namespaced(c.admin.clone(), &c.ns)
        .create(&PostParams::default(), &cronjob)
        .await
        .expect("create the CronJob");
}

/// Runs `taskgate check-config` on `s`; its stdout, failing the test unless
/// it succeeds.
fn check_config(s: &Setup) -> String {
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_taskgate"))
        .args(["check-config", "--config"])
        .arg(&s.config)
        .envs(s.env().iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("run check-config");
    let out = String::from_utf8_lossy(&check.stdout).into_owned();
    assert!(
        check.status.success(),
        "check-config failed: {out}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    out
}

/// Starts `tool` with `arguments` and waits for its result: the Job it made
/// is the CronJob's (manual annotation, owner), `REGION` set from the
/// argument, and the result is the termination message.
async fn run_cronjob_tool(c: &Cluster, client: &Client, tool: &str, cronjob: &str) {
    let task = client
        .start_task(tool, json!({"REGION": "us-east-2"}))
        .await;
    let job = c.only_job().await;
    assert_eq!(
        job.metadata.annotations.as_ref().unwrap()["cronjob.kubernetes.io/instantiate"],
        "manual"
    );
    let owner = &job.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("CronJob", cronjob)
    );
    assert_eq!(
        job.metadata.labels.as_ref().unwrap()["taskgate.io/tool"],
        tool
    );
    let env = job_env(&job);
    assert!(
        env.contains(&("REGION".into(), "us-east-2".into())),
        "{env:?}"
    );
    assert!(
        env.contains(&("DB_PASSWORD".into(), String::new())),
        "{env:?}"
    );
    let done = client.until_status(&task, "completed", LIMIT).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"rows": 7}),
        "{done}"
    );
}

/// Issue 35: a tool on a CronJob, written as `taskgate discover
/// --args-from-env` prints it (target `from_cronjob` with `env_arguments`),
/// passes `check-config` (the Role reads the CronJob; the Job it would make
/// passes a dry run) and runs the CronJob's job template to completion
/// through the binary. Arguments outside the schema never reach the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cronjob_tool_runs_its_job_template_to_completion() {
    let Some(c) = Cluster::new("cron").await else {
        return;
    };
    create_cronjob(&c, "nightly", "Builds the nightly report").await;
    let s = c.setup(
        r#"[[tools]]
name = "nightly"
engine = "k8s"
description = "Builds the nightly report"
mode = "async"
input_schema = { type = "object", additionalProperties = false, properties = { REGION = { type = "string", default = "eu-west-1", description = "Environment variable REGION of the job (default: the CronJob's value)" } } }
target = { from_cronjob = "nightly", env_arguments = ["REGION"] }
"#,
    );
    let out = check_config(&s);
    assert!(out.contains("dry run"), "{out}");
    assert!(c.all_jobs().await.is_empty(), "the dry run created a Job");
    let server = s.server().await;
    let client = server.client();
    // Hostile input is refused before any upstream call: a non-string, an
    // undeclared variable (which would otherwise reach the env).
    for bad in [json!({"REGION": 5}), json!({"DB_PASSWORD": "x"})] {
        let reply = client.call("nightly", bad.clone()).await;
        assert_eq!(reply.code(), -32602, "{bad}: {:?}", reply.body);
    }
    assert!(c.all_jobs().await.is_empty());
    run_cronjob_tool(&c, &client, "nightly", "nightly").await;
    c.done().await;
}

/// Issue 35 end to end: `taskgate discover --engine k8s --args-from-env`
/// prints a `[[tools]]` entry for the CronJob that, appended to the same
/// config, passes `check-config` and runs to completion through the binary;
/// a hostile description cannot inject TOML. Needs the `discover` command
/// (branch of issue 35's first half).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discovered_cronjob_tool_runs_end_to_end() {
    let Some(c) = Cluster::new("crondisc").await else {
        return;
    };
    let hostile = "Report\"\"\"]\n[server]\nlisten = \"0.0.0.0:1\"";
    create_cronjob(&c, "nightly-report", hostile).await;
    let s = c.setup("");
    let discover = |json: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_taskgate"));
        cmd.args(["discover", "--config"])
            .arg(&s.config)
            .args(["--engine", "k8s", "--args-from-env"])
            .envs(s.env().iter().map(|(k, v)| (k.as_str(), v.as_str())));
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().expect("run taskgate discover");
        assert!(
            out.status.success(),
            "discover failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let listed: Value = serde_json::from_str(&discover(true)).expect("discover --json");
    let tools = listed["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 1, "{listed}");
    let tool = &tools[0];
    assert_eq!(tool["engine"], "k8s");
    assert_eq!(
        tool["target"],
        json!({"from_cronjob": "nightly-report", "env_arguments": ["REGION"]})
    );
    assert_eq!(tool["description"], hostile);
    let name = tool["name"].as_str().unwrap().to_owned();
    let toml = discover(false);
    let mut config = std::fs::read_to_string(&s.config).unwrap();
    config.push('\n');
    config.push_str(&toml);
    std::fs::write(&s.config, &config).unwrap();
    // The description stays inside a string: what discover printed reads back
    // as one `[[tools]]` entry holding it, with no table or key of its own.
    let doc: toml::Table = toml.parse().expect("discover prints TOML");
    assert_eq!(
        doc.keys().collect::<Vec<_>>(),
        ["tools"],
        "the description injected TOML:\n{toml}"
    );
    let entries = doc["tools"].as_array().expect("[[tools]]");
    assert_eq!(entries.len(), 1, "{toml}");
    assert_eq!(entries[0]["description"].as_str(), Some(hostile), "{toml}");
    check_config(&s);
    let server = s.server().await;
    run_cronjob_tool(&c, &server.client(), &name, "nightly-report").await;
    c.done().await;
}
