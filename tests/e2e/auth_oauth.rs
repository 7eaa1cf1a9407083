//! Who may do what, through the built binary: OAuth 2.1 access tokens from a real
//! authorization server (ORY Hydra, started by scripts/hydra/up.sh: JWTs checked
//! against its key set, opaque tokens by introspection), static tokens with
//! groups, the stdio caller, per-tool access rules, step-up challenges, and the
//! audit trail. Every refusal is checked to have reached no engine (`/metrics`).
//!
//! The Hydra tests need `TASKGATE_HYDRA_ADMIN` and `TASKGATE_HYDRA_PUBLIC`
//! (scripts/test.sh sets them); without them they say why and return, unless
//! `TASKGATE_REQUIRE_E2E=1`, where they fail.

use crate::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use common::{Bearer, Options, Server, Setup};
use serde_json::{json, Value};
use taskgate_engine::testing::e2e_endpoint;

/// The resource identifier of the test configurations.
const RESOURCE: &str = "https://taskgate.test/mcp";
const LONG: Duration = Duration::from_secs(30);

/// Static callers: alice (named by rules), bob (group `ops`), carol (nothing).
fn static_callers() -> Vec<Bearer> {
    vec![
        Bearer::new("alice"),
        Bearer::new("bob"),
        Bearer::new("carol"),
    ]
}

