//! The reference log: the payload of a sidecar head, an Arrow IPC stream (Arrow's columnar
//! streaming format, read and written by `arrow-ipc`) in one of two shapes:
//!
//! - a **row log** (`{uri: Utf8, sha256: FixedSizeBinary(32), size: UInt64}`): one row per
//!   reference in row order, unsorted, duplicates allowed (an identity referenced by k rows
//!   appears k times). A streamed write (append, overwrite) and repair's scan journal the
//!   references of their rows as they pass, with no sorting, deduplication or per-identity map
//!   on the writer's path ([`ReferenceLogEncoder`]).
//! - a **sorted log** (the same columns and `count: UInt64`): one row per identity, strictly
//!   ascending by `(uri, sha256, size)`, each count at least 1: the canonical form of counts
//!   written from sorted sources (a delta computed in memory, a snapshot replayed from the
//!   journal, the reference checkpoint; [`SortedLogEncoder`]).
//!
//! All columns are non-nullable. The schema's metadata binds the log to its table
//! (`lake.table`) and to the write that produced it (`lake.write_id`). Readers stream it in
//! bounded memory ([`LogDecoder`]: one record batch and the bytes of one message), handing every
//! reference (with its count) to a visitor. The format is specified in `docs/journal-format.md`.
//!
//! Size: about 730 lines, no unit tests (they are in `tests/it/reflog.rs`); the two encoders (row
//! log, sorted log), the block index and the streaming decoder of one binary format, writer and
//! reader side by side so that they cannot drift apart.

use crate::counts::ReferenceCounts;
use crate::error::DecodeError;
use crate::identity::ObjectIdentity;
use arrow_array::builder::{FixedSizeBinaryBuilder, StringBuilder, UInt64Builder};
use arrow_array::{Array, ArrayRef, FixedSizeBinaryArray, RecordBatch, StringArray, UInt64Array};
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow_ipc::CompressionType;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use std::collections::HashMap;
use std::sync::Arc;

/// Schema metadata key naming the table a log belongs to.
pub const LOG_TABLE_KEY: &str = "lake.table";
/// Schema metadata key naming the write (a ULID) that produced a log.
pub const LOG_WRITE_ID_KEY: &str = "lake.write_id";

/// The schema of a row log of `table` written by `write_id`.
pub fn log_schema(table: &str, write_id: &str) -> SchemaRef {
    schema_of(table, write_id, false)
}

fn schema_of(table: &str, write_id: &str, sorted: bool) -> SchemaRef {
    let metadata = HashMap::from([
        (LOG_TABLE_KEY.to_string(), table.to_string()),
        (LOG_WRITE_ID_KEY.to_string(), write_id.to_string()),
    ]);
    Arc::new(Schema::new_with_metadata(log_fields(sorted), metadata))
}

fn log_fields(sorted: bool) -> Vec<Field> {
    let mut fields = vec![
        Field::new("uri", DataType::Utf8, false),
        Field::new("sha256", DataType::FixedSizeBinary(32), false),
        Field::new("size", DataType::UInt64, false),
    ];
    if sorted {
        fields.push(Field::new("count", DataType::UInt64, false));
    }
    fields
}

/// Encodes a row log incrementally into an in-memory buffer that the caller drains
/// ([`ReferenceLogEncoder::take_bytes`]) into multipart upload parts, so memory stays bounded by
/// one part plus one batch whatever the number of references.
pub struct ReferenceLogEncoder {
    schema: SchemaRef,
    writer: StreamWriter<Vec<u8>>,
    uri: StringBuilder,
    sha256: FixedSizeBinaryBuilder,
    size: UInt64Builder,
    /// The count column of a sorted log ([`SortedLogEncoder`]); `None` for a row log.
    count: Option<UInt64Builder>,
    pending: usize,
    references: u64,
    bytes: u64,
    /// SHA-256 of the bytes taken so far (the head binds the log by it).
    digest: sha2::Sha256,
    capacity: usize,
    /// Rows pushed but not yet encoded, and rows encoded since the last take.
    pending_span: Span,
    block_span: Span,
    schema_bytes: u64,
    blocks: Vec<LogBlock>,
    /// The block being written: its bytes so far and their digest.
    block_bytes: u64,
    block_digest: sha2::Sha256,
    /// Bytes of the output buffer already counted into the block.
    buffer_seen: usize,
}

