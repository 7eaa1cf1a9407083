//! The benchmark's yardstick: a bare axum server that answers every `POST /mcp`
//! with one fixed, `tasks/get`-shaped reply. It does what any HTTP JSON server
//! must (accept, read the body, write a reply) and nothing taskgate does (no
//! JSON-RPC, no handle, no engine), so `scripts/bench.sh` can report taskgate's
//! throughput and CPU per request as a ratio to it.
//!
//! ```sh
//! cargo run --release --example baseline -- 127.0.0.1:8809
//! ```

use axum::body::Bytes;
use axum::http::header;
use axum::routing::post;
use axum::Router;

const REPLY: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","taskId":"tg2.bench.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","createdAt":"2026-12-03T07:00:00.000Z","lastUpdatedAt":"2026-12-03T07:00:00.000Z","ttlMs":86400000,"status":"working","pollIntervalMs":5000,"statusMessage":"sleeping"}}"#;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8809".to_owned());
    let app = Router::new().route(
        "/mcp",
        post(|_body: Bytes| async { ([(header::CONTENT_TYPE, "application/json")], REPLY) }),
    );
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    eprintln!("baseline listening on http://{listen}/mcp");
    axum::serve(listener, app).await
}
