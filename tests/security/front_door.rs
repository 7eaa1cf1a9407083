//! The front door (items 1, 5 and the key parts of 10): who may reach the
//! server at all, and what the keys that seal its handles must be.
//!
//! - No anonymous network access: without `[auth]`, only loopback peers are
//!   served (checked on the socket, per connection), `serve` refuses a
//!   non-loopback `listen` unless `server.insecure_anonymous_networks` names
//!   the networks to serve anonymously, and a request without `Host` is
//!   refused as one with a wrong `Host`. The peer that is not loopback is a
//!   network namespace joined to this one by a veth pair, with addresses of
//!   the documentation range 192.0.2.0/24.
//! - OAuth defaults closed: with `[auth.oauth]`, no `auth.default_access`, no
//!   start.
//! - Keys: the example config ships none and the server says how to make one
//!   (`taskgate keygen`); weak secrets and `dev_secret` beside `[auth]` or a
//!   non-loopback bind are refused.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::common::{self, bin, free_port, wait_for, Server, KEY_SECRET, KEY_VAR};

/// A config file of `[server]` lines, a key from `KEY_VAR`, and `rest`.
fn config(dir: &Path, server: &str, rest: &str) -> PathBuf {
    let path = dir.join(format!(
        "front-{}.toml",
        NAMES.fetch_add(1, Ordering::Relaxed)
    ));
    let text = format!(
        "[server]\n{server}\n\n[keys]\nseal = [{{ id = \"k1\", secret_env = \"{KEY_VAR}\" }}]\n\n{rest}"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A child that is killed (and reaped) when dropped, whatever the test did.
struct Reaped {
    child: Child,
    stderr: PathBuf,
}

impl Reaped {
    fn spawn(mut cmd: Command, stderr: PathBuf) -> Self {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap());
        Self {
            child: cmd.spawn().expect("spawn taskgate"),
            stderr,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits (at most 30 s) for the process to exit; its exit code and stderr.
    async fn exited(&mut self, what: &str) -> (Option<i32>, String) {
        let status = wait_for(what, Duration::from_secs(30), async || {
            self.child.try_wait().ok().flatten()
        })
        .await;
        (status.code(), self.stderr())
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `taskgate ARGS` with the test key (or `key`, or none) in its environment.
fn taskgate(dir: &Path, args: &[&str], key: Option<&str>) -> Reaped {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .env("TASKGATE_LOG", "info")
        .env_remove(KEY_VAR)
        .env_remove("TASKGATE_SEAL_KEY")
        .env("HOME", dir)
        .env("XDG_STATE_HOME", dir.join("state"));
    if let Some(key) = key {
        cmd.env(KEY_VAR, key);
    }
    let n = NAMES.fetch_add(1, Ordering::Relaxed);
    Reaped::spawn(cmd, dir.join(format!("taskgate-{n}.stderr")))
}

/// Waits (at most 30 s) until `/healthz` answers at `base`, failing early when
/// the process exits.
async fn healthy(server: &mut Reaped, base: &str) {
    let http = reqwest::Client::new();
    wait_for("/healthz", Duration::from_secs(30), async || {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("taskgate exited with {status}: {}", server.stderr());
        }
        match http.get(format!("{base}/healthz")).send().await {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(format!("{}", r.status())),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
}

static NAMES: AtomicU32 = AtomicU32::new(0);

/// An MCP `ping` request body.
const PING: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

// ------------------------------------------------------------ item 1: network

/// `serve` on a non-loopback address without `[auth]` exits non-zero, naming
/// the key that would allow it; so does `check-config` on such a file.
#[tokio::test]
async fn serve_refuses_a_non_loopback_listen_without_auth() {
    let dir = tempfile::tempdir().unwrap();
    let loopback = config(dir.path(), "listen = \"127.0.0.1:0\"", "");
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let mut serve = taskgate(
            dir.path(),
            &[
                "serve",
                "--config",
                &loopback.display().to_string(),
                "--listen",
                listen,
            ],
            Some(KEY_SECRET),
        );
        let (code, stderr) = serve
            .exited(&format!("serve --listen {listen} to exit"))
            .await;
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.contains("server.listen")
                && stderr.contains("server.insecure_anonymous_networks"),
            "the refusal names the key: {stderr}"
        );
        assert!(!stderr.contains("listening on"), "{stderr}");
    }
    let wide = config(dir.path(), "listen = \"0.0.0.0:8808\"", "");
    let mut check = taskgate(
        dir.path(),
        &["check-config", "--config", &wide.display().to_string()],
        Some(KEY_SECRET),
    );
    let (code, stderr) = check.exited("check-config to exit").await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("server.insecure_anonymous_networks"),
        "{stderr}"
    );
}

/// A request without a `Host` header is refused as one with a wrong `Host`,
/// over HTTP/1.0 (which has none) and HTTP/1.1 alike.
#[tokio::test]
async fn a_request_without_host_is_refused() {
    let setup = common::Setup::new();
    let server = Server::start(&setup).await;
    let raw = async |head: &str| -> String {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
            .await
            .unwrap();
        let request = format!(
            "{head}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{PING}",
            PING.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
            .await
            .expect("an answer within 10s")
            .unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    };
    for head in ["POST /mcp HTTP/1.0", "POST /mcp HTTP/1.1"] {
        let answer = raw(head).await;
        let status = answer.lines().next().unwrap_or_default();
        assert!(status.contains(" 403 "), "{head}: {answer}");
        assert!(answer.contains("Host not allowed"), "{head}: {answer}");
    }
    let wrong = raw("POST /mcp HTTP/1.1\r\nhost: evil.example").await;
    assert!(wrong.starts_with("HTTP/1.1 403"), "{wrong}");
    let right = raw(&format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{}",
        server.port
    ))
    .await;
    assert!(right.starts_with("HTTP/1.1 200"), "{right}");
}

/// A network namespace joined to this one by a veth pair, with a /30 of
/// 192.0.2.0/24 (TEST-NET-1, never a real network's): the host side and the
/// peer inside. Removed on drop, whatever the test did.
struct PeerNamespace {
    name: String,
    host_if: String,
    /// This namespace's end of the pair.
    host_ip: String,
    /// The address the peer's connections come from.
    peer_ip: String,
}

impl PeerNamespace {
    /// Root and `ip`, or why not.
    fn available() -> Result<(), String> {
        // SAFETY-free check of the effective uid: `id -u`.
        let uid = Command::new("id")
            .arg("-u")
            .output()
            .map_err(|e| e.to_string())?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Err("not root".into());
        }
        let ip = Command::new("ip")
            .arg("-V")
            .output()
            .map_err(|e| format!("ip: {e}"))?;
        if !ip.status.success() {
            return Err("ip does not run".into());
        }
        let curl = Command::new("curl")
            .arg("--version")
            .output()
            .map_err(|e| format!("curl: {e}"))?;
        if !curl.status.success() {
            return Err("curl does not run".into());
        }
        Ok(())
    }

    fn ip(args: &[&str]) -> Result<(), String> {
        let out = Command::new("ip")
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "ip {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    fn new() -> Self {
        // Unique per process and test, short enough for an interface name
        // (15 bytes); the /30 is chosen alike so parallel runs do not share one.
        let n = NAMES.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{:x}{n}", std::process::id() & 0xfffff);
        let block = (std::process::id() + n * 7) % 63 + 1;
        let me = Self {
            name: format!("tgfd{tag}"),
            host_if: format!("tgh{tag}"),
            host_ip: format!("192.0.2.{}", block * 4 + 1),
            peer_ip: format!("192.0.2.{}", block * 4 + 2),
        };
        let peer_if = format!("tgp{tag}");
        let steps: Vec<Vec<String>> = vec![
            vec!["netns".into(), "add".into(), me.name.clone()],
            vec![
                "link".into(),
                "add".into(),
                me.host_if.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                peer_if.clone(),
            ],
            vec![
                "link".into(),
                "set".into(),
                peer_if.clone(),
                "netns".into(),
                me.name.clone(),
            ],
            vec![
                "addr".into(),
                "add".into(),
                format!("{}/30", me.host_ip),
                "dev".into(),
                me.host_if.clone(),
            ],
            vec!["link".into(), "set".into(), me.host_if.clone(), "up".into()],
            vec![
                "-n".into(),
                me.name.clone(),
                "addr".into(),
                "add".into(),
                format!("{}/30", me.peer_ip),
                "dev".into(),
                peer_if.clone(),
            ],
            vec![
                "-n".into(),
                me.name.clone(),
                "link".into(),
                "set".into(),
                peer_if,
                "up".into(),
            ],
            vec![
                "-n".into(),
                me.name.clone(),
                "link".into(),
                "set".into(),
                "lo".into(),
                "up".into(),
            ],
        ];
        for step in steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            if let Err(e) = Self::ip(&args) {
                panic!("setting up the peer namespace: {e}");
            }
        }
        me
    }

    /// `curl` from inside the namespace: POST `body` to `url`; the status and
    /// the body of the answer ("000" when there was none).
    fn post(&self, url: &str, host: &str, body: &str) -> (String, String) {
        let (_, status, body) = self.post_over(&[], url, host, body);
        (status, body)
    }

    /// [`Self::post`] with curl's `options` first (`--http2-prior-knowledge`);
    /// the HTTP version the answer came in first ("1.1", "2"; "0" for none).
    fn post_over(
        &self,
        options: &[&str],
        url: &str,
        host: &str,
        body: &str,
    ) -> (String, String, String) {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.name,
                "curl",
                "-sS",
                "--max-time",
                "10",
            ])
            .args(options)
            .args([
                "-H",
                "content-type: application/json",
                "-H",
                &format!("host: {host}"),
            ])
            .args([
                "-w",
                "\n%{http_version} %{http_code}",
                "--data-binary",
                body,
                url,
            ])
            .output()
            .expect("run curl in the namespace");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, tail) = text.rsplit_once('\n').unwrap_or(("", &text));
        let (version, status) = tail.trim().split_once(' ').unwrap_or(("", tail));
        (
            version.to_owned(),
            status.trim().to_owned(),
            format!("{body}{}", String::from_utf8_lossy(&out.stderr)),
        )
    }
}

