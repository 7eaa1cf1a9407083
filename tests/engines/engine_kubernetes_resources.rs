//! Kubernetes `resource` targets through the server binary (issue 38): Argo
//! Workflows run by the real Argo controller (`scripts/argo/up.sh`, v4.0.5,
//! pinned, only in this private cluster) on the control plane of
//! `scripts/k8s/cluster-up.sh`. Pods Argo creates are completed or failed by the
//! kwok stages of `tests/k8s/stages.yaml` (template annotations); the test acts
//! as the pipeline's executor where one would write outputs: it writes the
//! `WorkflowTaskResult` that Argo's wait container writes.
//!
//! Needs `TASKGATE_KUBECONFIG` (admin) and `TASKGATE_ARGO_ENV` (the env file
//! `scripts/argo/up.sh` prints): skipped when unset, failed when
//! `TASKGATE_REQUIRE_E2E=1`. Each test runs the engine as a ServiceAccount with
//! `deploy/rbac.yaml` plus a Role on `workflows.argoproj.io`.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::cluster::{rbac_namespace, rbac_settled};
use common::{tool_entry, wait_for, Client, Legacy, Setup};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{json, Value};
use taskgate_engine::testing::e2e_endpoint;

const LIMIT: Duration = Duration::from_secs(90);

struct Cluster {
    admin: kube::Client,
    ns: String,
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

fn workflows_api() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Workflow"),
        "workflows",
    )
}

fn task_results_api() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "WorkflowTaskResult"),
        "workflowtaskresults",
    )
}

impl Cluster {
    async fn new(test: &str) -> Option<Self> {
        let admin_path = e2e_endpoint("TASKGATE_KUBECONFIG")?;
        e2e_endpoint("TASKGATE_ARGO_ENV")?;
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        taskgate_kubernetes::choose_tls_backend();
        let file = kube::config::Kubeconfig::read_from(&admin_path).expect("admin kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
            .await
            .expect("admin kubeconfig");
        let admin = kube::Client::try_from(config).expect("admin client");
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let ns = format!(
            "tg-e2e-argo-{test}-{}-{}",
            std::process::id(),
            nanos % 100_000
        );
        let sa = rbac_namespace(&admin, &ns).await;
        // What a workflow tool needs besides deploy/rbac.yaml.
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": "taskgate-workflows"},
            "rules": [{"apiGroups": ["argoproj.io"], "resources": ["workflows"],
                       "verbs": ["create", "get", "list", "watch", "patch"]}],
        }))
        .unwrap();
        Api::<Role>::namespaced(admin.clone(), &ns)
            .create(&PostParams::default(), &role)
            .await
            .expect("role");
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": "taskgate-workflows"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "taskgate-workflows"},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
        }))
        .unwrap();
        Api::<RoleBinding>::namespaced(admin.clone(), &ns)
            .create(&PostParams::default(), &binding)
            .await
            .expect("rolebinding");
        let rules = serde_json::to_value(&role.rules).unwrap();
        rbac_settled(&admin, &ns, &sa, &rules).await;
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
            .unwrap()
            .token
            .expect("a token");
        let dir = tempfile::Builder::new()
            .prefix(&format!("taskgate-{ns}-"))
            .tempdir()
            .unwrap();
        let kubeconfig = token_kubeconfig(&admin_path, &token, dir.path());
        Some(Self {
            admin,
            ns,
            kubeconfig,
            dir,
        })
    }

    fn workflows(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.admin.clone(), &self.ns, &workflows_api())
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    fn setup(&self, tools: &str) -> Setup {
        let body = format!(
            "[engines.k8s]\nkind = \"kubernetes\"\nkubeconfig = {}\nnamespace = \"{}\"\n\n{tools}",
            serde_json::to_string(self.kubeconfig.to_str().unwrap()).unwrap(),
            self.ns
        );
        Setup::config(&body, &[])
    }

    async fn workflow(&self) -> Value {
        let list = self.workflows().list(&ListParams::default()).await.unwrap();
        assert_eq!(list.items.len(), 1, "one Workflow");
        serde_json::to_value(&list.items[0]).unwrap()
    }

    /// Acts as Argo's wait container for the pod of node `node_id`: reports
    /// its output parameters.
    async fn report_outputs(&self, workflow: &str, node_id: &str, outputs: Value) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.admin.clone(), &self.ns, &task_results_api());
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "WorkflowTaskResult",
            "metadata": {"name": node_id, "labels": {
                "workflows.argoproj.io/workflow": workflow,
                "workflows.argoproj.io/report-outputs-completed": "true",
            }},
            "outputs": outputs,
        }))
        .unwrap();
        api.create(&PostParams::default(), &object)
            .await
            .expect("task result");
    }

    async fn done(self) {
        let _ = Api::<Namespace>::all(self.admin.clone())
            .delete(&self.ns, &DeleteParams::background())
            .await;
    }
}

