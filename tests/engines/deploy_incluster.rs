//! taskgate started the way a pod starts it: no kubeconfig, only the ServiceAccount
//! files at the standard mount path and `KUBERNETES_SERVICE_HOST`/`PORT` — on the
//! real control plane of `scripts/k8s/cluster-up.sh`.
//!
//! What a kubelet would do is done by hand, from the same sources: the test makes a
//! namespace holding exactly `deploy/rbac.yaml`, a Pod of that ServiceAccount (kwok
//! runs it), a token bound to that Pod (TokenRequest with a `boundObjectRef`, as
//! the kubelet's projected volume asks), the CA from the namespace's
//! `kube-root-ca.crt` ConfigMap and the namespace's name. `scripts/k8s/as-pod.sh`
//! mounts those three files read-only at
//! `/var/run/secrets/kubernetes.io/serviceaccount` in a private mount namespace,
//! sets the two variables to the API server's address (its certificate names
//! 127.0.0.1, which the TLS handshake checks against the mounted CA), and clears
//! everything else from the environment (no `KUBECONFIG`, `HOME=/nonexistent`).
//!
//! The config names no kubeconfig and no namespace: the Job must land in the
//! namespace read from the mounted file, created with the mounted token.
//!
//! Skipped when `TASKGATE_KUBECONFIG` is unset or no mount namespace can be made;
//! failed instead when `TASKGATE_REQUIRE_E2E=1`. Every wait polls against a deadline.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::cluster::rbac_namespace;
use common::{wait_for as until, Client, Setup};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{json, Value};
use taskgate_engine::testing::e2e_endpoint;

/// The longest any single wait lasts.
const LIMIT: Duration = Duration::from_secs(60);
/// Label of the e2e namespaces (swept by the other Kubernetes tests too).
/// Where a pod's ServiceAccount files are mounted.
const SA_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// True when `scripts/k8s/as-pod.sh` can work here (a mount namespace can be made).
fn mount_namespaces_work() -> bool {
    let ok = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let why = "cannot make a mount namespace (unshare --mount needs root)";
        assert!(
            std::env::var("TASKGATE_REQUIRE_E2E").as_deref() != Ok("1"),
            "{why}, and TASKGATE_REQUIRE_E2E=1"
        );
        eprintln!("skipping the in-cluster test: {why}");
    }
    ok
}

