//! The reference checkpoint: the journal's counts at one version, so a replay starts there
//! instead of at version 1.
//!
//! Stored at `tables/<name>.lance/_lake/refs_checkpoint.json` as
//! `{"format_version": 2, "journal_sha256": hex, "digest": hex, "snapshot": <sidecar JSON>}`:
//! `snapshot` is a sealed snapshot entry of version C in either sidecar shape (this build writes
//! a head naming a sorted reference log, streamed on write and on read like any large entry;
//! format 1, written by earlier builds, holds an inline snapshot and is still read),
//! `journal_sha256` binds it to the exact bytes of version C's sidecar, and `digest` is the
//! SHA-256 of `journal_sha256` and the snapshot bytes.
//!
//! The snapshot carries C's binding to its Lance version, copied from C's sidecar
//! ([`lake_common::VersionBinding`]); when C is retained, lineage checks it as it checks the
//! entry it stands in for.
//!
//! It is used only when it is valid in every respect: format, digest, table, version C at or
//! below the oldest retained version (counts at C cannot say what an older retained version
//! referenced) and at or below the latest, the sidecar of C unchanged, and its log present with
//! the length the head records. Anything else is ignored with a warning and replay starts from
//! the journal's own base: a checkpoint is never trusted blindly. A log edited in place (same
//! length) is found while it streams: C's entry is then a lineage problem (GC plans nothing)
//! until the checkpoint is removed or rewritten by `lake cleanup`.

use crate::error::LanceEngineError;
use crate::log_upload::{CountsWriter, WrittenCounts};
use lake_common::LogHead;
use lake_store::layout::{dataset_key, reference_log_key, sidecar_key};
use lake_store::store::LakeStore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The checkpoint format this build writes; format 1 (an inline snapshot) is still read.
pub const REFS_CHECKPOINT_FORMAT_VERSION: u64 = 2;

/// A valid checkpoint: the snapshot entry of version C that stands in for C's sidecar.
#[derive(Debug)]
pub struct Checkpoint {
    version: u64,
    document: Vec<u8>,
}

impl Checkpoint {
    /// Version C.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Streams the snapshot into `sink` as C's entry (its reference log read in bounded
    /// memory).
    ///
    /// # Errors
    /// Storage errors and the sink's; a defect of the log is C's entry's defect.
    pub(crate) async fn stream_into(
        self,
        store: &LakeStore,
        table: &str,
        sink: &mut dyn crate::sidecar::EntrySink,
    ) -> Result<(), LanceEngineError> {
        crate::sidecar::stream_entry(store, table, self.version, &self.document, sink).await
    }
}

/// Key of a table's reference checkpoint.
pub fn checkpoint_key(table: &str) -> String {
    format!("{}/_lake/refs_checkpoint.json", dataset_key(table))
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    format_version: u64,
    journal_sha256: String,
    digest: String,
    snapshot: serde_json::Value,
}

fn digest(journal_sha256: &str, snapshot: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(journal_sha256.as_bytes());
    h.update(b"\n");
    h.update(snapshot);
    hex::encode(h.finalize())
}

/// Loads the checkpoint of `table` if it is valid for a replay whose oldest retained version is
/// `oldest_retained` and latest version `latest`.
///
/// # Errors
/// Storage errors only; an invalid checkpoint is `Ok(None)` (logged).
pub async fn load_valid(
    store: &LakeStore,
    table: &str,
    oldest_retained: u64,
    latest: u64,
) -> Result<Option<Checkpoint>, LanceEngineError> {
    let key = checkpoint_key(table);
    let Some(bytes) = store.get(&key).await? else {
        return Ok(None);
    };
    let ignore = |why: String| {
        tracing::warn!(table, checkpoint = %key, "reference checkpoint ignored, replaying from the journal's base: {why}");
        Ok(None)
    };
    let doc: Document = match serde_json::from_slice(&bytes) {
        Ok(d) => d,
        Err(e) => return ignore(format!("not a valid document: {e}")),
    };
    if !(1..=REFS_CHECKPOINT_FORMAT_VERSION).contains(&doc.format_version) {
        return ignore(format!("format version {} is not supported", doc.format_version));
    }
    let snapshot_bytes = serde_json::to_vec(&doc.snapshot).unwrap_or_default();
    if digest(&doc.journal_sha256, &snapshot_bytes) != doc.digest {
        return ignore("digest mismatch (edited or corrupt)".into());
    }
    let version = doc.snapshot.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
    match lake_common::SidecarDocument::decode(&snapshot_bytes, table, version) {
        Ok(lake_common::SidecarDocument::Inline(s)) if s.kind == lake_common::DeltaKind::Snapshot => {}
        Ok(lake_common::SidecarDocument::Log(head))
            if head.kind == lake_common::DeltaKind::Snapshot && doc.format_version >= 2 =>
        {
            let log_key = reference_log_key(table, &head.log.write_id);
            match store.head(&log_key).await? {
                Some(meta) if meta.size == head.log.bytes => {}
                Some(meta) => {
                    return ignore(format!("its log {log_key} has {} bytes, not {}", meta.size, head.log.bytes))
                }
                None => return ignore(format!("its log {log_key} is missing")),
            }
        }
        Ok(_) => return ignore("not a snapshot".into()),
        Err(e) => return ignore(e.to_string()),
    }
    if version > oldest_retained || version > latest {
        return ignore(format!("it is at version {version}, after the oldest retained version {oldest_retained}"));
    }
    match store.get(&sidecar_key(table, version)).await? {
        Some(sidecar) if hex::encode(Sha256::digest(&sidecar)) == doc.journal_sha256 => {
            Ok(Some(Checkpoint { version, document: snapshot_bytes }))
        }
        Some(_) => ignore(format!("the sidecar of version {version} changed since the checkpoint was written")),
        None => ignore(format!("the sidecar of version {version} is missing")),
    }
}

