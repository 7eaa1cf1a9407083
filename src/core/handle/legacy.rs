//! The generations earlier releases sealed, kept only to open: `tg2`
//! (AES-256-GCM-SIV, opened by `tg3.rs`) and `tg1` (XChaCha20-Poly1305,
//! a 192-bit nonce), both under one key derived from the secret's text with
//! SHA-256.

use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::XChaCha20Poly1305;
use sha2::{Digest, Sha256};

use super::tg3::TAG_LEN;

/// The prefix of AES-256-GCM-SIV handles sealed under the legacy key; they still open.
pub(super) const PREFIX_V2: &str = "tg2";
/// The prefix of the handles sealed before AES-GCM-SIV; they still open.
pub(super) const PREFIX_V1: &str = "tg1";
/// The nonce of a `tg1` handle.
const NONCE_LEN_V1: usize = 24;

/// The one key earlier releases derived from a secret's text for both `tg1`
/// and `tg2` (and, with another label, their run-name key): kept to open
/// what they sealed.
pub(super) fn legacy_key(secret: &str, label: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"taskgate key derivation v1\0");
    h.update(label.as_bytes());
    h.update([0]);
    h.update(secret.as_bytes());
    h.finalize().into()
}

/// The plaintext of a `tg1` blob (24-byte nonce ‖ ciphertext); `None` when it
/// does not open.
pub(super) fn open_v1(aead: &XChaCha20Poly1305, blob: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
    if blob.len() < NONCE_LEN_V1 + TAG_LEN {
        return None;
    }
    let (nonce, ciphertext) = blob.split_at(NONCE_LEN_V1);
    aead.decrypt(
        nonce.into(),
        Payload {
            msg: ciphertext,
            aad,
        },
    )
    .ok()
}

/// A `tg1` blob, as earlier releases sealed them (for tests that they still open).
#[cfg(test)]
pub(super) fn seal_v1(aead: &XChaCha20Poly1305, plaintext: &[u8], aad: &[u8]) -> Vec<u8> {
    use chacha20poly1305::aead::{AeadCore, OsRng};
    let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
    let ciphertext = aead
        .encrypt(
            &nonce,
            Payload {
                msg: plaintext,
                aad,
            },
        )
        .expect("sealing cannot fail for in-memory buffers");
    let mut blob = nonce.to_vec();
    blob.extend_from_slice(&ciphertext);
    blob
}