impl Drop for PeerNamespace {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it ours.
        let _ = Self::ip(&["netns", "del", &self.name]);
        let _ = Self::ip(&["link", "del", &self.host_if]);
    }
}

/// From another host (a peer whose socket address is not loopback), an
/// anonymous server refuses every request, though the operator opened a
/// non-loopback listen for some other network; only a listed network's peer
/// is served. The `Host` check is turned off here so the refusal seen is the
/// peer check's own.
#[tokio::test]
async fn anonymous_access_from_another_host_is_refused() {
    if let Err(why) = PeerNamespace::available() {
        assert!(
            std::env::var("TASKGATE_REQUIRE_E2E").as_deref() != Ok("1"),
            "a network namespace is required (TASKGATE_REQUIRE_E2E=1): {why}"
        );
        eprintln!("skipping: cannot make a network namespace: {why}");
        return;
    }
    let ns = PeerNamespace::new();
    let dir = tempfile::tempdir().unwrap();
    let serve_with = async |networks: &str| -> (Reaped, u16) {
        let port = free_port();
        let path = config(
            dir.path(),
            &format!("listen = \"0.0.0.0:{port}\"\nallowed_hosts = [\"*\"]\ninsecure_anonymous_networks = [{networks}]"),
            "",
        );
        let mut server = taskgate(
            dir.path(),
            &["serve", "--config", &path.display().to_string()],
            Some(KEY_SECRET),
        );
        healthy(&mut server, &format!("http://127.0.0.1:{port}")).await;
        assert!(server.stderr().contains("INSECURE"), "{}", server.stderr());
        (server, port)
    };

    // Open to another documentation network only: this peer is refused.
    let (server, port) = serve_with("\"198.51.100.0/24\"").await;
    let url = format!("http://{}:{port}/mcp", ns.host_ip);
    let (status, body) = ns.post(&url, &format!("{}:{port}", ns.host_ip), PING);
    assert_eq!(status, "403", "{body}");
    assert!(body.contains("loopback peers only"), "{body}");
    for path in ["/healthz", "/metrics"] {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.name,
                "curl",
                "-sS",
                "--max-time",
                "10",
                "-o",
                "/dev/null",
            ])
            .args([
                "-w",
                "%{http_code}",
                &format!("http://{}:{port}{path}", ns.host_ip),
            ])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "403", "{path}");
    }
    // The same server still serves loopback.
    let local = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/mcp"))
        .header("content-type", "application/json")
        .body(PING)
        .send()
        .await
        .unwrap();
    assert_eq!(local.status(), 200);
    assert!(
        server.stderr().contains(&ns.peer_ip),
        "the refusal is logged with the peer"
    );
    drop(server);

    // The peer's own address listed: served (the opt-out lifts exactly that).
    let (_server, port) = serve_with(&format!("\"{}/32\"", ns.peer_ip)).await;
    let url = format!("http://{}:{port}/mcp", ns.host_ip);
    let (status, body) = ns.post(&url, &format!("{}:{port}", ns.host_ip), PING);
    assert_eq!(status, "200", "{body}");
    assert!(body.contains("\"result\""), "{body}");
}

