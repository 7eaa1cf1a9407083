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
//! - Every call to an authorization server has the `timeout` deadline.
//! - A token is never logged, never put in an error, and never sent anywhere but
//!   to its own issuer's introspection endpoint (no token passthrough: engines
//!   use taskgate's own credentials).

use std::collections::BTreeSet;
use std::str::FromStr;
use std::sync::RwLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{json, Value};

use crate::core::config::{IssuerConfig, OAuthConfig};
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
        Some(Self {
            config,
            issuers,
            scopes_supported,
            http,
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
        let mut tried = false;
        for issuer in self
            .issuers
            .iter()
            .filter(|i| i.config.introspection.is_some())
        {
            tried = true;
            match self.introspect(issuer, token).await? {
                Some(caller) => return Ok(caller),
                None => continue,
            }
        }
        Err(AuthError::Invalid(if tried {
            "inactive_token"
        } else {
            "not_a_jwt"
        }))
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

    /// Asks `issuer` about an opaque token: `Ok(None)` when it is not active there.
    async fn introspect(&self, issuer: &Issuer, token: &str) -> Result<Option<Caller>, AuthError> {
        let Some(intro) = &issuer.config.introspection else {
            return Ok(None);
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
            return Ok(None);
        }
        self.check_introspected(id, &claims).map(Some)
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
        let _ = rustls::crypto::ring::default_provider().install_default();
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
