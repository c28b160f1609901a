//! The reference log: the payload of a format-2 sidecar, written while rows stream into Lance.
//!
//! A streamed write (append, overwrite) journals the references of its rows as they pass, with no
//! sorting, deduplication or per-identity map on the writer's path: an Arrow IPC stream
//! (Arrow's columnar format, read and written by `arrow-ipc`) of record batches
//! `{uri: Utf8, sha256: FixedSizeBinary(32), size: UInt64}`, all non-nullable, one row per
//! reference (an identity referenced by k rows appears k times, in row order). The schema's
//! metadata binds the log to its table (`lake.table`) and to the write that produced it
//! (`lake.write_id`). Readers fold it into canonical [`ReferenceCounts`]; the writer pays only the
//! copy of the reference columns. The format is specified in `docs/journal-format.md`.

use crate::counts::ReferenceCounts;
use crate::error::DecodeError;
use crate::identity::ObjectIdentity;
use arrow_array::builder::{FixedSizeBinaryBuilder, StringBuilder, UInt64Builder};
use arrow_array::{Array, ArrayRef, FixedSizeBinaryArray, RecordBatch, StringArray, UInt64Array};
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow_ipc::CompressionType;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use std::collections::HashMap;
use std::sync::Arc;

/// Schema metadata key naming the table a log belongs to.
pub const LOG_TABLE_KEY: &str = "lake.table";
/// Schema metadata key naming the write (a ULID) that produced a log.
pub const LOG_WRITE_ID_KEY: &str = "lake.write_id";

/// The schema of a reference log of `table` written by `write_id`.
pub fn log_schema(table: &str, write_id: &str) -> SchemaRef {
    let metadata = HashMap::from([
        (LOG_TABLE_KEY.to_string(), table.to_string()),
        (LOG_WRITE_ID_KEY.to_string(), write_id.to_string()),
    ]);
    Arc::new(Schema::new_with_metadata(log_fields(), metadata))
}

fn log_fields() -> Vec<Field> {
    vec![
        Field::new("uri", DataType::Utf8, false),
        Field::new("sha256", DataType::FixedSizeBinary(32), false),
        Field::new("size", DataType::UInt64, false),
    ]
}

/// Encodes a reference log incrementally into an in-memory buffer that the caller drains
/// ([`ReferenceLogEncoder::take_bytes`]) into multipart upload parts, so memory stays bounded by
/// one part plus one batch whatever the number of references.
pub struct ReferenceLogEncoder {
    schema: SchemaRef,
    writer: StreamWriter<Vec<u8>>,
    uri: StringBuilder,
    sha256: FixedSizeBinaryBuilder,
    size: UInt64Builder,
    pending: usize,
    references: u64,
    bytes: u64,
    /// SHA-256 of the bytes taken so far (the head binds the log by it).
    digest: sha2::Sha256,
    capacity: usize,
}

impl std::fmt::Debug for ReferenceLogEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceLogEncoder").field("references", &self.references).finish()
    }
}

impl ReferenceLogEncoder {
    /// A log of `table` for the write `write_id`; the schema message is buffered at once.
    ///
    /// # Errors
    /// Arrow's IPC writer errors (none are expected for an in-memory buffer).
    pub fn new(table: &str, write_id: &str) -> Result<Self, ArrowError> {
        let schema = log_schema(table, write_id);
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
            pending: 0,
            references: 0,
            bytes: 0,
            digest: <sha2::Sha256 as sha2::Digest>::new(),
            capacity: 0,
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
        self.uri.append_value(uri);
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
        self.flush_batch()?;
        let batch = RecordBatch::try_new(self.schema.clone(), arrays.to_vec())?;
        self.writer.write(&batch)?;
        self.references += batch.num_rows() as u64;
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
        let columns: Vec<ArrayRef> =
            vec![Arc::new(self.uri.finish()), Arc::new(self.sha256.finish()), Arc::new(self.size.finish())];
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        self.writer.write(&batch)?;
        self.pending = 0;
        Ok(())
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
        self.capacity = 0;
        let rest = self.take_bytes();
        let sha256 = hex::encode(sha2::Digest::finalize(self.digest));
        Ok((rest, LogTotals { references: self.references, bytes: self.bytes, sha256 }))
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
}

fn corrupt(reason: impl std::fmt::Display) -> DecodeError {
    DecodeError::CorruptLog(reason.to_string())
}

/// Decodes a reference log read for `table` and the write `write_id` into canonical counts.
/// Fails closed on any deviation: not an IPC stream, another schema (names, types,
/// nullability), other metadata, or truncation (a stream must end with its end-of-stream
/// marker, which the writer always writes).
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

/// Reads a reference log as [`decode_reference_log`] checks it, handing every reference (one
/// per row, in log order, unsorted) to `visit` instead of counting them: memory is one record
/// batch. Returns the number of references.
///
/// # Errors
/// As [`decode_reference_log`], and whatever `visit` returns.
pub fn visit_reference_log(
    bytes: &[u8],
    table: &str,
    write_id: &str,
    mut visit: impl FnMut(ObjectIdentity) -> Result<(), DecodeError>,
) -> Result<u64, DecodeError> {
    // End-of-stream marker: continuation 0xFFFFFFFF then a zero length (arrow IPC format).
    if !bytes.ends_with(&[0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0]) {
        return Err(corrupt("the stream does not end with the end-of-stream marker (truncated?)"));
    }
    let reader = StreamReader::try_new(bytes, None).map_err(corrupt)?;
    let schema = reader.schema();
    let fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    if fields != log_fields() {
        return Err(corrupt(format!("unexpected schema {schema:?}")));
    }
    for (key, expected) in [(LOG_TABLE_KEY, table), (LOG_WRITE_ID_KEY, write_id)] {
        let found = schema.metadata().get(key).map(String::as_str).unwrap_or("");
        if found != expected {
            return Err(DecodeError::LogMismatch { field: key, expected: expected.into(), found: found.into() });
        }
    }
    let mut references = 0u64;
    for batch in reader {
        let batch = batch.map_err(corrupt)?;
        let (uri, sha256, size) = columns(&batch)?;
        for row in 0..batch.num_rows() {
            let sha: [u8; 32] = sha256.value(row).try_into().map_err(|_| corrupt("sha256 is not 32 bytes"))?;
            visit(ObjectIdentity::new(uri.value(row), sha, size.value(row)))?;
        }
        references += batch.num_rows() as u64;
    }
    Ok(references)
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