impl std::fmt::Debug for ReferenceLogEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceLogEncoder").field("references", &self.references).finish()
    }
}

impl ReferenceLogEncoder {
    /// A row log of `table` for the write `write_id`; the schema message is buffered at once.
    ///
    /// # Errors
    /// Arrow's IPC writer errors (none are expected for an in-memory buffer).
    pub fn new(table: &str, write_id: &str) -> Result<Self, ArrowError> {
        Self::of_shape(table, write_id, false)
    }

    fn of_shape(table: &str, write_id: &str, sorted: bool) -> Result<Self, ArrowError> {
        let schema = schema_of(table, write_id, sorted);
        // LZ4-framed buffers (Arrow IPC body compression): keys under one prefix compress well,
        // which halves the bytes a writer adds to Lance's own (SHA-256 values do not compress).
        let options = IpcWriteOptions::default().try_with_compression(Some(CompressionType::LZ4_FRAME))?;
        let writer = StreamWriter::try_new_with_options(Vec::new(), &schema, options)?;
        Ok(Self {
            schema,
            writer,
            uri: StringBuilder::new(),
            sha256: FixedSizeBinaryBuilder::new(32),
            size: UInt64Builder::new(),
            count: sorted.then(UInt64Builder::new),
            pending: 0,
            references: 0,
            bytes: 0,
            digest: <sha2::Sha256 as sha2::Digest>::new(),
            capacity: 0,
            pending_span: Span::default(),
            block_span: Span::default(),
            schema_bytes: 0,
            blocks: Vec::new(),
            block_bytes: 0,
            block_digest: <sha2::Sha256 as sha2::Digest>::new(),
            buffer_seen: 0,
        })
        .map(|mut encoder| {
            encoder.schema_bytes = encoder.writer.get_ref().len() as u64;
            encoder.written(false);
            encoder
        })
    }

    /// Reserves `bytes` for the output buffer after every [`ReferenceLogEncoder::take_bytes`], so
    /// that a buffer drained at a part size never regrows (no doubling, no copy).
    pub fn with_buffer_capacity(mut self, bytes: usize) -> Self {
        self.capacity = bytes;
        self.writer.get_mut().reserve(bytes);
        self
    }

    /// Appends one reference (a count of one) to the current batch.
    pub fn push(&mut self, identity: &ObjectIdentity) {
        self.push_parts(&identity.uri, &identity.sha256, identity.size);
    }

    /// Appends one reference from its parts: the normalised `uri`, SHA-256, size in bytes.
    pub fn push_parts(&mut self, uri: &str, sha256: &[u8; 32], size: u64) {
        self.push_counted_parts(uri, sha256, size, 1);
    }

    fn push_counted_parts(&mut self, uri: &str, sha256: &[u8; 32], size: u64, count: u64) {
        if let Some(counts) = self.count.as_mut() {
            counts.append_value(count);
        }
        self.uri.append_value(uri);
        self.pending_span.add(uri);
        // A 32-byte value always fits a FixedSizeBinary(32) builder.
        let _ = self.sha256.append_value(sha256);
        self.size.append_value(size);
        self.pending += 1;
        self.references += 1;
    }