async fn admin_client(path: &str) -> kube::Client {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    taskgate_kubernetes::choose_tls_backend();
    let file = kube::config::Kubeconfig::read_from(path).expect("admin kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .expect("admin kubeconfig");
    kube::Client::try_from(config).expect("admin client")
}

/// The API server URL of the admin kubeconfig.
fn api_url(admin_path: &str) -> String {
    let config: Value =
        serde_yaml::from_str(&std::fs::read_to_string(admin_path).unwrap()).expect("kubeconfig");
    config["clusters"][0]["cluster"]["server"]
        .as_str()
        .expect("server URL")
        .trim_end_matches('/')
        .to_owned()
}

/// The folder a kubelet would mount: `token` (bound to `pod`), `ca.crt` (the
/// namespace's `kube-root-ca.crt`), `namespace`.
async fn service_account_files(
    admin: &kube::Client,
    ns: &str,
    sa: &str,
    pod: &Pod,
    dir: &Path,
) -> PathBuf {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3607),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .expect("token status")
        .token
        .expect("a token");
    let config_maps: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let ca = until("the kube-root-ca.crt ConfigMap", LIMIT, || async {
        match config_maps.get_opt("kube-root-ca.crt").await {
            Ok(Some(cm)) => cm
                .data
                .and_then(|d| d.get("ca.crt").cloned())
                .ok_or_else(|| "no ca.crt key yet".to_owned()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let sa_dir = dir.join("serviceaccount");
    std::fs::create_dir(&sa_dir).unwrap();
    std::fs::write(sa_dir.join("token"), token).unwrap();
    std::fs::write(sa_dir.join("ca.crt"), ca).unwrap();
    std::fs::write(sa_dir.join("namespace"), ns).unwrap();
    sa_dir
}

/// `scripts/k8s/as-pod.sh SA_DIR URL --` (the command follows).
fn as_pod_raw(sa_dir: &Path, url: &str) -> Command {
    let mut cmd = Command::new(repo_path("scripts/k8s/as-pod.sh"));
    cmd.arg(sa_dir).arg(url).arg("--");
    cmd
}

/// `scripts/k8s/as-pod.sh SA_DIR URL KEY=… -- taskgate ARGS…`, in the setup's folder.
fn as_pod(sa_dir: &Path, url: &str, setup: &Setup, args: &[&str]) -> Command {
    let mut cmd = Command::new(repo_path("scripts/k8s/as-pod.sh"));
    cmd.arg(sa_dir).arg(url);
    for (k, v) in &setup.env() {
        cmd.arg(format!("{k}={v}"));
    }
    cmd.args(["TASKGATE_LOG=info", "--", env!("CARGO_BIN_EXE_taskgate")])
        .args(args)
        .current_dir(setup.dir.path());
    cmd
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the server (the wrapper's process became taskgate itself) on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_s_service_account_finds_the_cluster_and_runs_a_job() {
    let Some(admin_path) = e2e_endpoint("TASKGATE_KUBECONFIG") else {
        return;
    };
    if !mount_namespaces_work() {
        return;
    }
    let admin = admin_client(&admin_path).await;
    let url = api_url(&admin_path);

    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let ns = format!(
        "tg-e2e-incluster-{}-{}",
        std::process::id(),
        nanos % 100_000
    );
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let sa = rbac_namespace(&admin, &ns).await;

    // The pod taskgate "runs in" (kwok keeps it Running), and its token.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "taskgate"},
        "spec": {
            "serviceAccountName": sa,
            "containers": [{"name": "taskgate", "image": "taskgate:0.1.0", "args": ["serve"]}],
        },
    }))
    .unwrap();
    let pod = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");

    let setup = Setup::config(
        r#"[engines.cluster]
kind = "kubernetes"

[[tools]]
name = "report"
description = "A Job"
engine = "cluster"
mode = "async"
poll_interval = "200ms"
keep_alive = "1h"
input_schema = { type = "object", properties = { day = { type = "string" } } }
target = { template_file = "report.yaml", args_env_prefix = "ARG_" }
"#,
        &[],
    );
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {
                    "taskgate.test/duration": "1s",
                    "taskgate.test/termination-message": "{\"rows\": 7}",
                }},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:fake"}],
                },
            },
        },
    });
    std::fs::write(
        setup.dir.path().join("report.yaml"),
        serde_yaml::to_string(&job).unwrap(),
    )
    .unwrap();
    let sa_dir = service_account_files(&admin, &ns, &sa, &pod, setup.dir.path()).await;

    // Control: without the mounted files the same command finds no cluster, so
    // what follows works because of them (as-pod.sh hides the host's /run, so a
    // machine that is itself a pod does not leak its own files in).
    let bare = Command::new("env")
        .args(["-i", "PATH=/usr/bin:/bin", "HOME=/nonexistent"])
        .args(setup.env().iter().map(|(k, v)| format!("{k}={v}")))
        .arg(env!("CARGO_BIN_EXE_taskgate"))
        .args(["check-config", "--config", "taskgate.toml"])
        .current_dir(setup.dir.path())
        .output()
        .expect("run check-config");
    let text = String::from_utf8_lossy(&bare.stderr);
    assert!(
        !bare.status.success(),
        "no cluster without the mount: {text}"
    );
    assert!(
        text.contains("no Kubernetes configuration found"),
        "the error names the missing configuration: {text}"
    );

    // The mount: the pod's namespace file at the standard path, read-only
    // (the shell succeeds only if it reads the file and cannot write there).
    let seen = as_pod_raw(&sa_dir, &url)
        .args([
            "sh",
            "-c",
            &format!("cat {SA_MOUNT}/namespace && ! touch {SA_MOUNT}/x 2>/dev/null"),
        ])
        .output()
        .expect("run as-pod.sh");
    assert!(seen.status.success(), "{seen:?}");
    assert_eq!(String::from_utf8_lossy(&seen.stdout), ns, "{seen:?}");

    // check-config in the pod's view: the rules review runs as the token's
    // identity and finds the minimal Role in the pod's namespace.
    let check = as_pod(
        &sa_dir,
        &url,
        &setup,
        &["check-config", "--config", "taskgate.toml"],
    )
    .output()
    .expect("run check-config");
    let out = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "check-config in the pod failed: {out}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(out.contains("engine cluster (kubernetes): ok"), "{out}");
    assert!(
        out.contains(&format!("in namespace {ns}")),
        "the pod's namespace: {out}"
    );

    // The server, in the pod's view.
    let port = free_port();
    let stderr_path = setup.dir.path().join("server.stderr");
    let server = Running(
        as_pod(
            &sa_dir,
            &url,
            &setup,
            &[
                "serve",
                "--config",
                "taskgate.toml",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("spawn taskgate"),
    );
    let http = reqwest::Client::new();
    let deadline = Instant::now() + LIMIT;
    loop {
        let up = http
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if up {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "taskgate did not answer /healthz: {}",
            std::fs::read_to_string(&stderr_path).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let client = Client::new(&format!("http://127.0.0.1:{port}/mcp"));
    let task = client
        .start_task("report", json!({"day": "2026-12-03"}))
        .await;
    let done = client.until_status(&task, "completed", LIMIT).await;
    assert_eq!(done["result"]["isError"], false, "{done}");

    // The Job is in the pod's namespace, made from the template with the arguments.
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &ns);
    let all = jobs
        .list(&ListParams::default())
        .await
        .expect("list jobs")
        .items;
    assert_eq!(all.len(), 1, "one Job in {ns}");
    let container = &all[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert!(
        container
            .env
            .iter()
            .flatten()
            .any(|e| e.name == "ARG_DAY" && e.value.as_deref() == Some("2026-12-03")),
        "arguments reach the Job: {:?}",
        container.env
    );
    assert_eq!(
        done["result"]["structuredContent"],
        json!({"rows": 7}),
        "the termination message is the result: {done}"
    );

    drop(server);
    let _ = namespaces.delete(&ns, &DeleteParams::background()).await;
}
