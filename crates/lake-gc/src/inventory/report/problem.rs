//! [`ReportProblem`]: why an S3 Inventory report was refused (the `problem` of
//! [`crate::GcError::InventoryReport`]). Each names what was wrong and what to do.

use chrono::{DateTime, Utc};

/// Why an S3 Inventory report cannot be planned from. Nothing is planned from a refused report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportProblem {
    /// The manifest, its `manifest.checksum` or a data file it lists is not in the bucket.
    #[error("{what} `{url}` does not exist; give the URL of a delivered report's manifest.json (AWS writes manifest.checksum last: wait for it)")]
    Missing {
        /// `manifest.json`, `manifest.checksum` or `data file`.
        what: &'static str,
        /// Its `s3://` URL.
        url: String,
    },
    /// `manifest.checksum` is not the MD5 of `manifest.json` (AWS: "the MD5 of the content of
    /// the manifest.json file").
    #[error("manifest.checksum says {expected} but manifest.json's MD5 is {actual}: the manifest was edited or damaged; use another delivery of the report")]
    ManifestChecksum {
        /// The hex MD5 `manifest.checksum` records.
        expected: String,
        /// The hex MD5 of the manifest's bytes.
        actual: String,
    },
    /// The manifest cannot be read as AWS documents it.
    #[error("manifest.json is not an S3 Inventory manifest: {message}")]
    Manifest {
        /// What is missing or malformed.
        message: String,
    },
    /// A data file's bytes do not have the MD5 the manifest lists (`MD5checksum`, of the file
    /// as stored: of the `.csv.gz` for CSV).
    #[error("data file `{file}` has MD5 {actual} but the manifest lists {expected}: it was damaged or replaced; use another delivery of the report")]
    DataFileChecksum {
        /// The data file's key in the destination bucket.
        file: String,
        /// The manifest's `MD5checksum`.
        expected: String,
        /// The MD5 of the bytes read.
        actual: String,
    },
    /// A data file cannot be decoded (bad gzip, CSV, Parquet, a row without a required field,
    /// a size different from the manifest's).
    #[error("data file `{file}` is malformed: {message}")]
    DataFile {
        /// The data file's key in the destination bucket.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// The report lists another bucket than the lake's (`sourceBucket`, or a row's bucket).
    #[error("the report lists bucket `{report_bucket}`, not this lake's bucket `{lake_bucket}`; use a report of the lake's bucket")]
    OtherBucket {
        /// The bucket the report is of.
        report_bucket: String,
        /// The lake's bucket.
        lake_bucket: String,
    },
    /// The report's `fileFormat` is not CSV or Parquet.
    #[error("fileFormat `{format}` is not supported: lake reads CSV and Parquet reports; configure the inventory with the CSV or Parquet format")]
    UnsupportedFormat {
        /// The manifest's `fileFormat` (`ORC`, ...).
        format: String,
    },
    /// The report's `fileSchema` lacks fields that planning needs.
    #[error("fileSchema lacks {}: add them to the inventory configuration's optional fields (Size, Last modified date); the schema is `{schema}`", missing.join(", "))]
    MissingFields {
        /// The missing fields, as AWS names them in a CSV schema.
        missing: Vec<&'static str>,
        /// The manifest's `fileSchema`.
        schema: String,
    },
    /// The report is older than the bound, by the store's clock.
    #[error("it was created at {} and is {} old by the store's clock, more than the bound of {}; use a newer report, or raise the bound on a report's age", created.to_rfc3339_opts(chrono::SecondsFormat::Secs, true), humantime::format_duration(*age), humantime::format_duration(*max_age))]
    Stale {
        /// The report's `creationTimestamp`.
        created: DateTime<Utc>,
        /// Its age by the store's clock (whole seconds).
        age: std::time::Duration,
        /// The bound.
        max_age: std::time::Duration,
    },
    /// The report was created before the lake descriptor was written: it describes an earlier
    /// lake at this root, or none.
    #[error("it was created at {}, before this lake's descriptor `{descriptor}` was written ({}); use a report created after the lake", created.to_rfc3339_opts(chrono::SecondsFormat::Secs, true), written.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))]
    OlderThanLake {
        /// The report's `creationTimestamp`.
        created: DateTime<Utc>,
        /// The descriptor's full bucket key.
        descriptor: String,
        /// The descriptor's `last_modified`.
        written: DateTime<Utc>,
    },
    /// The report does not list the lake descriptor, which exists before any object: it does
    /// not cover the lake's prefix (an inventory filtered to another prefix).
    #[error("it does not list the lake descriptor `{descriptor}`, so it does not cover this lake's prefix; configure the inventory on the lake's root prefix or the whole bucket")]
    NotCovering {
        /// The descriptor's full bucket key.
        descriptor: String,
    },
    /// A key under the lake root decodes to invalid UTF-8 or contains a control character.
    #[error("key {key:?} {reason}: S3 keys are UTF-8 and lake never writes control characters; the report is damaged")]
    BadKey {
        /// The key as read (escaped for display).
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}
