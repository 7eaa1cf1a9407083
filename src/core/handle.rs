//! Sealed handles: task ids and session ids that carry their own state.
//!
//! A handle reads `tg3.<key id>.<base64url(nonce ‖ ciphertext)>`: AES-256-GCM-SIV
//! with a random 96-bit nonce (misuse-resistant: even a repeated nonce reveals
//! no more than that two handles are equal), under a key derived from the
//! configured secret with HKDF-SHA256 for that generation alone; the run-name
//! MAC key is derived apart from it. A secret is the base64 text of at least 32
//! random bytes (`taskgate keygen` makes one).
//!
//! Handles sealed by earlier releases still open, so an upgrade loses no task:
//! `tg2` (AES-256-GCM-SIV) and `tg1` (XChaCha20-Poly1305, 192-bit nonce), both
//! under the one key those releases derived from the secret's text with
//! SHA-256. That key only opens; nothing is sealed under it any more. Run
//! names those releases derived are not looked up again: a SEP-1391 token
//! retried across the upgrade starts a new run.
//!
//! The plaintext names the tool, the native run and the times;
//! the caller's identity is associated data, so a handle presented by another
//! caller does not open. Any failure to open — unknown key, altered bytes,
//! another caller, expiry — is one and the same answer to the client: not found.
//!
//! Opening a handle is on the path of every request; AES-GCM-SIV runs on the
//! processor's AES and carry-less multiply instructions and opens a task handle
//! in a fraction of the time the `tg1` cipher takes (`scripts/profile.sh`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM_SIV, NONCE_LEN};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::XChaCha20Poly1305;
use hmac::{Hmac, Mac};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The prefix of the handles sealed now (AES-256-GCM-SIV, HKDF-derived key).
const PREFIX: &str = "tg3";
/// The prefix of AES-256-GCM-SIV handles sealed under the legacy key; they still open.
const PREFIX_V2: &str = "tg2";
/// The prefix of the handles sealed before AES-GCM-SIV; they still open.
const PREFIX_V1: &str = "tg1";
/// The least a sealing secret must carry: 32 bytes (256 bits) once decoded.
pub const MIN_SECRET_BYTES: usize = 32;
/// The HKDF salt of every key taskgate derives from a sealing secret.
const HKDF_SALT: &[u8] = b"taskgate sealing keys";
/// HKDF `info` of the `tg3` AES-256-GCM-SIV key.
const INFO_TG3: &[u8] = b"taskgate tg3 aes-256-gcm-siv";
/// HKDF `info` of the run-name HMAC-SHA256 key.
const INFO_RUN_NAME: &[u8] = b"taskgate run-name hmac-sha256";
/// The tag both ciphers append.
const TAG_LEN: usize = 16;
/// The nonce of a `tg1` handle.
const NONCE_LEN_V1: usize = 24;

/// What a sealed value is for. The purpose is part of the associated data, so a
/// value sealed for one purpose never opens as another (a task handle is not a
/// session id, an input-request id is not a `requestState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A task handle (2026-07-28 and 2025-11-25 tasks, legacy `handles`).
    Task,
    /// A legacy `Mcp-Session-Id`: what a client negotiated at `initialize`.
    Session,
    /// The id of an input request taskgate sent (`elicitation/create`).
    Input,
    /// A 2026-07-28 `requestState` (an `input_required` result's resumption).
    RequestState,
    /// A `taskgate_logs` cursor: where a client's reading of a run's log stands.
    LogCursor,
    /// An approval ticket: one approval question of one run, with the caller
    /// who started the run. Sealed for no caller (any caller admitted by the
    /// tool's `answer_access` may present it), and only ever opened as a
    /// ticket: it reads no task, and no task handle opens as one.
    Approval,
}

impl Purpose {
    /// The label bound into the associated data. These strings are part of every
    /// sealed value already handed out: never change them.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Task => "task",
            Self::Session => "session",
            Self::Input => "input",
            Self::RequestState => "mrtr",
            Self::LogCursor => "logs",
            Self::Approval => "approval",
        }
    }
}

/// One key: its id and derived secrets.
#[derive(Clone)]
struct Key {
    id: String,
    /// Seals and opens `tg3` (its own HKDF key).
    aead: std::sync::Arc<LessSafeKey>,
    /// Opens `tg2` (the legacy key; seals only in tests of that).
    aead_v2: std::sync::Arc<LessSafeKey>,
    /// Opens `tg1` (the same legacy key; seals only in tests of that).
    aead_v1: XChaCha20Poly1305,
    /// Names runs (its own HKDF key).
    mac: [u8; 32],
}

/// The configured keys: the first seals, all open.
#[derive(Clone)]
pub struct Keyring {
    keys: Vec<Key>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|k| k.id.as_str()).collect();
        f.debug_struct("Keyring").field("ids", &ids).finish()
    }
}

