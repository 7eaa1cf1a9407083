//! Names for runs: derived from (caller, tool, token) under each key's
//! run-name key, so nobody else can predict or collide with them, or random.

use chacha20poly1305::aead::{AeadCore, OsRng};
use chacha20poly1305::XChaCha20Poly1305;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::keyring::Keyring;

impl Keyring {
    /// Derives a run name from the caller, the tool and a client-chosen token,
    /// keyed by the sealing key so nobody else can predict or collide with it:
    /// `tg-` and 26 base32 characters (130 bits).
    #[must_use]
    pub fn derive_run_name(&self, caller: &str, tool: &str, token: &str) -> String {
        derive_with(&self.keys[0].mac, caller, tool, token)
    }

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
