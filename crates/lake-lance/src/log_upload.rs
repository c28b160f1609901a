//! Reference logs written after a commit, streamed to the store in parts: sorted logs
//! ([`SortedLogWriter`]) of entries computed in memory, of a version scanned by repair (merged
//! from sorted runs), and of the reference checkpoint (replayed from the journal); and row logs
//! ([`RowLogWriter`]) of the rows an upsert replaced, written as Lance reads them.
//!
//! A log is a multipart upload under `_lake/object_ref_logs/<write_id>.arrows` with a fresh
//! ULID, in parts of [`crate::journaling::LOG_PART_BYTES`] on S3 (its minimum part size) and
//! [`crate::journaling::LOCAL_LOG_PART_BYTES`] on a local folder, so a writer holds one part and
//! one batch whatever the entry's size. A log whose head is never written (a failure, a crash)
//! is named by nothing and is collected by GC once older than the cutoff
//! (`crate::journal_garbage`); a writer that fails deletes it at once.

use crate::error::LanceEngineError;
use crate::journaling::{OldestKey, LOCAL_LOG_PART_BYTES, LOG_PART_BYTES};
use arrow_array::RecordBatch;
use lake_common::{
    LakeRootUri, LogRef, LogTotals, ObjectIdentity, ReferenceColumns, ReferenceLogEncoder, SortedLogEncoder,
};
use lake_store::layout::reference_log_key;
use lake_store::store::LakeStore;
use lake_store::StoreError;
use object_store::{MultipartUpload, ObjectStoreExt, PutPayload};

/// One log's multipart upload.
struct Upload {
    table: String,
    version: u64,
    write_id: String,
    key: String,
    upload: Box<dyn MultipartUpload>,
    part_bytes: usize,
}

impl Upload {
    async fn start(store: &LakeStore, table: &str, version: u64) -> Result<Self, LanceEngineError> {
        let write_id = ulid::Ulid::new().to_string();
        let key = reference_log_key(table, &write_id);
        let upload = store
            .object_store()
            .put_multipart(&store.path(&key))
            .await
            .map_err(|e| write_error(table, version, &key, e))?;
        let part_bytes = if store.s3().is_some() { LOG_PART_BYTES } else { LOCAL_LOG_PART_BYTES };
        Ok(Self { table: table.into(), version, write_id, key, upload, part_bytes })
    }

    async fn put(&mut self, bytes: Vec<u8>) -> Result<(), LanceEngineError> {
        if let Err(e) = self.upload.put_part(PutPayload::from(bytes)).await {
            let _ = self.upload.abort().await;
            return Err(write_error(&self.table, self.version, &self.key, e));
        }
        Ok(())
    }

    async fn complete(mut self, rest: Vec<u8>, totals: &LogTotals, sorted: bool) -> Result<LogRef, LanceEngineError> {
        self.put(rest).await?;
        if let Err(e) = self.upload.complete().await {
            let _ = self.upload.abort().await;
            return Err(write_error(&self.table, self.version, &self.key, e));
        }
        Ok(LogRef::of(self.write_id, totals, sorted))
    }
}

fn write_error(table: &str, version: u64, key: &str, e: impl std::fmt::Display) -> LanceEngineError {
    LanceEngineError::SidecarWrite {
        table: table.into(),
        version,
        source: StoreError::storage(key, format!("reference log: {e}")),
    }
}

fn encode_error(table: &str, version: u64, key: &str, e: arrow_schema::ArrowError) -> LanceEngineError {
    write_error(table, version, key, e)
}

/// Deletes the finished log `log` of `table` whose head was not written (best effort: a log no
/// head names is never read, and GC collects it past the cutoff).
pub(crate) async fn discard(store: &LakeStore, table: &str, log: &LogRef) {
    crate::journaling::discard_log(store, &reference_log_key(table, &log.write_id)).await;
}

/// Writes a sorted log (one row per identity, strictly ascending, with counts) as its
/// identities are pushed.
pub(crate) struct SortedLogWriter {
    upload: Upload,
    encoder: SortedLogEncoder,
}

impl SortedLogWriter {
    /// Starts the sorted log of an entry of `table` at `version`.
    ///
    /// # Errors
    /// [`LanceEngineError::SidecarWrite`] when the upload cannot start.
    pub(crate) async fn start(store: &LakeStore, table: &str, version: u64) -> Result<Self, LanceEngineError> {
        let upload = Upload::start(store, table, version).await?;
        let encoder = SortedLogEncoder::new(table, &upload.write_id)
            .map_err(|e| encode_error(table, version, &upload.key, e))?
            .with_buffer_capacity(upload.part_bytes + 1024 * 1024);
        Ok(Self { upload, encoder })
    }

