//! Parquet data files of a report, read by column name as AWS names them (`bucket`, `key`,
//! `size`, `last_modified_date` as `TIMESTAMP_MILLIS`, and for reports of all versions
//! `is_latest`, `is_delete_marker`); keys are plain UTF-8 (only CSV URL-encodes them). AWS
//! compresses them with Snappy.

use super::problem::ReportProblem;
use super::rows::{Row, Sink};
use crate::error::GcError;
use arrow_array::builder::{Int64Builder, StringBuilder, TimestampMillisecondBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use lake_store::s3_requests::RawObject;
use lake_store::StoreError;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};
use std::sync::Arc;

/// Rows decoded at a time (one batch in memory).
pub const BATCH_ROWS: usize = 8192;

/// The columns read, when present; the first three are required.
const COLUMNS: [&str; 6] = ["key", "size", "last_modified_date", "bucket", "is_latest", "is_delete_marker"];

/// The `fileSchema` lake writes for Parquet reports (AWS's form).
pub const WRITTEN_SCHEMA: &str = "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); optional int64 size; optional int64 last_modified_date (TIMESTAMP_MILLIS); optional binary e_tag (UTF8);}";

/// Reads the Parquet data file at `path` (the report's `file`) into `sink`, a batch at a time.
///
/// # Errors
/// [`ReportProblem::DataFile`] for a file Parquet cannot read, a missing `key`, `size` or
/// `last_modified_date` column, a column of a type that does not convert, a row without a key
/// or with a negative size; [`ReportProblem::BadKey`] for a key that is not UTF-8; as
/// [`Sink::accept`]; [`StoreError::Io`](lake_store::StoreError::Io) when the file cannot be opened.
pub fn read(path: &std::path::Path, file: &str, sink: &mut Sink) -> Result<(), GcError> {
    let opened = std::fs::File::open(path)
        .map_err(|source| GcError::from(StoreError::Io { path: path.display().to_string(), source }))?;
    let malformed = |message: String| ReportProblem::DataFile { file: file.to_string(), message };
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(opened).map_err(|e| sink.refuse(malformed(e.to_string())))?;
    let present: Vec<&str> =
        COLUMNS.into_iter().filter(|name| builder.schema().fields().iter().any(|f| f.name() == name)).collect();
    if let Some(missing) = COLUMNS[..3].iter().find(|name| !present.contains(name)) {
        return Err(sink.refuse(malformed(format!("it has no column `{missing}`"))));
    }
    let mask = ProjectionMask::columns(builder.parquet_schema(), present.iter().copied());
    let reader = builder
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| sink.refuse(malformed(e.to_string())))?;
    for batch in reader {
        let batch = batch.map_err(|e| sink.refuse(malformed(e.to_string())))?;
        read_batch(&batch, file, sink).map_err(|e| match e {
            Refusal::Malformed(m) => sink.refuse(malformed(m)),
            Refusal::Problem(p) => sink.refuse(p),
            Refusal::Other(e) => e,
        })?;
    }
    Ok(())
}

enum Refusal {
    Malformed(String),
    Problem(ReportProblem),
    Other(GcError),
}

fn cast(batch: &RecordBatch, name: &str, to: &DataType) -> Result<Option<ArrayRef>, Refusal> {
    batch
        .column_by_name(name)
        .map(|c| arrow_cast::cast(c, to).map_err(|e| Refusal::Malformed(format!("column `{name}`: {e}"))))
        .transpose()
}

fn required(array: Option<ArrayRef>, name: &str) -> Result<ArrayRef, Refusal> {
    array.ok_or_else(|| Refusal::Malformed(format!("a batch without column `{name}`")))
}