/// The extra TOML: tools with rules, the static callers with groups, the
/// default rule, and (with an issuer) `[auth.oauth]` trusting it.
fn rules_toml(issuer: Option<&str>, admin: Option<&str>) -> String {
    let script = common::toml_str(&common::tool_script("work.sh"));
    let ask = common::toml_str(&common::tool_script("ask.sh"));
    let tool = |name: &str, script: &str, mode: &str, access: &str| {
        format!(
            "[[tools]]\nname = \"{name}\"\nengine = \"local\"\nmode = \"{mode}\"\npoll_interval = \"200ms\"\n\
             input_schema = {{ type = \"object\", properties = {{ label = {{ type = \"string\" }}, seconds = {{ type = \"integer\" }} }} }}\n\
             target = {{ command = [{script}] }}\naccess = {access}\n\n"
        )
    };
    let mut t = String::new();
    t += &tool(
        "deploy",
        &script,
        "hybrid",
        r#"[{ scopes = ["pipelines.deploy"] }]"#,
    );
    t += &tool("ops_only", &script, "hybrid", r#"[{ groups = ["ops"] }]"#);
    t += &tool(
        "alice_only",
        &script,
        "hybrid",
        r#"[{ callers = ["alice"] }]"#,
    );
    t += &tool(
        "approve",
        &ask,
        "async",
        r#"[{ callers = ["alice"] }, { scopes = ["pipelines.run"] }]"#,
    );
    let b = static_callers();
    t += &format!(
        "[auth]\nbearer = [\n  {{ caller = \"alice\", token_env = \"{}\" }},\n  {{ caller = \"bob\", token_env = \"{}\", groups = [\"ops\"] }},\n  {{ caller = \"carol\", token_env = \"{}\" }},\n]\n\
         default_access = [{{ scopes = [\"pipelines.run\"] }}, {{ callers = [\"alice\", \"bob\"] }}]\n\n",
        b[0].var, b[1].var, b[2].var
    );
    if let Some(issuer) = issuer {
        t += &format!(
            "[auth.oauth]\nresource = \"{RESOURCE}\"\nleeway = \"0s\"\njwks_min_refresh = \"1h\"\n\
             [[auth.oauth.issuers]]\nissuer = \"{issuer}\"\nalgorithms = [\"RS256\"]\n"
        );
        if let Some(admin) = admin {
            t += &format!("introspection = {{ endpoint = \"{admin}/admin/oauth2/introspect\" }}\n");
        }
    }
    t
}

fn setup(issuer: Option<&str>, admin: Option<&str>) -> Setup {
    Setup::with(Options {
        extra: rules_toml(issuer, admin),
        ..Options::default()
    })
}

fn env(setup: &Setup) -> Vec<(String, String)> {
    let mut env = setup.env();
    for b in static_callers() {
        env.push((b.var, b.token));
    }
    env.push(("TASKGATE_LOG_FORMAT".into(), "json".into()));
    env
}

async fn serve(setup: &Setup) -> Server {
    Server::spawn(setup.dir.path(), &setup.config, &env(setup), LONG).await
}

fn token_of(caller: &str) -> String {
    Bearer::new(caller).token
}

fn names(reply: &common::Reply) -> Vec<String> {
    let mut n: Vec<String> = reply.result()["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    n.sort();
    n
}

/// The audit events a server wrote so far (JSON log lines of target `taskgate::audit`).
fn audit_events(server: &Server) -> Vec<Value> {
    server
        .stderr_text()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "taskgate::audit")
        .map(|v| v["fields"].clone())
        .collect()
}

// ---------------------------------------------------------------- Hydra ------

/// The Hydra of scripts/hydra/up.sh: (public URL, admin URL, issuer).
fn hydra() -> Option<(String, String, String)> {
    let admin = e2e_endpoint("TASKGATE_HYDRA_ADMIN")?;
    let public = e2e_endpoint("TASKGATE_HYDRA_PUBLIC")?;
    let issuer = e2e_endpoint("TASKGATE_HYDRA_ISSUER")?;
    Some((public, admin, issuer))
}

/// A client created at Hydra through its admin API: (id, secret).
async fn hydra_client(admin: &str, strategy: &str, lifespan: Option<&str>) -> (String, String) {
    let n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let id = format!("tg-it-{strategy}-{n}");
    let secret = format!("secret-{n}-0123456789abcdef");
    let mut body = json!({
        "client_id": id,
        "client_secret": secret,
        "grant_types": ["client_credentials"],
        "token_endpoint_auth_method": "client_secret_basic",
        "scope": "pipelines.run pipelines.deploy",
        "audience": [RESOURCE, "https://other.test/mcp"],
        "access_token_strategy": strategy,
    });
    if let Some(l) = lifespan {
        body["client_credentials_grant_access_token_lifespan"] = json!(l);
    }
    let resp = reqwest::Client::new()
        .post(format!("{admin}/admin/clients"))
        .json(&body)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("create a Hydra client");
    let status = resp.status();
    assert!(
        status.is_success(),
        "{status}: {}",
        resp.text().await.unwrap_or_default()
    );
    (id, secret)
}

/// A client-credentials token from Hydra.
async fn hydra_token(
    public: &str,
    client: &(String, String),
    scope: &str,
    audience: &str,
) -> String {
    let resp = reqwest::Client::new()
        .post(format!("{public}/oauth2/token"))
        .basic_auth(&client.0, Some(&client.1))
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", scope),
            ("audience", audience),
        ])
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("token request");
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    assert!(status.is_success(), "{status}: {body}");
    body["access_token"]
        .as_str()
        .expect("access_token")
        .to_owned()
}

