//! The only module that talks to Airflow: one HTTP client with connect and read
//! timeouts, the access token (minted at `/auth/token`, renewed before it expires and
//! once when Airflow refuses it), [`map_error`], the one place Airflow's refusals
//! become [`EngineError`]s, and a pipeline's REST calls (paths, runs, task
//! instances, HITL questions, XComs, logs).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;
use taskgate_engine::http::{percent_encode, Answer};
use taskgate_engine::NativeRef;
use taskgate_engine::{ConfigError, EngineError};
use tokio::sync::Mutex;

use crate::config::{Auth, Validated};
use crate::logs::DagTasks;
use crate::translate::{self, DagRun, HitlDetail, HitlDetails, TaskInstance, TaskInstances};
use crate::{AirflowPipeline, TASK_PAGE};

/// How long before its expiry a minted token is renewed.
const RENEW_BEFORE: Duration = Duration::from_secs(60);

/// The lifetime assumed for a token whose expiry cannot be read.
const ASSUMED_LIFETIME: Duration = Duration::from_secs(10 * 60);

/// Who answers, as messages name it.
const UPSTREAM: &str = "Airflow";

/// Airflow's clock when it answered (the `Date` header).
pub(crate) fn answer_date(answer: &Answer) -> Option<SystemTime> {
    let value = answer.headers.get(reqwest::header::DATE)?.to_str().ok()?;
    httpdate::parse_http_date(value).ok()
}

/// A token minted at the token endpoint. `Debug` never shows it.
#[derive(Clone)]
struct Minted {
    token: String,
    renew_at: u64,
}

impl std::fmt::Debug for Minted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Minted")
            .field("token", &"<redacted>")
            .field("renew_at", &self.renew_at)
            .finish()
    }
}

/// An Airflow REST client shared by an engine's pipelines.
#[derive(Clone)]
pub(crate) struct Client {
    http: reqwest::Client,
    base_url: String,
    auth: Arc<Auth>,
    minted: Arc<Mutex<Option<Minted>>>,
    calls: Arc<AtomicU64>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

fn now_epoch() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The `exp` claim of a JWT, without checking its signature (Airflow does that).
pub(crate) fn jwt_expiry(token: &str) -> Option<u64> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice::<Value>(&bytes)
        .ok()?
        .get("exp")?
        .as_u64()
}

/// Airflow's explanation in an error body (`detail`, a string or an object).
pub(crate) fn detail(body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(v) => match v.get("detail") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Object(o)) => o
                .get("reason")
                .or_else(|| o.get("message"))
                .and_then(Value::as_str)
                .map_or_else(|| Value::Object(o.clone()).to_string(), str::to_owned),
            Some(other) => other.to_string(),
            None => body.chars().take(200).collect(),
        },
        Err(_) => body.chars().take(200).collect(),
    }
}

/// Maps a non-2xx answer to an [`EngineError`] with the shared mapping
/// ([`taskgate_engine::http::status_error`]; `action` names the Airflow permission
/// the request needs), Airflow's `detail` being the message.
pub(crate) fn map_error(answer: &Answer, action: &str) -> EngineError {
    answer.error(action, detail(&answer.body))
}

/// A refusal that a fresh token may cure: Airflow answers 401 without a token and
/// 403 "Invalid JWT token" for an expired or foreign one.
fn token_refused(answer: &Answer) -> bool {
    answer.status == 401
        || (answer.status == 403 && detail(&answer.body).to_ascii_lowercase().contains("token"))
}

impl Client {
    /// Builds the client. No request is made.
    pub(crate) fn new(settings: &Validated) -> Result<Self, ConfigError> {
        let http = reqwest::Client::builder()
            .use_rustls_tls()
            .danger_accept_invalid_certs(!settings.tls_verify)
            .connect_timeout(settings.connect_timeout)
            .timeout(settings.read_timeout)
            .user_agent(concat!("taskgate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConfigError::new("", format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            http,
            base_url: settings.base_url.clone(),
            auth: Arc::new(settings.auth.clone()),
            minted: Arc::new(Mutex::new(None)),
            calls: Arc::new(AtomicU64::new(0)),
        })
    }

