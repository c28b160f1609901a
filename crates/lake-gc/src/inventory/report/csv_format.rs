//! CSV data files of a report: gzip-compressed, no header row, every field quoted, fields in
//! the order of the manifest's `fileSchema`, keys URL-encoded ([`super::rows::decode_csv_key`]).
//! `LastModifiedDate` is ISO 8601 (`2017-03-22T18:41:45.000Z`); booleans are `true`/`false`;
//! a delete marker's `Size` is empty.

use super::manifest::Columns;
use super::problem::ReportProblem;
use super::rows::{decode_csv_key, encode_csv_key, Row, Sink};
use crate::error::GcError;
use chrono::{DateTime, SecondsFormat};
use lake_store::s3_requests::RawObject;
use lake_store::StoreError;
use std::io::{BufReader, Write};

/// Reads the gzip CSV data file at `path` (the report's `file`) into `sink`, row by row.
///
/// # Errors
/// [`ReportProblem::DataFile`] for bad gzip or CSV, a row with another number of fields than
/// the schema, or a field that does not parse; [`ReportProblem::BadKey`] for a key that does not
/// decode to UTF-8; as [`Sink::accept`]; [`StoreError::Io`](lake_store::StoreError::Io) when the file cannot be opened.
pub fn read(path: &std::path::Path, columns: &Columns, file: &str, sink: &mut Sink) -> Result<(), GcError> {
    let opened = std::fs::File::open(path)
        .map_err(|source| GcError::from(StoreError::Io { path: path.display().to_string(), source }))?;
    let gz = flate2::read::MultiGzDecoder::new(BufReader::with_capacity(64 * 1024, opened));
    let mut reader = ::csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(gz);
    let mut record = ::csv::StringRecord::new();
    let malformed = |message: String| ReportProblem::DataFile { file: file.to_string(), message };
    let mut line = 0u64;
    loop {
        match reader.read_record(&mut record) {
            Ok(false) => return Ok(()),
            Ok(true) => line += 1,
            Err(e) => return Err(sink.refuse(malformed(format!("row {}: {e}", line + 1)))),
        }
        if record.len() != columns.count {
            return Err(sink.refuse(malformed(format!(
                "row {line} has {} fields, the fileSchema {}",
                record.len(),
                columns.count
            ))));
        }
        let field = |at: usize| record.get(at).unwrap_or("");
        let parsed = parse_row(&field, columns).map_err(|m| malformed(format!("row {line}: {m}")));
        let row = match parsed {
            Ok(Ok(row)) => row,
            Ok(Err(problem)) | Err(problem) => return Err(sink.refuse(problem)),
        };
        sink.accept(row, file)?;
    }
}

/// The row of `field` (a CSV record's fields by position): `Err` for a field that does not
/// parse, `Ok(Err)` for a key that does not decode.
fn parse_row<'a>(
    field: &impl Fn(usize) -> &'a str,
    columns: &Columns,
) -> Result<Result<Row<'a>, ReportProblem>, String> {
    let size = match field(columns.size) {
        "" => None,
        s => Some(s.parse::<u64>().map_err(|_| format!("Size `{s}` is not a number of bytes"))?),
    };
    let last_modified_ms = match field(columns.last_modified) {
        "" => None,
        t => Some(
            DateTime::parse_from_rfc3339(t)
                .map_err(|e| format!("LastModifiedDate `{t}` is not an ISO 8601 time: {e}"))?
                .timestamp_millis(),
        ),
    };
    let flag = |at: Option<usize>, name: &str| -> Result<Option<bool>, String> {
        match at.map(field) {
            None | Some("") => Ok(None),
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(Some(true)),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(Some(false)),
            Some(v) => Err(format!("{name} `{v}` is not true or false")),
        }
    };
    let is_latest = flag(columns.is_latest, "IsLatest")?;
    let is_delete_marker = flag(columns.is_delete_marker, "IsDeleteMarker")?;
    Ok(decode_csv_key(field(columns.key)).map(|key| Row {
        bucket: columns.bucket.map(field),
        key,
        size,
        last_modified_ms,
        is_latest,
        is_delete_marker,
    }))
}

/// The `fileSchema` lake writes for CSV reports.
pub const WRITTEN_SCHEMA: &str = "Bucket, Key, Size, LastModifiedDate, ETag";

/// Writes one gzip CSV data file with the fields of [`WRITTEN_SCHEMA`], row by row (the
/// compressed bytes are held in memory).
pub struct CsvFileWriter {
    bucket: String,
    writer: ::csv::Writer<flate2::write::GzEncoder<Vec<u8>>>,
}

impl CsvFileWriter {
    /// A data file of `bucket`'s objects.
    pub fn new(bucket: &str) -> Self {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let writer =
            ::csv::WriterBuilder::new().has_headers(false).quote_style(::csv::QuoteStyle::Always).from_writer(gz);
        Self { bucket: bucket.to_string(), writer }
    }

    /// Appends the row of `object` (a ListObjectsV2 entry).
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) (writing to memory does not fail in practice).
    pub fn push(&mut self, object: &RawObject) -> Result<(), GcError> {
        let time = object.last_modified.to_rfc3339_opts(SecondsFormat::Millis, true);
        let etag = object.e_tag.as_deref().unwrap_or("").trim_matches('"');
        let size = object.size.to_string();
        let key = encode_csv_key(&object.key);
        self.writer.write_record([self.bucket.as_str(), &key, &size, &time, etag]).map_err(csv_io)
    }

    /// The file's bytes.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) (as [`CsvFileWriter::push`]).
    pub fn finish(self) -> Result<Vec<u8>, GcError> {
        let gz = self.writer.into_inner().map_err(|e| csv_io(e.into_error().into()))?;
        let mut gz = gz;
        gz.flush().map_err(|source| GcError::from(StoreError::Io { path: "CSV data file".into(), source }))?;
        gz.finish().map_err(|source| GcError::from(StoreError::Io { path: "CSV data file".into(), source }))
    }
}