fn jwt_payload(token: &str) -> Value {
    let part = token.split('.').nth(1).expect("a JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// An RS256 JWT signed by a key taskgate does not know.
fn forged_jwt(dir: &std::path::Path, claims: &Value, kid: &str) -> String {
    let pem = dir.join("forger.pem");
    if !pem.exists() {
        let out = std::process::Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
                "-out",
            ])
            .arg(&pem)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let key = jsonwebtoken::EncodingKey::from_rsa_pem(&std::fs::read(&pem).unwrap()).unwrap();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

fn unsigned_jwt(claims: &Value) -> String {
    let enc = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!(
        "{}.{}.",
        enc(&json!({ "alg": "none", "typ": "JWT" })),
        enc(claims)
    )
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn challenge(reply: &common::Reply) -> String {
    reply
        .headers
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

// ---------------------------------------------------------------- tests ------

#[tokio::test]
async fn protected_resource_metadata_and_the_401_challenge() {
    // The issuer is never contacted here: no token reaches validation.
    let setup = setup(Some("https://idp.test/"), None);
    let server = serve(&setup).await;
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let doc: Value = reqwest::get(format!("{}{path}", server.base))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(doc["resource"], RESOURCE, "{doc}");
        assert_eq!(
            doc["authorization_servers"],
            json!(["https://idp.test/"]),
            "{doc}"
        );
        assert_eq!(
            doc["scopes_supported"],
            json!(["pipelines.deploy", "pipelines.run"]),
            "{doc}"
        );
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]), "{doc}");
    }
    let no_token = server.client().request("tools/list", json!({})).await;
    assert_eq!(no_token.status, 401, "{}", no_token.raw);
    let c = challenge(&no_token);
    assert!(
        c.starts_with("Bearer resource_metadata=\"https://taskgate.test/.well-known/oauth-protected-resource/mcp\""),
        "{c}"
    );
    assert!(
        c.contains("scope=\"pipelines.deploy pipelines.run\""),
        "{c}"
    );
    assert!(
        !c.contains("error="),
        "no token is not an invalid token: {c}"
    );
    let garbage = server
        .client()
        .with_token("not-a-token")
        .request("tools/list", json!({}))
        .await;
    assert_eq!(garbage.status, 401);
    assert!(
        challenge(&garbage).contains("error=\"invalid_token\""),
        "{}",
        challenge(&garbage)
    );
    // Static tokens keep working next to OAuth.
    let alice = server
        .client()
        .with_token(&token_of("alice"))
        .request("tools/list", json!({}))
        .await;
    assert_eq!(alice.status, 200, "{}", alice.raw);
    assert!(
        !server.stderr_text().contains("not-a-token"),
        "tokens are never logged"
    );
}

#[tokio::test]
async fn tools_list_differs_per_caller_and_refusals_reach_no_engine() {
    let setup = setup(None, None);
    let server = serve(&setup).await;
    let as_ = |who: &str| server.client().with_token(&token_of(who));
    // taskgate_logs comes with the long-running tools a caller may use.
    let defaults = ["ask", "brief", "fail", "sleeper", "taskgate_logs", "work"];
    let with = |extra: &[&str]| {
        let mut v: Vec<String> = defaults
            .iter()
            .chain(extra)
            .map(|s| (*s).to_owned())
            .collect();
        v.sort();
        v
    };
    let alice = as_("alice").request("tools/list", json!({})).await;
    assert_eq!(names(&alice), with(&["alice_only", "approve"]));
    assert_eq!(alice.result()["cacheScope"], "private");
    assert_eq!(
        names(&as_("bob").request("tools/list", json!({})).await),
        with(&["ops_only"])
    );
    assert!(names(&as_("carol").request("tools/list", json!({})).await).is_empty());

    let before = server.engine_calls().await;
    // carol is admitted to the default tools only with the scope pipelines.run:
    // refused before the arguments are checked, naming the scope.
    let refused = as_("carol").call("work", json!({ "label": 7 })).await;
    assert_eq!(refused.status, 403, "{}", refused.raw);
    assert_eq!(
        refused.error()["data"]["scope"],
        "pipelines.run",
        "{}",
        refused.raw
    );
    // A tool whose rule no scope would open reads as unknown.
    let refused = as_("bob").call("alice_only", json!({})).await;
    assert_eq!(
        refused.error()["message"],
        "Unknown tool: alice_only",
        "{}",
        refused.raw
    );
    // A static caller without the scope gets 403 insufficient_scope naming it.
    let step_up = as_("alice").call("deploy", json!({})).await;
    assert_eq!(step_up.status, 403, "{}", step_up.raw);
    assert_eq!(
        step_up.error()["data"]["scope"],
        "pipelines.deploy",
        "{}",
        step_up.raw
    );
    let c = challenge(&step_up);
    assert!(
        c.contains("error=\"insufficient_scope\"") && c.contains("scope=\"pipelines.deploy\""),
        "{c}"
    );
    assert_eq!(
        server.engine_calls().await,
        before,
        "refusals must reach no engine"
    );
    assert!(setup.runs().is_empty(), "no run may have started");

    // A caller's own handle works; another caller's reads as unknown.
    let task = as_("bob")
        .start_task("ops_only", json!({ "label": "x", "seconds": 0 }))
        .await;
    let foreign = as_("alice").get_reply(&task).await;
    assert_eq!(
        foreign.error()["message"],
        "Failed to retrieve task: Task not found",
        "{}",
        foreign.raw
    );
    as_("bob")
        .poll_until(&task, LONG, |t| t["status"] == "completed")
        .await;

    // `taskgate tools --as` shows the same lists of configured tools (without
    // taskgate's own taskgate_logs).
    let with = |extra: &[&str]| {
        let mut v = with(extra);
        v.retain(|n| n != "taskgate_logs");
        v
    };
    let list = |args: &[&str]| {
        let mut a = vec!["tools", "--config", setup.config.to_str().unwrap()];
        a.extend_from_slice(args);
        let out = setup.command(&a).envs(env(&setup)).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tools: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        let mut n: Vec<String> = tools
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        n.sort();
        n
    };
    assert_eq!(list(&["--as", "bob"]), with(&["ops_only"]));
    assert!(list(&["--as", "carol"]).is_empty());
    assert_eq!(
        list(&[
            "--as",
            "https://idp.test/#svc",
            "--scope",
            "pipelines.run",
            "--scope",
            "pipelines.deploy"
        ]),
        with(&["approve", "deploy"])
    );
    assert_eq!(list(&[]).len(), 9, "without --as: the whole catalog");
}

