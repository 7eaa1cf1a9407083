//! Streamable HTTP transport: `POST /mcp`, plus `/healthz` and `/metrics` (the
//! latter on its own port when `server.metrics_listen` is set).
//!
//! It guards the endpoint (Host, Origin, body size, and the per-peer limit on
//! failed authentications of `[auth.failures]`, by the connection's peer
//! address), frames what the front door answers (JSON or an SSE stream) and
//! sets the session header; the front door decides everything about the
//! message itself.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::Value;

use super::lanes::{lane_count, tick_within, Lanes};
use crate::core::audit;
use crate::core::config::IpNetwork;
use crate::core::metrics::AuthRefusal;
use crate::core::Gateway;
use crate::dialect::stateless::Following;
use crate::dialect::wire::Outgoing;
use crate::rpc::header::{SESSION_ID, X_ACCEL_BUFFERING};
use crate::rpc::RpcError;
use crate::server::auth::{AuthError, Authenticator, FailureLimit};
use crate::server::{self, Admitted, Dispatched, Inbound};

/// The OAuth resource server of this router, if `[auth.oauth]` is configured.
type OAuth = Extension<Option<Arc<Authenticator>>>;

/// The router serving `gw`.
pub fn router(gw: Arc<Gateway>) -> Router {
    let oauth = Authenticator::new(gw.oauth.as_ref(), gw.access.scopes()).map(Arc::new);
    let failures = Arc::new(FailureLimit::new(&gw.failures));
    router_with(gw, oauth, failures)
}

fn router_with(
    gw: Arc<Gateway>,
    oauth: Option<Arc<Authenticator>>,
    failures: Arc<FailureLimit>,
) -> Router {
    let mut router = Router::new()
        .route(
            "/mcp",
            post(mcp).get(method_not_allowed).delete(method_not_allowed),
        )
        .route("/healthz", get(|| async { "ok\n" }));
    // With `server.metrics_listen` set, /metrics is served there only.
    if gw.server.metrics_listen.is_none() {
        router = router.route("/metrics", get(super::metrics_port::metrics));
    }
    if let Some(o) = &oauth {
        for path in o.metadata_paths() {
            router = router.route(&path, get(resource_metadata));
        }
    }
    router
        .layer(Extension(oauth))
        .layer(Extension(failures))
        .with_state(gw)
}

