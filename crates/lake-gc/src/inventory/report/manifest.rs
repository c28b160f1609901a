//! The manifest of an S3 Inventory report (`manifest.json` and `manifest.checksum`) as AWS
//! documents it (Amazon S3 user guide, "Locating your inventory list" and "What is an inventory
//! manifest?"), and the checks that need no data file.
//!
//! ```text
//! {
//!   "sourceBucket": "example-source-bucket",
//!   "destinationBucket": "arn:aws:s3:::example-inventory-destination-bucket",
//!   "version": "2016-11-30",
//!   "creationTimestamp": "1514944800000",
//!   "fileFormat": "CSV",
//!   "fileSchema": "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag",
//!   "files": [{"key": "inventory/example-source-bucket/data/939c6d46-....csv.gz",
//!              "size": 2147483647, "MD5checksum": "f11166069f1990abeb9c97ace9cdfabc"}]
//! }
//! ```
//!
//! `creationTimestamp` is milliseconds since the Unix epoch (UTC), as a string: the time AWS
//! began scanning the bucket. `fileSchema` is a comma-separated field list for CSV (the order
//! of each row's fields), a Parquet message (`message s3.inventory { required binary key
//! (UTF8); optional int64 size; optional int64 last_modified_date (TIMESTAMP_MILLIS); ... }`) or
//! an ORC struct. `manifest.checksum` is the hex MD5 of `manifest.json`'s bytes.

use super::problem::ReportProblem;
use chrono::{DateTime, Utc};
use md5::Digest;
use serde::{Deserialize, Serialize};

/// The `version` lake writes in a manifest (the one AWS's documentation shows).
pub const MANIFEST_VERSION: &str = "2016-11-30";

/// The hex MD5 of `bytes` (lower case), the form of `manifest.checksum` and `MD5checksum`.
pub fn md5_hex(bytes: &[u8]) -> String {
    hex::encode(md5::Md5::digest(bytes))
}

/// The key of `manifest.checksum`, beside the manifest at `manifest_key`.
pub fn checksum_key(manifest_key: &str) -> String {
    match manifest_key.rsplit_once('/') {
        Some((folder, _)) => format!("{folder}/manifest.checksum"),
        None => "manifest.checksum".into(),
    }
}

/// The data-file format of a report lake can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ReportFormat {
    /// Gzip-compressed CSV, no header row, every field quoted, keys URL-encoded.
    #[serde(rename = "CSV")]
    Csv,
    /// Apache Parquet (Snappy-compressed as AWS writes it); keys are plain UTF-8.
    Parquet,
}

impl ReportFormat {
    /// The manifest's `fileFormat` value.
    pub fn manifest_name(self) -> &'static str {
        match self {
            ReportFormat::Csv => "CSV",
            ReportFormat::Parquet => "Parquet",
        }
    }

    /// The data files' name ending.
    pub fn extension(self) -> &'static str {
        match self {
            ReportFormat::Csv => ".csv.gz",
            ReportFormat::Parquet => ".parquet",
        }
    }
}

/// `manifest.json` as written and read (AWS may add fields; unknown ones are ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestDocument {
    /// The bucket the report lists.
    pub source_bucket: String,
    /// The bucket the report is in, as an ARN (`arn:aws:s3:::bucket`).
    #[serde(default)]
    pub destination_bucket: String,
    /// The manifest format's version (`2016-11-30`).
    #[serde(default)]
    pub version: String,
    /// Milliseconds since the Unix epoch (UTC) when AWS began scanning the bucket, as a string
    /// (a JSON number is accepted too).
    #[serde(deserialize_with = "string_or_number")]
    pub creation_timestamp: String,
    /// `CSV`, `ORC` or `Parquet`.
    pub file_format: String,
    /// The fields of each row (see the module documentation).
    pub file_schema: String,
    /// The data files, keys in the destination bucket.
    pub files: Vec<ManifestFile>,
}

/// One data file of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    /// Its key in the destination bucket.
    pub key: String,
    /// Its size in bytes, as stored.
    pub size: u64,
    /// The hex MD5 of its bytes as stored (of the `.csv.gz` for CSV).
    #[serde(rename = "MD5checksum")]
    pub md5_checksum: String,
}

fn string_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Text(String),
        Number(u64),
    }
    Ok(match Either::deserialize(d)? {
        Either::Text(t) => t,
        Either::Number(n) => n.to_string(),
    })
}