#[tokio::test]
async fn cancel_and_answers_follow_the_rule_and_every_one_is_audited() {
    // Alice starts two runs while the rule admits her; then the rule changes
    // (a restart with another config, same keys): her cancel and answer are
    // refused before any engine call. Under the first config both go through.
    let open = setup(None, None);
    let server = serve(&open).await;
    let alice = server.client().with_token(&token_of("alice"));
    let asking = alice.start_task("approve", json!({ "label": "v1" })).await;
    alice
        .poll_until(&asking, LONG, |t| t["status"] == "input_required")
        .await;
    let second = alice.start_task("approve", json!({ "label": "v2" })).await;

    let closed_toml = std::fs::read_to_string(&open.config).unwrap().replace(
        r#"access = [{ callers = ["alice"] }, { scopes = ["pipelines.run"] }]"#,
        r#"access = [{ callers = ["bob"] }]"#,
    );
    let closed_path = open.dir.path().join("closed.toml");
    std::fs::write(&closed_path, closed_toml).unwrap();
    let closed = Server::spawn(open.dir.path(), &closed_path, &env(&open), LONG).await;
    let alice_closed = closed.client().with_token(&token_of("alice"));
    let before = closed.engine_calls().await;
    let cancel = alice_closed
        .request("tasks/cancel", json!({ "taskId": asking }))
        .await;
    assert_eq!(cancel.status, 403, "{}", cancel.raw);
    let answer = alice_closed
        .request("tasks/update", json!({ "taskId": asking, "inputResponses": { "approve": { "action": "accept", "content": { "ok": true } } } }))
        .await;
    assert_eq!(answer.status, 403, "{}", answer.raw);
    assert_eq!(
        closed.engine_calls().await,
        before,
        "refused cancel/answer reached an engine"
    );
    let refusals = audit_events(&closed);
    assert!(
        refusals.iter().any(|e| e["action"] == "cancel"
            && e["outcome"] == "refused"
            && e["caller"] == "alice"),
        "{refusals:?}"
    );
    assert!(
        refusals.iter().any(|e| e["action"] == "answer"
            && e["outcome"] == "refused"
            && e["reason"] == "access_rule"),
        "{refusals:?}"
    );

    // Under the admitting rule: answer one, cancel the other.
    let ack = alice
        .request("tasks/update", json!({ "taskId": asking, "inputResponses": { "approve": { "action": "accept", "content": { "ok": true } } } }))
        .await;
    assert_eq!(ack.status, 200, "{}", ack.raw);
    alice
        .poll_until(&asking, LONG, |t| t["status"] == "completed")
        .await;
    alice.cancel(&second).await;
    let bob = server
        .client()
        .with_token(&token_of("bob"))
        .call("alice_only", json!({ "label": "v3" }))
        .await;
    assert_eq!(bob.code(), -32602);

    let events = audit_events(&server);
    let one = |action: &str, outcome: &str| {
        events
            .iter()
            .find(|e| e["action"] == action && e["outcome"] == outcome)
            .unwrap_or_else(|| panic!("no {action}/{outcome} event in {events:?}"))
            .clone()
    };
    let start = one("start", "ok");
    assert_eq!(start["caller"], "alice");
    assert_eq!(start["tool"], "approve");
    assert_eq!(start["dialect"], "tasks-2026-07-28");
    assert_eq!(start["run"].as_str().unwrap().len(), 12, "{start}");
    let answered = one("answer", "ok");
    assert_eq!(
        answered["run"], start["run"],
        "the answer names the run it went to"
    );
    let cancelled = one("cancel", "ok");
    assert_eq!(cancelled["tool"], "approve");
    assert_ne!(cancelled["run"], start["run"]);
    let refused = one("start", "refused");
    assert_eq!(refused["caller"], "bob");
    assert_eq!(refused["tool"], "alice_only");
    assert_eq!(refused["reason"], "access_rule");
    // Never arguments, answers, handles or tokens.
    let log = server.stderr_text();
    for secret in [
        "v1",
        "v2",
        "v3",
        &token_of("alice"),
        &asking[asking.len() - 40..],
    ] {
        assert!(
            !events.iter().any(|e| e.to_string().contains(secret)),
            "an audit event holds {secret:?}"
        );
    }
    assert!(!log.contains(&token_of("alice")), "a token reached the log");
}