fn token_kubeconfig(admin_path: &str, token: &str, dir: &Path) -> PathBuf {
    let admin: Value =
        serde_yaml::from_str(&std::fs::read_to_string(admin_path).unwrap()).expect("kubeconfig");
    let cluster = admin["clusters"][0].clone();
    let config = json!({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": "taskgate", "user": {"token": token}}],
        "contexts": [{"name": "taskgate", "context": {"cluster": cluster["name"], "user": "taskgate"}}],
        "current-context": "taskgate",
    });
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&config).unwrap()).unwrap();
    path
}

/// A Workflow: step `build` (a pod run by kwok: `annotations` drive it) whose
/// output parameter `report` is the Workflow's output.
fn workflow_yaml(annotations: Value) -> String {
    let mut ann = json!({"taskgate.test/duration": "2s"});
    for (k, v) in annotations.as_object().unwrap() {
        ann[k] = v.clone();
    }
    serde_yaml::to_string(&json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"labels": {"app": "taskgate-e2e"}},
        "spec": {
            "entrypoint": "main",
            "arguments": {"parameters": [{"name": "dataset", "value": "none"}]},
            "templates": [
                {"name": "main",
                 "steps": [[{"name": "build", "template": "build",
                             "arguments": {"parameters": [{"name": "dataset", "value": "{{workflow.parameters.dataset}}"}]}}]],
                 "outputs": {"parameters": [{"name": "report",
                             "valueFrom": {"parameter": "{{steps.build.outputs.parameters.report}}"}}]}},
                {"name": "build",
                 "metadata": {"annotations": ann},
                 "inputs": {"parameters": [{"name": "dataset"}]},
                 "container": {"image": "busybox:fake", "command": ["sh", "-c", "build {{inputs.parameters.dataset}}"]},
                 "outputs": {"parameters": [{"name": "report", "valueFrom": {"path": "/tmp/report"}}]}},
            ],
        },
    }))
    .unwrap()
}

fn tool(name: &str, target: &str) -> String {
    tool_entry(
        name,
        "An Argo Workflow",
        "k8s",
        r#"{ type = "object", properties = { dataset = { type = "string" } } }"#,
        target,
    ) + "\n"
}

