//! Stopping the server the way a container runtime stops a pod: SIGTERM ends
//! `taskgate serve` cleanly and promptly (it runs as PID 1 in a container, where
//! a signal without a handler does nothing), and the task started before it is
//! still there for the next server.

use crate::common;

use std::time::Duration;

use common::{wait_for, Server, Setup};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_server_and_loses_nothing() {
    let setup = Setup::new();
    let mut server = Server::start(&setup).await;
    let client = server.client();
    let task = client.start_task("sleeper", json!({})).await;
    let pid = server.pid();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = wait_for(
        "taskgate to exit after SIGTERM",
        Duration::from_secs(15),
        || {
            let exited = server.try_wait();
            async move { exited }
        },
    )
    .await;
    assert!(
        status.success(),
        "a clean exit: {status:?}; {}",
        server.stderr_text()
    );

    let next = Server::start(&setup).await;
    let read = next.client().get(&task).await;
    assert_eq!(read["status"], "working", "{read}");
    next.client().cancel(&task).await;
}
