//! The configuration file: one TOML file, with environment overrides
//! (`TASKGATE__SERVER__LISTEN=…` overrides `server.listen`).
//!
//! Loading is pure: it reads the file and the environment, checks every value, and
//! names the offending key and file on error. No engine client is built here.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

pub use crate::telemetry::config::{CallerSampling, TelemetryConfig, TelemetryProtocol};

/// One thing wrong in a configuration file: the key at fault and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The dotted path of the offending key (empty when the file itself is at fault).
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigProblem {
    /// A problem at `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Everything wrong with a configuration file, each problem naming the file and
/// its key. Validation collects every problem it can find before reporting, so a
/// file with three mistakes is answered with three lines.
#[derive(Debug, thiserror::Error)]
pub struct ConfigFileError {
    /// The config file.
    pub file: String,
    /// What is wrong, in file order where there is one; never empty.
    pub problems: Vec<ConfigProblem>,
}

impl ConfigFileError {
    /// An error of one problem.
    pub fn one(
        file: impl Into<String>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            file: file.into(),
            problems: vec![ConfigProblem::new(key, message)],
        }
    }

    /// One line per problem: `FILE: KEY: MESSAGE`.
    #[must_use]
    pub fn lines(&self) -> Vec<String> {
        self.problems
            .iter()
            .map(|p| {
                if p.key.is_empty() {
                    format!("{}: {}", self.file, p.message)
                } else {
                    format!("{}: {}: {}", self.file, p.key, p.message)
                }
            })
            .collect()
    }
}

impl std::fmt::Display for ConfigFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.lines().join("\n"))
    }
}

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// How the server listens and guards its HTTP endpoint.
    #[serde(default)]
    pub server: ServerConfig,
    /// The keys that seal task handles and sessions.
    pub keys: KeysConfig,
    /// Who may call over HTTP.
    #[serde(default)]
    pub auth: AuthConfig,
    /// Engine instances by name (`[engines.NAME]`, each with a `kind`).
    #[serde(default)]
    pub engines: BTreeMap<String, Value>,
    /// The tools clients see.
    #[serde(default)]
    pub tools: Vec<ToolConfig>,
    /// OpenTelemetry traces (off unless `endpoint` is set).
    #[serde(default)]
    pub telemetry: TelemetryConfig,
}