    /// Appends whole arrays of references (one per row): `uri` Utf8 of canonical keys,
    /// `sha256` FixedSizeBinary(32), `size` UInt64, all without nulls (see
    /// `ReferenceColumns::canonical_arrays`). Pending rows are encoded first, then the arrays are
    /// encoded as one record batch without copying them into builders.
    ///
    /// # Errors
    /// Arrow errors when the arrays do not have the log's types or lengths.
    pub fn push_arrays(&mut self, arrays: &[ArrayRef; 3]) -> Result<(), ArrowError> {
        if self.count.is_some() {
            return Err(ArrowError::InvalidArgumentError("a sorted log takes counted identities, not arrays".into()));
        }
        self.flush_batch()?;
        let batch = RecordBatch::try_new(self.schema.clone(), arrays.to_vec())?;
        let mut offset = 0;
        while offset < batch.num_rows() {
            // A zero-copy slice per batch of the log.
            let slice = batch.slice(offset, BATCH_ROWS.min(batch.num_rows() - offset));
            offset += slice.num_rows();
            self.writer.write(&slice)?;
            self.references += slice.num_rows() as u64;
            if let Some(uris) = slice.column(0).as_any().downcast_ref::<StringArray>() {
                let mut span = Span::default();
                uris.iter().flatten().for_each(|uri| span.add(uri));
                self.block_span.merge(&span);
            }
            self.written(false);
        }
        Ok(())
    }

    /// References appended so far.
    pub fn references(&self) -> u64 {
        self.references
    }

    /// Rows appended since the last [`ReferenceLogEncoder::flush_batch`].
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Encodes the pending rows as one record batch (nothing when none are pending).
    ///
    /// # Errors
    /// Arrow's IPC writer errors.
    pub fn flush_batch(&mut self) -> Result<(), ArrowError> {
        if self.pending == 0 {
            return Ok(());
        }
        let mut columns: Vec<ArrayRef> =
            vec![Arc::new(self.uri.finish()), Arc::new(self.sha256.finish()), Arc::new(self.size.finish())];
        if let Some(counts) = self.count.as_mut() {
            columns.push(Arc::new(counts.finish()));
        }
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        self.writer.write(&batch)?;
        self.pending = 0;
        let span = std::mem::take(&mut self.pending_span);
        self.block_span.merge(&span);
        self.written(false);
        Ok(())
    }

    /// Counts the messages written since the last call into the current block, and closes the
    /// block when it reached [`LOG_BLOCK_BYTES`] (or at the end, `last`).
    fn written(&mut self, last: bool) {
        let buffer = self.writer.get_ref();
        let new = &buffer[self.buffer_seen.min(buffer.len())..];
        sha2::Digest::update(&mut self.block_digest, new);
        self.block_bytes += new.len() as u64;
        self.buffer_seen = buffer.len();
        if self.block_bytes > 0 && (last || self.block_bytes >= LOG_BLOCK_BYTES) {
            let span = std::mem::take(&mut self.block_span);
            let digest = std::mem::replace(&mut self.block_digest, <sha2::Sha256 as sha2::Digest>::new());
            self.blocks.push(LogBlock {
                bytes: self.block_bytes,
                rows: span.rows,
                sha256: hex::encode(sha2::Digest::finalize(digest)),
                first: span.first,
                last: span.last,
                unmanaged: span.unmanaged,
            });
            self.block_bytes = 0;
        }
    }

    /// Encoded bytes not yet taken.
    pub fn buffered_bytes(&mut self) -> usize {
        self.writer.get_mut().len()
    }

    /// Takes the encoded bytes so far (whole IPC messages; concatenating every take and the
    /// final bytes gives the log).
    pub fn take_bytes(&mut self) -> Vec<u8> {
        let bytes = std::mem::replace(self.writer.get_mut(), Vec::with_capacity(self.capacity));
        self.bytes += bytes.len() as u64;
        sha2::Digest::update(&mut self.digest, &bytes);
        self.buffer_seen = 0;
        bytes
    }

    /// Encodes the pending rows and the end-of-stream marker; returns the remaining bytes and
    /// the totals (references, bytes, SHA-256) of the whole log.
    ///
    /// # Errors
    /// Arrow's IPC writer errors.
    pub fn finish(mut self) -> Result<(Vec<u8>, LogTotals), ArrowError> {
        self.flush_batch()?;
        self.writer.finish()?;
        self.written(true);
        self.capacity = 0;
        let rest = self.take_bytes();
        let sha256 = hex::encode(sha2::Digest::finalize(self.digest));
        let index = LogIndex { schema_bytes: self.schema_bytes, blocks: self.blocks };
        Ok((rest, LogTotals { references: self.references, bytes: self.bytes, sha256, index: Some(index) }))
    }
}

