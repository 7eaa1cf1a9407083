//! A stateful HTTP double of the parts of GitHub's REST API the GitHub engine uses,
//! for tests only (a dev-dependency, never compiled into the server): the engine
//! crate's own tests and taskgate's end-to-end tests, which run the server binary
//! against it.
//!
//! Its payloads are GitHub's published OpenAPI examples (the engine crate's
//! tests/fixtures, cut by cut.py), adjusted to the run at hand. It checks every request it gets (method,
//! path, headers, dispatch and review bodies) and records violations; tests drive
//! the runs' states explicitly and call [`Double::assert_clean`] at the end.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{json, Value};

/// The repository owner the double serves.
pub const OWNER: &str = "octo-org";
/// The repository the double serves.
pub const REPO: &str = "octo-repo";
/// The workflow file the double serves.
pub const WORKFLOW: &str = "deploy.yml";
/// The ref dispatches must name.
pub const REF: &str = "main";
/// The token every request must carry.
pub const TOKEN: &str = "github_pat_test_0123456789";
/// The GitHub App whose JWTs the token exchange accepts.
pub const APP_ID: &str = "424242";
/// The App installation the token exchange serves.
pub const INSTALLATION_ID: &str = "777";

/// The workflow file served at `.github/workflows/deploy.yml`.
pub const WORKFLOW_YAML: &str = r#"name: Deploy
run-name: "deploy ${{ inputs.taskgate_run }}"
on:
  workflow_dispatch:
    inputs:
      version:
        description: The version to deploy
        type: string
        required: true
      environment:
        type: choice
        options: [staging, production]
        default: staging
      dry_run:
        type: boolean
      replicas:
        type: number
      taskgate_run:
        type: string
      traceparent:
        description: The W3C trace context taskgate started the run under
        type: string
jobs:
  deploy:
    runs-on: ubuntu-latest
    environment: staging
    steps:
      - run: ./deploy.sh
        env:
          TRACEPARENT: ${{ inputs.traceparent }}
"#;

/// The input schema taskgate suggests for [`WORKFLOW_YAML`] (what
/// `taskgate check-config` prints for a tool without one). A unit test of the
/// engine crate checks that the engine suggests exactly this.
#[must_use]
pub fn suggested_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "version": {"type": "string", "description": "The version to deploy"},
            "environment": {"type": "string", "enum": ["staging", "production"], "default": "staging"},
            "dry_run": {"type": "boolean"},
            "replicas": {"type": "number"},
            "traceparent": {"type": "string", "description": "The W3C trace context taskgate started the run under"},
        },
        "required": ["version"],
        "additionalProperties": false,
    })
}