fn csv_io(e: ::csv::Error) -> GcError {
    GcError::from(StoreError::Io { path: "CSV data file".into(), source: std::io::Error::other(e.to_string()) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::report::manifest::{Manifest, ManifestDocument, ManifestFile};
    use chrono::Utc;
    use std::io::Write;

    fn gz(text: &str) -> tempfile::NamedTempFile {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(text.as_bytes()).unwrap();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&e.finish().unwrap()).unwrap();
        f
    }

    fn columns(schema: &str) -> Columns {
        let doc = ManifestDocument {
            source_bucket: "b".into(),
            destination_bucket: String::new(),
            version: String::new(),
            creation_timestamp: "0".into(),
            file_format: "CSV".into(),
            file_schema: schema.into(),
            files: vec![ManifestFile { key: "k".into(), size: 0, md5_checksum: "0".repeat(32) }],
        };
        let bytes = serde_json::to_vec(&doc).unwrap();
        let checksum = super::super::manifest::md5_hex(&bytes);
        Manifest::parse(&bytes, checksum.as_bytes(), "b").unwrap().columns
    }

    #[test]
    fn reads_versioned_rows_keeping_only_current_objects() {
        let schema = "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag";
        let text = "\"b\",\"lake/objects/01A/a+b%2Bc\",\"v2\",\"true\",\"false\",\"3\",\"2026-01-02T03:04:05.000Z\",\"e\"\n\
                    \"b\",\"lake/objects/01A/a+b%2Bc\",\"v1\",\"false\",\"false\",\"2\",\"2026-01-01T03:04:05.000Z\",\"e\"\n\
                    \"b\",\"lake/objects/01B/x\",\"v3\",\"true\",\"true\",\"\",\"2026-01-02T03:04:05.000Z\",\"\"\n\
                    \"b\",\"lake/_lake/lake.json\",\"v0\",\"true\",\"false\",\"9\",\"2026-01-01T00:00:00.000Z\",\"e\"\n";
        let f = gz(text);
        let mut sink = Sink::new("m", "b", "lake", "objects/Z".into(), 1 << 20);
        read(f.path(), &columns(schema), "f", &mut sink).unwrap();
        assert!(sink.descriptor_listed);
        assert_eq!((sink.counts.rows, sink.counts.versions_skipped, sink.counts.entries), (4, 2, 1));
        let sorted = super::super::sorted::SortedReport::build(sink.into_runs()).unwrap();
        let r = sorted.reader(None).unwrap().next_record().unwrap().unwrap();
        assert_eq!(r.key, "objects/01A/a b+c");
        assert_eq!((r.size, r.last_modified_ms), (3, 1_767_323_045_000));
    }

    #[test]
    fn malformed_files_are_refused() {
        let cols = columns("Bucket, Key, Size, LastModifiedDate");
        for (text, needle) in [
            ("\"b\",\"lake/objects/a\",\"x\",\"2026-01-01T00:00:00Z\"\n", "Size `x`"),
            ("\"b\",\"lake/objects/a\",\"1\"\n", "has 3 fields"),
            ("\"b\",\"lake/objects/a\",\"1\",\"yesterday\"\n", "LastModifiedDate"),
        ] {
            let mut sink = Sink::new("m", "b", "lake", "objects/Z".into(), 1 << 20);
            let err = read(gz(text).path(), &cols, "f", &mut sink).unwrap_err();
            assert!(err.to_string().contains(needle), "{err}");
        }
        let mut plain = tempfile::NamedTempFile::new().unwrap();
        plain.write_all(b"not gzip at all").unwrap();
        let mut sink = Sink::new("m", "b", "lake", "objects/Z".into(), 1 << 20);
        let err = read(plain.path(), &cols, "f", &mut sink).unwrap_err();
        assert!(matches!(err.report_problem(), Some(ReportProblem::DataFile { .. })), "{err}");
        let mut sink = Sink::new("m", "b", "lake", "objects/Z".into(), 1 << 20);
        let err = read(gz("\"b\",\"lake/objects/%C3\",\"1\",\"2026-01-01T00:00:00Z\"\n").path(), &cols, "f", &mut sink)
            .unwrap_err();
        assert!(matches!(err.report_problem(), Some(ReportProblem::BadKey { .. })), "{err}");
    }

    #[test]
    fn written_files_read_back() {
        let mut w = CsvFileWriter::new("b");
        let t = DateTime::parse_from_rfc3339("2026-01-02T03:04:05.678Z").unwrap().with_timezone(&Utc);
        for key in ["lake/objects/01A/a b", "lake/_lake/lake.json"] {
            w.push(&RawObject { key: key.into(), size: 7, last_modified: t, e_tag: Some("\"e\"".into()) }).unwrap();
        }
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&w.finish().unwrap()).unwrap();
        let mut sink = Sink::new("m", "b", "lake", "objects/Z".into(), 1 << 20);
        read(f.path(), &columns(WRITTEN_SCHEMA), "f", &mut sink).unwrap();
        assert!(sink.descriptor_listed);
        let sorted = super::super::sorted::SortedReport::build(sink.into_runs()).unwrap();
        let r = sorted.reader(None).unwrap().next_record().unwrap().unwrap();
        assert_eq!((r.key.as_str(), r.size, r.last_modified_ms), ("objects/01A/a b", 7, t.timestamp_millis()));
    }
}
