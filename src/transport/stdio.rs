//! stdio transport: newline-delimited JSON-RPC on stdin/stdout; logs go to stderr.
//!
//! Requests are served concurrently. The only state is the connection's own: the
//! requests still in flight (so `notifications/cancelled` can stop one) here,
//! and the session and SEP-1391 calls the front door keeps in its [`Connection`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::task::JoinSet;

use crate::core::Gateway;
use crate::dialect::wire::Outbound;
use crate::server::{self, Connection, Inbound};

/// Serves one connection until `input` ends, then waits for requests in flight.
///
/// # Errors
///
/// I/O errors on the streams.
pub async fn serve<R, W>(gw: Arc<Gateway>, input: R, output: W) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let caller = Arc::new(server::local_caller(&gw));
    let connection = Arc::new(Connection::new());
    let in_flight: Arc<Mutex<HashMap<String, tokio::task::AbortHandle>>> = Arc::default();
    let (tx, writer) = spawn_writer(output);

    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    let mut tasks = JoinSet::new();
    // A line is one message: bytes, not necessarily UTF-8 (a bad one is a parse
    // error, not the end of the connection), and at most server.max_body_bytes.
    while read_line(&mut input, &mut line, gw.server.max_body_bytes).await? {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if line.len() > gw.server.max_body_bytes {
            let error = crate::rpc::RpcError::InvalidRequest(format!(
                "a message longer than this server accepts ({} bytes, server.max_body_bytes)",
                gw.server.max_body_bytes
            ));
            let _ = tx.send(error.response(&Value::Null).into());
            continue;
        }
        let inbound = Inbound {
            caller: &caller,
            headers: None,
            connection: Some(&connection),
            peer: None,
        };
        let admitted = match server::admit(&gw, &inbound, &line) {
            Ok(a) => a,
            Err(refusal) => {
                let _ = tx.send(refusal.body.into());
                continue;
            }
        };
        if let Some(key) = admitted.cancelled_request_key() {
            if let Some(handle) = in_flight.lock().expect("lock").remove(&key) {
                handle.abort();
                tracing::info!(request = %key, "request cancelled by the client");
            }
        }
        let request_key = admitted.request_key();
        let gw = gw.clone();
        let tx = tx.clone();
        let caller = caller.clone();
        let connection = connection.clone();
        let flight = in_flight.clone();
        let key = request_key.clone();
        let abort = tasks.spawn(async move {
            let inbound = Inbound {
                caller: &caller,
                headers: None,
                connection: Some(&connection),
                peer: None,
            };
            let mut dispatched = server::dispatch(&gw, &inbound, admitted, Some(tx.clone())).await;
            // A listen stream: its notifications, until it ends (or is
            // cancelled: this task is aborted), then its closing result.
            if let Some(following) = dispatched.following.take() {
                following.send_all(&tx).await;
            }
            if let Some(key) = key {
                flight.lock().expect("lock").remove(&key);
            }
            if let Some(body) = dispatched.body {
                let _ = tx.send(body.into_value().into());
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

/// The task that writes each message sent on the returned channel to
/// `output`, a line each, until every sender is gone.
fn spawn_writer<W>(mut output: W) -> (Outbound, tokio::task::JoinHandle<std::io::Result<()>>)
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = crate::dialect::wire::outbound();
    let writer = tokio::spawn(async move {
        while let Some(message) = rx.recv().await {
            // JSON text never holds a raw newline: one message, one line.
            let mut line = message.to_bytes();
            line.push(b'\n');
            output.write_all(&line).await?;
            output.flush().await?;
        }
        Ok::<_, std::io::Error>(())
    });
    (tx, writer)
}

/// Reads the next line into `line` (without its newline); `false` at the end of
/// the input. A line longer than `limit` is read past and left in `line`
/// truncated to `limit + 1` bytes, so the caller can refuse it without holding it.
async fn read_line<R: AsyncRead + Unpin>(
    input: &mut BufReader<R>,
    line: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<bool> {
    line.clear();
    let mut read_any = false;
    loop {
        let chunk = input.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(read_any);
        }
        read_any = true;
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        let room = (limit + 1).saturating_sub(line.len());
        line.extend_from_slice(&chunk[..take.min(room)]);
        input.consume(if done { take + 1 } else { take });
        if done {
            return Ok(true);
        }
    }
}