/// RFC 9728 Protected Resource Metadata.
async fn resource_metadata(Extension(oauth): OAuth) -> Response {
    match oauth {
        Some(o) => json_response(200, &o.metadata()),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// A request whose credentials were refused: 401 with a challenge pointing at
/// the resource metadata, or 503 when the token could not be checked.
fn unauthenticated(oauth: Option<&Authenticator>, e: &AuthError) -> Response {
    if let AuthError::Unavailable { .. } = e {
        let err =
            RpcError::Internal("the authorization server could not be reached; retry later".into());
        let mut response = json_response(503, &err.refusal());
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        return response;
    }
    let mut response = refused(&RpcError::Unauthorized);
    if let Some(o) = oauth {
        let error = (!matches!(e, AuthError::Missing)).then_some("invalid_token");
        if let Ok(v) = HeaderValue::from_str(&o.challenge(error, None)) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
    }
    response
}

/// A peer over its limit of failed authentications: 429 with `Retry-After`.
fn too_many_failures(wait: std::time::Duration) -> Response {
    let mut response = refused(&RpcError::TooManyFailures(wait));
    let secs = wait.as_millis().div_ceil(1000).max(1).to_string();
    if let Ok(v) = HeaderValue::from_str(&secs) {
        response.headers_mut().insert(header::RETRY_AFTER, v);
    }
    response
}

/// How long requests in flight may take to finish once the server is told to stop.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves until the process is told to stop (SIGTERM, as a container runtime
/// stops a pod, or SIGINT): then it stops accepting, gives requests in flight
/// [`SHUTDOWN_GRACE`] to finish, and returns. Nothing is lost by stopping: every
/// task lives in its engine.
///
/// Each connection is served by hyper's HTTP/1 server with a timer, so a client
/// that takes longer than `server.header_read_timeout` to send a request's
/// headers is disconnected; the body's deadline is kept by [`read_body`]. With
/// `server.http2`, a connection that opens with HTTP/2's preface is served by
/// hyper's HTTP/2 server instead (see `transport::connection`).
/// Connections are served on `server.workers` threads, each connection on
/// one of them from its first byte to its last (see `transport::lanes`).
///
/// # Errors
///
/// When the address cannot be bound, or the serving threads cannot be started.
pub async fn serve(gw: Arc<Gateway>, listen: SocketAddr) -> std::io::Result<()> {
    let front = Front::new(gw.clone());
    // The configuration was checked for its own `server.listen`; this holds
    // the rule for whatever address the caller of this function chose.
    if front.anonymous && !listen.ip().to_canonical().is_loopback() && front.networks.is_empty() {
        return Err(std::io::Error::other(format!(
            "refusing to serve anonymous HTTP on {listen}, which is not loopback: configure [auth], \
             or (INSECURE) server.insecure_anonymous_networks"
        )));
    }
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(address = %listener.local_addr()?, "listening on http://{}/mcp", listener.local_addr()?);
    let _metrics_port = super::metrics_port::start(&gw).await?;
    let builders = Arc::new(super::connection::Builders::new(&gw.server));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let deadlines = [
        gw.server.header_read_timeout,
        gw.server.body_read_timeout,
        gw.server.call_timeout,
    ];
    let mut lanes = Lanes::start(lane_count(gw.server.workers), tick_within(&deadlines))?;
    drop(gw);
    // Each connection holds a sender; `open` ends once they are all gone. (A
    // `JoinSet` would wake this loop at the end of every connection: a
    // system call each, thousands at once when many listen streams end.)
    let (held, mut open) = tokio::sync::mpsc::channel::<std::convert::Infallible>(1);
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors, say: the listener stays; try again shortly.
                        tracing::warn!(error = %e, "cannot accept a connection");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Handed to its lane, where it is registered with that lane's
                // event loop and served until it closes.
                let stream = match stream.into_std() {
                    Ok(stream) => stream,
                    Err(e) => {
                        tracing::debug!(error = %e, "cannot hand a connection to a lane");
                        continue;
                    }
                };
                let builders = builders.clone();
                // Anonymous callers are served only from loopback (or the
                // networks the operator listed): decided here, once per
                // connection, from the socket's peer address.
                let front = front.for_peer(peer);
                let stopping = stop_rx.clone();
                let held = held.clone();
                drop(lanes.next().spawn(async move {
                    let _held = held;
                    let stream = match tokio::net::TcpStream::from_std(stream) {
                        Ok(stream) => stream,
                        Err(e) => {
                            tracing::debug!(error = %e, "cannot serve a connection on its lane");
                            return;
                        }
                    };
                    builders.serve(stream, front, stopping).await;
                }));
            }
            () = &mut stop => break,
        }
    }
    drop(listener);
    tracing::info!("stopping: no new connections; requests in flight may finish");
    let _ = stop_tx.send(true);
    drop(held);
    if tokio::time::timeout(SHUTDOWN_GRACE, open.recv())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after the grace period; stopping anyway");
    }
    // What is still open is cut off with its lane.
    drop(lanes);
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
async fn stop_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

async fn method_not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "POST")],
        "taskgate serves MCP with POST only\n",
    )
        .into_response()
}

fn json_response(status: u16, body: &Value) -> Response {
    let mut bytes = Vec::with_capacity(1024);
    // Serializing a `Value` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut bytes, body);
    json_bytes_response(status, bytes)
}

/// A JSON response of `bytes` (already written JSON text).
fn json_bytes_response(status: u16, bytes: Vec<u8>) -> Response {
    // Serialized straight into bytes (`Body::into_bytes`): `to_string` would go
    // through `Display` and its formatter, which costs more per tasks/get than
    // the write itself.
    let mut response = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        [(header::CONTENT_TYPE, "application/json")],
        Bytes::from(bytes),
    )
        .into_response();
    response
        .headers_mut()
        .insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
    response
}

/// A request refused before its body is read.
///
/// The unread body is left behind, so the connection is closed after the
/// response; `Connection: close` says so, and a client sends its next request
/// (the metadata fetch after a 401) on a new connection instead of racing
/// the close on this one.
fn refused(error: &RpcError) -> Response {
    let mut response = json_response(error.http_status(true), &error.refusal());
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    if matches!(error, RpcError::Unauthorized) {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"taskgate\""),
        );
    }
    response
}

