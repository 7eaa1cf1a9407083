//! taskgate as an OAuth 2.1 resource server (the MCP authorization model):
//! access tokens are validated on every request, JWTs against their issuer's
//! key set and opaque tokens by introspection (RFC 7662), and the caller is the
//! issuer and the subject (`ISSUER#SUB`).
//!
//! - Only configured issuers are trusted; a JWT names its issuer in `iss`, is
//!   checked with that issuer's keys only, with an algorithm from its allow-list
//!   (asymmetric only; `none` never), and must carry this resource in `aud`
//!   (RFC 8707), an `exp` in the future and no `nbf` in the future.
//! - Keys come from the issuer's `jwks_uri` (from its metadata, RFC 8414 or
//!   OpenID Connect discovery), are kept for `jwks_max_age`, and are fetched
//!   again when a token names an unknown `kid` — at most once per
//!   `jwks_min_refresh`, so forged `kid`s cannot make taskgate hammer the issuer.
//! - An opaque token is shown to one issuer only, chosen by configuration: the
//!   one whose `token_prefixes` it begins with (the longest prefix wins), else
//!   the one introspecting issuer without prefixes; a token no issuer claims is
//!   refused without any call. So one issuer never sees another's tokens, and
//!   an unreachable issuer fails only its own tokens.
//! - Introspection answers are cached under the token's SHA-256 (the token
//!   itself is not kept): "active" for `introspection_cache_ttl` but never past
//!   the token's `exp`, "inactive" or refused for `introspection_negative_ttl`;
//!   each cache holds at most `introspection_cache_entries` (oldest out first).
//!   A repeated bad token thus costs one call per negative TTL. "Could not ask"
//!   is never cached.
//! - Every call to an authorization server has the `timeout` deadline.
//! - [`FailureLimit`] bounds the refused tokens one peer may present per window
//!   (`[auth.failures]`); the HTTP transport asks it before any token is checked.
//! - A token is never logged, never put in an error, and never sent anywhere but
//!   to its own issuer's introspection endpoint (no token passthrough: engines
//!   use taskgate's own credentials).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use crate::core::config::{FailureLimitConfig, IssuerConfig, OAuthConfig};
use crate::core::validate::OAuthSettings;
use crate::core::Caller;

/// Why a request's credentials were refused. The reason words go into the audit
/// trail and the debug log; clients hear only `invalid_token`.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No bearer token was presented.
    #[error("no bearer token")]
    Missing,
    /// The token is not valid for this resource (reason: a short word).
    #[error("invalid token: {0}")]
    Invalid(&'static str),
    /// An authorization server could not be asked (metadata, keys,
    /// introspection): the token could not be checked. Retryable (HTTP 503).
    #[error("the authorization server {issuer} could not be reached: {message}")]
    Unavailable {
        /// The issuer.
        issuer: String,
        /// What failed (never the token).
        message: String,
    },
}

impl AuthError {
    /// The short reason word of the audit trail.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Missing => "no_token",
            Self::Invalid(why) => why,
            Self::Unavailable { .. } => "issuer_unavailable",
        }
    }
}

/// Validates access tokens for one resource.
pub struct Authenticator {
    config: OAuthConfig,
    issuers: Vec<Issuer>,
    scopes_supported: Vec<String>,
    http: reqwest::Client,
    /// Opaque tokens an issuer called active: their callers.
    active: Mutex<TokenCache<Caller>>,
    /// Opaque tokens an issuer called inactive, or that were refused: the reason.
    refused: Mutex<TokenCache<&'static str>>,
}

/// The SHA-256 of a token: what the caches key on.
type TokenDigest = [u8; 32];

fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

/// A bounded map from token digests to answers, each with its own expiry; past
/// `capacity` the oldest entries go first.
struct TokenCache<V> {
    capacity: usize,
    entries: HashMap<TokenDigest, (V, Instant, u64)>,
    /// Insertion order (digest, sequence number); stale pairs are skipped.
    order: VecDeque<(TokenDigest, u64)>,
    next: u64,
}