/// The same refusal over HTTP/2 (`server.http2`, curl with prior knowledge):
/// the peer is judged once per connection, and each stream on it is refused;
/// a listed network's peer is served over HTTP/2 too.
#[tokio::test]
async fn anonymous_access_over_http2_from_another_host_is_refused() {
    if let Err(why) = PeerNamespace::available() {
        assert!(
            std::env::var("TASKGATE_REQUIRE_E2E").as_deref() != Ok("1"),
            "a network namespace is required (TASKGATE_REQUIRE_E2E=1): {why}"
        );
        eprintln!("skipping: cannot make a network namespace: {why}");
        return;
    }
    let ns = PeerNamespace::new();
    let dir = tempfile::tempdir().unwrap();
    let serve_with = async |networks: &str| -> (Reaped, u16) {
        let port = free_port();
        let path = config(
            dir.path(),
            &format!(
                "listen = \"0.0.0.0:{port}\"\nallowed_hosts = [\"*\"]\nhttp2 = true\n\
                 insecure_anonymous_networks = [{networks}]"
            ),
            "",
        );
        let mut server = taskgate(
            dir.path(),
            &["serve", "--config", &path.display().to_string()],
            Some(KEY_SECRET),
        );
        healthy(&mut server, &format!("http://127.0.0.1:{port}")).await;
        (server, port)
    };
    let h2 = ["--http2-prior-knowledge"];

    let (server, port) = serve_with("\"198.51.100.0/24\"").await;
    let url = format!("http://{}:{port}/mcp", ns.host_ip);
    // Without a body: an answer before the body is read is followed by
    // RST_STREAM(NO_ERROR), which curl 7.88 takes for an error when its
    // upload has not ended yet.
    let host = format!("{}:{port}", ns.host_ip);
    let (version, status, body) = ns.post_over(&h2, &url, &host, "");
    assert_eq!((version.as_str(), status.as_str()), ("2", "403"), "{body}");
    assert!(body.contains("loopback peers only"), "{body}");
    assert!(
        server.stderr().contains(&ns.peer_ip),
        "the refusal is logged with the peer"
    );
    drop(server);

    let (_server, port) = serve_with(&format!("\"{}/32\"", ns.peer_ip)).await;
    let url = format!("http://{}:{port}/mcp", ns.host_ip);
    let (version, status, body) = ns.post_over(&h2, &url, &format!("{}:{port}", ns.host_ip), PING);
    assert_eq!((version.as_str(), status.as_str()), ("2", "200"), "{body}");
    assert!(body.contains("\"result\""), "{body}");
}