fn forbidden(why: &'static str) -> Response {
    tracing::warn!(reason = why, "request refused with 403");
    refused(&RpcError::Forbidden(why))
}

/// True for loopback host names, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    matches!(name, "localhost" | "127.0.0.1" | "::1")
}

fn host_allowed(gw: &Gateway, host: &str) -> bool {
    let allowed = &gw.server.allowed_hosts;
    if allowed.iter().any(|h| h == "*") {
        return true;
    }
    is_loopback_host(host)
        || allowed
            .iter()
            .any(|h| h == host || host.rsplit_once(':').is_some_and(|(name, _)| name == h))
}

fn origin_allowed(gw: &Gateway, origin: &str) -> bool {
    if gw
        .server
        .allowed_origins
        .iter()
        .any(|o| o == origin || o == "*")
    {
        return true;
    }
    // A page served from this machine may call a loopback server.
    origin.split_once("://").is_some_and(|(scheme, rest)| {
        matches!(scheme, "http" | "https") && is_loopback_host(rest.trim_end_matches('/'))
    })
}

/// What serves each connection: `POST /mcp`, every poll and call, goes
/// straight to [`serve_mcp`]; every other request goes through [`router`]
/// (which serves `/mcp` the same way, for its tests and any other host of it).
/// The hot path thus skips the router's matching, its per-request extension
/// map and its boxed services: they cost more than a `tasks/get`'s header checks.
#[derive(Clone)]
struct Front {
    gw: Arc<Gateway>,
    oauth: Option<Arc<Authenticator>>,
    failures: Arc<FailureLimit>,
    router: hyper_util::service::TowerToHyperService<Router>,
    /// No authentication is configured: every HTTP caller is `anonymous`.
    anonymous: bool,
    /// `server.insecure_anonymous_networks`: peers served anonymously besides loopback.
    networks: Arc<[IpNetwork]>,
    /// This connection's peer may not be served anonymously: every request
    /// on it is refused (403).
    refuse_peer: bool,
    /// The connection's peer (for the audit trail).
    peer: Option<SocketAddr>,
}

impl Front {
    fn new(gw: Arc<Gateway>) -> Self {
        let oauth = Authenticator::new(gw.oauth.as_ref(), gw.access.scopes()).map(Arc::new);
        let failures = Arc::new(FailureLimit::new(&gw.failures));
        let router = router_with(gw.clone(), oauth.clone(), failures.clone());
        let anonymous = gw.bearer.is_empty() && oauth.is_none();
        // Checked when the configuration was loaded.
        let networks = gw
            .server
            .insecure_anonymous_networks
            .iter()
            .filter_map(|n| IpNetwork::parse(n).ok())
            .collect();
        Self {
            gw,
            oauth,
            failures,
            router: hyper_util::service::TowerToHyperService::new(router),
            anonymous,
            networks,
            refuse_peer: false,
            peer: None,
        }
    }

    /// The service of one connection from `peer`.
    fn for_peer(&self, peer: SocketAddr) -> Self {
        let mut front = self.clone();
        front.peer = Some(peer);
        front.refuse_peer = !anonymous_peer_allowed(self.anonymous, &self.networks, peer);
        if front.refuse_peer {
            // Each request on it is audited as refused; a debug line here
            // (not a warning: a port scan must not flood the log).
            tracing::debug!(
                peer = %peer.ip(),
                "refusing a connection: without [auth], only loopback peers are served"
            );
        }
        front
    }
}

/// Whether a connection from `peer` may be served: always with authentication
/// (each request then proves who it is); without it, only from loopback or
/// one of `networks`.
fn anonymous_peer_allowed(anonymous: bool, networks: &[IpNetwork], peer: SocketAddr) -> bool {
    let ip = peer.ip().to_canonical();
    !anonymous || ip.is_loopback() || networks.iter().any(|n| n.contains(ip))
}

impl hyper::service::Service<hyper::Request<hyper::body::Incoming>> for Front {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Response, Self::Error>>;

