//! Sidecar storage: `tables/<name>.lance/_lake/object_refs/<version>.json`.
//!
//! Lance's cleanup lists only its own subtrees (`_versions`, `data`, `_deletions`, ...), so the
//! journal survives version cleanup (a test proves it); sidecars of cleaned-up versions are what
//! lets replay compute the counts of later versions.

use crate::error::LanceEngineError;
use lake_common::ObjectReferenceDelta;
use lake_engine::journal::Sidecars;
use lake_engine::LineageProblem;
use lake_objects::layout::{journal_prefix, sidecar_key};
use lake_objects::store::{CreateOutcome, LakeStore};

/// Writes `delta` create-only. Writing the same bytes again is a no-op (idempotent retry);
/// different bytes are a conflict.
///
/// # Errors
/// [`LanceEngineError::SidecarConflict`], [`LanceEngineError::SidecarWrite`].
pub async fn write(store: &LakeStore, delta: &ObjectReferenceDelta) -> Result<(), LanceEngineError> {
    // Bytes: the create-only write and the comparison share one buffer (a sidecar can be large).
    let bytes = bytes::Bytes::from(delta.encode());
    let key = sidecar_key(&delta.table, delta.version);
    match store.put_create(&key, bytes.clone()).await {
        Ok(CreateOutcome::Created) => Ok(()),
        Ok(CreateOutcome::Exists(existing)) if existing == bytes => Ok(()),
        Ok(CreateOutcome::Exists(_)) => {
            Err(LanceEngineError::SidecarConflict { table: delta.table.clone(), version: delta.version })
        }
        Err(e) => Err(LanceEngineError::SidecarWrite {
            table: delta.table.clone(),
            version: delta.version,
            message: e.to_string(),
        }),
    }
}

/// Reads and decodes every sidecar of `table`. File names that are not `<version>.json` are
/// returned as [`LineageProblem::VersionMismatch`].
///
/// # Errors
/// Storage errors (a failed read is never an absent sidecar).
pub async fn read_all(store: &LakeStore, table: &str) -> Result<(Sidecars, Vec<LineageProblem>), LanceEngineError> {
    read_from(store, table, 1).await
}

/// As [`read_all`] for the sidecars of versions `from` and later only (one listing; a GET per
/// sidecar read).
///
/// # Errors
/// Storage errors.
pub async fn read_from(
    store: &LakeStore,
    table: &str,
    from: u64,
) -> Result<(Sidecars, Vec<LineageProblem>), LanceEngineError> {
    let prefix = journal_prefix(table);
    let mut sidecars = Sidecars::new();
    let mut problems = Vec::new();
    for (key, _) in store.list_all(&prefix).await? {
        let file = key.rsplit('/').next().unwrap_or(&key).to_string();
        let version = file
            .strip_suffix(".json")
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) && !v.starts_with('0'))
            .and_then(|v| v.parse::<u64>().ok());
        let Some(version) = version else {
            problems.push(LineageProblem::VersionMismatch {
                table: table.into(),
                file: key.clone(),
                reason: "file name is not `<version>.json`".into(),
            });
            continue;
        };
        if version < from {
            continue;
        }
        let bytes = store
            .get(&key)
            .await?
            .ok_or_else(|| lake_objects::ObjectsError::storage(&key, "sidecar vanished while reading"))?;
        sidecars.insert(version, ObjectReferenceDelta::decode(&bytes, table, version));
    }
    Ok((sidecars, problems))
}