    /// Appends `identity` with `count` references (strictly ascending; a zero count is skipped),
    /// uploading a part when one is full.
    ///
    /// # Errors
    /// [`LanceEngineError::SidecarWrite`] for an identity out of order or a failed upload.
    pub(crate) async fn push(&mut self, identity: &ObjectIdentity, count: u64) -> Result<(), LanceEngineError> {
        let up = &self.upload;
        self.encoder.push(identity, count).map_err(|e| encode_error(&up.table, up.version, &up.key, e))?;
        if self.encoder.buffered_bytes() >= self.upload.part_bytes {
            let part = self.encoder.take_bytes();
            self.upload.put(part).await?;
        }
        Ok(())
    }

    /// Finishes the log and returns what a head records of it.
    ///
    /// # Errors
    /// [`LanceEngineError::SidecarWrite`].
    pub(crate) async fn finish(self) -> Result<LogRef, LanceEngineError> {
        let up = &self.upload;
        let (rest, totals) = self.encoder.finish().map_err(|e| encode_error(&up.table, up.version, &up.key, e))?;
        self.upload.complete(rest, &totals, true).await
    }

    /// Abandons the log (its upload is aborted; nothing names it).
    pub(crate) async fn abort(mut self) {
        let _ = self.upload.upload.abort().await;
    }
}

/// Writes a row log (one row per reference, in the order given) from batches of a table's
/// rows, normalising each reference as a scan does: the references of the rows an upsert
/// replaced (`crate::version_diff::logged_entry`).
pub(crate) struct RowLogWriter {
    upload: Upload,
    encoder: ReferenceLogEncoder,
    root: LakeRootUri,
    columns: ReferenceColumns,
    references: u64,
}

impl RowLogWriter {
    /// Starts a row log of an entry of `table` at `version`, for rows whose reference columns
    /// are `columns` (as stored: read back, not new).
    ///
    /// # Errors
    /// [`LanceEngineError::SidecarWrite`] when the upload cannot start.
    pub(crate) async fn start(
        store: &LakeStore,
        table: &str,
        version: u64,
        columns: &ReferenceColumns,
    ) -> Result<Self, LanceEngineError> {
        let upload = Upload::start(store, table, version).await?;
        let encoder = ReferenceLogEncoder::new(table, &upload.write_id)
            .map_err(|e| encode_error(table, version, &upload.key, e))?
            .with_buffer_capacity(upload.part_bytes + 1024 * 1024);
        Ok(Self { upload, encoder, root: store.root().clone(), columns: columns.clone(), references: 0 })
    }

    /// Appends every non-null reference of `batch` (whole arrays when they are canonical keys,
    /// else one by one, normalised against the lake root), uploading a part when one is full.
    /// Returns the batch's rows.
    ///
    /// # Errors
    /// [`LanceEngineError::Unreadable`] for a reference that cannot be normalised;
    /// [`LanceEngineError::SidecarWrite`] for a failed encode or upload.
    pub(crate) async fn push_batch(&mut self, batch: &RecordBatch) -> Result<u64, LanceEngineError> {
        self.push(batch, None).await.map(|(rows, _)| rows)
    }

    /// As [`RowLogWriter::push_batch`], also offering every reference to `oldest` in the same
    /// pass (whole arrays when they are canonical keys). Returns the batch's rows and the
    /// references it held.
    ///
    /// # Errors
    /// As [`RowLogWriter::push_batch`].
    pub(crate) async fn push_batch_finding_oldest(
        &mut self,
        batch: &RecordBatch,
        oldest: &mut OldestKey,
    ) -> Result<(u64, u64), LanceEngineError> {
        self.push(batch, Some(oldest)).await
    }

    async fn push(
        &mut self,
        batch: &RecordBatch,
        mut oldest: Option<&mut OldestKey>,
    ) -> Result<(u64, u64), LanceEngineError> {
        let up = &self.upload;
        let encode = |e| encode_error(&up.table, up.version, &up.key, e);
        let before = self.references;
        // Arrays of other types than `canonical_arrays` promises cannot happen; were they to,
        // the references are read one by one, as any other batch's.
        let canonical = self.columns.canonical_arrays(batch).filter(|columns| {
            oldest.as_deref_mut().is_none_or(|oldest| columns.iter().all(|arrays| oldest.offer_arrays(arrays)))
        });
        match canonical {
            Some(columns) => {
                for arrays in &columns {
                    self.encoder.push_arrays(arrays).map_err(encode)?;
                    self.references += arrays[0].len() as u64;
                }
            }
            None => {
                let (encoder, references) = (&mut self.encoder, &mut self.references);
                self.columns
                    .visit_borrowed(batch, &self.root, |uri, sha256, size| {
                        if let Some(oldest) = oldest.as_mut() {
                            oldest.offer(uri, sha256, size);
                        }
                        encoder.push_parts(uri, sha256, size);
                        *references += 1;
                    })
                    .map_err(|source| LanceEngineError::Unreadable { table: up.table.clone(), source })?;
            }
        }
        self.encoder.flush_batch().map_err(encode)?;
        if self.encoder.buffered_bytes() >= self.upload.part_bytes {
            let part = self.encoder.take_bytes();
            self.upload.put(part).await?;
        }
        Ok((batch.num_rows() as u64, self.references - before))
    }

