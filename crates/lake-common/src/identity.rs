//! [`ObjectIdentity`]: what a row references.

use serde::{Deserialize, Serialize};
use std::fmt;

/// One immutable object as a row references it: the normalised `uri`, the SHA-256 of its bytes
/// and its size in bytes.
///
/// For a managed object `uri` is the key relative to the lake root (for example
/// `objects/01J9Z3.../episode.mcap`); for an external object it is the absolute URI, which GC
/// never touches. Credentials and signed URLs never enter an identity (see [`crate::uri`]).
///
/// Identities order by `(uri, sha256, size)`: the canonical order of the reference journal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectIdentity {
    /// Normalised location: a key relative to the lake root, or an absolute external URI.
    pub uri: String,
    /// SHA-256 of the object's bytes, serialised as 64 lowercase hex characters.
    #[serde(with = "sha_hex")]
    pub sha256: [u8; 32],
    /// Size of the object in bytes.
    pub size: u64,
}

impl ObjectIdentity {
    /// Builds an identity from its parts; `uri` must already be normalised.
    pub fn new(uri: impl Into<String>, sha256: [u8; 32], size: u64) -> Self {
        Self { uri: uri.into(), sha256, size }
    }

    /// The SHA-256 as 64 lowercase hex characters.
    pub fn sha256_hex(&self) -> String {
        hex::encode(self.sha256)
    }
}

impl fmt::Display for ObjectIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (sha256 {}, {} bytes)", self.uri, self.sha256_hex(), self.size)
    }
}

pub(crate) mod sha_hex {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(sha: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(sha))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).ok_or_else(|| D::Error::custom("sha256 must be 64 lowercase hex characters"))
    }

    /// Parses exactly 64 lowercase hex characters.
    pub(crate) fn parse(text: &str) -> Option<[u8; 32]> {
        if text.len() != 64 || text.bytes().any(|b| b.is_ascii_uppercase()) {
            return None;
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(text, &mut out).ok()?;
        Some(out)
    }
}