/// Waits for the pod of step `build` and reports its outputs as its executor would.
async fn play_executor(c: &Cluster, report: &str) {
    let pods = c.pods();
    let pod = wait_for("the step's pod", LIMIT, || async {
        let list = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .into_iter()
            .next()
            .ok_or_else(|| "no pod".to_owned())
    })
    .await;
    let ann = pod.metadata.annotations.clone().unwrap_or_default();
    let node = ann
        .get("workflows.argoproj.io/node-id")
        .cloned()
        .expect("node-id annotation");
    let workflow =
        pod.metadata.labels.clone().unwrap_or_default()["workflows.argoproj.io/workflow"].clone();
    c.report_outputs(
        &workflow,
        &node,
        json!({"parameters": [{"name": "report", "value": report}]}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_succeeds_with_its_output_parameters_as_the_result() {
    let Some(c) = Cluster::new("ok").await else {
        return;
    };
    let file = c.file("wf.yaml", &workflow_yaml(json!({})));
    let s = c.setup(&tool(
        "build",
        &format!(
            r#"preset = "argo-workflow", template_file = {}"#,
            serde_json::to_string(&file).unwrap()
        ),
    ));
    let server = s.server().await;
    let m = server.client();
    let task = m.start_task("build", json!({"dataset": "sales"})).await;
    let wf = c.workflow().await;
    assert_eq!(
        wf["spec"]["arguments"]["parameters"],
        json!([{"name": "dataset", "value": "sales"}]),
        "{wf}"
    );
    assert_eq!(wf["spec"]["ttlStrategy"]["secondsAfterCompletion"], 3600);
    play_executor(&c, "42 rows").await;
    let done = m.wait_terminal(&task, LIMIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"report": "42 rows"}),
        "{done}"
    );
    // Logs: the step's pod (kwok's canned log).
    let logs = m.call("taskgate_logs", json!({"taskId": task})).await;
    let text = logs.result().to_string();
    assert!(text.contains("taskgate kwok pod log line 1"), "{text}");
    c.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_step_is_named_in_the_tool_error() {
    let Some(c) = Cluster::new("fail").await else {
        return;
    };
    let file = c.file(
        "wf.yaml",
        &workflow_yaml(json!({"taskgate.test/fail": "true", "taskgate.test/exit-code": "3"})),
    );
    let s = c.setup(&tool(
        "build",
        &format!(
            r#"preset = "argo-workflow", template_file = {}"#,
            serde_json::to_string(&file).unwrap()
        ),
    ));
    let server = s.server().await;
    let l = Legacy::connect(&server.url(), "2025-11-25", json!({"tasks": {}})).await;
    let task = l.start_task("build", json!({"dataset": "bad"})).await;
    let result = l.request("tasks/result", json!({"taskId": task})).await;
    let r = result.result();
    assert_eq!(r["isError"], true, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("step `build`"), "{text}");
    assert!(text.contains("exit code 3"), "{text}");
    c.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_reads_cancelled_and_retries_are_idempotent_or_conflict() {
    let Some(c) = Cluster::new("stop").await else {
        return;
    };
    let file = c.file(
        "wf.yaml",
        &workflow_yaml(json!({"taskgate.test/duration": "300s"})),
    );
    let s = c.setup(&tool(
        "build",
        &format!(
            r#"preset = "argo-workflow", template_file = {}"#,
            serde_json::to_string(&file).unwrap()
        ),
    ));
    let server = s.server().await;
    let l = Legacy::connect(
        &server.url(),
        "2025-06-18",
        json!({"experimental": {"taskgate/sep-1391": {}}}),
    )
    .await;
    let token = format!("op-{}", c.ns);
    let first = l
        .call_op("build", json!({"dataset": "d1"}), &token, 3600)
        .await;
    assert_eq!(
        first.result()["operation"]["status"],
        "submitted",
        "{:?}",
        first.body
    );
    let uid = c.workflow().await["metadata"]["uid"].clone();
    let again = l
        .call_op("build", json!({"dataset": "d1"}), &token, 3600)
        .await;
    assert!(again.is_ok(), "{:?}", again.body);
    assert_eq!(c.workflow().await["metadata"]["uid"], uid);
    let other = l
        .call_op("build", json!({"dataset": "d2"}), &token, 3600)
        .await;
    assert_eq!(other.error()["code"], -32602, "{:?}", other.body);
    assert_eq!(c.workflow().await["metadata"]["uid"], uid);

    // A second replica (another server on the same configuration) answers for it.
    let m = server.client();
    let task = m.start_task("build", json!({"dataset": "modern"})).await;
    let pods = c.pods();
    wait_for("two running pods", LIMIT, || async {
        let list = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let running = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == 2 {
            Ok(())
        } else {
            Err(format!("{running} running"))
        }
    })
    .await;
    let replica = s.server().await;
    let m2 = replica.client();
    let seen = m2.get(&task).await;
    assert_eq!(seen["status"], "working", "{seen}");
    let cancelled = m2.cancel_reply(&task).await;
    assert!(cancelled.is_ok(), "{:?}", cancelled.body);
    let after = m.get(&task).await;
    assert_eq!(after["status"], "cancelled", "{after}");
    // Upstream: Argo stops the Workflow (spec.shutdown) and its pod goes.
    wait_for("the stopped Workflow to end", LIMIT, || async {
        let list = c
            .workflows()
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let stopped = list.items.iter().find(|w| {
            let v = serde_json::to_value(w).unwrap();
            v["spec"]["shutdown"] == "Stop"
        });
        match stopped.map(|w| serde_json::to_value(w).unwrap()) {
            Some(v) if v["status"]["phase"] == "Failed" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let after = m.get(&task).await;
    assert_eq!(after["status"], "cancelled", "{after}");
    c.done().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_arguments_never_reach_the_cluster() {
    let Some(c) = Cluster::new("hostile").await else {
        return;
    };
    let file = c.file("wf.yaml", &workflow_yaml(json!({})));
    let file = serde_json::to_string(&file).unwrap();
    let narrow = tool_entry(
        "narrow",
        "An Argo Workflow",
        "k8s",
        r#"{ type = "object", properties = { dataset = { type = "string" }, limit = { type = "integer" } } }"#,
        &format!(
            r#"preset = "argo-workflow", template_file = {file}, arguments = [{{ argument = "dataset", path = "spec.arguments.parameters[dataset]" }}]"#
        ),
    );
    let s = c.setup(
        &(tool(
            "build",
            &format!(r#"preset = "argo-workflow", template_file = {file}"#),
        ) + "\n"
            + &narrow),
    );
    let server = s.server().await;
    let m: Client = server.client();
    for (bad, why) in [
        (
            json!({"dataset": "{{workflow.serviceAccountName}}"}),
            "template syntax",
        ),
        (
            json!({"dataset": "x{{=sprig.env('HOME')}}"}),
            "template syntax",
        ),
        // Not in the schema: the server refuses it.
        (
            json!({"dataset": "ok", "serviceAccountName": "admin"}),
            "undeclared",
        ),
    ] {
        let reply = m.call("build", bad.clone()).await;
        let refused = reply.body.to_string();
        assert!(refused.contains(why), "{bad}: {refused}");
    }
    // In the schema but given no place in the object: the engine refuses it.
    let reply = m.call("narrow", json!({"dataset": "ok", "limit": 5})).await;
    let refused = reply.body.to_string();
    assert!(refused.contains("no declared place"), "{refused}");
    let list = c.workflows().list(&ListParams::default()).await.unwrap();
    assert!(list.items.is_empty(), "nothing reached the cluster");
    c.done().await;
}

/// A Workflow whose step `approve` (a `suspend` template) waits for a person
/// to supply `decision` (an enum) — Argo's intermediate parameters; the
/// Workflow's output is that decision.
fn approval_yaml() -> String {
    serde_yaml::to_string(&json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "spec": {
            "entrypoint": "main",
            "arguments": {"parameters": [{"name": "dataset", "value": "none"}]},
            "templates": [
                {"name": "main",
                 "steps": [[{"name": "approve", "template": "approve"}]],
                 "outputs": {"parameters": [{"name": "decision",
                             "valueFrom": {"parameter": "{{steps.approve.outputs.parameters.decision}}"}}]}},
                {"name": "approve",
                 "suspend": {},
                 "outputs": {"parameters": [{"name": "decision", "enum": ["ship", "hold"],
                             "description": "Ship the release?", "valueFrom": {"supplied": {}}}]}},
            ],
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_step_asks_a_person_and_takes_the_answer_or_fails_on_decline() {
    let Some(c) = Cluster::new("suspend").await else {
        return;
    };
    let file = c.file("wf.yaml", &approval_yaml());
    let s = c.setup(&tool(
        "release",
        &format!(
            r#"preset = "argo-workflow", template_file = {}"#,
            serde_json::to_string(&file).unwrap()
        ),
    ));
    let server = s.server().await;
    let m = server.client();
    let task = m.start_task("release", json!({"dataset": "v1"})).await;
    let asked = m.until_status(&task, "input_required", LIMIT).await;
    let requests = asked["inputRequests"].as_object().expect("requests");
    assert_eq!(requests.len(), 1, "{asked}");
    let (key, request) = requests.iter().next().unwrap();
    let schema = &request["params"]["requestedSchema"];
    assert_eq!(
        schema["properties"]["decision"]["enum"],
        json!(["ship", "hold"]),
        "{asked}"
    );
    assert_eq!(
        schema["properties"]["decision"]["description"],
        "Ship the release?"
    );
    assert!(
        request["params"]["message"]
            .as_str()
            .unwrap()
            .contains("approve"),
        "{asked}"
    );
    // Outside the enum: refused, still waiting.
    let bad = m
        .update(
            &task,
            json!({key.as_str(): {"action": "accept", "content": {"decision": "maybe"}}}),
        )
        .await;
    assert_eq!(bad.error()["code"], -32602, "{:?}", bad.body);
    assert_eq!(m.get(&task).await["status"], "input_required");
    let ok = m
        .update(
            &task,
            json!({key.as_str(): {"action": "accept", "content": {"decision": "ship"}}}),
        )
        .await;
    assert!(ok.is_ok(), "{:?}", ok.body);
    let done = m.until_status(&task, "completed", LIMIT).await;
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"decision": "ship"}),
        "{done}"
    );

    // Declined: the step fails as `argo stop` of the node does, naming it.
    let declined = m.start_task("release", json!({"dataset": "v2"})).await;
    let asked = m.until_status(&declined, "input_required", LIMIT).await;
    let key = asked["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let reply = m
        .update(&declined, json!({key.as_str(): {"action": "decline"}}))
        .await;
    assert!(reply.is_ok(), "{:?}", reply.body);
    let done = m.until_status(&declined, "completed", LIMIT).await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert!(
        done["result"].to_string().contains("step `approve`"),
        "{done}"
    );
    c.done().await;
}

/// Open WATCH requests on Workflows in the apiserver, from its `/metrics`.
async fn workflow_watches(admin: &kube::Client) -> u64 {
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
        &[("resource", "workflows"), ("verb", "WATCH")],
    )
}

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

/// A listened Workflow: a watch on it while the stream is open (the
/// controller's own watches counted in the baseline), none and no engine call
/// once it closes; the completion arrives as a notification with the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listened_workflow_is_watched_and_notified_on_completion() {
    let Some(c) = Cluster::new("listen").await else {
        return;
    };
    let file = c.file(
        "wf.yaml",
        &workflow_yaml(json!({"taskgate.test/duration": "3s"})),
    );
    let s = c.setup(&tool(
        "build",
        &format!(
            r#"preset = "argo-workflow", template_file = {}"#,
            serde_json::to_string(&file).unwrap()
        ),
    ));
    let server = s.server().await;
    let m = server.client();
    let baseline = workflow_watches(&c.admin).await;
    let task = m.start_task("build", json!({"dataset": "listened"})).await;
    let mut stream = listen(&server, "wf", &task).await;
    stream.next(LIMIT).await.expect("ack");
    wait_for("taskgate's watch on the Workflow", LIMIT, || async {
        let n = workflow_watches(&c.admin).await;
        (n > baseline).then_some(()).ok_or_else(|| n.to_string())
    })
    .await;
    play_executor(&c, "pushed").await;
    let done = loop {
        let n = stream
            .next(LIMIT)
            .await
            .expect("notifications until the result");
        assert_eq!(n["method"], "notifications/tasks", "{n}");
        if n["params"]["status"] == "completed" {
            break n;
        }
    };
    assert_eq!(
        done["params"]["result"]["structuredContent"],
        json!({"report": "pushed"}),
        "{done}"
    );
    drop(stream);
    wait_for("no watch of taskgate's left", LIMIT, || async {
        let n = workflow_watches(&c.admin).await;
        (n <= baseline).then_some(()).ok_or_else(|| n.to_string())
    })
    .await;
    let calls = server.engine_calls().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        server.engine_calls().await,
        calls,
        "no engine call while nothing asks"
    );
    c.done().await;
}

fn check_config(s: &Setup) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_taskgate"))
        .args(["check-config", "--config"])
        .arg(&s.config)
        .envs(s.env().iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("run check-config");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// check-config: the access review of every verb the target needs, and a
/// server-side dry run of the rendered Workflow; a kind the Role does not grant,
/// and a Role without `patch` on workflows, are named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_reviews_access_and_dry_runs_the_template() {
    let Some(c) = Cluster::new("check").await else {
        return;
    };
    let file = serde_json::to_string(&c.file("wf.yaml", &workflow_yaml(json!({})))).unwrap();
    let good = c.setup(&tool(
        "build",
        &format!(r#"preset = "argo-workflow", template_file = {file}"#),
    ));
    let (ok, out) = check_config(&good);
    assert!(ok, "{out}");
    assert!(out.contains("dry run"), "{out}");
    assert!(
        c.workflows()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "the dry run created a Workflow"
    );

    let missing = c.setup(&tool(
        "ghost",
        r#"api_version = "example.com/v1", kind = "Ghost", template = "spec: {}", phase = { path = "status.phase" }"#,
    ));
    let (ok, out) = check_config(&missing);
    assert!(!ok, "{out}");
    // The Role grants nothing on it (the review comes first: an API server
    // answers 403 before 404 for a kind it does not serve).
    assert!(
        out.contains("lacks: create, get, list, watch, patch on ghosts.example.com"),
        "{out}"
    );

    // Without patch on workflows: named before any dry run.
    let roles: Api<Role> = Api::namespaced(c.admin.clone(), &c.ns);
    let mut role = roles.get("taskgate-workflows").await.unwrap();
    role.rules.as_mut().unwrap()[0].verbs =
        vec!["create".into(), "get".into(), "list".into(), "watch".into()];
    roles
        .replace("taskgate-workflows", &PostParams::default(), &role)
        .await
        .unwrap();
    let (ok, out) = check_config(&good);
    assert!(!ok, "{out}");
    assert!(out.contains("patch workflows.argoproj.io"), "{out}");
    c.done().await;
}

/// Preset `argo-workflow-template`: the tool names a WorkflowTemplate; the
/// Workflow refers to it (`spec.workflowTemplateRef`) with the arguments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_template_runs_by_reference() {
    let Some(c) = Cluster::new("wftmpl").await else {
        return;
    };
    let mut template: Value = serde_yaml::from_str(&workflow_yaml(json!({}))).unwrap();
    template["kind"] = json!("WorkflowTemplate");
    template["metadata"] = json!({"name": "etl"});
    let api: Api<DynamicObject> = Api::namespaced_with(
        c.admin.clone(),
        &c.ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "WorkflowTemplate"),
            "workflowtemplates",
        ),
    );
    api.create(
        &PostParams::default(),
        &serde_json::from_value(template).unwrap(),
    )
    .await
    .expect("WorkflowTemplate");
    let s = c.setup(&tool(
        "etl",
        r#"preset = "argo-workflow-template", workflow_template = "etl""#,
    ));
    let server = s.server().await;
    let m = server.client();
    let task = m.start_task("etl", json!({"dataset": "orders"})).await;
    let wf = c.workflow().await;
    assert_eq!(wf["spec"]["workflowTemplateRef"]["name"], "etl", "{wf}");
    assert_eq!(
        wf["spec"]["arguments"]["parameters"],
        json!([{"name": "dataset", "value": "orders"}])
    );
    play_executor(&c, "by reference").await;
    let done = m.wait_terminal(&task, LIMIT).await;
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"report": "by reference"}),
        "{done}"
    );
    c.done().await;
}
