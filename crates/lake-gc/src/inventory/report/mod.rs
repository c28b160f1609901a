//! Planning from an S3 Inventory report: [`ReportInventory`], an [`ObjectInventory`] that reads
//! the managed prefix from a report AWS delivered (a `manifest.json` and its data files) instead
//! of listing every object, and lists live only the keys minted after the report.
//!
//! A report as AWS documents it (Amazon S3 user guide, "Cataloging and analyzing your data with
//! S3 Inventory"): `<destination prefix>/<source bucket>/<configuration id>/<YYYY-MM-DDTHH-MMZ>/`
//! holds `manifest.json` and `manifest.checksum` (the MD5 of the manifest); the data files
//! (gzip CSV, Parquet or ORC) it lists are under `<...>/<configuration id>/data/`, each with its
//! MD5 ([`manifest`]). Rows carry at least `Key`, `Size` and `LastModifiedDate`. The manifest
//! may be in another bucket than the lake's (AWS's destination bucket); it and its data files
//! are read from the manifest URL's bucket, with the lake's S3 configuration.
//!
//! # Checks
//! Each refusal is an [`GcError::InventoryReport`] whose [`ReportProblem`] says what was
//! wrong and what to do; nothing is planned from a refused report. In order:
//! 1. `manifest.checksum` is the MD5 of `manifest.json`; the manifest decodes;
//! 2. `sourceBucket` is the lake's bucket (and so is every row's `Bucket`);
//! 3. `fileFormat` is CSV or Parquet (ORC is refused: lake does not read it);
//! 4. `fileSchema` has `Key`, `Size` and `LastModifiedDate`;
//! 5. the report is at most [`ReportOptions::max_age`] old by the store's clock
//!    ([`lake_store::clock::StoreClock`]), and was created after the lake descriptor was written;
//! 6. every data file has the MD5 (of its bytes as stored) and size the manifest lists, and
//!    decodes; a key under the lake root is UTF-8 (after URL decoding, for CSV) without
//!    control characters;
//! 7. the report lists the lake descriptor (`<root>/_lake/lake.json`), which exists before any
//!    object: a report of another prefix does not.
//!
//! For a report of all versions (`IsLatest`, `IsDeleteMarker` present), only current versions
//! that are not delete markers count.
//!
//! # The merge rule and its margin
//! AWS: "Inventory lists are a rolling snapshot of bucket items, which are eventually
//! consistent (that is, the list might not include recently added or deleted objects)", and
//! `creationTimestamp` is when AWS began scanning the bucket. So the report is trusted for keys
//! minted well before it: with B = [`first_key_at`]`(creationTimestamp - margin)`, the
//! inventory yields the report's entries with keys up to B, then a live ListObjectsV2 listing
//! ([`S3Inventory`]) of the keys after B. Managed keys sort by mint time, so that listing covers
//! exactly the objects minted since B, and the planner stops it at the cutoff. The margin
//! ([`DEFAULT_MARGIN`], 48 h) bounds how late the scan may have been; it only matters for
//! completeness, never for safety:
//! - an object the report missed is no candidate (the next report lists it);
//! - an object deleted since the report may be a candidate: deleting it again is harmless, and
//!   apply counts it done (`absent` on S3: DeleteObjects confirms the key gone);
//! - liveness comes from the journal, never from the report, and apply revalidates as always.
//!
//! With the usual horizon (`--min-age 7d`) and a daily report, the cutoff is days before B and
//! the planner never reaches the live listing: a plan costs the report's download, not one
//! LIST request per 1,000 objects.
//!
//! # Memory
//! Data files are downloaded to local temporary files (at most [`DOWNLOADS_AHEAD`] at once)
//! and decoded one at a time; AWS's rows are in no order, so the kept entries go through an
//! external sort within [`ReportOptions::memory_budget`] into one sorted local file
//! ([`sorted`]), which every listing reads from its start key.
//!
//! # Writing reports
//! [`writer::write_report`] writes a report in AWS's layout from a real listing (for
//! S3-compatible stores without S3 Inventory, and for tests: LocalStack accepts an inventory
//! configuration but delivers no report).
//!
//! Size: about 520 lines, 60 of them this documentation of the checks and the merge rule;
//! `open_with_clock` takes a report through the seven checks and `Merge` joins it with the live
//! listing, one contract kept together (formats, manifest, sort and writer are submodules).