/// A published example from the engine crate's `tests/fixtures`.
///
/// # Panics
///
/// When the file is missing or not JSON.
pub fn fixture(name: &str) -> Value {
    // The engine crate's fixtures, beside this crate.
    let path = format!("{}/../tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn iso(epoch: u64) -> String {
    chrono::DateTime::from_timestamp(i64::try_from(epoch).unwrap(), 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// One request the double received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The method.
    pub method: String,
    /// The path.
    pub path: String,
    /// The query, decoded.
    pub query: BTreeMap<String, String>,
    /// The JSON body, if any.
    pub body: Option<Value>,
    /// The `If-None-Match` header, if any.
    pub if_none_match: Option<String>,
    /// True when it was answered 304 Not Modified (no rate budget spent).
    pub not_modified: bool,
}

impl Seen {
    /// `METHOD /path`.
    #[must_use]
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// A refusal to answer the next request with.
#[derive(Debug, Clone, Copy)]
pub enum Throttle {
    /// 403, `retry-after`, "secondary rate limit".
    Secondary {
        /// Seconds in `retry-after`.
        retry_after: u64,
    },
    /// 403 (or 429), `x-ratelimit-remaining: 0`, reset in `reset_in` seconds.
    Primary {
        /// 403 or 429.
        status: u16,
        /// Seconds until the reset.
        reset_in: u64,
    },
}

/// An outage: what the double does with every request until [`Double::heal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// 502 Bad Gateway (GitHub's proxy answering for a backend that is down).
    BadGateway,
    /// The request is accepted and never answered (a hung upstream).
    Hang,
}

#[derive(Default)]
struct State {
    runs: BTreeMap<u64, Value>,
    jobs: BTreeMap<u64, Value>,
    pending: BTreeMap<u64, Value>,
    next_id: u64,
    /// False: the server answers 400 to `return_run_details` (older GHES).
    run_details: bool,
    /// New runs stay out of listings for this many list requests.
    hide_from_lists: u32,
    seen: Vec<Seen>,
    violations: Vec<String>,
    limit: u64,
    remaining: u64,
    reset: u64,
    throttle: Option<Throttle>,
    reviews: Vec<Value>,
    token_exchanges: u32,
    /// How long every answer is held (a slow upstream).
    latency: std::time::Duration,
    /// The outage in force, if any.
    fault: Option<Fault>,
    /// Job logs by job id, as the download host serves them.
    logs: BTreeMap<u64, String>,
    /// `http://127.0.0.1:PORT` of the download host (another origin).
    blob_url: String,
    /// The `Range` header of every download, in order (`-` for none).
    downloads: Vec<String>,
    /// Workflows besides [`WORKFLOW`] (for `taskgate discover`).
    extra_workflows: Vec<ExtraWorkflow>,
}

/// A workflow file added with [`Double::add_workflow`].
#[derive(Debug, Clone)]
struct ExtraWorkflow {
    id: u64,
    file: String,
    name: String,
    state: String,
    yaml: String,
}

/// The double: a server on 127.0.0.1 and its shared state.
#[derive(Clone)]
pub struct Double {
    /// `http://127.0.0.1:PORT`: the `base_url` to configure.
    pub url: String,
    state: Arc<Mutex<State>>,
}

impl Double {
    /// Starts a double on a free port, served by a task of the current runtime.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start() -> Self {
        let state = Arc::new(Mutex::new(State {
            next_id: 30_433_642,
            run_details: true,
            limit: 5000,
            remaining: 5000,
            reset: now() + 3600,
            ..State::default()
        }));
        let shared = state.clone();
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let state = shared.clone();
                async move {
                    let latency = state.lock().unwrap().latency;
                    if !latency.is_zero() {
                        tokio::time::sleep(latency).await;
                    }
                    if let Some(answer) = outage(&state, &method, &uri).await {
                        return answer;
                    }
                    handle(&state, &method, &uri, &headers, &body)
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        // The host job-log redirects point at: another origin, as GitHub's
        // log storage is, which must never see GitHub credentials.
        let shared = state.clone();
        let blob = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap| {
            let state = shared.clone();
            async move { download(&state, &uri, &headers) }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        state.lock().unwrap().blob_url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, blob).await.unwrap() });
        Self { url, state }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// Makes the server refuse `return_run_details` with a 400 (older GHES).
    pub fn without_run_details(&self) {
        self.with(|s| s.run_details = false);
    }

    /// Keeps new runs out of the next `n` listings (GitHub lists them a moment late).
    pub fn hide_new_runs_from_lists(&self, n: u32) {
        self.with(|s| s.hide_from_lists = n);
    }

    /// Sets a run's status and conclusion.
    pub fn set_run(&self, id: u64, status: &str, conclusion: Option<&str>) {
        self.with(|s| {
            let run = s.runs.get_mut(&id).expect("no such run");
            run["status"] = json!(status);
            run["conclusion"] = json!(conclusion);
            run["updated_at"] = json!(iso(now()));
        });
    }

    /// Sets a run's jobs (the `jobs` array of the jobs answer).
    pub fn set_jobs(&self, id: u64, jobs: Value) {
        self.with(|s| s.jobs.insert(id, jobs));
    }

    /// Sets the log GitHub keeps for job `job_id` (served once the job, in some
    /// run's [`Double::set_jobs`], has completed).
    pub fn set_job_log(&self, job_id: u64, text: &str) {
        self.with(|s| s.logs.insert(job_id, text.to_owned()));
    }

    /// The `Range` header of every log download so far (`-` for none).
    pub fn downloads(&self) -> Vec<String> {
        self.with(|s| s.downloads.clone())
    }

    /// How many requests were answered 304 Not Modified.
    pub fn not_modified(&self) -> usize {
        self.with(|s| s.seen.iter().filter(|r| r.not_modified).count())
    }

    /// The rate budget left, as the double reports it.
    pub fn remaining(&self) -> u64 {
        self.with(|s| s.remaining)
    }

    /// Puts the run in `waiting` on the published pending deployment (environment
    /// "staging", id 161088068).
    pub fn wait_on_environment(&self, id: u64) {
        self.set_run(id, "waiting", None);
        self.with(|s| {
            s.pending
                .insert(id, fixture("pending-deployment-items.json"))
        });
    }

    /// Holds every answer for `latency` from now on (zero: answer at once).
    pub fn slow_down(&self, latency: std::time::Duration) {
        self.with(|s| s.latency = latency);
    }

    /// Answers every request with `fault` (each still recorded) until
    /// [`Double::heal`].
    pub fn fail_with(&self, fault: Fault) {
        self.with(|s| s.fault = Some(fault));
    }

    /// Ends the outage: requests are answered again (hung ones included).
    pub fn heal(&self) {
        self.with(|s| s.fault = None);
    }

    /// Answers the next request with a rate-limit refusal.
    pub fn throttle_next(&self, throttle: Throttle) {
        self.with(|s| s.throttle = Some(throttle));
    }

    /// Sets the remaining rate budget reported from now on.
    pub fn set_budget(&self, remaining: u64, reset_in: u64) {
        self.with(|s| {
            s.remaining = remaining;
            s.reset = now() + reset_in;
        });
    }

    /// The requests seen so far, as `METHOD /path` lines.
    pub fn lines(&self) -> Vec<String> {
        self.with(|s| s.seen.iter().map(Seen::line).collect())
    }

    /// The requests seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.with(|s| s.seen.clone())
    }

    /// Forgets the requests seen so far.
    pub fn clear_seen(&self) {
        self.with(|s| s.seen.clear());
    }

    /// The deployment reviews received.
    pub fn reviews(&self) -> Vec<Value> {
        self.with(|s| s.reviews.clone())
    }

    /// The ids of the runs created so far.
    pub fn run_ids(&self) -> Vec<u64> {
        self.with(|s| s.runs.keys().copied().collect())
    }

    /// The run as the double holds it.
    pub fn run(&self, id: u64) -> Value {
        self.with(|s| s.runs[&id].clone())
    }

    /// How many GitHub App installation tokens were minted.
    pub fn token_exchanges(&self) -> u32 {
        self.with(|s| s.token_exchanges)
    }

    /// Adds a workflow file `.github/workflows/FILE` named `name` in `state`
    /// (`active`, `disabled_manually`, …) holding `yaml`: listed with the
    /// repository's workflows, read by file name and through the contents API.
    /// It cannot be dispatched.
    pub fn add_workflow(&self, file: &str, name: &str, state: &str, yaml: &str) {
        self.with(|s| {
            let id = 269_289 + s.extra_workflows.len() as u64;
            s.extra_workflows.push(ExtraWorkflow {
                id,
                file: file.to_owned(),
                name: name.to_owned(),
                state: state.to_owned(),
                yaml: yaml.to_owned(),
            });
        });
    }

    /// Panics with every violation recorded.
    pub fn assert_clean(&self) {
        let v = self.with(|s| s.violations.clone());
        assert!(
            v.is_empty(),
            "the double saw bad requests:\n{}",
            v.join("\n")
        );
    }
}