/// Encodes a sorted log (see the module documentation): identities pushed strictly ascending,
/// each with its count, into the buffer a caller drains into upload parts, as
/// [`ReferenceLogEncoder`] does. Memory: one batch of [`SORTED_BATCH_ROWS`] rows and the bytes
/// not yet taken.
pub struct SortedLogEncoder {
    inner: ReferenceLogEncoder,
    last: Option<ObjectIdentity>,
    identities: u64,
    total: u64,
}

/// Bytes of encoded messages per block of a log's index: a block closes at the first message
/// boundary at or past it, so with batches of [`BATCH_ROWS`] references (about 80 KiB) a block
/// is one batch. That is the unit a reader of one key range fetches: the index costs about
/// 4 KB per 100,000 references (a block's size, rows, digest and first and last keys), and a
/// range reads at most about a batch more than its keys take at either end.
pub const LOG_BLOCK_BYTES: u64 = 64 * 1024;

/// Most rows of one record batch of a log: whole arrays pushed at once are cut into slices of
/// this many rows, so that a block of the index ([`LOG_BLOCK_BYTES`]) holds one to two
/// batches (a batch of 4,096 references is about 80 KiB encoded) and a reader of a key range
/// fetches little beyond its keys.
pub const BATCH_ROWS: usize = 4096;

/// Rows a [`SortedLogEncoder`] encodes per record batch (a batch is the unit a reader decodes).
pub const SORTED_BATCH_ROWS: usize = BATCH_ROWS;

impl std::fmt::Debug for SortedLogEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SortedLogEncoder").field("identities", &self.identities).finish()
    }
}

impl SortedLogEncoder {
    /// A sorted log of `table` for the write `write_id`.
    ///
    /// # Errors
    /// Arrow's IPC writer errors (none are expected for an in-memory buffer).
    pub fn new(table: &str, write_id: &str) -> Result<Self, ArrowError> {
        Ok(Self { inner: ReferenceLogEncoder::of_shape(table, write_id, true)?, last: None, identities: 0, total: 0 })
    }

    /// As [`ReferenceLogEncoder::with_buffer_capacity`].
    pub fn with_buffer_capacity(mut self, bytes: usize) -> Self {
        self.inner = self.inner.with_buffer_capacity(bytes);
        self
    }

    /// Appends `identity` with `count` references. A zero count is skipped.
    ///
    /// # Errors
    /// [`ArrowError::InvalidArgumentError`] when `identity` is not strictly greater than the
    /// identity pushed before it (the log would not be canonical); Arrow's IPC writer errors.
    pub fn push(&mut self, identity: &ObjectIdentity, count: u64) -> Result<(), ArrowError> {
        if count == 0 {
            return Ok(());
        }
        if self.last.as_ref().is_some_and(|last| last >= identity) {
            return Err(ArrowError::InvalidArgumentError(format!(
                "a sorted reference log takes identities strictly ascending: {} after {}",
                identity.uri,
                self.last.as_ref().map(|l| l.uri.as_str()).unwrap_or("")
            )));
        }
        self.inner.push_counted_parts(&identity.uri, &identity.sha256, identity.size, count);
        self.last = Some(identity.clone());
        self.identities += 1;
        self.total = self.total.saturating_add(count);
        if self.inner.pending() >= SORTED_BATCH_ROWS {
            self.inner.flush_batch()?;
        }
        Ok(())
    }

    /// Identities pushed so far.
    pub fn identities(&self) -> u64 {
        self.identities
    }

    /// The sum of the counts pushed so far (references).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// As [`ReferenceLogEncoder::buffered_bytes`].
    pub fn buffered_bytes(&mut self) -> usize {
        self.inner.buffered_bytes()
    }

    /// As [`ReferenceLogEncoder::take_bytes`].
    pub fn take_bytes(&mut self) -> Vec<u8> {
        self.inner.take_bytes()
    }

    /// As [`ReferenceLogEncoder::finish`]; `references` counts rows (identities).
    ///
    /// # Errors
    /// Arrow's IPC writer errors.
    pub fn finish(self) -> Result<(Vec<u8>, LogTotals), ArrowError> {
        self.inner.finish()
    }
}

