//! The configured keys: each secret checked and its keys derived; the first
//! key seals, every key opens. Which generation a handle is, its prefix says.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lc_rs::aead::{LessSafeKey, UnboundKey, AES_256_GCM_SIV};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chacha20poly1305::aead::KeyInit;
use chacha20poly1305::XChaCha20Poly1305;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use super::claims::{from_json, unix_ms, TaskClaims};
use super::legacy::{self, legacy_key};
use super::purpose::{associated_data, Purpose};
use super::tg3;

/// The least a sealing secret must carry: 32 bytes (256 bits) once decoded.
pub const MIN_SECRET_BYTES: usize = 32;
/// The HKDF salt of every key taskgate derives from a sealing secret.
pub(super) const HKDF_SALT: &[u8] = b"taskgate sealing keys";
/// HKDF `info` of the `tg3` AES-256-GCM-SIV key.
pub(super) const INFO_TG3: &[u8] = b"taskgate tg3 aes-256-gcm-siv";
/// HKDF `info` of the run-name HMAC-SHA256 key.
pub(super) const INFO_RUN_NAME: &[u8] = b"taskgate run-name hmac-sha256";

/// One key: its id and derived secrets.
#[derive(Clone)]
pub(super) struct Key {
    /// Its id, named in every handle it seals.
    pub(super) id: String,
    /// Seals and opens `tg3` (its own HKDF key).
    pub(super) aead: Arc<LessSafeKey>,
    /// Opens `tg2` (the legacy key; seals only in tests of that).
    pub(super) aead_v2: Arc<LessSafeKey>,
    /// Opens `tg1` (the same legacy key; seals only in tests of that).
    pub(super) aead_v1: XChaCha20Poly1305,
    /// Names runs (its own HKDF key).
    pub(super) mac: [u8; 32],
}

/// The configured keys: the first seals, all open.
#[derive(Clone)]
pub struct Keyring {
    pub(super) keys: Vec<Key>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|k| k.id.as_str()).collect();
        f.debug_struct("Keyring").field("ids", &ids).finish()
    }
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
pub(super) fn hkdf_key(ikm: &[u8], info: &[u8]) -> [u8; 32] {
    use aws_lc_rs::hkdf::{Salt, HKDF_SHA256};
    let mut out = [0u8; 32];
    Salt::new(HKDF_SHA256, HKDF_SALT)
        .extract(ikm)
        .expand(&[info], Len32)
        .and_then(|okm| okm.fill(&mut out))
        .expect("32 bytes are within HKDF-SHA256's output limit");
    out
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
                aead: Arc::new(LessSafeKey::new(unbound)),
                aead_v2: Arc::new(LessSafeKey::new(unbound_v2)),
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
        tg3::seal_gcm_siv(&key.aead, tg3::PREFIX, &key.id, purpose, caller, claims)
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
}

/// A sealed value with its expiry (milliseconds since the Unix epoch).
#[derive(Serialize, Deserialize)]
struct Expiring<T> {
    #[serde(rename = "x")]
    expires_ms: u64,
    #[serde(rename = "v")]
    value: T,
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
        if prefix != tg3::PREFIX && prefix != legacy::PREFIX_V2 && prefix != legacy::PREFIX_V1 {
            return None;
        }
        let id = parts.next()?;
        let key = self.keys.iter().find(|k| k.id == id)?;
        let mut blob = URL_SAFE_NO_PAD.decode(parts.next()?).ok()?;
        let aad = associated_data(prefix, purpose, id, caller);
        match prefix {
            legacy::PREFIX_V1 => read(&legacy::open_v1(&key.aead_v1, &blob, &aad)?),
            tg3::PREFIX => read(tg3::open_gcm_siv(&key.aead, &mut blob, &aad)?),
            _ => read(tg3::open_gcm_siv(&key.aead_v2, &mut blob, &aad)?),
        }
    }

    /// Seals under the legacy key as `tg2`, to test that such handles still open.
    #[cfg(test)]
    pub(super) fn seal_v2<T: Serialize>(
        &self,
        purpose: Purpose,
        caller: &str,
        claims: &T,
    ) -> String {
        let key = &self.keys[0];
        tg3::seal_gcm_siv(
            &key.aead_v2,
            legacy::PREFIX_V2,
            &key.id,
            purpose,
            caller,
            claims,
        )
    }

    /// Seals as the handles before AES-GCM-SIV were sealed (`tg1`), to test
    /// that they still open.
    #[cfg(test)]
    pub(super) fn seal_v1<T: Serialize>(
        &self,
        purpose: Purpose,
        caller: &str,
        claims: &T,
    ) -> String {
        let key = &self.keys[0];
        let plaintext = serde_json::to_vec(claims).expect("claims serialize");
        let aad = associated_data(legacy::PREFIX_V1, purpose, &key.id, caller);
        let blob = legacy::seal_v1(&key.aead_v1, &plaintext, &aad);
        format!(
            "{}.{}.{}",
            legacy::PREFIX_V1,
            key.id,
            URL_SAFE_NO_PAD.encode(blob)
        )
    }
}