/// The answer of the outage in force (the request is recorded): a 502, or
/// none until the double is healed. `None` when the request is to be handled.
async fn outage(state: &Mutex<State>, method: &Method, uri: &Uri) -> Option<Response> {
    let fault = {
        let mut s = state.lock().unwrap();
        let fault = s.fault?;
        s.seen.push(Seen {
            method: method.to_string(),
            path: uri.path().to_owned(),
            query: BTreeMap::new(),
            body: None,
            if_none_match: None,
            not_modified: false,
        });
        fault
    };
    match fault {
        Fault::BadGateway => Some(
            (
                StatusCode::BAD_GATEWAY,
                [("content-type", "text/html")],
                "<html><body><h1>502 Bad Gateway</h1></body></html>",
            )
                .into_response(),
        ),
        Fault::Hang => {
            while state.lock().unwrap().fault == Some(Fault::Hang) {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            // Healed: the client has long given up; answer like GitHub's
            // proxy would for a request it dropped.
            Some(StatusCode::GATEWAY_TIMEOUT.into_response())
        }
    }
}

fn answer(status: StatusCode, body: &Value) -> (StatusCode, Value) {
    (status, body.clone())
}

fn not_found() -> (StatusCode, Value) {
    (
        StatusCode::NOT_FOUND,
        json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}),
    )
}

