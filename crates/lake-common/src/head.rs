//! [`SidecarDocument`]: what a sidecar file holds, by format version.
//!
//! - Format 1 ([`crate::delta`]): the entries inline, canonical JSON. Written for versions whose
//!   references are computed in memory (delete, compaction, restore, repair).
//! - Format 2 ([`LogHead`]): a small JSON head naming a reference log ([`crate::reflog`]) that
//!   a streamed write (append, overwrite) produced while Lance consumed its rows. The head is
//!   written create-only after the Lance commit, like a format-1 sidecar; the log it names was
//!   completed before the commit.
//!
//! Both are decoded fail-closed; an unknown format version is refused, never skipped.

use crate::delta::{
    check_position, parent_of, DeltaKind, ObjectReferenceDelta, Position, DELTA_FORMAT_VERSION, LOG_FORMAT_VERSION,
};
use crate::error::DecodeError;
use serde::{Deserialize, Serialize};

/// A format-2 sidecar: the version's kind and the reference log that carries its additions.
///
/// A [`DeltaKind::Delta`] head only adds (an append); a [`DeltaKind::Snapshot`] head is the full
/// reference set of its version (an overwrite).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogHead {
    /// Always [`LOG_FORMAT_VERSION`].
    pub format_version: u64,
    /// Table name.
    pub table: String,
    /// The Lance version this head journals.
    pub version: u64,
    /// `version - 1`, or none for version 1 (a snapshot may also have none).
    pub parent: Option<u64>,
    /// Delta (additions only) or snapshot.
    pub kind: DeltaKind,
    /// The reference log.
    pub log: LogRef,
}

/// Where a reference log is and what it must contain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogRef {
    /// The write's ULID (26 Crockford base-32 characters); the log is
    /// `<journal folder>/logs/<write_id>.arrows` and carries the same id in its schema.
    pub write_id: String,
    /// Rows (references) in the log.
    pub references: u64,
    /// The log's length in bytes.
    pub bytes: u64,
}

impl LogHead {
    /// A head for `version` of `table` whose additions (`Delta`) or full set (`Snapshot`) are in
    /// the log `log`.
    pub fn new(table: impl Into<String>, version: u64, kind: DeltaKind, log: LogRef) -> Self {
        Self { format_version: LOG_FORMAT_VERSION, table: table.into(), version, parent: parent_of(version), kind, log }
    }

    /// The canonical bytes (compact JSON, fields in declaration order).
    pub fn encode(&self) -> Vec<u8> {
        // Serialising plain strings and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The delta this head describes once its log is decoded into `counts`.
    pub fn into_delta(self, counts: crate::ReferenceCounts) -> ObjectReferenceDelta {
        let mut delta = ObjectReferenceDelta::additions(self.table, self.version, counts);
        if self.kind == DeltaKind::Snapshot {
            delta.kind = DeltaKind::Snapshot;
            delta.parent = self.parent;
        }
        delta
    }

    fn validate(self, table: &str, expected_version: u64) -> Result<Self, DecodeError> {
        check_position(
            Position { table: &self.table, version: self.version, parent: self.parent, kind: self.kind },
            table,
            expected_version,
        )?;
        let id = &self.log.write_id;
        if id.len() != 26 || !id.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_uppercase()) {
            return Err(DecodeError::CorruptJson(format!("`log.write_id` {id:?} is not a ULID")));
        }
        Ok(self)
    }
}

/// A decoded sidecar file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SidecarDocument {
    /// Format 1: the delta itself.
    Inline(ObjectReferenceDelta),
    /// Format 2: a head whose log must be read next.
    Log(LogHead),
}

#[derive(Deserialize)]
struct FormatProbe {
    format_version: Option<serde_json::Value>,
}

impl SidecarDocument {
    /// Decodes and validates the sidecar file of `table` at `expected_version`.
    ///
    /// # Errors
    /// Every [`DecodeError`] of format 1 ([`ObjectReferenceDelta::decode`]); for format 2, corrupt
    /// JSON, version, table and parent mismatches; [`DecodeError::UnknownFormatVersion`] for any
    /// other format.
    pub fn decode(bytes: &[u8], table: &str, expected_version: u64) -> Result<Self, DecodeError> {
        let probe: FormatProbe = serde_json::from_slice(bytes).map_err(|e| DecodeError::CorruptJson(e.to_string()))?;
        match probe.format_version.as_ref().and_then(serde_json::Value::as_u64) {
            Some(DELTA_FORMAT_VERSION) => {
                ObjectReferenceDelta::decode(bytes, table, expected_version).map(Self::Inline)
            }
            Some(LOG_FORMAT_VERSION) => {
                let head: LogHead =
                    serde_json::from_slice(bytes).map_err(|e| DecodeError::CorruptJson(e.to_string()))?;
                head.validate(table, expected_version).map(Self::Log)
            }
            Some(found) => Err(DecodeError::UnknownFormatVersion { found, supported: LOG_FORMAT_VERSION }),
            None => Err(DecodeError::CorruptJson("missing or non-integer `format_version`".into())),
        }
    }
}
