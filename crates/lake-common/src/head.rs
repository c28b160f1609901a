//! [`SidecarDocument`]: what a sidecar file holds, by format version.
//!
//! Format 4 (bound to its Lance version, [`crate::binding`]) or 3 (the same without the
//! binding, written by earlier builds), in two shapes, each sealed by the SHA-256 of its own
//! canonical bytes (`sha256`):
//! - inline ([`crate::delta`]): the entries, canonical JSON. Written only for small entries
//!   (`lake_lance::sidecar::INLINE_MAX_IDENTITIES` identities at most);
//! - a head ([`LogHead`]): a small JSON document naming reference logs ([`crate::reflog`]): the
//!   row log a streamed write (append, overwrite) produced while Lance consumed its rows, or the
//!   sorted logs of a larger entry (its additions or snapshot, and a delta's removals), each
//!   bound by its length, row count and SHA-256 and carrying a block index for reads of one key
//!   range. The head is written create-only after the Lance commit, its logs before it.
//!
//! Both are decoded fail-closed; an unknown format version is refused, never skipped, and so are
//! the unsealed formats 1 and 2 of earlier builds ([`crate::DecodeError::Unsealed`]).

use crate::binding::{check_presence, VersionBinding};
use crate::delta::{
    check_position, check_seal, format_of, parent_of, probe_format, seal, DeltaKind, ObjectReferenceDelta, Position,
};
use crate::error::DecodeError;
use serde::{Deserialize, Serialize};

/// A head: the version's kind and the reference logs that carry its entry.
///
/// A [`DeltaKind::Delta`] head's `log` holds its additions and `removed` its removals (none for
/// an append); a [`DeltaKind::Snapshot`] head's `log` is the full reference set of its version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogHead {
    /// [`crate::SIDECAR_FORMAT_VERSION`] when bound (`lance` present),
    /// [`crate::UNBOUND_FORMAT_VERSION`] otherwise (set by [`LogHead::new`] and
    /// [`LogHead::bound`]).
    pub format_version: u64,
    /// Table name.
    pub table: String,
    /// The Lance version this head journals.
    pub version: u64,
    /// `version - 1`, or none for version 1 (a snapshot may also have none).
    pub parent: Option<u64>,
    /// Delta (additions only) or snapshot.
    pub kind: DeltaKind,
    /// The Lance version this head was written for ([`LogHead::bound`]); `None` in the unbound
    /// format of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lance: Option<VersionBinding>,
    /// The reference log: the references the version added (`Delta`) or its full set
    /// (`Snapshot`).
    pub log: LogRef,
    /// The references a `Delta` removed, when it removed any (a log of its own); never on a
    /// snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<LogRef>,
}

/// Where a reference log is and what it must contain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogRef {
    /// The write's ULID (26 Crockford base-32 characters); the log is
    /// `<journal folder>/logs/<write_id>.arrows` and carries the same id in its schema.
    pub write_id: String,
    /// Rows in the log: references of a row log, identities of a sorted log.
    pub references: u64,
    /// The log's length in bytes.
    pub bytes: u64,
    /// SHA-256 of the log's bytes, 64 lowercase hex characters.
    pub sha256: String,
    /// True for a sorted log (one row per identity, strictly ascending, with a `count`
    /// column); absent (false) for a row log ([`crate::reflog`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sorted: bool,
    /// The log's block index (absent in logs of earlier builds: those are read whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<crate::reflog::LogIndex>,
}

/// The wire form of a head: the head and its seal.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SealedHead {
    format_version: u64,
    table: String,
    version: u64,
    parent: Option<u64>,
    kind: DeltaKind,
    #[serde(default)]
    lance: Option<VersionBinding>,
    log: LogRef,
    #[serde(default)]
    removed: Option<LogRef>,
    sha256: String,
}

impl LogHead {
    /// A head for `version` of `table` whose additions (`Delta`) or full set (`Snapshot`) are in
    /// the log `log`.
    pub fn new(table: impl Into<String>, version: u64, kind: DeltaKind, log: LogRef) -> Self {
        Self {
            format_version: format_of(None),
            table: table.into(),
            version,
            parent: parent_of(version),
            kind,
            lance: None,
            log,
            removed: None,
        }
    }

    /// This head with a log of the references its `Delta` removed.
    pub fn with_removed(mut self, removed: LogRef) -> Self {
        self.removed = Some(removed);
        self
    }

    /// The logs this head names: its log, then the log of removals if any.
    pub fn logs(&self) -> impl Iterator<Item = &LogRef> {
        std::iter::once(&self.log).chain(self.removed.as_ref())
    }

    /// This head bound to the Lance version it journals (format
    /// [`crate::SIDECAR_FORMAT_VERSION`]).
    pub fn bound(mut self, binding: VersionBinding) -> Self {
        self.format_version = format_of(Some(&binding));
        self.lance = Some(binding);
        self
    }

    /// The canonical bytes (compact JSON, fields in declaration order), sealed by their SHA-256.
    pub fn encode(&self) -> Vec<u8> {
        seal(self.encode_body())
    }