impl<V: Clone> TokenCache<V> {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: HashMap::new(),
            order: VecDeque::new(),
            next: 0,
        }
    }

    fn get(&mut self, key: &TokenDigest, now: Instant) -> Option<V> {
        match self.entries.get(key) {
            Some((v, expires, _)) if *expires > now => Some(v.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn insert(&mut self, key: TokenDigest, value: V, expires: Instant) {
        if self.capacity == 0 {
            return;
        }
        self.next += 1;
        self.entries.insert(key, (value, expires, self.next));
        self.order.push_back((key, self.next));
        while self.entries.len() > self.capacity {
            let Some((old, seq)) = self.order.pop_front() else {
                break;
            };
            if self.entries.get(&old).is_some_and(|e| e.2 == seq) {
                self.entries.remove(&old);
            }
        }
        // Replaced and expired entries leave stale pairs behind: keep the queue
        // within twice the map.
        if self.order.len() > 2 * self.capacity.max(self.entries.len()) {
            let entries = &self.entries;
            self.order
                .retain(|(k, seq)| entries.get(k).is_some_and(|e| e.2 == *seq));
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Counts failed authentications per peer (`[auth.failures]`): past `per_peer`
/// failures in one window, the peer is refused until the window ends.
pub struct FailureLimit {
    config: FailureLimitConfig,
    /// Per peer key: when its window started, and its failures in it.
    peers: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

/// Most peers [`FailureLimit`] tracks at once; past it, peers whose window has
/// ended are forgotten, and then the one whose window started first.
const TRACKED_PEERS: usize = 65_536;

impl FailureLimit {
    /// A limit with `config`.
    #[must_use]
    pub fn new(config: &FailureLimitConfig) -> Self {
        Self {
            config: config.clone(),
            peers: Mutex::new(HashMap::new()),
        }
    }

    /// The key of a peer: its address, an IPv6 address cut to its /64 (one host
    /// commonly holds a whole /64); an IPv4-mapped IPv6 address as IPv4.
    fn key(peer: IpAddr) -> IpAddr {
        match peer {
            IpAddr::V4(_) => peer,
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let s = v6.segments();
                    IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
                }
            },
        }
    }

    /// `Err(wait)` when `peer` has used up its failures: how long until its
    /// window ends.
    ///
    /// # Errors
    ///
    /// The time to wait, when the peer is refused.
    pub fn check(&self, peer: IpAddr) -> Result<(), Duration> {
        if self.config.per_peer == 0 {
            return Ok(());
        }
        let now = Instant::now();
        let peers = self.peers.lock().expect("failure limit");
        match peers.get(&Self::key(peer)) {
            Some((start, n)) if *n >= self.config.per_peer => {
                let ends = *start + self.config.window;
                if ends > now {
                    Err(ends - now)
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }

    /// Counts one failed authentication of `peer`.
    pub fn failed(&self, peer: IpAddr) {
        if self.config.per_peer == 0 {
            return;
        }
        let now = Instant::now();
        let window = self.config.window;
        let mut peers = self.peers.lock().expect("failure limit");
        let key = Self::key(peer);
        if !peers.contains_key(&key) && peers.len() >= TRACKED_PEERS {
            peers.retain(|_, (start, _)| *start + window > now);
            if peers.len() >= TRACKED_PEERS {
                if let Some(oldest) = peers.iter().min_by_key(|(_, (s, _))| *s).map(|(k, _)| *k) {
                    peers.remove(&oldest);
                }
            }
        }
        let entry = peers.entry(key).or_insert((now, 0));
        if entry.0 + window <= now {
            *entry = (now, 0);
        }
        entry.1 = entry.1.saturating_add(1);
        if entry.1 == self.config.per_peer {
            tracing::warn!(peer = %key, failures = entry.1, "a peer reached the limit of failed authentications; refusing it for the rest of the window");
        }
    }
}

/// What was learnt from one issuer's metadata.
#[derive(Debug, Clone, Default)]
struct Discovered {
    jwks_uri: Option<String>,
    introspection_endpoint: Option<String>,
}

struct Keys {
    set: JwkSet,
    fetched: Instant,
}

struct Issuer {
    config: IssuerConfig,
    introspection_secret: Option<String>,
    discovered: tokio::sync::Mutex<Option<Discovered>>,
    keys: RwLock<Option<Keys>>,
    /// When keys were last fetched (or tried): the rate limit of refreshes.
    last_fetch: tokio::sync::Mutex<Option<Instant>>,
}

fn unavailable(issuer: &str, message: impl std::fmt::Display) -> AuthError {
    AuthError::Unavailable {
        issuer: issuer.to_owned(),
        message: message.to_string(),
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The strings of a claim that is an array of strings or one space-separated string.
fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// A JWS's header and payload, decoded without any check (to pick the issuer
/// and the key); `None` when the token is not JWS-shaped.
fn peek(token: &str) -> Option<(Value, Value)> {
    let mut parts = token.split('.');
    let (h, p, _s) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(h).ok()?).ok()?;
    header.get("alg")?;
    let payload: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p).ok()?).ok()?;
    Some((header, payload))
}

impl Authenticator {
    /// The authenticator of `[auth.oauth]`; `None` when it is not configured.
    ///
    /// # Panics
    ///
    /// When the HTTP client cannot be built (no TLS backend), which is a build fault.
    #[must_use]
    pub fn new(settings: Option<&OAuthSettings>, rule_scopes: Vec<String>) -> Option<Self> {
        let settings = settings?;
        let config = settings.config.clone();
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("HTTP client");
        let issuers = config
            .issuers
            .iter()
            .zip(&settings.introspection_secrets)
            .map(|(c, secret)| Issuer {
                config: c.clone(),
                introspection_secret: secret.clone(),
                discovered: tokio::sync::Mutex::new(None),
                keys: RwLock::new(None),
                last_fetch: tokio::sync::Mutex::new(None),
            })
            .collect();
        let scopes_supported = config.scopes_supported.clone().unwrap_or(rule_scopes);
        let entries = config.introspection_cache_entries;
        Some(Self {
            config,
            issuers,
            scopes_supported,
            http,
            active: Mutex::new(TokenCache::new(entries)),
            refused: Mutex::new(TokenCache::new(entries)),
        })
    }

    /// The resource identifier (`aud` of accepted tokens).
    #[must_use]
    pub fn resource(&self) -> &str {
        &self.config.resource
    }

    /// The URL of the Protected Resource Metadata of this resource (RFC 9728: the
    /// well-known path inserted before the resource's path).
    #[must_use]
    pub fn metadata_url(&self) -> String {
        let (origin, path) = split_url(&self.config.resource);
        format!("{origin}/.well-known/oauth-protected-resource{path}")
    }

    /// The paths the metadata is served at: the bare well-known path, and the one
    /// suffixed with the resource's path.
    #[must_use]
    pub fn metadata_paths(&self) -> Vec<String> {
        let (_, path) = split_url(&self.config.resource);
        let base = "/.well-known/oauth-protected-resource".to_owned();
        if path.is_empty() {
            vec![base]
        } else {
            vec![format!("{base}{path}"), base]
        }
    }

    /// The Protected Resource Metadata document (RFC 9728).
    #[must_use]
    pub fn metadata(&self) -> Value {
        let servers: Vec<&str> = self
            .config
            .issuers
            .iter()
            .map(|i| i.issuer.as_str())
            .collect();
        json!({
            "resource": self.config.resource,
            "authorization_servers": servers,
            "scopes_supported": self.scopes_supported,
            "bearer_methods_supported": ["header"],
            "resource_name": "taskgate",
        })
    }

    /// A `WWW-Authenticate` value: `error` (`invalid_token`,
    /// `insufficient_scope`) when there is one, `scope` when one would help.
    #[must_use]
    pub fn challenge(&self, error: Option<&str>, scopes: Option<&[String]>) -> String {
        let mut v = format!("Bearer resource_metadata=\"{}\"", self.metadata_url());
        if let Some(e) = error {
            v.push_str(&format!(", error=\"{e}\""));
        }
        let scopes = scopes.unwrap_or(&self.scopes_supported);
        if !scopes.is_empty() {
            v.push_str(&format!(", scope=\"{}\"", scopes.join(" ")));
        }
        v
    }

    /// Validates an access token and returns its caller.
    ///
    /// # Errors
    ///
    /// [`AuthError::Invalid`] with the reason; [`AuthError::Unavailable`] when an
    /// authorization server could not be asked.
    pub async fn validate(&self, token: &str) -> Result<Caller, AuthError> {
        if let Some((header, payload)) = peek(token) {
            return self.validate_jwt(token, &header, &payload).await;
        }
        let Some(issuer) = self.introspector_of(token) else {
            let any = self
                .issuers
                .iter()
                .any(|i| i.config.introspection.is_some());
            return Err(AuthError::Invalid(if any {
                "no_issuer_for_token"
            } else {
                "not_a_jwt"
            }));
        };
        let key = digest(token);
        let now = Instant::now();
        if let Some(caller) = self.active.lock().expect("cache").get(&key, now) {
            return Ok(caller);
        }
        if let Some(reason) = self.refused.lock().expect("cache").get(&key, now) {
            return Err(AuthError::Invalid(reason));
        }
        match self.introspect(issuer, token).await {
            Ok((caller, exp)) => {
                let mut ttl = self.config.introspection_cache_ttl;
                if let Some(exp) = exp {
                    ttl = ttl.min(Duration::from_secs(exp.saturating_sub(now_secs())));
                }
                if !ttl.is_zero() {
                    self.active
                        .lock()
                        .expect("cache")
                        .insert(key, caller.clone(), now + ttl);
                }
                Ok(caller)
            }
            Err(AuthError::Invalid(reason)) => {
                let ttl = self.config.introspection_negative_ttl;
                if !ttl.is_zero() {
                    self.refused
                        .lock()
                        .expect("cache")
                        .insert(key, reason, now + ttl);
                }
                Err(AuthError::Invalid(reason))
            }
            Err(e) => Err(e),
        }
    }

    /// The one issuer an opaque token may be shown to: the introspecting issuer
    /// with the longest of its `token_prefixes` that the token begins with, else
    /// the one introspecting issuer without prefixes (config validation allows
    /// at most one).
    fn introspector_of(&self, token: &str) -> Option<&Issuer> {
        let introspecting = || {
            self.issuers
                .iter()
                .filter_map(|i| i.config.introspection.as_ref().map(|c| (i, c)))
        };
        introspecting()
            .flat_map(|(i, c)| c.token_prefixes.iter().map(move |p| (i, p)))
            .filter(|(_, p)| !p.is_empty() && token.starts_with(p.as_str()))
            .max_by_key(|(_, p)| p.len())
            .map(|(i, _)| i)
            .or_else(|| {
                introspecting()
                    .find(|(_, c)| c.token_prefixes.is_empty())
                    .map(|(i, _)| i)
            })
    }

    fn caller(&self, issuer: &str, claims: &Value) -> Result<Caller, AuthError> {
        let who = match claims.get(&self.config.caller_claim) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err(AuthError::Invalid("no_caller_claim")),
        };
        let mut scopes: BTreeSet<String> = strings(claims.get("scope")).into_iter().collect();
        scopes.extend(strings(claims.get("scp")));
        let groups = self
            .config
            .groups_claim
            .as_ref()
            .map(|c| strings(claims.get(c)))
            .unwrap_or_default();
        Ok(Caller::new(format!("{issuer}#{who}"), scopes, groups))
    }

    async fn validate_jwt(
        &self,
        token: &str,
        header: &Value,
        payload: &Value,
    ) -> Result<Caller, AuthError> {
        let iss = payload.get("iss").and_then(Value::as_str).unwrap_or("");
        let issuer = self
            .issuers
            .iter()
            .find(|i| i.config.issuer == iss)
            .ok_or(AuthError::Invalid("wrong_issuer"))?;
        let alg_name = header.get("alg").and_then(Value::as_str).unwrap_or("");
        if !issuer.config.algorithms.iter().any(|a| a == alg_name) {
            return Err(AuthError::Invalid("algorithm_not_allowed"));
        }
        let alg = Algorithm::from_str(alg_name)
            .map_err(|_| AuthError::Invalid("algorithm_not_allowed"))?;
        let kid = header.get("kid").and_then(Value::as_str);
        let key = self.key_for(issuer, kid, alg_name).await?;
        let mut validation = Validation::new(alg);
        validation.algorithms = vec![alg];
        validation.leeway = self.config.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_issuer(&[&issuer.config.issuer]);
        validation.set_audience(&[&self.config.resource]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<Value>(token, &key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            AuthError::Invalid(match e.kind() {
                K::ExpiredSignature => "expired",
                K::ImmatureSignature => "not_yet_valid",
                K::InvalidAudience => "wrong_audience",
                K::InvalidIssuer => "wrong_issuer",
                K::InvalidSignature => "bad_signature",
                K::MissingRequiredClaim(_) => "missing_claim",
                K::InvalidAlgorithm => "algorithm_not_allowed",
                _ => "malformed_jwt",
            })
        })?;
        self.caller(&issuer.config.issuer, &data.claims)
    }

    /// The key a JWT of `issuer` names, fetching the key set when it is not known
    /// (rate-limited).
    async fn key_for(
        &self,
        issuer: &Issuer,
        kid: Option<&str>,
        alg: &str,
    ) -> Result<DecodingKey, AuthError> {
        let fresh = |keys: &Option<Keys>| {
            keys.as_ref()
                .filter(|k| k.fetched.elapsed() < self.config.jwks_max_age)
                .and_then(|k| pick(&k.set, kid, alg))
        };
        if let Some(key) = fresh(&issuer.keys.read().expect("lock")) {
            return Ok(key);
        }
        self.refresh_keys(issuer).await?;
        let keys = issuer.keys.read().expect("lock");
        keys.as_ref()
            .and_then(|k| pick(&k.set, kid, alg))
            .ok_or(AuthError::Invalid("unknown_key"))
    }

    async fn refresh_keys(&self, issuer: &Issuer) -> Result<(), AuthError> {
        let mut last = issuer.last_fetch.lock().await;
        if last.is_some_and(|t| t.elapsed() < self.config.jwks_min_refresh) {
            // Fetched a moment ago (by this request's neighbour, or for another
            // unknown kid): use what is there.
            return match &*issuer.keys.read().expect("lock") {
                Some(_) => Ok(()),
                None => Err(unavailable(
                    &issuer.config.issuer,
                    "its keys could not be fetched recently",
                )),
            };
        }
        *last = Some(Instant::now());
        let uri = match &issuer.config.jwks_uri {
            Some(u) => u.clone(),
            None => self.discover(issuer).await?.jwks_uri.ok_or_else(|| {
                unavailable(&issuer.config.issuer, "its metadata names no jwks_uri")
            })?,
        };
        let set: JwkSet = self
            .get_json(&issuer.config.issuer, &uri)
            .await
            .and_then(|v| {
                serde_json::from_value(v)
                    .map_err(|e| unavailable(&issuer.config.issuer, format!("bad key set: {e}")))
            })?;
        tracing::info!(issuer = %issuer.config.issuer, keys = set.keys.len(), "fetched the issuer's signing keys");
        *issuer.keys.write().expect("lock") = Some(Keys {
            set,
            fetched: Instant::now(),
        });
        Ok(())
    }

    async fn get_json(&self, issuer: &str, url: &str) -> Result<Value, AuthError> {
        let resp = self
            .http
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| unavailable(issuer, format!("GET {url}: {e}")))?;
        if !resp.status().is_success() {
            return Err(unavailable(
                issuer,
                format!("GET {url}: HTTP {}", resp.status()),
            ));
        }
        resp.json()
            .await
            .map_err(|e| unavailable(issuer, format!("GET {url}: {e}")))
    }

    /// The issuer's metadata: RFC 8414 first, then OpenID Connect discovery; its
    /// `issuer` must be the configured one.
    async fn discover(&self, issuer: &Issuer) -> Result<Discovered, AuthError> {
        let mut cached = issuer.discovered.lock().await;
        if let Some(d) = &*cached {
            return Ok(d.clone());
        }
        let id = issuer.config.issuer.as_str();
        let (origin, path) = split_url(id);
        let candidates = [
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!(
                "{}/.well-known/openid-configuration",
                id.trim_end_matches('/')
            ),
        ];
        let mut last = None;
        for url in &candidates {
            match self.get_json(id, url).await {
                Ok(doc) => {
                    if doc.get("issuer").and_then(Value::as_str) != Some(id) {
                        return Err(unavailable(id, format!("{url} names another issuer")));
                    }
                    let found = Discovered {
                        jwks_uri: doc
                            .get("jwks_uri")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                        introspection_endpoint: doc
                            .get("introspection_endpoint")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                    };
                    *cached = Some(found.clone());
                    return Ok(found);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| unavailable(id, "no metadata")))
    }

    /// Asks `issuer` about an opaque token: its caller and `exp`, or
    /// [`AuthError::Invalid`] (`inactive_token` when the issuer says it is not active).
    async fn introspect(
        &self,
        issuer: &Issuer,
        token: &str,
    ) -> Result<(Caller, Option<u64>), AuthError> {
        let Some(intro) = &issuer.config.introspection else {
            return Err(AuthError::Invalid("inactive_token"));
        };
        let id = issuer.config.issuer.as_str();
        let endpoint = match &intro.endpoint {
            Some(e) => e.clone(),
            None => self
                .discover(issuer)
                .await?
                .introspection_endpoint
                .ok_or_else(|| unavailable(id, "its metadata names no introspection_endpoint"))?,
        };
        let mut req = self
            .http
            .post(&endpoint)
            .header("accept", "application/json")
            .form(&[("token", token), ("token_type_hint", "access_token")]);
        if let Some(client) = &intro.client_id {
            req = req.basic_auth(client, issuer.introspection_secret.as_deref());
        }
        let resp = req
            .send()
            .await
            .map_err(|e| unavailable(id, format!("introspection: {}", e.without_url())))?;
        if !resp.status().is_success() {
            return Err(unavailable(
                id,
                format!("introspection: HTTP {}", resp.status()),
            ));
        }
        let claims: Value = resp
            .json()
            .await
            .map_err(|e| unavailable(id, format!("introspection: {e}")))?;
        if claims.get("active") != Some(&Value::Bool(true)) {
            return Err(AuthError::Invalid("inactive_token"));
        }
        let exp = claims.get("exp").and_then(Value::as_u64);
        self.check_introspected(id, &claims).map(|c| (c, exp))
    }

    fn check_introspected(&self, issuer: &str, claims: &Value) -> Result<Caller, AuthError> {
        // Refresh tokens introspect as active too; only access tokens admit.
        if let Some(use_) = claims.get("token_use").and_then(Value::as_str) {
            if use_ != "access_token" {
                return Err(AuthError::Invalid("not_an_access_token"));
            }
        }
        if let Some(iss) = claims.get("iss").and_then(Value::as_str) {
            if iss != issuer {
                return Err(AuthError::Invalid("wrong_issuer"));
            }
        }
        if !strings(claims.get("aud"))
            .iter()
            .any(|a| a == &self.config.resource)
        {
            return Err(AuthError::Invalid("wrong_audience"));
        }
        let now = now_secs();
        let leeway = self.config.leeway.as_secs();
        if let Some(exp) = claims.get("exp").and_then(Value::as_u64) {
            if exp.saturating_add(leeway) <= now {
                return Err(AuthError::Invalid("expired"));
            }
        }
        if let Some(nbf) = claims.get("nbf").and_then(Value::as_u64) {
            if nbf > now.saturating_add(leeway) {
                return Err(AuthError::Invalid("not_yet_valid"));
            }
        }
        self.caller(issuer, claims)
    }
}

/// The key of `set` for a JWT with `kid` and `alg`: the one with that `kid`, or
/// without a `kid` the only signing key that fits the algorithm.
fn pick(set: &JwkSet, kid: Option<&str>, alg: &str) -> Option<DecodingKey> {
    let fits = |k: &&Jwk| {
        !matches!(k.common.public_key_use, Some(PublicKeyUse::Encryption))
            && k.common.key_algorithm.is_none_or(|a| a.to_string() == alg)
    };
    let key = match kid {
        Some(kid) => set
            .keys
            .iter()
            .filter(fits)
            .find(|k| k.common.key_id.as_deref() == Some(kid))?,
        None => {
            let mut candidates = set.keys.iter().filter(fits);
            let only = candidates.next()?;
            if candidates.next().is_some() {
                return None;
            }
            only
        }
    };
    DecodingKey::from_jwk(key).ok()
}

/// `https://host:port/path` → (`https://host:port`, `/path`); a bare `/` path is empty.
fn split_url(url: &str) -> (String, String) {
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let path = path
        .split(['?', '#'])
        .next()
        .unwrap_or("")
        .trim_end_matches('/');
    (format!("{scheme}://{authority}"), path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_urls_insert_the_well_known_path() {
        assert_eq!(
            split_url("https://tg.example.com/mcp"),
            ("https://tg.example.com".to_owned(), "/mcp".to_owned())
        );
        assert_eq!(
            split_url("http://127.0.0.1:8808"),
            ("http://127.0.0.1:8808".to_owned(), String::new())
        );
        assert_eq!(
            split_url("https://idp.example.com/realms/x/"),
            ("https://idp.example.com".to_owned(), "/realms/x".to_owned())
        );
    }

    #[test]
    fn claims_of_either_shape() {
        assert_eq!(strings(Some(&json!("a b  c"))), vec!["a", "b", "c"]);
        assert_eq!(strings(Some(&json!(["a", 1, "b"]))), vec!["a", "b"]);
        assert!(strings(Some(&json!(3))).is_empty());
    }

    /// An RSA key made by `openssl`: its PEM and its JWK `n` (base64url).
    fn rsa_key(dir: &std::path::Path, name: &str) -> (Vec<u8>, String) {
        let pem = dir.join(format!("{name}.pem"));
        let run = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .output()
                .expect("openssl");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        let path = pem.to_str().unwrap();
        run(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            path,
        ]);
        let modulus = run(&["rsa", "-in", path, "-noout", "-modulus"]);
        let hex_n = modulus.trim().trim_start_matches("Modulus=");
        let n = URL_SAFE_NO_PAD.encode(hex::decode(hex_n).unwrap());
        (std::fs::read(&pem).unwrap(), n)
    }

    /// A stand-in issuer on a loopback port: metadata and a key set whose keys
    /// can change, counting key-set fetches.
    struct Idp {
        url: String,
        keys: std::sync::Arc<std::sync::Mutex<Value>>,
        fetches: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }

    async fn idp() -> Idp {
        use axum::routing::get;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let keys = std::sync::Arc::new(std::sync::Mutex::new(json!({ "keys": [] })));
        let fetches = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let meta = json!({ "issuer": url, "jwks_uri": format!("{url}/jwks") });
        let (k, f) = (keys.clone(), fetches.clone());
        let app = axum::Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                get(move || {
                    let meta = meta.clone();
                    async move { axum::Json(meta) }
                }),
            )
            .route(
                "/jwks",
                get(move || {
                    let (k, f) = (k.clone(), f.clone());
                    async move {
                        f.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        axum::Json(k.lock().unwrap().clone())
                    }
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Idp { url, keys, fetches }
    }

    fn authenticator(issuer: &str, min_refresh: &str) -> Authenticator {
        let toml = format!(
            "resource = \"https://tg.test/mcp\"\njwks_min_refresh = \"{min_refresh}\"\n\
             [[issuers]]\nissuer = \"{issuer}\"\nalgorithms = [\"RS256\"]\n"
        );
        let config: OAuthConfig = toml_from(&toml);
        Authenticator::new(
            Some(&OAuthSettings {
                config,
                introspection_secrets: vec![None],
            }),
            Vec::new(),
        )
        .unwrap()
    }

    fn toml_from(text: &str) -> OAuthConfig {
        let built = config::Config::builder()
            .add_source(config::File::from_str(text, config::FileFormat::Toml))
            .build()
            .unwrap();
        built.try_deserialize().unwrap()
    }

    fn sign(pem: &[u8], kid: &str, claims: &Value) -> String {
        let mut header = jsonwebtoken::Header::new(Algorithm::RS256);
        header.kid = Some(kid.to_owned());
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(pem).unwrap();
        jsonwebtoken::encode(&header, claims, &key).unwrap()
    }

    #[tokio::test]
    async fn unknown_kids_refresh_the_key_set_at_most_once_per_interval() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let (pem1, n1) = rsa_key(dir.path(), "k1");
        let (pem2, n2) = rsa_key(dir.path(), "k2");
        let idp = idp().await;
        let jwk = |kid: &str, n: &str| json!({ "kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig", "n": n, "e": "AQAB" });
        *idp.keys.lock().unwrap() = json!({ "keys": [jwk("k1", &n1)] });
        let claims = json!({ "iss": idp.url, "sub": "svc", "aud": "https://tg.test/mcp", "exp": now_secs() + 600, "scope": "a b" });
        let fetches = || idp.fetches.load(std::sync::atomic::Ordering::SeqCst);

        let slow = authenticator(&idp.url, "1h");
        let caller = slow.validate(&sign(&pem1, "k1", &claims)).await.unwrap();
        assert_eq!(caller.id(), format!("{}#svc", idp.url));
        assert!(caller.scopes().contains("b"));
        assert_eq!(fetches(), 1);
        slow.validate(&sign(&pem1, "k1", &claims)).await.unwrap();
        assert_eq!(fetches(), 1, "known keys are cached");

        // The issuer rotates in k2. Within the interval, unknown kids (forged or
        // new) are refused without asking again.
        *idp.keys.lock().unwrap() = json!({ "keys": [jwk("k1", &n1), jwk("k2", &n2)] });
        for _ in 0..5 {
            let e = slow
                .validate(&sign(&pem2, "k2", &claims))
                .await
                .unwrap_err();
            assert_eq!(e.reason(), "unknown_key");
        }
        assert_eq!(fetches(), 1, "refreshes are rate-limited");

        // Past the interval, an unknown kid refetches once and is then known.
        let fast = authenticator(&idp.url, "0s");
        fast.validate(&sign(&pem1, "k1", &claims)).await.unwrap();
        let before = fetches();
        fast.validate(&sign(&pem2, "k2", &claims)).await.unwrap();
        assert_eq!(fetches(), before, "k2 was in the set fetched for k1");
        let (pem3, n3) = rsa_key(dir.path(), "k3");
        *idp.keys.lock().unwrap() = json!({ "keys": [jwk("k2", &n2), jwk("k3", &n3)] });
        fast.validate(&sign(&pem3, "k3", &claims)).await.unwrap();
        assert_eq!(
            fetches(),
            before + 1,
            "an unknown kid refreshed the set once"
        );

        // A key of the set used under another kid's name does not verify.
        let e = fast
            .validate(&sign(&pem1, "k3", &claims))
            .await
            .unwrap_err();
        assert_eq!(e.reason(), "bad_signature");
    }

    #[test]
    fn token_caches_are_bounded_and_entries_expire() {
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        let mut cache = TokenCache::new(3);
        for i in 0..10u8 {
            cache.insert(digest(&format!("t{i}")), i, later);
            assert!(cache.len() <= 3);
        }
        // The oldest went first.
        assert_eq!(cache.get(&digest("t9"), now), Some(9));
        assert_eq!(cache.get(&digest("t6"), now), None);
        assert!(cache.order.len() <= 6, "{}", cache.order.len());
        // Re-inserting one key many times keeps the queue bounded.
        for _ in 0..100 {
            cache.insert(digest("t9"), 9, later);
        }
        assert!(cache.order.len() <= 6, "{}", cache.order.len());
        assert_eq!(cache.get(&digest("t8"), now), Some(8));
        // An entry is not answered past its expiry.
        cache.insert(digest("short"), 1, now + Duration::from_secs(1));
        assert_eq!(cache.get(&digest("short"), now), Some(1));
        assert_eq!(
            cache.get(&digest("short"), now + Duration::from_secs(2)),
            None
        );
        // Capacity 0: nothing is kept.
        let mut none = TokenCache::new(0);
        none.insert(digest("x"), 1, later);
        assert_eq!(none.get(&digest("x"), now), None);
    }

    #[test]
    fn an_opaque_token_has_one_issuer_at_most() {
        let toml = "resource = \"https://tg.test/mcp\"\n\
             [[issuers]]\nissuer = \"https://a.test/\"\nintrospection = { endpoint = \"https://a.test/i\" }\n\
             [[issuers]]\nissuer = \"https://b.test/\"\nintrospection = { endpoint = \"https://b.test/i\", token_prefixes = [\"b_\", \"b_long_\"] }\n\
             [[issuers]]\nissuer = \"https://c.test/\"\nintrospection = { endpoint = \"https://c.test/i\", token_prefixes = [\"b_lo\"] }\n\
             [[issuers]]\nissuer = \"https://jwt-only.test/\"\n";
        let config = toml_from(toml);
        let auth = Authenticator::new(
            Some(&OAuthSettings {
                config,
                introspection_secrets: vec![None; 4],
            }),
            Vec::new(),
        )
        .unwrap();
        let to = |t: &str| auth.introspector_of(t).map(|i| i.config.issuer.clone());
        assert_eq!(to("b_xyz").as_deref(), Some("https://b.test/"));
        assert_eq!(to("b_lox").as_deref(), Some("https://c.test/"));
        assert_eq!(
            to("b_long_x").as_deref(),
            Some("https://b.test/"),
            "the longest prefix wins"
        );
        assert_eq!(to("ory_at_x").as_deref(), Some("https://a.test/"));
        assert_eq!(to("").as_deref(), Some("https://a.test/"));

        // Without a catch-all issuer, an unclaimed token goes nowhere.
        let toml = "resource = \"https://tg.test/mcp\"\n\
             [[issuers]]\nissuer = \"https://b.test/\"\nintrospection = { endpoint = \"https://b.test/i\", token_prefixes = [\"b_\"] }\n";
        let auth = Authenticator::new(
            Some(&OAuthSettings {
                config: toml_from(toml),
                introspection_secrets: vec![None],
            }),
            Vec::new(),
        )
        .unwrap();
        assert!(auth.introspector_of("ory_at_x").is_none());
    }

    #[test]
    fn the_failure_limit_counts_per_peer_and_per_ipv6_network() {
        let limit = FailureLimit::new(&FailureLimitConfig {
            per_peer: 2,
            window: Duration::from_secs(60),
        });
        let a: IpAddr = "203.0.113.7".parse().unwrap();
        let b: IpAddr = "203.0.113.8".parse().unwrap();
        limit.failed(a);
        assert!(limit.check(a).is_ok());
        limit.failed(a);
        let wait = limit.check(a).unwrap_err();
        assert!(wait <= Duration::from_secs(60) && wait > Duration::from_secs(50));
        assert!(limit.check(b).is_ok(), "another peer is not held");
        // An IPv4-mapped address is the IPv4 peer; one /64 is one peer.
        assert!(limit.check("::ffff:203.0.113.7".parse().unwrap()).is_err());
        limit.failed("2001:db8:1:2::1".parse().unwrap());
        limit.failed("2001:db8:1:2:ffff::9".parse().unwrap());
        assert!(limit.check("2001:db8:1:2::42".parse().unwrap()).is_err());
        assert!(limit.check("2001:db8:1:3::1".parse().unwrap()).is_ok());
        // per_peer = 0 turns it off.
        let off = FailureLimit::new(&FailureLimitConfig {
            per_peer: 0,
            window: Duration::from_secs(60),
        });
        for _ in 0..100 {
            off.failed(a);
        }
        assert!(off.check(a).is_ok());
    }

    #[test]
    fn peek_recognises_only_jws_shapes() {
        let enc = |v: Value| URL_SAFE_NO_PAD.encode(v.to_string());
        let jws = format!(
            "{}.{}.sig",
            enc(json!({"alg":"none"})),
            enc(json!({"iss":"x"}))
        );
        assert!(peek(&jws).is_some());
        assert!(peek("ory_at_abc.def").is_none());
        assert!(peek("a.b.c.d").is_none());
        let no_alg = format!("{}.{}.sig", enc(json!({"typ":"JWT"})), enc(json!({})));
        assert!(peek(&no_alg).is_none());
    }
}
