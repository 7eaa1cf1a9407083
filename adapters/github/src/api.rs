//! The only module that talks to GitHub. It sends requests through octocrab's
//! generic request methods (the typed builders lack `return_run_details` and the
//! headers taskgate needs), records the rate budget every answer reports, and maps
//! GitHub's refusals to [`EngineError`]s in one place.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use octocrab::Octocrab;
use serde_json::Value;
use taskgate_engine::http::Answer;
use taskgate_engine::{ConfigError, EngineError};

use crate::config::{Auth, Validated};
use crate::rate_budget::{rate_limited, RateBudget};

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