/// What a task handle holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskClaims {
    /// The dialect that created the task; a task is only found by its own dialect.
    #[serde(rename = "d")]
    pub dialect: Dialect,
    /// Tool name.
    #[serde(rename = "t")]
    pub tool: String,
    /// The engine's native reference.
    #[serde(rename = "r")]
    pub native: String,
    /// Creation time, milliseconds since the Unix epoch.
    #[serde(rename = "c")]
    pub created_ms: u64,
    /// Time to live from creation, milliseconds; `None` is unlimited.
    #[serde(rename = "l")]
    pub ttl_ms: Option<u64>,
}

impl TaskClaims {
    /// Creation time.
    #[must_use]
    pub fn created_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.created_ms)
    }

    /// The claims from a handle's plaintext. What [`Keyring::seal`] writes
    /// (`serde_json`'s text of this struct: its members in order, no spaces,
    /// strings without escapes) is read member by member without a parser;
    /// any other text (escapes, another order, a member more or less) goes
    /// through `serde_json`, so both read every plaintext alike. The plaintext
    /// is authenticated: only a taskgate that holds the key wrote it.
    #[must_use]
    pub fn from_sealed(plaintext: &[u8]) -> Option<Self> {
        Self::from_canonical(plaintext).or_else(|| from_json(plaintext))
    }

    /// The claims from exactly the text `serde_json` writes for them; `None`
    /// for anything else (which may still be valid JSON).
    fn from_canonical(text: &[u8]) -> Option<Self> {
        let rest = text.strip_prefix(br#"{"d":""#)?;
        let (&d, rest) = rest.split_first()?;
        let dialect = match d {
            b'm' => Dialect::TasksExtension,
            b't' => Dialect::TasksSep1686,
            b'h' => Dialect::PlainHandle,
            _ => return None,
        };
        let rest = rest.strip_prefix(br#"","t":""#)?;
        let (tool, rest) = plain_string(rest)?;
        let rest = rest.strip_prefix(br#","r":""#)?;
        let (native, rest) = plain_string(rest)?;
        let rest = rest.strip_prefix(br#","c":"#)?;
        let (created_ms, rest) = plain_u64(rest)?;
        let rest = rest.strip_prefix(br#","l":"#)?;
        let (ttl_ms, rest) = match rest.strip_prefix(b"null") {
            Some(rest) => (None, rest),
            None => {
                let (ttl, rest) = plain_u64(rest)?;
                (Some(ttl), rest)
            }
        };
        (rest == b"}").then(|| Self {
            dialect,
            tool: tool.to_owned(),
            native: native.to_owned(),
            created_ms,
            ttl_ms,
        })
    }

    /// True when the TTL has passed at `now`.
    #[must_use]
    pub fn expired_at(&self, now: SystemTime) -> bool {
        match self.ttl_ms {
            Some(ttl) => unix_ms(now) >= self.created_ms.saturating_add(ttl),
            None => false,
        }
    }
}

/// Which wire dialect created a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Dialect {
    /// MCP 2026-07-28 with the tasks extension.
    #[serde(rename = "m")]
    TasksExtension,
    /// MCP 2025-11-25 tasks (SEP-1686).
    #[serde(rename = "t")]
    TasksSep1686,
    /// A handle returned to a plain (task-less) client by the `handles` policy.
    #[serde(rename = "h")]
    PlainHandle,
}

/// Why a key configuration is unusable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    /// No key configured.
    #[error("at least one sealing key is required")]
    Empty,
    /// An id is malformed or repeated.
    #[error("key id {0:?} must be 1-16 characters of [A-Za-z0-9_-] and unique")]
    BadId(String),
    /// A secret is not the base64 text of at least 32 random bytes.
    #[error(
        "the secret of key {0:?} must be the base64 text of at least 32 random bytes \
         (make one with `taskgate keygen`)"
    )]
    WeakSecret(String),
}

/// The bytes a sealing secret carries: its base64 text (standard or URL-safe
/// alphabet, padded or not, surrounding white space ignored) decoded. `None`
/// unless that is at least [`MIN_SECRET_BYTES`] bytes that look random: at
/// least 16 distinct byte values, and not all printable text (a passphrase
/// run through base64). Random bytes fail either test with a chance below
/// 10^-13; a phrase, a repeated pattern or a counter fails them.
#[must_use]
pub fn secret_bytes(secret: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE};
    let text = secret.trim();
    let bytes = [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(text).ok())?;
    if bytes.len() < MIN_SECRET_BYTES {
        return None;
    }
    let mut seen = [false; 256];
    for &b in &bytes {
        seen[usize::from(b)] = true;
    }
    let distinct = seen.iter().filter(|&&s| s).count();
    let all_text = bytes
        .iter()
        .all(|&b| (0x20..0x7f).contains(&b) || b == b'\n');
    (distinct >= 16 && !all_text).then_some(bytes)
}

