//! Helpers of the tests that run on the Kubernetes control plane.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use serde_json::{json, Value};

use super::wait_for;

/// The label of every namespace these tests (and `adapters/kubernetes/tests`) make;
/// namespaces a failed run left behind are swept by it.
pub const E2E_LABEL: &str = "taskgate.io/e2e";

/// Creates namespace `ns` (labelled [`E2E_LABEL`]), waits for its `default`
/// ServiceAccount (the admission plugin refuses pods until it exists), and
/// applies `deploy/rbac.yaml` in it; the ServiceAccount's name.
pub async fn rbac_namespace(admin: &kube::Client, ns: &str) -> String {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.to_owned()),
            labels: Some([(E2E_LABEL.to_owned(), "true".to_owned())].into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("create namespace");
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    wait_for(
        "the default service account",
        Duration::from_secs(60),
        || async {
            match sas.get_opt("default").await {
                Ok(Some(_)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    apply_rbac(admin, ns).await
}

/// The documents of a multi-document YAML text, as JSON (empty ones dropped).
pub fn yaml_docs(text: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).expect("YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// Creates the objects of `deploy/rbac.yaml` as they are, in `ns`; the
/// ServiceAccount's name.
pub async fn apply_rbac(admin: &kube::Client, ns: &str) -> String {
    let pp = PostParams::default();
    let mut sa_name = None;
    let path = format!("{}/deploy/rbac.yaml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    for mut doc in yaml_docs(&text) {
        doc["metadata"]["namespace"] = json!(ns);
        match doc["kind"].as_str().expect("kind") {
            "ServiceAccount" => {
                let sa: ServiceAccount = serde_json::from_value(doc).unwrap();
                sa_name = sa.metadata.name.clone();
                Api::<ServiceAccount>::namespaced(admin.clone(), ns)
                    .create(&pp, &sa)
                    .await
                    .expect("create ServiceAccount");
            }
            "Role" => {
                let role: Role = serde_json::from_value(doc).unwrap();
                Api::<Role>::namespaced(admin.clone(), ns)
                    .create(&pp, &role)
                    .await
                    .expect("create Role");
            }
            "RoleBinding" => {
                for subject in doc["subjects"].as_array_mut().unwrap() {
                    subject["namespace"] = json!(ns);
                }
                let binding: RoleBinding = serde_json::from_value(doc).unwrap();
                Api::<RoleBinding>::namespaced(admin.clone(), ns)
                    .create(&pp, &binding)
                    .await
                    .expect("create RoleBinding");
            }
            other => panic!("unexpected kind {other} in deploy/rbac.yaml"),
        }
    }
    sa_name.expect("a ServiceAccount in deploy/rbac.yaml")
}
