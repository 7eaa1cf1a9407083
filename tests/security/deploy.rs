//! The deployment's own port for metrics (item 13): with `server.metrics_listen`
//! set, `/metrics` is served there and nowhere else, and that port serves no MCP.
//! A peer allowed to scrape (by a network policy on the metrics port) reaches no
//! tool; a caller of MCP reads no metrics. The rest of item 13 (the chart's
//! NetworkPolicy, secret modes, token mounting, the admission policy) is checked
//! on a real API server by `tests/helm/chart.sh`.

use std::time::Duration;

use super::common::{free_port, wait_for, Server, Setup};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(30);

/// A server whose metrics port is `metrics` (set from the environment, as the
/// chart's `TASKGATE__…` overrides would).
async fn with_metrics_port() -> (Setup, Server, String) {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let setup = Setup::config("", &[("TASKGATE__SERVER__METRICS_LISTEN", &addr)]);
    let server = setup.server().await;
    (setup, server, format!("http://{addr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_port_serves_metrics_and_health_only() {
    let (_setup, server, metrics) = with_metrics_port().await;
    let http = reqwest::Client::new();

    // The metrics port answers a scraper and a probe.
    let scrape = wait_for("the metrics port to answer", LIMIT, async || {
        let r = http.get(format!("{metrics}/metrics")).send().await.ok()?;
        (r.status() == 200).then_some(())?;
        r.text().await.ok()
    })
    .await;
    assert!(
        scrape.contains("taskgate_build_info{version=\""),
        "{scrape}"
    );
    let health = http.get(format!("{metrics}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);

    // A peer that may reach only the metrics port reaches no tool: MCP is not
    // served there, whatever the method.
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": { "name": "scraper", "version": "1" } }
    });
    let mcp = http
        .post(format!("{metrics}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), 404, "the metrics port served MCP");
    let tools = http
        .post(format!("{metrics}/"))
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(tools.status(), 404);

    // And the MCP port no longer shows the metrics.
    let on_mcp_port = http
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(
        on_mcp_port.status(),
        404,
        "/metrics is still served on server.listen"
    );
    // MCP itself is unchanged there.
    let health = http
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_stay_on_listen_when_no_metrics_port_is_set() {
    let setup = Setup::config("", &[]);
    let server = setup.server().await;
    let text = server.metrics().await;
    assert!(text.contains("taskgate_build_info{version=\""), "{text}");
}

#[test]
fn a_metrics_port_that_cannot_be_bound_stops_serve() {
    // Someone else holds the port: serve must not run without the listener the
    // operator asked for (a scraper would otherwise read another process).
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let setup = Setup::config("", &[("TASKGATE__SERVER__METRICS_LISTEN", &addr)]);
    let port = free_port();
    let out = setup
        .command(&[
            "serve",
            "--config",
            setup.config.to_str().unwrap(),
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success(), "serve ran without its metrics port");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("server.metrics_listen") && stderr.contains(&addr),
        "{stderr}"
    );
}

// ---------------------------------------------------------------------------
// Item 14: dependencies audited in CI (scripts/audit.sh, which .ci/run calls).

/// `scripts/audit.sh ARGS` from the repository root, with `env`.
fn audit_script(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = std::process::Command::new(root.join("scripts/audit.sh"));
    cmd.args(args).current_dir(root);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run scripts/audit.sh")
}

/// True when cargo-audit is installed; under `TASKGATE_REQUIRE_E2E=1` it is
/// installed now (or a build in progress is waited for), otherwise the test skips.
fn audit_tool() -> bool {
    if audit_script(&["path"], &[]).status.success() {
        return true;
    }
    if std::env::var("TASKGATE_REQUIRE_E2E").as_deref() == Ok("1") {
        let out = audit_script(&["install"], &[]);
        assert!(
            out.status.success(),
            "installing cargo-audit failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return true;
    }
    eprintln!("skipping: cargo-audit is not installed (scripts/audit.sh install)");
    false
}

/// A lockfile of one registry crate at one version.
fn lockfile(dir: &std::path::Path, name: &str, version: &str) -> String {
    let path = dir.join(format!("{name}.lock"));
    std::fs::write(
        &path,
        format!(
            "version = 3\n\n[[package]]\nname = \"{name}\"\nversion = \"{version}\"\n\
             source = \"registry+https://github.com/rust-lang/crates.io-index\"\n"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn dependency_audit_refuses_a_known_vulnerability() {
    if !audit_tool() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // time 0.1.40: RUSTSEC-2020-0071 (a segfault through the environment).
    let lock = lockfile(dir.path(), "time", "0.1.40");
    let out = audit_script(&[], &[("TASKGATE_AUDIT_LOCKFILE", &lock)]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a vulnerable lockfile passed: {text}"
    );
    assert!(text.contains("RUSTSEC-2020-0071"), "{text}");
}

#[test]
fn dependency_audit_refuses_an_unmaintained_crate() {
    if !audit_tool() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // yaml-rust: RUSTSEC-2024-0320, unmaintained (a warning, denied).
    let lock = lockfile(dir.path(), "yaml-rust", "0.4.5");
    let out = audit_script(&[], &[("TASKGATE_AUDIT_LOCKFILE", &lock)]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "an unmaintained crate passed: {text}"
    );
    assert!(text.contains("RUSTSEC-2024-0320"), "{text}");
}

#[test]
fn dependency_audit_without_a_database_fails() {
    // No database is no check: never a pass.
    let out = audit_script(&[], &[("TASKGATE_ADVISORY_DB", "/nonexistent/advisory-db")]);
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("FAILED"), "{stdout}");
}

#[test]
fn dependency_audit_passes_cargo_lock_which_has_no_serde_yaml() {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).unwrap();
    // serde_yaml is archived and deprecated by its author: replaced by serde_norway.
    assert!(
        !lock.contains("name = \"serde_yaml\""),
        "Cargo.lock still holds serde_yaml"
    );
    if !audit_tool() {
        return;
    }
    let out = audit_script(&[], &[]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