    fn call(&self, mut request: hyper::Request<hyper::body::Incoming>) -> Self::Future {
        if self.refuse_peer {
            audit::refused_at_door(self.peer, "peer_not_loopback");
            self.gw.metrics.auth_refused(AuthRefusal::PeerNotAllowed);
            let refusal = refused(&RpcError::Forbidden(
                "anonymous access is served to loopback peers only; this server has no [auth]",
            ));
            return Box::pin(async move { Ok(refusal) });
        }
        if let Some(peer) = self.peer {
            request.extensions_mut().insert(audit::Peer(peer));
        }
        request.extensions_mut().insert(self.failures.clone());
        if request.method() == axum::http::Method::POST && request.uri().path() == "/mcp" {
            let (gw, oauth) = (self.gw.clone(), self.oauth.clone());
            Box::pin(futures::FutureExt::map(
                serve_mcp(gw, oauth, request.map(axum::body::Body::new)),
                Ok,
            ))
        } else {
            Box::pin(self.router.call(request))
        }
    }
}

async fn mcp(
    State(gw): State<Arc<Gateway>>,
    Extension(oauth): OAuth,
    request: axum::extract::Request,
) -> Response {
    serve_mcp(gw, oauth, request).await
}

/// `POST /mcp`: guards, credentials, the body, then the front door.
async fn serve_mcp(
    gw: Arc<Gateway>,
    oauth: Option<Arc<Authenticator>>,
    request: axum::extract::Request,
) -> Response {
    // The request taken apart, not its headers extracted: extracting a
    // `HeaderMap` copies every header of every request.
    let (parts, body) = request.into_parts();
    let peer = parts.extensions.get::<audit::Peer>().map(|p| p.0);
    let headers = parts.headers;
    let failures = parts.extensions.get::<Arc<FailureLimit>>();
    // HTTP/2 names the host in `:authority`, which hyper keeps in the URI.
    let authority = (parts.version == axum::http::Version::HTTP_2)
        .then(|| parts.uri.authority())
        .flatten();
    if let Some(refusal) = door_refusal(&gw, &headers, authority, peer, failures) {
        return refusal;
    }
    let identified = server::identify(&gw, oauth.as_deref(), &headers);
    let caller = match audit::scope(audit::Context::new(peer, ""), identified).await {
        Ok(c) => c,
        Err(e) => {
            if let (AuthError::Invalid(_), Some(peer), Some(limit)) = (&e, peer, failures) {
                limit.failed(peer.ip());
            }
            gw.metrics.auth_refused(match &e {
                AuthError::Missing => AuthRefusal::NoToken,
                AuthError::Invalid(_) => AuthRefusal::InvalidToken,
                AuthError::Unavailable { .. } => AuthRefusal::IssuerUnavailable,
            });
            return unauthenticated(oauth.as_deref(), &e);
        }
    };
    let body = match read_body(&headers, body, &gw.server).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    let inbound = Inbound {
        caller: &caller,
        headers: Some(&headers),
        connection: None,
        peer,
    };
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        // Boxed, as `streamed` below: each is several KiB, and inline they
        // would make every request's future as large, copied whole as hyper
        // moves it.
        return match Box::pin(server::dispatch_batch(&gw, &inbound, &body)).await {
            Ok(Some(answers)) => json_response(200, &answers),
            Ok(None) => StatusCode::ACCEPTED.into_response(),
            Err(refusal) => json_response(refusal.status, &refusal.body),
        };
    }
    let admitted = match server::admit(&gw, &inbound, &body) {
        Ok(a) => a,
        Err(refusal) => return json_response(refusal.status, &refusal.body),
    };
    let accepts_sse = headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"));
    if admitted.may_stream() && accepts_sse {
        return Box::pin(streamed(gw, caller, headers, admitted, oauth, peer)).await;
    }
    let dispatched = server::dispatch(&gw, &inbound, admitted, None).await;
    finish(dispatched, oauth.as_deref())
}

