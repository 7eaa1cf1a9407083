//! The only module that talks to GitHub. It sends requests through octocrab's
//! generic request methods (the typed builders lack `return_run_details` and the
//! headers taskgate needs), records the rate budget every answer reports, maps
//! GitHub's refusals to [`EngineError`]s in one place, and holds a pipeline's REST
//! calls (paths, dispatch, the look-ups that find a dispatched run, reading a run).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use http::Method;
use octocrab::Octocrab;
use serde_json::json;
use serde_json::Value;
use taskgate_engine::http::{percent_encode, Answer};
use taskgate_engine::{ConfigError, EngineError};
use taskgate_engine::{LogLine, NativeRef, RunState, Snapshot};

use crate::config::{Auth, Validated};
use crate::logs::{self, Pos};
use crate::rate_budget::poll_hint;
use crate::rate_budget::{rate_limited, RateBudget};
use crate::translate::{self, WorkflowRun};
use crate::{GithubPipeline, RunKey, RunRef, LOOKUPS, LOST_AFTER, SKEW};

/// Who answers, as messages name it.
const UPSTREAM: &str = "GitHub";

/// GitHub's `message` in an answer's body, when it carries one (else the start
/// of the body).
#[must_use]
pub(crate) fn message(answer: &Answer) -> String {
    serde_json::from_str::<Value>(&answer.body)
        .ok()
        .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| answer.body.chars().take(200).collect())
}

/// Part of a download (a job's log).
#[derive(Debug)]
pub(crate) struct Download {
    /// The bytes read, at most the `max` asked for.
    pub bytes: Vec<u8>,
    /// True when the download ends with these bytes.
    pub at_end: bool,
}

/// The total size a `Content-Range: bytes a-b/total` header names.
fn content_range_total(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_RANGE)?
        .to_str()
        .ok()?
        .rsplit_once('/')?
        .1
        .parse()
        .ok()
}

