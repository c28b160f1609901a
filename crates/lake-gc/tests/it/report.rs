//! Planning from S3 Inventory reports (`lake_gc::inventory::report`) on LocalStack: reports
//! written in AWS's layout from a real listing of the lake's bucket (LocalStack accepts an
//! inventory configuration but delivers no report) into another bucket, in CSV and Parquet;
//! plans from them against plans from a full listing on a lake written before and after the
//! report; an object deleted after the report; and every refusal. Ignored by a plain
//! `cargo test`.

use crate::conformance::{s3_root, S3_SERIAL};
use crate::s3_requests::{create_bucket, put_raw};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use lake_engine::memory::MemoryEngine;
use lake_gc::checkpoint::CheckpointLocation;
use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings, Planned};
use lake_gc::inventory::report::writer::{write_report, ReportVariant, WriteOptions, WrittenReport};
use lake_gc::inventory::report::{ReportFormat, ReportInventory, ReportOptions, ReportProblem};
use lake_gc::inventory::s3::S3Inventory;
use lake_gc::inventory::{InventoryEntry, ObjectInventory};
use lake_gc::GcError;
use lake_store::clock::FixedClock;
use lake_store::descriptor::LakeDescriptor;
use lake_store::writer::{ManagedObject, ManagedObjectWriter};
use lake_store::LakeStore;
use std::time::Duration;

/// The bucket reports are written to: not the lake's, as AWS allows.
const REPORTS_BUCKET: &str = "lake-test-reports";

struct Lake {
    store: LakeStore,
    writer: ManagedObjectWriter,
    engine: MemoryEngine,
    /// `s3://<reports bucket>/<unique prefix>`.
    destination: String,
}

async fn lake(name: &str) -> Lake {
    create_bucket(REPORTS_BUCKET).await;
    let root = s3_root(name);
    let store = LakeStore::open(&root).unwrap();
    LakeDescriptor::create(&store, Duration::from_secs(1)).await.unwrap();
    let destination = format!("s3://{REPORTS_BUCKET}/inventory-{}", ulid::Ulid::new().to_string().to_lowercase());
    Lake { writer: ManagedObjectWriter::new(store.clone()), store, engine: MemoryEngine::new(), destination }
}

async fn upload(l: &Lake, name: String) -> ManagedObject {
    l.writer.upload(&name, format!("content of {name}").as_bytes()).await.unwrap()
}

/// Reads reports with no margin (every key minted before the report is read from it), sorting
/// through runs of a few KiB (spilled).
fn options() -> ReportOptions {
    ReportOptions { margin: Duration::ZERO, memory_budget: 4096, ..ReportOptions::default() }
}

async fn report(l: &Lake, format: ReportFormat, created: DateTime<Utc>) -> WrittenReport {
    // One configuration per format: reports of one configuration created in the same minute
    // share their manifest's folder.
    let options = WriteOptions {
        configuration_id: format!("lake-gc-{}", format.manifest_name().to_lowercase()),
        created: Some(created),
        data_files: 3,
        ..WriteOptions::new(format)
    };
    write_report(&l.store, &l.destination, &options).await.unwrap()
}

/// A plan at the store clock `at` (min_age 1s), from `inventory` (the lake's own listing when
/// `None`), listing `page_size` keys a request.
async fn plan(l: &Lake, inventory: Option<ReportInventory>, at: DateTime<Utc>, page_size: usize) -> Planned {
    let settings = PlanSettings { inventory_page_size: page_size, memory_budget: 4096, ..PlanSettings::default() };
    collector(l, inventory, at).await.plan(&Horizon::new(Duration::from_secs(1)), &settings).await.unwrap()
}

/// The collector of [`plan`].
async fn collector(l: &Lake, inventory: Option<ReportInventory>, at: DateTime<Utc>) -> GarbageCollector<'_> {
    let gc = GarbageCollector::open(l.store.clone(), &l.engine).await.unwrap().with_unchecked_clock(FixedClock(at));
    match inventory {
        Some(inventory) => gc.with_inventory(Box::new(inventory)),
        None => gc,
    }
}