pub mod csv_format;
pub mod deferred;
pub mod manifest;
pub mod parquet_format;
mod problem;
pub mod rows;
pub mod sorted;
pub mod writer;

pub use manifest::ReportFormat;
pub use problem::ReportProblem;

use super::s3::S3Inventory;
use super::{EntryKind, InventoryEntry, InventoryPage, ObjectInventory};
use crate::error::GcError;
use crate::inventory::Foreign;
use chrono::{DateTime, Utc};
use futures::stream::{BoxStream, StreamExt};
use lake_store::clock::{ProbeClock, StoreClock};
use lake_store::keys::first_key_at;
use lake_store::layout::DESCRIPTOR_KEY;
use lake_store::store::LakeStore;
use lake_store::StoreError;
use manifest::{Manifest, ManifestFile};
use md5::Digest;
use object_store::ObjectStoreExt;
use rows::Sink;
use sorted::{SortedReader, SortedReport};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The default bound on a report's age: 9 days. AWS delivers reports daily or weekly; a weekly
/// report is 7 days old when the next one is due, and delivery may take up to 48 hours (AWS:
/// "It might take up to 48 hours for Amazon S3 to deliver the first inventory report").
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(9 * 24 * 3600);

/// The default margin before a report's `creationTimestamp` from which keys are listed live
/// instead of read from the report: 48 hours, the delivery delay AWS documents, as a bound on
/// how long its eventually consistent scan may lag (see the module documentation).
pub const DEFAULT_MARGIN: Duration = Duration::from_secs(48 * 3600);

/// Data files downloaded ahead of the one being decoded (each to a local temporary file).
pub const DOWNLOADS_AHEAD: usize = 4;

/// How a report is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportOptions {
    /// Reports older than this by the store's clock are refused ([`DEFAULT_MAX_AGE`]).
    pub max_age: Duration,
    /// Keys minted after `creationTimestamp - margin` are listed live ([`DEFAULT_MARGIN`]).
    pub margin: Duration,
    /// Bytes of report entries held in memory while sorting, before they spill to sorted runs
    /// in the temporary folder (`TMPDIR`).
    pub memory_budget: usize,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            max_age: DEFAULT_MAX_AGE,
            margin: DEFAULT_MARGIN,
            memory_budget: lake_engine::budget::share(lake_engine::budget::DEFAULT_MEMORY_BUDGET).1,
        }
    }
}

/// What a report held and how listings used it (for the plan's output).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReportSummary {
    /// The manifest's URL.
    pub manifest: String,
    /// The data files' format.
    pub format: ReportFormat,
    /// The report's `creationTimestamp`, RFC 3339 UTC.
    pub created: String,
    /// The merge boundary: report entries with keys up to it, live listing after it.
    pub boundary: String,
    /// Data files read.
    pub data_files: u64,
    /// Their bytes, as stored.
    pub data_bytes: u64,
    /// Rows read.
    pub rows: u64,
    /// Distinct keys under `objects/` up to the boundary: the report's entries.
    pub report_entries: u64,
    /// Rows under `objects/` after the boundary (listed live instead).
    pub after_boundary: u64,
    /// Rows of non-current versions and delete markers (skipped).
    pub versions_skipped: u64,
    /// Entries listings took from the report so far.
    pub from_report: u64,
    /// Entries listings took from the live listing so far.
    pub from_listing: u64,
    /// ListObjectsV2 requests of the live listing so far.
    pub listing_requests: u64,
}

/// The inventory of an S3 lake's managed prefix from an S3 Inventory report (see the module
/// documentation). Cheap to clone: clones share the report's sorted file and counters.
#[derive(Debug, Clone)]
pub struct ReportInventory {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    listing: S3Inventory,
    sorted: SortedReport,
    boundary: String,
    summary: ReportSummary,
    from_report: AtomicU64,
    from_listing: AtomicU64,
    listing_requests: AtomicU64,
}

/// `s3://bucket/key` split, or a refusal naming the URL.
fn parse_url(url: &str) -> Result<(String, String), GcError> {
    let refuse = || {
        GcError::from(StoreError::Root {
            root: format!("inventory report `{url}`"),
            message: "an S3 Inventory report is named by its manifest: s3://bucket/path/manifest.json".into(),
        })
    };
    let rest = url.strip_prefix("s3://").ok_or_else(refuse)?;
    let (bucket, key) = rest.split_once('/').ok_or_else(refuse)?;
    if bucket.is_empty() || key.is_empty() || key.ends_with('/') {
        return Err(refuse());
    }
    Ok((bucket.to_string(), key.to_string()))
}

