//! The reference checkpoint: the journal's counts at one version, so a replay starts there
//! instead of at version 1.
//!
//! Stored at `tables/<name>.lance/_lake/refs_checkpoint.json` as
//! `{"format_version": 1, "journal_sha256": hex, "digest": hex, "snapshot": <sidecar JSON>}`:
//! `snapshot` is a canonical snapshot entry (the counts at version C, validated by the sidecar
//! decoder), `journal_sha256` binds it to the exact bytes of version C's sidecar, and `digest` is
//! the SHA-256 of `journal_sha256` and the snapshot bytes.
//!
//! The snapshot carries C's binding to its Lance version, copied from C's sidecar
//! ([`lake_common::VersionBinding`]); when C is retained, lineage checks it as it checks the
//! entry it stands in for.
//!
//! It is used only when it is valid in every respect: format, digest, table, version C at or
//! below the oldest retained version (counts at C cannot say what an older retained version
//! referenced) and at or below the latest, and the sidecar of C unchanged. Anything else is
//! ignored with a warning and replay starts from the journal's own base: a checkpoint is never
//! trusted blindly.

use crate::error::LanceEngineError;
use lake_common::{ObjectReferenceDelta, ReferenceCounts};
use lake_objects::layout::{dataset_key, sidecar_key};
use lake_objects::store::LakeStore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The checkpoint format this build writes and reads.
pub const REFS_CHECKPOINT_FORMAT_VERSION: u64 = 1;

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
/// `oldest_retained` and latest version `latest`; returns it as a snapshot entry at its version.
///
/// # Errors
/// Storage errors only; an invalid checkpoint is `Ok(None)` (logged).
pub async fn load_valid(
    store: &LakeStore,
    table: &str,
    oldest_retained: u64,
    latest: u64,
) -> Result<Option<ObjectReferenceDelta>, LanceEngineError> {
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
    if doc.format_version != REFS_CHECKPOINT_FORMAT_VERSION {
        return ignore(format!("format version {} is not supported", doc.format_version));
    }
    let snapshot_bytes = serde_json::to_vec(&doc.snapshot).unwrap_or_default();
    if digest(&doc.journal_sha256, &snapshot_bytes) != doc.digest {
        return ignore("digest mismatch (edited or corrupt)".into());
    }
    let version = doc.snapshot.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
    let snapshot = match ObjectReferenceDelta::decode(&snapshot_bytes, table, version) {
        Ok(s) if s.kind == lake_common::DeltaKind::Snapshot => s,
        Ok(_) => return ignore("not a snapshot".into()),
        Err(e) => return ignore(e.to_string()),
    };
    if version > oldest_retained || version > latest {
        return ignore(format!("it is at version {version}, after the oldest retained version {oldest_retained}"));
    }
    match store.get(&sidecar_key(table, version)).await? {
        Some(sidecar) if hex::encode(Sha256::digest(&sidecar)) == doc.journal_sha256 => Ok(Some(snapshot)),
        Some(_) => ignore(format!("the sidecar of version {version} changed since the checkpoint was written")),
        None => ignore(format!("the sidecar of version {version} is missing")),
    }
}

/// Writes the checkpoint of `table` at `version` with `counts`, bound to that version's sidecar.
///
/// # Errors
/// Storage errors; a missing sidecar at `version`.
pub async fn write(
    store: &LakeStore,
    table: &str,
    version: u64,
    counts: &ReferenceCounts,
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
    let mut snapshot = ObjectReferenceDelta::snapshot(table, version, counts);
    snapshot.binding = binding;
    let snapshot_bytes = snapshot.encode();
    let snapshot: serde_json::Value =
        serde_json::from_slice(&snapshot_bytes).map_err(|e| LanceEngineError::InvalidInput(e.to_string()))?;
    // Re-encoding a parsed canonical document with serde_json keeps its bytes (fields in
    // order, compact); the digest is computed over exactly what load() will see.
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
