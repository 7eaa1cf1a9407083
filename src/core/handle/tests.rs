//! Tests of sealing, opening, claims and run names.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::claims::from_json;
use super::keyring::{hkdf_key, INFO_RUN_NAME, INFO_TG3};
use super::legacy::legacy_key;
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
        trace: None,
    }
}

/// A start span's reference (sampled).
fn start_span() -> TraceRef {
    TraceRef::new(
        *b"\x4b\xf9\x2f\x35\x77\xb3\x4d\xa6\xa3\xce\x92\x9d\x0e\x0e\x47\x36",
        [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7],
        1,
    )
    .unwrap()
}

fn traced() -> TaskClaims {
    TaskClaims {
        trace: Some(start_span()),
        ..claims()
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
                        for trace in [None, Some(start_span())] {
                            let claims = TaskClaims {
                                dialect,
                                tool: tool.into(),
                                native: native.into(),
                                created_ms,
                                ttl_ms,
                                trace,
                            };
                            let text = serde_json::to_vec(&claims).unwrap();
                            assert_eq!(TaskClaims::from_sealed(&text), Some(claims), "{text:?}");
                            written.push(text);
                        }
                    }
                }
            }
        }
    }
    // What a seal writes without escapes never needs the parser, with or
    // without a start span.
    let plain = serde_json::to_vec(&claims()).unwrap();
    assert_eq!(TaskClaims::from_canonical(&plain), Some(claims()));
    let with_span = serde_json::to_vec(&traced()).unwrap();
    assert_eq!(TaskClaims::from_canonical(&with_span), Some(traced()));
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
        // The start span's reference: well formed, and every way it is not.
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":"S_kvNXezTaajzpKdDg5HNgDwZ6oLqQK3AQ"}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":null,"s":"S_kvNXezTaajzpKdDg5HNgDwZ6oLqQK3AQ"}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":null}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":1}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":""}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":"S_kvNXezTaajzpKdDg5HNgDwZ6oLqQK3AQ="}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":"S_kvNXezTaajzpKdDg5HNgDwZ6oLqQK3A"}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":"S_kvNXezTaajzpKdDg5HNgDwZ6oLqQK3AQA"}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":"S/kvNXezTaajzpKdDg5HNgDwZ6oLqQK3AQ"}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":"S_kvNXezTaajzpKdDg5HNgDwZ6oLqQK3AR"}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":"AAAAAAAAAAAAAAAAAAAAAADwZ6oLqQK3AQ"}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":"S_kvNXezTaajzpKdDg5HNgAAAAAAAAAAAQ"}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":"S_kvNXezTaajzpKdDg5HNgDwZ6oLqQK3\u0041Q"}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":"S_kvNXezTaajzpKdDg5HNgDwZ6oLqQK3AQ","z":1}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":"S_kvNXezTaajzpKdDg5HNgDwZ6oLqQK3AQ","s":"S_kvNXezTaajzpKdDg5HNgDwZ6oLqQK3AQ"}"#,
        br#"{"d":"m","t":"x","r":"r","s":"S_kvNXezTaajzpKdDg5HNgDwZ6oLqQK3AQ","c":1,"l":2}"#,
        br#"{"d":"m","t":"x","r":"r","c":1,"l":2,"s":"S_kvNXezTaajzpKdDg5HNgDwZ6oLqQK3AQ""#,
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