    /// How many HTTP requests this client sent (token requests included).
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    async fn send_raw(
        &self,
        method: Method,
        url: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Answer, EngineError> {
        Ok(self
            .send_bounded_raw(method, url, token, body, None)
            .await?
            .0)
    }

    /// Sends one request; reads at most `max_bytes` of the answer's body when
    /// set (then also says whether the body was cut there).
    async fn send_bounded_raw(
        &self,
        method: Method,
        url: &str,
        token: Option<&str>,
        body: Option<&Value>,
        max_bytes: Option<usize>,
    ) -> Result<(Answer, bool), EngineError> {
        let mut request = self
            .http
            .request(method.clone(), url)
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        self.calls.fetch_add(1, Ordering::Relaxed);
        let response = request.send().await.map_err(|e| {
            EngineError::unavailable(
                format!("Airflow could not be reached ({method} request)"),
                e.without_url(),
            )
        })?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let reading = |e: reqwest::Error| {
            EngineError::unavailable("reading Airflow's answer failed", e.without_url())
        };
        let (body, cut) = match max_bytes {
            None => (response.text().await.map_err(reading)?, false),
            Some(max) => {
                let mut response = response;
                let mut bytes: Vec<u8> = Vec::new();
                let mut cut = false;
                while let Some(chunk) = response.chunk().await.map_err(reading)? {
                    bytes.extend_from_slice(&chunk);
                    if bytes.len() >= max {
                        // The rest is left unread (the connection is dropped). A
                        // body of exactly `max` bytes counts as cut: its complete
                        // entries are read all the same.
                        cut = true;
                        bytes.truncate(max);
                        break;
                    }
                }
                (String::from_utf8_lossy(&bytes).into_owned(), cut)
            }
        };
        Ok((
            Answer {
                upstream: UPSTREAM,
                status,
                headers,
                body,
            },
            cut,
        ))
    }

    /// The bearer token to send: the static one, or a minted one still valid, or a
    /// freshly minted one. `refresh` forgets the minted one first.
    async fn token(&self, refresh: bool) -> Result<String, EngineError> {
        let (username, password) = match self.auth.as_ref() {
            Auth::Token(token) => return Ok(token.clone()),
            Auth::Password { username, password } => (username, password),
        };
        let mut minted = self.minted.lock().await;
        if refresh {
            *minted = None;
        }
        if let Some(m) = minted.as_ref() {
            if now_epoch() < m.renew_at {
                return Ok(m.token.clone());
            }
        }
        let body = serde_json::json!({"username": username, "password": password});
        let answer = self
            .send_raw(
                Method::POST,
                &format!("{}/auth/token", self.base_url),
                None,
                Some(&body),
            )
            .await?;
        if !answer.ok() {
            let mut e = map_error(&answer, "authentication");
            if let EngineError::PermissionDenied { action, .. } = &mut e {
                "authentication".clone_into(action);
            }
            if answer.status == 404 {
                return Err(EngineError::PermissionDenied {
                    action: "authentication".to_owned(),
                    message: "Airflow has no token endpoint at /auth/token (another auth manager?); use token_env or token_file".to_owned(),
                });
            }
            return Err(e);
        }
        let token = answer
            .json::<Value>()?
            .get("access_token")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                EngineError::internal("Airflow's token endpoint returned no access_token")
            })?;
        let expiry = jwt_expiry(&token).unwrap_or_else(|| now_epoch() + ASSUMED_LIFETIME.as_secs());
        let renew_at = expiry
            .saturating_sub(RENEW_BEFORE.as_secs())
            .max(now_epoch() + 1);
        tracing::debug!("minted an Airflow access token");
        *minted = Some(Minted {
            token: token.clone(),
            renew_at,
        });
        Ok(token)
    }

    /// Sends one request to `path` (under the base URL, such as `/api/v2/dags/x`) and
    /// returns Airflow's answer whatever its status. A refused minted token is renewed
    /// once.
    ///
    /// # Errors
    ///
    /// [`EngineError::Unavailable`] when Airflow cannot be reached; the errors of
    /// minting a token.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, EngineError> {
        let url = format!("{}{path}", self.base_url);
        let token = self.token(false).await?;
        let answer = self
            .send_raw(method.clone(), &url, Some(&token), body)
            .await?;
        tracing::debug!(%method, path, status = answer.status, "airflow request");
        if token_refused(&answer) && matches!(self.auth.as_ref(), Auth::Password { .. }) {
            let token = self.token(true).await?;
            return self.send_raw(method, &url, Some(&token), body).await;
        }
        Ok(answer)
    }

    /// As [`Client::send`] for a GET, reading at most `max_bytes` of the answer's
    /// body; also says whether the body was cut there.
    ///
    /// # Errors
    ///
    /// As [`Client::send`].
    pub(crate) async fn get_bounded(
        &self,
        path: &str,
        max_bytes: usize,
    ) -> Result<(Answer, bool), EngineError> {
        let url = format!("{}{path}", self.base_url);
        let token = self.token(false).await?;
        let sent = self
            .send_bounded_raw(Method::GET, &url, Some(&token), None, Some(max_bytes))
            .await?;
        tracing::debug!(path = %path.split('?').next().unwrap_or_default(), status = sent.0.status, cut = sent.1, "airflow log request");
        if token_refused(&sent.0) && matches!(self.auth.as_ref(), Auth::Password { .. }) {
            let token = self.token(true).await?;
            return self
                .send_bounded_raw(Method::GET, &url, Some(&token), None, Some(max_bytes))
                .await;
        }
        Ok(sent)
    }

    /// As [`Client::send`], then maps any non-2xx answer with [`map_error`] (`action`
    /// names the Airflow permission the request needs) and parses the body.
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        action: &str,
    ) -> Result<T, EngineError> {
        Ok(self.call_dated(method, path, body, action).await?.0)
    }

    /// As [`Client::call`], also returning Airflow's clock at the answer.
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub(crate) async fn call_dated<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        action: &str,
    ) -> Result<(T, Option<SystemTime>), EngineError> {
        let answer = self.send(method, path, body).await?;
        if !answer.ok() {
            return Err(map_error(&answer, action));
        }
        Ok((answer.json()?, answer_date(&answer)))
    }
}