/// The door's refusal of a request, before its credentials are looked at: a
/// Host (or HTTP/2 `:authority`) or Origin not allowed, or a peer with too
/// many refused tokens.
fn door_refusal(
    gw: &Gateway,
    headers: &HeaderMap,
    authority: Option<&axum::http::uri::Authority>,
    peer: Option<std::net::SocketAddr>,
    failures: Option<&Arc<FailureLimit>>,
) -> Option<Response> {
    // A request without a Host (HTTP/1.0, or a hand-made one) is refused as
    // one with a wrong Host: the check guards against DNS rebinding only if
    // it cannot be skipped. Over HTTP/2 the host is `:authority`, and a Host
    // header beside it is held to the same rule (both must be allowed).
    let host = headers.get(header::HOST);
    let host_ok = (host.is_some() || authority.is_some())
        && host.is_none_or(|h| h.to_str().is_ok_and(|h| host_allowed(gw, h)))
        && authority.is_none_or(|a| host_allowed(gw, a.as_str()));
    if !host_ok {
        audit::refused_at_door(
            peer,
            if host.is_some() || authority.is_some() {
                "host_not_allowed"
            } else {
                "host_missing"
            },
        );
        gw.metrics.auth_refused(AuthRefusal::HostNotAllowed);
        return Some(forbidden("Host not allowed"));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let ok = origin.to_str().is_ok_and(|o| origin_allowed(gw, o));
        if !ok {
            audit::refused_at_door(peer, "origin_not_allowed");
            gw.metrics.auth_refused(AuthRefusal::OriginNotAllowed);
            return Some(forbidden("Origin not allowed"));
        }
    }
    // A peer that presented too many refused tokens is turned away before its
    // token is looked at (no introspection call); only refusals of a presented
    // token count, not a missing one nor an issuer that could not be asked.
    if let (Some(peer), Some(limit)) = (peer, failures) {
        if let Err(wait) = limit.check(peer.ip()) {
            audit::refused_at_door(Some(peer), "too_many_failures");
            gw.metrics.auth_refused(AuthRefusal::TooManyFailures);
            return Some(too_many_failures(wait));
        }
    }
    None
}

/// Reads a request body of at most `server.max_body_bytes` within
/// `server.body_read_timeout` (counted from the end of the headers).
///
/// # Errors
///
/// The response to send instead, each closing the connection: 413 for a body
/// over the limit (declared or sent), 408 for one too slow, 400 for one cut off.
async fn read_body(
    headers: &HeaderMap,
    body: axum::body::Body,
    server: &crate::core::config::ServerConfig,
) -> Result<Bytes, Response> {
    use futures::StreamExt as _;
    let limit = server.max_body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        closing(
            413,
            &format!("the request body is larger than this server accepts ({limit} bytes, server.max_body_bytes)"),
        )
    };
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let read = async {
        let mut stream = body.into_data_stream();
        // A body that arrives in one chunk (the usual case) is that chunk,
        // without a copy; only a body in several pieces is put together.
        let mut first: Option<Bytes> = None;
        let mut buffer = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|_| closing(400, "the request body was cut off"))?;
            let so_far = first.as_ref().map_or(0, Bytes::len) + buffer.len();
            if so_far + chunk.len() > limit {
                return Err(too_large());
            }
            match &first {
                None if buffer.is_empty() => first = Some(chunk),
                _ => {
                    if let Some(head) = first.take() {
                        buffer.reserve(
                            declared
                                .map_or(0, |n| n as usize)
                                .max(head.len() + chunk.len()),
                        );
                        buffer.extend_from_slice(&head);
                    }
                    buffer.extend_from_slice(&chunk);
                }
            }
        }
        Ok(match first {
            Some(whole) => whole,
            None => Bytes::from(buffer),
        })
    };
    match tokio::time::timeout(server.body_read_timeout, read).await {
        Ok(outcome) => outcome,
        Err(_) => {
            tracing::info!("a request body took longer than server.body_read_timeout; closing");
            Err(closing(
                408,
                &format!(
                    "the request body did not arrive within {} (server.body_read_timeout)",
                    humantime::format_duration(server.body_read_timeout)
                ),
            ))
        }
    }
}

