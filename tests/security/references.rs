//! Item 9: forged references go nowhere. An attacker who could seal a task
//! handle (a leaked or shared key) names another repository's run in it: the
//! GitHub engine refuses the reference before asking GitHub, so nothing of that
//! repository is read, cancelled or approved with taskgate's token. (Each
//! engine's own unit tests refuse references outside its target for read,
//! cancel and answer; this is the same through the built binary.)

use std::time::{Duration, SystemTime};

use serde_json::json;
use taskgate::core::handle::{unix_ms, Dialect, Keyring, Purpose, TaskClaims};
use taskgate_github_double::{Double, OWNER, REF, REPO, TOKEN, WORKFLOW};

use crate::common::{more_fields, tool_entry, Bearer, Options, Setup, KEY_SECRET};

const LIMIT: Duration = Duration::from_secs(30);
const TOKEN_VAR: &str = "TASKGATE_E2E_GITHUB_TOKEN";

fn setup(d: &Double, alice: &Bearer) -> Setup {
    let body = format!(
        "[engines.gh]\nkind = \"github\"\ntoken_env = \"{TOKEN_VAR}\"\nbase_url = \"{url}\"\nlookup_delay = \"10ms\"\n\n{tool}",
        url = d.url,
        tool = tool_entry(
            "deploy",
            "Deploy a version through GitHub Actions",
            "gh",
            r#"{ type = "object", required = ["version"], properties = { version = { type = "string" } } }"#,
            &format!(
                r#"owner = "{OWNER}", repo = "{REPO}", workflow = "{WORKFLOW}", ref = "{REF}"{}"#,
                more_fields(r#"environment_approval = { message = "Deploy to {environment}?" }"#)
            ),
        ),
    );
    Setup::config_with(
        Options {
            bearer: vec![alice.clone()],
            ..Options::default()
        },
        &body,
        &[(TOKEN_VAR, TOKEN)],
    )
}

/// A task handle for `caller` naming `native` of tool `deploy`, sealed with the
/// test configuration's key, as the server seals its own.
fn forge(caller: &str, native: &str) -> String {
    let keys = Keyring::new(&[("k1".to_owned(), KEY_SECRET.to_owned())]).unwrap();
    let claims = TaskClaims {
        dialect: Dialect::TasksExtension,
        tool: "deploy".to_owned(),
        native: native.to_owned(),
        created_ms: unix_ms(SystemTime::now()),
        ttl_ms: Some(3_600_000),
        trace: None,
    };
    keys.seal(Purpose::Task, caller, &claims)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_handle_naming_another_repositorys_run_reads_nothing() {
    let d = Double::start().await;
    let alice = Bearer::new("alice");
    let s = setup(&d, &alice);
    let server = s.server().await;
    let c = server.client().with_token(&alice.token);
    let task = c.start_task("deploy", json!({"version": "1"})).await;
    let ids = d.run_ids();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = ids[0];
    d.wait_on_environment(id);
    c.until_status(&task, "input_required", LIMIT).await;

    // The forging works: a handle sealed this way naming the tool's own run
    // reads it.
    let own = forge(&alice.caller, &format!("{OWNER}/{REPO}/{id}"));
    let read = c.get_reply(&own).await;
    assert!(
        read.is_ok(),
        "the forged handle to the own run reads: {}",
        read.raw
    );

    let key = "environment-161088068";
    for native in [
        format!("evil-org/evil-repo/{id}"),
        format!("evil-org/{REPO}/{id}"),
        format!("{OWNER}/other-repo/{id}"),
        "evil-org/evil-repo/~tg-x~1700000000".to_owned(),
    ] {
        let forged = forge(&alice.caller, &native);
        d.clear_seen();
        let read = c.get_reply(&forged).await;
        assert!(!read.is_ok(), "{native}: read: {}", read.raw);
        let cancel = c.cancel_reply(&forged).await;
        assert!(!cancel.is_ok(), "{native}: cancel: {}", cancel.raw);
        let answer = c
            .update(&forged, json!({ key: {"action": "accept", "content": {}} }))
            .await;
        let foreign: Vec<String> = d
            .lines()
            .into_iter()
            .filter(|l| l.contains("/repos/") && !l.contains(&format!("/repos/{OWNER}/{REPO}/")))
            .collect();
        assert!(
            foreign.is_empty(),
            "{native}: GitHub was asked about another repository: {foreign:?} (answer: {})",
            answer.raw
        );
    }
    assert!(
        d.reviews().is_empty(),
        "nothing was approved: {:?}",
        d.reviews()
    );
    // The real run still waits for its approval.
    assert_eq!(c.get(&task).await["status"], "input_required");
}
