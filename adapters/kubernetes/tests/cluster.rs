//! The Kubernetes engine against a real control plane: kube-apiserver, the
//! controller manager (Job and TTL-after-finished controllers), the scheduler and a
//! kwok node (`scripts/k8s/cluster-up.sh`; pods run, fail, carry termination
//! messages and logs as `tests/k8s/stages.yaml` says).
//!
//! The kubeconfig comes from `TASKGATE_KUBECONFIG` (or `KUBECONFIG` when the
//! environment is `cluster.env` of `cluster-up.sh`, which also sets
//! `TASKGATE_K8S_CLUSTER`). Unset: the tests say so and pass, unless
//! `TASKGATE_REQUIRE_E2E=1`.
//!
//! Each test gets its own namespace holding exactly `deploy/rbac.yaml`; the engine
//! under test runs with a token of that ServiceAccount, never as admin: every
//! test proves the Role suffices for what it does.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{json, Value};
use taskgate_engine::{
    Content, Engine, EngineError, InputAction, InputResponse, Pipeline, RunState, Snapshot,
    StartRequest, ToolDecl, ToolOutput, TraceContext,
};

const POLL: Duration = Duration::from_millis(150);
const DEADLINE: Duration = Duration::from_secs(60);

fn kubeconfig() -> Option<String> {
    if std::env::var("TASKGATE_KUBECONFIG").is_err()
        && std::env::var("TASKGATE_K8S_CLUSTER").is_ok()
    {
        if let Ok(path) = std::env::var("KUBECONFIG") {
            return Some(path);
        }
    }
    taskgate_engine::testing::e2e_endpoint("TASKGATE_KUBECONFIG")
}

/// A namespace with `deploy/rbac.yaml` in it, an admin client for checks, and the
/// engine settings that use the ServiceAccount's token.
struct Cluster {
    admin: kube::Client,
    ns: String,
    settings: Value,
    dir: PathBuf,
}

fn repo_file(rel: &str) -> String {
    let path = format!("{}/../../{rel}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml_docs(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

async fn admin_client(path: &str) -> kube::Client {
    taskgate_kubernetes::choose_tls_backend();
    let file = kube::config::Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

async fn until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < DEADLINE {
        match probe().await {
            Ok(v) => return v,
            Err(e) => last = e,
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("timed out after {DEADLINE:?} waiting for {what}; last: {last}");
}

/// Waits until the API server lets ServiceAccount `sa` of `ns` do what each of
/// `rules` (a Role's rules) grants (its first verb on its first resource, asked
/// by SubjectAccessReview); counts in `denied` the refusals seen first. A
/// RoleBinding reaches the RBAC authorizer through the API server's informer
/// cache, a moment after its create returns: a request as the ServiceAccount in
/// between is refused (`cannot create jobs`), so every test that binds a Role
/// waits here before it uses it.
async fn rbac_settled(admin: &kube::Client, ns: &str, sa: &str, rules: &Value, denied: &AtomicU32) {
    let reviews: Api<SubjectAccessReview> = Api::all(admin.clone());
    let asks: Vec<ResourceAttributes> = rules
        .as_array()
        .expect("a Role's rules")
        .iter()
        .map(|rule| {
            let (resource, subresource) =
                match rule["resources"][0].as_str().unwrap().split_once('/') {
                    Some((r, s)) => (r.to_owned(), Some(s.to_owned())),
                    None => (rule["resources"][0].as_str().unwrap().to_owned(), None),
                };
            ResourceAttributes {
                namespace: Some(ns.to_owned()),
                group: Some(rule["apiGroups"][0].as_str().unwrap().to_owned()),
                resource: Some(resource),
                subresource,
                verb: Some(rule["verbs"][0].as_str().unwrap().to_owned()),
                ..ResourceAttributes::default()
            }
        })
        .collect();
    let user = format!("system:serviceaccount:{ns}:{sa}");
    until(&format!("RBAC to let {user} use its Role"), || async {
        for ask in &asks {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.clone()),
                    groups: Some(vec![
                        "system:serviceaccounts".to_owned(),
                        format!("system:serviceaccounts:{ns}"),
                        "system:authenticated".to_owned(),
                    ]),
                    resource_attributes: Some(ask.clone()),
                    ..SubjectAccessReviewSpec::default()
                },
                ..SubjectAccessReview::default()
            };
            let allowed = reviews
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| e.to_string())?
                .status
                .is_some_and(|s| s.allowed);
            if !allowed {
                denied.fetch_add(1, Ordering::SeqCst);
                return Err(format!(
                    "{} {} denied",
                    ask.verb.as_deref().unwrap_or(""),
                    ask.resource.as_deref().unwrap_or("")
                ));
            }
        }
        Ok(())
    })
    .await;
    let n = denied.load(Ordering::SeqCst);
    if n > 0 {
        eprintln!("RBAC for {user}: allowed after {n} denied review(s)");
    }
}