/// The candidate keys of a plan made as four shards in one process, in shard order, at a
/// cutoff 20 ms after the last object the test wrote was written (so that the shards' time
/// ranges split the objects written by the test, however long the test took since: a cutoff
/// from "now" put every object in the first shard on a loaded machine; the objects written after
/// the reports lie past the first quarter of the range); at least two shards have candidates.
async fn sharded_keys(l: &Lake, inventory: Option<ReportInventory>) -> Vec<String> {
    let listed = l.store.list_all("objects/").await.unwrap();
    let minted = listed.iter().filter_map(|(key, _)| lake_store::keys::minted_at(key));
    let written = listed.iter().map(|(_, meta)| meta.last_modified);
    let last = minted.chain(written).max().unwrap();
    let at = last + chrono::Duration::milliseconds(1020);
    let settings = PlanSettings { memory_budget: 4096, ..PlanSettings::default() };
    let gc = collector(l, inventory, at).await;
    let sharded = gc.plan_sharded(&Horizon::new(Duration::from_secs(1)), &settings, 4).await.unwrap();
    assert_eq!(sharded.plan.plans.len(), 4);
    let used = sharded.plan.plans.iter().filter(|p| !p.candidates.is_empty()).count();
    assert!(used >= 2, "the objects fell in {used} shard(s)");
    sharded.plan.plans.iter().flat_map(|p| p.candidates.keys().unwrap()).collect()
}

fn keys(p: &Planned) -> Vec<String> {
    p.plan.candidates.keys().unwrap()
}

/// Every entry of `inventory` from `after`, through pages of `page_size`.
async fn entries(inventory: &dyn ObjectInventory, after: Option<&str>, page_size: usize) -> Vec<InventoryEntry> {
    let mut pages = inventory.list_from(after.map(str::to_string), page_size);
    let mut out = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.unwrap();
        assert!(page.entries.len() <= page_size);
        out.extend(page.entries);
    }
    out
}

fn problem(result: Result<ReportInventory, GcError>) -> ReportProblem {
    match result {
        Err(GcError::InventoryReport { problem, .. }) => *problem,
        Err(other) => panic!("not a report refusal: {other}"),
        Ok(_) => panic!("the report was accepted"),
    }
}

/// Plans from an inventory, from a single listing and from a parallel listing are identical
/// (candidates, foreign entries, digest), and so are the candidates of sharded plans from the
/// listing and from the report, on a lake with objects written before and after the report, in
/// CSV and Parquet; the report's entries and the live listing after it concatenate to the listing from
/// any start key.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_plans_from_a_report_equal_plans_from_a_listing() {
    let _serial = S3_SERIAL.lock().await;
    let l = lake("report-equal").await;
    let before: Vec<ManagedObject> = futures::future::join_all((0..12).map(|i| upload(&l, format!("b{i}")))).await;
    let id = |o: &ManagedObject| o.identity();
    l.engine.append("t", &before[..5].iter().map(id).collect::<Vec<_>>());
    // A folder marker (foreign), an unmanaged key and a key with characters CSV URL-encodes.
    let ulid = before[0].key.split('/').nth(1).unwrap().to_string();
    put_raw(&l.store, &format!("{}/objects/{ulid}/marker/", l.store.prefix()), b"").await;
    l.store.put(&format!("objects/{ulid}/a b+c%d"), b"odd".to_vec()).await.unwrap();
    l.store.put("objects/0-unmanaged.bin", b"stray".to_vec()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let created = Utc::now();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let csv = report(&l, ReportFormat::Csv, created).await;
    let parquet = report(&l, ReportFormat::Parquet, created).await;
    assert_eq!(csv.manifest.files.len(), 3, "rows dealt over three data files");
    assert!(csv.manifest_url.starts_with(&format!("{}/{}/lake-gc-csv/", l.destination, l.store.root().authority())));

    let after: Vec<ManagedObject> = futures::future::join_all((0..6).map(|i| upload(&l, format!("a{i}")))).await;
    l.engine.append("t", &after[..2].iter().map(id).collect::<Vec<_>>());
    l.engine.delete("t", &[id(&before[1])]);
    l.engine.cleanup("t", |_| false); // only the latest version is retained: b1 is an orphan
    let at = Utc::now() + chrono::Duration::seconds(60);

    let listed = plan(&l, None, at, 1000).await;
    assert!(listed.plan.lineage_complete);
    let mut want: Vec<String> =
        before[1..2].iter().chain(&before[5..]).chain(&after[2..]).map(|o| o.key.clone()).collect();
    want.sort();
    assert_eq!(keys(&listed), want);
    assert_eq!(listed.plan.foreign_count, 1);
    // The same plan from one listing stream and from eight (the default on S3), and as shards.
    // Pages of 1000 keys: LocalStack decodes a `+` in `start-after` as a space (S3 does not),
    // so a page that ends on `a b+c%d` would list it again (and the listing be refused).
    for list_streams in [1, 8] {
        let settings = PlanSettings { memory_budget: 4096, list_streams, ..PlanSettings::default() };
        let streamed =
            collector(&l, None, at).await.plan(&Horizon::new(Duration::from_secs(1)), &settings).await.unwrap();
        assert_eq!(
            streamed.plan.canonical_bytes().unwrap(),
            listed.plan.canonical_bytes().unwrap(),
            "{list_streams} streams"
        );
    }
    assert_eq!(sharded_keys(&l, None).await, want);

    let all = entries(&S3Inventory::new(l.store.clone()), None, 1000).await;
    assert_ne!(csv.manifest_url, parquet.manifest_url);
    for written in [&csv, &parquet] {
        let inventory = ReportInventory::open(&l.store, &written.manifest_url, &options()).await.unwrap();
        let planned = plan(&l, Some(inventory.clone()), at, 7).await;
        assert_eq!(keys(&planned), want, "{}", written.manifest.file_format);
        assert_eq!(planned.plan.foreign, listed.plan.foreign);
        assert_eq!(planned.plan.digest().unwrap(), listed.plan.digest().unwrap());
        assert_eq!(planned.plan.canonical_bytes().unwrap(), listed.plan.canonical_bytes().unwrap());
        let summary = inventory.summary();
        assert_eq!(summary.report_entries, 15, "12 objects, the marker, the odd and the unmanaged key");
        assert_eq!((summary.from_report, summary.from_listing), (15, 6), "{summary:?}");
        assert_eq!(summary.data_files, 3);
        // Shards from the report (after the summary: clones share its counters).
        assert_eq!(sharded_keys(&l, Some(inventory.clone())).await, want, "shards from the report");

        // The inventory itself: the report's part and the live part concatenate to the listing,
        // from any start key and with any page size.
        let report_only = ReportInventory::open(&l.store, &written.manifest_url, &options()).await.unwrap();
        assert_eq!(entries(&report_only, None, 4).await, all);
        for (i, start) in [0, 7, 14, 15, 16, 20].into_iter().enumerate() {
            let start = all[start].key.as_str();
            let want: Vec<InventoryEntry> = all.iter().filter(|e| e.key.as_str() > start).cloned().collect();
            assert_eq!(entries(&report_only, Some(start), 1 + i % 3).await, want, "after {start}");
        }
    }
}

