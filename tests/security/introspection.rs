//! Item 6: introspection is bounded. Standing where a caller with made-up or
//! foreign tokens stands, through the built binary, counting the introspection
//! calls each issuer receives:
//!
//! - a repeated bad opaque token costs one call (negative cache), a repeated good
//!   one too (positive cache);
//! - an opaque token meant for issuer B is never shown to issuer A (tokens are
//!   routed by `token_prefixes`), and B being down does not fail A's tokens;
//! - one peer presenting refused tokens is turned away with 429 once it reaches
//!   `[auth.failures] per_peer`, before its next token costs any call, while
//!   another peer address is still served.
//!
//! Issuer A is ORY Hydra (scripts/hydra/up.sh) behind a counting relay; issuer B
//! is a stand-in on a loopback port. The Hydra tests say why and return without
//! `TASKGATE_HYDRA_*`, unless `TASKGATE_REQUIRE_E2E=1`, where they fail.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use taskgate_engine::testing::e2e_endpoint;

use crate::common::{self, Bearer, Options, Server, Setup};

const RESOURCE: &str = "https://taskgate.test/mcp";
const LONG: Duration = Duration::from_secs(30);

/// An introspection endpoint on a loopback port that records every token it is
/// asked about: it relays to Hydra's (issuer A), or answers itself (issuer B:
/// tokens beginning `b_good` are active, others not; while `down`, HTTP 503).
struct Introspector {
    url: String,
    issuer: String,
    seen: Arc<Mutex<Vec<String>>>,
    down: Arc<AtomicBool>,
}