/// A spawned task aborted when dropped (a refused report stops the downloads ahead).
struct Spawned<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Spawned<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> std::future::Future for Spawned<T> {
    type Output = Result<T, tokio::task::JoinError>;
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

/// Downloads the data file `file` of the report `manifest` from `dest` (the bucket `bucket`) to
/// a local temporary file, checking its MD5 and size.
async fn download(
    dest: &LakeStore,
    manifest: &str,
    bucket: &str,
    file: &ManifestFile,
) -> Result<tempfile::NamedTempFile, GcError> {
    use std::io::Write;
    let url = format!("s3://{bucket}/{}", file.key);
    let refuse = |problem| GcError::report(manifest, problem);
    let result = match dest.object_store().get(&dest.path(&file.key)).await {
        Ok(r) => r,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(refuse(ReportProblem::Missing { what: "data file", url }));
        }
        Err(e) => return Err(GcError::storage(url, e)),
    };
    let tmp_dir = std::env::temp_dir().display().to_string();
    let io = |source| GcError::from(StoreError::Io { path: tmp_dir.clone(), source });
    let mut tmp = tempfile::Builder::new().prefix("lake-inventory-data-").tempfile().map_err(io)?;
    let mut md5 = md5::Md5::new();
    let mut size = 0u64;
    let mut stream = result.into_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| GcError::storage(url.clone(), e))?;
        md5.update(&chunk);
        size += chunk.len() as u64;
        tmp.write_all(&chunk).map_err(io)?;
    }
    tmp.flush().map_err(io)?;
    let actual = hex::encode(md5.finalize());
    if actual != file.md5_checksum {
        return Err(refuse(ReportProblem::DataFileChecksum {
            file: file.key.clone(),
            expected: file.md5_checksum.clone(),
            actual,
        }));
    }
    if size != file.size {
        return Err(refuse(ReportProblem::DataFile {
            file: file.key.clone(),
            message: format!("it has {size} bytes, the manifest lists {}", file.size),
        }));
    }
    Ok(tmp)
}

impl ReportInventory {
    /// Reads and checks the report whose manifest is at `manifest_url`
    /// (`s3://bucket/.../manifest.json`, in any bucket the lake's S3 configuration can read) for
    /// the lake in `store`, judging its age by the store's clock ([`ProbeClock`]).
    ///
    /// # Errors
    /// [`GcError::InventoryReport`] for every check of the module documentation;
    /// [`StoreError::Root`](lake_store::StoreError::Root) for a local lake or a URL that names no manifest;
    /// [`StoreError::NotALake`](lake_store::StoreError::NotALake) without a lake descriptor; storage and local file errors.
    pub async fn open(store: &LakeStore, manifest_url: &str, options: &ReportOptions) -> Result<Self, GcError> {
        Self::open_with_clock(store, manifest_url, options, &ProbeClock).await
    }