/// An object deleted after the report is still in it: it is a candidate, and apply counts its
/// delete as done (S3's DeleteObjects confirms the key gone).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_an_object_deleted_after_the_report_is_planned_and_applied_as_done() {
    let _serial = S3_SERIAL.lock().await;
    let l = lake("report-deleted").await;
    let gone = upload(&l, "gone".into()).await;
    let orphan = upload(&l, "orphan".into()).await;
    let live = upload(&l, "live".into()).await;
    l.engine.append("t", &[live.identity()]);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let written = report(&l, ReportFormat::Csv, Utc::now()).await;
    l.store.delete(&gone.key).await.unwrap();
    let at = Utc::now() + chrono::Duration::seconds(60);

    let listed = plan(&l, None, at, 1000).await;
    assert_eq!(keys(&listed), vec![orphan.key.clone()]);
    let inventory = ReportInventory::open(&l.store, &written.manifest_url, &options()).await.unwrap();
    let planned = plan(&l, Some(inventory.clone()), at, 1000).await;
    let mut want = vec![gone.key.clone(), orphan.key.clone()];
    want.sort();
    assert_eq!(keys(&planned), want);

    let dir = tempfile::tempdir().unwrap();
    let checkpoint = CheckpointLocation::parse(dir.path().join("gc.ckpt").to_str().unwrap()).unwrap();
    let gc = GarbageCollector::open(l.store.clone(), &l.engine)
        .await
        .unwrap()
        .with_unchecked_clock(FixedClock(at))
        .with_inventory(Box::new(inventory));
    let applied =
        gc.apply(&planned.plan, &Horizon::new(Duration::from_secs(1)), &checkpoint, &Default::default()).await.unwrap();
    let c = &applied.checkpoint;
    assert!(c.complete && c.failed.is_empty(), "{c:?}");
    assert_eq!(c.deleted + c.already_gone + c.absent, 2);
    assert!(l.store.head(&orphan.key).await.unwrap().is_none());
    assert!(l.store.head(&live.key).await.unwrap().is_some());
}

