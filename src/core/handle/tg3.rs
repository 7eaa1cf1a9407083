//! `tg3`, what is sealed now: AES-256-GCM-SIV under a key derived for it
//! alone with HKDF. The `tg2` generation is the same cipher under the legacy
//! key, so it opens here too.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, NONCE_LEN};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::Serialize;

use super::purpose::{associated_data, Purpose};

/// The prefix of the handles sealed now (AES-256-GCM-SIV, HKDF-derived key).
pub(super) const PREFIX: &str = "tg3";
/// The tag both ciphers append.
pub(super) const TAG_LEN: usize = 16;

/// `PREFIX.<key id>.<base64url(nonce ‖ ciphertext)>` under `aead`.
pub(super) fn seal_gcm_siv<T: Serialize>(
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

/// The plaintext of `blob` (nonce ‖ ciphertext) sealed under `aead` with
/// `aad`; `None` when it does not open.
pub(super) fn open_gcm_siv<'a>(
    aead: &LessSafeKey,
    blob: &'a mut [u8],
    aad: &[u8],
) -> Option<&'a [u8]> {
    if blob.len() < NONCE_LEN + TAG_LEN {
        return None;
    }
    let (nonce, sealed) = blob.split_at_mut(NONCE_LEN);
    let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
    let plaintext = aead.open_in_place(nonce, Aad::from(aad), sealed).ok()?;
    Some(plaintext)
}