impl Introspector {
    async fn start(relay_to: Option<String>) -> Self {
        use axum::routing::post;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let issuer = format!("{base}/");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let down = Arc::new(AtomicBool::new(false));
        let (s, d, iss) = (seen.clone(), down.clone(), issuer.clone());
        let http = reqwest::Client::new();
        let app = axum::Router::new().route(
            "/introspect",
            post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let (s, d, iss, http, relay_to) = (
                        s.clone(),
                        d.clone(),
                        iss.clone(),
                        http.clone(),
                        relay_to.clone(),
                    );
                    async move {
                        // The tokens here are all URL-safe: no decoding needed.
                        let token = String::from_utf8_lossy(&body)
                            .split('&')
                            .find_map(|kv| kv.strip_prefix("token="))
                            .unwrap_or_default()
                            .to_owned();
                        s.lock().unwrap().push(token.clone());
                        if d.load(Ordering::SeqCst) {
                            return (
                                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                                axum::Json(json!({})),
                            );
                        }
                        let answer = match relay_to {
                            Some(url) => {
                                let mut req = http
                                    .post(url)
                                    .header("content-type", "application/x-www-form-urlencoded")
                                    .body(body.to_vec())
                                    .timeout(Duration::from_secs(10));
                                if let Some(a) = headers.get("authorization") {
                                    req = req.header("authorization", a.clone());
                                }
                                req.send().await.unwrap().json::<Value>().await.unwrap()
                            }
                            None if token.starts_with("b_good") => json!({
                                "active": true, "sub": "bee", "iss": iss,
                                "aud": [RESOURCE], "scope": "pipelines.run",
                                "exp": now() + 600,
                            }),
                            None => json!({ "active": false }),
                        };
                        (axum::http::StatusCode::OK, axum::Json(answer))
                    }
                },
            ),
        );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url: format!("{base}/introspect"),
            issuer,
            seen,
            down,
        }
    }

    fn calls(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    fn saw(&self, token: &str) -> bool {
        self.seen.lock().unwrap().iter().any(|t| t == token)
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// One `[[auth.oauth.issuers]]` entry introspecting at `endpoint`.
fn issuer_toml(issuer: &str, endpoint: &str, prefixes: &[&str]) -> String {
    let prefixes: Vec<String> = prefixes.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        "[[auth.oauth.issuers]]\nissuer = \"{issuer}\"\nalgorithms = [\"RS256\"]\n\
         introspection = {{ endpoint = \"{endpoint}\", token_prefixes = [{}] }}\n",
        prefixes.join(", ")
    )
}

/// A configuration with the core tools, the static caller alice, every caller
/// admitted by default, `failures` as `[auth.failures]`, and `issuers`.
fn setup(failures: &str, issuers: &str) -> Setup {
    let alice = Bearer::new("alice");
    let mut extra = format!(
        "[auth]\nbearer = [{{ caller = \"alice\", token_env = \"{}\" }}]\n\
         default_access = [{{ callers = [\"*\"] }}]\n\n[auth.failures]\n{failures}\n",
        alice.var
    );
    if !issuers.is_empty() {
        extra += &format!("[auth.oauth]\nresource = \"{RESOURCE}\"\nleeway = \"0s\"\n{issuers}");
    }
    Setup::with(Options {
        extra,
        ..Options::default()
    })
}

async fn serve(setup: &Setup) -> Server {
    let alice = Bearer::new("alice");
    let mut env = setup.env();
    env.push((alice.var, alice.token));
    Server::spawn(setup.dir.path(), &setup.config, &env, LONG).await
}

/// The Hydra of scripts/hydra/up.sh: (public URL, admin URL, issuer).
fn hydra() -> Option<(String, String, String)> {
    let admin = e2e_endpoint("TASKGATE_HYDRA_ADMIN")?;
    let public = e2e_endpoint("TASKGATE_HYDRA_PUBLIC")?;
    let issuer = e2e_endpoint("TASKGATE_HYDRA_ISSUER")?;
    Some((public, admin, issuer))
}

/// An opaque access token for this resource from a new Hydra client.
async fn hydra_opaque_token(public: &str, admin: &str) -> String {
    let n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let (id, secret) = (
        format!("tg-sec-{n}"),
        format!("secret-{n}-0123456789abcdef"),
    );
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{admin}/admin/clients"))
        .json(&json!({
            "client_id": id, "client_secret": secret,
            "grant_types": ["client_credentials"],
            "token_endpoint_auth_method": "client_secret_basic",
            "scope": "pipelines.run", "audience": [RESOURCE],
            "access_token_strategy": "opaque",
        }))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("create a Hydra client");
    assert!(created.status().is_success(), "{}", created.status());
    let body: Value = http
        .post(format!("{public}/oauth2/token"))
        .basic_auth(&id, Some(&secret))
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", "pipelines.run"),
            ("audience", RESOURCE),
        ])
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("token request")
        .json()
        .await
        .unwrap();
    let token = body["access_token"].as_str().expect("access_token");
    assert!(token.starts_with("ory_at_"), "an opaque Hydra token");
    token.to_owned()
}

async fn list_with(server: &Server, token: &str) -> common::Reply {
    server
        .client()
        .with_token(token)
        .request("tools/list", json!({}))
        .await
}

#[tokio::test]
async fn a_repeated_token_costs_one_introspection_call() {
    let Some((public, admin, hydra_issuer)) = hydra() else {
        return;
    };
    let a = Introspector::start(Some(format!("{admin}/admin/oauth2/introspect"))).await;
    let setup = setup(
        "per_peer = 0",
        &issuer_toml(&hydra_issuer, &a.url, &["ory_at_"]),
    );
    let server = serve(&setup).await;

    // The attacker's made-up token, again and again: the issuer hears it once.
    for _ in 0..5 {
        let reply = list_with(&server, "ory_at_made-up.by-an-attacker").await;
        assert_eq!(reply.status, 401);
    }
    assert_eq!(a.calls(), 1, "a refused token is remembered");

    // A good token is asked about once, then admitted from the cache.
    let good = hydra_opaque_token(&public, &admin).await;
    for _ in 0..5 {
        let reply = list_with(&server, &good).await;
        assert_eq!(reply.status, 200, "{}", reply.raw);
    }
    assert_eq!(a.calls(), 2, "an active token is remembered");
    let log = server.stderr_text();
    assert!(!log.contains(&good), "a token reached the log");
}