#[tokio::test]
async fn stdio_caller_is_local_and_rules_can_name_it() {
    let mut extra = rules_toml(None, None);
    let user = std::env::var("USER").unwrap_or_else(|_| "local".into());
    extra = extra.replace(
        r#"access = [{ callers = ["alice"] }]"#,
        &format!(r#"access = [{{ callers = ["local:{user}"] }}]"#),
    );
    let setup = Setup::with(Options {
        extra,
        ..Options::default()
    });
    let out = setup
        .command(&[
            "tools",
            "--config",
            setup.config.to_str().unwrap(),
            "--as",
            "local",
        ])
        .envs(env(&setup))
        .env("USER", &user)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tools: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        vec!["alice_only"],
        "the stdio caller sees the tool naming it, and only that"
    );

    // And over stdio itself.
    use std::io::{BufRead as _, Write as _};
    let mut child = setup
        .command(&[
            "serve",
            "--stdio",
            "--config",
            setup.config.to_str().unwrap(),
        ])
        .envs(env(&setup))
        .env("USER", &user)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let request = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": { "_meta": common::modern_meta(true) } });
    writeln!(child.stdin.as_mut().unwrap(), "{request}").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let reply: Value = serde_json::from_str(&line).unwrap();
    let names: Vec<&str> = reply["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["alice_only", "taskgate_logs"], "{reply}");
}

#[tokio::test]
async fn hydra_jwt_and_opaque_tokens_run_tools_bound_to_iss_and_sub() {
    let Some((public, admin, issuer)) = hydra() else {
        return;
    };
    let setup = setup(Some(&issuer), Some(&admin));
    let server = serve(&setup).await;
    let jwt_client = hydra_client(&admin, "jwt", None).await;
    let opaque_client = hydra_client(&admin, "opaque", None).await;
    let jwt = hydra_token(
        &public,
        &jwt_client,
        "pipelines.run pipelines.deploy",
        RESOURCE,
    )
    .await;
    let opaque = hydra_token(&public, &opaque_client, "pipelines.run", RESOURCE).await;
    assert_eq!(jwt.split('.').count(), 3, "a JWT");
    assert_eq!(jwt_payload(&jwt)["iss"], issuer.as_str());

    let via_jwt = server.client().with_token(&jwt);
    let via_opaque = server.client().with_token(&opaque);
    let listed = names(&via_jwt.request("tools/list", json!({})).await);
    assert!(
        listed.contains(&"deploy".to_owned()) && listed.contains(&"approve".to_owned()),
        "{listed:?}"
    );
    assert!(!listed.contains(&"alice_only".to_owned()), "{listed:?}");
    let listed = names(&via_opaque.request("tools/list", json!({})).await);
    assert!(
        !listed.contains(&"deploy".to_owned()) && listed.contains(&"work".to_owned()),
        "{listed:?}"
    );

    let task = via_jwt
        .start_task("deploy", json!({ "label": "x", "seconds": 1 }))
        .await;
    let done = via_jwt
        .poll_until(&task, LONG, |t| t["status"] == "completed")
        .await;
    assert_eq!(done["result"]["structuredContent"]["rows"], 42, "{done}");
    let other = via_opaque
        .start_task("work", json!({ "label": "y", "seconds": 0 }))
        .await;
    via_opaque
        .poll_until(&other, LONG, |t| t["status"] == "completed")
        .await;

    // Handles are bound to ISSUER#SUB: another client's token (or a static caller) cannot read them.
    let foreign = via_opaque.get_reply(&task).await;
    assert_eq!(
        foreign.error()["message"],
        "Failed to retrieve task: Task not found"
    );
    let foreign = server
        .client()
        .with_token(&token_of("alice"))
        .get_reply(&task)
        .await;
    assert_eq!(
        foreign.error()["message"],
        "Failed to retrieve task: Task not found"
    );
    let events = audit_events(&server);
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e["action"] == "start" && e["outcome"] == "ok")
        .collect();
    assert!(
        starts
            .iter()
            .any(|e| e["caller"] == format!("{issuer}#{}", jwt_client.0)),
        "{starts:?}"
    );
    assert!(
        starts
            .iter()
            .any(|e| e["caller"] == format!("{issuer}#{}", opaque_client.0)),
        "{starts:?}"
    );
    let log = server.stderr_text();
    assert!(
        !log.contains(&jwt) && !log.contains(&opaque),
        "a token reached the log"
    );
}