    /// As [`ReportInventory::open`], reading "now" from `clock` (tests of the age bound).
    ///
    /// # Errors
    /// As [`ReportInventory::open`].
    pub async fn open_with_clock(
        store: &LakeStore,
        manifest_url: &str,
        options: &ReportOptions,
        clock: &dyn StoreClock,
    ) -> Result<Self, GcError> {
        if store.s3_requests().is_none() {
            return Err(GcError::from(StoreError::Root {
                root: store.display_root(),
                message: "an S3 Inventory report describes an S3 bucket, and this lake is a local folder; plan from its own listing, without the report".into(),
            }));
        }
        let (bucket, key) = parse_url(manifest_url)?;
        let refuse = |problem| GcError::report(manifest_url, problem);
        // The destination bucket, with the lake's S3 configuration.
        let dest = store.open_related(&format!("s3://{bucket}"))?;
        let checksum_key = manifest::checksum_key(&key);
        let missing = |what, key: &str| refuse(ReportProblem::Missing { what, url: format!("s3://{bucket}/{key}") });
        let manifest_bytes = dest.get(&key).await?.ok_or_else(|| missing("manifest.json", &key))?;
        let checksum = dest.get(&checksum_key).await?.ok_or_else(|| missing("manifest.checksum", &checksum_key))?;
        let lake_bucket = store.root().authority().to_string();
        let manifest = Manifest::parse(&manifest_bytes, &checksum, &lake_bucket).map_err(refuse)?;

        let now = clock.read(store).await?.store_now;
        let age = (now - manifest.created).to_std().unwrap_or(Duration::ZERO);
        if age > options.max_age {
            return Err(refuse(ReportProblem::Stale {
                created: manifest.created,
                age: Duration::from_secs(age.as_secs()),
                max_age: options.max_age,
            }));
        }
        let root_prefix = store.prefix().as_ref().to_string();
        let descriptor = store.head(DESCRIPTOR_KEY).await?.ok_or_else(|| {
            GcError::from(StoreError::NotALake { root: store.display_root(), key: DESCRIPTOR_KEY.into() })
        })?;
        // (A HEAD's `last_modified` has whole seconds on S3: a report begun in the descriptor's
        // second passes, and lists the descriptor only if it saw it.)
        if manifest.created < descriptor.last_modified {
            return Err(refuse(ReportProblem::OlderThanLake {
                created: manifest.created,
                descriptor: store.path(DESCRIPTOR_KEY).to_string(),
                written: descriptor.last_modified,
            }));
        }

        let since = chrono::Duration::from_std(options.margin)
            .ok()
            .and_then(|m| manifest.created.checked_sub_signed(m))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let boundary = first_key_at(since);
        let mut sink = Sink::new(manifest_url, &lake_bucket, &root_prefix, boundary.clone(), options.memory_budget);
        let data_bytes = manifest.files.iter().map(|f| f.size).sum();
        let mut downloads = futures::stream::iter(manifest.files.clone())
            .map(|file| {
                let (dest, url, bucket) = (dest.clone(), manifest_url.to_string(), bucket.clone());
                Spawned(tokio::spawn(async move {
                    let tmp = download(&dest, &url, &bucket, &file).await?;
                    Ok::<_, GcError>((file, tmp))
                }))
            })
            .buffered(DOWNLOADS_AHEAD);
        while let Some(joined) = downloads.next().await {
            let (file, tmp) = joined.map_err(|e| GcError::storage(manifest_url, e))??;
            let (format, columns) = (manifest.format, manifest.columns);
            let decoded = tokio::task::spawn_blocking(move || {
                let mut sink = sink;
                match format {
                    ReportFormat::Csv => csv_format::read(tmp.path(), &columns, &file.key, &mut sink),
                    ReportFormat::Parquet => parquet_format::read(tmp.path(), &file.key, &mut sink),
                }
                .map(|()| sink)
            });
            sink = decoded.await.map_err(|e| GcError::storage(manifest_url, e))??;
        }
        if !sink.descriptor_listed {
            return Err(refuse(ReportProblem::NotCovering { descriptor: sink.descriptor_key().to_string() }));
        }
        let counts = sink.counts;
        let sorted = tokio::task::spawn_blocking(move || SortedReport::build(sink.into_runs()))
            .await
            .map_err(|e| GcError::storage(manifest_url, e))??;
        let summary = ReportSummary {
            manifest: manifest_url.to_string(),
            format: manifest.format,
            created: crate::planner::format_time(manifest.created),
            boundary: boundary.clone(),
            data_files: manifest.files.len() as u64,
            data_bytes,
            rows: counts.rows,
            report_entries: sorted.len(),
            after_boundary: counts.after_boundary,
            versions_skipped: counts.versions_skipped,
            from_report: 0,
            from_listing: 0,
            listing_requests: 0,
        };
        tracing::info!(manifest = manifest_url, rows = counts.rows, entries = sorted.len(), %boundary, "read an S3 Inventory report");
        Ok(Self {
            inner: Arc::new(Inner {
                listing: S3Inventory::new(store.clone()),
                sorted,
                boundary,
                summary,
                from_report: AtomicU64::new(0),
                from_listing: AtomicU64::new(0),
                listing_requests: AtomicU64::new(0),
            }),
        })
    }

    /// The merge boundary: report entries with keys up to it (inclusive), the live listing
    /// after it.
    pub fn boundary(&self) -> &str {
        &self.inner.boundary
    }

    /// What the report held, and the counters of the listings so far.
    pub fn summary(&self) -> ReportSummary {
        let i = &self.inner;
        ReportSummary {
            from_report: i.from_report.load(Ordering::Relaxed),
            from_listing: i.from_listing.load(Ordering::Relaxed),
            listing_requests: i.listing_requests.load(Ordering::Relaxed),
            ..i.summary.clone()
        }
    }
}

