//! A raw TCP proxy in front of an upstream (moto, the GitHub double, the
//! Kubernetes API server), switched by the test between three modes:
//!
//! - [`Mode::Pass`]: every connection is piped to the upstream byte for byte
//!   (TLS passes through untouched);
//! - [`Mode::Refuse`]: the listening socket is closed (new connections are
//!   refused) and every open connection is closed — an upstream that is down;
//! - [`Mode::Hold`]: new connections are accepted and never answered, and every
//!   open connection is frozen (kept open, nothing forwarded) — an upstream
//!   that hangs; leaving the mode closes them.
//!
//! It counts the connections it accepted and the bytes it carried each way,
//! so a test can tell whether the upstream received anything at all.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Pipe to the upstream.
    Pass,
    /// Refuse new connections, close open ones.
    Refuse,
    /// Accept and never answer; freeze open ones.
    Hold,
}

#[derive(Default)]
struct Counts {
    connections: AtomicU64,
    held: AtomicU64,
    frozen: AtomicU64,
    to_upstream: AtomicU64,
    from_upstream: AtomicU64,
}

/// A running proxy (its tasks run on the test's runtime).
pub struct TcpProxy {
    /// The address it listens on (127.0.0.1, a free port).
    pub addr: SocketAddr,
    upstream: SocketAddr,
    mode: watch::Sender<Mode>,
    counts: Arc<Counts>,
    listener_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl TcpProxy {
    /// Starts a proxy in [`Mode::Pass`] in front of `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> Self {
        let upstream: SocketAddr = tokio::net::lookup_host(upstream)
            .await
            .unwrap_or_else(|e| panic!("resolve {upstream}: {e}"))
            .next()
            .expect("an address");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().unwrap();
        let (mode, _) = watch::channel(Mode::Pass);
        let proxy = Self {
            addr,
            upstream,
            mode,
            counts: Arc::new(Counts::default()),
            listener_task: Mutex::new(None),
        };
        proxy.serve(listener);
        proxy
    }

    /// Starts a proxy in front of the host and port of `url`
    /// (`http://127.0.0.1:5005`, `https://127.0.0.1:6443/`).
    pub async fn in_front_of(url: &str) -> Self {
        Self::start(&host_port(url)).await
    }

    /// `SCHEME://127.0.0.1:PORT` of the proxy, for an upstream reached as `url`
    /// (same scheme and path).
    pub fn url_for(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
        let path = rest.find('/').map_or("", |i| &rest[i..]);
        format!("{scheme}://{}{path}", self.addr)
    }

    fn serve(&self, listener: TcpListener) {
        let (upstream, counts, mut mode) =
            (self.upstream, self.counts.clone(), self.mode.subscribe());
        let task = tokio::spawn(async move {
            loop {
                let (client, _) = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok(a) => a,
                        Err(_) => continue,
                    },
                    changed = mode.changed() => {
                        if changed.is_err() || *mode.borrow() == Mode::Refuse {
                            return; // the listener closes: connections are refused
                        }
                        continue;
                    }
                };
                counts.connections.fetch_add(1, Ordering::SeqCst);
                let current = *mode.borrow();
                let (counts, watcher) = (counts.clone(), mode.clone());
                match current {
                    Mode::Pass => {
                        tokio::spawn(pipe(client, upstream, counts, watcher));
                    }
                    Mode::Hold => {
                        counts.held.fetch_add(1, Ordering::SeqCst);
                        tokio::spawn(hold(client, watcher));
                    }
                    Mode::Refuse => drop(client),
                }
            }
        });
        *self.listener_task.lock().unwrap() = Some(task);
    }

    /// Switches the mode; leaving [`Mode::Refuse`] listens again on the same port.
    pub async fn set(&self, mode: Mode) {
        let was = *self.mode.borrow();
        if was == mode {
            return;
        }
        self.mode.send_replace(mode);
        if was == Mode::Refuse {
            if let Some(task) = self.listener_task.lock().unwrap().take() {
                task.abort();
            }
            let mut tries = 0;
            let listener = loop {
                match TcpListener::bind(self.addr).await {
                    Ok(l) => break l,
                    Err(e) => {
                        tries += 1;
                        assert!(tries < 100, "rebind {}: {e}", self.addr);
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                }
            };
            self.serve(listener);
        } else if mode == Mode::Refuse {
            // Wait until the listener is gone, so the next connect is refused.
            let task = self.listener_task.lock().unwrap().take();
            if let Some(task) = task {
                let _ = task.await;
            }
        }
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// Connections accepted so far (in any mode).
    pub fn connections(&self) -> u64 {
        self.counts.connections.load(Ordering::SeqCst)
    }

    /// Connections accepted in [`Mode::Hold`] so far.
    pub fn held(&self) -> u64 {
        self.counts.held.load(Ordering::SeqCst)
    }

    /// Open connections frozen by a switch to [`Mode::Hold`] so far.
    pub fn frozen(&self) -> u64 {
        self.counts.frozen.load(Ordering::SeqCst)
    }

    /// Bytes carried to the upstream so far.
    pub fn bytes_to_upstream(&self) -> u64 {
        self.counts.to_upstream.load(Ordering::SeqCst)
    }

    /// Bytes carried back from the upstream so far.
    pub fn bytes_from_upstream(&self) -> u64 {
        self.counts.from_upstream.load(Ordering::SeqCst)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        if let Some(task) = self.listener_task.lock().unwrap().take() {
            task.abort();
        }
        // Closing the channel ends every connection task.
        self.mode.send_replace(Mode::Refuse);
    }
}

/// `host:port` of a URL (the scheme's default port when none is given).
pub fn host_port(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let authority = rest.split('/').next().unwrap();
    if authority.contains(':') {
        authority.to_owned()
    } else {
        let port = if scheme == "https" { 443 } else { 80 };
        format!("{authority}:{port}")
    }
}

/// Waits until the mode is no longer `current` (or the proxy is gone).
async fn left(mut mode: watch::Receiver<Mode>, current: Mode) {
    while *mode.borrow_and_update() == current {
        if mode.changed().await.is_err() {
            return;
        }
    }
}

async fn hold(client: TcpStream, mode: watch::Receiver<Mode>) {
    left(mode, Mode::Hold).await;
    drop(client);
}

async fn pipe(
    client: TcpStream,
    upstream: SocketAddr,
    counts: Arc<Counts>,
    mode: watch::Receiver<Mode>,
) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let up = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    counts.to_upstream.fetch_add(n as u64, Ordering::SeqCst);
                    if server_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = server_write.shutdown().await;
    };
    let down = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    counts.from_upstream.fetch_add(n as u64, Ordering::SeqCst);
                    if client_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::select! {
        () = async { tokio::join!(up, down); } => return,
        () = left(mode.clone(), Mode::Pass) => {}
    }
    // A hang freezes the connection: open, nothing forwarded, until the mode
    // changes again; then (and on a refusal at once) both sockets close.
    if *mode.borrow() == Mode::Hold {
        counts.frozen.fetch_add(1, Ordering::SeqCst);
        left(mode, Mode::Hold).await;
    }
    drop((client_read, client_write, server_read, server_write));
}
