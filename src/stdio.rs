//! stdio transport: newline-delimited JSON-RPC on stdin/stdout; logs go to stderr.
//!
//! Requests are served concurrently. The only state is the connection's own: the
//! session `initialize` opened and the requests still in flight (so
//! `notifications/cancelled` can stop one).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::gateway::Gateway;
use crate::legacy::Session;
use crate::rpc::Message;
use crate::server::{self, Origin};

/// How many SEP-1391 calls of one connection are remembered for cancellation by
/// request id.
const MAX_REMEMBERED_CALLS: usize = 4096;

/// The caller on stdio: the local user running the server.
#[must_use]
pub fn local_caller() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "local".to_owned());
    format!("local:{user}")
}

/// Serves one connection until `input` ends, then waits for requests in flight.
///
/// # Errors
///
/// I/O errors on the streams.
pub async fn serve<R, W>(gw: Arc<Gateway>, input: R, mut output: W) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let caller = Arc::new(local_caller());
    let session: Arc<Mutex<Option<Session>>> = Arc::new(Mutex::new(None));
    let in_flight: Arc<Mutex<HashMap<String, tokio::task::AbortHandle>>> = Arc::default();
    // SEP-1391 calls of this connection: request id → operation token, so a later
    // notifications/cancelled naming the call reaches the operation.
    let operations: Mutex<HashMap<String, String>> = Mutex::default();
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        while let Some(message) = rx.recv().await {
            let mut line = message.to_string();
            line.push('\n');
            output.write_all(line.as_bytes()).await?;
            output.flush().await?;
        }
        Ok::<_, std::io::Error>(())
    });

    let mut lines = BufReader::new(input).lines();
    let mut tasks = JoinSet::new();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let message = match server::parse(line.as_bytes()) {
            Ok(m) => m,
            Err((_, body)) => {
                let _ = tx.send(body);
                continue;
            }
        };
        if let Message::Notification { method, params } = &message {
            if method == "notifications/cancelled" {
                let key = params
                    .get("requestId")
                    .map(Value::to_string)
                    .unwrap_or_default();
                if let Some(handle) = in_flight.lock().expect("lock").remove(&key) {
                    handle.abort();
                    tracing::info!(request = %key, "request cancelled by the client");
                }
                // SEP-1391: the request may be an operation's original call.
                let token = operations.lock().expect("lock").get(&key).cloned();
                if let Some(token) = token {
                    let gw = gw.clone();
                    let caller = caller.clone();
                    tasks.spawn(async move {
                        if let Err(e) = crate::operations::cancel(&gw, &caller, &token).await {
                            tracing::info!(error = %e, "operation cancel failed");
                        }
                    });
                }
            }
        }
        if let Message::Request { id, method, params } = &message {
            if let Some(token) = params
                .get("operation")
                .and_then(|o| o.get("token"))
                .and_then(Value::as_str)
            {
                if method == "tools/call" {
                    let mut calls = operations.lock().expect("lock");
                    // Bounded: a long-lived connection does not grow without end;
                    // older calls can still be cancelled by _operation.token.
                    if calls.len() >= MAX_REMEMBERED_CALLS {
                        calls.clear();
                    }
                    calls.insert(id.to_string(), token.to_owned());
                }
            }
        }
        let request_key = match &message {
            Message::Request { id, .. } => Some(id.to_string()),
            _ => None,
        };
        let gw = gw.clone();
        let tx = tx.clone();
        let caller = caller.clone();
        let session = session.clone();
        let flight = in_flight.clone();
        let key = request_key.clone();
        let abort = tasks.spawn(async move {
            let current = session.lock().expect("lock").clone();
            let origin = Origin {
                caller: &caller,
                headers: None,
                session: current.as_ref(),
                out: Some(tx.clone()),
            };
            let dispatched = server::dispatch(&gw, message, &origin).await;
            if let Some(opened) = dispatched.opened {
                *session.lock().expect("lock") = Some(opened);
            }
            if let Some(key) = key {
                flight.lock().expect("lock").remove(&key);
            }
            if let Some(body) = dispatched.body {
                let _ = tx.send(body);
            }
        });
        if let Some(key) = request_key {
            let mut flight = in_flight.lock().expect("lock");
            // A request may already have finished (and removed itself) by now.
            if !abort.is_finished() {
                flight.insert(key, abort);
            }
        }
    }
    while tasks.join_next().await.is_some() {}
    drop(tx);
    writer.await.map_err(std::io::Error::other)?
}
