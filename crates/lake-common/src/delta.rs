//! [`ObjectReferenceDelta`]: the reference journal entry ("sidecar") of one table version.
//!
//! Stored as `tables/<name>.lance/_lake/object_refs/<version>.json`. The specification of the
//! format (fields, canonical order, counts, kinds, validation) is `docs/journal-format.md`.

use crate::binding::{check_presence, VersionBinding};
use crate::counts::ReferenceCounts;
use crate::error::DecodeError;
use crate::identity::{sha_hex, ObjectIdentity};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The format version of every sidecar this build writes: a document sealed by the SHA-256 of
/// its own canonical bytes (`sha256`), carrying its entries inline or naming a reference log
/// ([`crate::reflog`]) that it binds by the log's SHA-256 (`log.sha256`), and bound to the Lance
/// version it describes (`lance`, a [`VersionBinding`]).
pub const SIDECAR_FORMAT_VERSION: u64 = 4;

/// The sealed format of earlier builds: format 4 without `lance`. Decoded (its entries are
/// sealed), with no binding: a retained version whose entry has none is a lineage problem
/// until `lake refs bind` checks it against a scan and binds it (docs/journal-format.md).
pub const UNBOUND_FORMAT_VERSION: u64 = 3;

/// Formats written by earlier builds, which bound nothing by a digest (1: entries inline;
/// 2: a head naming a reference log by length and row count only). Refused
/// ([`DecodeError::Unsealed`]): an edited entry or log of these formats cannot be detected.
pub const UNSEALED_FORMAT_VERSIONS: [u64; 2] = [1, 2];

/// Appends the seal to the canonical bytes `body` of a sidecar (a compact JSON object without
/// its `sha256`): `{...,"sha256":"<SHA-256 of body, lowercase hex>"}`. Every sealed lake document
/// (sidecars, heads, write intents, GC states) is written this way.
pub fn seal(mut body: Vec<u8>) -> Vec<u8> {
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body));
    if body.last() == Some(&b'}') {
        body.pop();
        body.extend_from_slice(format!(",\"sha256\":\"{digest}\"}}").as_bytes());
    }
    body
}

/// Checks that `recorded` is the seal of the canonical bytes `body` re-encoded from a decoded
/// document (a byte edited anywhere in the entries changes what they decode to, hence `body`).
///
/// # Errors
/// [`DecodeError::SealMismatch`] naming both digests.
pub fn check_seal(body: &[u8], recorded: &str) -> Result<(), DecodeError> {
    let actual = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(body));
    if actual == recorded {
        Ok(())
    } else {
        Err(DecodeError::SealMismatch { recorded: recorded.to_string(), actual })
    }
}

/// The format version a sidecar document declares ([`SIDECAR_FORMAT_VERSION`] or
/// [`UNBOUND_FORMAT_VERSION`]), refusing a missing one and the unsealed formats of earlier builds.
pub(crate) fn probe_format(bytes: &[u8]) -> Result<u64, DecodeError> {
    #[derive(Deserialize)]
    struct FormatProbe {
        format_version: Option<serde_json::Value>,
    }
    let probe: FormatProbe = serde_json::from_slice(bytes).map_err(|e| DecodeError::CorruptJson(e.to_string()))?;
    match probe.format_version.as_ref().and_then(serde_json::Value::as_u64) {
        Some(found @ (SIDECAR_FORMAT_VERSION | UNBOUND_FORMAT_VERSION)) => Ok(found),
        Some(found) if UNSEALED_FORMAT_VERSIONS.contains(&found) => Err(DecodeError::Unsealed { found }),
        Some(found) => Err(DecodeError::UnknownFormatVersion { found, supported: SIDECAR_FORMAT_VERSION }),
        None => Err(DecodeError::CorruptJson("missing or non-integer `format_version`".into())),
    }
}

/// Which list of an entry a reference belongs to: `added` (a delta's additions, a snapshot's
/// full set) or `removed` (a delta's removals). What a streamed entry's reader hands over with
/// each reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryList {
    /// The entry's `added` list (or its log).
    Added,
    /// The entry's `removed` list (or its log of removals).
    Removed,
}

/// Whether a sidecar is relative to its parent or the full reference set of its version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeltaKind {
    /// `added` and `removed` are net count changes relative to version `parent`.
    Delta,
    /// `added` is the complete reference set (with counts) of this version; `removed` is empty.
    Snapshot,
}

/// One identity and a reference count (>= 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceCount {
    /// The referenced object.
    pub identity: ObjectIdentity,
    /// Number of references (rows or list elements), at least 1.
    pub count: u64,
}