/// `[server]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the Streamable HTTP endpoint (`POST /mcp`). Default `127.0.0.1:8808`:
    /// loopback only. A non-loopback address needs authentication (`[auth]`
    /// bearer tokens or OAuth), or `insecure_anonymous_networks`: without either,
    /// `serve` and `check-config` refuse the file.
    pub listen: SocketAddr,
    /// INSECURE. Networks (`ADDRESS/PREFIX`, IPv4 or IPv6; a bare address is
    /// one host) whose peers are served without authentication when no `[auth]`
    /// is configured, besides loopback. Anyone who can reach the port from
    /// them runs every tool that admits `anonymous`. It lifts exactly two
    /// checks, and only for these networks: `serve`'s refusal to listen on a
    /// non-loopback address without authentication, and the per-connection
    /// refusal (403) of anonymous peers whose socket address is not loopback.
    /// The `Host` and `Origin` checks still apply. Refused with `[auth]`
    /// configured (it would do nothing there). Default: empty, so anonymous
    /// HTTP is loopback only; a warning is logged at start when set.
    pub insecure_anonymous_networks: Vec<String>,
    /// `Origin` values allowed to call (for browser-based clients). A request that
    /// carries any other `Origin` gets 403. Requests without `Origin` are allowed.
    pub allowed_origins: Vec<String>,
    /// `Host` values allowed besides the loopback names (`localhost`, `127.0.0.1`,
    /// `[::1]`, with or without port), which guard against DNS rebinding. Set it to
    /// the names clients use when taskgate listens on a non-loopback address; `["*"]`
    /// turns the check off.
    pub allowed_hosts: Vec<String>,
    /// Largest request body accepted, in bytes (larger: 413). Default 1 MiB.
    pub max_body_bytes: usize,
    /// Deadline of every single call to an engine. Default `15s`.
    #[serde(with = "humantime_serde")]
    pub call_timeout: Duration,
    /// Longest a client request may wait for a run (a synchronous call of a
    /// long-running tool, a blocking result). Default `60s`.
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
    /// Most entries one JSON-RPC batch may hold (2025-03-26 sessions); a longer
    /// batch is refused whole with -32600, so one request cannot fan out into
    /// unbounded engine calls. Default 32.
    pub max_batch: usize,
    /// Most requests that may wait for runs at once (synchronous calls of
    /// long-running tools, blocking `tasks/result`), in all. Past it a request is
    /// refused at once with a retryable error. Default 256.
    pub max_waits: usize,
    /// Most requests of one caller that may wait for runs at once. Default 16.
    pub max_waits_per_caller: usize,
    /// Longest a `subscriptions/listen` stream stays open (2026-07-28 task
    /// notifications). It ends earlier when every task it watches is terminal
    /// or the client closes it; at this bound the server ends it with its
    /// result, and a client that still wants notifications listens again. Each
    /// open stream holds a slot of `max_waits` and `max_waits_per_caller`, and
    /// its runs count against `max_watched_runs_per_caller`.
    /// Default `10m`.
    #[serde(with = "humantime_serde")]
    pub max_listen: Duration,
    /// How often an open `subscriptions/listen` stream over HTTP carries a `:`
    /// keep-alive comment, so proxies do not close a quiet stream. Default `15s`.
    #[serde(with = "humantime_serde")]
    pub listen_keep_alive: Duration,
    /// Most engine calls one request may make (a batch counts as one request;
    /// starts, reads, cancels, answers and SEP-1391 lookups count, the paced
    /// re-reads of a request that waits for a run do not: `max_wait`,
    /// `max_waits` and `max_wait_reads_per_minute` bound those). Past it the rest of the request gets a
    /// retryable error naming this key, so one request cannot drain a
    /// rate-limited engine account. Default 64.
    pub max_engine_calls: usize,
    /// Most runs one caller may start per minute (a SEP-1391 retry that
    /// reaches its run again counts too). The first minute's worth may come at
    /// once, then one per `60s / N`. Past it a start is refused before any
    /// engine call with a retryable error naming this key. Like every
    /// per-caller quota, it is counted in memory by each replica on its own.
    /// Default 60.
    pub max_starts_per_minute: u32,
    /// Most SEP-1391 token look-ups one caller may make per minute: every
    /// `tools/async/status`, `tools/async/result`, cancel or log page named by
    /// an operation token, and the look-up of each `tools/call` with an
    /// `operation`. A look-up searches only the tools the caller may use. Past
    /// it the request is refused with a retryable error naming this key, before
    /// any engine call. Counted in memory per replica. Default 300.
    pub max_lookups_per_minute: u32,
    /// Most engine reads per minute that one caller's waiting requests may
    /// cause (a blocking `tasks/result`, a synchronous call of a long-running
    /// tool, a SEP-1391 status request that waits for an answer): the reads
    /// `max_engine_calls` leaves out. Past it the waiting request ends with a
    /// retryable error naming this key. Counted in memory per replica.
    /// Default 600.
    pub max_wait_reads_per_minute: u32,
    /// Most runs one caller's open `subscriptions/listen` streams may watch at
    /// once (a run watched by two of its streams counts twice). A listen
    /// request that would pass it is refused with a retryable error naming
    /// this key. Counted in memory per replica. Default 64.
    pub max_watched_runs_per_caller: usize,
    /// How long a client may take to send a request's headers over HTTP; a
    /// slower connection is closed. Default `10s`.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// How long a client may take to send a request's body over HTTP, from its
    /// headers to its last byte; a slower one gets 408 and the connection is
    /// closed. Default `30s`.
    #[serde(with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// Serve HTTP/2 without TLS ("h2c", prior knowledge: the client starts
    /// with HTTP/2's connection preface, no upgrade) on `listen`, beside
    /// HTTP/1.1, told apart by the connection's first bytes. Many requests,
    /// `subscriptions/listen` streams included, then share one connection, so
    /// thousands of open streams need a few connections instead of one each.
    /// Every rule of a connection holds per HTTP/2 stream as for an HTTP/1
    /// request (Host, now also `:authority`; Origin; authentication; body size
    /// and `body_read_timeout`; the per-caller bounds count streams); the
    /// loopback rule for anonymous callers is decided per connection, by its
    /// peer address. `header_read_timeout` bounds the wait for the preface;
    /// after it, HTTP/2 has no header deadline and these stand in: at most
    /// `http2_max_concurrent_streams` streams per connection (more are refused
    /// with REFUSED_STREAM), a header list of at most 16 KiB, a ping every
    /// `listen_keep_alive` that must be answered within `header_read_timeout`
    /// (else the connection is closed), and the HTTP/2 library's limits on
    /// streams a client resets (the "rapid reset" attack). Default `false`:
    /// HTTP/1.1 only, and a connection that opens with the HTTP/2 preface is
    /// closed unanswered. Turn it on behind a proxy that speaks h2c to its
    /// upstream, or for clients that do.
    pub http2: bool,
    /// With `http2`: most streams (requests) one HTTP/2 connection may have
    /// open at once, announced to the client in its settings
    /// (SETTINGS_MAX_CONCURRENT_STREAMS); a client that opens more has them
    /// refused by the protocol (REFUSED_STREAM), not by taskgate. Default 100.
    pub http2_max_concurrent_streams: u32,
    /// How many threads serve HTTP connections. Each connection is handed to
    /// one of them in turn when it is accepted and served there until it
    /// closes. Default: one per CPU the process may use (a container's CPU
    /// limit counts).
    pub workers: Option<usize>,
    /// A second address serving only `GET /metrics` and `GET /healthz`, so that
    /// a scraper (and a network policy) can reach the metrics without reaching
    /// MCP. When set, `/metrics` is no longer served on `listen`. Default unset:
    /// `/metrics` is served on `listen`.
    pub metrics_listen: Option<SocketAddr>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8808)),
            insecure_anonymous_networks: Vec::new(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_body_bytes: 1024 * 1024,
            call_timeout: Duration::from_secs(15),
            max_wait: Duration::from_secs(60),
            max_batch: 32,
            max_waits: 256,
            max_waits_per_caller: 16,
            max_listen: Duration::from_secs(600),
            listen_keep_alive: Duration::from_secs(15),
            max_engine_calls: 64,
            max_starts_per_minute: 60,
            max_lookups_per_minute: 300,
            max_wait_reads_per_minute: 600,
            max_watched_runs_per_caller: 64,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            http2: false,
            http2_max_concurrent_streams: 100,
            workers: None,
            metrics_listen: None,
        }
    }
}

