//! The metrics port (`server.metrics_listen`): a second HTTP listener that serves
//! `GET /metrics` and `GET /healthz` and nothing else, so a scraper, a probe and a
//! network policy can be given this port without being given MCP. The
//! `/metrics` answer itself lives here too; the MCP listener serves it as well
//! when no metrics port is set.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use axum::Router;

use crate::core::Gateway;

/// The running metrics listener; dropping it stops accepting.
pub(super) struct MetricsPort {
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for MetricsPort {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Binds `server.metrics_listen`, if set, and serves it in the background.
///
/// Each connection has the same header read deadline as the MCP listener
/// (`server.header_read_timeout`); the requests it serves have no body.
///
/// # Errors
///
/// When the address cannot be bound (the error names the setting).
pub(super) async fn start(gw: &Arc<Gateway>) -> std::io::Result<Option<MetricsPort>> {
    let Some(addr) = gw.server.metrics_listen else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen on {addr} (server.metrics_listen): {e}"),
        )
    })?;
    let local: SocketAddr = listener.local_addr()?;
    tracing::info!(address = %local, "serving /metrics and /healthz on http://{local}");
    let router = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(gw.clone());
    let service = hyper_util::service::TowerToHyperService::new(router);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(gw.server.header_read_timeout);
    let accept = tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot accept a connection on the metrics port");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let connection =
                builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service.clone());
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "metrics connection ended with an error");
                }
            });
        }
    });
    Ok(Some(MetricsPort { accept }))
}

/// `/metrics`: OpenMetrics text to a scraper that accepts it (Prometheus
/// does), the classic text format otherwise.
pub(super) async fn metrics(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    let open = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let now = gw.in_flight();
    let (kind, body) = if open {
        (
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            gw.metrics.render(now),
        )
    } else {
        (
            "text/plain; version=0.0.4; charset=utf-8",
            gw.metrics.render_classic(now),
        )
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}