fn handle(
    state: &Mutex<State>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let mut s = state.lock().unwrap();
    let path = uri.path().to_owned();
    let query: BTreeMap<String, String> = uri
        .query()
        .map(|q| {
            q.split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), percent_decode(v)))
                .collect()
        })
        .unwrap_or_default();
    let parsed_body = if body.is_empty() {
        None
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(v) => Some(v),
            Err(e) => {
                s.violations
                    .push(format!("{method} {path}: body is not JSON: {e}"));
                None
            }
        }
    };
    let if_none_match = headers
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    s.seen.push(Seen {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        body: parsed_body.clone(),
        if_none_match: if_none_match.clone(),
        not_modified: false,
    });

    // The GitHub App token exchange: a JWT signed by the App's key, answered with
    // an installation token (the one every later request must carry).
    if method == Method::POST && path.starts_with("/app/installations/") {
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let jwt = auth.strip_prefix("Bearer ").unwrap_or("");
        let claims = jwt
            .split('.')
            .nth(1)
            .and_then(|c| {
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(c)
                    .ok()
            })
            .and_then(|c| serde_json::from_slice::<Value>(&c).ok());
        let app = claims.as_ref().and_then(|c| {
            c["iss"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| c["iss"].as_u64().map(|n| n.to_string()))
        });
        if jwt.split('.').count() != 3 || app.as_deref() != Some(APP_ID) {
            s.violations.push(format!(
                "POST {path}: not a JWT of app {APP_ID}: {claims:?}"
            ));
        }
        if path != format!("/app/installations/{INSTALLATION_ID}/access_tokens") {
            s.violations
                .push(format!("POST {path}: another installation"));
        }
        s.token_exchanges += 1;
        return (
            StatusCode::CREATED,
            [("content-type", "application/json; charset=utf-8")],
            json!({"token": TOKEN, "expires_at": iso(now() + 3600), "permissions": {"actions": "write"}})
                .to_string(),
        )
            .into_response();
    }

    // Headers every request must carry.
    let expect = [
        ("authorization", format!("Bearer {TOKEN}")),
        ("x-github-api-version", "2022-11-28".to_owned()),
        ("accept", "application/vnd.github+json".to_owned()),
    ];
    for (name, want) in expect {
        let got: Vec<&str> = headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        if got != [want.as_str()] {
            let shown = if name == "authorization" {
                "<redacted>".to_owned()
            } else {
                format!("{got:?}")
            };
            s.violations.push(format!(
                "{method} {path}: header {name} is {shown}, want one {want:?}"
            ));
        }
    }
    if parsed_body.is_some()
        && headers.get("content-type").and_then(|v| v.to_str().ok()) != Some("application/json")
    {
        s.violations.push(format!(
            "{method} {path}: a JSON body without content-type application/json"
        ));
    }

    let throttle = s.throttle.take();
    let (status, reply) = match throttle {
        Some(Throttle::Secondary { .. }) => (
            StatusCode::FORBIDDEN,
            json!({
                "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
            }),
        ),
        Some(Throttle::Primary { status, .. }) => (
            StatusCode::from_u16(status).unwrap(),
            json!({
                "message": "API rate limit exceeded for user ID 1.",
                "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
            }),
        ),
        None => route(&mut s, method, &path, &query, parsed_body.as_ref()),
    };
    // GitHub tags its GET answers; a request naming the current tag in
    // If-None-Match is answered 304 and spends no rate budget.
    let text = reply.to_string();
    let tag = (method == Method::GET && status == StatusCode::OK).then(|| etag_of(&text));
    let not_modified = tag.is_some() && tag == if_none_match;
    if !not_modified {
        s.remaining = s.remaining.saturating_sub(1);
    }
    if let Some(last) = s.seen.last_mut() {
        last.not_modified = not_modified;
    }
    let mut rate_headers = vec![
        ("x-ratelimit-limit", s.limit.to_string()),
        ("x-ratelimit-remaining", s.remaining.to_string()),
        ("x-ratelimit-reset", s.reset.to_string()),
        ("x-ratelimit-used", (s.limit - s.remaining).to_string()),
        ("x-ratelimit-resource", "core".to_owned()),
    ];
    match throttle {
        Some(Throttle::Secondary { retry_after }) => {
            rate_headers.push(("retry-after", retry_after.to_string()));
        }
        Some(Throttle::Primary { reset_in, .. }) => {
            rate_headers[1].1 = "0".to_owned();
            rate_headers[2].1 = (now() + reset_in).to_string();
        }
        None => {}
    }

    let mut response = if not_modified {
        StatusCode::NOT_MODIFIED.into_response()
    } else if status == StatusCode::NO_CONTENT {
        status.into_response()
    } else if status == StatusCode::FOUND {
        let mut r = status.into_response();
        r.headers_mut().insert(
            "location",
            reply["location"].as_str().unwrap().parse().unwrap(),
        );
        r
    } else {
        (
            status,
            [("content-type", "application/json; charset=utf-8")],
            text,
        )
            .into_response()
    };
    if let Some(tag) = tag {
        response.headers_mut().insert("etag", tag.parse().unwrap());
    }
    for (k, v) in rate_headers {
        response.headers_mut().insert(k, v.parse().unwrap());
    }
    response
}