/// Every refusal plans nothing and names what was wrong: a corrupt data file, a manifest whose
/// checksum does not match, another bucket's report, a stale report, one older than the lake,
/// ORC, a schema without Size, a report that does not list the lake descriptor, a local lake.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_bad_reports_are_refused() {
    let _serial = S3_SERIAL.lock().await;
    let l = lake("report-refusals").await;
    upload(&l, "orphan".into()).await;
    let now = Utc::now();
    let write = |configuration: &str, variant: ReportVariant| WriteOptions {
        configuration_id: configuration.into(),
        created: Some(now),
        variant,
        ..WriteOptions::new(ReportFormat::Csv)
    };
    let open = |url: String| {
        let store = l.store.clone();
        async move { ReportInventory::open(&store, &url, &options()).await }
    };

    let corrupt =
        write_report(&l.store, &l.destination, &write("corrupt", ReportVariant::CorruptDataFile)).await.unwrap();
    let p = problem(open(corrupt.manifest_url.clone()).await);
    assert!(
        matches!(&p, ReportProblem::DataFileChecksum { file, .. } if *file == corrupt.manifest.files[0].key),
        "{p}"
    );

    let stale = ReportVariant::Stale { age: Duration::from_secs(30 * 24 * 3600) };
    let stale = write_report(&l.store, &l.destination, &write("stale", stale)).await.unwrap();
    let p = problem(open(stale.manifest_url.clone()).await);
    assert!(matches!(p, ReportProblem::Stale { .. }), "{p}");
    assert!(p.to_string().contains("raise the bound on a report's age"), "{p}");
    let relaxed = ReportOptions { max_age: Duration::from_secs(40 * 24 * 3600), ..options() };
    let p = problem(ReportInventory::open(&l.store, &stale.manifest_url, &relaxed).await);
    assert!(matches!(p, ReportProblem::OlderThanLake { .. }), "a report from before the lake: {p}");

    let faithful = write_report(&l.store, &l.destination, &write("faithful", ReportVariant::Faithful)).await.unwrap();
    assert!(open(faithful.manifest_url.clone()).await.is_ok());
    let dest = LakeStore::open(&format!("s3://{REPORTS_BUCKET}")).unwrap();
    dest.put(&faithful.checksum_key(), b"0123456789abcdef0123456789abcdef".to_vec()).await.unwrap();
    let p = problem(open(faithful.manifest_url.clone()).await);
    assert!(matches!(p, ReportProblem::ManifestChecksum { .. }), "{p}");

    let edited = |configuration: &'static str,
                  edit: fn(&mut lake_gc::inventory::report::manifest::ManifestDocument)| {
        let store = l.store.clone();
        let options = write(configuration, ReportVariant::Faithful);
        let destination = l.destination.clone();
        async move {
            let written = write_report(&store, &destination, &options).await.unwrap();
            let mut manifest = written.manifest.clone();
            edit(&mut manifest);
            written.replace_manifest(&manifest).await.unwrap();
            written.manifest_url
        }
    };
    let p = problem(open(edited("orc", |m| m.file_format = "ORC".into()).await).await);
    assert!(matches!(p, ReportProblem::UnsupportedFormat { .. }) && p.to_string().contains("CSV or Parquet"), "{p}");
    let p = problem(
        open(edited("no-size", |m| m.file_schema = "Bucket, Key, LastModifiedDate, ETag, X".into()).await).await,
    );
    assert!(matches!(&p, ReportProblem::MissingFields { missing, .. } if *missing == vec!["Size"]), "{p}");

    // A report of a lake in another bucket.
    let other_root = format!("s3://{REPORTS_BUCKET}/other-lake-{}", ulid::Ulid::new().to_string().to_lowercase());
    let other = LakeStore::open(&other_root).unwrap();
    LakeDescriptor::create(&other, Duration::from_secs(1)).await.unwrap();
    let theirs = write_report(&other, &l.destination, &write("theirs", ReportVariant::Faithful)).await.unwrap();
    let p = problem(open(theirs.manifest_url.clone()).await);
    assert!(matches!(&p, ReportProblem::OtherBucket { report_bucket, .. } if report_bucket == REPORTS_BUCKET), "{p}");

    // An inventory filtered to the objects alone does not list the descriptor.
    let narrow = WriteOptions {
        source_prefix: Some(format!("{}/objects/", l.store.prefix())),
        ..write("narrow", ReportVariant::Faithful)
    };
    let narrow = write_report(&l.store, &l.destination, &narrow).await.unwrap();
    assert_eq!(narrow.rows, 1);
    let p = problem(open(narrow.manifest_url.clone()).await);
    assert!(matches!(p, ReportProblem::NotCovering { .. }), "{p}");

    let missing = format!("{}/nothing/manifest.json", l.destination);
    assert!(matches!(problem(open(missing).await), ReportProblem::Missing { what: "manifest.json", .. }));
    let dir = tempfile::tempdir().unwrap();
    let local = LakeStore::open(dir.path().to_str().unwrap()).unwrap();
    let err = ReportInventory::open(&local, &faithful.manifest_url, &options()).await.unwrap_err();
    assert!(matches!(err, lake_gc::GcError::Store(lake_store::StoreError::Root { .. })), "{err}");
}
