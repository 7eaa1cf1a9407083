//! How one accepted connection is served: hyper's HTTP/1 server with the
//! header read deadline and, with `server.http2`, its HTTP/2 server too
//! (h2c with prior knowledge), told apart by the connection's first bytes;
//! and its graceful end once the server is told to stop.

use std::convert::Infallible;

use axum::response::Response;
use hyper::body::Incoming;
use hyper::service::Service;
use hyper::Request;

/// How each connection is served: hyper's HTTP/1 server with the header read
/// deadline, and with `server.http2` its HTTP/2 server too (h2c, prior
/// knowledge), chosen by the connection's first bytes.
pub(super) struct Builders {
    http1: hyper::server::conn::http1::Builder,
    /// With `server.http2`: the HTTP/2 server. Its streams are spawned with
    /// `tokio::spawn`, so on the lane of their connection.
    http2: Option<hyper::server::conn::http2::Builder<hyper_util::rt::TokioExecutor>>,
    /// How long a connection may take to show which protocol it speaks.
    preface_timeout: std::time::Duration,
}

/// What an HTTP/2 connection opens with (RFC 9113, section 3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl Builders {
    pub(super) fn new(server: &crate::core::config::ServerConfig) -> Self {
        let mut http1 = hyper::server::conn::http1::Builder::new();
        http1
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(server.header_read_timeout);
        let http2 = server.http2.then(|| {
            let mut http2 =
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
            // What stands in for HTTP/1's header deadline (see the doc of
            // `server.http2`): bounded streams and header lists, a peer that
            // must answer pings, and the library's reset-flood limits (left
            // at their defaults).
            http2
                .timer(hyper_util::rt::TokioTimer::new())
                .max_concurrent_streams(server.http2_max_concurrent_streams)
                .max_header_list_size(16 * 1024)
                .keep_alive_interval(server.listen_keep_alive)
                .keep_alive_timeout(server.header_read_timeout);
            http2
        });
        Self {
            http1,
            http2,
            preface_timeout: server.header_read_timeout,
        }
    }

    /// Serves one connection until it closes, or, once `stopping` changes,
    /// until what is in flight on it has finished.
    pub(super) async fn serve<S>(
        &self,
        stream: tokio::net::TcpStream,
        front: S,
        stopping: tokio::sync::watch::Receiver<bool>,
    ) where
        S: Service<Request<Incoming>, Response = Response, Error = Infallible> + Send + 'static,
        S::Future: Send + 'static,
    {
        let Some(http2) = &self.http2 else {
            let connection = self
                .http1
                .serve_connection(hyper_util::rt::TokioIo::new(stream), front);
            return drive(connection, stopping, |c| c.graceful_shutdown()).await;
        };
        let sniffed = match Sniffed::read(stream, self.preface_timeout).await {
            Ok(sniffed) => sniffed,
            Err(e) => {
                tracing::debug!(error = %e, "a connection ended before its first request");
                return;
            }
        };
        if sniffed.is_http2() {
            let connection = http2.serve_connection(hyper_util::rt::TokioIo::new(sniffed), front);
            drive(connection, stopping, |c| c.graceful_shutdown()).await;
        } else {
            let connection = self
                .http1
                .serve_connection(hyper_util::rt::TokioIo::new(sniffed), front);
            drive(connection, stopping, |c| c.graceful_shutdown()).await;
        }
    }
}

/// Runs `connection` to its end; once `stopping` changes, asks it to shut down
/// gracefully (`shutdown`: no new requests; HTTP/2 sends GOAWAY) and waits.
async fn drive<C>(
    connection: C,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    shutdown: impl FnOnce(std::pin::Pin<&mut C>),
) where
    C: std::future::Future<Output = Result<(), hyper::Error>>,
{
    tokio::pin!(connection);
    tokio::select! {
        outcome = connection.as_mut() => {
            if let Err(e) = outcome {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        _ = stopping.changed() => {
            shutdown(connection.as_mut());
            let _ = connection.await;
        }
    }
}

/// A connection whose first bytes were read to tell HTTP/2's preface from an
/// HTTP/1 request; they are read again, first, by whoever serves it.
struct Sniffed {
    stream: tokio::net::TcpStream,
    head: [u8; H2_PREFACE.len()],
    /// `head[start..end]` is still to be read.
    start: usize,
    end: usize,
}

impl Sniffed {
    /// Reads until the bytes are the whole preface or differ from it, within
    /// `timeout` (an HTTP/1 request differs at its second byte at the latest).
    async fn read(
        mut stream: tokio::net::TcpStream,
        timeout: std::time::Duration,
    ) -> std::io::Result<Self> {
        use tokio::io::AsyncReadExt as _;
        let mut head = [0; H2_PREFACE.len()];
        let mut end = 0;
        let deadline = tokio::time::Instant::now() + timeout;
        while end < head.len() && head[..end] == H2_PREFACE[..end] {
            let n = tokio::time::timeout_at(deadline, stream.read(&mut head[end..]))
                .await
                .map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no request within server.header_read_timeout",
                    )
                })??;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            end += n;
        }
        Ok(Self {
            stream,
            head,
            start: 0,
            end,
        })
    }

    fn is_http2(&self) -> bool {
        self.head[..self.end] == H2_PREFACE[..]
    }
}

impl tokio::io::AsyncRead for Sniffed {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let me = self.get_mut();
        if me.start < me.end {
            let n = (me.end - me.start).min(buf.remaining());
            buf.put_slice(&me.head[me.start..me.start + n]);
            me.start += n;
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut me.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Sniffed {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