/// A weak ETag of an answer's body, as GitHub writes them (`W/"…"`).
fn etag_of(body: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut h);
    format!("W/\"{:016x}\"", h.finish())
}

/// The download host: a job's log by byte range (206 with `Content-Range`,
/// 416 past its end), or whole without a `Range` header. It refuses (and
/// records as a violation) a request carrying credentials.
fn download(state: &Mutex<State>, uri: &Uri, headers: &HeaderMap) -> Response {
    let mut s = state.lock().unwrap();
    let range = headers
        .get("range")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_owned();
    s.downloads.push(range.clone());
    if headers.contains_key("authorization") {
        s.violations
            .push(format!("GET {uri}: a log download carries credentials"));
        return StatusCode::FORBIDDEN.into_response();
    }
    let log = uri
        .path()
        .strip_prefix("/logs/")
        .and_then(|id| id.parse::<u64>().ok())
        .and_then(|id| s.logs.get(&id).cloned());
    let Some(log) = log else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let len = log.len();
    let Some(spec) = range.strip_prefix("bytes=") else {
        return (StatusCode::OK, [("content-type", "text/plain")], log).into_response();
    };
    let (from, to) = spec.split_once('-').unwrap();
    let from: usize = from.parse().unwrap();
    if from >= len {
        return (
            StatusCode::RANGE_NOT_SATISFIABLE,
            [("content-range", format!("bytes */{len}"))],
        )
            .into_response();
    }
    let to = to.parse::<usize>().map_or(len - 1, |t| t.min(len - 1));
    (
        StatusCode::PARTIAL_CONTENT,
        [
            ("content-type", "text/plain".to_owned()),
            ("content-range", format!("bytes {from}-{to}/{len}")),
        ],
        log.as_bytes()[from..=to].to_vec(),
    )
        .into_response()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
            out.push(u8::from_str_radix(hex, 16).unwrap());
            i += 3;
        } else {
            out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

fn route(
    s: &mut State,
    method: &Method,
    path: &str,
    query: &BTreeMap<String, String>,
    body: Option<&Value>,
) -> (StatusCode, Value) {
    if path == "/rate_limit" && method == Method::GET {
        return answer(
            StatusCode::OK,
            &json!({"resources": {"core": {"limit": s.limit, "remaining": s.remaining, "reset": s.reset, "used": s.limit - s.remaining}}}),
        );
    }
    // The repositories a token (`/user/repos`) or an App installation sees,
    // and the repository itself: the one repository the double serves.
    match (method.as_str(), path) {
        ("GET", "/user/repos") => {
            let mut items = fixture("repository-items.json");
            items[0] = this_repository(&items[0]);
            return answer(StatusCode::OK, &json!([items[0].clone()]));
        }
        ("GET", "/installation/repositories") => {
            let mut page = fixture("installation-repositories.json");
            let repo = this_repository(&page["repositories"][0]);
            page["repositories"] = json!([repo]);
            page["total_count"] = json!(1);
            return answer(StatusCode::OK, &page);
        }
        ("GET", p) if p == format!("/repos/{OWNER}/{REPO}") => {
            return answer(
                StatusCode::OK,
                &this_repository(&fixture("full-repository.json")),
            );
        }
        _ => {}
    }
    let prefix = format!("/repos/{OWNER}/{REPO}/");
    let Some(rest) = path.strip_prefix(&prefix) else {
        s.violations
            .push(format!("{method} {path}: not this repository"));
        return not_found();
    };
    let parts: Vec<&str> = rest.split('/').collect();
    match (method.as_str(), parts.as_slice()) {
        ("POST", ["actions", "workflows", wf, "dispatches"]) => dispatch(s, wf, body),
        ("GET", ["actions", "workflows", wf, "runs"]) => list_runs(s, wf, query),
        ("GET", ["actions", "workflows"]) => {
            let mut page = fixture("workflow-paginated.json");
            let mut all = vec![deploy_workflow()];
            all.extend(s.extra_workflows.iter().map(ExtraWorkflow::payload));
            page["total_count"] = json!(all.len());
            page["workflows"] = json!(all);
            answer(StatusCode::OK, &page)
        }
        ("GET", ["environments"]) => answer(StatusCode::OK, &fixture("environments.json")),
        ("GET", ["actions", "workflows", wf]) => {
            if *wf == WORKFLOW {
                return answer(StatusCode::OK, &deploy_workflow());
            }
            match s.extra_workflows.iter().find(|w| w.file == *wf) {
                Some(extra) => answer(StatusCode::OK, &extra.payload()),
                None => not_found(),
            }
        }
        ("GET", ["contents", ".github", "workflows", file]) => {
            if query.get("ref").map(String::as_str) != Some(REF) {
                s.violations
                    .push(format!("GET {path}: ref is {:?}", query.get("ref")));
            }
            let yaml = if *file == WORKFLOW {
                WORKFLOW_YAML.to_owned()
            } else {
                match s.extra_workflows.iter().find(|w| w.file == *file) {
                    Some(extra) => extra.yaml.clone(),
                    None => return not_found(),
                }
            };
            let mut c = fixture("content-file.json");
            let encoded = base64::engine::general_purpose::STANDARD.encode(yaml);
            // GitHub wraps the base64 text in lines.
            let wrapped: Vec<String> = encoded
                .as_bytes()
                .chunks(60)
                .map(|c| String::from_utf8(c.to_vec()).unwrap())
                .collect();
            c["content"] = json!(wrapped.join("\n") + "\n");
            c["name"] = json!(file);
            c["path"] = json!(format!(".github/workflows/{file}"));
            answer(StatusCode::OK, &c)
        }
        ("GET", ["actions", "jobs", job, "logs"]) => job_log(s, job),
        ("GET", ["actions", "runs", id]) => {
            match id.parse().ok().and_then(|id: u64| s.runs.get(&id)) {
                Some(run) => answer(StatusCode::OK, run),
                None => not_found(),
            }
        }
        ("GET", ["actions", "runs", id, "jobs"]) => {
            let Some(id) = known(s, id) else {
                return not_found();
            };
            let jobs = s
                .jobs
                .get(&id)
                .cloned()
                .unwrap_or_else(|| default_jobs(s, id));
            let count = jobs.as_array().map_or(0, Vec::len);
            answer(StatusCode::OK, &json!({"total_count": count, "jobs": jobs}))
        }
        ("GET", ["actions", "runs", id, "artifacts"]) => {
            let Some(_) = known(s, id) else {
                return not_found();
            };
            answer(StatusCode::OK, &fixture("artifact-paginated.json"))
        }
        ("GET", ["actions", "runs", id, "pending_deployments"]) => {
            let Some(id) = known(s, id) else {
                return not_found();
            };
            answer(
                StatusCode::OK,
                &s.pending.get(&id).cloned().unwrap_or(json!([])),
            )
        }
        ("POST", ["actions", "runs", id, "pending_deployments"]) => {
            let Some(id) = known(s, id) else {
                return not_found();
            };
            review(s, id, body)
        }
        ("POST", ["actions", "runs", id, "cancel"]) => {
            let Some(id) = known(s, id) else {
                return not_found();
            };
            if body.is_some() {
                s.violations
                    .push(format!("POST {path}: cancel carries a body"));
            }
            let run = s.runs.get_mut(&id).unwrap();
            if run["status"] == "completed" {
                return answer(
                    StatusCode::CONFLICT,
                    &json!({"message": "Cannot cancel a workflow run that is completed.", "documentation_url": "https://docs.github.com/rest/actions/workflow-runs#cancel-a-workflow-run"}),
                );
            }
            run["status"] = json!("completed");
            run["conclusion"] = json!("cancelled");
            answer(StatusCode::ACCEPTED, &json!({}))
        }
        _ => {
            s.violations
                .push(format!("{method} {path}: unexpected request"));
            not_found()
        }
    }
}

/// The published workflow, as the double's deploy workflow.
fn deploy_workflow() -> Value {
    let mut w = fixture("workflow.json");
    w["name"] = json!("Deploy");
    w["path"] = json!(format!(".github/workflows/{WORKFLOW}"));
    w
}

impl ExtraWorkflow {
    /// The published workflow, as this one.
    fn payload(&self) -> Value {
        let mut w = fixture("workflow.json");
        w["id"] = json!(self.id);
        w["name"] = json!(self.name);
        w["path"] = json!(format!(".github/workflows/{}", self.file));
        w["state"] = json!(self.state);
        w["url"] = json!(format!(
            "https://api.github.com/repos/{OWNER}/{REPO}/actions/workflows/{}",
            self.id
        ));
        w
    }
}

/// A published repository, as the one the double serves (its default branch
/// [`REF`]).
fn this_repository(published: &Value) -> Value {
    let mut r = published.clone();
    r["name"] = json!(REPO);
    r["full_name"] = json!(format!("{OWNER}/{REPO}"));
    r["owner"]["login"] = json!(OWNER);
    r["default_branch"] = json!(REF);
    r["archived"] = json!(false);
    r
}

/// A job's log: a 302 to a short-lived URL of the download host, for a job
/// that completed; 404 for a job the double does not know. GitHub keeps no
/// log to download while a job runs: asking then is a violation.
fn job_log(s: &mut State, job: &str) -> (StatusCode, Value) {
    let Ok(id) = job.parse::<u64>() else {
        return not_found();
    };
    let found = s
        .jobs
        .values()
        .filter_map(Value::as_array)
        .flatten()
        .find(|j| j["id"] == id)
        .cloned();
    let Some(found) = found else {
        return not_found();
    };
    if found["status"] != "completed" {
        s.violations.push(format!(
            "GET …/actions/jobs/{id}/logs: the job has not completed"
        ));
        return not_found();
    }
    (
        StatusCode::FOUND,
        json!({"location": format!("{}/logs/{id}?urlExpires={}&urlSigningMethod=HMACV1&urlSignature=c2lnbmVk", s.blob_url, iso(now() + 60))}),
    )
}

fn known(s: &State, id: &str) -> Option<u64> {
    id.parse().ok().filter(|id| s.runs.contains_key(id))
}

/// The published job, adjusted to the run's state.
fn default_jobs(s: &State, id: u64) -> Value {
    let run = &s.runs[&id];
    let mut jobs = fixture("job-paginated.json")["jobs"].clone();
    let job = &mut jobs[0];
    job["run_id"] = json!(id);
    match run["status"].as_str() {
        Some("completed") => {
            let conclusion = run["conclusion"].clone();
            job["conclusion"] = conclusion.clone();
            if conclusion != "success" {
                job["steps"][6]["conclusion"] = conclusion;
            }
        }
        _ => {
            job["status"] = json!("in_progress");
            job["conclusion"] = Value::Null;
            for (i, step) in job["steps"].as_array_mut().unwrap().iter_mut().enumerate() {
                if i >= 2 {
                    step["status"] = json!(if i == 6 { "in_progress" } else { "queued" });
                    step["conclusion"] = Value::Null;
                }
            }
            // Steps before the running one are done.
            for i in 2..6 {
                job["steps"][i]["status"] = json!("completed");
                job["steps"][i]["conclusion"] = json!("success");
            }
        }
    }
    jobs
}

fn dispatch(s: &mut State, wf: &str, body: Option<&Value>) -> (StatusCode, Value) {
    if wf != WORKFLOW {
        return not_found();
    }
    let Some(body) = body else {
        s.violations.push("dispatch without a body".to_owned());
        return answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({"message": "Invalid request."}),
        );
    };
    let Some(obj) = body.as_object() else {
        s.violations
            .push("dispatch body is not an object".to_owned());
        return answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({"message": "Invalid request."}),
        );
    };
    for key in obj.keys() {
        if !["ref", "inputs", "return_run_details"].contains(&key.as_str()) {
            s.violations
                .push(format!("dispatch body has an unknown key {key:?}"));
        }
    }
    if body["ref"] != REF {
        s.violations
            .push(format!("dispatch ref is {}, want {REF:?}", body["ref"]));
    }
    let inputs = body.get("inputs").cloned().unwrap_or(json!({}));
    match inputs.as_object() {
        Some(map) => {
            for (k, v) in map {
                if !v.is_string() {
                    s.violations
                        .push(format!("dispatch input {k:?} is not a string: {v}"));
                }
            }
            if map.len() > 25 {
                s.violations.push("more than 25 inputs".to_owned());
            }
        }
        None => s
            .violations
            .push("dispatch inputs is not an object".to_owned()),
    }
    let wants_details = match body.get("return_run_details") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            s.violations
                .push(format!("return_run_details is not a boolean: {other}"));
            false
        }
    };
    if wants_details && !s.run_details {
        return answer(
            StatusCode::BAD_REQUEST,
            &json!({"message": "Invalid request.\n\n\"return_run_details\" is not a permitted key.", "documentation_url": "https://docs.github.com/enterprise-server@3.17/rest/actions/workflows#create-a-workflow-dispatch-event"}),
        );
    }
    // Inputs the workflow does not declare are refused, as GitHub does.
    let declared = [
        "version",
        "environment",
        "dry_run",
        "replicas",
        "taskgate_run",
        "traceparent",
    ];
    let unexpected: Vec<&String> = inputs
        .as_object()
        .map(|m| {
            m.keys()
                .filter(|k| !declared.contains(&k.as_str()))
                .collect()
        })
        .unwrap_or_default();
    if !unexpected.is_empty() {
        return answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({"message": format!("Unexpected inputs provided: {unexpected:?}")}),
        );
    }
    if inputs.get("version").is_none() {
        return answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({"message": "Required input 'version' not provided"}),
        );
    }
    let id = s.next_id;
    s.next_id += 1;
    let mut run = fixture("workflow-run.json");
    run["id"] = json!(id);
    run["name"] = json!("Deploy");
    run["event"] = json!("workflow_dispatch");
    run["head_branch"] = json!(REF);
    run["display_title"] = json!(match inputs.get("taskgate_run").and_then(Value::as_str) {
        Some(name) => format!("deploy {name}"),
        None => "Deploy".to_owned(),
    });
    run["status"] = json!("queued");
    run["conclusion"] = Value::Null;
    run["url"] = json!(format!(
        "https://api.github.com/repos/{OWNER}/{REPO}/actions/runs/{id}"
    ));
    run["html_url"] = json!(format!(
        "https://github.com/{OWNER}/{REPO}/actions/runs/{id}"
    ));
    run["created_at"] = json!(iso(now()));
    run["updated_at"] = json!(iso(now()));
    run["taskgate_hidden"] = json!(s.hide_from_lists);
    s.runs.insert(id, run);
    if wants_details {
        let mut d = fixture("workflow-dispatch-response.json");
        d["workflow_run_id"] = json!(id);
        d["run_url"] = json!(format!(
            "https://api.github.com/repos/{OWNER}/{REPO}/actions/runs/{id}"
        ));
        d["html_url"] = json!(format!(
            "https://github.com/{OWNER}/{REPO}/actions/runs/{id}"
        ));
        answer(StatusCode::OK, &d)
    } else {
        (StatusCode::NO_CONTENT, Value::Null)
    }
}