/// Where each field a plan needs is in a row: positions in a CSV row (the order of
/// `fileSchema`); for Parquet only presence matters (columns are read by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns {
    /// `Bucket` (optional: checked against the source bucket when present).
    pub bucket: Option<usize>,
    /// `Key`.
    pub key: usize,
    /// `Size`.
    pub size: usize,
    /// `LastModifiedDate`.
    pub last_modified: usize,
    /// `IsLatest` (reports of all versions).
    pub is_latest: Option<usize>,
    /// `IsDeleteMarker` (reports of all versions).
    pub is_delete_marker: Option<usize>,
    /// Fields in a row.
    pub count: usize,
}

/// A manifest that passed every check that needs no data file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The bucket the report lists.
    pub source_bucket: String,
    /// When AWS began scanning the bucket (UTC, milliseconds).
    pub created: DateTime<Utc>,
    /// The data files' format.
    pub format: ReportFormat,
    /// The manifest's `fileSchema`.
    pub schema: String,
    /// Where the fields are.
    pub columns: Columns,
    /// The data files, each with its MD5 in lower-case hex.
    pub files: Vec<ManifestFile>,
}

impl Manifest {
    /// Checks `manifest` (the bytes of `manifest.json`) against `checksum` (those of
    /// `manifest.checksum`) and decodes it, for a lake in `lake_bucket`.
    ///
    /// # Errors
    /// In this order: [`ReportProblem::ManifestChecksum`]; [`ReportProblem::Manifest`] for a
    /// document that is not a manifest; [`ReportProblem::OtherBucket`];
    /// [`ReportProblem::UnsupportedFormat`] (ORC); [`ReportProblem::MissingFields`] when the
    /// schema lacks Key, Size or LastModifiedDate; [`ReportProblem::Manifest`] for a bad
    /// `creationTimestamp` or `MD5checksum`.
    pub fn parse(manifest: &[u8], checksum: &[u8], lake_bucket: &str) -> Result<Self, ReportProblem> {
        let actual = md5_hex(manifest);
        let expected = String::from_utf8_lossy(checksum).split_whitespace().next().unwrap_or("").to_ascii_lowercase();
        if expected != actual {
            return Err(ReportProblem::ManifestChecksum { expected, actual });
        }
        let bad = |message: String| ReportProblem::Manifest { message };
        let doc: ManifestDocument = serde_json::from_slice(manifest).map_err(|e| bad(e.to_string()))?;
        if doc.source_bucket != lake_bucket {
            return Err(ReportProblem::OtherBucket {
                report_bucket: doc.source_bucket,
                lake_bucket: lake_bucket.to_string(),
            });
        }
        let format = match doc.file_format.to_ascii_lowercase().as_str() {
            "csv" => ReportFormat::Csv,
            "parquet" => ReportFormat::Parquet,
            _ => return Err(ReportProblem::UnsupportedFormat { format: doc.file_format }),
        };
        let columns = columns(&doc.file_schema, format)?;
        let ms: i64 = doc.creation_timestamp.trim().parse().map_err(|_| {
            bad(format!("creationTimestamp `{}` is not milliseconds since the epoch", doc.creation_timestamp))
        })?;
        let created = DateTime::<Utc>::from_timestamp_millis(ms)
            .ok_or_else(|| bad(format!("creationTimestamp `{ms}` is out of range")))?;
        let mut files = doc.files;
        for f in &mut files {
            f.md5_checksum = f.md5_checksum.trim().to_ascii_lowercase();
            if f.md5_checksum.len() != 32 || !f.md5_checksum.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad(format!(
                    "data file `{}` has MD5checksum `{}`, not 32 hex digits",
                    f.key, f.md5_checksum
                )));
            }
            if f.key.is_empty() || f.key.ends_with('/') {
                return Err(bad(format!("a data file key `{}` names no file", f.key)));
            }
        }
        Ok(Self { source_bucket: doc.source_bucket, created, format, schema: doc.file_schema, columns, files })
    }
}

/// The field names of `schema`, normalised (lower case, without `_`): `LastModifiedDate` and
/// `last_modified_date` are both `lastmodifieddate`.
fn field_names(schema: &str, format: ReportFormat) -> Vec<String> {
    let normal = |name: &str| name.trim().chars().filter(|c| *c != '_').collect::<String>().to_ascii_lowercase();
    match format {
        ReportFormat::Csv => schema.split(',').map(normal).collect(),
        // `message s3.inventory { required binary key (UTF8); optional int64 size; ... }`:
        // each declaration is `<repetition> <type> <name> [(<annotation>)]`.
        ReportFormat::Parquet => {
            let body = schema.split_once('{').map(|(_, b)| b).unwrap_or(schema);
            let body = body.rsplit_once('}').map(|(b, _)| b).unwrap_or(body);
            body.split(';').filter_map(|decl| decl.split_whitespace().nth(2)).map(normal).collect()
        }
    }
}

