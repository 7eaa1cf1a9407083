//! The reference to the span that started a run, as a task handle seals it:
//! the W3C trace id, span id and trace flags of taskgate's own start span, and
//! nothing else (no `tracestate`, no text of the caller's).

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The bytes of a [`TraceRef`]: 16 of trace id, 8 of span id, 1 of flags.
const BYTES: usize = 25;
/// The length of its text: base64url of [`BYTES`] bytes, unpadded.
pub(super) const TEXT_LEN: usize = 34;

/// The span that started a run: W3C trace id, span id and trace flags. Sealed
/// in a task handle (member `s` of its claims) as the unpadded base64url text
/// of those 25 bytes, so a handle grows by 41 bytes of plaintext when it
/// carries one. Both ids are never all zero (W3C's invalid ids).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceRef {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
}

impl TraceRef {
    /// A reference from its parts; `None` when either id is all zero.
    #[must_use]
    pub fn new(trace_id: [u8; 16], span_id: [u8; 8], flags: u8) -> Option<Self> {
        (trace_id != [0; 16] && span_id != [0; 8]).then_some(Self {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The trace id.
    #[must_use]
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The span id.
    #[must_use]
    pub fn span_id(&self) -> [u8; 8] {
        self.span_id
    }

    /// The W3C trace flags (bit 0: sampled).
    #[must_use]
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// The reference from its sealed text: exactly [`TEXT_LEN`] characters of
    /// unpadded base64url whose ids are not all zero; `None` for anything else.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() != TEXT_LEN {
            return None;
        }
        let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
        let bytes: [u8; BYTES] = bytes.try_into().ok()?;
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        trace_id.copy_from_slice(&bytes[..16]);
        span_id.copy_from_slice(&bytes[16..24]);
        Self::new(trace_id, span_id, bytes[24])
    }

    /// Its sealed text (what [`Self::parse`] reads).
    #[must_use]
    pub fn text(&self) -> String {
        let mut bytes = [0u8; BYTES];
        bytes[..16].copy_from_slice(&self.trace_id);
        bytes[16..24].copy_from_slice(&self.span_id);
        bytes[24] = self.flags;
        URL_SAFE_NO_PAD.encode(bytes)
    }
}

impl fmt::Debug for TraceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TraceRef(00-{}-{}-{:02x})",
            hex::encode(self.trace_id),
            hex::encode(self.span_id),
            self.flags
        )
    }
}

impl Serialize for TraceRef {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text())
    }
}

impl<'de> Deserialize<'de> for TraceRef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).ok_or_else(|| serde::de::Error::custom("not a sealed trace reference"))
    }
}
