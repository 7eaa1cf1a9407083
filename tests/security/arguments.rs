//! Item 3: arguments are held to their schema. A hostile caller sends
//! arguments the schema does not declare, or two that map to one environment
//! variable, to slip a value past the schema (an `enum`) into the run: refused
//! with -32602 naming them, before any run exists. A Kubernetes target whose
//! prefix would let an argument replace the container's own variables does not
//! load.

use std::path::Path;

use serde_json::json;

use crate::common::{Setup, Tool};

/// `Label` is declared and may only be `safe`; `work.sh steps` reads
/// `TASKGATE_ARG_LABEL` and returns it as the result's `label`.
const ENUM_SCHEMA: &str = r#"{ type = "object", required = ["Label"], properties = { Label = { type = "string", enum = ["safe"] }, steps = { type = "integer", minimum = 0, maximum = 1 } } }"#;

/// The same, opting in to undeclared arguments.
const OPEN_SCHEMA: &str = r#"{ type = "object", additionalProperties = true, required = ["Label"], properties = { Label = { type = "string", enum = ["safe"] }, steps = { type = "integer", minimum = 0, maximum = 1 } } }"#;

fn setup() -> Setup {
    Setup::with_tools(&[
        Tool::new("deploy", "sync", "work.sh", ENUM_SCHEMA).arg("steps"),
        Tool::new("open", "sync", "work.sh", OPEN_SCHEMA).arg("steps"),
        Tool::new("bare", "sync", "work.sh", r#"{ type = "object" }"#).arg("steps"),
    ])
}

/// An undeclared `label` (sorting after the declared `Label`, so it would win
/// the environment variable `TASKGATE_ARG_LABEL`) is refused by name; no run
/// is created.
#[tokio::test]
async fn an_undeclared_argument_is_refused_by_name() {
    let setup = setup();
    let server = setup.server().await;
    let c = server.client();
    let reply = c
        .call(
            "deploy",
            json!({"Label": "safe", "label": "evil", "steps": 0}),
        )
        .await;
    assert_eq!(
        reply.code(),
        -32602,
        "the undeclared argument must be refused: {}",
        reply.response()
    );
    let message = reply.message();
    assert!(message.contains("\"label\""), "{message}");
    assert!(message.contains("undeclared"), "{message}");
    assert!(
        !message.contains("evil"),
        "no argument value in the error: {message}"
    );
    assert!(setup.runs().is_empty(), "no run: {:?}", setup.runs());

    // A tool without properties takes no arguments at all.
    let reply = c.call("bare", json!({"anything": "x"})).await;
    assert_eq!(reply.code(), -32602, "{}", reply.response());
    assert!(
        reply.message().contains("\"anything\""),
        "{}",
        reply.message()
    );
    assert!(setup.runs().is_empty(), "no run: {:?}", setup.runs());

    // The declared argument alone still runs, with its validated value.
    let ok = c.call("deploy", json!({"Label": "safe", "steps": 0})).await;
    assert_eq!(
        ok.result()["structuredContent"]["label"],
        "safe",
        "{}",
        ok.response()
    );
}

/// A tool that opts in (`additionalProperties = true`) takes undeclared
/// arguments, but two that map to one variable are still refused, naming both,
/// before the run exists.
#[tokio::test]
async fn two_arguments_on_one_variable_are_refused() {
    let setup = setup();
    let server = setup.server().await;
    let c = server.client();
    let reply = c
        .call(
            "open",
            json!({"Label": "safe", "label": "evil", "steps": 0}),
        )
        .await;
    assert_eq!(
        reply.code(),
        -32602,
        "the colliding arguments must be refused: {}",
        reply.response()
    );
    let message = reply.message();
    assert!(
        message.contains("\"Label\"") && message.contains("\"label\""),
        "{message}"
    );
    assert!(message.contains("TASKGATE_ARG_LABEL"), "{message}");
    assert!(
        !message.contains("evil"),
        "no argument value in the error: {message}"
    );
    assert!(setup.runs().is_empty(), "no run: {:?}", setup.runs());

    // The opt-in itself works: an undeclared argument that collides with
    // nothing goes through.
    let ok = c
        .call("open", json!({"Label": "safe", "extra": 1, "steps": 0}))
        .await;
    assert_eq!(
        ok.result()["structuredContent"]["label"],
        "safe",
        "{}",
        ok.response()
    );
}

/// A kubeconfig naming an API server nobody listens on: enough for the engine
/// to load and bind its tools (which is where targets are checked).
fn unreachable_kubeconfig(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:9\"}\n\
         users:\n- name: u\n  user: {token: x}\ncontexts:\n- name: c\n  context: {cluster: c, user: u, namespace: jobs}\n\
         current-context: c\n",
    )
    .unwrap();
    path
}

/// `args_env_prefix = ""` (any argument would replace any container variable,
/// a `secretKeyRef` one included) and a prefix the container's own variables
/// start with are refused by `check-config`, naming the key.
#[test]
fn a_prefix_that_reaches_the_containers_own_variables_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let template = "apiVersion: batch/v1\\nkind: Job\\nspec:\\n  template:\\n    spec:\\n      restartPolicy: Never\\n      containers:\\n      - name: main\\n        image: busybox\\n        env:\\n        - name: DB_PASSWORD\\n          valueFrom: {secretKeyRef: {name: db, key: password}}\\n";
    for prefix in ["", "DB_"] {
        let path = dir.path().join("k8s.toml");
        std::fs::write(
            &path,
            format!(
                "[keys]\nseal = [{{ id = \"k1\", dev_secret = \"0123456789abcdef0123456789abcdef\" }}]\n\n\
                 [engines.k8s]\nkind = \"kubernetes\"\nkubeconfig = {kubeconfig:?}\nnamespace = \"jobs\"\n\n\
                 [[tools]]\nname = \"report\"\nengine = \"k8s\"\n\
                 input_schema = {{ type = \"object\", properties = {{ password = {{ type = \"string\" }} }} }}\n\
                 target = {{ template = \"{template}\", args_env_prefix = \"{prefix}\" }}\n"
            ),
        )
        .unwrap();
        let out = std::process::Command::new(crate::common::bin())
            .args(["check-config", "--config", &path.display().to_string()])
            .env_remove("TASKGATE_CONFIG")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "prefix {prefix:?}: {stderr}");
        assert!(
            stderr.contains("tools[0].target.args_env_prefix"),
            "prefix {prefix:?}: {stderr}"
        );
    }
}
