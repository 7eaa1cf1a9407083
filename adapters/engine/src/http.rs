//! Helpers for engines whose upstream is an HTTP API: the one mapping of an HTTP
//! status to an [`EngineError`], the [`Answer`] an engine's `api.rs` reads a
//! response into, and percent-encoding for paths and query values. No I/O: each
//! engine sends its requests with its own client.

use std::time::Duration;

use http::HeaderMap;
use serde::de::DeserializeOwned;

use crate::EngineError;

/// One answer from an upstream HTTP API, whatever its status.
#[derive(Debug)]
pub struct Answer {
    /// Who answered, as messages name it ("GitHub", "Airflow").
    pub upstream: &'static str,
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
                "{} answered a body taskgate cannot read (HTTP {})",
                self.upstream, self.status
            ),
            source: Some(Box::new(e)),
        })
    }

    /// The `Retry-After` header as delta-seconds (the form APIs and the proxies
    /// before them send), when present.
    #[must_use]
    pub fn retry_after(&self) -> Option<Duration> {
        let value = self.headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
        value.trim().parse::<u64>().ok().map(Duration::from_secs)
    }

    /// Maps this (non-2xx) answer with [`status_error`], `message` being the
    /// upstream's explanation as the engine reads it from the body.
    #[must_use]
    pub fn error(&self, action: &str, message: String) -> EngineError {
        status_error(
            self.upstream,
            self.status,
            action,
            message,
            self.retry_after(),
        )
    }
}

/// Maps a refused HTTP request to an [`EngineError`], the same way for every
/// engine with an HTTP upstream (named by `upstream` in messages):
///
/// | status | error |
/// |---|---|
/// | 401 | `PermissionDenied` for `authentication` |
/// | 403 | `PermissionDenied` for `action` (the permission the request needs) |
/// | 404 | `NotFound` |
/// | 409 | `Conflict` |
/// | 400, 422 | `InvalidInput` |
/// | 429 | `Throttled` (waiting `retry_after` when known) |
/// | 503 with `retry_after` | `Throttled` |
/// | 408, 410, other 5xx | `Unavailable` (retryable) |
/// | anything else | `Internal` (an answer taskgate does not expect) |
///
/// An engine's own `map_error` handles what is its alone first (GitHub's rate
/// limits sent as 403, for one) and passes the rest here.
#[must_use]
pub fn status_error(
    upstream: &str,
    status: u16,
    action: &str,
    message: String,
    retry_after: Option<Duration>,
) -> EngineError {
    match status {
        401 => EngineError::PermissionDenied {
            action: "authentication".to_owned(),
            message: format!("{upstream} refused the credentials: {message}"),
        },
        403 => EngineError::PermissionDenied {
            action: action.to_owned(),
            message,
        },
        404 => EngineError::NotFound,
        409 => EngineError::Conflict { message },
        400 | 422 => EngineError::InvalidInput { message },
        429 => EngineError::Throttled {
            retry_after,
            message: format!("{upstream} is rate limiting: {message}"),
        },
        503 if retry_after.is_some() => EngineError::Throttled {
            retry_after,
            message: format!("{upstream} is unavailable for now: {message}"),
        },
        408 | 410 | 500..=599 => EngineError::Unavailable {
            message: format!("{upstream} answered HTTP {status}: {message}"),
            source: None,
        },
        _ => EngineError::Internal {
            message: format!(
                "{upstream} answered HTTP {status}, which taskgate does not expect: {message}"
            ),
            source: None,
        },
    }
}

/// Percent-encodes `text` for a path segment or a query value: every byte but the
/// unreserved ones of RFC 3986 (`A-Z a-z 0-9 - . _ ~`).
#[must_use]
pub fn percent_encode(text: &str) -> String {
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

/// Percent-encodes a path of several segments, keeping its `/`.
#[must_use]
pub fn percent_encode_path(path: &str) -> String {
    path.split('/')
        .map(percent_encode)
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, retry_after: Option<&str>) -> Answer {
        let mut headers = HeaderMap::new();
        if let Some(v) = retry_after {
            headers.insert(http::header::RETRY_AFTER, v.parse().unwrap());
        }
        Answer {
            upstream: "Upstream",
            status,
            headers,
            body: "{}".into(),
        }
    }

    #[test]
    fn statuses_map_to_engine_errors() {
        let e = answer(401, None).error("x: read", "no".into());
        assert!(
            matches!(&e, EngineError::PermissionDenied { action, message }
                if action == "authentication" && message == "Upstream refused the credentials: no"),
            "{e:?}"
        );
        let e = answer(403, None).error("x: write", "no".into());
        assert!(
            matches!(&e, EngineError::PermissionDenied { action, .. } if action == "x: write"),
            "{e:?}"
        );
        assert!(matches!(
            answer(404, None).error("x", String::new()),
            EngineError::NotFound
        ));
        assert!(matches!(
            answer(409, None).error("x", "taken".into()),
            EngineError::Conflict { message } if message == "taken"
        ));
        for status in [400, 422] {
            assert!(matches!(
                answer(status, None).error("x", "bad".into()),
                EngineError::InvalidInput { message } if message == "bad"
            ));
        }
        for status in [408, 410, 500, 502, 503, 504] {
            let e = answer(status, None).error("x", "down".into());
            assert!(
                matches!(e, EngineError::Unavailable { .. }) && e.is_retryable(),
                "{status}: {e:?}"
            );
        }
        for status in [300, 405, 418] {
            let e = answer(status, None).error("x", String::new());
            assert!(
                matches!(e, EngineError::Internal { .. }) && !e.is_retryable(),
                "{status}: {e:?}"
            );
        }
    }

    #[test]
    fn throttling_is_retryable_never_a_failure() {
        for (status, after) in [(429, Some("7")), (429, None), (503, Some("3"))] {
            let e = answer(status, after).error("x", String::new());
            assert!(
                matches!(e, EngineError::Throttled { .. }),
                "{status}: {e:?}"
            );
            assert_eq!(
                e.retry_after(),
                after.map(|s| Duration::from_secs(s.parse().unwrap()))
            );
        }
        // A date in Retry-After is not read (no upstream taskgate talks to sends one).
        assert_eq!(
            answer(429, Some("Wed, 21 Oct 2015 07:28:00 GMT")).retry_after(),
            None
        );
    }

    #[test]
    fn a_body_that_does_not_parse_is_internal() {
        let mut a = answer(200, None);
        a.body = "<html>".into();
        let e = a.json::<serde_json::Value>().unwrap_err();
        assert!(
            matches!(&e, EngineError::Internal { message, .. } if message.contains("Upstream answered a body")),
            "{e:?}"
        );
        assert!(a.ok() && !answer(304, None).ok());
    }

    #[test]
    fn encoding() {
        assert_eq!(percent_encode("a b/c"), "a%20b%2Fc");
        assert_eq!(percent_encode("tg-1.x_y~"), "tg-1.x_y~");
        assert_eq!(
            percent_encode(">=2020-01-01T00:00:00Z"),
            "%3E%3D2020-01-01T00%3A00%3A00Z"
        );
        assert_eq!(percent_encode("é"), "%C3%A9");
        assert_eq!(
            percent_encode_path(".github/workflows/a b.yml"),
            ".github/workflows/a%20b.yml"
        );
    }
}
