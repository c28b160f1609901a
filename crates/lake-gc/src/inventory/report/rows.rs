//! The rows of a report's data files, whatever their format, and the rules that keep or refuse
//! each one ([`Sink::accept`]).

use super::problem::ReportProblem;
use super::sorted::ReportRecord;
use crate::error::GcError;
use lake_engine::spill::SortedRuns;
use lake_store::layout::{DESCRIPTOR_KEY, OBJECTS_PREFIX};

/// One row of a data file, decoded (a CSV key already URL-decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row<'a> {
    /// `Bucket`, when the schema has it.
    pub bucket: Option<&'a str>,
    /// `Key`, the full bucket key.
    pub key: String,
    /// `Size` in bytes (empty for a delete marker).
    pub size: Option<u64>,
    /// `LastModifiedDate`, milliseconds since the Unix epoch (UTC).
    pub last_modified_ms: Option<i64>,
    /// `IsLatest` (reports of all versions).
    pub is_latest: Option<bool>,
    /// `IsDeleteMarker` (reports of all versions).
    pub is_delete_marker: Option<bool>,
}

/// Counters of reading a report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadCounts {
    /// Rows read.
    pub rows: u64,
    /// Rows of versions that are not current, or delete markers (skipped).
    pub versions_skipped: u64,
    /// Rows under `objects/` up to the merge boundary: the report's entries.
    pub entries: u64,
    /// Rows under `objects/` after the merge boundary (dropped: the live listing lists them).
    pub after_boundary: u64,
}

/// Where the kept rows of a report go: the rules of the module [`super`], then an external sort.
#[derive(Debug)]
pub struct Sink {
    manifest: String,
    source_bucket: String,
    /// `<root prefix>/` (empty for a lake at the bucket's root).
    root: String,
    /// The descriptor's full bucket key.
    descriptor: String,
    /// Entries with relative keys up to this one (inclusive) are kept.
    boundary: String,
    runs: SortedRuns<ReportRecord>,
    /// Counters so far.
    pub counts: LoadCounts,
    /// True once a row named the lake descriptor.
    pub descriptor_listed: bool,
}

impl Sink {
    /// A sink for the report `manifest` of `source_bucket`, for the lake whose root prefix is
    /// `root_prefix` (no trailing `/`; empty at the bucket's root), keeping entries up to
    /// `boundary` in runs of `memory_budget` bytes.
    pub fn new(manifest: &str, source_bucket: &str, root_prefix: &str, boundary: String, memory_budget: usize) -> Self {
        let root = if root_prefix.is_empty() { String::new() } else { format!("{root_prefix}/") };
        Self {
            manifest: manifest.to_string(),
            source_bucket: source_bucket.to_string(),
            descriptor: format!("{root}{DESCRIPTOR_KEY}"),
            root,
            boundary,
            runs: SortedRuns::new(memory_budget),
            counts: LoadCounts::default(),
            descriptor_listed: false,
        }
    }

    /// The descriptor's full bucket key.
    pub fn descriptor_key(&self) -> &str {
        &self.descriptor
    }

    /// The refusal of this report for `problem`.
    pub fn refuse(&self, problem: ReportProblem) -> GcError {
        GcError::report(self.manifest.clone(), problem)
    }

    /// Takes one row of the data file `file`:
    /// - a row of another bucket refuses the report;
    /// - a version that is not current (`IsLatest` false) or a delete marker is skipped;
    /// - a key outside the lake root is skipped; one inside it with a control character
    ///   refuses the report (lake writes none; S3 keys are UTF-8, checked when decoding);
    /// - the lake descriptor is noted;
    /// - a key under `objects/` up to the boundary is kept (its size and time required), one
    ///   after it dropped (the live listing lists it).
    ///
    /// # Errors
    /// [`GcError::InventoryReport`] as above, [`StoreError::Io`](lake_store::StoreError::Io) when a sorted run
    /// cannot be written.
    pub fn accept(&mut self, row: Row<'_>, file: &str) -> Result<(), GcError> {
        self.counts.rows += 1;
        if let Some(bucket) = row.bucket.filter(|b| *b != self.source_bucket) {
            return Err(self.refuse(ReportProblem::OtherBucket {
                report_bucket: bucket.to_string(),
                lake_bucket: self.source_bucket.clone(),
            }));
        }
        if row.is_latest == Some(false) || row.is_delete_marker == Some(true) {
            self.counts.versions_skipped += 1;
            return Ok(());
        }
        let Some(relative) = row.key.strip_prefix(self.root.as_str()) else { return Ok(()) };
        if relative.chars().any(char::is_control) {
            return Err(
                self.refuse(ReportProblem::BadKey { key: row.key.clone(), reason: "contains a control character" })
            );
        }
        if row.key == self.descriptor {
            self.descriptor_listed = true;
            return Ok(());
        }
        if !relative.strip_prefix(OBJECTS_PREFIX).is_some_and(|r| r.starts_with('/')) {
            return Ok(());
        }
        if relative > self.boundary.as_str() {
            self.counts.after_boundary += 1;
            return Ok(());
        }
        let (Some(size), Some(last_modified_ms)) = (row.size, row.last_modified_ms) else {
            return Err(self.refuse(ReportProblem::DataFile {
                file: file.to_string(),
                message: format!("the row of `{}` has no Size or LastModifiedDate", row.key),
            }));
        };
        self.counts.entries += 1;
        Ok(self.runs.push(ReportRecord { key: relative.to_string(), last_modified_ms, size })?)
    }