/// A fresh sealing secret: the base64 text of 32 random bytes from the
/// system's generator (what `taskgate keygen` prints).
#[must_use]
pub fn new_secret() -> String {
    let mut bytes = [0u8; MIN_SECRET_BYTES];
    aws_lc_rs::rand::fill(&mut bytes).expect("the system's random numbers");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// An HKDF output length for [`hkdf_key`].
struct Len32;

impl aws_lc_rs::hkdf::KeyType for Len32 {
    fn len(&self) -> usize {
        32
    }
}

/// HKDF-SHA256 (RFC 5869) of `ikm` for `info`: 32 bytes.
fn hkdf_key(ikm: &[u8], info: &[u8]) -> [u8; 32] {
    use aws_lc_rs::hkdf::{Salt, HKDF_SHA256};
    let mut out = [0u8; 32];
    Salt::new(HKDF_SHA256, HKDF_SALT)
        .extract(ikm)
        .expand(&[info], Len32)
        .and_then(|okm| okm.fill(&mut out))
        .expect("32 bytes are within HKDF-SHA256's output limit");
    out
}

/// The one key earlier releases derived from a secret's text for both `tg1`
/// and `tg2` (and, with another label, their run-name key): kept to open
/// what they sealed.
fn legacy_key(secret: &str, label: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"taskgate key derivation v1\0");
    h.update(label.as_bytes());
    h.update([0]);
    h.update(secret.as_bytes());
    h.finalize().into()
}

impl Keyring {
    /// Builds a keyring from `(id, secret)` pairs, the first sealing.
    ///
    /// # Errors
    ///
    /// A [`KeyError`] for an empty list, a bad or repeated id, or a secret that
    /// does not carry 32 random bytes ([`secret_bytes`]).
    pub fn new(pairs: &[(String, String)]) -> Result<Self, KeyError> {
        if pairs.is_empty() {
            return Err(KeyError::Empty);
        }
        let mut keys: Vec<Key> = Vec::new();
        for (id, secret) in pairs {
            let good_id = !id.is_empty()
                && id.len() <= 16
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                && keys.iter().all(|k| &k.id != id);
            if !good_id {
                return Err(KeyError::BadId(id.clone()));
            }
            let Some(ikm) = secret_bytes(secret) else {
                return Err(KeyError::WeakSecret(id.clone()));
            };
            // Each generation and use its own key: HKDF of the secret's bytes
            // for what is sealed and named now; the legacy digest of its text
            // (one key for both older ciphers) only to open and find what
            // earlier releases sealed and named.
            let unbound = UnboundKey::new(&AES_256_GCM_SIV, &hkdf_key(&ikm, INFO_TG3))
                .expect("a 256-bit key is what AES-256-GCM-SIV takes");
            let legacy = legacy_key(secret, "seal");
            let unbound_v2 = UnboundKey::new(&AES_256_GCM_SIV, &legacy)
                .expect("a 256-bit key is what AES-256-GCM-SIV takes");
            keys.push(Key {
                id: id.clone(),
                aead: std::sync::Arc::new(LessSafeKey::new(unbound)),
                aead_v2: std::sync::Arc::new(LessSafeKey::new(unbound_v2)),
                aead_v1: XChaCha20Poly1305::new((&legacy).into()),
                mac: hkdf_key(&ikm, INFO_RUN_NAME),
            });
        }
        Ok(Self { keys })
    }

    /// Seals `claims` for `caller` under the first key, with `purpose` binding the
    /// handle to its use (a task handle never opens as a session id).
    #[must_use]
    pub fn seal<T: Serialize>(&self, purpose: Purpose, caller: &str, claims: &T) -> String {
        let key = &self.keys[0];
        seal_gcm_siv(&key.aead, PREFIX, &key.id, purpose, caller, claims)
    }

    /// Seals `claims` as [`Self::seal`] does, to expire `ttl` from now: past
    /// it, [`Self::open_unexpired`] does not open it. For the sealed values of
    /// a moment (input-request ids, log cursors), which carry no times of
    /// their own.
    #[must_use]
    pub fn seal_expiring<T: Serialize>(
        &self,
        purpose: Purpose,
        caller: &str,
        claims: &T,
        ttl: Duration,
    ) -> String {
        let expires_ms = unix_ms(SystemTime::now()).saturating_add(ttl.as_millis() as u64);
        self.seal(
            purpose,
            caller,
            &Expiring {
                expires_ms,
                value: claims,
            },
        )
    }

    /// Opens what [`Self::seal_expiring`] sealed; `None` as [`Self::open`],
    /// and also once it has expired at `now`.
    #[must_use]
    pub fn open_unexpired<T: DeserializeOwned>(
        &self,
        purpose: Purpose,
        caller: &str,
        handle: &str,
        now: SystemTime,
    ) -> Option<T> {
        let sealed: Expiring<T> = self.open(purpose, caller, handle)?;
        (unix_ms(now) < sealed.expires_ms).then_some(sealed.value)
    }

