//! Writes an S3 Inventory report in AWS's documented layout from a real ListObjectsV2 listing
//! of a lake's bucket: for S3-compatible stores that have no S3 Inventory, for benchmarks, and
//! for tests (LocalStack accepts an inventory configuration but delivers no report).
//!
//! Layout (Amazon S3 user guide, "Locating your inventory list"), under the destination
//! `s3://<bucket>/<prefix>`:
//!
//! ```text
//! <prefix>/<source bucket>/<configuration id>/<YYYY-MM-DDTHH-MMZ>/manifest.json
//! <prefix>/<source bucket>/<configuration id>/<YYYY-MM-DDTHH-MMZ>/manifest.checksum
//! <prefix>/<source bucket>/<configuration id>/data/<uuid>.csv.gz   (or .parquet)
//! ```
//!
//! Rows are dealt round-robin over [`WriteOptions::data_files`] files, so that no file is a
//! contiguous key range and a reader must sort across files, as with AWS's reports (which
//! promise no order). Each data file is built in memory (compressed) before it is uploaded;
//! all of them are built at once, so memory is about the compressed report's size.

use super::csv_format::{self, CsvFileWriter};
use super::manifest::{md5_hex, ManifestDocument, ManifestFile, ReportFormat, MANIFEST_VERSION};
use super::parquet_format::{self, ParquetFileWriter};
use crate::error::GcError;
use chrono::{DateTime, Utc};
use lake_store::s3_requests::RawObject;
use lake_store::store::LakeStore;
use lake_store::StoreError;
use std::time::Duration;

/// A faithful report, or one of the damaged kinds tests need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportVariant {
    /// What AWS would deliver.
    Faithful,
    /// `creationTimestamp` moved `age` into the past (a report older than the bound).
    Stale {
        /// How much older than the listing it claims to be.
        age: Duration,
    },
    /// The first data file's stored bytes differ from the MD5 (and have the size) the manifest
    /// lists.
    CorruptDataFile,
}

/// What to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOptions {
    /// CSV or Parquet.
    pub format: ReportFormat,
    /// The inventory configuration's id (a folder of the layout). Two reports of one
    /// configuration created in the same minute share their manifest's folder (the layout's
    /// timestamp has minutes): the later one replaces the earlier one's manifest.
    pub configuration_id: String,
    /// The report's `creationTimestamp`; default: the store's clock when the listing starts
    /// (AWS: when it "begins scanning the bucket").
    pub created: Option<DateTime<Utc>>,
    /// The full bucket-key prefix the inventory lists (an inventory configuration's filter);
    /// default: the lake root's (`<root prefix>/`, or the whole bucket for a root at its top).
    pub source_prefix: Option<String>,
    /// Data files the rows are dealt over (at least 1; files that get no row are not written).
    pub data_files: usize,
    /// Faithful, stale or corrupt.
    pub variant: ReportVariant,
}

impl WriteOptions {
    /// A faithful report in `format` over 3 data files, configuration id `lake-gc`.
    pub fn new(format: ReportFormat) -> Self {
        Self {
            format,
            configuration_id: "lake-gc".into(),
            created: None,
            source_prefix: None,
            data_files: 3,
            variant: ReportVariant::Faithful,
        }
    }
}

/// A report written by [`write_report`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenReport {
    /// `s3://<bucket>/<...>/manifest.json`: what [`super::ReportInventory::open`] takes.
    pub manifest_url: String,
    /// The destination bucket.
    pub bucket: String,
    /// The manifest's key in the destination bucket.
    pub manifest_key: String,
    /// The manifest as written.
    pub manifest: ManifestDocument,
    /// Rows written (objects listed).
    pub rows: u64,
}

impl WrittenReport {
    /// The key of `manifest.checksum`, beside the manifest.
    pub fn checksum_key(&self) -> String {
        super::manifest::checksum_key(&self.manifest_key)
    }

    /// Replaces the manifest by `manifest` with a matching `manifest.checksum` (a report that
    /// passes the checksum check but says something else: another bucket, another format).
    ///
    /// # Errors
    /// [`StoreError::Root`](lake_store::StoreError::Root) for a destination bucket that cannot be opened, storage errors.
    pub async fn replace_manifest(&self, manifest: &ManifestDocument) -> Result<(), GcError> {
        let dest = LakeStore::open(&format!("s3://{}", self.bucket))?;
        put_manifest(&dest, &self.manifest_key, &self.checksum_key(), manifest).await
    }
}

async fn put_manifest(
    dest: &LakeStore,
    manifest_key: &str,
    checksum_key: &str,
    manifest: &ManifestDocument,
) -> Result<(), GcError> {
    let bytes = serde_json::to_vec_pretty(manifest).map_err(|e| GcError::storage(manifest_key, e))?;
    let checksum = md5_hex(&bytes);
    dest.put(manifest_key, bytes).await?;
    // AWS writes the checksum last: its presence says the report is complete.
    Ok(dest.put(checksum_key, checksum.into_bytes()).await?)
}

enum FileWriter {
    Csv(CsvFileWriter),
    Parquet(ParquetFileWriter),
}

impl FileWriter {
    fn new(format: ReportFormat, bucket: &str) -> Result<Self, GcError> {
        Ok(match format {
            ReportFormat::Csv => Self::Csv(CsvFileWriter::new(bucket)),
            ReportFormat::Parquet => Self::Parquet(ParquetFileWriter::new(bucket)?),
        })
    }

