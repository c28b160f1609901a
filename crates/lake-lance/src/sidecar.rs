//! Sidecar storage: `tables/<name>.lance/_lake/object_refs/<version>.json`.
//!
//! Lance's cleanup lists only its own subtrees (`_versions`, `data`, `_deletions`, ...), so the
//! journal survives version cleanup (a test proves it); sidecars of cleaned-up versions are what
//! lets replay compute the counts of later versions.

use crate::error::LanceEngineError;
use lake_common::{decode_reference_log, DecodeError, LogHead, ObjectReferenceDelta, SidecarDocument};
use lake_engine::journal::Sidecars;
use lake_engine::LineageProblem;
use lake_objects::layout::{journal_prefix, reference_log_key, sidecar_key};
use lake_objects::store::{CreateOutcome, LakeStore};

/// Writes `delta` create-only. Writing the same bytes again is a no-op (idempotent retry);
/// different bytes are a conflict.
///
/// # Errors
/// [`LanceEngineError::SidecarConflict`], [`LanceEngineError::SidecarWrite`].
pub async fn write(store: &LakeStore, delta: &ObjectReferenceDelta) -> Result<(), LanceEngineError> {
    create(store, &delta.table, delta.version, delta.encode()).await
}

/// Writes the format-2 head of a streamed write create-only (its log is already complete), with
/// the same idempotence as [`write`].
///
/// # Errors
/// As [`write`].
pub async fn write_head(store: &LakeStore, head: &LogHead) -> Result<(), LanceEngineError> {
    create(store, &head.table, head.version, head.encode()).await
}

async fn create(store: &LakeStore, table: &str, version: u64, bytes: Vec<u8>) -> Result<(), LanceEngineError> {
    // Bytes: the create-only write and the comparison share one buffer (a sidecar can be large).
    let bytes = bytes::Bytes::from(bytes);
    let key = sidecar_key(table, version);
    match store.put_create(&key, bytes.clone()).await {
        Ok(CreateOutcome::Created) => Ok(()),
        Ok(CreateOutcome::Exists(existing)) if existing == bytes => Ok(()),
        Ok(CreateOutcome::Exists(_)) => Err(LanceEngineError::SidecarConflict { table: table.into(), version }),
        Err(e) => Err(LanceEngineError::SidecarWrite { table: table.into(), version, message: e.to_string() }),
    }
}

/// Decodes the sidecar file of `version`, reading the reference log a format-2 head names.
/// Every defect is a [`DecodeError`] (the version's lineage is then incomplete); only a failed
/// read is an `Err` of the outer result.
///
/// # Errors
/// Storage errors.
pub async fn decode(
    store: &LakeStore,
    table: &str,
    version: u64,
    bytes: &[u8],
) -> Result<Result<ObjectReferenceDelta, DecodeError>, LanceEngineError> {
    let head = match SidecarDocument::decode(bytes, table, version) {
        Ok(SidecarDocument::Inline(delta)) => return Ok(Ok(delta)),
        Ok(SidecarDocument::Log(head)) => head,
        Err(e) => return Ok(Err(e)),
    };
    let key = reference_log_key(table, &head.log.write_id);
    let Some(log) = store.get(&key).await? else {
        return Ok(Err(DecodeError::LogMissing { key }));
    };
    if log.len() as u64 != head.log.bytes {
        return Ok(Err(DecodeError::LogSize { what: "bytes", expected: head.log.bytes, found: log.len() as u64 }));
    }
    let (counts, references) = match decode_reference_log(&log, table, &head.log.write_id) {
        Ok(decoded) => decoded,
        Err(e) => return Ok(Err(e)),
    };
    if references != head.log.references {
        return Ok(Err(DecodeError::LogSize { what: "references", expected: head.log.references, found: references }));
    }
    Ok(Ok(head.into_delta(counts)))
}

/// Reads and decodes the sidecar of `version` (and the reference log it names); `None` when the
/// version has no sidecar.
///
/// # Errors
/// Storage errors.
pub async fn read(
    store: &LakeStore,
    table: &str,
    version: u64,
) -> Result<Option<Result<ObjectReferenceDelta, DecodeError>>, LanceEngineError> {
    match store.get(&sidecar_key(table, version)).await? {
        Some(bytes) => Ok(Some(decode(store, table, version, &bytes).await?)),
        None => Ok(None),
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
    let mut sidecars = Sidecars::new();
    let problems = visit_from(store, table, from, |version, decoded| {
        sidecars.insert(version, decoded);
        Ok(())
    })
    .await?;
    Ok((sidecars, problems))
}

/// Sidecars (and their reference logs) read concurrently by [`visit_from`]: the decoded entries
/// of at most this many versions are held at once.
pub const READ_AHEAD: usize = 8;

/// Reads the sidecars of versions `from` and later in ascending version order and hands each
/// decoded entry (or its decode error) to `visit`, holding at most [`READ_AHEAD`] of them: the
/// journal is never materialised. Returns the file names that are not `<version>.json`, as
/// [`LineageProblem::VersionMismatch`].
///
/// # Errors
/// Storage errors (a failed read is never an absent sidecar), and whatever `visit` returns.
pub async fn visit_from(
    store: &LakeStore,
    table: &str,
    from: u64,
    mut visit: impl FnMut(u64, Result<ObjectReferenceDelta, DecodeError>) -> Result<(), LanceEngineError>,
) -> Result<Vec<LineageProblem>, LanceEngineError> {
    use futures::StreamExt;
    let prefix = journal_prefix(table);
    let mut problems = Vec::new();
    let mut versions = Vec::new();
    for (key, _) in store.list_all(&prefix).await? {
        let file = key.rsplit('/').next().unwrap_or(&key).to_string();
        let version = file
            .strip_suffix(".json")
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) && !v.starts_with('0'))
            .and_then(|v| v.parse::<u64>().ok());
        match version {
            Some(version) if version >= from => versions.push((version, key)),
            Some(_) => {}
            None => problems.push(LineageProblem::VersionMismatch {
                table: table.into(),
                file: key.clone(),
                reason: "file name is not `<version>.json`".into(),
            }),
        }
    }
    versions.sort_unstable();
    let read = |(version, key): (u64, String)| async move {
        let bytes = store
            .get(&key)
            .await?
            .ok_or_else(|| lake_objects::ObjectsError::storage(&key, "sidecar vanished while reading"))?;
        Ok::<_, LanceEngineError>((version, decode(store, table, version, &bytes).await?))
    };
    let mut decoded = futures::stream::iter(versions).map(read).buffered(READ_AHEAD);
    while let Some(entry) = decoded.next().await {
        let (version, entry) = entry?;
        visit(version, entry)?;
    }
    Ok(problems)
}