fn list_runs(s: &mut State, wf: &str, query: &BTreeMap<String, String>) -> (StatusCode, Value) {
    if wf != WORKFLOW {
        return not_found();
    }
    if query.get("event").map(String::as_str) != Some("workflow_dispatch") {
        s.violations.push(format!(
            "run listing without event=workflow_dispatch: {query:?}"
        ));
    }
    let since = match query.get("created") {
        None => None,
        Some(c) => match c
            .strip_prefix(">=")
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        {
            Some(t) => Some(t.timestamp()),
            None => {
                s.violations.push(format!("bad created filter {c:?}"));
                None
            }
        },
    };
    let mut out = Vec::new();
    for run in s.runs.values_mut().rev() {
        let hidden = run["taskgate_hidden"].as_u64().unwrap_or(0);
        if hidden > 0 {
            run["taskgate_hidden"] = json!(hidden - 1);
            continue;
        }
        let created = chrono::DateTime::parse_from_rfc3339(run["created_at"].as_str().unwrap())
            .unwrap()
            .timestamp();
        if since.is_some_and(|since| created < since) || run["event"] != "workflow_dispatch" {
            continue;
        }
        let mut shown = run.clone();
        shown.as_object_mut().unwrap().remove("taskgate_hidden");
        out.push(shown);
    }
    answer(
        StatusCode::OK,
        &json!({"total_count": out.len(), "workflow_runs": out}),
    )
}

fn review(s: &mut State, id: u64, body: Option<&Value>) -> (StatusCode, Value) {
    let Some(body) = body else {
        s.violations.push("review without a body".to_owned());
        return answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({"message": "Invalid request."}),
        );
    };
    let ids: Vec<u64> = body["environment_ids"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let state = body["state"].as_str().unwrap_or("");
    if ids.is_empty() || !["approved", "rejected"].contains(&state) || !body["comment"].is_string()
    {
        s.violations.push(format!("bad review body {body}"));
        return answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({"message": "Invalid request."}),
        );
    }
    let pending: Vec<u64> = s
        .pending
        .get(&id)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|p| p["environment"]["id"].as_u64())
                .collect()
        })
        .unwrap_or_default();
    if ids.iter().any(|e| !pending.contains(e)) {
        return answer(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({"message": "No pending deployment requests to approve or reject"}),
        );
    }
    s.reviews.push(body.clone());
    s.pending.remove(&id);
    let run = s.runs.get_mut(&id).unwrap();
    if state == "approved" {
        run["status"] = json!("in_progress");
    } else {
        run["status"] = json!("completed");
        run["conclusion"] = json!("failure");
    }
    answer(StatusCode::OK, &fixture("deployment-items.json"))
}