fn read_batch(batch: &RecordBatch, file: &str, sink: &mut Sink) -> Result<(), Refusal> {
    let keys = required(cast(batch, "key", &DataType::Binary)?, "key")?;
    let sizes = required(cast(batch, "size", &DataType::Int64)?, "size")?;
    let times = required(
        cast(batch, "last_modified_date", &DataType::Timestamp(TimeUnit::Millisecond, None))?,
        "last_modified_date",
    )?;
    let buckets = cast(batch, "bucket", &DataType::Utf8)?;
    let latest = cast(batch, "is_latest", &DataType::Boolean)?;
    let deleted = cast(batch, "is_delete_marker", &DataType::Boolean)?;
    let (keys, sizes) = (keys.as_binary::<i32>(), sizes.as_primitive::<Int64Type>());
    let times = times.as_primitive::<TimestampMillisecondType>();
    let buckets = buckets.as_ref().map(|b| b.as_string::<i32>());
    let latest = latest.as_ref().map(|b| b.as_boolean());
    let deleted = deleted.as_ref().map(|b| b.as_boolean());
    for i in 0..batch.num_rows() {
        if keys.is_null(i) {
            return Err(Refusal::Malformed("a row without a key".into()));
        }
        let key = std::str::from_utf8(keys.value(i)).map_err(|_| {
            Refusal::Problem(ReportProblem::BadKey {
                key: String::from_utf8_lossy(keys.value(i)).into_owned(),
                reason: "is not UTF-8",
            })
        })?;
        let size = match sizes.is_null(i) {
            true => None,
            false => Some(u64::try_from(sizes.value(i)).map_err(|_| {
                Refusal::Malformed(format!("the row of `{key}` has the negative size {}", sizes.value(i)))
            })?),
        };
        let flag = |a: Option<&arrow_array::BooleanArray>| a.filter(|a| !a.is_null(i)).map(|a| a.value(i));
        let row = Row {
            bucket: buckets.filter(|b| !b.is_null(i)).map(|b| b.value(i)),
            key: key.to_string(),
            size,
            last_modified_ms: (!times.is_null(i)).then(|| times.value(i)),
            is_latest: flag(latest),
            is_delete_marker: flag(deleted),
        };
        sink.accept(row, file).map_err(Refusal::Other)?;
    }
    Ok(())
}

/// Writes one Snappy-compressed Parquet data file with the columns of [`WRITTEN_SCHEMA`], in
/// batches of [`BATCH_ROWS`] rows (the file's bytes are held in memory).
pub struct ParquetFileWriter {
    bucket: String,
    schema: SchemaRef,
    pending: Vec<RawObject>,
    writer: ArrowWriter<Vec<u8>>,
}

fn parquet_io(e: impl std::fmt::Display) -> GcError {
    GcError::from(StoreError::Io { path: "Parquet data file".into(), source: std::io::Error::other(e.to_string()) })
}