/// One listing: the report's entries after the start key up to the boundary, then the live
/// listing after both.
struct Merge<'a> {
    inner: &'a Inner,
    after: Option<String>,
    report: Option<SortedReader>,
    report_done: bool,
    live: Option<BoxStream<'a, Result<InventoryPage, GcError>>>,
    live_buffer: VecDeque<InventoryEntry>,
    live_done: bool,
}

impl Merge<'_> {
    /// The next page of up to `limit` entries, and whether more may follow.
    async fn page(&mut self, limit: usize) -> Result<(Vec<InventoryEntry>, bool), GcError> {
        let mut entries = Vec::with_capacity(limit.min(1024));
        if !self.report_done {
            let reader = match &mut self.report {
                Some(r) => r,
                None => self.report.insert(self.inner.sorted.reader(self.after.as_deref())?),
            };
            while entries.len() < limit {
                let Some(r) = reader.next_record()? else {
                    self.report_done = true;
                    break;
                };
                let kind =
                    if r.key.ends_with('/') { EntryKind::Foreign(Foreign::FolderMarker) } else { EntryKind::Object };
                let last_modified =
                    DateTime::<Utc>::from_timestamp_millis(r.last_modified_ms).unwrap_or(DateTime::<Utc>::MIN_UTC);
                entries.push(InventoryEntry { key: r.key, size: r.size, last_modified, kind });
            }
            self.inner.from_report.fetch_add(entries.len() as u64, Ordering::Relaxed);
        }
        let from_report = entries.len();
        while entries.len() < limit {
            if let Some(e) = self.live_buffer.pop_front() {
                entries.push(e);
                continue;
            }
            if self.live_done {
                break;
            }
            let inner = self.inner;
            let start = match &self.after {
                Some(a) if a.as_str() > inner.boundary.as_str() => a.clone(),
                _ => inner.boundary.clone(),
            };
            let live = self.live.get_or_insert_with(|| inner.listing.list_from(Some(start), limit));
            match live.next().await {
                Some(Ok(page)) => {
                    inner.listing_requests.fetch_add(1, Ordering::Relaxed);
                    self.live_done = page.next.is_none();
                    self.live_buffer.extend(page.entries);
                }
                Some(Err(e)) => return Err(e),
                None => self.live_done = true,
            }
        }
        self.inner.from_listing.fetch_add((entries.len() - from_report) as u64, Ordering::Relaxed);
        let more = !(self.report_done && self.live_done && self.live_buffer.is_empty());
        Ok((entries, more))
    }
}

impl ObjectInventory for ReportInventory {
    /// The report's entries after `after` up to the boundary, then ListObjectsV2 pages after
    /// both; pages of up to `page_size` entries fill across the boundary. Nothing is listed live
    /// before the report's part is exhausted.
    fn list_from(&self, after: Option<String>, page_size: usize) -> BoxStream<'_, Result<InventoryPage, GcError>> {
        let limit = page_size.max(1);
        let merge = Merge {
            inner: &self.inner,
            after,
            report: None,
            report_done: false,
            live: None,
            live_buffer: VecDeque::new(),
            live_done: false,
        };
        futures::stream::unfold(Some(merge), move |merge| async move {
            let mut merge = merge?;
            match merge.page(limit).await {
                Ok((entries, more)) => {
                    let next = if more { entries.last().map(|e| e.key.clone()) } else { None };
                    let page = InventoryPage { entries, next, links: Vec::new() };
                    Some((Ok(page), more.then_some(merge)))
                }
                Err(e) => Some((Err(e), None)),
            }
        })
        .fuse()
        .boxed()
    }

    /// The live listing's own garbage (clock probes and multipart uploads are in no report).
    fn own_garbage(
        &self,
        cutoff: DateTime<Utc>,
    ) -> futures::future::BoxFuture<'_, Result<Vec<InventoryEntry>, GcError>> {
        self.inner.listing.own_garbage(cutoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_urls_name_a_bucket_and_key() {
        assert_eq!(
            parse_url("s3://dest/inv/src/cfg/2026-01-01T00-00Z/manifest.json").unwrap(),
            ("dest".to_string(), "inv/src/cfg/2026-01-01T00-00Z/manifest.json".to_string())
        );
        for bad in ["dest/manifest.json", "s3://dest", "s3://dest/", "s3:///m.json", "s3://dest/folder/"] {
            assert!(matches!(parse_url(bad), Err(GcError::Store(lake_store::StoreError::Root { .. }))), "{bad}");
        }
    }
}