/// `[keys]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeysConfig {
    /// Sealing keys. The first seals new handles; all of them open (rotation: put
    /// the new key first and keep the old one until its handles have expired).
    pub seal: Vec<KeyConfig>,
}

/// One sealing key. Exactly one of `secret_env`, `secret_file` or `dev_secret`.
/// A secret is the base64 text (standard or URL-safe alphabet, padded or not)
/// of at least 32 random bytes; `taskgate keygen` prints a fresh one. Text
/// that decodes to fewer bytes, to printable text, or to bytes with fewer than
/// 16 distinct values is refused.
/// `Debug` never shows `dev_secret`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// A short id written in clear into each handle, so the right key opens it
    /// (`[A-Za-z0-9_-]`, at most 16 characters).
    pub id: String,
    /// Environment variable that holds the secret.
    pub secret_env: Option<String>,
    /// File that holds the secret (surrounding white space is ignored).
    pub secret_file: Option<PathBuf>,
    /// The secret itself, in clear in the file. For development only: refused
    /// when `server.listen` is not loopback or `[auth]` is configured, and
    /// taskgate warns loudly at startup when it is used.
    pub dev_secret: Option<String>,
}

impl std::fmt::Debug for KeyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyConfig")
            .field("id", &self.id)
            .field("secret_env", &self.secret_env)
            .field("secret_file", &self.secret_file)
            .field(
                "dev_secret",
                &self.dev_secret.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// `[auth]`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Static bearer tokens for HTTP. With neither these nor `[auth.oauth]`, every
    /// HTTP caller is `anonymous`. Otherwise a request without a listed token (or a
    /// valid OAuth access token) gets 401.
    #[serde(default)]
    pub bearer: Vec<BearerConfig>,
    /// OAuth 2.1 access tokens (taskgate as a resource server).
    pub oauth: Option<OAuthConfig>,
    /// What the stdio caller (`local:<user>`, the user running taskgate) holds,
    /// for access rules that ask for scopes or groups.
    #[serde(default)]
    pub local: LocalCallerConfig,
    /// The access rule of every tool that has no `access` of its own: a list of
    /// alternatives, as a tool's `access`. Default: `[{ callers = ["*"] }]`, every
    /// caller who got through the front door (a listed static token, or anyone
    /// HTTP serves anonymously), which is what taskgate did before rules
    /// existed. With `[auth.oauth]` it has no default and must be written:
    /// every token any trusted issuer mints for this resource gets through the
    /// front door, so the file says who of them may use tools without their own
    /// rule (a scope, say, or `[{ callers = ["*"] }]` for all of them). Write
    /// `default_access = []` to close every tool that does not name its callers.
    pub default_access: Option<Vec<AccessRule>>,
    /// The limit on failed authentications per peer (`[auth.failures]`).
    #[serde(default)]
    pub failures: FailureLimitConfig,
}