    fn push(&mut self, object: &RawObject) -> Result<(), GcError> {
        match self {
            Self::Csv(w) => w.push(object),
            Self::Parquet(w) => w.push(object),
        }
    }

    fn finish(self) -> Result<Vec<u8>, GcError> {
        match self {
            Self::Csv(w) => w.finish(),
            Self::Parquet(w) => w.finish(),
        }
    }
}

/// A UUID-shaped name (8-4-4-4-12 hex digits) from a fresh ULID's 128 bits.
fn uuid_name() -> String {
    let h = format!("{:032x}", ulid::Ulid::new().0);
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// Writes a report of the objects of `lake`'s bucket (under [`WriteOptions::source_prefix`]),
/// listed now with ListObjectsV2, to `destination` (`s3://bucket[/prefix]`, read and written
/// with the lake's S3 configuration), in the layout of the module documentation.
///
/// # Errors
/// [`StoreError::Root`](lake_store::StoreError::Root) for a local lake or a destination that is no `s3://` URL; storage
/// errors of the listing or the uploads.
pub async fn write_report(
    lake: &LakeStore,
    destination: &str,
    options: &WriteOptions,
) -> Result<WrittenReport, GcError> {
    let requests = lake.s3_requests().ok_or_else(|| {
        GcError::from(StoreError::Root {
            root: lake.display_root(),
            message: "an S3 Inventory report lists an S3 bucket; this lake is a local folder".into(),
        })
    })?;
    let (bucket, dest_prefix) = destination
        .strip_prefix("s3://")
        .map(|rest| rest.split_once('/').unwrap_or((rest, "")))
        .filter(|(bucket, _)| !bucket.is_empty())
        .ok_or_else(|| {
            GcError::from(StoreError::Root {
                root: destination.to_string(),
                message: "a report destination is s3://bucket[/prefix]".into(),
            })
        })?;
    let dest = lake.open_related(&format!("s3://{bucket}"))?;
    let source_bucket = lake.root().authority().to_string();
    let created = match options.created {
        Some(t) => t,
        None => lake_store::clock::read_store_clock(lake).await?.store_now,
    };
    let created = match options.variant {
        ReportVariant::Stale { age } => chrono::Duration::from_std(age)
            .ok()
            .and_then(|a| created.checked_sub_signed(a))
            .unwrap_or(DateTime::<Utc>::UNIX_EPOCH),
        _ => created,
    };
    let source_prefix = options.source_prefix.clone().unwrap_or_else(|| match lake.prefix().as_ref() {
        "" => String::new(),
        root => format!("{root}/"),
    });

    let n = options.data_files.max(1);
    let mut writers: Vec<(FileWriter, u64)> =
        (0..n).map(|_| FileWriter::new(options.format, &source_bucket).map(|w| (w, 0))).collect::<Result<_, _>>()?;
    let mut rows = 0u64;
    let mut after: Option<String> = None;
    loop {
        let page = requests.list_objects_v2(&source_prefix, after.as_deref(), 1000).await?;
        for object in &page.objects {
            let (writer, count) = &mut writers[(rows % n as u64) as usize];
            writer.push(object)?;
            *count += 1;
            rows += 1;
        }
        after = page.objects.last().map(|o| o.key.clone());
        if !page.truncated || after.is_none() {
            break;
        }
    }

    let base = match dest_prefix.trim_matches('/') {
        "" => format!("{source_bucket}/{}", options.configuration_id),
        p => format!("{p}/{source_bucket}/{}", options.configuration_id),
    };
    let mut files = Vec::new();
    for (writer, count) in writers {
        if count == 0 && !files.is_empty() {
            continue;
        }
        let bytes = writer.finish()?;
        let key = format!("{base}/data/{}{}", uuid_name(), options.format.extension());
        let md5_checksum = md5_hex(&bytes);
        let mut stored = bytes;
        if options.variant == ReportVariant::CorruptDataFile && files.is_empty() {
            let middle = stored.len() / 2;
            if let Some(b) = stored.get_mut(middle) {
                *b ^= 0xff;
            }
        }
        files.push(ManifestFile { key: key.clone(), size: stored.len() as u64, md5_checksum });
        dest.put(&key, stored).await?;
    }
    let manifest = ManifestDocument {
        source_bucket,
        destination_bucket: format!("arn:aws:s3:::{bucket}"),
        version: MANIFEST_VERSION.into(),
        creation_timestamp: created.timestamp_millis().to_string(),
        file_format: options.format.manifest_name().into(),
        file_schema: match options.format {
            ReportFormat::Csv => csv_format::WRITTEN_SCHEMA,
            ReportFormat::Parquet => parquet_format::WRITTEN_SCHEMA,
        }
        .into(),
        files,
    };
    let folder = format!("{base}/{}", created.format("%Y-%m-%dT%H-%MZ"));
    let written = WrittenReport {
        manifest_url: format!("s3://{bucket}/{folder}/manifest.json"),
        bucket: bucket.to_string(),
        manifest_key: format!("{folder}/manifest.json"),
        manifest,
        rows,
    };
    put_manifest(&dest, &written.manifest_key, &written.checksum_key(), &written.manifest).await?;
    Ok(written)
}