    /// References pushed so far.
    pub(crate) fn references(&self) -> u64 {
        self.references
    }

    /// Finishes the log and returns what a head records of it.
    ///
    /// # Errors
    /// [`LanceEngineError::SidecarWrite`].
    pub(crate) async fn finish(self) -> Result<LogRef, LanceEngineError> {
        let up = &self.upload;
        let (rest, totals) = self.encoder.finish().map_err(|e| encode_error(&up.table, up.version, &up.key, e))?;
        self.upload.complete(rest, &totals, false).await
    }

    /// Abandons the log (its upload is aborted; nothing names it).
    pub(crate) async fn abort(mut self) {
        let _ = self.upload.upload.abort().await;
    }
}

/// Uploads the sorted log of `entries` (ascending identities with counts) for an entry of
/// `table` at `version`.
///
/// # Errors
/// As [`SortedLogWriter`].
pub(crate) async fn upload_sorted<'a>(
    store: &LakeStore,
    table: &str,
    version: u64,
    entries: impl Iterator<Item = (&'a ObjectIdentity, u64)>,
) -> Result<LogRef, LanceEngineError> {
    let mut writer = SortedLogWriter::start(store, table, version).await?;
    for (identity, count) in entries {
        writer.push(identity, count).await?;
    }
    writer.finish().await
}

/// What a [`CountsWriter`] wrote: the counts themselves (small enough to write inline), or the
/// sorted log that holds them.
pub(crate) enum WrittenCounts {
    /// At most [`crate::sidecar::INLINE_MAX_IDENTITIES`] identities, in memory.
    Inline(lake_common::ReferenceCounts),
    /// A sorted log in the store.
    Log(LogRef),
}

/// Takes identities with counts in ascending order and keeps them in memory while they are
/// few ([`crate::sidecar::INLINE_MAX_IDENTITIES`]); past that, streams them into a sorted log.
/// So an entry of any size is written in bounded memory, and a small one inline.
pub(crate) struct CountsWriter {
    store: LakeStore,
    table: String,
    version: u64,
    small: lake_common::ReferenceCounts,
    log: Option<SortedLogWriter>,
    /// Identities taken.
    pub identities: u64,
    /// The sum of the counts taken.
    pub references: u64,
}

impl CountsWriter {
    /// A writer of an entry of `table` at `version`.
    pub(crate) fn new(store: &LakeStore, table: &str, version: u64) -> Self {
        Self {
            store: store.clone(),
            table: table.into(),
            version,
            small: lake_common::ReferenceCounts::new(),
            log: None,
            identities: 0,
            references: 0,
        }
    }

    /// Takes `identity` with `count` references (strictly ascending; a zero count is skipped).
    ///
    /// # Errors
    /// As [`SortedLogWriter::push`].
    pub(crate) async fn push(&mut self, identity: ObjectIdentity, count: u64) -> Result<(), LanceEngineError> {
        if count == 0 {
            return Ok(());
        }
        self.identities += 1;
        self.references = self.references.saturating_add(count);
        if let Some(log) = self.log.as_mut() {
            return log.push(&identity, count).await;
        }
        self.small.add(identity, count);
        if self.small.len() > crate::sidecar::INLINE_MAX_IDENTITIES {
            let mut log = SortedLogWriter::start(&self.store, &self.table, self.version).await?;
            for (identity, count) in std::mem::take(&mut self.small).iter() {
                log.push(identity, count).await?;
            }
            self.log = Some(log);
        }
        Ok(())
    }

    /// Ends the entry.
    ///
    /// # Errors
    /// As [`SortedLogWriter::finish`].
    pub(crate) async fn finish(self) -> Result<WrittenCounts, LanceEngineError> {
        match self.log {
            Some(log) => Ok(WrittenCounts::Log(log.finish().await?)),
            None => Ok(WrittenCounts::Inline(self.small)),
        }
    }

    /// Abandons the entry (a log started is aborted).
    pub(crate) async fn abort(self) {
        if let Some(log) = self.log {
            log.abort().await;
        }
    }
}