// -------------------------------------------------------------- item 5: OAuth

/// With `[auth.oauth]` and no `auth.default_access`, `serve` does not start and
/// `check-config` says how to set it; with it set, the server starts.
#[tokio::test]
async fn oauth_without_default_access_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let oauth = "[auth.oauth]\nresource = \"https://taskgate.test/mcp\"\n\
                 [[auth.oauth.issuers]]\nissuer = \"https://idp.test/\"\n";
    let open = config(dir.path(), "listen = \"127.0.0.1:0\"", oauth);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut serve = taskgate(
        dir.path(),
        &[
            "serve",
            "--config",
            &open.display().to_string(),
            "--listen",
            &listen,
        ],
        Some(KEY_SECRET),
    );
    let (code, stderr) = serve.exited("serve to refuse the OAuth config").await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("auth.default_access"), "{stderr}");
    let mut check = taskgate(
        dir.path(),
        &["check-config", "--config", &open.display().to_string()],
        Some(KEY_SECRET),
    );
    let (code, stderr) = check.exited("check-config to exit").await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("default_access = [{ scopes = [") && stderr.contains("default_access = []"),
        "check-config says how: {stderr}"
    );

    let closed = config(
        dir.path(),
        "listen = \"127.0.0.1:0\"",
        &format!("[auth]\ndefault_access = []\n\n{oauth}"),
    );
    let mut server = taskgate(
        dir.path(),
        &[
            "serve",
            "--config",
            &closed.display().to_string(),
            "--listen",
            &listen,
        ],
        Some(KEY_SECRET),
    );
    healthy(&mut server, &format!("http://{listen}")).await;
}

// --------------------------------------------------------------- item 10: keys