    /// Seals under the legacy key as `tg2`, to test that such handles still open.
    #[cfg(test)]
    fn seal_v2<T: Serialize>(&self, purpose: Purpose, caller: &str, claims: &T) -> String {
        let key = &self.keys[0];
        seal_gcm_siv(&key.aead_v2, PREFIX_V2, &key.id, purpose, caller, claims)
    }
}

/// A sealed value with its expiry (milliseconds since the Unix epoch).
#[derive(Serialize, Deserialize)]
struct Expiring<T> {
    #[serde(rename = "x")]
    expires_ms: u64,
    #[serde(rename = "v")]
    value: T,
}

/// `PREFIX.<key id>.<base64url(nonce ‖ ciphertext)>` under `aead`.
fn seal_gcm_siv<T: Serialize>(
    aead: &LessSafeKey,
    prefix: &str,
    key_id: &str,
    purpose: Purpose,
    caller: &str,
    claims: &T,
) -> String {
    let mut nonce = [0u8; NONCE_LEN];
    aws_lc_rs::rand::fill(&mut nonce).expect("the system's random numbers");
    // nonce ‖ plaintext, then sealed in place after the nonce.
    let mut blob = nonce.to_vec();
    serde_json::to_writer(&mut blob, claims).expect("claims serialize");
    let mut sealed = blob.split_off(NONCE_LEN);
    let aad = associated_data(prefix, purpose, key_id, caller);
    aead.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(&aad),
        &mut sealed,
    )
    .expect("sealing cannot fail for in-memory buffers");
    blob.extend_from_slice(&sealed);
    format!("{prefix}.{key_id}.{}", URL_SAFE_NO_PAD.encode(blob))
}

impl Keyring {
    /// Opens a handle sealed for `caller` and `purpose`, `tg3`, `tg2` or `tg1`. `None`
    /// for anything that does not open: a made-up string, an unknown key id,
    /// altered bytes, another caller or purpose.
    #[must_use]
    pub fn open<T: DeserializeOwned>(
        &self,
        purpose: Purpose,
        caller: &str,
        handle: &str,
    ) -> Option<T> {
        self.open_with(purpose, caller, handle, from_json)
    }

    /// [`Self::open`] for a task handle, the one every poll opens: its claims
    /// are read by [`TaskClaims::from_sealed`].
    #[must_use]
    pub fn open_task(&self, caller: &str, handle: &str) -> Option<TaskClaims> {
        self.open_with(Purpose::Task, caller, handle, TaskClaims::from_sealed)
    }

    /// Opens a handle and reads its plaintext with `read`.
    fn open_with<T>(
        &self,
        purpose: Purpose,
        caller: &str,
        handle: &str,
        read: impl FnOnce(&[u8]) -> Option<T>,
    ) -> Option<T> {
        let mut parts = handle.splitn(3, '.');
        let prefix = parts.next()?;
        if prefix != PREFIX && prefix != PREFIX_V2 && prefix != PREFIX_V1 {
            return None;
        }
        let id = parts.next()?;
        let key = self.keys.iter().find(|k| k.id == id)?;
        let mut blob = URL_SAFE_NO_PAD.decode(parts.next()?).ok()?;
        let aad = associated_data(prefix, purpose, id, caller);
        if prefix == PREFIX_V1 {
            if blob.len() < NONCE_LEN_V1 + TAG_LEN {
                return None;
            }
            let (nonce, ciphertext) = blob.split_at(NONCE_LEN_V1);
            let plaintext = key
                .aead_v1
                .decrypt(
                    nonce.into(),
                    Payload {
                        msg: ciphertext,
                        aad: &aad,
                    },
                )
                .ok()?;
            return read(&plaintext);
        }
        if blob.len() < NONCE_LEN + TAG_LEN {
            return None;
        }
        let (nonce, sealed) = blob.split_at_mut(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let aead = if prefix == PREFIX {
            &key.aead
        } else {
            &key.aead_v2
        };
        let plaintext = aead.open_in_place(nonce, Aad::from(&aad), sealed).ok()?;
        read(plaintext)
    }

    /// Seals as the handles before AES-GCM-SIV were sealed, to test that they
    /// still open.
    #[cfg(test)]
    fn seal_v1<T: Serialize>(&self, purpose: Purpose, caller: &str, claims: &T) -> String {
        let key = &self.keys[0];
        let plaintext = serde_json::to_vec(claims).expect("claims serialize");
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let aad = associated_data(PREFIX_V1, purpose, &key.id, caller);
        let ciphertext = key
            .aead_v1
            .encrypt(
                &nonce,
                Payload {
                    msg: &plaintext,
                    aad: &aad,
                },
            )
            .expect("sealing cannot fail for in-memory buffers");
        let mut blob = nonce.to_vec();
        blob.extend_from_slice(&ciphertext);
        format!("{PREFIX_V1}.{}.{}", key.id, URL_SAFE_NO_PAD.encode(blob))
    }

    /// Derives a run name from the caller, the tool and a client-chosen token,
    /// keyed by the sealing key so nobody else can predict or collide with it:
    /// `tg-` and 26 base32 characters (130 bits).
    #[must_use]
    pub fn derive_run_name(&self, caller: &str, tool: &str, token: &str) -> String {
        derive_with(&self.keys[0].mac, caller, tool, token)
    }
}

impl Keyring {
    /// The run names every configured key derives for (caller, tool, token), the
    /// sealing key's first: after a rotation a retried token still finds the
    /// run an older key named. (Names derived before the HKDF keys are not
    /// among them: each would cost every look-up one more engine call.)
    #[must_use]
    pub fn derive_run_names(&self, caller: &str, tool: &str, token: &str) -> Vec<String> {
        let mut names: Vec<String> = Vec::with_capacity(self.keys.len());
        for key in &self.keys {
            let name = derive_with(&key.mac, caller, tool, token);
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }
}

fn derive_with(mac_key: &[u8], caller: &str, tool: &str, token: &str) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(mac_key).expect("any key size");
    for part in [caller, tool, token] {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part.as_bytes());
    }
    run_name_from(&mac.finalize().into_bytes())
}

