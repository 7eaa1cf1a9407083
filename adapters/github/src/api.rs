//! The only module that talks to GitHub. It sends requests through octocrab's
//! generic request methods (the typed builders lack `return_run_details` and the
//! headers taskgate needs), records the API budget every answer reports, and maps
//! GitHub's refusals to [`EngineError`]s in one place.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use octocrab::Octocrab;
use serde::de::DeserializeOwned;
use serde_json::Value;
use taskgate_engine::{ConfigError, EngineError};

use crate::rate_budget::{rate_limited, Budget};
use crate::config::{Auth, Validated};

/// One answer from GitHub, whatever its status.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The headers.
    pub headers: HeaderMap,
    /// The body, as text.
    pub body: String,
}

impl Answer {
    /// True for 2xx.
    #[must_use]
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body parsed as `T`.
    ///
    /// # Errors
    ///
    /// [`EngineError::Internal`] when it does not parse.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, EngineError> {
        serde_json::from_str(&self.body).map_err(|e| EngineError::Internal {
            message: format!(
                "GitHub answered a body taskgate cannot read (HTTP {})",
                self.status
            ),
            source: Some(Box::new(e)),
        })
    }

    /// GitHub's `message`, when the body carries one.
    #[must_use]
    pub fn message(&self) -> String {
        serde_json::from_str::<Value>(&self.body)
            .ok()
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| self.body.chars().take(200).collect())
    }
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
    /// budget it reports in `budget`.
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
        budget: &mut Budget,
    ) -> Result<Answer, EngineError> {
        self.send_with(method, path, body, None, budget).await
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
        budget: &mut Budget,
    ) -> Result<Answer, EngineError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::IF_NONE_MATCH,
            http::HeaderValue::from_str(etag)
                .map_err(|_| EngineError::internal("an ETag taskgate cannot send back"))?,
        );
        self.send_with(http::Method::GET, path, None, Some(headers), budget)
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
        budget: &mut Budget,
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
        *budget = budget.tighter(Budget::from_headers(&headers));
        let body = self
            .octo
            .body_to_string(response)
            .await
            .map_err(|e| EngineError::unavailable("reading GitHub's answer failed", e))?;
        tracing::debug!(%method, path, status, "github request");
        Ok(Answer {
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
        budget: &mut Budget,
    ) -> Result<Answer, EngineError> {
        let answer = self.send(method, path, body, budget).await?;
        if answer.ok() {
            Ok(answer)
        } else {
            Err(map_error(&answer, permission))
        }
    }
}

/// Maps a non-2xx answer to an [`EngineError`]: rate limits (403/429, see
/// [`rate_limited`]) to `Throttled`, 401 and other 403s to `PermissionDenied`
/// naming `permission`, 404 to `NotFound`, 409 to `Conflict`, 400/422 to
/// `InvalidInput`, anything else to `Unavailable`.
#[must_use]
pub(crate) fn map_error(answer: &Answer, permission: &str) -> EngineError {
    let message = answer.message();
    if let Some(retry_after) = rate_limited(answer.status, &answer.headers, &message, now_epoch()) {
        return EngineError::Throttled {
            retry_after: Some(retry_after),
            message: format!("GitHub rate limit: {message}"),
        };
    }
    match answer.status {
        401 => EngineError::PermissionDenied {
            action: "authentication".to_owned(),
            message: format!("GitHub refused the credentials: {message}"),
        },
        403 => EngineError::PermissionDenied {
            action: permission.to_owned(),
            message,
        },
        404 => EngineError::NotFound,
        409 => EngineError::Conflict { message },
        400 | 422 => EngineError::InvalidInput { message },
        status => EngineError::Unavailable {
            message: format!("GitHub answered HTTP {status}: {message}"),
            source: None,
        },
    }
}

fn transport_error(error: octocrab::Error) -> EngineError {
    if let octocrab::Error::GitHub { source, .. } = &error {
        // Only the installation token exchange surfaces GitHub errors here.
        let headers = source.headers.clone().unwrap_or_default();
        let answer = Answer {
            status: source.status_code.as_u16(),
            headers,
            body: serde_json::json!({"message": source.message}).to_string(),
        };
        return map_error(&answer, "GitHub App installation token");
    }
    EngineError::unavailable("GitHub could not be reached", error)
}

/// Percent-encodes `text` for a path segment or a query value.
#[must_use]
pub(crate) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Percent-encodes a repository path, keeping its `/`.
#[must_use]
pub(crate) fn encode_path(path: &str) -> String {
    path.split('/').map(encode).collect::<Vec<_>>().join("/")
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

    #[test]
    fn encoding() {
        assert_eq!(encode("feature/x y"), "feature%2Fx%20y");
        assert_eq!(
            encode(">=2020-01-01T00:00:00Z"),
            "%3E%3D2020-01-01T00%3A00%3A00Z"
        );
        assert_eq!(
            encode_path(".github/workflows/a b.yml"),
            ".github/workflows/a%20b.yml"
        );
    }
}