/// The example config holds no working key: without one `serve` names the
/// variable and `taskgate keygen`; with a key from `keygen` (fresh each time,
/// 32 bytes) it serves its tools on loopback, as README's first command does.
#[tokio::test]
async fn the_example_ships_no_key_and_keygen_makes_one() {
    let dir = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let text = std::fs::read_to_string(&example).unwrap();
    assert!(!text
        .lines()
        .any(|l| l.trim_start().starts_with("seal") && l.contains("dev_secret")));
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let args = [
        "serve",
        "--config",
        &example.display().to_string(),
        "--listen",
        &listen,
    ];
    let mut keyless = taskgate(dir.path(), &args, None);
    let (code, stderr) = keyless.exited("serve without a key to exit").await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("TASKGATE_SEAL_KEY") && stderr.contains("taskgate keygen"),
        "the error says how to make a key: {stderr}"
    );

    let keygen = || {
        let out = Command::new(bin()).arg("keygen").output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let (key, other) = (keygen(), keygen());
    assert_ne!(key, other, "each key is fresh");
    assert_eq!(key.len(), 44, "base64 of 32 bytes: {key}");

    let mut cmd = Command::new(bin());
    cmd.args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("TASKGATE_SEAL_KEY", &key)
        .env("HOME", dir.path())
        .env("XDG_STATE_HOME", dir.path().join("state"));
    let mut server = Reaped::spawn(cmd, dir.path().join("example.stderr"));
    healthy(&mut server, &format!("http://{listen}")).await;
    let client = common::Client::new(&format!("http://{listen}/mcp"));
    let tools = client.request("tools/list", json!({})).await;
    let names = common::names(tools.result()["tools"].as_array().unwrap());
    assert!(names.contains(&"analyze_dataset".to_owned()), "{names:?}");
    let task = client
        .start_task("analyze_dataset", json!({ "dataset": "x", "seconds": 0 }))
        .await;
    assert!(
        task.starts_with("tg3.k1."),
        "a handle of the HKDF generation: {task}"
    );
}

/// Secrets that do not carry 32 random bytes are refused, naming the rule and
/// `taskgate keygen`: the old 32-character minimum let these through.
#[tokio::test]
async fn weak_secrets_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), "listen = \"127.0.0.1:0\"", "");
    for weak in [
        "integration-test-key-0123456789abcdef-xyz",
        "development-only-key-do-not-use-in-production",
        // Base64, but of text.
        "Y29ycmVjdCBob3JzZSBiYXR0ZXJ5IHN0YXBsZSBhbmQgbW9yZSB3b3Jkcw==",
        // Base64 of 32 zero bytes.
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    ] {
        let port = free_port();
        let mut serve = taskgate(
            dir.path(),
            &[
                "serve",
                "--config",
                &path.display().to_string(),
                "--listen",
                &format!("127.0.0.1:{port}"),
            ],
            Some(weak),
        );
        let (code, stderr) = serve.exited("serve with a weak key to exit").await;
        assert_eq!(code, Some(2), "{weak}: {stderr}");
        assert!(
            stderr.contains("32 random bytes") && stderr.contains("taskgate keygen"),
            "{weak}: {stderr}"
        );
    }
}

/// A key written into the config file (`dev_secret`) is for loopback
/// development only: refused beside `[auth]` and on a non-loopback bind.
#[tokio::test]
async fn dev_secret_is_refused_with_auth_or_off_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let dev = |server: &str, rest: &str| {
        let path = dir.path().join(format!(
            "dev-{}.toml",
            NAMES.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(
            &path,
            format!("[server]\n{server}\n\n[keys]\nseal = [{{ id = \"dev\", dev_secret = \"{KEY_SECRET}\" }}]\n\n{rest}"),
        )
        .unwrap();
        path
    };
    let with_auth = dev(
        "listen = \"127.0.0.1:0\"",
        "[auth]\nbearer = [{ caller = \"ci\", token_env = \"TASKGATE_FD_TOKEN\" }]\n",
    );
    let wide = dev(
        "listen = \"127.0.0.1:0\"\ninsecure_anonymous_networks = [\"192.0.2.0/24\"]",
        "",
    );
    for (path, listen) in [(&with_auth, "127.0.0.1"), (&wide, "0.0.0.0")] {
        let port = free_port();
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--config", &path.display().to_string()])
            .args(["--listen", &format!("{listen}:{port}")])
            .env("TASKGATE_FD_TOKEN", "a-bearer-token-for-this-test-only");
        let mut serve = Reaped::spawn(cmd, dir.path().join(format!("dev-{port}.stderr")));
        let (code, stderr) = serve.exited("serve with a dev_secret to exit").await;
        assert_eq!(code, Some(2), "{}: {stderr}", path.display());
        assert!(stderr.contains("keys.seal[0].dev_secret"), "{stderr}");
    }
    // On loopback without auth it still serves, with a loud warning.
    let plain = dev("listen = \"127.0.0.1:0\"", "");
    let port = free_port();
    let mut cmd = Command::new(bin());
    cmd.args(["serve", "--config", &plain.display().to_string()])
        .args(["--listen", &format!("127.0.0.1:{port}")]);
    let mut server = Reaped::spawn(cmd, dir.path().join("dev-plain.stderr"));
    healthy(&mut server, &format!("http://127.0.0.1:{port}")).await;
    assert!(
        server.stderr().contains("dev_secret"),
        "{}",
        server.stderr()
    );
}