/// Claims from their JSON, its UTF-8 checked once as a whole rather than
/// string by string.
fn from_json<T: DeserializeOwned>(plaintext: &[u8]) -> Option<T> {
    serde_json::from_str(std::str::from_utf8(plaintext).ok()?).ok()
}

/// The text of a JSON string whose opening quote has been read, and what
/// follows its closing quote; `None` for a string `serde_json` would have
/// written with an escape (a quote, a backslash, a control character), or
/// that is not UTF-8.
fn plain_string(text: &[u8]) -> Option<(&str, &[u8])> {
    let end = text
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
    if text[end] != b'"' {
        return None;
    }
    let s = std::str::from_utf8(&text[..end]).ok()?;
    Some((s, &text[end + 1..]))
}

/// A JSON number as `serde_json` writes a `u64` (digits, no leading zero),
/// and what follows it; `None` for anything else.
fn plain_u64(text: &[u8]) -> Option<(u64, &[u8])> {
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || (digits > 1 && text[0] == b'0') {
        return None;
    }
    let mut n: u64 = 0;
    for &b in &text[..digits] {
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    let rest = &text[digits..];
    // A fraction or an exponent is not a u64 as written by serde_json.
    if matches!(rest.first(), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    Some((n, rest))
}

fn associated_data(prefix: &str, purpose: Purpose, key_id: &str, caller: &str) -> Vec<u8> {
    let purpose = purpose.label();
    let mut aad =
        Vec::with_capacity(prefix.len() + purpose.len() + key_id.len() + caller.len() + 16);
    for part in [prefix, purpose, key_id, caller] {
        aad.extend_from_slice(&(part.len() as u32).to_be_bytes());
        aad.extend_from_slice(part.as_bytes());
    }
    aad
}

/// A fresh random run name: `tg-` and 26 base32 characters (130 random bits).
#[must_use]
pub fn random_run_name() -> String {
    let bytes: [u8; 24] = XChaCha20Poly1305::generate_nonce(&mut OsRng).into();
    run_name_from(&bytes)
}

fn run_name_from(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut out = String::from("tg-");
    let mut acc: u32 = 0;
    let mut bits = 0;
    for b in bytes {
        acc = (acc << 8) | u32::from(*b);
        bits += 8;
        while bits >= 5 && out.len() < 29 {
            bits -= 5;
            out.push(ALPHABET[((acc >> bits) & 31) as usize] as char);
        }
    }
    out
}

/// A short, label-safe tag of a caller (16 hex characters), for engine labels.
#[must_use]
pub fn caller_tag(caller: &str) -> String {
    let digest = Sha256::digest(format!("taskgate caller\0{caller}").as_bytes());
    hex::encode(&digest[..8])
}

/// The last characters of a handle, for logs (never the whole bearer secret).
#[must_use]
pub fn short(handle: &str) -> String {
    let start = handle.char_indices().rev().nth(7).map_or(0, |(at, _)| at);
    format!("…{}", &handle[start..])
}

/// Milliseconds since the Unix epoch.
#[must_use]
pub fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keeps_the_last_eight_characters() {
        assert_eq!(short("tg1.k1.abcdefghijkl"), "…efghijkl");
        assert_eq!(short("abc"), "…abc");
        assert_eq!(short("ééééééééé"), "…éééééééé");
        assert_eq!(short(""), "…");
    }

    fn ring(pairs: &[(&str, &str)]) -> Keyring {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect();
        Keyring::new(&pairs).unwrap()
    }

    const S1: &str = "8vBdKXub1EpedBSh915DzTCkdbZ4CegNO4LkSLsdBdk=";
    const S2: &str = "oyZheMkMT/N61eSaSv3CBFq75gWxdzBudobo6l9e6u0=";

    fn claims() -> TaskClaims {
        TaskClaims {
            dialect: Dialect::TasksExtension,
            tool: "t".into(),
            native: "arn:aws:states:us-east-1:123456789012:execution:sm:tg-x".into(),
            created_ms: 1_000,
            ttl_ms: Some(5_000),
        }
    }

    #[test]
    fn round_trip_and_binding() {
        let k = ring(&[("k1", S1)]);
        let h = k.seal(Purpose::Task, "alice", &claims());
        assert!(h.starts_with("tg3.k1."));
        assert!(!h.contains("arn"), "native ids never appear in clear");
        assert_eq!(
            k.open::<TaskClaims>(Purpose::Task, "alice", &h),
            Some(claims())
        );
        assert_eq!(
            k.open::<TaskClaims>(Purpose::Task, "bob", &h),
            None,
            "foreign caller"
        );
        assert_eq!(
            k.open::<TaskClaims>(Purpose::Session, "alice", &h),
            None,
            "other purpose"
        );
    }

    #[test]
    fn handles_sealed_before_gcm_siv_still_open_and_only_as_themselves() {
        let k = ring(&[("k1", S1)]);
        let old = k.seal_v1(Purpose::Task, "alice", &claims());
        assert!(old.starts_with("tg1.k1."));
        assert_eq!(
            k.open::<TaskClaims>(Purpose::Task, "alice", &old),
            Some(claims())
        );
        assert_eq!(k.open::<TaskClaims>(Purpose::Task, "bob", &old), None);
        assert_eq!(k.open::<TaskClaims>(Purpose::Session, "alice", &old), None);
        // The prefix names the cipher and the key: no kind opens under another's.
        let v2 = k.seal_v2(Purpose::Task, "alice", &claims());
        assert!(v2.starts_with("tg2.k1."));
        assert_eq!(
            k.open::<TaskClaims>(Purpose::Task, "alice", &v2),
            Some(claims())
        );
        assert_eq!(k.open::<TaskClaims>(Purpose::Task, "bob", &v2), None);
        let new = k.seal(Purpose::Task, "alice", &claims());
        for (handle, from, to) in [
            (&old, "tg1.", "tg2."),
            (&old, "tg1.", "tg3."),
            (&v2, "tg2.", "tg1."),
            (&v2, "tg2.", "tg3."),
            (&new, "tg3.", "tg2."),
            (&new, "tg3.", "tg1."),
        ] {
            let relabeled = handle.replacen(from, to, 1);
            assert_eq!(
                k.open::<TaskClaims>(Purpose::Task, "alice", &relabeled),
                None,
                "{from} relabeled {to}"
            );
        }
        // Each seal draws its own nonce.
        assert_ne!(new, k.seal(Purpose::Task, "alice", &claims()));
    }

    #[test]
    fn no_purpose_opens_as_another() {
        let k = ring(&[("k1", S1)]);
        let all = [
            Purpose::Task,
            Purpose::Session,
            Purpose::Input,
            Purpose::RequestState,
            Purpose::LogCursor,
            Purpose::Approval,
        ];
        for sealed in all {
            let h = k.seal(sealed, "alice", &claims());
            for opened in all {
                assert_eq!(
                    k.open::<TaskClaims>(opened, "alice", &h).is_some(),
                    sealed == opened,
                    "sealed as {sealed:?}, opened as {opened:?}"
                );
            }
        }
    }

    #[test]
    fn altered_forged_and_unknown_key_do_not_open() {
        let k = ring(&[("k1", S1)]);
        let h = k.seal(Purpose::Task, "alice", &claims());
        let mut bytes = h.clone().into_bytes();
        let last = bytes.len() - 3;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(bytes).unwrap();
        for bad in [
            altered.as_str(),
            "tg1.k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "tg2.k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "tg2.k1.AAAA",
            "tg1.k9.AAAA",
            "tg3.k1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "job-1234",
            "",
        ] {
            assert_eq!(
                k.open::<TaskClaims>(Purpose::Task, "alice", bad),
                None,
                "{bad}"
            );
        }
        let other = ring(&[("k1", S2)]);
        assert_eq!(other.open::<TaskClaims>(Purpose::Task, "alice", &h), None);
    }

    #[test]
    fn rotation_first_seals_all_open() {
        let old = ring(&[("k1", S1)]);
        let h_old = old.seal(Purpose::Task, "a", &claims());
        let rotated = ring(&[("k2", S2), ("k1", S1)]);
        assert_eq!(
            rotated.open::<TaskClaims>(Purpose::Task, "a", &h_old),
            Some(claims())
        );
        assert!(rotated
            .seal(Purpose::Task, "a", &claims())
            .starts_with("tg3.k2."));
    }

    #[test]
    fn expiry() {
        let c = claims();
        assert!(!c.expired_at(UNIX_EPOCH + Duration::from_millis(5_999)));
        assert!(c.expired_at(UNIX_EPOCH + Duration::from_millis(6_000)));
    }

    #[test]
    fn run_names_fit_every_engine() {
        let k = ring(&[("k1", S1)]);
        let a = k.derive_run_name("alice", "tool", "op-1");
        assert_eq!(a, k.derive_run_name("alice", "tool", "op-1"));
        assert_ne!(a, k.derive_run_name("bob", "tool", "op-1"));
        assert_ne!(a, k.derive_run_name("alice", "tool2", "op-1"));
        for name in [a, random_run_name()] {
            assert_eq!(name.len(), 29, "{name}");
            assert!(name.starts_with("tg-"));
            assert!(name[3..]
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
        }
        assert_ne!(random_run_name(), random_run_name());
    }

    #[test]
    fn run_names_of_every_key() {
        let old = ring(&[("k1", S1)]);
        let rotated = ring(&[("k2", S2), ("k1", S1)]);
        let names = rotated.derive_run_names("alice", "tool", "op-1");
        assert_eq!(names.len(), 2);
        assert_eq!(names[0], rotated.derive_run_name("alice", "tool", "op-1"));
        assert_eq!(names[1], old.derive_run_name("alice", "tool", "op-1"));
        assert_eq!(old.derive_run_names("alice", "tool", "op-1").len(), 1);
    }

    #[test]
    fn bad_keys_are_refused() {
        assert_eq!(Keyring::new(&[]).unwrap_err(), KeyError::Empty);
        assert!(matches!(
            Keyring::new(&[("k 1".into(), S1.into())]).unwrap_err(),
            KeyError::BadId(_)
        ));
        for weak in [
            "short",
            // Long text, but not base64 of 32 bytes.
            "development-only-key-do-not-use-in-production",
            "0123456789abcdef0123456789abcdef",
            // Base64, too short: 31 bytes.
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHg==",
            // Base64 of 32 bytes, too few distinct values.
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            "AQIDBAECAwQBAgMEAQIDBAECAwQBAgMEAQIDBAECAwQ=",
            // Base64 of a passphrase (printable text).
            "Y29ycmVjdCBob3JzZSBiYXR0ZXJ5IHN0YXBsZSBhbmQgbW9yZSB3b3Jkcw==",
        ] {
            assert!(
                matches!(
                    Keyring::new(&[("k1".into(), weak.into())]).unwrap_err(),
                    KeyError::WeakSecret(_)
                ),
                "{weak}"
            );
        }
        // Either alphabet, padded or not, white space around ignored.
        for fine in [
            S1,
            S1.trim_end_matches('='),
            "  p/4MQhhD8Y1TpeyGop6V5LEm77uhg8lXNetP3B7VAMs=\n",
        ] {
            assert!(
                Keyring::new(&[("k1".into(), fine.into())]).is_ok(),
                "{fine}"
            );
        }
        let url = S2.replace('/', "_");
        assert!(Keyring::new(&[("k1".into(), url)]).is_ok());
        // What keygen makes is accepted, and fresh each time.
        let made = new_secret();
        assert_eq!(secret_bytes(&made).map(|b| b.len()), Some(32));
        assert_ne!(made, new_secret());
    }

    #[test]
    fn each_generation_and_use_has_its_own_key() {
        let ikm = secret_bytes(S1).unwrap();
        let keys = [
            hkdf_key(&ikm, INFO_TG3),
            hkdf_key(&ikm, INFO_RUN_NAME),
            legacy_key(S1, "seal"),
            legacy_key(S1, "name"),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // RFC 5869 test case 3 (no salt, no info) pins the HKDF in use.
        let okm = {
            use aws_lc_rs::hkdf::{Salt, HKDF_SHA256};
            let mut out = [0u8; 42];
            struct Len42;
            impl aws_lc_rs::hkdf::KeyType for Len42 {
                fn len(&self) -> usize {
                    42
                }
            }
            Salt::new(HKDF_SHA256, &[])
                .extract(&[0x0b; 22])
                .expand(&[], Len42)
                .unwrap()
                .fill(&mut out)
                .unwrap();
            hex::encode(out)
        };
        assert_eq!(
            okm,
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
        );
    }

    #[test]
    fn expiring_values_do_not_open_once_expired() {
        let k = ring(&[("k1", S1)]);
        let sealed = k.seal_expiring(Purpose::Input, "alice", &claims(), Duration::from_secs(60));
        let now = SystemTime::now();
        assert_eq!(
            k.open_unexpired::<TaskClaims>(Purpose::Input, "alice", &sealed, now),
            Some(claims())
        );
        let later = now + Duration::from_secs(61);
        assert_eq!(
            k.open_unexpired::<TaskClaims>(Purpose::Input, "alice", &sealed, later),
            None,
            "expired"
        );
        assert_eq!(
            k.open_unexpired::<TaskClaims>(Purpose::Input, "bob", &sealed, now),
            None
        );
        // A value sealed without an expiry does not open as an expiring one.
        let plain = k.seal(Purpose::Input, "alice", &claims());
        assert_eq!(
            k.open_unexpired::<TaskClaims>(Purpose::Input, "alice", &plain, now),
            None
        );
    }

    /// The claims reader without a parser reads every plaintext exactly as
    /// `serde_json` does: what a seal writes, and any other text.
    #[test]
    fn task_claims_read_as_serde_json_reads_them() {
        let serde = |text: &[u8]| from_json::<TaskClaims>(text);
        let mut written = Vec::new();
        for dialect in [
            Dialect::TasksExtension,
            Dialect::TasksSep1686,
            Dialect::PlainHandle,
        ] {
            for tool in [
                "t",
                "deploy_prod",
                "é-ü",
                "a\"b",
                "a\\b",
                "tab\there",
                "\u{1}",
                "",
            ] {
                for native in [
                    "tg-abc",
                    "arn:aws:states:x:1:execution:sm:tg-x",
                    "run \"7\"",
                    "ü",
                ] {
                    for created_ms in [0, 7, 1_764_000_000_000, u64::MAX] {
                        for ttl_ms in [None, Some(0), Some(86_400_000), Some(u64::MAX)] {
                            let claims = TaskClaims {
                                dialect,
                                tool: tool.into(),
                                native: native.into(),
                                created_ms,
                                ttl_ms,
                            };
                            let text = serde_json::to_vec(&claims).unwrap();
                            assert_eq!(TaskClaims::from_sealed(&text), Some(claims), "{text:?}");
                            written.push(text);
                        }
                    }
                }
            }
        }
        // What a seal writes without escapes never needs the parser.
        let plain = serde_json::to_vec(&claims()).unwrap();
        assert_eq!(TaskClaims::from_canonical(&plain), Some(claims()));
        let escaped = br#"{"d":"m","t":"a\"b","r":"r","c":1,"l":null}"#;
        assert_eq!(TaskClaims::from_canonical(escaped), None);
        assert!(TaskClaims::from_sealed(escaped).is_some());
        // Other texts: each read as serde_json reads it, whichever way that is.
        let others: &[&[u8]] = &[
            br#"{"t":"x","d":"m","r":"r","c":1,"l":2}"#,
            br#"{"d":"m","t":"x","r":"r","c":1}"#,
            br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"z":3}"#,
            br#"{"d":"m","t":"x","r":"r","c":1,"l":2} "#,
            br#" {"d":"m","t":"x","r":"r","c":1,"l":2}"#,
            br#"{"d": "m","t":"x","r":"r","c":1,"l":2}"#,
            br#"{"d":"q","t":"x","r":"r","c":1,"l":2}"#,
            br#"{"d":"mm","t":"x","r":"r","c":1,"l":2}"#,
            br#"{"d":"m","t":"x","r":"r","c":01,"l":2}"#,
            br#"{"d":"m","t":"x","r":"r","c":-1,"l":2}"#,
            br#"{"d":"m","t":"x","r":"r","c":1.0,"l":2}"#,
            br#"{"d":"m","t":"x","r":"r","c":1e3,"l":2}"#,
            br#"{"d":"m","t":"x","r":"r","c":18446744073709551616,"l":2}"#,
            br#"{"d":"m","t":"x","r":"r","c":1,"l":nul}"#,
            br#"{"d":"m","t":"x","r":"r","c":1,"l":"2"}"#,
            br#"{"d":"m","t":"x","r":"r","c":,"l":2}"#,
            br#"{"d":"m","t":"x\u0041","r":"r","c":1,"l":2}"#,
            b"{\"d\":\"m\",\"t\":\"x\x01\",\"r\":\"r\",\"c\":1,\"l\":2}",
            b"{\"d\":\"m\",\"t\":\"\xff\",\"r\":\"r\",\"c\":1,\"l\":2}",
            br#"{"d":"m","t":"x","r":"r","c":1,"l":2"#,
            br#"{"d":"m""#,
            b"",
            b"null",
        ];
        for text in others
            .iter()
            .copied()
            .chain(written.iter().map(Vec::as_slice))
        {
            assert_eq!(
                TaskClaims::from_sealed(text),
                serde(text),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        // Every cut of a written text reads as serde_json reads it (not at all).
        for end in 0..plain.len() {
            assert_eq!(TaskClaims::from_sealed(&plain[..end]), serde(&plain[..end]));
        }
    }

    #[test]
    fn a_task_handle_opens_through_the_claims_reader() {
        let k = ring(&[("k1", S1)]);
        let h = k.seal(Purpose::Task, "alice", &claims());
        assert_eq!(k.open_task("alice", &h), Some(claims()));
        assert_eq!(k.open_task("bob", &h), None);
        let session = k.seal(Purpose::Session, "alice", &claims());
        assert_eq!(k.open_task("alice", &session), None);
    }
}