#[tokio::test]
async fn opaque_tokens_reach_their_own_issuer_only() {
    let Some((public, admin, hydra_issuer)) = hydra() else {
        return;
    };
    let a = Introspector::start(Some(format!("{admin}/admin/oauth2/introspect"))).await;
    let b = Introspector::start(None).await;
    // B comes first, claiming tokens that begin `b_`; Hydra (A) claims the rest.
    let issuers =
        issuer_toml(&b.issuer, &b.url, &["b_"]) + &issuer_toml(&hydra_issuer, &a.url, &[]);
    let setup = setup("per_peer = 0", &issuers);
    let server = serve(&setup).await;

    // B's tokens, good and bad, are never shown to A.
    let reply = list_with(&server, "b_good-token-of-bee").await;
    assert_eq!(reply.status, 200, "{}", reply.raw);
    let reply = list_with(&server, "b_revoked-token").await;
    assert_eq!(reply.status, 401);
    assert!(b.saw("b_good-token-of-bee") && b.saw("b_revoked-token"));
    assert_eq!(
        a.calls(),
        0,
        "A was shown B's tokens: {:?}",
        a.seen.lock().unwrap()
    );

    // A's tokens are never shown to B, and B being down does not fail them.
    b.down.store(true, Ordering::SeqCst);
    let good = hydra_opaque_token(&public, &admin).await;
    let reply = list_with(&server, &good).await;
    assert_eq!(reply.status, 200, "B down failed A's token: {}", reply.raw);
    assert!(!b.saw(&good), "B was shown A's token");
    assert_eq!(a.calls(), 1);
    // B's own new token, while B is down: 503 (retry), not 401.
    let reply = list_with(&server, "b_good-second").await;
    assert_eq!(reply.status, 503, "{}", reply.raw);
    assert_eq!(a.calls(), 1, "A was shown B's token while B was down");
}

/// A client whose connections come from `local` (another loopback address is
/// another peer).
fn client_from(local: IpAddr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(local)
        .timeout(LONG)
        .build()
        .unwrap()
}

async fn list_from(
    http: &reqwest::Client,
    server: &Server,
    token: &str,
) -> (u16, Value, Option<String>) {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {
        "_meta": common::modern_meta(true) } });
    let resp = http
        .post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/list")
        .bearer_auth(token)
        .body(body.to_string())
        .send()
        .await
        .expect("POST /mcp");
    let status = resp.status().as_u16();
    let retry = common::header(&resp, "retry-after");
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, body, retry)
}

#[tokio::test]
async fn failed_authentications_from_one_peer_trip_the_limit() {
    // B answers for every opaque token (no prefixes): each made-up token would
    // cost it one call.
    let b = Introspector::start(None).await;
    let setup = setup(
        "per_peer = 3\nwindow = \"1m\"",
        &issuer_toml(&b.issuer, &b.url, &[]),
    );
    let server = serve(&setup).await;
    let attacker = client_from(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let alice = Bearer::new("alice").token;

    for i in 0..3 {
        let (status, _, _) = list_from(&attacker, &server, &format!("guess-{i}")).await;
        assert_eq!(status, 401, "guess {i}");
    }
    let (status, _, _) = list_from(&attacker, &server, "wrong-static-token").await;
    assert_eq!(status, 429, "the fourth failure from one peer is refused");
    assert_eq!(b.calls(), 3, "the static guess cost no call");
    // Now refused before any token is looked at: a new guess costs B nothing,
    // and even a valid token from this peer waits out the window.
    let (status, body, retry) = list_from(&attacker, &server, "guess-4").await;
    assert_eq!(status, 429, "{body}");
    let retry: u64 = retry.expect("Retry-After").parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(body["error"]["code"], -32600, "{body}");
    assert_eq!(body["error"]["data"]["retryable"], true, "{body}");
    assert_eq!(b.calls(), 3, "a limited peer's token reached the issuer");
    let (status, _, _) = list_from(&attacker, &server, &alice).await;
    assert_eq!(status, 429);

    // Another peer address is not held to the attacker's count.
    let other = client_from(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
    let (status, body, _) = list_from(&other, &server, &alice).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.engine_calls().await, 0);
}
