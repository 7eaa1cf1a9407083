//! Helpers of the tests that run on the Kubernetes control plane.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};
use serde_json::{json, Value};

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