/// Writes the checkpoint of `table` at `version` from `counts`, the journal's counts at that
/// version identity by identity (ascending, as [`lake_engine::SpilledJournal::retained_counts`]
/// reads them out for `[version]`), streamed into a sorted reference log; bound to that
/// version's sidecar.
///
/// # Errors
/// Storage errors; a missing sidecar at `version`; a journal that stops replaying.
pub(crate) async fn write(
    store: &LakeStore,
    table: &str,
    version: u64,
    mut counts: lake_engine::spilled_replay::RetainedCounts,
) -> Result<(), LanceEngineError> {
    let sidecar = store.get(&sidecar_key(table, version)).await?.ok_or_else(|| {
        LanceEngineError::InvalidInput(format!("no sidecar for `{table}` version {version} to bind a checkpoint to"))
    })?;
    let journal_sha256 = hex::encode(Sha256::digest(&sidecar));
    // The checkpoint stands in for C's entry: it carries C's binding to its Lance version (and
    // is bound to C's sidecar bytes, which record the same), checked like the entry's.
    let binding = match lake_common::SidecarDocument::decode(&sidecar, table, version) {
        Ok(lake_common::SidecarDocument::Inline(entry)) => entry.binding,
        Ok(lake_common::SidecarDocument::Log(head)) => head.lance,
        Err(e) => {
            return Err(LanceEngineError::InvalidInput(format!(
                "the sidecar of `{table}` version {version} cannot be decoded ({e}); no checkpoint is bound to it"
            )))
        }
    };
    let mut writer = CountsWriter::new(store, table, version);
    let mut at = Vec::new();
    loop {
        let next = match counts.next_counts(&mut at) {
            Ok(next) => next,
            Err(e) => {
                writer.abort().await;
                return Err(LanceEngineError::InvalidInput(format!(
                    "table `{table}`: the journal does not replay to version {version}: {e}"
                )));
            }
        };
        let Some(identity) = next else { break };
        if let Some((_, n)) = at.iter().find(|(v, _)| *v == version) {
            writer.push(identity, *n).await?;
        }
    }
    // Small: an inline snapshot; else a head naming the sorted log.
    let head_bytes = match writer.finish().await? {
        WrittenCounts::Inline(small) => {
            let mut snapshot = lake_common::ObjectReferenceDelta::snapshot(table, version, &small);
            snapshot.binding = binding;
            snapshot.encode()
        }
        WrittenCounts::Log(log) => {
            let mut head = LogHead::new(table, version, lake_common::DeltaKind::Snapshot, log);
            if let Some(binding) = binding {
                head = head.bound(binding);
            }
            head.encode()
        }
    };
    let snapshot: serde_json::Value =
        serde_json::from_slice(&head_bytes).map_err(|e| LanceEngineError::InvalidInput(e.to_string()))?;
    // Re-encoding a parsed canonical document with serde_json keeps its bytes (fields in
    // order, compact); the digest is computed over exactly what load_valid() will see.
    let reencoded = serde_json::to_vec(&snapshot).unwrap_or_default();
    let doc = Document {
        format_version: REFS_CHECKPOINT_FORMAT_VERSION,
        digest: digest(&journal_sha256, &reencoded),
        journal_sha256,
        snapshot,
    };
    let bytes = serde_json::to_vec(&doc).map_err(|e| LanceEngineError::InvalidInput(e.to_string()))?;
    store.put(&checkpoint_key(table), bytes).await?;
    Ok(())
}