/// A refusal of a request whose body was not read to its end: a JSON-RPC
/// error, and the connection closed after it.
fn closing(status: u16, why: &str) -> Response {
    let error = RpcError::InvalidRequest(why.to_owned());
    let mut response = json_response(status, &error.refusal());
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

fn finish(dispatched: Dispatched, oauth: Option<&Authenticator>) -> Response {
    let challenge = dispatched
        .required_scopes
        .as_deref()
        .map(|scopes| match oauth {
            Some(o) => o.challenge(Some("insufficient_scope"), Some(scopes)),
            None => format!(
                "Bearer error=\"insufficient_scope\", scope=\"{}\"",
                scopes.join(" ")
            ),
        });
    let mut response = match dispatched.body {
        Some(body) => json_bytes_response(dispatched.status, body.into_bytes()),
        None => StatusCode::ACCEPTED.into_response(),
    };
    if let Some(id) = dispatched.session_id {
        if let Ok(v) = HeaderValue::from_str(&id) {
            response.headers_mut().insert(SESSION_ID, v);
        }
    }
    if let Some(v) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    response
}

fn sse_event(message: &impl std::fmt::Display) -> Bytes {
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

/// Pieces of a message at least this long are sent as they are, each its own
/// chunk of the response, rather than copied into the message's frame: a
/// listen notification's shared part (a run's result, say) is then written
/// to every stream from the one copy.
const SHARED_PIECE: usize = 1024;

/// The SSE event of `message`, in the frames to write: its text copied into
/// one frame, apart from long pieces of written text, passed on uncopied.
fn sse_frames(message: &Outgoing, frames: &mut Vec<Bytes>) {
    const HEAD: &[u8] = b"event: message\ndata: ";
    const TAIL: &[u8] = b"\n\n";
    match message {
        Outgoing::Value(value) => {
            let mut text = Vec::with_capacity(256);
            text.extend_from_slice(HEAD);
            // Serializing a `Value` into a `Vec` cannot fail.
            let _ = serde_json::to_writer(&mut text, value);
            text.extend_from_slice(TAIL);
            frames.push(Bytes::from(text));
        }
        Outgoing::Pieces(pieces) => {
            let short: usize = pieces
                .iter()
                .map(Bytes::len)
                .filter(|&n| n < SHARED_PIECE)
                .sum();
            let mut text = Vec::with_capacity(HEAD.len() + short + TAIL.len());
            text.extend_from_slice(HEAD);
            for piece in pieces {
                if piece.len() < SHARED_PIECE {
                    text.extend_from_slice(piece);
                } else {
                    if !text.is_empty() {
                        frames.push(Bytes::from(std::mem::take(&mut text)));
                    }
                    frames.push(piece.clone());
                }
            }
            text.extend_from_slice(TAIL);
            frames.push(Bytes::from(text));
        }
    }
}

/// Serves a request whose client accepts SSE: plain JSON when the server has
/// nothing to send before the response; otherwise a stream of the messages
/// (progress, input requests, a listen stream's notifications) followed by
/// the response.
///
/// A listen stream's request is served first like any other and freed (its
/// headers, its params, the layers that served it); the stream then sends
/// what its [`Following`] yields, `:` comments every
/// `server.listen_keep_alive` while it is quiet, and the closing result at
/// its end or at `server.max_listen`.
async fn streamed(
    gw: Arc<Gateway>,
    caller: crate::core::Caller,
    headers: HeaderMap,
    admitted: Admitted,
    oauth: Option<Arc<Authenticator>>,
    peer: Option<SocketAddr>,
) -> Response {
    let (tx, mut rx) = crate::dialect::wire::outbound();
    let keep_alive = gw.server.listen_keep_alive;
    let mut work = Box::pin(async move {
        let inbound = Inbound {
            caller: &caller,
            headers: Some(&headers),
            connection: None,
            peer,
        };
        server::dispatch(&gw, &inbound, admitted, Some(tx)).await
    });
    let first = tokio::select! {
        dispatched = &mut work => {
            let mut frames = Vec::new();
            while let Some(m) = rx.try_recv() {
                sse_frames(&m, &mut frames);
            }
            if frames.is_empty() && dispatched.following.is_none() {
                return finish(dispatched, oauth.as_deref());
            }
            // Messages were queued before the response, or a listen stream
            // follows its runs: stream them, then the response.
            let (tail, more) = served(dispatched, keep_alive);
            frames.extend(more);
            return sse_response(axum::body::Body::new(SseBody::new(frames, after(&work, tail))));
        }
        Some(first) = rx.recv() => first,
    };
    let mut frames = Vec::new();
    sse_frames(&first, &mut frames);
    sse_response(axum::body::Body::new(SseBody::new(
        frames,
        Phase::Serving {
            work,
            rx,
            keep_alive,
        },
    )))
}

/// Where a streamed response is.
enum Phase<W> {
    /// The request is being served; what it sends comes on `rx`.
    Serving {
        work: std::pin::Pin<Box<W>>,
        rx: crate::dialect::wire::Queued,
        keep_alive: std::time::Duration,
    },
    /// A listen stream, its request served.
    Following(Tail),
    Done,
}

/// A listen stream after its request: its notifications, then `body`.
struct Tail {
    following: Following,
    /// The next keep-alive comment, or the deadline if sooner.
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
    keep_alive: std::time::Duration,
    body: Bytes,
}

/// What follows a served request: its listen stream, if it opened one (with
/// the response held for the stream's end), or the response's frames.
fn served(dispatched: Dispatched, keep_alive: std::time::Duration) -> (Option<Tail>, Vec<Bytes>) {
    let body = dispatched.body.as_ref().map(sse_event);
    match (dispatched.following, body) {
        (Some(following), Some(body)) => {
            let next = next_tick(keep_alive, following.deadline());
            let tail = Tail {
                following,
                timer: Box::pin(tokio::time::sleep_until(next)),
                keep_alive,
                body,
            };
            (Some(tail), Vec::new())
        }
        (_, body) => (None, body.into_iter().collect()),
    }
}

/// The phase after the request of `_work` was served.
fn after<W>(_work: &std::pin::Pin<Box<W>>, tail: Option<Tail>) -> Phase<W> {
    tail.map_or(Phase::Done, Phase::Following)
}

/// The next keep-alive comment's time, or `deadline` if that is sooner.
fn next_tick(
    keep_alive: std::time::Duration,
    deadline: tokio::time::Instant,
) -> tokio::time::Instant {
    (tokio::time::Instant::now() + keep_alive).min(deadline)
}

/// The body of a streamed response: `ready` frames, then what `phase` gives.
/// Each time it is polled it gives the frames of what is ready: every
/// message queued (a listen stream's last notification and its closing
/// result go out together), a keep-alive comment, or the end.
struct SseBody<W> {
    ready: Vec<Bytes>,
    /// `ready[..sent]` were given out already.
    sent: usize,
    phase: Phase<W>,
}

impl<W> SseBody<W>
where
    W: std::future::Future<Output = Dispatched>,
{
    fn new(ready: Vec<Bytes>, phase: Phase<W>) -> Self {
        Self {
            ready,
            sent: 0,
            phase,
        }
    }

    /// Moves the phase on if it can: `Ready(true)` when it did (frames may
    /// be ready), `Ready(false)` at the end.
    fn step(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<bool> {
        use futures::StreamExt as _;
        use std::future::Future as _;
        use std::task::Poll;
        let frames = &mut self.ready;
        match &mut self.phase {
            Phase::Done => Poll::Ready(false),
            Phase::Serving {
                work,
                rx,
                keep_alive,
            } => {
                if let Poll::Ready(dispatched) = work.as_mut().poll(cx) {
                    while let Some(m) = rx.try_recv() {
                        sse_frames(&m, frames);
                    }
                    let (tail, more) = served(dispatched, *keep_alive);
                    frames.extend(more);
                    self.phase = tail.map_or(Phase::Done, Phase::Following);
                    return Poll::Ready(true);
                }
                match rx.poll_recv(cx) {
                    Poll::Ready(Some(message)) => {
                        sse_frames(&message, frames);
                        while let Some(m) = rx.try_recv() {
                            sse_frames(&m, frames);
                        }
                        Poll::Ready(true)
                    }
                    // The senders go with the request's work, polled above.
                    Poll::Ready(None) | Poll::Pending => Poll::Pending,
                }
            }
            Phase::Following(tail) => {
                let ended = match tail.following.poll_next_unpin(cx) {
                    Poll::Ready(Some(message)) => {
                        sse_frames(&message, frames);
                        tail.following.is_done()
                    }
                    Poll::Ready(None) => true,
                    Poll::Pending => {
                        if tail.timer.as_mut().poll(cx).is_pending() {
                            return Poll::Pending;
                        }
                        let deadline = tail.following.deadline();
                        if tokio::time::Instant::now() >= deadline {
                            crate::dialect::stateless::reached_max_listen();
                            true
                        } else {
                            frames.push(Bytes::from_static(b": keep-alive\n\n"));
                            tail.timer
                                .as_mut()
                                .reset(next_tick(tail.keep_alive, deadline));
                            false
                        }
                    }
                };
                if ended {
                    frames.push(tail.body.clone());
                    self.phase = Phase::Done;
                }
                Poll::Ready(true)
            }
        }
    }
}

impl<W> http_body::Body for SseBody<W>
where
    W: std::future::Future<Output = Dispatched>,
{
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let me = self.get_mut();
        loop {
            if me.sent < me.ready.len() {
                let frame = std::mem::take(&mut me.ready[me.sent]);
                me.sent += 1;
                return std::task::Poll::Ready(Some(Ok(http_body::Frame::data(frame))));
            }
            me.ready.clear();
            me.sent = 0;
            match me.step(cx) {
                std::task::Poll::Ready(true) => {}
                std::task::Poll::Ready(false) => return std::task::Poll::Ready(None),
                std::task::Poll::Pending => return std::task::Poll::Pending,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.sent >= self.ready.len() && matches!(self.phase, Phase::Done)
    }
}

fn sse_response(body: axum::body::Body) -> Response {
    let mut response = Response::new(body);
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(X_ACCEL_BUFFERING, HeaderValue::from_static("no"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::header::PROTOCOL_VERSION;

    async fn post(app: Router, headers: &[(&str, &str)], body: &str) -> (u16, String) {
        use tower::ServiceExt as _;
        let mut req = axum::http::Request::post("/mcp")
            .header("content-type", "application/json")
            .header("host", "127.0.0.1:8808");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = app
            .oneshot(req.body(axum::body::Body::from(body.to_owned())).unwrap())
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    async fn app() -> Router {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(
            &path,
            "[keys]\nseal = [{ id = \"k\", dev_secret = \"p/4MQhhD8Y1TpeyGop6V5LEm77uhg8lXNetP3B7VAMs=\" }]\n",
        )
        .unwrap();
        let gw = crate::load(&path).await.unwrap();
        router(Arc::new(gw))
    }

    #[tokio::test]
    async fn batches_only_in_2025_03_26() {
        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]"#;
        let (status, body) = post(
            app().await,
            &[(PROTOCOL_VERSION.as_str(), "2025-03-26")],
            batch,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let answers: Vec<Value> = serde_json::from_str(&body).unwrap();
        assert_eq!(answers.len(), 2);
        assert_eq!(answers[0]["id"], 1);
        assert!(answers[1]["result"]["tools"].is_array());
        let (status, body) = post(
            app().await,
            &[(PROTOCOL_VERSION.as_str(), "2025-06-18")],
            batch,
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("-32600"));
        let (status, _) = post(app().await, &[], "[]").await;
        assert_eq!(status, 400);
    }

    #[test]
    fn anonymous_peers_are_loopback_or_listed() {
        let peer = |s: &str| s.parse::<SocketAddr>().unwrap();
        let listed = [IpNetwork::parse("192.0.2.0/28").unwrap()];
        for p in [
            "127.0.0.1:5",
            "127.3.4.5:5",
            "[::1]:5",
            "[::ffff:127.0.0.1]:5",
        ] {
            assert!(anonymous_peer_allowed(true, &[], peer(p)), "{p}");
        }
        for p in [
            "192.0.2.2:5",
            "10.0.0.1:5",
            "[2001:db8::1]:5",
            "[::ffff:192.0.2.2]:5",
        ] {
            assert!(!anonymous_peer_allowed(true, &[], peer(p)), "{p}");
            // With authentication every peer is served (and must authenticate).
            assert!(anonymous_peer_allowed(false, &[], peer(p)), "{p}");
        }
        assert!(anonymous_peer_allowed(true, &listed, peer("192.0.2.2:5")));
        assert!(anonymous_peer_allowed(
            true,
            &listed,
            peer("[::ffff:192.0.2.2]:5")
        ));
        assert!(!anonymous_peer_allowed(true, &listed, peer("192.0.2.20:5")));
    }

    #[tokio::test]
    async fn a_request_without_host_is_refused_as_a_wrong_one() {
        use tower::ServiceExt as _;
        let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        for host in [None, Some("evil.example")] {
            let mut req =
                axum::http::Request::post("/mcp").header("content-type", "application/json");
            if let Some(h) = host {
                req = req.header("host", h);
            }
            let resp = app()
                .await
                .oneshot(req.body(axum::body::Body::from(ping)).unwrap())
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), 403, "{host:?}");
        }
        let (status, body) = post(app().await, &[], ping).await;
        assert_eq!(status, 200, "{body}");
    }

    #[test]
    fn loopback_hosts() {
        for h in [
            "localhost",
            "localhost:8808",
            "127.0.0.1:1",
            "[::1]:80",
            "[::1]",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in [
            "evil.example",
            "evil.example:8808",
            "127.0.0.2",
            "localhost.evil.example",
        ] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }
}