fn columns(schema: &str, format: ReportFormat) -> Result<Columns, ReportProblem> {
    let names = field_names(schema, format);
    let at = |name: &str| names.iter().position(|n| n == name);
    let (key, size, last_modified) = (at("key"), at("size"), at("lastmodifieddate"));
    let missing: Vec<&'static str> = [("Key", key), ("Size", size), ("LastModifiedDate", last_modified)]
        .into_iter()
        .filter(|(_, at)| at.is_none())
        .map(|(name, _)| name)
        .collect();
    match (key, size, last_modified) {
        (Some(key), Some(size), Some(last_modified)) => Ok(Columns {
            bucket: at("bucket"),
            key,
            size,
            last_modified,
            is_latest: at("islatest"),
            is_delete_marker: at("isdeletemarker"),
            count: names.len(),
        }),
        _ => Err(ReportProblem::MissingFields { missing, schema: schema.to_string() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(format: &str, schema: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "sourceBucket": "lake-bucket",
            "destinationBucket": "arn:aws:s3:::reports",
            "version": MANIFEST_VERSION,
            "creationTimestamp": "1514944800000",
            "fileFormat": format,
            "fileSchema": schema,
            "files": [{"key": "r/lake-bucket/c/data/a.csv.gz", "size": 3, "MD5checksum": "F11166069F1990ABEB9C97ACE9CDFABC"}],
            "somethingNew": true,
        }))
        .unwrap()
    }

    fn parse(bytes: &[u8]) -> Result<Manifest, ReportProblem> {
        Manifest::parse(bytes, format!("{}\n", md5_hex(bytes)).as_bytes(), "lake-bucket")
    }

    #[test]
    fn reads_aws_documented_manifests() {
        let csv = parse(&document(
            "CSV",
            "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag, StorageClass",
        ))
        .unwrap();
        assert_eq!(csv.format, ReportFormat::Csv);
        assert_eq!(csv.created.timestamp_millis(), 1_514_944_800_000);
        assert_eq!(
            csv.columns,
            Columns {
                bucket: Some(0),
                key: 1,
                size: 5,
                last_modified: 6,
                is_latest: Some(3),
                is_delete_marker: Some(4),
                count: 9
            }
        );
        assert_eq!(csv.files[0].md5_checksum, "f11166069f1990abeb9c97ace9cdfabc");
        let parquet = parse(&document(
            "Parquet",
            "message s3.inventory { required binary bucket (UTF8); required binary key (UTF8); optional binary version_id (UTF8); optional boolean is_latest; optional boolean is_delete_marker;  optional int64 size;  optional int64 last_modified_date (TIMESTAMP_MILLIS);  optional binary e_tag (UTF8);}",
        ))
        .unwrap();
        assert_eq!(parquet.format, ReportFormat::Parquet);
        assert_eq!((parquet.columns.key, parquet.columns.size, parquet.columns.last_modified), (1, 5, 6));
    }

    #[test]
    fn refuses_what_it_cannot_plan_from() {
        let ok = document("CSV", "Bucket, Key, Size, LastModifiedDate");
        let err = Manifest::parse(&ok, b"00000000000000000000000000000000", "lake-bucket").unwrap_err();
        assert!(matches!(err, ReportProblem::ManifestChecksum { .. }), "{err}");
        let err = Manifest::parse(&ok, md5_hex(&ok).as_bytes(), "other").unwrap_err();
        assert!(matches!(err, ReportProblem::OtherBucket { .. }), "{err}");
        let err = parse(&document("ORC", "struct<bucket:string,key:string,size:bigint>")).unwrap_err();
        assert!(err.to_string().contains("CSV or Parquet"), "{err}");
        let err = parse(&document("CSV", "Bucket, Key, ETag")).unwrap_err();
        assert_eq!(
            err,
            ReportProblem::MissingFields {
                missing: vec!["Size", "LastModifiedDate"],
                schema: "Bucket, Key, ETag".into()
            }
        );
        let err = parse(b"{\"sourceBucket\": \"lake-bucket\"}").unwrap_err();
        assert!(matches!(err, ReportProblem::Manifest { .. }), "{err}");
    }
}