/// A read of a try's log: Airflow's answer, perhaps cut at the bound.
#[derive(Debug)]
pub(crate) struct TryLog {
    /// The answer's body (its start, when `cut`).
    pub body: String,
    /// The body was cut at the bound.
    pub cut: bool,
    /// Bytes read.
    pub bytes: usize,
}

/// The Airflow permissions (as Airflow's auth managers name resources) each request
/// needs, for permission errors.
pub(crate) mod action {
    pub(crate) const DAG_READ: &str = "DAGs: read";
    pub(crate) const RUN_CREATE: &str = "DAG Runs: create";
    pub(crate) const RUN_READ: &str = "DAG Runs: read";
    pub(crate) const RUN_EDIT: &str = "DAG Runs: edit";
    pub(crate) const TI_READ: &str = "Task Instances: read";
    pub(crate) const LOG_READ: &str = "Task Logs: read";
    pub(crate) const XCOM_READ: &str = "XComs: read";
    pub(crate) const HITL_READ: &str = "HITL Detail: read";
    pub(crate) const HITL_EDIT: &str = "HITL Detail: edit";
}

/// The REST calls of a pipeline: paths, reading a run, its task instances, HITL
/// questions, XComs and logs.
impl AirflowPipeline {
    /// How many HTTP requests this pipeline's engine has sent so far (all its
    /// pipelines share one client), token requests included.
    #[must_use]
    pub fn api_calls(&self) -> u64 {
        self.client.calls()
    }

    pub(crate) fn dag(&self) -> String {
        format!("/api/v2/dags/{}", percent_encode(&self.target.dag_id))
    }

    pub(crate) fn run_path(&self, run_id: &str) -> String {
        format!("{}/dagRuns/{}", self.dag(), percent_encode(run_id))
    }