/// A GitHub REST client shared by an engine's pipelines.
#[derive(Clone)]
pub(crate) struct Client {
    octo: Arc<Octocrab>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

/// The seconds since the epoch, now.
#[must_use]
pub(crate) fn now_epoch() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Client {
    /// Builds the client. No request is made: App installation tokens are minted on
    /// the first request that needs one.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] when the base URL or the private key is unusable.
    pub fn new(settings: &Validated) -> Result<Self, ConfigError> {
        let builder = Octocrab::builder()
            .base_uri(settings.base_url.as_str())
            .map_err(|e| ConfigError::new("base_url", e.to_string()))?
            .add_header(
                http::header::ACCEPT,
                "application/vnd.github+json".to_owned(),
            )
            .set_connect_timeout(Some(Duration::from_secs(10)))
            .set_read_timeout(Some(Duration::from_secs(30)))
            .set_write_timeout(Some(Duration::from_secs(30)));
        let octo = match &settings.auth {
            Auth::Token(token) => builder
                .personal_token(token.clone())
                .build()
                .map_err(|e| ConfigError::new("", format!("cannot build the client: {e}")))?,
            Auth::App {
                app_id,
                private_key_pem,
                installation_id,
            } => {
                let key = octocrab::EncodingKey::from_rsa_pem(private_key_pem).map_err(|e| {
                    ConfigError::new("private_key_file", format!("not an RSA private key: {e}"))
                })?;
                builder
                    .app((*app_id).into(), key)
                    .build()
                    .map_err(|e| ConfigError::new("", format!("cannot build the client: {e}")))?
                    .installation((*installation_id).into())
                    .map_err(|e| ConfigError::new("installation_id", e.to_string()))?
            }
        };
        Ok(Self {
            octo: Arc::new(octo),
        })
    }

    /// Sends one request and returns GitHub's answer whatever its status, noting the
    /// rate budget it reports in `rate budget`.
    ///
    /// # Errors
    ///
    /// [`EngineError::Unavailable`] when GitHub cannot be reached;
    /// [`EngineError::PermissionDenied`] / [`EngineError::Throttled`] when minting an
    /// App installation token is refused.
    pub async fn send(
        &self,
        method: http::Method,
        path: &str,
        body: Option<&Value>,
        rate_budget: &mut RateBudget,
    ) -> Result<Answer, EngineError> {
        self.send_with(method, path, body, None, rate_budget).await
    }

    /// A `GET` with `If-None-Match: etag`: GitHub answers 304 (and spends no
    /// rate budget) when the resource is unchanged since the answer that
    /// carried `etag`.
    ///
    /// # Errors
    ///
    /// As [`Client::send`].
    pub async fn get_if_changed(
        &self,
        path: &str,
        etag: &str,
        rate_budget: &mut RateBudget,
    ) -> Result<Answer, EngineError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::IF_NONE_MATCH,
            http::HeaderValue::from_str(etag)
                .map_err(|_| EngineError::internal("an ETag taskgate cannot send back"))?,
        );
        self.send_with(http::Method::GET, path, None, Some(headers), rate_budget)
            .await
    }

    /// Reads at most `max` bytes of a download from byte `offset` on: a `GET`
    /// of `path` (an API path that redirects to the download, such as a job's
    /// logs) with a `Range` header. The redirect is followed without the
    /// credentials (they stay with GitHub's API host); a server that ignores
    /// the range is read from the start and the bytes before `offset` dropped.
    ///
    /// # Errors
    ///
    /// [`EngineError::Unavailable`] when the download cannot be reached or
    /// read; a refusal (not 2xx, 416) as in [`map_error`].
    pub async fn get_range(
        &self,
        path: &str,
        offset: u64,
        max: usize,
        permission: &str,
    ) -> Result<Download, EngineError> {
        use http_body_util::BodyExt as _;
        let max_u64 = u64::try_from(max).unwrap_or(u64::MAX).max(1);
        let mut headers = HeaderMap::new();
        let range = format!("bytes={offset}-{}", offset + max_u64 - 1);
        headers.insert(
            http::header::RANGE,
            http::HeaderValue::from_str(&range).expect("a range is ASCII"),
        );
        let response = self
            .octo
            ._get_with_headers(path, Some(headers))
            .await
            .map_err(transport_error)?;
        let status = response.status().as_u16();
        if status == 416 {
            return Ok(Download {
                bytes: Vec::new(),
                at_end: true,
            });
        }
        if status == 410 {
            return Err(EngineError::NotFound);
        }
        if !(200..300).contains(&status) {
            let headers = response.headers().clone();
            let body = self.octo.body_to_string(response).await.unwrap_or_default();
            return Err(map_error(
                &Answer {
                    upstream: UPSTREAM,
                    status,
                    headers,
                    body,
                },
                permission,
            ));
        }
        let total = (status == 206)
            .then(|| content_range_total(response.headers()))
            .flatten();
        // A 200 is the whole download: skip what the cursor already read.
        let mut skip = if status == 206 { 0 } else { offset };
        let mut bytes = Vec::new();
        let mut body = response.into_body();
        let mut ended = true;
        while let Some(frame) = body.frame().await {
            let frame =
                frame.map_err(|e| EngineError::unavailable("reading a download failed", e))?;
            let Ok(mut data) = frame.into_data() else {
                continue;
            };
            if skip > 0 {
                let drop = usize::try_from(skip).unwrap_or(usize::MAX).min(data.len());
                skip -= drop as u64;
                let _ = data.split_to(drop);
            }
            let room = max - bytes.len();
            if data.len() > room {
                bytes.extend_from_slice(&data[..room]);
                ended = false;
                break;
            }
            bytes.extend_from_slice(&data);
            if bytes.len() == max {
                ended = false;
                break;
            }
        }
        let at_end = match total {
            Some(total) => offset + bytes.len() as u64 >= total,
            None => ended,
        };
        Ok(Download { bytes, at_end })
    }

    async fn send_with(
        &self,
        method: http::Method,
        path: &str,
        body: Option<&Value>,
        headers: Option<HeaderMap>,
        rate_budget: &mut RateBudget,
    ) -> Result<Answer, EngineError> {
        let response = match method {
            http::Method::GET => self.octo._get_with_headers(path, headers).await,
            http::Method::POST => match body {
                Some(body) => self.octo._post(path, Some(body)).await,
                None => self.octo._post(path, None::<&()>).await,
            },
            other => return Err(EngineError::internal(format!("unsupported method {other}"))),
        }
        .map_err(transport_error)?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        *rate_budget = rate_budget.tighter(RateBudget::from_headers(&headers));
        let body = self
            .octo
            .body_to_string(response)
            .await
            .map_err(|e| EngineError::unavailable("reading GitHub's answer failed", e))?;
        tracing::debug!(%method, path, status, "github request");
        Ok(Answer {
            upstream: UPSTREAM,
            status,
            headers,
            body,
        })
    }

    /// As [`Client::send`], then maps any non-2xx answer to an error.
    /// `permission` names the GitHub permission the request needs, for
    /// [`EngineError::PermissionDenied`].
    ///
    /// # Errors
    ///
    /// See [`map_error`].
    pub async fn call(
        &self,
        method: http::Method,
        path: &str,
        body: Option<&Value>,
        permission: &str,
        rate_budget: &mut RateBudget,
    ) -> Result<Answer, EngineError> {
        let answer = self.send(method, path, body, rate_budget).await?;
        if answer.ok() {
            Ok(answer)
        } else {
            Err(map_error(&answer, permission))
        }
    }
}