impl ParquetFileWriter {
    /// A data file of `bucket`'s objects.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when the Parquet writer cannot be set up.
    pub fn new(bucket: &str) -> Result<Self, GcError> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("bucket", DataType::Utf8, false),
            Field::new("key", DataType::Utf8, false),
            Field::new("size", DataType::Int64, true),
            Field::new("last_modified_date", DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())), true),
            Field::new("e_tag", DataType::Utf8, true),
        ]));
        let properties = parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::SNAPPY)
            .build();
        let writer = ArrowWriter::try_new(Vec::new(), schema.clone(), Some(properties)).map_err(parquet_io)?;
        Ok(Self { bucket: bucket.to_string(), schema, pending: Vec::new(), writer })
    }

    /// Appends the row of `object` (a ListObjectsV2 entry).
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when a batch cannot be written.
    pub fn push(&mut self, object: &RawObject) -> Result<(), GcError> {
        self.pending.push(object.clone());
        if self.pending.len() >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), GcError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let (mut bucket, mut key, mut size) = (StringBuilder::new(), StringBuilder::new(), Int64Builder::new());
        let (mut time, mut etag) = (TimestampMillisecondBuilder::new().with_timezone("UTC"), StringBuilder::new());
        for o in self.pending.drain(..) {
            bucket.append_value(&self.bucket);
            key.append_value(&o.key);
            size.append_value(i64::try_from(o.size).map_err(parquet_io)?);
            time.append_value(o.last_modified.timestamp_millis());
            etag.append_option(o.e_tag.as_deref().map(|e| e.trim_matches('"')));
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(bucket.finish()),
            Arc::new(key.finish()),
            Arc::new(size.finish()),
            Arc::new(time.finish()),
            Arc::new(etag.finish()),
        ];
        let batch = RecordBatch::try_new(self.schema.clone(), columns).map_err(parquet_io)?;
        self.writer.write(&batch).map_err(parquet_io)
    }

    /// The file's bytes.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when the last batch or the footer cannot be written.
    pub fn finish(mut self) -> Result<Vec<u8>, GcError> {
        self.flush()?;
        self.writer.into_inner().map_err(parquet_io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::report::sorted::SortedReport;
    use chrono::{DateTime, Utc};
    use std::io::Write;

    fn object(key: &str, size: u64) -> RawObject {
        let t = DateTime::parse_from_rfc3339("2026-01-02T03:04:05.678Z").unwrap().with_timezone(&Utc);
        RawObject { key: key.into(), size, last_modified: t, e_tag: Some("\"e\"".into()) }
    }

    fn file(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    #[test]
    fn written_files_read_back_in_batches() {
        let mut w = ParquetFileWriter::new("b").unwrap();
        let n = BATCH_ROWS + 10;
        for i in (0..n).rev() {
            w.push(&object(&format!("lake/objects/{i:06}/x"), i as u64)).unwrap();
        }
        w.push(&object("lake/_lake/lake.json", 1)).unwrap();
        w.push(&object("other/objects/1/x", 1)).unwrap();
        let f = file(&w.finish().unwrap());
        let mut sink = Sink::new("m", "b", "lake", "objects/Z".into(), 1 << 16);
        read(f.path(), "f", &mut sink).unwrap();
        assert!(sink.descriptor_listed);
        assert_eq!((sink.counts.rows, sink.counts.entries), (n as u64 + 2, n as u64));
        let sorted = SortedReport::build(sink.into_runs()).unwrap();
        let mut reader = sorted.reader(Some("objects/000004/x")).unwrap();
        let r = reader.next_record().unwrap().unwrap();
        assert_eq!((r.key.as_str(), r.size), ("objects/000005/x", 5));
        assert_eq!(r.last_modified_ms, object("k", 0).last_modified.timestamp_millis());
    }

    #[test]
    fn other_buckets_and_missing_columns_are_refused() {
        let mut w = ParquetFileWriter::new("other").unwrap();
        w.push(&object("lake/objects/1/x", 1)).unwrap();
        let f = file(&w.finish().unwrap());
        let mut sink = Sink::new("m", "b", "lake", "objects/Z".into(), 1 << 16);
        let err = read(f.path(), "f", &mut sink).unwrap_err();
        assert!(matches!(err.report_problem(), Some(ReportProblem::OtherBucket { .. })));

        let schema = Arc::new(Schema::new(vec![Field::new("key", DataType::Utf8, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(arrow_array::StringArray::from(vec!["lake/objects/1/x"])) as ArrayRef],
        )
        .unwrap();
        let mut writer = ArrowWriter::try_new(Vec::new(), schema, None).unwrap();
        writer.write(&batch).unwrap();
        let f = file(&writer.into_inner().unwrap());
        let mut sink = Sink::new("m", "b", "lake", "objects/Z".into(), 1 << 16);
        let err = read(f.path(), "f", &mut sink).unwrap_err();
        assert!(err.to_string().contains("no column `size`"), "{err}");
        let f = file(b"PAR1 not really");
        let mut sink = Sink::new("m", "b", "lake", "objects/Z".into(), 1 << 16);
        assert!(read(f.path(), "f", &mut sink).is_err());
    }
}