/// The references one Lance version added and removed, with counts, in canonical form.
///
/// Invariants (checked by [`ObjectReferenceDelta::decode`], guaranteed by the constructors):
/// `version >= 1`; `parent == Some(version - 1)` for a [`DeltaKind::Delta`], and `None` or
/// `Some(version - 1)` for a [`DeltaKind::Snapshot`]; `added` and `removed` sorted strictly
/// ascending by identity with counts >= 1; no identity in both; a snapshot has no removals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectReferenceDelta {
    /// Table name.
    pub table: String,
    /// The Lance version this sidecar describes.
    pub version: u64,
    /// The version it is relative to: `version - 1` in Lance's linear history, or none.
    pub parent: Option<u64>,
    /// Delta or snapshot.
    pub kind: DeltaKind,
    /// References added (delta) or the full reference set (snapshot).
    pub added: Vec<ReferenceCount>,
    /// References removed (delta only).
    pub removed: Vec<ReferenceCount>,
    /// The Lance version this entry was computed from: set by the writer after the commit
    /// ([`ObjectReferenceDelta::bound`]); `None` for an entry of format
    /// [`UNBOUND_FORMAT_VERSION`] (earlier builds), which is encoded in that format.
    pub binding: Option<VersionBinding>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEntry {
    uri: String,
    #[serde(with = "sha_hex")]
    sha256: [u8; 32],
    size: u64,
    count: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    format_version: u64,
    table: String,
    version: u64,
    parent: Option<u64>,
    kind: DeltaKind,
    #[serde(default)]
    lance: Option<VersionBinding>,
    added: Vec<WireEntry>,
    removed: Vec<WireEntry>,
    sha256: String,
}

/// The wire form borrowed from a delta: encoding copies nothing but the output bytes (a delta of a
/// million entries is serialised straight from its entries). Field order is the format's.
#[derive(Serialize)]
struct WireRef<'a> {
    format_version: u64,
    table: &'a str,
    version: u64,
    parent: Option<u64>,
    kind: DeltaKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    lance: Option<&'a VersionBinding>,
    added: EntriesRef<'a>,
    removed: EntriesRef<'a>,
}

struct EntriesRef<'a>(&'a [ReferenceCount]);

impl Serialize for EntriesRef<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        struct Entry<'a>(&'a ReferenceCount);
        impl Serialize for Entry<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(4))?;
                m.serialize_entry("uri", &self.0.identity.uri)?;
                m.serialize_entry("sha256", &hex::encode(self.0.identity.sha256))?;
                m.serialize_entry("size", &self.0.identity.size)?;
                m.serialize_entry("count", &self.0.count)?;
                m.end()
            }
        }
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for e in self.0 {
            seq.serialize_element(&Entry(e))?;
        }
        seq.end()
    }
}

impl ObjectReferenceDelta {
    /// A delta relative to `version - 1` (or to nothing, for version 1) from the references a
    /// version added and removed. Identities present in both are netted, so the result is
    /// canonical whatever order or duplication the inputs had.
    pub fn delta(table: impl Into<String>, version: u64, added: &ReferenceCounts, removed: &ReferenceCounts) -> Self {
        let mut net: BTreeMap<&ObjectIdentity, i128> = BTreeMap::new();
        for (identity, n) in added.iter() {
            *net.entry(identity).or_insert(0) += i128::from(n);
        }
        for (identity, n) in removed.iter() {
            *net.entry(identity).or_insert(0) -= i128::from(n);
        }
        let mut plus = Vec::new();
        let mut minus = Vec::new();
        for (identity, n) in net {
            // |n| <= u64::MAX because each side is a u64 count.
            let magnitude = u64::try_from(n.unsigned_abs()).unwrap_or(u64::MAX);
            if n > 0 {
                plus.push(ReferenceCount { identity: identity.clone(), count: magnitude });
            } else if n < 0 {
                minus.push(ReferenceCount { identity: identity.clone(), count: magnitude });
            }
        }
        Self {
            table: table.into(),
            version,
            parent: parent_of(version),
            kind: DeltaKind::Delta,
            added: plus,
            removed: minus,
            binding: None,
        }
    }

    /// A delta that only adds `added` (an append), consuming the counts without copying them.
    pub fn additions(table: impl Into<String>, version: u64, added: ReferenceCounts) -> Self {
        Self {
            table: table.into(),
            version,
            parent: parent_of(version),
            kind: DeltaKind::Delta,
            added: added.into_entries(),
            removed: Vec::new(),
            binding: None,
        }
    }

    /// An empty delta: a content-preserving version (compaction, index or config change).
    pub fn empty(table: impl Into<String>, version: u64) -> Self {
        Self::delta(table, version, &ReferenceCounts::new(), &ReferenceCounts::new())
    }

    /// A snapshot: the full reference set of `version` (overwrite, restore, repair).
    pub fn snapshot(table: impl Into<String>, version: u64, references: &ReferenceCounts) -> Self {
        Self {
            table: table.into(),
            version,
            parent: parent_of(version),
            kind: DeltaKind::Snapshot,
            added: references.to_entries(),
            removed: Vec::new(),
            binding: None,
        }
    }

    /// This entry bound to the Lance version it was computed from (encoded in format
    /// [`SIDECAR_FORMAT_VERSION`]).
    pub fn bound(mut self, binding: VersionBinding) -> Self {
        self.binding = Some(binding);
        self
    }

