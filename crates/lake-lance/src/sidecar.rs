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
use std::collections::BTreeMap;

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
        Err(e) => Err(LanceEngineError::SidecarWrite { table: table.into(), version, source: e }),
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
    // Its length and SHA-256 first: a log edited in place (one byte of a key) still decodes.
    if let Err(e) = head.check_log(&log) {
        return Ok(Err(e));
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

/// The journal folder of a table as one listing saw it: every sidecar file by version with its
/// store metadata, and the files whose names are not `<version>.json`.
#[derive(Debug, Default)]
pub struct JournalListing {
    /// Sidecar files by version: key and metadata.
    pub files: BTreeMap<u64, (String, object_store::ObjectMeta)>,
    /// File names that are not `<version>.json`, as [`LineageProblem::VersionMismatch`].
    pub problems: Vec<LineageProblem>,
    /// Versions without a sidecar whose Lance transaction is content-preserving, by version:
    /// the operation's name (`crate::foreign`). Read as empty deltas.
    pub implied: BTreeMap<u64, &'static str>,
}

impl JournalListing {
    /// The identity of every sidecar file (size, ETag and last-modified from the store), and
    /// `implied:<operation>` for an implied entry, for a [`lake_engine::LineageStamp`].
    pub fn identities(&self) -> BTreeMap<u64, String> {
        let files = self.files.iter().map(|(v, (_, m))| {
            let identity =
                format!("{}:{}:{}", m.size, m.e_tag.as_deref().unwrap_or(""), m.last_modified.timestamp_micros());
            (*v, identity)
        });
        let implied = self.implied.iter().map(|(v, operation)| (*v, format!("implied:{operation}")));
        files.chain(implied).collect()
    }
}

/// Lists the journal folder of `table` (one listing).
///
/// # Errors
/// Storage errors.
pub async fn list(store: &LakeStore, table: &str) -> Result<JournalListing, LanceEngineError> {
    let prefix = journal_prefix(table);
    let mut listing = JournalListing::default();
    for (key, meta) in store.list_all(&prefix).await? {
        let file = key.rsplit('/').next().unwrap_or(&key).to_string();
        let version = file
            .strip_suffix(".json")
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) && !v.starts_with('0'))
            .and_then(|v| v.parse::<u64>().ok());
        match version {
            Some(version) => {
                listing.files.insert(version, (key, meta));
            }
            None => listing.problems.push(LineageProblem::VersionMismatch {
                table: table.into(),
                file: key.clone(),
                reason: "file name is not `<version>.json`".into(),
            }),
        }
    }
    Ok(listing)
}

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
    visit: impl FnMut(u64, Result<ObjectReferenceDelta, DecodeError>) -> Result<(), LanceEngineError>,
) -> Result<Vec<LineageProblem>, LanceEngineError> {
    let listing = list(store, table).await?;
    visit_listed(store, table, &listing, from..=u64::MAX, visit).await?;
    Ok(listing.problems)
}

/// As [`visit_from`] for the entries of `listing` whose versions are in `versions`: its sidecars,
/// and its implied entries as empty deltas, merged in version order.
///
/// # Errors
/// Storage errors, and whatever `visit` returns.
pub async fn visit_listed(
    store: &LakeStore,
    table: &str,
    listing: &JournalListing,
    versions: std::ops::RangeInclusive<u64>,
    mut visit: impl FnMut(u64, Result<ObjectReferenceDelta, DecodeError>) -> Result<(), LanceEngineError>,
) -> Result<(), LanceEngineError> {
    use futures::StreamExt;
    let mut wanted: Vec<(u64, String)> = Vec::new();
    for (v, (key, _)) in listing.files.range(versions.clone()) {
        wanted.push((*v, key.clone()));
    }
    let implied: Vec<u64> = listing.implied.range(versions).map(|(v, _)| *v).collect();
    let mut implied = implied.into_iter().peekable();
    let read = |(version, key): (u64, String)| async move {
        let bytes = store
            .get(&key)
            .await?
            .ok_or_else(|| lake_objects::ObjectsError::storage(&key, "sidecar vanished while reading"))?;
        Ok::<_, LanceEngineError>((version, decode(store, table, version, &bytes).await?))
    };
    let mut decoded = futures::stream::iter(wanted).map(read).buffered(READ_AHEAD);
    while let Some(entry) = decoded.next().await {
        let (version, entry) = entry?;
        while let Some(v) = implied.next_if(|v| *v < version) {
            visit(v, Ok(ObjectReferenceDelta::empty(table, v)))?;
        }
        visit(version, entry)?;
    }
    for v in implied {
        visit(v, Ok(ObjectReferenceDelta::empty(table, v)))?;
    }
    Ok(())
}