/// What the index of a log records of one block: a run of whole IPC messages (the bytes one
/// writer part took), so that a reader of a key range fetches only the blocks that may hold its
/// keys (ranged reads) and checks each by its own digest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogBlock {
    /// The block's length in bytes (blocks are contiguous from offset 0).
    pub bytes: u64,
    /// Rows of the record batches in the block.
    pub rows: u64,
    /// SHA-256 of the block's bytes, 64 lowercase hex.
    pub sha256: String,
    /// The smallest `uri` of the block's rows (byte order); empty when it has none.
    pub first: String,
    /// The largest `uri` of the block's rows (byte order); empty when it has none.
    pub last: String,
    /// True when a row's `uri` is inside the lake root but no managed key
    /// (`objects/<ULID>/<name>`): such a reference concerns every key range (GC refuses it),
    /// so the block is read whatever the range.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unmanaged: bool,
}

/// The index of a log: its schema message's length and its blocks in order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogIndex {
    /// Length of the schema message at the start of the log (the prefix a reader of a block
    /// other than the first decodes first).
    pub schema_bytes: u64,
    /// The blocks, contiguous from offset 0 (the first starts with the schema message).
    pub blocks: Vec<LogBlock>,
}

/// The rows of a block so far: count, smallest and largest `uri`, any unmanaged.
#[derive(Debug, Default, Clone)]
struct Span {
    rows: u64,
    first: String,
    last: String,
    unmanaged: bool,
}

impl Span {
    fn add(&mut self, uri: &str) {
        if self.rows == 0 || uri < self.first.as_str() {
            self.first.clear();
            self.first.push_str(uri);
        }
        if self.rows == 0 || uri > self.last.as_str() {
            self.last.clear();
            self.last.push_str(uri);
        }
        self.unmanaged |= !crate::is_managed_key(uri) && !crate::is_external_identity(uri);
        self.rows += 1;
    }

    fn merge(&mut self, other: &Span) {
        if other.rows == 0 {
            return;
        }
        if self.rows == 0 || other.first < self.first {
            self.first.clone_from(&other.first);
        }
        if self.rows == 0 || other.last > self.last {
            self.last.clone_from(&other.last);
        }
        self.unmanaged |= other.unmanaged;
        self.rows += other.rows;
    }
}

/// The size and digest of a finished log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTotals {
    /// Rows (references) in the log.
    pub references: u64,
    /// Encoded length in bytes.
    pub bytes: u64,
    /// SHA-256 of the log's bytes, 64 lowercase hex characters.
    pub sha256: String,
    /// The log's block index, as its writer made it (`None` as a reader computes totals).
    pub index: Option<LogIndex>,
}

fn corrupt(reason: impl std::fmt::Display) -> DecodeError {
    DecodeError::CorruptLog(reason.to_string())
}

/// Decodes a row log read for `table` and the write `write_id` into canonical counts (in
/// memory: for small logs, such as a write intent's). Fails closed on any deviation: not an IPC
/// stream, another schema (names, types, nullability), other metadata, or truncation (a stream
/// must end with its end-of-stream marker, which the writer always writes).
///
/// # Errors
/// [`DecodeError::CorruptLog`], [`DecodeError::LogMismatch`].
pub fn decode_reference_log(bytes: &[u8], table: &str, write_id: &str) -> Result<(ReferenceCounts, u64), DecodeError> {
    let mut counts = ReferenceCounts::new();
    let references = visit_reference_log(bytes, table, write_id, |identity| {
        counts.add(identity, 1);
        Ok(())
    })?;
    Ok((counts, references))
}

/// Reads a row log held in memory as [`decode_reference_log`] checks it, handing every
/// reference (one per row, in log order, unsorted) to `visit` instead of counting them.
/// Returns the number of references.
///
/// # Errors
/// As [`decode_reference_log`], and whatever `visit` returns.
pub fn visit_reference_log(
    bytes: &[u8],
    table: &str,
    write_id: &str,
    mut visit: impl FnMut(ObjectIdentity) -> Result<(), DecodeError>,
) -> Result<u64, DecodeError> {
    let mut decoder = LogDecoder::new(table, write_id, false);
    decoder.feed(arrow_buffer::Buffer::from(bytes), &mut |identity, _| visit(identity))?;
    Ok(decoder.finish()?.references)
}