/// Maps a non-2xx answer to an [`EngineError`]: GitHub's rate limits (403/429, see
/// [`rate_limited`]) to `Throttled`, waiting as GitHub says; everything else with
/// the shared mapping ([`taskgate_engine::http::status_error`]; `permission` names
/// the GitHub permission the request needs), GitHub's `message` being the message.
#[must_use]
pub(crate) fn map_error(answer: &Answer, permission: &str) -> EngineError {
    let message = message(answer);
    if let Some(retry_after) = rate_limited(answer.status, &answer.headers, &message, now_epoch()) {
        return EngineError::Throttled {
            retry_after: Some(retry_after),
            message: format!("GitHub rate limit: {message}"),
        };
    }
    answer.error(permission, message)
}

fn transport_error(error: octocrab::Error) -> EngineError {
    if let octocrab::Error::GitHub { source, .. } = &error {
        // Only the installation token exchange surfaces GitHub errors here.
        let headers = source.headers.clone().unwrap_or_default();
        let answer = Answer {
            upstream: UPSTREAM,
            status: source.status_code.as_u16(),
            headers,
            body: serde_json::json!({"message": source.message}).to_string(),
        };
        return map_error(&answer, "GitHub App installation token");
    }
    EngineError::unavailable("GitHub could not be reached", error)
}