    /// The sorted runs of the kept entries.
    pub fn into_runs(self) -> SortedRuns<ReportRecord> {
        self.runs
    }
}

/// Decodes a CSV report's URL-encoded key. AWS: "When using the CSV file format, the key name
/// is URL-encoded and must be decoded before you can use it" (Amazon S3 user guide, "Amazon S3
/// Inventory list"); a space is encoded as `+` and `+` as `%2B`, as in ListObjectsV2's
/// `encoding-type=url` (reported and fixed in cloud-custodian, issue #1997: "The S3 object key
/// value supplied in S3 Inventory is URL-encoded with space encoded as plus"). So `+` becomes a
/// space, then percent escapes are decoded; the result must be UTF-8.
///
/// # Errors
/// [`ReportProblem::BadKey`] when the decoded bytes are not UTF-8.
pub fn decode_csv_key(encoded: &str) -> Result<String, ReportProblem> {
    let plus = encoded.replace('+', " ");
    percent_encoding::percent_decode_str(&plus).decode_utf8().map(|k| k.into_owned()).map_err(|_| {
        ReportProblem::BadKey { key: encoded.to_string(), reason: "does not decode to UTF-8 (URL decoding)" }
    })
}

/// A key as a CSV report writes it (the inverse of [`decode_csv_key`]): every byte but RFC
/// 3986's unreserved characters and `/` percent-encoded, a space as `+`.
pub fn encode_csv_key(key: &str) -> String {
    const SET: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~').remove(b'/');
    percent_encoding::utf8_percent_encode(key, SET).to_string().replace("%20", "+")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_keys_round_trip_with_plus_as_space() {
        for key in ["objects/01J/a b+c%d", "objects/01J/\u{e9}t\u{e9}.bin", "x/~y_z-1.2", ""] {
            let encoded = encode_csv_key(key);
            assert!(!encoded.contains(' '), "{encoded}");
            assert_eq!(decode_csv_key(&encoded).unwrap(), key);
        }
        assert_eq!(encode_csv_key("a b+c"), "a+b%2Bc");
        assert_eq!(decode_csv_key("a+b%2Bc%2Fd").unwrap(), "a b+c/d");
        assert!(matches!(decode_csv_key("a%FF"), Err(ReportProblem::BadKey { .. })));
    }

    fn row(key: &str) -> Row<'static> {
        Row {
            bucket: Some("b"),
            key: key.to_string(),
            size: Some(1),
            last_modified_ms: Some(5),
            is_latest: None,
            is_delete_marker: None,
        }
    }

    #[test]
    fn rows_are_kept_skipped_or_refused_by_the_rules() {
        let mut sink = Sink::new("s3://r/m.json", "b", "lake", "objects/M".into(), 1 << 20);
        for key in ["lake/objects/A/x", "lake/objects/M", "lake/objects/Z/x", "other/objects/A/x", "lake/tables/t"] {
            sink.accept(row(key), "f").unwrap();
        }
        sink.accept(Row { is_latest: Some(false), ..row("lake/objects/B/x") }, "f").unwrap();
        sink.accept(Row { is_delete_marker: Some(true), ..row("lake/objects/C/x") }, "f").unwrap();
        assert!(!sink.descriptor_listed);
        sink.accept(row("lake/_lake/lake.json"), "f").unwrap();
        assert!(sink.descriptor_listed);
        assert_eq!(
            sink.counts,
            LoadCounts { rows: 8, versions_skipped: 2, entries: 2, after_boundary: 1 },
            "objects/A/x and objects/M kept, objects/Z/x after the boundary"
        );
        let err = sink.accept(Row { bucket: Some("c"), ..row("lake/objects/A/y") }, "f").unwrap_err();
        assert!(matches!(err.report_problem(), Some(ReportProblem::OtherBucket { .. })));
        let err = sink.accept(row("lake/objects/A/\u{7}"), "f").unwrap_err();
        assert!(matches!(err.report_problem(), Some(ReportProblem::BadKey { .. })));
        sink.accept(row("elsewhere/\u{7}"), "f").unwrap();
        let err = sink.accept(Row { size: None, ..row("lake/objects/A/z") }, "f").unwrap_err();
        assert!(matches!(err.report_problem(), Some(ReportProblem::DataFile { .. })));
    }
}