/// Reads a reference log as a stream of byte chunks in bounded memory: one record batch and the
/// bytes of the message being assembled. Every reference is handed to the visitor with its
/// count (1 for each row of a row log) as soon as its batch is complete; the log's length and
/// SHA-256 are computed over the same bytes, so a caller compares them with the head's only at
/// [`LogDecoder::finish`]. A reference handed over before a later defect is found must be
/// discarded with the whole entry (readers treat any error as the version's lineage problem).
///
/// After the first defect, further chunks are only hashed (no more references are handed
/// over), so that a caller can still report an edited log as a digest mismatch first.
pub struct LogDecoder {
    table: String,
    write_id: String,
    sorted: bool,
    decoder: arrow_ipc::reader::StreamDecoder,
    digest: sha2::Sha256,
    bytes: u64,
    rows: u64,
    /// The last 8 bytes seen (the end-of-stream marker must end the log).
    tail: Vec<u8>,
    schema_checked: bool,
    last: Option<ObjectIdentity>,
    failed: Option<DecodeError>,
}

impl std::fmt::Debug for LogDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogDecoder").field("write_id", &self.write_id).field("rows", &self.rows).finish()
    }
}

/// End-of-stream marker of an Arrow IPC stream: continuation 0xFFFFFFFF then a zero length.
const END_OF_STREAM: [u8; 8] = [0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0];

impl LogDecoder {
    /// A decoder of the log of `table` written by `write_id`, a sorted log when `sorted`.
    pub fn new(table: &str, write_id: &str, sorted: bool) -> Self {
        Self {
            table: table.into(),
            write_id: write_id.into(),
            sorted,
            decoder: arrow_ipc::reader::StreamDecoder::new(),
            digest: <sha2::Sha256 as sha2::Digest>::new(),
            bytes: 0,
            rows: 0,
            tail: Vec::with_capacity(16),
            schema_checked: false,
            last: None,
            failed: None,
        }
    }