    /// The run id of a reference to a run of this tool's DAG; anything else reads as
    /// not found.
    pub(crate) fn own<'a>(&self, run: &'a NativeRef) -> Result<&'a str, EngineError> {
        let (dag, run_id) = run.split_once('/').ok_or(EngineError::NotFound)?;
        if dag != self.target.dag_id || run_id.is_empty() {
            return Err(EngineError::NotFound);
        }
        Ok(run_id)
    }

    pub(crate) fn reference(&self, run_id: &str) -> NativeRef {
        format!("{}/{run_id}", self.target.dag_id)
    }

    pub(crate) async fn get_run(&self, run_id: &str) -> Result<DagRun, EngineError> {
        self.client
            .call(Method::GET, &self.run_path(run_id), None, action::RUN_READ)
            .await
    }

    pub(crate) async fn tasks(&self, run_id: &str) -> Result<TaskInstances, EngineError> {
        self.client
            .call(
                Method::GET,
                &format!("{}/taskInstances?limit={TASK_PAGE}", self.run_path(run_id)),
                None,
                action::TI_READ,
            )
            .await
    }

    /// The unanswered HITL questions of a run, and Airflow's clock.
    pub(crate) async fn questions(
        &self,
        run_id: &str,
    ) -> Result<(Vec<HitlDetail>, Option<std::time::SystemTime>), EngineError> {
        let (list, now): (HitlDetails, _) = self
            .client
            .call_dated(
                Method::GET,
                &format!(
                    "{}/hitlDetails?response_received=false",
                    self.run_path(run_id)
                ),
                None,
                action::HITL_READ,
            )
            .await?;
        Ok((list.hitl_details, now))
    }

    pub(crate) async fn xcom(
        &self,
        run_id: &str,
        task_id: &str,
        key: &str,
    ) -> Result<Value, EngineError> {
        let entry: Value = self
            .client
            .call(
                Method::GET,
                &format!(
                    "{}/taskInstances/{}/xcomEntries/{}?deserialize=true",
                    self.run_path(run_id),
                    percent_encode(task_id),
                    percent_encode(key)
                ),
                None,
                action::XCOM_READ,
            )
            .await?;
        Ok(entry.get("value").cloned().unwrap_or(Value::Null))
    }

    pub(crate) async fn log_tail(
        &self,
        run_id: &str,
        task_id: &str,
        map_index: i64,
        try_number: u64,
    ) -> Vec<String> {
        if self.target.log_lines == 0 {
            return Vec::new();
        }
        let path = format!(
            "{}/taskInstances/{}/logs/{try_number}?map_index={map_index}",
            self.run_path(run_id),
            percent_encode(task_id)
        );
        match self
            .client
            .call::<Value>(Method::GET, &path, None, action::LOG_READ)
            .await
        {
            Ok(log) => translate::log_tail(&log, self.target.log_lines),
            Err(e) => {
                // The failure is reported without its log rather than not at all.
                tracing::warn!(dag_id = %self.target.dag_id, task_id, error = %e, "cannot read the failed task's log");
                vec![format!("(the log could not be read: {e})")]
            }
        }
    }

    /// The DAG's tasks (for the order in which logs are read).
    pub(crate) async fn dag_tasks(&self) -> Result<DagTasks, EngineError> {
        self.client
            .call(
                Method::GET,
                &format!("{}/tasks", self.dag()),
                None,
                action::DAG_READ,
            )
            .await
    }

    /// Reads the log of try `try_number` of `ti` after Airflow's continuation
    /// `token` (none: from the try's start), at most `max_bytes` of it. `None`
    /// when Airflow has no such try.
    ///
    /// # Errors
    ///
    /// [`EngineError::InvalidInput`] when Airflow refuses the token (its
    /// signature does not hold: not one it made); the errors of [`map_error`].
    pub(crate) async fn try_log(
        &self,
        run_id: &str,
        ti: &TaskInstance,
        try_number: u64,
        token: Option<&str>,
        max_bytes: usize,
    ) -> Result<Option<TryLog>, EngineError> {
        let mut path = format!(
            "{}/taskInstances/{}/logs/{try_number}?map_index={}",
            self.run_path(run_id),
            percent_encode(&ti.task_id),
            ti.map_index
        );
        if let Some(token) = token {
            path.push_str("&token=");
            path.push_str(&percent_encode(token));
        }
        let (answer, cut) = self.client.get_bounded(&path, max_bytes).await?;
        match answer.status {
            200..=299 => Ok(Some(TryLog {
                bytes: answer.body.len(),
                body: answer.body,
                cut,
            })),
            404 => Ok(None),
            400 if token.is_some() => Err(EngineError::InvalidInput {
                message: format!(
                    "the log cursor is not one this engine made (Airflow: {})",
                    detail(&answer.body)
                ),
            }),
            _ => Err(map_error(&answer, action::LOG_READ)),
        }
    }

    /// Checks that the DAG exists and is not paused, so a trigger never queues a run
    /// that would wait silently.
    pub(crate) async fn dag_ready(&self) -> Result<(), EngineError> {
        let dag: Value = self
            .client
            .call(Method::GET, &self.dag(), None, action::DAG_READ)
            .await
            .map_err(|e| match e {
                EngineError::NotFound => EngineError::InvalidInput {
                    message: format!("Airflow has no DAG {:?}", self.target.dag_id),
                },
                other => other,
            })?;
        if dag.get("is_paused").and_then(Value::as_bool) == Some(true) {
            return Err(EngineError::InvalidInput {
                message: format!(
                    "the DAG {:?} is paused: a run would wait until it is unpaused, so taskgate does not trigger one",
                    self.target.dag_id
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Item 10 of the security issue: a minted token never shows in `Debug`.
    #[test]
    fn debug_never_shows_a_minted_token() {
        let minted = Minted {
            token: "eyJ-minted-SECRET".into(),
            renew_at: 5,
        };
        let text = format!("{minted:?}");
        assert!(
            !text.contains("SECRET") && text.contains("<redacted>"),
            "{text}"
        );
    }

    fn fixture(name: &str) -> Answer {
        let path = format!("{}/tests/fixtures/{name}.json", env!("CARGO_MANIFEST_DIR"));
        let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        Answer {
            upstream: UPSTREAM,
            status: u16::try_from(v["status"].as_u64().unwrap()).unwrap(),
            headers: reqwest::header::HeaderMap::new(),
            body: v["body"].to_string(),
        }
    }

    #[test]
    fn captured_refusals_map_to_engine_errors() {
        assert!(matches!(
            map_error(&fixture("run_unknown_404"), "DAG Runs: read"),
            EngineError::NotFound
        ));
        assert!(matches!(
            map_error(&fixture("trigger_duplicate_409"), "DAG Runs: create"),
            EngineError::Conflict { ref message } if message.contains("Unique constraint")
        ));
        assert!(matches!(
            map_error(&fixture("hitl_answer_form_invalid"), "HITL Detail: edit"),
            EngineError::InvalidInput { ref message } if message.contains("Invalid options")
        ));
        assert!(matches!(
            map_error(&fixture("unauthenticated_401"), "DAGs: read"),
            EngineError::PermissionDenied { ref action, .. } if action == "authentication"
        ));
        let forbidden = Answer {
            upstream: UPSTREAM,
            status: 403,
            headers: reqwest::header::HeaderMap::new(),
            body: r#"{"detail":"Forbidden"}"#.into(),
        };
        assert!(matches!(
            map_error(&forbidden, "DAG Runs: create"),
            EngineError::PermissionDenied { ref action, .. } if action == "DAG Runs: create"
        ));
        assert!(!token_refused(&forbidden));
        assert!(token_refused(&fixture("bad_token_403")));
        assert!(token_refused(&fixture("unauthenticated_401")));
    }

    #[test]
    fn throttling_is_retryable_never_a_failure() {
        for (status, after) in [
            (429, Some(Duration::from_secs(7))),
            (429, None),
            (503, Some(Duration::from_secs(3))),
        ] {
            let mut headers = reqwest::header::HeaderMap::new();
            if let Some(after) = after {
                headers.insert(reqwest::header::RETRY_AFTER, after.as_secs().into());
            }
            let e = map_error(
                &Answer {
                    upstream: UPSTREAM,
                    status,
                    headers,
                    body: "{}".into(),
                },
                "x",
            );
            assert!(
                matches!(e, EngineError::Throttled { .. }),
                "{status}: {e:?}"
            );
            assert_eq!(e.retry_after(), after);
        }
        let e = map_error(
            &Answer {
                upstream: UPSTREAM,
                status: 503,
                headers: reqwest::header::HeaderMap::new(),
                body: "down".into(),
            },
            "x",
        );
        assert!(matches!(e, EngineError::Unavailable { .. }) && e.is_retryable());
    }

    #[test]
    fn reads_token_expiry() {
        // The payload of a token minted by Airflow 3.3 (signature cut).
        let token = "eyJhbGciOiJIUzUxMiJ9.eyJzdWIiOiJ0YXNrZ2F0ZSIsImV4cCI6MTc5NjM2NzgzNiwiaWF0IjoxNzk2MjgxNDM2fQ.x";
        assert_eq!(jwt_expiry(token), Some(1_796_367_836));
        assert_eq!(jwt_expiry("opaque"), None);
    }

    #[test]
    fn reads_airflows_clock() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::DATE,
            "Sun, 06 Nov 1994 08:49:37 GMT".parse().unwrap(),
        );
        let answer = Answer {
            upstream: UPSTREAM,
            status: 200,
            headers,
            body: "{}".into(),
        };
        assert_eq!(
            answer_date(&answer),
            Some(UNIX_EPOCH + Duration::from_secs(784_111_777))
        );
    }
}
