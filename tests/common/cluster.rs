//! Helpers of the tests that run on the Kubernetes control plane.

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
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
/// applies `deploy/rbac.yaml` in it, waiting until the API server authorizes
/// by it ([`rbac_settled`]); the ServiceAccount's name.
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

/// Waits until the API server lets ServiceAccount `sa` of `ns` do what each of
/// `rules` (a Role's rules, as JSON) grants: its first verb on its first
/// resource, asked by SubjectAccessReview. A RoleBinding reaches the RBAC
/// authorizer through the API server's informer cache, a moment after its
/// create returns; a request as the ServiceAccount in between is refused
/// (`cannot create jobs`). Every test that binds a Role waits here before it
/// uses it.
pub async fn rbac_settled(admin: &kube::Client, ns: &str, sa: &str, rules: &Value) {
    let reviews: Api<SubjectAccessReview> = Api::all(admin.clone());
    let asks: Vec<ResourceAttributes> = rules
        .as_array()
        .expect("a Role's rules")
        .iter()
        .map(|rule| {
            let named = rule["resources"][0].as_str().expect("a resource");
            let (resource, subresource) = match named.split_once('/') {
                Some((r, s)) => (r, Some(s.to_owned())),
                None => (named, None),
            };
            ResourceAttributes {
                namespace: Some(ns.to_owned()),
                group: Some(rule["apiGroups"][0].as_str().expect("a group").to_owned()),
                resource: Some(resource.to_owned()),
                subresource,
                verb: Some(rule["verbs"][0].as_str().expect("a verb").to_owned()),
                ..ResourceAttributes::default()
            }
        })
        .collect();
    let user = format!("system:serviceaccount:{ns}:{sa}");
    let mut denied = 0u32;
    wait_for(
        &format!("RBAC to let {user} use its Role"),
        Duration::from_secs(60),
        async || {
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
                    denied += 1;
                    return Err(format!(
                        "{} {} denied",
                        ask.verb.as_deref().unwrap_or_default(),
                        ask.resource.as_deref().unwrap_or_default()
                    ));
                }
            }
            Ok(())
        },
    )
    .await;
    if denied > 0 {
        eprintln!("RBAC for {user}: allowed after {denied} denied review(s)");
    }
}

/// Creates the objects of `deploy/rbac.yaml` as they are, in `ns`, and waits
/// until the API server authorizes the ServiceAccount by them
/// ([`rbac_settled`]); the ServiceAccount's name.
pub async fn apply_rbac(admin: &kube::Client, ns: &str) -> String {
    let pp = PostParams::default();
    let mut sa_name = None;
    let mut rules = Value::Null;
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
                rules = doc["rules"].clone();
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
    let sa = sa_name.expect("a ServiceAccount in deploy/rbac.yaml");
    rbac_settled(admin, ns, &sa, &rules).await;
    sa
}