#[test]
fn the_start_span_round_trips_through_a_task_handle() {
    let k = ring(&[("k1", S1)]);
    let h = k.seal(Purpose::Task, "alice", &traced());
    assert_eq!(k.open_task("alice", &h), Some(traced()));
    assert_eq!(
        k.open::<TaskClaims>(Purpose::Task, "alice", &h),
        Some(traced())
    );
    assert_eq!(k.open_task("bob", &h), None, "still bound to its caller");
    let reference = k.open_task("alice", &h).unwrap().trace.unwrap();
    assert_eq!(
        hex::encode(reference.trace_id()),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    assert_eq!(hex::encode(reference.span_id()), "00f067aa0ba902b7");
    assert_eq!(reference.flags(), 1);
    // Nothing of it in clear: the handle is as opaque as before.
    for clear in ["4bf92f35", "S_kvNXez", "00f067aa"] {
        assert!(!h.contains(clear), "{clear} in {h}");
    }
}

#[test]
fn claims_without_a_start_span_are_written_as_before() {
    // The exact plaintext of the releases before the field: a handle sealed
    // with tracing off is byte for byte what they sealed.
    assert_eq!(
        serde_json::to_string(&claims()).unwrap(),
        r#"{"d":"m","t":"t","r":"arn:aws:states:us-east-1:123456789012:execution:sm:tg-x","c":1000,"l":5000}"#
    );
    assert_eq!(
        serde_json::to_string(&traced()).unwrap(),
        r#"{"d":"m","t":"t","r":"arn:aws:states:us-east-1:123456789012:execution:sm:tg-x","c":1000,"l":5000,"s":"S_kvNXezTaajzpKdDg5HNgDwZ6oLqQK3AQ"}"#
    );
}

#[test]
fn handles_sealed_before_the_start_span_still_open_without_one() {
    let k = ring(&[("k1", S1)]);
    // What every earlier generation sealed: no `s` member.
    for h in [
        k.seal(Purpose::Task, "alice", &claims()),
        k.seal_v2(Purpose::Task, "alice", &claims()),
        k.seal_v1(Purpose::Task, "alice", &claims()),
    ] {
        let opened = k.open_task("alice", &h).expect("opens");
        assert_eq!(opened, claims());
        assert_eq!(opened.trace, None);
        assert_eq!(
            k.open::<TaskClaims>(Purpose::Task, "alice", &h),
            Some(claims())
        );
    }
    // A legacy key that opens a traced plaintext reads it too (nothing seals
    // one that way; the reader does not depend on the generation).
    let v1 = k.seal_v1(Purpose::Task, "alice", &traced());
    assert_eq!(k.open_task("alice", &v1), Some(traced()));
}

#[test]
fn a_start_span_is_only_what_the_key_sealed() {
    let k = ring(&[("k1", S1)]);
    let other = ring(&[("k1", S2)]);
    // Another keyring's handle, naming a span of its choosing, does not open.
    let foreign = other.seal(Purpose::Task, "alice", &traced());
    assert_eq!(k.open_task("alice", &foreign), None);
    // Every single-character change of the sealed text is refused whole: no
    // bit of the reference can be chosen from outside.
    let h = k.seal(Purpose::Task, "alice", &traced());
    let body = h.rfind('.').unwrap() + 1;
    for at in body..h.len() {
        let mut bytes = h.clone().into_bytes();
        bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(bytes).unwrap();
        assert_eq!(k.open_task("alice", &altered), None, "changed at {at}");
    }
    // Zero ids are not a reference.
    assert!(TraceRef::new([0; 16], [1; 8], 1).is_none());
    assert!(TraceRef::new([1; 16], [0; 8], 1).is_none());
}

#[test]
fn a_start_span_costs_a_handle_55_characters() {
    let k = ring(&[("k1", S1)]);
    // A typical task: an exec run of a tool `deploy_service`.
    let typical = TaskClaims {
        dialect: Dialect::TasksExtension,
        tool: "deploy_service".into(),
        native: "tg-ztsaifu27zqlc6rlzso3qsjemf".into(),
        created_ms: 1_765_000_000_000,
        ttl_ms: Some(86_400_000),
        trace: None,
    };
    let before = k.seal(Purpose::Task, "alice", &typical).len();
    let after = k
        .seal(
            Purpose::Task,
            "alice",
            &TaskClaims {
                trace: Some(start_span()),
                ..typical
            },
        )
        .len();
    // 41 bytes more plaintext (`,"s":"` + 34 + `"`), in base64url.
    assert!((54..=55).contains(&(after - before)), "{before} -> {after}");
    println!("task handle: {before} characters without a start span, {after} with one");
}

/// Run names (and so SEP-1391 operation look-ups and idempotent starts) are
/// what they were: pinned to a value computed apart from this code (HKDF and
/// HMAC-SHA256 of the documented inputs, in Python's standard library).
#[test]
fn run_names_do_not_change() {
    let k = ring(&[("k1", S1)]);
    assert_eq!(
        k.derive_run_name("alice", "deploy", "op-1"),
        "tg-ztsaifu27zqlc6rlzso3qsjemf"
    );
}

/// A release before the start span reads a handle that names one: its claims
/// had no `s` member and serde ignores members it does not know, so during a
/// rolling upgrade an old replica still opens a new replica's handles.
#[test]
fn a_release_before_the_start_span_reads_a_handle_that_names_one() {
    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Before {
        d: Dialect,
        t: String,
        r: String,
        c: u64,
        l: Option<u64>,
    }
    let text = serde_json::to_vec(&traced()).unwrap();
    assert_eq!(
        from_json::<Before>(&text),
        Some(Before {
            d: Dialect::TasksExtension,
            t: "t".into(),
            r: claims().native,
            c: 1_000,
            l: Some(5_000),
        })
    );
}