/// `[auth.failures]`: how many refused bearer tokens one peer may present.
///
/// A failure is a request whose bearer token is refused (unknown static token,
/// invalid or inactive access token); a request without a token, or one whose
/// issuer could not be reached, is not. Past the limit, every request from that
/// peer is answered HTTP 429 with `Retry-After` (the seconds until its window
/// ends, also as `retryAfterMs` in the JSON-RPC error's `data`) before its token
/// is looked at, so it costs no introspection call. Peers are told apart by IP
/// address; an IPv6 peer by its /64 network. Peers behind one NAT or proxy share
/// a count.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FailureLimitConfig {
    /// Most failed authentications one peer may make per `window`. `0` turns the
    /// limit off. Default 20.
    pub per_peer: u32,
    /// The window the failures are counted in (it starts with a peer's first
    /// failure). Default `1m`.
    #[serde(with = "humantime_serde")]
    pub window: Duration,
}

impl Default for FailureLimitConfig {
    fn default() -> Self {
        Self {
            per_peer: 20,
            window: Duration::from_secs(60),
        }
    }
}

/// A network of `server.insecure_anonymous_networks`: an address and how many
/// of its leading bits a peer must share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNetwork {
    addr: std::net::IpAddr,
    prefix: u8,
}

impl IpNetwork {
    /// Reads `ADDRESS/PREFIX` or a bare address (one host).
    ///
    /// # Errors
    ///
    /// What is wrong with `text`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: std::net::IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not ADDRESS/PREFIX (192.0.2.0/24, fd00::/8)"))?;
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(|| format!("{text:?}: the prefix must be 0 to {bits}"))?,
        };
        Ok(Self { addr, prefix })
    }

    /// True when `ip` is in this network (an IPv4-mapped IPv6 address counts as
    /// its IPv4 address).
    #[must_use]
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// One static bearer token.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BearerConfig {
    /// The caller this token identifies (no `#`, which OAuth callers use; not
    /// `anonymous` nor `local:…`, the names of the unauthenticated HTTP caller
    /// and of the stdio caller). Tasks and SEP-1391 tokens are bound to it.
    pub caller: String,
    /// Environment variable that holds the token.
    pub token_env: Option<String>,
    /// File that holds the token.
    pub token_file: Option<PathBuf>,
    /// Scopes this caller holds, for access rules.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Groups (roles) this caller is in, for access rules.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// `[auth.local]`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalCallerConfig {
    /// Scopes the stdio caller holds.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Groups the stdio caller is in.
    #[serde(default)]
    pub groups: Vec<String>,
}

