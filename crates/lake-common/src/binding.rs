//! [`VersionBinding`]: what a journal entry records of the Lance version it describes, so that
//! an entry is never trusted by its version number alone.
//!
//! A Lance version is a manifest file (`_versions/<n>.manifest`, or the V2 name) written by one
//! transaction whose UUID the manifest names (`transaction_file` = `{read_version}-{uuid}.txn`,
//! Lance 14 `lance::io::commit::write_transaction_file`; or an inline transaction section). The
//! binding records that UUID and the manifest file as the store shows it (size and e-tag, from
//! a HEAD after the commit; a version listing gives the same fields without reading the file).
//!
//! Checking an entry against the version the table holds now (`lake_lance::binding`):
//! 1. the listed manifest has the recorded size and e-tag: the same file, bound (costs nothing
//!    beyond the version listing a plan reads anyway);
//! 2. otherwise the manifest is read and its transaction UUID compared: equal, bound (a backup
//!    restored byte for byte keeps the UUID, while a local copy gets a new e-tag); different, or
//!    a version whose manifest names no transaction, the entry describes another version.
//!
//! Lance's documentation of `ManifestLocation::e_tag` warns that an e-tag is not a content
//! checksum and may change when identical bytes are rewritten: here it only decides the fast
//! path, never acceptance on its own against a different UUID.

use crate::error::DecodeError;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The longest transaction UUID or e-tag accepted when decoding, in bytes (a UUID is 36; an S3
/// e-tag at most 34 with its quotes and the part count of a multipart upload).
pub const MAX_TOKEN_BYTES: usize = 256;

/// A manifest file as a store lists it: its size in bytes and its e-tag (an opaque token of the
/// store: on S3 the quoted MD5 of a single-part upload, on a local disk object_store's
/// `<inode>-<mtime>-<size>` in hex), when the store gives one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ManifestIdentity {
    /// Size in bytes.
    pub size: u64,
    /// The store's e-tag.
    pub e_tag: Option<String>,
}

impl fmt::Display for ManifestIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.size, self.e_tag.as_deref().unwrap_or(""))
    }
}

/// What a journal entry records of its Lance version (see the module documentation). Encoded
/// in a sidecar as `"lance":{"transaction":...,"manifest_size":...,"manifest_e_tag":...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionBinding {
    /// The UUID of the Lance transaction that made the version, as its manifest names it;
    /// `None` when the manifest names no transaction (a client that disables transaction
    /// files): such an entry is bound by its manifest's e-tag only.
    pub transaction: Option<String>,
    /// The manifest file's size in bytes when the entry was written.
    pub manifest_size: u64,
    /// The manifest file's e-tag when the entry was written, when the store gives one.
    pub manifest_e_tag: Option<String>,
}

/// What checking an entry's binding against the version's listed manifest found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindingCheck {
    /// The listed manifest is the file the entry was written for (same size and e-tag).
    Bound,
    /// A different file: its transaction UUID must be read and compared with this one (`None`:
    /// the entry recorded no transaction, so no file but the recorded one can match).
    ReadTransaction(Option<String>),
}

impl VersionBinding {
    /// The binding of a version made by `transaction` whose manifest is `manifest`.
    pub fn new(transaction: Option<String>, manifest: &ManifestIdentity) -> Self {
        Self { transaction, manifest_size: manifest.size, manifest_e_tag: manifest.e_tag.clone() }
    }

    /// The manifest identity recorded.
    pub fn manifest(&self) -> ManifestIdentity {
        ManifestIdentity { size: self.manifest_size, e_tag: self.manifest_e_tag.clone() }
    }

    /// The fast path: whether `listed` (the version's manifest as a listing shows it now) is the
    /// recorded file. A store without e-tags always needs the transaction read.
    pub fn check_listed(&self, listed: &ManifestIdentity) -> BindingCheck {
        if self.manifest_e_tag.is_some() && self.manifest() == *listed {
            BindingCheck::Bound
        } else {
            BindingCheck::ReadTransaction(self.transaction.clone())
        }
    }

    /// Checks the decoded fields: each token non-empty, at most [`MAX_TOKEN_BYTES`], printable
    /// ASCII (the canonical encoding escapes nothing but `"` and `\`).
    pub(crate) fn validate(&self) -> Result<(), DecodeError> {
        for (field, token) in [("transaction", &self.transaction), ("manifest_e_tag", &self.manifest_e_tag)] {
            if let Some(t) = token {
                if t.is_empty() || t.len() > MAX_TOKEN_BYTES || !t.bytes().all(|b| b.is_ascii_graphic()) {
                    return Err(DecodeError::CorruptJson(format!(
                        "`lance.{field}` {t:?} is not 1 to {MAX_TOKEN_BYTES} printable ASCII characters"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The format rule for the `lance` field: required (and valid) in format
/// [`crate::SIDECAR_FORMAT_VERSION`], absent in [`crate::UNBOUND_FORMAT_VERSION`].
pub(crate) fn check_presence(format_version: u64, lance: Option<&VersionBinding>) -> Result<(), DecodeError> {
    match (format_version == crate::SIDECAR_FORMAT_VERSION, lance) {
        (true, Some(binding)) => binding.validate(),
        (true, None) => Err(DecodeError::CorruptJson(format!(
            "format {format_version} requires the `lance` binding of its version"
        ))),
        (false, None) => Ok(()),
        (false, Some(_)) => {
            Err(DecodeError::CorruptJson(format!("format {format_version} has no `lance` field (it binds nothing)")))
        }
    }
}