    /// The canonical bytes: compact JSON with fields in a fixed order and entries in canonical
    /// order, sealed by the SHA-256 of those bytes (`sha256`, the last field). Equal deltas
    /// encode to equal bytes. A bound entry is format [`SIDECAR_FORMAT_VERSION`]; an unbound
    /// one is format [`UNBOUND_FORMAT_VERSION`] (what earlier builds wrote), which planning
    /// refuses for a retained version.
    pub fn encode(&self) -> Vec<u8> {
        seal(self.encode_body())
    }

    /// The canonical bytes without the seal.
    fn encode_body(&self) -> Vec<u8> {
        let wire = WireRef {
            format_version: format_of(self.binding.as_ref()),
            table: &self.table,
            version: self.version,
            parent: self.parent,
            kind: self.kind,
            lance: self.binding.as_ref(),
            added: EntriesRef(&self.added),
            removed: EntriesRef(&self.removed),
        };
        // Serialising plain strings and integers cannot fail.
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    /// Decodes and validates a sidecar read for `table` at `expected_version` (the version in its
    /// file name). Fails closed on every deviation from canonical form; see [`DecodeError`].
    pub fn decode(bytes: &[u8], table: &str, expected_version: u64) -> Result<Self, DecodeError> {
        let format = probe_format(bytes)?;
        let wire: Wire = serde_json::from_slice(bytes).map_err(|e| DecodeError::CorruptJson(e.to_string()))?;
        // The probe above already checked it; the typed parse must agree.
        if wire.format_version != format {
            return Err(DecodeError::UnknownFormatVersion {
                found: wire.format_version,
                supported: SIDECAR_FORMAT_VERSION,
            });
        }
        check_presence(format, wire.lance.as_ref())?;
        check_position(
            Position { table: &wire.table, version: wire.version, parent: wire.parent, kind: wire.kind },
            table,
            expected_version,
        )?;
        if wire.kind == DeltaKind::Snapshot && !wire.removed.is_empty() {
            return Err(DecodeError::SnapshotWithRemovals { version: wire.version });
        }
        let added = validate_list("added", wire.added)?;
        let removed = validate_list("removed", wire.removed)?;
        // Both lists are sorted: a merge walk finds any identity present in both.
        let (mut i, mut j) = (0, 0);
        while i < added.len() && j < removed.len() {
            match added[i].identity.cmp(&removed[j].identity) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    return Err(DecodeError::AddedAndRemoved { uri: added[i].identity.uri.clone() })
                }
            }
        }
        let delta = Self {
            table: wire.table,
            version: wire.version,
            parent: wire.parent,
            kind: wire.kind,
            added,
            removed,
            binding: wire.lance,
        };
        check_seal(&delta.encode_body(), &wire.sha256)?;
        Ok(delta)
    }
}

/// Where a sidecar document says it belongs.
pub(crate) struct Position<'a> {
    pub table: &'a str,
    pub version: u64,
    pub parent: Option<u64>,
    pub kind: DeltaKind,
}

/// The rules every sidecar format shares: version >= 1 and equal to the file's, the table read
/// for, and the parent `version - 1` (or none, for a snapshot).
pub(crate) fn check_position(found: Position<'_>, table: &str, expected_version: u64) -> Result<(), DecodeError> {
    if found.version == 0 {
        return Err(DecodeError::ZeroVersion);
    }
    if found.version != expected_version {
        return Err(DecodeError::VersionMismatch { expected: expected_version, found: found.version });
    }
    if found.table != table {
        return Err(DecodeError::TableMismatch { expected: table.into(), found: found.table.into() });
    }
    let expected_parent = parent_of(found.version);
    let parent_ok = match found.kind {
        DeltaKind::Delta => found.parent == expected_parent,
        DeltaKind::Snapshot => found.parent.is_none() || found.parent == expected_parent,
    };
    if !parent_ok {
        return Err(DecodeError::BadParent {
            version: found.version,
            parent: found.parent,
            expected: match expected_parent {
                Some(p) => format!("{p} (version - 1)"),
                None => "none (version 1 has no parent)".into(),
            },
        });
    }
    Ok(())
}

/// The format an entry is encoded in: bound, or the unbound format of earlier builds.
pub(crate) fn format_of(binding: Option<&VersionBinding>) -> u64 {
    match binding {
        Some(_) => SIDECAR_FORMAT_VERSION,
        None => UNBOUND_FORMAT_VERSION,
    }
}

pub(crate) fn parent_of(version: u64) -> Option<u64> {
    version.checked_sub(1).filter(|p| *p >= 1)
}

fn validate_list(list: &'static str, entries: Vec<WireEntry>) -> Result<Vec<ReferenceCount>, DecodeError> {
    let mut out: Vec<ReferenceCount> = Vec::with_capacity(entries.len());
    for (index, e) in entries.into_iter().enumerate() {
        if e.count == 0 {
            return Err(DecodeError::ZeroCount { list, uri: e.uri });
        }
        let identity = ObjectIdentity::new(e.uri, e.sha256, e.size);
        if let Some(prev) = out.last() {
            if prev.identity >= identity {
                return Err(DecodeError::NotCanonical { list, index, uri: identity.uri });
            }
        }
        out.push(ReferenceCount { identity, count: e.count });
    }
    Ok(out)
}