/// One alternative of an access rule: it admits a caller when every condition it
/// gives holds. At least one condition is required.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessRule {
    /// The caller is one of these (`"*"`: any caller). Static callers by their
    /// name, OAuth callers as `ISSUER#SUBJECT`, stdio as `local:USER`.
    #[serde(default)]
    pub callers: Vec<String>,
    /// The caller holds every one of these scopes. A valid OAuth token that lacks
    /// them is answered 403 `insufficient_scope` naming them (step-up).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The caller is in at least one of these groups (the OAuth `groups_claim`, or
    /// a static caller's `groups`).
    #[serde(default)]
    pub groups: Vec<String>,
}

/// `[auth.oauth]`: accept OAuth 2.1 access tokens issued for this resource.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// This server's resource identifier: the URL clients use for `/mcp`
    /// (`https://taskgate.example.com/mcp`). Tokens must carry it in `aud`
    /// (RFC 8707), and the Protected Resource Metadata names it.
    pub resource: String,
    /// The authorization servers whose tokens are accepted.
    pub issuers: Vec<IssuerConfig>,
    /// Scopes listed in the Protected Resource Metadata and in the `scope` of a
    /// 401 challenge. Default: every scope named by an access rule.
    pub scopes_supported: Option<Vec<String>>,
    /// The claim that, after the issuer, names the caller: the caller is
    /// `ISSUER#VALUE`. Default `sub`.
    #[serde(default = "default_caller_claim")]
    pub caller_claim: String,
    /// A claim that holds the caller's groups or roles (an array of strings, or
    /// one space-separated string), for access rules. Default: none.
    pub groups_claim: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`. Default `30s`.
    #[serde(default = "default_leeway", with = "humantime_serde")]
    pub leeway: Duration,
    /// Deadline of every call to an authorization server (metadata, keys,
    /// introspection). Default `5s`.
    #[serde(default = "default_issuer_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Shortest time between two key-set fetches of one issuer (a token with an
    /// unknown `kid` triggers one). Default `30s`.
    #[serde(default = "default_jwks_min_refresh", with = "humantime_serde")]
    pub jwks_min_refresh: Duration,
    /// How long fetched keys are used before they are fetched again. Default `1h`.
    #[serde(default = "default_jwks_max_age", with = "humantime_serde")]
    pub jwks_max_age: Duration,
    /// Longest an introspection answer "active" is reused without asking the
    /// issuer again (never past the token's `exp`): a token revoked at the issuer
    /// may still be admitted for this long. `0s` asks on every request. Answers
    /// are kept under the token's SHA-256, never the token. Default `60s`.
    #[serde(default = "default_introspection_ttl", with = "humantime_serde")]
    pub introspection_cache_ttl: Duration,
    /// How long a token its issuer called inactive (or that it refused: wrong
    /// audience, expired, …) is refused again without asking. `0s` asks on every
    /// request. Default `60s`.
    #[serde(default = "default_introspection_ttl", with = "humantime_serde")]
    pub introspection_negative_ttl: Duration,
    /// Most tokens each of the two introspection caches (active, refused) holds;
    /// past it the oldest entries go first. Default 10000.
    #[serde(default = "default_introspection_cache_entries")]
    pub introspection_cache_entries: usize,
}

/// One trusted authorization server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerConfig {
    /// Its issuer identifier, exactly as tokens carry it in `iss`; its metadata is
    /// discovered from it (RFC 8414, then OpenID Connect discovery).
    pub issuer: String,
    /// The key set URL; default: the `jwks_uri` of its metadata.
    pub jwks_uri: Option<String>,
    /// Signature algorithms accepted for its JWT access tokens. Default
    /// `["RS256", "ES256"]`; asymmetric algorithms only.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// Token introspection (RFC 7662) for the opaque tokens it issues. Without
    /// it, only JWT access tokens of this issuer are accepted.
    pub introspection: Option<IntrospectionConfig>,
}

/// How taskgate introspects opaque tokens.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntrospectionConfig {
    /// The introspection endpoint; default: the `introspection_endpoint` of the
    /// issuer's metadata.
    pub endpoint: Option<String>,
    /// taskgate's client id at the authorization server (HTTP Basic).
    pub client_id: Option<String>,
    /// Environment variable that holds that client's secret.
    pub client_secret_env: Option<String>,
    /// File that holds that client's secret.
    pub client_secret_file: Option<PathBuf>,
    /// The beginnings of the opaque tokens this issuer issues (ORY Hydra's
    /// access tokens begin `ory_at_`). An opaque token is shown to one issuer
    /// only: the one with the longest of these prefixes it begins with, else the
    /// one introspecting issuer that lists none; a token no issuer claims is
    /// refused without a call. At most one introspecting issuer may list none.
    /// Default: none.
    #[serde(default)]
    pub token_prefixes: Vec<String>,
}

fn default_caller_claim() -> String {
    "sub".to_owned()
}

fn default_leeway() -> Duration {
    Duration::from_secs(30)
}

fn default_issuer_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_jwks_min_refresh() -> Duration {
    Duration::from_secs(30)
}

fn default_jwks_max_age() -> Duration {
    Duration::from_secs(3600)
}

fn default_introspection_ttl() -> Duration {
    Duration::from_secs(60)
}

fn default_introspection_cache_entries() -> usize {
    10_000
}

fn default_algorithms() -> Vec<String> {
    vec!["RS256".to_owned(), "ES256".to_owned()]
}

/// How a tool runs, as clients see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ToolMode {
    /// Only as a task (or operation): clients without a long-running dialect do not
    /// see it, unless its `legacy` policy says otherwise.
    Async,
    /// As a task for clients that can, synchronously (waiting up to `max_wait`) for
    /// the others.
    #[default]
    Hybrid,
    /// Always synchronously: the call waits for the run and returns its result.
    Sync,
}

/// What a client without a long-running dialect gets from a long-running tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LegacyPolicy {
    /// The tool is not listed for such clients.
    Hide,
    /// The call waits up to `max_wait`, with progress notifications when asked.
    Wait,
    /// `handles`: the call returns the run's sealed task handle at once; the
    /// companion tools read, fetch and cancel it.
    #[serde(rename = "handles")]
    Companions,
}

/// `[[tools]]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// Name clients call it by (`[A-Za-z0-9_.-]`, 1 to 64 characters).
    pub name: String,
    /// A human-friendly title.
    pub title: Option<String>,
    /// What the tool does, for the model.
    pub description: Option<String>,
    /// The engine instance that runs it (a key of `[engines]`).
    pub engine: String,
    /// JSON Schema (2020-12) of the arguments; its root must be `type = "object"`.
    /// Arguments are checked against it before any engine call. Arguments it does
    /// not declare (in `properties`, `patternProperties` or a subschema) are
    /// refused, unless its root sets `additionalProperties` (or
    /// `unevaluatedProperties`) itself: `additionalProperties = true` lets any
    /// argument through. Default: `{type = "object"}`, which takes no arguments.
    #[serde(default = "empty_object_schema")]
    pub input_schema: Value,
    /// JSON Schema of the structured result, if the pipeline produces one.
    pub output_schema: Option<Value>,
    /// `async`, `hybrid` (default) or `sync`.
    #[serde(default)]
    pub mode: ToolMode,
    /// What clients without a long-running dialect get: `hide` (default for
    /// `async` tools), `wait` (default for the others) or `handles`.
    pub legacy: Option<LegacyPolicy>,
    /// How often clients should poll (told to them as the poll interval). Default `5s`.
    #[serde(default = "default_poll", with = "humantime_serde")]
    pub poll_interval: Duration,
    /// How long a task stays readable, counted from its creation (the `ttlMs` told
    /// to clients; an expired handle reads as not found). Default `24h`. Engines
    /// with native retention (Kubernetes' `ttlSecondsAfterFinished`) enforce it.
    #[serde(default = "default_keep_alive", with = "humantime_serde")]
    pub keep_alive: Duration,
    /// Longest a synchronous call of this tool waits. Default: `server.max_wait`.
    #[serde(default, with = "humantime_serde")]
    pub max_wait: Option<Duration>,
    /// How long a 2026-07-28 `tools/call` that would create a task first waits
    /// for the new run's first input request (when the call declared
    /// elicitation). A request seen in that time is answered before the task
    /// exists, as an `input_required` result (MRTR): the task is created on the
    /// retry that answers it. Default `0s`: tasks are created at once.
    #[serde(default, with = "humantime_serde")]
    pub input_wait: Option<Duration>,
    /// Who may see and call this tool (and cancel its runs): a list of
    /// alternatives, any one of which admits a caller. Default: `auth.default_access`.
    pub access: Option<Vec<AccessRule>>,
    /// Who may answer the input requests of this tool's runs (fill its forms,
    /// approve or refuse its approval gates), in the shape of `access`. Default:
    /// the tool's `access`. A caller it admits answers an approval with the
    /// question's approval ticket even if it may not call the tool.
    pub answer_access: Option<Vec<AccessRule>>,
    /// Four eyes: the caller who started a run may not answer its approvals;
    /// another caller admitted by `answer_access` must, with the approval
    /// ticket. Default `false`. Whatever it says, an approval is never taken
    /// inside the `tools/call` that started the run.
    #[serde(default)]
    pub four_eyes: bool,
    /// Keys of input requests that are approvals besides the engine's own gates
    /// (a Kubernetes `approval`, a GitHub `environment_approval`, a Step
    /// Functions human step, an Airflow `ApprovalOperator` are approvals
    /// already); `["*"]` makes every question of the tool one. For exec tools,
    /// the name the process gives its request file. Default: none.
    #[serde(default)]
    pub approval_inputs: Vec<String>,
    /// The engine-specific target (a state machine, a Job template, a workflow, a
    /// command). See each engine's section.
    #[serde(default = "empty_table")]
    pub target: Value,
}