    /// Feeds the next chunk of the log's bytes, handing every reference of each completed batch
    /// to `visit` (identity, count).
    ///
    /// # Errors
    /// The first defect found ([`DecodeError::CorruptLog`], [`DecodeError::LogMismatch`]), or
    /// what `visit` returns; later chunks are still hashed.
    pub fn feed(
        &mut self,
        chunk: arrow_buffer::Buffer,
        visit: &mut dyn FnMut(ObjectIdentity, u64) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        sha2::Digest::update(&mut self.digest, chunk.as_slice());
        self.bytes += chunk.len() as u64;
        self.tail.extend_from_slice(&chunk.as_slice()[chunk.len().saturating_sub(8)..]);
        let excess = self.tail.len().saturating_sub(8);
        self.tail.drain(..excess);
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.decode(chunk, visit);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    fn decode(
        &mut self,
        mut chunk: arrow_buffer::Buffer,
        visit: &mut dyn FnMut(ObjectIdentity, u64) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        while !chunk.is_empty() {
            let batch = self.decoder.decode(&mut chunk).map_err(corrupt)?;
            if !self.schema_checked {
                if let Some(schema) = self.decoder.schema() {
                    self.check_schema(&schema)?;
                    self.schema_checked = true;
                }
            }
            let Some(batch) = batch else { continue };
            self.visit_batch(&batch, visit)?;
        }
        Ok(())
    }

    fn check_schema(&self, schema: &Schema) -> Result<(), DecodeError> {
        let fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        if fields != log_fields(self.sorted) {
            let shape = if self.sorted { "a sorted log" } else { "a row log" };
            return Err(corrupt(format!("unexpected schema for {shape} {schema:?}")));
        }
        for (key, expected) in [(LOG_TABLE_KEY, &self.table), (LOG_WRITE_ID_KEY, &self.write_id)] {
            let found = schema.metadata().get(key).map(String::as_str).unwrap_or("");
            if found != expected {
                return Err(DecodeError::LogMismatch { field: key, expected: expected.clone(), found: found.into() });
            }
        }
        Ok(())
    }

    fn visit_batch(
        &mut self,
        batch: &RecordBatch,
        visit: &mut dyn FnMut(ObjectIdentity, u64) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        let (uri, sha256, size) = columns(batch)?;
        let counts = match self.sorted {
            true => Some(
                batch
                    .column(3)
                    .as_any()
                    .downcast_ref::<UInt64Array>()
                    .filter(|c| c.null_count() == 0)
                    .ok_or_else(|| corrupt("bad count column"))?,
            ),
            false => None,
        };
        for row in 0..batch.num_rows() {
            let sha: [u8; 32] = sha256.value(row).try_into().map_err(|_| corrupt("sha256 is not 32 bytes"))?;
            let identity = ObjectIdentity::new(uri.value(row), sha, size.value(row));
            let count = match counts {
                Some(c) => {
                    let n = c.value(row);
                    if n == 0 {
                        return Err(corrupt(format!("a zero count for {}", identity.uri)));
                    }
                    if self.last.as_ref().is_some_and(|last| *last >= identity) {
                        return Err(corrupt(format!(
                            "row {} ({}) is not strictly greater than the row before it in a sorted log",
                            self.rows + row as u64,
                            identity.uri
                        )));
                    }
                    self.last = Some(identity.clone());
                    n
                }
                None => 1,
            };
            visit(identity, count)?;
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Ends the log: its totals (rows, bytes, SHA-256), which the caller compares with the
    /// head.
    ///
    /// # Errors
    /// The defect found while feeding; [`DecodeError::CorruptLog`] for a log that does not end
    /// with the end-of-stream marker (truncated) or has no schema.
    pub fn finish(mut self) -> Result<LogTotals, DecodeError> {
        let totals = self.totals();
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        if self.tail != END_OF_STREAM {
            return Err(corrupt("the stream does not end with the end-of-stream marker (truncated?)"));
        }
        self.decoder.finish().map_err(corrupt)?;
        if !self.schema_checked {
            return Err(corrupt("the stream has no schema"));
        }
        Ok(totals)
    }

    /// Bytes fed so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Ends one block of the log read on its own (after the schema message that starts the
    /// log, or as the first block): no end-of-stream marker is expected and the log's digest is
    /// not checked here (the caller checks the block's own). Returns the rows read.
    ///
    /// # Errors
    /// The defect found while feeding; [`DecodeError::CorruptLog`] for a block that ends inside
    /// a message or a schema that was never read.
    pub fn finish_block(mut self) -> Result<u64, DecodeError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.decoder.finish().map_err(corrupt)?;
        if !self.schema_checked {
            return Err(corrupt("the block has no schema before it"));
        }
        Ok(self.rows)
    }

    /// The totals of the bytes fed so far, whatever their validity: what a caller compares with
    /// the head before it reports a defect (an edited log is a digest mismatch first).
    pub fn totals(&self) -> LogTotals {
        LogTotals {
            references: self.rows,
            bytes: self.bytes,
            sha256: hex::encode(sha2::Digest::finalize(self.digest.clone())),
            index: None,
        }
    }
}

fn columns(batch: &RecordBatch) -> Result<(&StringArray, &FixedSizeBinaryArray, &UInt64Array), DecodeError> {
    let column = |i: usize| batch.column(i).as_any();
    let uri = column(0).downcast_ref::<StringArray>().ok_or_else(|| corrupt("uri is not Utf8"))?;
    let sha256 = column(1).downcast_ref::<FixedSizeBinaryArray>().ok_or_else(|| corrupt("bad sha256 column"))?;
    let size = column(2).downcast_ref::<UInt64Array>().ok_or_else(|| corrupt("size is not UInt64"))?;
    if uri.null_count() + sha256.null_count() + size.null_count() > 0 {
        return Err(corrupt("null values in a non-nullable column"));
    }
    Ok((uri, sha256, size))
}