impl Cluster {
    async fn new(test: &str) -> Option<Self> {
        let path = kubeconfig()?;
        let admin = admin_client(&path).await;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let ns = format!("tg-e2e-{test}-{}-{}", std::process::id(), nanos % 100_000);
        let namespaces: Api<Namespace> = Api::all(admin.clone());
        // Namespaces left behind by failed runs (a panicking test skips `done`).
        let stale = namespaces
            .list(&ListParams::default().labels("taskgate.io/e2e=true"))
            .await
            .unwrap();
        for old in stale.items {
            let age = old.metadata.creation_timestamp.map(|t| {
                std::time::SystemTime::now()
                    .duration_since(std::time::SystemTime::from(t.0))
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
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.clone()),
                labels: Some([("taskgate.io/e2e".to_owned(), "true".to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
        // The ServiceAccount admission refuses pods until `default` exists.
        let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), &ns);
        until("the default service account", || async {
            match sas.get_opt("default").await {
                Ok(Some(_)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        Self::apply_rbac(&admin, &ns, "taskgate", None).await;
        let token = Self::token(&admin, &ns, "taskgate").await;
        let dir = std::env::temp_dir().join(format!("taskgate-{ns}"));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = Self::token_kubeconfig(&path, &token, &dir, "kubeconfig");
        Some(Self {
            admin,
            settings: json!({"kubeconfig": kubeconfig, "namespace": ns}),
            ns,
            dir,
        })
    }

    /// Creates the objects of `deploy/rbac.yaml` in `ns` (named `name`), the Role's
    /// rules optionally edited.
    async fn apply_rbac(
        admin: &kube::Client,
        ns: &str,
        name: &str,
        edit_rules: Option<&dyn Fn(&mut Value)>,
    ) {
        let pp = PostParams::default();
        let mut rules = Value::Null;
        for mut doc in yaml_docs(&repo_file("deploy/rbac.yaml")) {
            doc["metadata"]["namespace"] = json!(ns);
            doc["metadata"]["name"] = json!(name);
            match doc["kind"].as_str().unwrap() {
                "ServiceAccount" => {
                    let sa: ServiceAccount = serde_json::from_value(doc).unwrap();
                    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
                        .create(&pp, &sa)
                        .await
                        .unwrap();
                }
                "Role" => {
                    if let Some(edit) = edit_rules {
                        edit(&mut doc["rules"]);
                    }
                    rules = doc["rules"].clone();
                    let role: Role = serde_json::from_value(doc).unwrap();
                    Api::<Role>::namespaced(admin.clone(), ns)
                        .create(&pp, &role)
                        .await
                        .unwrap();
                }
                "RoleBinding" => {
                    doc["roleRef"]["name"] = json!(name);
                    for subject in doc["subjects"].as_array_mut().unwrap() {
                        subject["namespace"] = json!(ns);
                        subject["name"] = json!(name);
                    }
                    let binding: RoleBinding = serde_json::from_value(doc).unwrap();
                    Api::<RoleBinding>::namespaced(admin.clone(), ns)
                        .create(&pp, &binding)
                        .await
                        .unwrap();
                }
                other => panic!("unexpected kind {other} in deploy/rbac.yaml"),
            }
        }
        rbac_settled(admin, ns, name, &rules, &AtomicU32::new(0)).await;
    }

    /// A token of ServiceAccount `sa` (TokenRequest API, one hour).
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
            .unwrap()
            .status
            .unwrap()
            .token
            .unwrap()
    }

    /// A kubeconfig with the admin kubeconfig's cluster and `token` as the user.
    fn token_kubeconfig(
        admin_path: &str,
        token: &str,
        dir: &std::path::Path,
        file: &str,
    ) -> String {
        let admin: Value =
            serde_yaml::from_str(&std::fs::read_to_string(admin_path).unwrap()).unwrap();
        let cluster = admin["clusters"][0].clone();
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [{"name": "taskgate", "user": {"token": token}}],
            "contexts": [{"name": "taskgate", "context": {"cluster": cluster["name"], "user": "taskgate"}}],
            "current-context": "taskgate",
        });
        let path = dir.join(file);
        std::fs::write(&path, serde_yaml::to_string(&config).unwrap()).unwrap();
        path.to_str().unwrap().to_owned()
    }

    async fn engine(&self) -> Arc<dyn Engine> {
        taskgate_kubernetes::build(self.settings.clone())
            .await
            .unwrap()
    }

    async fn pipeline(
        &self,
        name: &str,
        target: Value,
        keep_alive: Option<Duration>,
    ) -> Arc<dyn Pipeline> {
        self.engine()
            .await
            .bind(&ToolDecl {
                input_schema: serde_json::json!({"type": "object"}),
                name: name.into(),
                target,
                keep_alive,
            })
            .unwrap()
    }

    fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    async fn done(self) {
        let _ = Api::<Namespace>::all(self.admin.clone())
            .delete(&self.ns, &DeleteParams::background())
            .await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Job template whose pod runs for `duration` under kwok; `annotations` are
/// extra pod annotations (see `tests/k8s/stages.yaml`), `spec` extra Job spec.
fn template(spec: Value, annotations: Value) -> Value {
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
    // As a YAML string, the way a config file holds it.
    Value::String(serde_yaml::to_string(&job).unwrap())
}

fn request(run_name: &str, arguments: Value) -> StartRequest {
    StartRequest {
        run_name: run_name.into(),
        arguments,
        caller_tag: "00c0ffee00c0ffee".into(),
        keep_alive: None,
        trace: None,
    }
}

async fn wait_for_state<F>(pipeline: &dyn Pipeline, run: &String, what: &str, pred: F) -> Snapshot
where
    F: Fn(&RunState) -> bool,
{
    until(what, || async {
        match pipeline.read(run).await {
            Ok(s) if pred(&s.state) => Ok(s),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

async fn completed(pipeline: &dyn Pipeline, run: &String) -> ToolOutput {
    match wait_for_state(pipeline, run, "a result", RunState::is_terminal)
        .await
        .state
    {
        RunState::Completed(output) => output,
        other => panic!("not completed: {other:?}"),
    }
}

async fn not_found(pipeline: &dyn Pipeline, run: &String, what: &str) {
    until(what, || async {
        match pipeline.read(run).await {
            Err(EngineError::NotFound) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

fn texts(output: &ToolOutput) -> Vec<String> {
    output
        .content
        .iter()
        .map(|c| match c {
            Content::Text(t) => t.clone(),
            Content::Link { uri, .. } => uri.clone(),
        })
        .collect()
}

fn working_message(state: &RunState) -> Option<&str> {
    match state {
        RunState::Working { message, .. } => message.as_deref(),
        _ => None,
    }
}

#[tokio::test]
async fn a_successful_job_returns_its_termination_message_and_log() {
    let Some(c) = Cluster::new("ok").await else {
        return;
    };
    let target = json!({
        "template": template(json!({}), json!({"taskgate.test/termination-message": "{\"rows\": 42}"})),
        "args_env_prefix": "ARG_",
    });
    let p = c
        .pipeline("analyze", target, Some(Duration::from_secs(600)))
        .await;
    let t0 = Instant::now();
    let req = request("tg-ok-1", json!({"dataset": "sales", "limit": 5}));
    let run = p.start(req.clone()).await.unwrap();
    assert_eq!(run, "tg-ok-1");
    // A read right after start finds it.
    let first = p.read(&run).await.unwrap();
    assert!(!first.state.is_terminal(), "{first:?}");
    assert!(first.created_at.is_some());
    // The Job as created: labels, annotation, TTL, arguments in the container's env.
    let job = c.jobs().get(&run).await.unwrap();
    let labels = job.metadata.labels.clone().unwrap();
    assert_eq!(labels["taskgate.io/tool"], "analyze");
    assert_eq!(labels["taskgate.io/caller"], "00c0ffee00c0ffee");
    assert_eq!(labels["taskgate.io/run"], "tg-ok-1");
    assert_eq!(labels["app"], "taskgate-e2e");
    assert_eq!(
        job.metadata.annotations.as_ref().unwrap()["taskgate.io/spec-hash"].len(),
        16
    );
    let spec = job.spec.clone().unwrap();
    assert_eq!(spec.ttl_seconds_after_finished, Some(600));
    let env = spec.template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    let env: Vec<_> = env
        .into_iter()
        .map(|e| (e.name, e.value.unwrap()))
        .collect();
    assert!(
        env.contains(&("ARG_DATASET".into(), "sales".into())),
        "{env:?}"
    );
    assert!(env.contains(&("ARG_LIMIT".into(), "5".into())), "{env:?}");
    // A retried start with the same name and arguments is the same task.
    assert_eq!(p.start(req).await.unwrap(), run);
    assert_eq!(p.locate("tg-ok-1").await.unwrap(), Some(run.clone()));
    assert_eq!(p.locate("tg-ok-nope").await.unwrap(), None);
    let output = completed(p.as_ref(), &run).await;
    eprintln!("success result after {:?}", t0.elapsed());
    assert!(!output.is_error, "{output:?}");
    assert_eq!(output.structured, Some(json!({"rows": 42})));
    let t = texts(&output);
    assert_eq!(t[0], r#"{"rows": 42}"#);
    assert!(t[1].contains("taskgate kwok pod log line 1"), "{}", t[1]);
    assert!(t[1].contains("log line 3 (stderr)"), "{}", t[1]);
    let snap = p.read(&run).await.unwrap();
    assert!(snap.ended_at.is_some() && snap.ended_at >= snap.created_at);
    // Another tool's pipeline does not see this tool's Job.
    let other = c
        .pipeline(
            "other",
            json!({"template": template(json!({}), json!({}))}),
            None,
        )
        .await;
    assert!(matches!(other.read(&run).await, Err(EngineError::NotFound)));
    c.done().await;
}

#[tokio::test]
async fn a_failed_job_is_a_tool_error_with_its_reason_and_log() {
    let Some(c) = Cluster::new("fail").await else {
        return;
    };
    let annotations = json!({
        "taskgate.test/fail": "true",
        "taskgate.test/exit-code": "3",
        "taskgate.test/termination-message": "kaboom: disk on fire",
    });
    let p = c
        .pipeline(
            "boom",
            json!({"template": template(json!({}), annotations)}),
            None,
        )
        .await;
    let run = p.start(request("tg-fail-1", json!({}))).await.unwrap();
    let output = completed(p.as_ref(), &run).await;
    assert!(output.is_error, "{output:?}");
    let t = texts(&output);
    assert!(
        t[0].starts_with("Job tg-fail-1 failed: BackoffLimitExceeded"),
        "{}",
        t[0]
    );
    assert!(
        t[0].contains("exited with code 3 (Error): kaboom: disk on fire"),
        "{}",
        t[0]
    );
    assert!(t[1].contains("taskgate kwok pod log line 2"), "{}", t[1]);
    // A cancel of a finished run is a conflict; the run stays readable.
    assert!(matches!(
        p.cancel(&run).await,
        Err(EngineError::Conflict { .. })
    ));
    assert!(p.read(&run).await.unwrap().state.is_terminal());

    // Past its activeDeadlineSeconds: DeadlineExceeded.
    let late = c
        .pipeline(
            "late",
            json!({"template": template(json!({"activeDeadlineSeconds": 2}), json!({"taskgate.test/duration": "120s"}))}),
            None,
        )
        .await;
    let run = late.start(request("tg-fail-2", json!({}))).await.unwrap();
    let output = completed(late.as_ref(), &run).await;
    assert!(output.is_error);
    assert!(
        texts(&output)[0].contains("failed: DeadlineExceeded"),
        "{output:?}"
    );
    c.done().await;
}

#[tokio::test]
async fn parallel_completions_report_progress_through_the_watch() {
    let Some(c) = Cluster::new("par").await else {
        return;
    };
    let p = c
        .pipeline(
            "par",
            json!({"template": template(json!({"completions": 4, "parallelism": 2}), json!({"taskgate.test/duration": "2s"}))}),
            None,
        )
        .await;
    let run = p.start(request("tg-par-1", json!({}))).await.unwrap();
    let mut last = p.read(&run).await.unwrap();
    let mut seen = vec![working_message(&last.state).unwrap_or_default().to_owned()];
    let mut progress = Vec::new();
    let start = Instant::now();
    let mut quick_returns = 0;
    while !last.state.is_terminal() {
        assert!(start.elapsed() < DEADLINE, "no result; seen {seen:?}");
        let asked = Instant::now();
        let next = p
            .wait_for_change(&run, &last, Duration::from_secs(20))
            .await
            .unwrap();
        if next.state != last.state && asked.elapsed() < Duration::from_secs(10) {
            quick_returns += 1;
        }
        if let RunState::Working {
            message,
            progress: Some(pr),
        } = &next.state
        {
            seen.push(message.clone().unwrap_or_default());
            progress.push(pr.done);
        }
        last = next;
    }
    eprintln!(
        "parallel job states seen through the watch in {:?}: {seen:?}",
        start.elapsed()
    );
    assert!(seen.iter().any(|m| m.ends_with(" 2 active")), "{seen:?}");
    assert!(
        seen.iter().any(|m| m.starts_with("2/4 completions")),
        "{seen:?}"
    );
    assert!(progress.windows(2).all(|w| w[0] <= w[1]), "{progress:?}");
    assert!(
        quick_returns >= 2,
        "the watch should return on a change, not at the end of the wait"
    );
    let RunState::Completed(output) = last.state else {
        panic!()
    };
    assert!(!output.is_error);
    // A wait on a finished run returns at once.
    let asked = Instant::now();
    let again = p
        .wait_for_change(&run, &p.read(&run).await.unwrap(), Duration::from_secs(20))
        .await
        .unwrap();
    assert!(again.state.is_terminal() && asked.elapsed() < Duration::from_secs(5));
    // A wait with nothing to change ends with the wait.
    let parked = c
        .pipeline(
            "parked",
            json!({"template": template(json!({"suspend": true}), json!({}))}),
            None,
        )
        .await;
    let run = parked.start(request("tg-par-2", json!({}))).await.unwrap();
    let snap = wait_for_state(parked.as_ref(), &run, "suspended", |s| {
        working_message(s).is_some_and(|m| m.starts_with("suspended"))
    })
    .await;
    let asked = Instant::now();
    let same = parked
        .wait_for_change(&run, &snap, Duration::from_secs(2))
        .await
        .unwrap();
    let waited = asked.elapsed();
    assert_eq!(same.state, snap.state);
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    c.done().await;
}

/// The default cancel (`stop`) deletes the pods and ends the Job through its
/// deadline; the Job stays marked and reads cancelled until its TTL. A Job
/// waiting for approval ends the same way without ever making a pod.
#[tokio::test]
async fn cancel_stops_the_pods_and_leaves_the_job_marked() {
    let Some(c) = Cluster::new("cancel").await else {
        return;
    };
    let p = c
        .pipeline(
            "long",
            json!({"template": template(json!({}), json!({"taskgate.test/duration": "300s"}))}),
            Some(Duration::from_secs(600)),
        )
        .await;
    let run = p.start(request("tg-cancel-1", json!({}))).await.unwrap();
    let job = c.jobs().get(&run).await.unwrap();
    let uid = job.metadata.uid.unwrap();
    wait_for_state(p.as_ref(), &run, "an active pod", |s| {
        working_message(s).is_some_and(|m| m.contains("1 active"))
    })
    .await;
    p.cancel(&run).await.unwrap();
    let snap = p.read(&run).await.unwrap();
    assert!(matches!(snap.state, RunState::Cancelled { .. }), "{snap:?}");
    let pods = c.pods();
    until("the Job's pods to be gone", || async {
        let lp = ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={uid}"));
        match pods.list(&lp).await {
            Ok(list) if list.items.is_empty() => Ok(()),
            other => Err(format!("{:?}", other.map(|l| l.items.len()))),
        }
    })
    .await;
    let jobs = c.jobs();
    until("the Job to end through its deadline", || async {
        let job = jobs.get(&run).await.map_err(|e| e.to_string())?;
        let ended = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Failed" && c.reason.as_deref() == Some("DeadlineExceeded"))
            });
        if ended {
            Ok(job)
        } else {
            Err(format!("{:?}", job.status))
        }
    })
    .await;
    let job = jobs.get(&run).await.unwrap();
    assert_eq!(job.spec.unwrap().ttl_seconds_after_finished, Some(600));
    let snap = p.read(&run).await.unwrap();
    assert!(matches!(snap.state, RunState::Cancelled { .. }), "{snap:?}");
    // Cancelling again leaves it as it is; it still reads cancelled.
    p.cancel(&run).await.unwrap();
    let snap = p.read(&run).await.unwrap();
    assert!(matches!(snap.state, RunState::Cancelled { .. }), "{snap:?}");

    // Waiting for approval: ended without a pod.
    let gated = c
        .pipeline(
            "gated",
            json!({"template": template(json!({}), json!({"taskgate.test/duration": "300s"})), "approval": {"message": "Go?"}}),
            Some(Duration::from_secs(600)),
        )
        .await;
    let run = gated
        .start(request("tg-cancel-2", json!({})))
        .await
        .unwrap();
    let snap = gated.read(&run).await.unwrap();
    assert!(
        matches!(snap.state, RunState::InputRequired { .. }),
        "{snap:?}"
    );
    gated.cancel(&run).await.unwrap();
    until("the gated Job to end", || async {
        let job = jobs.get(&run).await.map_err(|e| e.to_string())?;
        let status = job.status.clone().unwrap_or_default();
        if status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Failed")
        {
            Ok(())
        } else {
            Err(format!("{:?}", job.status))
        }
    })
    .await;
    let uid = jobs.get(&run).await.unwrap().metadata.uid.unwrap();
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={uid}"));
    assert!(pods.list(&lp).await.unwrap().items.is_empty());
    let snap = gated.read(&run).await.unwrap();
    assert!(matches!(snap.state, RunState::Cancelled { .. }), "{snap:?}");
    c.done().await;
}

#[tokio::test]
async fn cancel_can_suspend_the_job_instead() {
    let Some(c) = Cluster::new("suspend").await else {
        return;
    };
    let p = c
        .pipeline(
            "long",
            json!({"template": template(json!({}), json!({"taskgate.test/duration": "300s"})), "cancel": "suspend"}),
            None,
        )
        .await;
    let run = p.start(request("tg-susp-1", json!({}))).await.unwrap();
    wait_for_state(p.as_ref(), &run, "an active pod", |s| {
        working_message(s).is_some_and(|m| m.contains("1 active"))
    })
    .await;
    p.cancel(&run).await.unwrap();
    let snap = p.read(&run).await.unwrap();
    assert!(matches!(snap.state, RunState::Cancelled { .. }), "{snap:?}");
    let jobs = c.jobs();
    until("the Job controller to stop the pod", || async {
        let job = jobs.get(&run).await.map_err(|e| e.to_string())?;
        let status = job.status.unwrap_or_default();
        let suspended = status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Suspended" && c.status == "True");
        if suspended && status.active.unwrap_or(0) == 0 {
            Ok(())
        } else {
            Err(format!("suspended={suspended} active={:?}", status.active))
        }
    })
    .await;
    assert!(matches!(
        p.read(&run).await.unwrap().state,
        RunState::Cancelled { .. }
    ));
    c.done().await;
}

#[tokio::test]
async fn an_approval_gate_resumes_on_accept() {
    let Some(c) = Cluster::new("accept").await else {
        return;
    };
    let target = json!({
        "template": template(json!({}), json!({"taskgate.test/termination-message": "migrated"})),
        "approval": {"message": "Run the migration?", "schema": {"type": "object", "properties": {"note": {"type": "string"}}}},
    });
    let p = c.pipeline("migrate", target, None).await;
    assert!(p.capabilities().input);
    let run = p
        .start(request("tg-accept-1", json!({"version": "2"})))
        .await
        .unwrap();
    let snap = p.read(&run).await.unwrap();
    let RunState::InputRequired { requests, .. } = &snap.state else {
        panic!("{snap:?}")
    };
    assert_eq!(requests["approval"].message, "Run the migration?");
    assert_eq!(
        requests["approval"].requested_schema["properties"]["note"]["type"],
        "string"
    );
    // No pod runs while it waits.
    let lp = ListParams::default().labels(&format!("job-name={run}"));
    assert!(c.pods().list(&lp).await.unwrap().items.is_empty());
    // Another key is not outstanding.
    let yes = InputResponse {
        action: InputAction::Accept,
        content: Some(json!({"note": "go ahead"})),
    };
    assert!(matches!(
        p.answer(&run, "other", &yes).await,
        Err(EngineError::Conflict { .. })
    ));
    p.answer(&run, "approval", &yes).await.unwrap();
    // Answered: no longer outstanding.
    assert!(matches!(
        p.answer(&run, "approval", &yes).await,
        Err(EngineError::Conflict { .. })
    ));
    let output = completed(p.as_ref(), &run).await;
    assert!(!output.is_error);
    assert_eq!(texts(&output)[0], "migrated");
    // The answer reached the pod (downward API can read it).
    let pods = c.pods().list(&lp).await.unwrap().items;
    let ann = pods[0].metadata.annotations.clone().unwrap();
    assert_eq!(ann["taskgate.io/approval-answer"], r#"{"note":"go ahead"}"#);
    c.done().await;
}

#[tokio::test]
async fn an_approval_gate_deletes_the_job_on_decline() {
    let Some(c) = Cluster::new("decline").await else {
        return;
    };
    let target =
        json!({"template": template(json!({}), json!({})), "approval": {"message": "Go?"}});
    let p = c.pipeline("migrate", target, None).await;
    let run = p.start(request("tg-decline-1", json!({}))).await.unwrap();
    wait_for_state(p.as_ref(), &run, "input required", |s| {
        matches!(s, RunState::InputRequired { .. })
    })
    .await;
    let no = InputResponse {
        action: InputAction::Decline,
        content: None,
    };
    p.answer(&run, "approval", &no).await.unwrap();
    not_found(p.as_ref(), &run, "the declined Job to be gone").await;
    assert!(matches!(
        p.answer(&run, "approval", &no).await,
        Err(EngineError::NotFound)
    ));
    c.done().await;
}

#[tokio::test]
async fn keep_alive_becomes_the_ttl_and_an_expired_job_is_not_found() {
    let Some(c) = Cluster::new("ttl").await else {
        return;
    };
    let p = c
        .pipeline(
            "short",
            json!({"template": template(json!({}), json!({"taskgate.test/duration": "500ms"}))}),
            Some(Duration::from_secs(600)),
        )
        .await;
    // The request's keep_alive wins over the tool's.
    let mut req = request("tg-ttl-1", json!({}));
    req.keep_alive = Some(Duration::from_secs(3));
    let run = p.start(req).await.unwrap();
    let job = c.jobs().get(&run).await.unwrap();
    assert_eq!(job.spec.unwrap().ttl_seconds_after_finished, Some(3));
    completed(p.as_ref(), &run).await;
    let t0 = Instant::now();
    not_found(p.as_ref(), &run, "the TTL controller to delete the Job").await;
    eprintln!(
        "ttlSecondsAfterFinished=3: not found {:?} after the result",
        t0.elapsed()
    );
    c.done().await;
}

#[tokio::test]
async fn a_retry_with_other_arguments_conflicts() {
    let Some(c) = Cluster::new("conflict").await else {
        return;
    };
    let p = c
        .pipeline(
            "t",
            json!({"template": template(json!({}), json!({"taskgate.test/duration": "30s"}))}),
            None,
        )
        .await;
    let run = p
        .start(request("tg-conflict-1", json!({"a": 1, "b": [1, 2]})))
        .await
        .unwrap();
    // The same arguments in another key order: the same task.
    let same: Value = serde_json::from_str(r#"{"b": [1, 2], "a": 1}"#).unwrap();
    assert_eq!(p.start(request("tg-conflict-1", same)).await.unwrap(), run);
    match p.start(request("tg-conflict-1", json!({"a": 2}))).await {
        Err(EngineError::Conflict { message }) => {
            assert!(message.contains("tg-conflict-1"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // The same name started by another tool conflicts too.
    let other = c
        .pipeline(
            "u",
            json!({"template": template(json!({}), json!({"taskgate.test/duration": "30s"}))}),
            None,
        )
        .await;
    assert!(matches!(
        other
            .start(request("tg-conflict-1", json!({"a": 1, "b": [1, 2]})))
            .await,
        Err(EngineError::Conflict { .. })
    ));
    p.cancel(&run).await.unwrap();
    c.done().await;
}

/// The trace context reaches the Job (annotation) and its pod's containers
/// (`TRACEPARENT`, `TRACESTATE`), and a retried start under another trace
/// finds the same Job instead of a conflict.
#[tokio::test]
async fn the_trace_context_reaches_the_pod_and_a_retry_under_another_trace_finds_the_job() {
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let Some(c) = Cluster::new("trace").await else {
        return;
    };
    let p = c
        .pipeline(
            "t",
            json!({"template": template(json!({}), json!({"taskgate.test/duration": "30s"}))}),
            None,
        )
        .await;
    let mut first = request("tg-trace-1", json!({"a": 1}));
    first.trace = Some(TraceContext::new(TP, Some("vendor=abc")).unwrap());
    let run = p.start(first).await.unwrap();
    let job = c.jobs().get(&run).await.unwrap();
    let annotations = job.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("taskgate.io/traceparent")
            .map(String::as_str),
        Some(TP)
    );
    assert_eq!(
        annotations
            .get("taskgate.io/tracestate")
            .map(String::as_str),
        Some("vendor=abc")
    );
    // The pod the Job controller made from the template carries it.
    let pods: Api<Pod> = Api::namespaced(c.admin.clone(), &c.ns);
    let env = until("the Job's pod", || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("job-name={run}")))
            .await
            .map_err(|e| e.to_string())?;
        let pod = list.items.into_iter().next().ok_or("no pod yet")?;
        Ok(pod.spec.unwrap().containers[0]
            .env
            .clone()
            .unwrap_or_default())
    })
    .await;
    let value = |name: &str| {
        env.iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    };
    assert_eq!(value("TRACEPARENT").as_deref(), Some(TP));
    assert_eq!(value("TRACESTATE").as_deref(), Some("vendor=abc"));
    // A retry under another trace, or none, is the same start.
    let mut again = request("tg-trace-1", json!({"a": 1}));
    again.trace = Some(
        TraceContext::new(
            "00-11111111111111111111111111111111-2222222222222222-01",
            None,
        )
        .unwrap(),
    );
    assert_eq!(p.start(again).await.unwrap(), run);
    assert_eq!(
        p.start(request("tg-trace-1", json!({"a": 1})))
            .await
            .unwrap(),
        run
    );
    p.cancel(&run).await.unwrap();
    c.done().await;
}

/// An Argo Workflow (preset `argo-workflow`, `trace_parameter`) on the real Argo
/// controller (`scripts/argo/up.sh`, `TASKGATE_ARGO_ENV`): the object carries
/// the trace annotations and the parameter, and the controller substitutes
/// `{{workflow.parameters.traceparent}}` into the pod it makes.
#[tokio::test]
async fn an_argo_workflow_gets_the_trace_parameter_and_annotations() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    if taskgate_engine::testing::e2e_endpoint("TASKGATE_ARGO_ENV").is_none() {
        return;
    }
    let Some(c) = Cluster::new("argo-trace").await else {
        return;
    };
    // What a workflow tool needs besides deploy/rbac.yaml.
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "taskgate-workflows"},
        "rules": [{"apiGroups": ["argoproj.io"], "resources": ["workflows"],
                   "verbs": ["create", "get", "list", "watch", "patch"]}],
    }))
    .unwrap();
    Api::<Role>::namespaced(c.admin.clone(), &c.ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "taskgate-workflows"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "taskgate-workflows"},
        "subjects": [{"kind": "ServiceAccount", "name": "taskgate", "namespace": c.ns}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(c.admin.clone(), &c.ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let rules = serde_json::to_value(&role.rules).unwrap();
    rbac_settled(&c.admin, &c.ns, "taskgate", &rules, &AtomicU32::new(0)).await;
    let workflow = serde_yaml::to_string(&json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "spec": {
            "entrypoint": "main",
            "templates": [{
                "name": "main",
                "metadata": {"annotations": {"taskgate.test/duration": "30s"}},
                "container": {"image": "busybox:fake",
                              "command": ["sh", "-c", "run"],
                              "env": [{"name": "TRACEPARENT", "value": "{{workflow.parameters.traceparent}}"}]},
            }],
        },
    }))
    .unwrap();
    let p = c
        .pipeline(
            "wf",
            json!({"preset": "argo-workflow", "template": workflow, "trace_parameter": "traceparent"}),
            None,
        )
        .await;
    let mut first = request("tg-argo-trace", json!({}));
    first.trace = Some(TraceContext::new(TP, Some("vendor=abc")).unwrap());
    let run = p.start(first).await.unwrap();
    // A retry under another trace is the same Workflow.
    let mut again = request("tg-argo-trace", json!({}));
    again.trace = Some(
        TraceContext::new(
            "00-11111111111111111111111111111111-2222222222222222-01",
            None,
        )
        .unwrap(),
    );
    assert_eq!(p.start(again).await.unwrap(), run);
    let api = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Workflow"),
        "workflows",
    );
    let workflows: Api<DynamicObject> = Api::namespaced_with(c.admin.clone(), &c.ns, &api);
    let object = serde_json::to_value(workflows.get(&run).await.unwrap()).unwrap();
    assert_eq!(
        object["metadata"]["annotations"]["taskgate.io/traceparent"],
        TP
    );
    assert_eq!(
        object["metadata"]["annotations"]["taskgate.io/tracestate"],
        "vendor=abc"
    );
    assert_eq!(
        object["spec"]["arguments"]["parameters"],
        json!([{"name": "traceparent", "value": TP}])
    );
    let pods: Api<Pod> = Api::namespaced(c.admin.clone(), &c.ns);
    let env = until("the workflow's pod", || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("workflows.argoproj.io/workflow={run}")))
            .await
            .map_err(|e| e.to_string())?;
        let pod = list.items.into_iter().next().ok_or("no pod yet")?;
        let main = pod
            .spec
            .unwrap()
            .containers
            .into_iter()
            .find(|c| c.name == "main")
            .ok_or("no main container")?;
        Ok(main.env.unwrap_or_default())
    })
    .await;
    assert!(
        env.iter()
            .any(|e| e.name == "TRACEPARENT" && e.value.as_deref() == Some(TP)),
        "{env:?}"
    );
    p.cancel(&run).await.unwrap();
    c.done().await;
}

#[tokio::test]
async fn check_runs_a_server_side_dry_run_of_the_template() {
    let Some(c) = Cluster::new("check").await else {
        return;
    };
    let good = c
        .pipeline(
            "good",
            json!({"template": template(json!({}), json!({}))}),
            Some(Duration::from_secs(60)),
        )
        .await;
    let findings = good.check().await.unwrap();
    assert!(findings[0].contains("dry run"), "{findings:?}");
    // Nothing was created by the dry run.
    assert!(c
        .jobs()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
    // Parses as a Job, but the API server refuses it: Jobs need restartPolicy
    // Never or OnFailure.
    let mut bad: Value =
        serde_yaml::from_str(template(json!({}), json!({})).as_str().unwrap()).unwrap();
    bad["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
    let p = c
        .pipeline(
            "bad",
            json!({"template": serde_yaml::to_string(&bad).unwrap()}),
            None,
        )
        .await;
    match p.check().await {
        Err(EngineError::InvalidInput { message }) => {
            assert!(message.contains("restartPolicy"), "{message}");
            assert!(message.contains("\"Never\""), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // The sidecar example's Job templates pass too.
    let example = yaml_docs(&repo_file("deploy/sidecar.yaml"));
    let config_map: ConfigMap = serde_json::from_value(example[0].clone()).unwrap();
    let data = config_map.data.unwrap();
    for (file, container) in [("report.yaml", "report"), ("migrate.yaml", "migrate")] {
        let p = c
            .pipeline("example", json!({"template": data[file], "container": container, "approval": {"message": "ok?"}}), None)
            .await;
        p.check().await.unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    c.done().await;
}

#[tokio::test]
async fn a_new_engine_reads_the_same_reference_to_its_result() {
    let Some(c) = Cluster::new("restart").await else {
        return;
    };
    let target = json!({"template": template(json!({}), json!({"taskgate.test/duration": "2s", "taskgate.test/termination-message": "done"}))});
    let run = {
        let first = c.pipeline("job", target.clone(), None).await;
        let run = first
            .start(request("tg-restart-1", json!({})))
            .await
            .unwrap();
        assert!(!first.read(&run).await.unwrap().state.is_terminal());
        run
        // The first engine and its client are dropped here.
    };
    let second = c.pipeline("job", target, None).await;
    let snap = second.read(&run).await.unwrap();
    assert!(!snap.state.is_terminal(), "{snap:?}");
    let output = completed(second.as_ref(), &run).await;
    assert_eq!(texts(&output)[0], "done");
    c.done().await;
}

#[tokio::test]
async fn the_minimal_role_suffices_and_less_is_named() {
    let Some(c) = Cluster::new("rbac").await else {
        return;
    };
    // The Role of deploy/rbac.yaml passes the probe.
    let findings = c.engine().await.probe().await.unwrap();
    assert!(findings[0].contains("get pods/log"), "{findings:?}");
    // Outside its namespace, the same token is refused; the error names verb and
    // resource.
    let mut elsewhere = c.settings.clone();
    elsewhere["namespace"] = json!("default");
    let engine = taskgate_kubernetes::build(elsewhere).await.unwrap();
    let p = engine
        .bind(&ToolDecl {
            input_schema: serde_json::json!({"type": "object"}),
            name: "t".into(),
            target: json!({"template": template(json!({}), json!({}))}),
            keep_alive: None,
        })
        .unwrap();
    match p.start(request("tg-rbac-1", json!({}))).await {
        Err(EngineError::PermissionDenied { action, message }) => {
            assert_eq!(action, "create jobs.batch in namespace default");
            assert!(message.contains("forbidden"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    match p.read(&"tg-rbac-1".to_owned()).await {
        Err(EngineError::PermissionDenied { action, .. }) => {
            assert_eq!(action, "get jobs.batch in namespace default")
        }
        other => panic!("{other:?}"),
    }
    match engine.probe().await {
        Err(EngineError::PermissionDenied { action, .. }) => {
            assert_eq!(action, "create jobs.batch in namespace default")
        }
        other => panic!("{other:?}"),
    }
    // A Role without pods/log: the probe names what is missing, and a result still
    // comes, saying why its log is absent.
    let no_log = |rules: &mut Value| {
        rules
            .as_array_mut()
            .unwrap()
            .retain(|r| r["resources"][0] != "pods/log");
    };
    Cluster::apply_rbac(&c.admin, &c.ns, "nolog", Some(&no_log)).await;
    let token = Cluster::token(&c.admin, &c.ns, "nolog").await;
    let kubeconfig = Cluster::token_kubeconfig(&kubeconfig().unwrap(), &token, &c.dir, "nolog");
    let engine = taskgate_kubernetes::build(json!({"kubeconfig": kubeconfig, "namespace": c.ns}))
        .await
        .unwrap();
    match engine.probe().await {
        Err(EngineError::PermissionDenied { action, message }) => {
            assert_eq!(action, format!("get pods/log in namespace {}", c.ns));
            assert!(message.contains("deploy/rbac.yaml"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let p = engine
        .bind(&ToolDecl {
            input_schema: serde_json::json!({"type": "object"}),
            name: "t".into(),
            target: json!({"template": template(json!({}), json!({"taskgate.test/termination-message": "fine"}))}),
            keep_alive: None,
        })
        .unwrap();
    let run = p.start(request("tg-rbac-2", json!({}))).await.unwrap();
    let output = completed(p.as_ref(), &run).await;
    let t = texts(&output);
    assert_eq!(t[0], "fine");
    assert!(t[1].contains("permission denied for get pods/log"), "{t:?}");
    c.done().await;
}

/// The wait every `Cluster::new` takes after binding its Role (`rbac_settled`):
/// with the RoleBinding created late, the wait sees the ServiceAccount refused
/// and holds; once the binding is made it returns, and the ServiceAccount's own
/// requests (the engine's probe, which asks for each verb of the Role) pass.
#[tokio::test]
async fn the_rbac_wait_holds_until_a_late_binding_is_seen() {
    let Some(c) = Cluster::new("rbacwait").await else {
        return;
    };
    let pp = PostParams::default();
    let docs = yaml_docs(&repo_file("deploy/rbac.yaml"));
    let rules = docs.iter().find(|d| d["kind"] == "Role").unwrap()["rules"].clone();
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "late"}})).unwrap();
    Api::<ServiceAccount>::namespaced(c.admin.clone(), &c.ns)
        .create(&pp, &sa)
        .await
        .unwrap();
    let role: Role =
        serde_json::from_value(json!({"metadata": {"name": "late"}, "rules": rules})).unwrap();
    Api::<Role>::namespaced(c.admin.clone(), &c.ns)
        .create(&pp, &role)
        .await
        .unwrap();
    let denied = Arc::new(AtomicU32::new(0));
    let wait = tokio::spawn({
        let (admin, ns, rules, denied) =
            (c.admin.clone(), c.ns.clone(), rules.clone(), denied.clone());
        async move { rbac_settled(&admin, &ns, "late", &rules, &denied).await }
    });
    until("the wait to see the ServiceAccount refused", || async {
        match denied.load(Ordering::SeqCst) {
            0 => Err("no refusal yet".to_owned()),
            _ => Ok(()),
        }
    })
    .await;
    assert!(!wait.is_finished(), "the wait returned with no binding");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "late"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "late"},
        "subjects": [{"kind": "ServiceAccount", "name": "late", "namespace": c.ns}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(c.admin.clone(), &c.ns)
        .create(&pp, &binding)
        .await
        .unwrap();
    tokio::time::timeout(DEADLINE, wait)
        .await
        .expect("the wait returns once the binding is seen")
        .unwrap();
    assert!(denied.load(Ordering::SeqCst) >= 1);
    let token = Cluster::token(&c.admin, &c.ns, "late").await;
    let kubeconfig = Cluster::token_kubeconfig(&kubeconfig().unwrap(), &token, &c.dir, "late");
    let engine = taskgate_kubernetes::build(json!({"kubeconfig": kubeconfig, "namespace": c.ns}))
        .await
        .unwrap();
    engine
        .probe()
        .await
        .expect("the late ServiceAccount's Role in force");
    c.done().await;
}

/// A CronJob whose job template's pod runs for `duration` and ends with
/// `message` as its termination message (kwok stages), with one literal
/// variable and one from a Secret.
fn cronjob(name: &str, suspend: bool, image: &str, duration: &str, message: &str) -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "annotations": {"description": format!("Runs {name}\n[server]")}},
        "spec": {
            "schedule": "0 0 1 1 *",
            "suspend": suspend,
            "jobTemplate": {
                "metadata": {"labels": {"team": "data"}},
                "spec": {"backoffLimit": 0, "template": {
                    "metadata": {"annotations": {
                        "taskgate.test/duration": duration,
                        "taskgate.test/termination-message": message,
                    }},
                    "spec": {"restartPolicy": "Never", "containers": [{
                        "name": "main", "image": image,
                        "env": [
                            {"name": "REGION", "value": "eu-west-1"},
                            {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "hunter2-key"}}}
                        ]
                    }]}
                }}
            }
        }
    })
}

async fn create_cronjob(c: &Cluster, object: Value) -> k8s_openapi::api::batch::v1::CronJob {
    let cronjob: k8s_openapi::api::batch::v1::CronJob = serde_json::from_value(object).unwrap();
    Api::<k8s_openapi::api::batch::v1::CronJob>::namespaced(c.admin.clone(), &c.ns)
        .create(&PostParams::default(), &cronjob)
        .await
        .unwrap()
}

fn decl(name: &str, target: Value, input_schema: Value) -> ToolDecl {
    ToolDecl {
        name: name.into(),
        target,
        input_schema,
        keep_alive: None,
    }
}

/// Issue 35: `discover` lists the namespace's CronJobs (suspended ones only
/// with `all`), each as a `from_cronjob` target this engine binds; such a
/// tool runs the CronJob's job template once (the Job as `kubectl create job
/// --from=cronjob/NAME` makes it), with `env_arguments` replacing only the
/// variables named; a retry after the CronJob changed finds the same Job.
/// The engine uses `deploy/rbac.yaml`'s Role.
#[tokio::test]
async fn a_discovered_cronjob_runs_its_job_template_on_demand() {
    let Some(c) = Cluster::new("cronjob").await else {
        return;
    };
    let made = create_cronjob(
        &c,
        cronjob("nightly", false, "busybox:fake", "1s", "{\"rows\": 7}"),
    )
    .await;
    create_cronjob(&c, cronjob("paused", true, "busybox:fake", "1s", "{}")).await;
    let engine = c.engine().await;
    let names = |found: &[taskgate_engine::Discovered]| -> Vec<String> {
        found.iter().map(|d| d.name.clone()).collect()
    };
    let plain = engine.discover(&Default::default()).await.unwrap();
    assert_eq!(names(&plain), ["nightly"]);
    assert_eq!(plain[0].target, json!({"from_cronjob": "nightly"}));
    assert_eq!(plain[0].description, "Runs nightly\n[server]");
    let all = engine
        .discover(&taskgate_engine::DiscoverOptions {
            all: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(names(&all), ["nightly", "paused"]);
    let found = engine
        .discover(&taskgate_engine::DiscoverOptions {
            args_from_env: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let tool = &found[0];
    assert_eq!(tool.target["env_arguments"], json!(["REGION"]));
    assert_eq!(
        tool.input_schema["properties"]["REGION"]["default"],
        "eu-west-1"
    );
    let shown = serde_json::to_string(&found[0].notes).unwrap()
        + &tool.input_schema.to_string()
        + &tool.target.to_string();
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(
        tool.notes.iter().any(|n| n.contains("DB_PASSWORD")),
        "{:?}",
        tool.notes
    );
    // Every discovered target binds on this engine.
    for d in plain.iter().chain(&all).chain(&found) {
        engine
            .bind(&decl("t", d.target.clone(), d.input_schema.clone()))
            .unwrap_or_else(|e| panic!("{}: {e}", d.target));
    }
    let p = engine
        .bind(&decl(
            "nightly",
            tool.target.clone(),
            tool.input_schema.clone(),
        ))
        .unwrap();
    let req = request("tg-cron-1", json!({"REGION": "us-east-2"}));
    let run = p.start(req.clone()).await.unwrap();
    let job = c.jobs().get(&run).await.unwrap();
    let annotations = job.metadata.annotations.clone().unwrap();
    assert_eq!(annotations["cronjob.kubernetes.io/instantiate"], "manual");
    let owner = &job.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(owner.kind, "CronJob");
    assert_eq!(owner.name, "nightly");
    assert_eq!(Some(&owner.uid), made.metadata.uid.as_ref());
    assert_eq!(owner.controller, Some(true));
    assert_eq!(job.metadata.labels.clone().unwrap()["team"], "data");
    let env = job.spec.clone().unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    let region = env.iter().find(|e| e.name == "REGION").unwrap();
    assert_eq!(region.value.as_deref(), Some("us-east-2"));
    let secret = env.iter().find(|e| e.name == "DB_PASSWORD").unwrap();
    assert!(secret.value.is_none() && secret.value_from.is_some());
    // The CronJob is edited; a retry of the same call is still the same run,
    // another call under that name is a conflict.
    let cronjobs = Api::<k8s_openapi::api::batch::v1::CronJob>::namespaced(c.admin.clone(), &c.ns);
    let patch = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": "busybox:other"}]}}}}}});
    cronjobs
        .patch(
            "nightly",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Strategic(&patch),
        )
        .await
        .unwrap();
    assert_eq!(p.start(req).await.unwrap(), run);
    assert!(matches!(
        p.start(request("tg-cron-1", json!({"REGION": "ap"}))).await,
        Err(EngineError::Conflict { .. })
    ));
    let output = completed(p.as_ref(), &run).await;
    assert!(!output.is_error, "{output:?}");
    assert_eq!(output.structured, Some(json!({"rows": 7})));
    // A tool whose CronJob is gone: a clear error, no Job.
    let gone = engine
        .bind(&decl(
            "gone",
            json!({"from_cronjob": "nope"}),
            json!({"type": "object"}),
        ))
        .unwrap();
    match gone.start(request("tg-cron-2", json!({}))).await {
        Err(EngineError::Internal { message, .. }) => {
            assert!(message.contains("CronJob nope"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        c.jobs().get("tg-cron-2").await,
        Err(kube::Error::Api(s)) if s.code == 404
    ));
    // `check` reads the CronJob and dry-runs the Job.
    let findings = p.check().await.unwrap();
    assert!(findings[0].contains("dry run"), "{findings:?}");
    c.done().await;
}

/// Issue 35: `discover` lists Argo WorkflowTemplates (when the API server
/// serves them and taskgate may list them): their parameters become the
/// schema of an `argo-workflow-template` target this engine binds.
#[tokio::test]
async fn discover_lists_argo_workflow_templates() {
    let Some(c) = Cluster::new("wtdisc").await else {
        return;
    };
    let ar = kube::core::ApiResource {
        group: "argoproj.io".into(),
        version: "v1alpha1".into(),
        api_version: "argoproj.io/v1alpha1".into(),
        kind: "WorkflowTemplate".into(),
        plural: "workflowtemplates".into(),
    };
    let templates: Api<kube::core::DynamicObject> =
        Api::namespaced_with(c.admin.clone(), &c.ns, &ar);
    let object: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate",
        "metadata": {"name": "etl", "annotations": {"workflows.argoproj.io/description": "Loads the warehouse"}},
        "spec": {"entrypoint": "main",
                 "arguments": {"parameters": [
                     {"name": "env", "value": "staging", "enum": ["staging", "prod"], "description": "Where"},
                     {"name": "date"}
                 ]},
                 "templates": [{"name": "main", "container": {"image": "busybox:fake"}}]}
    }))
    .unwrap();
    match templates.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {
            assert!(
                std::env::var("TASKGATE_REQUIRE_E2E").as_deref() != Ok("1"),
                "the WorkflowTemplate CRD is not installed (scripts/argo/up.sh installs it)"
            );
            eprintln!("skipping: the WorkflowTemplate CRD is not installed (scripts/argo/up.sh)");
            c.done().await;
            return;
        }
        Err(e) => panic!("{e}"),
    }
    let engine = c.engine().await;
    // deploy/rbac.yaml does not grant listing WorkflowTemplates: CronJobs only.
    assert!(engine
        .discover(&Default::default())
        .await
        .unwrap()
        .is_empty());
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "argo-read"},
        "rules": [{"apiGroups": ["argoproj.io"], "resources": ["workflowtemplates"], "verbs": ["list"]}]
    }))
    .unwrap();
    Api::<Role>::namespaced(c.admin.clone(), &c.ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "argo-read"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "argo-read"},
        "subjects": [{"kind": "ServiceAccount", "name": "taskgate", "namespace": c.ns}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(c.admin.clone(), &c.ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let rules = serde_json::to_value(&role.rules).unwrap();
    rbac_settled(&c.admin, &c.ns, "taskgate", &rules, &AtomicU32::new(0)).await;
    let found = until("the WorkflowTemplate listed", || async {
        match engine.discover(&Default::default()).await {
            Ok(found) if !found.is_empty() => Ok(found),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(found.len(), 1);
    let d = &found[0];
    assert_eq!(d.name, "etl");
    assert_eq!(d.description, "Loads the warehouse");
    assert_eq!(d.input_schema["required"], json!(["date"]));
    assert_eq!(
        d.input_schema["properties"]["env"]["enum"],
        json!(["staging", "prod"])
    );
    engine
        .bind(&decl("etl", d.target.clone(), d.input_schema.clone()))
        .unwrap();
    c.done().await;
}