impl ToolConfig {
    /// The effective legacy policy.
    #[must_use]
    pub fn legacy_policy(&self) -> LegacyPolicy {
        self.legacy.unwrap_or(match self.mode {
            ToolMode::Async => LegacyPolicy::Hide,
            _ => LegacyPolicy::Wait,
        })
    }
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object"})
}

fn empty_table() -> Value {
    Value::Object(serde_json::Map::new())
}

fn default_poll() -> Duration {
    Duration::from_secs(5)
}

fn default_keep_alive() -> Duration {
    Duration::from_secs(24 * 3600)
}

/// Reads `path` with environment overrides and deserializes it.
///
/// # Errors
///
/// A [`ConfigFileError`] naming the file and, where serde says it, the key.
pub fn load(path: &Path) -> Result<FileConfig, ConfigFileError> {
    let file = path.display().to_string();
    if !path.exists() {
        return Err(ConfigFileError::one(file, "", "the file does not exist"));
    }
    let built = config::Config::builder()
        .add_source(config::File::from(path).format(config::FileFormat::Toml))
        .add_source(
            config::Environment::with_prefix("TASKGATE")
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true),
        )
        .build()
        .map_err(|e| ConfigFileError::one(file.clone(), "", e.to_string()))?;
    built
        .try_deserialize::<FileConfig>()
        .map_err(|e| split_config_error(&file, &e.to_string()))
}