/// The `ETag` of an answer, when it has one.
pub(crate) fn etag(answer: &Answer) -> Option<String> {
    answer
        .headers
        .get(http::header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Formats seconds since the epoch as GitHub's search dates (`2020-01-22T19:33:08Z`).
pub(crate) fn iso(epoch: u64) -> String {
    let secs = i64::try_from(epoch).unwrap_or(0);
    chrono::DateTime::from_timestamp(secs, 0)
        .unwrap_or_default()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The REST calls of a pipeline: paths, dispatch, the look-ups that find a
/// dispatched run, and reading a run with its jobs.
impl GithubPipeline {
    pub(crate) fn repo_path(&self, owner: &str, repo: &str) -> String {
        format!("/repos/{}/{}", percent_encode(owner), percent_encode(repo))
    }

    pub(crate) fn own_repo(&self) -> String {
        self.repo_path(&self.target.owner, &self.target.repo)
    }

    pub(crate) fn workflow_path(&self) -> String {
        format!(
            "{}/actions/workflows/{}",
            self.own_repo(),
            percent_encode(&self.target.workflow)
        )
    }

    pub(crate) fn run_path(&self, r: &RunRef, id: u64) -> String {
        format!("{}/actions/runs/{id}", self.repo_path(&r.owner, &r.repo))
    }

    /// Reads a reference and checks that it names a run of this tool's
    /// repository: a reference to any other repository (even inside a validly
    /// sealed handle) is not found, and nothing is asked of GitHub.
    ///
    /// # Errors
    ///
    /// [`EngineError::NotFound`] for a malformed or foreign reference.
    pub(crate) fn own_ref(&self, native: &str) -> Result<RunRef, EngineError> {
        let r = RunRef::parse(native)?;
        if r.owner != self.target.owner || r.repo != self.target.repo {
            tracing::warn!(
                owner = %r.owner,
                repo = %r.repo,
                "a run reference outside the tool's repository was refused"
            );
            return Err(EngineError::NotFound);
        }
        Ok(r)
    }

    pub(crate) fn reference(&self, key: RunKey) -> NativeRef {
        RunRef {
            owner: self.target.owner.clone(),
            repo: self.target.repo.clone(),
            key,
        }
        .encode()
    }

    /// Lists the workflow's dispatch runs (newest first), created since `since` when
    /// given, and returns the one whose title carries `run_name`.
    pub(crate) async fn list_find(
        &self,
        owner: &str,
        repo: &str,
        run_name: &str,
        since: Option<u64>,
        rate_budget: &mut RateBudget,
    ) -> Result<Option<WorkflowRun>, EngineError> {
        let mut path = format!(
            "{}/actions/workflows/{}/runs?event=workflow_dispatch&per_page=100",
            self.repo_path(owner, repo),
            percent_encode(&self.target.workflow)
        );
        if let Some(since) = since {
            path.push_str("&created=");
            path.push_str(&percent_encode(&format!(">={}", iso(since))));
        }
        let list: translate::RunList = self
            .client
            .call(Method::GET, &path, None, "actions: read", rate_budget)
            .await?
            .json()?;
        Ok(translate::find_by_run_name(&list.workflow_runs, run_name).cloned())
    }

    /// Finds the run a dispatch made, listing a few times within the request.
    pub(crate) async fn find_dispatched(
        &self,
        run_name: &str,
        since: u64,
        rate_budget: &mut RateBudget,
    ) -> Result<NativeRef, EngineError> {
        for attempt in 0..LOOKUPS {
            if attempt > 0 {
                tokio::time::sleep(self.lookup_delay).await;
            }
            let found = self
                .list_find(
                    &self.target.owner,
                    &self.target.repo,
                    run_name,
                    Some(since),
                    rate_budget,
                )
                .await?;
            if let Some(run) = found {
                return Ok(self.reference(RunKey::Id(run.id)));
            }
        }
        // Not listed yet: hand out a reference by name; reads resolve it.
        tracing::info!("dispatched run not listed yet; the reference names it");
        Ok(self.reference(RunKey::Name {
            run_name: run_name.to_owned(),
            since,
        }))
    }

    pub(crate) async fn dispatch(
        &self,
        inputs: &serde_json::Map<String, Value>,
        run_details: bool,
        rate_budget: &mut RateBudget,
    ) -> Result<Answer, EngineError> {
        let mut body = json!({"ref": self.target.git_ref, "inputs": inputs});
        if run_details {
            body["return_run_details"] = json!(true);
        }
        self.client
            .send(
                Method::POST,
                &format!("{}/dispatches", self.workflow_path()),
                Some(&body),
                rate_budget,
            )
            .await
    }

    pub(crate) fn dispatch_refused(&self, answer: &Answer) -> EngineError {
        if answer.status == 404 {
            return EngineError::PermissionDenied {
                action: "actions: write".to_owned(),
                message: format!(
                    "workflow {} of {}/{} not found (GitHub answers 404 also when the token cannot see it)",
                    self.target.workflow, self.target.owner, self.target.repo
                ),
            };
        }
        map_error(answer, "actions: write")
    }

    /// Reads the run a reference names: by id, or by name through a listing.
    pub(crate) async fn fetch(
        &self,
        r: &RunRef,
        rate_budget: &mut RateBudget,
    ) -> Result<Result<WorkflowRun, RunState>, EngineError> {
        match &r.key {
            RunKey::Id(id) => {
                let answer = self
                    .client
                    .call(
                        Method::GET,
                        &self.run_path(r, *id),
                        None,
                        "actions: read",
                        rate_budget,
                    )
                    .await?;
                Ok(Ok(answer.json()?))
            }
            RunKey::Name { run_name, since } => {
                let found = self
                    .list_find(&r.owner, &r.repo, run_name, Some(*since), rate_budget)
                    .await?;
                match found {
                    Some(run) => Ok(Ok(run)),
                    None if now_epoch().saturating_sub(*since) > LOST_AFTER.as_secs() + SKEW => {
                        Ok(Err(RunState::Failed {
                            message: format!(
                                "the dispatched run never appeared; does the workflow put inputs.{} into its run-name?",
                                self.target.correlation_input
                            ),
                        }))
                    }
                    None => Ok(Err(RunState::working(
                        "dispatched, waiting for GitHub to list the run",
                    ))),
                }
            }
        }
    }

    /// The id of run `r`; a run dispatched by name and not listed yet is
    /// unavailable for now.
    pub(crate) async fn resolve_id(
        &self,
        r: &RunRef,
        rate_budget: &mut RateBudget,
    ) -> Result<u64, EngineError> {
        self.listed_id(r, rate_budget)
            .await?
            .map_err(|_| EngineError::Unavailable {
                message: "the dispatched run is not listed by GitHub yet".to_owned(),
                source: None,
            })
    }

    /// Reads what the run `wr` needs besides itself (jobs, artifacts, pending
    /// deployments) and translates it all; the snapshot's revision holds the
    /// run's `ETag` (`run_tag`) and its jobs'.
    pub(crate) async fn read_run(
        &self,
        r: &RunRef,
        wr: WorkflowRun,
        run_tag: Option<String>,
        mut rate_budget: RateBudget,
    ) -> Result<Snapshot, EngineError> {
        let mut calls = 1;
        let needs = translate::needs(&wr);
        let base = self.run_path(r, wr.id);
        let mut details = translate::Details::default();
        let mut jobs_tag = None;
        if needs.jobs {
            calls += 1;
            let answer = self
                .client
                .call(
                    Method::GET,
                    &format!("{base}/jobs?per_page=100"),
                    None,
                    "actions: read",
                    &mut rate_budget,
                )
                .await?;
            jobs_tag = etag(&answer);
            let jobs: translate::JobList = answer.json()?;
            details.jobs = Some(jobs.jobs);
        }
        if needs.artifacts {
            calls += 1;
            let list: translate::ArtifactList = self
                .get_json(
                    &format!("{base}/artifacts?per_page=100"),
                    "actions: read",
                    &mut rate_budget,
                )
                .await?;
            details.artifacts = Some(list.artifacts);
        }
        if needs.pending {
            calls += 1;
            details.pending = Some(
                self.get_json(
                    &format!("{base}/pending_deployments"),
                    "actions: read",
                    &mut rate_budget,
                )
                .await?,
            );
        }
        let state = translate::translate(&wr, &details, self.target.approval.as_ref());
        let mut snapshot = translate::snapshot(&wr, state);
        // Both tags, or none: a change is only ruled out when every read part
        // can be asked about.
        snapshot.revision = match (run_tag, needs.jobs, jobs_tag) {
            (Some(run), false, _) => Some(format!("{run}\n")),
            (Some(run), true, Some(jobs)) => Some(format!("{run}\n{jobs}")),
            _ => None,
        };
        snapshot.poll_hint = poll_hint(&rate_budget, now_epoch(), calls, self.low_budget);
        Ok(snapshot)
    }

    pub(crate) async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        permission: &str,
        rate_budget: &mut RateBudget,
    ) -> Result<T, EngineError> {
        self.client
            .call(Method::GET, path, None, permission, rate_budget)
            .await?
            .json()
    }
}

/// The log pages of a run: its id and the downloads of its jobs' logs.
impl GithubPipeline {
    /// The id of run `r`, or, while a run dispatched by name is not listed yet, the
    /// state it reads as.
    pub(crate) async fn listed_id(
        &self,
        r: &RunRef,
        rate_budget: &mut RateBudget,
    ) -> Result<Result<u64, RunState>, EngineError> {
        Ok(match &r.key {
            RunKey::Id(id) => Ok(*id),
            RunKey::Name { .. } => self.fetch(r, rate_budget).await?.map(|wr| wr.id),
        })
    }

    /// One download of `job`'s log from byte `offset` (after `steps` step
    /// events) into `lines`, taking at most `room` bytes and the lines `lines`
    /// still has room for under `limit`: where the cursor stands after it, and
    /// whether the page may go on to the next job.
    pub(crate) async fn job_log_piece(
        &self,
        r: &RunRef,
        job: &translate::Job,
        (steps, offset): (usize, u64),
        room: &mut usize,
        limit: usize,
        lines: &mut Vec<LogLine>,
    ) -> Result<(Pos, bool), EngineError> {
        let path = format!(
            "{}/actions/jobs/{}/logs",
            self.repo_path(&r.owner, &r.repo),
            job.id
        );
        let piece = match self
            .client
            .get_range(&path, offset, *room, "actions: read")
            .await
        {
            Ok(piece) => piece,
            Err(EngineError::NotFound) => {
                lines.push(LogLine::note(&format!(
                    "GitHub keeps no log of job {} (removed or past its retention)",
                    job.name
                )));
                return Ok((Pos::After { job: job.id }, true));
            }
            Err(e) => return Err(e),
        };
        let full = piece.bytes.len() == *room;
        *room -= piece.bytes.len();
        let (got, used) = logs::split(
            &piece.bytes,
            offset,
            piece.at_end,
            full,
            limit - lines.len(),
            &job.name,
        );
        lines.extend(got);
        if piece.at_end && used == piece.bytes.len() {
            return Ok((Pos::After { job: job.id }, true));
        }
        let pos = Pos::In {
            job: job.id,
            steps,
            offset: offset + used as u64,
        };
        Ok((pos, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, headers: &[(&'static str, &str)], body: &str) -> Answer {
        let mut h = HeaderMap::new();
        for (k, v) in headers {
            h.insert(*k, v.parse().unwrap());
        }
        Answer {
            upstream: UPSTREAM,
            status,
            headers: h,
            body: body.to_owned(),
        }
    }

    #[test]
    fn refusals_map_to_engine_errors() {
        let e = map_error(
            &answer(
                403,
                &[("retry-after", "7")],
                r#"{"message":"You have exceeded a secondary rate limit"}"#,
            ),
            "actions: write",
        );
        assert!(e.is_retryable());
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)));
        let e = map_error(
            &answer(
                403,
                &[("x-ratelimit-remaining", "4000")],
                r#"{"message":"Resource not accessible by personal access token"}"#,
            ),
            "actions: write",
        );
        assert!(
            matches!(e, EngineError::PermissionDenied { ref action, .. } if action == "actions: write"),
            "{e:?}"
        );
        assert!(matches!(
            map_error(&answer(404, &[], "{}"), "x"),
            EngineError::NotFound
        ));
        assert!(matches!(
            map_error(&answer(409, &[], "{}"), "x"),
            EngineError::Conflict { .. }
        ));
        assert!(matches!(
            map_error(&answer(422, &[], r#"{"message":"Unexpected inputs provided: [\"x\"]"}"#), "x"),
            EngineError::InvalidInput { ref message } if message.contains("Unexpected inputs")
        ));
        assert!(map_error(&answer(502, &[], "bad gateway"), "x").is_retryable());
        assert!(matches!(
            map_error(&answer(401, &[], "{}"), "x"),
            EngineError::PermissionDenied { .. }
        ));
    }
}