    fn encode_body(&self) -> Vec<u8> {
        // Serialising plain strings and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    fn validate(self, table: &str, expected_version: u64) -> Result<Self, DecodeError> {
        check_presence(self.format_version, self.lance.as_ref())?;
        check_position(
            Position { table: &self.table, version: self.version, parent: self.parent, kind: self.kind },
            table,
            expected_version,
        )?;
        if self.removed.is_some() && self.kind == DeltaKind::Snapshot {
            return Err(DecodeError::SnapshotWithRemovals { version: self.version });
        }
        for log in self.logs() {
            check_log_ref(log)?;
        }
        if self.removed.as_ref().is_some_and(|r| r.write_id == self.log.write_id) {
            return Err(DecodeError::CorruptJson("`removed.write_id` names the same log as `log.write_id`".into()));
        }
        Ok(self)
    }
}

/// Checks the fields of one log a head names: a ULID write id and a 64-hex digest.
impl LogRef {
    /// The reference to a finished log of `write_id` with these totals.
    pub fn of(write_id: impl Into<String>, totals: &crate::LogTotals, sorted: bool) -> Self {
        Self {
            write_id: write_id.into(),
            references: totals.references,
            bytes: totals.bytes,
            sha256: totals.sha256.clone(),
            sorted,
            index: totals.index.clone(),
        }
    }

    /// Checks a log read in full against this reference: its length, then its SHA-256, then its
    /// row count (so an edit that keeps a valid stream is a digest mismatch).
    ///
    /// # Errors
    /// [`DecodeError::LogSize`] for another length or row count,
    /// [`DecodeError::LogDigestMismatch`] for other bytes of the same length.
    pub fn check(&self, read: &crate::LogTotals) -> Result<(), DecodeError> {
        if read.bytes != self.bytes {
            return Err(DecodeError::LogSize { what: "bytes", expected: self.bytes, found: read.bytes });
        }
        if read.sha256 != self.sha256 {
            return Err(DecodeError::LogDigestMismatch { recorded: self.sha256.clone(), actual: read.sha256.clone() });
        }
        if read.references != self.references {
            return Err(DecodeError::LogSize { what: "references", expected: self.references, found: read.references });
        }
        Ok(())
    }
}

fn check_log_ref(log: &LogRef) -> Result<(), DecodeError> {
    if let Some(index) = &log.index {
        let bytes: u64 = index.blocks.iter().map(|b| b.bytes).sum();
        let rows: u64 = index.blocks.iter().map(|b| b.rows).sum();
        let first = index.blocks.first().map_or(0, |b| b.bytes);
        let hex64 = |d: &str| d.len() == 64 && d.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if bytes != log.bytes || rows != log.references || index.schema_bytes > first {
            return Err(DecodeError::CorruptJson(format!(
                "`log.index` does not describe its log ({bytes} bytes and {rows} rows in blocks, the log has {} and {})",
                log.bytes, log.references
            )));
        }
        if let Some(block) = index.blocks.iter().find(|b| !hex64(&b.sha256) || b.bytes == 0) {
            return Err(DecodeError::CorruptJson(format!(
                "`log.index` has a block with no bytes or a bad digest {:?}",
                block.sha256
            )));
        }
    }
    let id = &log.write_id;
    if id.len() != 26 || !id.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_uppercase()) {
        return Err(DecodeError::CorruptJson(format!("`log.write_id` {id:?} is not a ULID")));
    }
    let digest = &log.sha256;
    if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(DecodeError::CorruptJson(format!("`log.sha256` {digest:?} is not 64 lowercase hex characters")));
    }
    Ok(())
}

/// A decoded sidecar file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SidecarDocument {
    /// An inline entry: the delta itself.
    Inline(ObjectReferenceDelta),
    /// A head whose logs are read next.
    Log(LogHead),
}

impl SidecarDocument {
    /// Decodes and validates the sidecar file of `table` at `expected_version`.
    ///
    /// # Errors
    /// Every [`DecodeError`] of format 1 ([`ObjectReferenceDelta::decode`]); for format 2, corrupt
    /// JSON, version, table and parent mismatches; [`DecodeError::UnknownFormatVersion`] for any
    /// other format.
    pub fn decode(bytes: &[u8], table: &str, expected_version: u64) -> Result<Self, DecodeError> {
        let format = probe_format(bytes)?;
        #[derive(Deserialize)]
        struct ShapeProbe {
            log: Option<serde_json::Value>,
        }
        let shape: ShapeProbe = serde_json::from_slice(bytes).map_err(|e| DecodeError::CorruptJson(e.to_string()))?;
        if shape.log.is_none() {
            return ObjectReferenceDelta::decode(bytes, table, expected_version).map(Self::Inline);
        }
        let wire: SealedHead = serde_json::from_slice(bytes).map_err(|e| DecodeError::CorruptJson(e.to_string()))?;
        if wire.format_version != format {
            return Err(DecodeError::CorruptJson(format!(
                "`format_version` {} is not the {format} first read",
                wire.format_version
            )));
        }
        let head = LogHead {
            format_version: wire.format_version,
            table: wire.table,
            version: wire.version,
            parent: wire.parent,
            kind: wire.kind,
            lance: wire.lance,
            log: wire.log,
            removed: wire.removed,
        };
        let head = head.validate(table, expected_version)?;
        check_seal(&head.encode_body(), &wire.sha256)?;
        Ok(Self::Log(head))
    }
}