#[tokio::test]
async fn hydra_refusals_each_reach_no_engine() {
    let Some((public, admin, issuer)) = hydra() else {
        return;
    };
    let setup = setup(Some(&issuer), Some(&admin));
    let server = serve(&setup).await;
    let jwt_client = hydra_client(&admin, "jwt", None).await;
    let short_client = hydra_client(&admin, "jwt", Some("1s")).await;
    let opaque_client = hydra_client(&admin, "opaque", Some("1s")).await;
    let good = hydra_token(&public, &jwt_client, "pipelines.run", RESOURCE).await;
    // Warm the key cache with a valid token, so an unknown kid is what asks again.
    let ok = server
        .client()
        .with_token(&good)
        .request("tools/list", json!({}))
        .await;
    assert_eq!(ok.status, 200, "{}", ok.raw);

    let before = server.engine_calls().await;
    let expired = hydra_token(&public, &short_client, "pipelines.run", RESOURCE).await;
    let expired_opaque = hydra_token(&public, &opaque_client, "pipelines.run", RESOURCE).await;
    let exp = jwt_payload(&expired)["exp"].as_u64().unwrap();
    common::wait_for("the short token to expire", LONG, || async {
        (now() > exp + 1).then_some(())
    })
    .await;
    let wrong_audience = hydra_token(
        &public,
        &jwt_client,
        "pipelines.run",
        "https://other.test/mcp",
    )
    .await;
    let claims = |iss: &str| json!({ "iss": iss, "sub": "intruder", "aud": RESOURCE, "exp": now() + 600, "scope": "pipelines.run pipelines.deploy" });
    let wrong_issuer = forged_jwt(setup.dir.path(), &claims("https://evil.test/"), "k1");
    let unknown_key = forged_jwt(setup.dir.path(), &claims(&issuer), "not-a-hydra-key");
    let alg_none = unsigned_jwt(&claims(&issuer));
    let cases = [
        ("expired JWT", expired.as_str()),
        ("expired opaque token", expired_opaque.as_str()),
        ("wrong audience", wrong_audience.as_str()),
        ("wrong issuer", wrong_issuer.as_str()),
        ("unknown key", unknown_key.as_str()),
        ("alg none", alg_none.as_str()),
        ("not a token", "ory_at_made.up"),
    ];
    for (what, token) in cases {
        let reply = server
            .client()
            .with_token(token)
            .call("work", json!({ "label": "x" }))
            .await;
        assert_eq!(reply.status, 401, "{what}: {}", reply.raw);
        assert!(
            challenge(&reply).contains("error=\"invalid_token\""),
            "{what}: {}",
            challenge(&reply)
        );
    }
    // Refusals at the door change nothing: a serving thread writes their
    // events as it goes idle, so they may follow the answer.
    common::wait_for("an audited refusal for each bad token", LONG, || async {
        let reasons: Vec<String> = audit_events(&server)
            .iter()
            .filter(|e| e["action"] == "request")
            .map(|e| e["reason"].as_str().unwrap().to_owned())
            .collect();
        for want in [
            "expired",
            "wrong_audience",
            "wrong_issuer",
            "unknown_key",
            "algorithm_not_allowed",
            "inactive_token",
        ] {
            if !reasons.iter().any(|r| r == want) {
                return Err(format!("no refusal for {want}: {reasons:?}"));
            }
        }
        Ok(())
    })
    .await;

    // A valid token without the tool's scope: 403 insufficient_scope, step-up named.
    let step_up = server
        .client()
        .with_token(&good)
        .call("deploy", json!({ "label": "x" }))
        .await;
    assert_eq!(step_up.status, 403, "{}", step_up.raw);
    let c = challenge(&step_up);
    assert!(
        c.contains("error=\"insufficient_scope\"") && c.contains("scope=\"pipelines.deploy\""),
        "{c}"
    );
    assert!(c.contains("resource_metadata=\""), "{c}");
    // A caller no rule admits: the tool reads as unknown.
    let denied = server
        .client()
        .with_token(&good)
        .call("alice_only", json!({}))
        .await;
    assert_eq!(
        denied.error()["message"],
        "Unknown tool: alice_only",
        "{}",
        denied.raw
    );
    assert_eq!(
        server.engine_calls().await,
        before,
        "a refused token, scope or rule reached an engine"
    );
    assert!(setup.runs().is_empty(), "no run may have started");
    // A foreign caller's handle reads as unknown.
    let alice = server.client().with_token(&token_of("alice"));
    let hers = alice
        .start_task("alice_only", json!({ "label": "z", "seconds": 0 }))
        .await;
    let calls_after_start = server.engine_calls().await;
    let foreign = server.client().with_token(&good).get_reply(&hers).await;
    assert_eq!(
        foreign.error()["message"],
        "Failed to retrieve task: Task not found",
        "{}",
        foreign.raw
    );
    assert_eq!(
        server.engine_calls().await,
        calls_after_start,
        "a foreign handle reached an engine"
    );
    assert_eq!(setup.runs().len(), 1, "only alice's run was started");
    assert!(calls_after_start > before, "alice's start is counted");
}