/// The config crate says "… for key `a.b`": move that key to the front.
fn split_config_error(file: &str, message: &str) -> ConfigFileError {
    if let Some((what, key)) = message.rsplit_once(" for key `") {
        let key = key.trim_end_matches('`').to_owned();
        // Name the unknown field itself in the key path.
        let key = match what.strip_prefix("unknown field `") {
            Some(rest) => match rest.split_once('`') {
                Some((field, _)) => format!("{key}.{field}"),
                None => key,
            },
            None => key,
        };
        ConfigFileError::one(file, key, what)
    } else {
        let key = message
            .strip_prefix("missing field `")
            .and_then(|r| r.split_once('`'))
            .map(|(k, _)| k.to_owned())
            .unwrap_or_default();
        ConfigFileError::one(file, key, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    const MINIMAL: &str =
        "[keys]\nseal = [{ id = \"k1\", dev_secret = \"TiJKLw6A+Cpy7N/hCAOqrZAWAx3BgTT5mDneUT0Cijc=\" }]\n";

    #[test]
    fn unknown_key_is_named_with_its_path() {
        let f = write(&format!(
            "{MINIMAL}[server]\nlisten = \"127.0.0.1:1\"\nlisen = 3\n"
        ));
        let err = load(f.path()).unwrap_err();
        assert_eq!(err.problems.len(), 1, "{err}");
        assert_eq!(err.problems[0].key, "server.lisen", "{err}");
        assert!(err.to_string().contains(&f.path().display().to_string()));
    }

    #[test]
    fn defaults_fill_in() {
        let f = write(MINIMAL);
        let cfg = load(f.path()).unwrap();
        assert_eq!(cfg.server.listen.to_string(), "127.0.0.1:8808");
        assert!(cfg.tools.is_empty());
    }

    #[test]
    fn networks_hold_what_they_name() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let net = IpNetwork::parse("192.0.2.0/24").unwrap();
        assert!(net.contains(ip("192.0.2.7")));
        assert!(net.contains(ip("::ffff:192.0.2.7")));
        assert!(!net.contains(ip("192.0.3.7")));
        assert!(!net.contains(ip("2001:db8::1")));
        let host = IpNetwork::parse("192.0.2.9").unwrap();
        assert!(host.contains(ip("192.0.2.9")) && !host.contains(ip("192.0.2.8")));
        assert!(IpNetwork::parse("0.0.0.0/0")
            .unwrap()
            .contains(ip("203.0.113.1")));
        assert!(IpNetwork::parse("2001:db8::/32")
            .unwrap()
            .contains(ip("2001:db8:1::1")));
        for bad in ["192.0.2.0/33", "example.com", "::/129", "1.2.3.4/x", ""] {
            assert!(IpNetwork::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_are_human() {
        let f = write(&format!(
            "{MINIMAL}[[tools]]\nname = \"t\"\nengine = \"e\"\npoll_interval = \"250ms\"\nkeep_alive = \"2h\"\n"
        ));
        let cfg = load(f.path()).unwrap();
        assert_eq!(cfg.tools[0].poll_interval, Duration::from_millis(250));
        assert_eq!(cfg.tools[0].keep_alive, Duration::from_secs(7200));
        assert_eq!(cfg.tools[0].legacy_policy(), LegacyPolicy::Wait);
    }
}
