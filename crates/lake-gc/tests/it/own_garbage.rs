//! GC's own garbage that killed or failed runs leave under the root, collected by a later run
//! under the usual age rule and reported by kind: the staging file of an upload killed mid-way
//! (a `lake ingest`, a `copy_fresh`), an S3 multipart upload of an object never completed, a
//! store-clock probe whose delete failed (S3 `SlowDown`) or whose run was killed.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use lake_engine::memory::MemoryEngine;
use lake_gc::apply::ApplyOptions;
use lake_gc::checkpoint::CheckpointLocation;
use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings, Planned};
use lake_store::clock::{read_store_clock, FixedClock};
use lake_store::descriptor::LakeDescriptor;
use lake_store::keys::{garbage_kind, GarbageKind};
use lake_store::writer::ManagedObjectWriter;
use lake_store::LakeStore;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use std::sync::Arc;
use std::time::Duration;

const HOUR: Duration = Duration::from_secs(3600);

/// A store whose deletes under `under` fail as S3 fails them under throttling (`503 SlowDown`
/// after object_store's retries): every other request goes through.
#[derive(Debug)]
struct SlowDownDeletes {
    inner: Arc<dyn ObjectStore>,
    under: String,
}

impl std::fmt::Display for SlowDownDeletes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SlowDownDeletes({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for SlowDownDeletes {
    async fn put_opts(&self, l: &Path, p: PutPayload, o: PutOptions) -> object_store::Result<PutResult> {
        self.inner.put_opts(l, p, o).await
    }
    async fn put_multipart_opts(
        &self,
        l: &Path,
        o: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(l, o).await
    }
    async fn get_opts(&self, l: &Path, o: GetOptions) -> object_store::Result<GetResult> {
        self.inner.get_opts(l, o).await
    }
    async fn get_ranges(&self, l: &Path, r: &[std::ops::Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        self.inner.get_ranges(l, r).await
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        use futures::StreamExt;
        let (inner, under) = (self.inner.clone(), self.under.clone());
        locations
            .then(move |l| {
                let (inner, under) = (inner.clone(), under.clone());
                async move {
                    let l = l?;
                    if l.as_ref().contains(&under) {
                        return Err(object_store::Error::Generic {
                            store: "S3",
                            source: "Server returned non-2xx status code: 503 Service Unavailable: SlowDown: Please reduce your request rate (after 10 retries)".into(),
                        });
                    }
                    let mut one = inner.delete_stream(futures::stream::once(async move { Ok(l) }).boxed());
                    let none = || Err(object_store::Error::Generic { store: "test", source: "no outcome".into() });
                    one.next().await.unwrap_or_else(none)
                }
            })
            .boxed()
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(&self, from: &Path, to: &Path, o: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, o).await
    }
    async fn rename_opts(&self, from: &Path, to: &Path, o: RenameOptions) -> object_store::Result<()> {
        self.inner.rename_opts(from, to, o).await
    }
}

/// `store` with every delete under `_lake/clock/` throttled. On S3 lake sends DeleteObjects
/// itself (not through object_store); with bulk deletes disabled (object_store's
/// `aws_disable_bulk_delete`) a delete is object_store's, which the wrapper throttles.
fn throttled(store: &LakeStore) -> LakeStore {
    let base = match store.s3_requests() {
        Some(_) => {
            let options = std::collections::HashMap::from([("aws_disable_bulk_delete".into(), "true".into())]);
            LakeStore::open_with_options(&store.root().to_string(), &options).unwrap()
        }
        None => store.clone(),
    };
    base.wrapped(|inner| Arc::new(SlowDownDeletes { inner, under: "_lake/clock/".into() }))
}

/// A managed key whose ULID was minted `ago` before now (negative: in the future).
fn minted(name: &str, ago: chrono::Duration) -> String {
    let ms = (Utc::now() - ago).timestamp_millis() as u64;
    format!("objects/{}/{name}", ulid::Ulid::from_parts(ms, rand_bits()))
}

fn rand_bits() -> u128 {
    ulid::Ulid::new().random()
}

/// The keys of the store's clock probes (and their staging files) on a local root.
fn local_probes(store: &LakeStore) -> Vec<String> {
    let mut keys: Vec<String> = match std::fs::read_dir(store.local_dir().unwrap().join("_lake/clock")) {
        Ok(entries) => entries.map(|e| format!("_lake/clock/{}", e.unwrap().file_name().to_str().unwrap())).collect(),
        Err(_) => Vec::new(),
    };
    keys.sort();
    keys
}

async fn plan_at(store: &LakeStore, engine: &MemoryEngine, now: DateTime<Utc>) -> Planned {
    GarbageCollector::open(store.clone(), engine)
        .await
        .unwrap()
        .with_unchecked_clock(FixedClock(now))
        .plan(&Horizon::new(HOUR), &PlanSettings { inventory_page_size: 2, ..PlanSettings::default() })
        .await
        .unwrap()
}

async fn apply_at(store: &LakeStore, engine: &MemoryEngine, now: DateTime<Utc>, planned: &Planned) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = CheckpointLocation::parse(dir.path().join("gc.ckpt").to_str().unwrap()).unwrap();
    let report = GarbageCollector::open(store.clone(), engine)
        .await
        .unwrap()
        .with_unchecked_clock(FixedClock(now))
        .apply(&planned.plan, &Horizon::new(HOUR), &checkpoint, &ApplyOptions::default())
        .await
        .unwrap();
    assert!(report.checkpoint.complete, "{:?}", report.checkpoint);
    assert!(report.checkpoint.skipped.is_empty(), "{:?}", report.checkpoint.skipped);
    report.checkpoint.deleted + report.checkpoint.absent + report.checkpoint.already_gone
}

/// A local lake (its folder, store and root path) whose policy floor is one hour.
async fn local_lake() -> (tempfile::TempDir, LakeStore, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let store = LakeStore::open(dir.path().join("lake").to_str().unwrap()).unwrap();
    LakeDescriptor::create(&store, HOUR).await.unwrap();
    let root = store.local_dir().unwrap().to_path_buf();
    (dir, store, root)
}

/// Every path under the local root, for comparing a tree before and after a dry run.
fn tree(root: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(root).unwrap().display().to_string());
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The input: an upload killed mid-way leaves object_store's staging file
/// `objects/<ULID>/<name>#<n>` that earlier builds planned as an empty folder and skipped on
/// every run. It is now a candidate of its own kind (then its folder goes with it), as is the
/// staging file of a `copy_fresh` killed between its hard link and its rename; a young one (by
/// its ULID or by its modification time) stays.
#[tokio::test(flavor = "multi_thread")]
async fn staging_files_of_killed_uploads_are_collected_with_their_folders() {
    let (_dir, store, root) = local_lake().await;
    // A multipart upload whose process died: the upload's drop (which removes the staging
    // file) never runs.
    let killed = minted("big.bin", chrono::Duration::zero());
    let mut upload = store.object_store().put_multipart(&store.path(&killed)).await.unwrap();
    upload.put_part(PutPayload::from(vec![7u8; 4096])).await.unwrap();
    std::mem::forget(upload);
    let staged = format!("{killed}#1");
    assert!(root.join(&staged).is_file(), "object_store stages the upload at `<key>#1`");
    // A copy killed between its hard link and its rename (object_store's local copy), of an
    // object a table references.
    let live = ManagedObjectWriter::new(store.clone()).upload("live.bin", &b"live"[..]).await.unwrap();
    let copy = minted("live.bin", chrono::Duration::zero());
    std::fs::create_dir_all(root.join(copy.rsplit_once('/').unwrap().0)).unwrap();
    std::fs::hard_link(root.join(&live.key), root.join(format!("{copy}#0"))).unwrap();
    // Young: minted after the cutoff, or written after it.
    let young = format!("{}#1", minted("young.bin", chrono::Duration::minutes(-90)));
    let rewritten = format!("{}#2", minted("busy.bin", chrono::Duration::zero()));
    for key in [&young, &rewritten] {
        std::fs::create_dir_all(root.join(key.rsplit_once('/').unwrap().0)).unwrap();
        std::fs::write(root.join(key), b"still uploading").unwrap();
    }
    let later = Utc::now() + chrono::Duration::hours(2);
    std::fs::File::options()
        .write(true)
        .open(root.join(&rewritten))
        .unwrap()
        .set_modified((later - chrono::Duration::minutes(30)).into())
        .unwrap();
    let engine = MemoryEngine::new();
    engine.append("t", &[live.identity()]);
    let before = tree(&root);
    let planned = plan_at(&store, &engine, later).await;
    assert!(planned.plan.lineage_complete, "{:?}", planned.plan.problems);
    let mut want = vec![staged.clone(), format!("{copy}#0")];
    want.sort();
    assert_eq!(planned.plan.candidates.keys().unwrap(), want);
    for key in &want {
        assert_eq!(garbage_kind(key), Some(GarbageKind::StagedUpload), "{key}");
    }
    assert_eq!((planned.stats.staged_uploads, planned.stats.empty_folders), (2, 0));
    assert_eq!(tree(&root), before, "a dry run changes nothing under objects/");
    assert_eq!(apply_at(&store, &engine, later, &planned).await, 2);
    for key in &want {
        let folder = root.join(key.rsplit_once('/').unwrap().0);
        assert!(!folder.exists(), "{} went with its staging file", folder.display());
    }
    assert!(root.join(&young).exists() && root.join(&rewritten).exists(), "young staging files stay");
    assert_eq!(std::fs::read(root.join(&live.key)).unwrap(), b"live", "the copied object is untouched");
    // Nothing is left for the next run.
    let again = plan_at(&store, &engine, later).await;
    assert!(again.plan.candidates.is_empty(), "{:?}", again.plan.candidates.keys());
}

/// The input: a dry run whose probe delete fails (S3 `SlowDown`, simulated by a store
/// wrapper) left its probe `_lake/clock/<ULID>` for good, and the run failed. The reading now
/// stands; the probe, and the staging file of a probe write killed mid-way, are candidates of
/// their own kind once older than a later run's cutoff, and that run's apply deletes them. A
/// dry run leaves the root as it was except for its own probe, which it removes.
#[tokio::test(flavor = "multi_thread")]
async fn clock_probes_left_by_failed_or_killed_runs_are_collected() {
    let (_dir, store, root) = local_lake().await;
    let reading = read_store_clock(&throttled(&store)).await.expect("a failed probe delete does not fail the reading");
    assert!((Utc::now() - reading.store_now).num_seconds().abs() < 60);
    let left = local_probes(&store);
    assert_eq!(left.len(), 1, "{left:?}");
    // A probe write killed mid-way (object_store's staging file), and a young probe.
    let killed = format!("_lake/clock/{}#1", ulid::Ulid::new());
    let young_ms = (Utc::now() + chrono::Duration::minutes(90)).timestamp_millis() as u64;
    let young = format!("_lake/clock/{}", ulid::Ulid::from_parts(young_ms, rand_bits()));
    std::fs::write(root.join(&killed), b"clock").unwrap();
    std::fs::write(root.join(&young), b"clock probe").unwrap();
    let engine = MemoryEngine::new();
    let later = Utc::now() + chrono::Duration::hours(2);
    let before = tree(&root);
    let planned = plan_at(&store, &engine, later).await;
    let mut want = vec![left[0].clone(), killed.clone()];
    want.sort();
    assert_eq!(planned.plan.candidates.keys().unwrap(), want);
    assert!(want.iter().all(|k| garbage_kind(k) == Some(GarbageKind::ClockProbe)));
    assert_eq!(planned.stats.clock_probes, 2);
    assert_eq!(tree(&root), before, "the dry run's own probe is gone again; nothing else changed");
    // A real dry run through the throttled store: it succeeds and leaves only its own probe.
    let throttled_engine = MemoryEngine::new();
    let gc = GarbageCollector::open(throttled(&store), &throttled_engine).await.unwrap();
    gc.plan(&Horizon::new(HOUR), &PlanSettings::default()).await.unwrap();
    let with_new = local_probes(&store);
    assert_eq!(with_new.len(), 4, "{with_new:?}");
    assert_eq!(apply_at(&store, &engine, later, &planned).await, 2);
    let after = local_probes(&store);
    assert_eq!(after.len(), 2, "the young probe and the last run's stay: {after:?}");
    assert!(after.contains(&young));
}

/// Sharded plans: each piece of own garbage belongs to the shard whose range holds its key (a
/// clock probe to the first, a staging file to its object's), and the shards' candidates are
/// the unsharded plan's.
#[tokio::test(flavor = "multi_thread")]
async fn own_garbage_is_planned_in_the_shard_of_its_key() {
    let (_dir, store, root) = local_lake().await;
    let writer = ManagedObjectWriter::new(store.clone());
    let mut keys = Vec::new();
    for i in 0..6 {
        keys.push(writer.upload(&format!("o{i}.bin"), &b"orphan"[..]).await.unwrap().key);
        tokio::time::sleep(Duration::from_millis(3)).await;
        // Spread over the hour before the cutoff: over every shard's range of mint time.
        let staged = format!("{}#1", minted(&format!("s{i}.bin"), chrono::Duration::minutes(-8 * i)));
        std::fs::create_dir_all(root.join(staged.rsplit_once('/').unwrap().0)).unwrap();
        std::fs::write(root.join(&staged), b"half").unwrap();
        keys.push(staged);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    read_store_clock(&throttled(&store)).await.unwrap();
    keys.extend(local_probes(&store));
    keys.sort();
    let engine = MemoryEngine::new();
    let later = Utc::now() + chrono::Duration::hours(2);
    let gc = GarbageCollector::open(store.clone(), &engine).await.unwrap().with_unchecked_clock(FixedClock(later));
    let whole = gc.plan(&Horizon::new(HOUR), &PlanSettings::default()).await.unwrap();
    assert_eq!(whole.plan.candidates.keys().unwrap(), keys);
    let sharded = gc.plan_sharded(&Horizon::new(HOUR), &PlanSettings::default(), 3).await.unwrap();
    assert!(sharded.plan.plans.len() > 1);
    let mut union = Vec::new();
    for (i, plan) in sharded.plan.plans.iter().enumerate() {
        let range = &plan.shard.as_ref().unwrap().range;
        for key in plan.candidates.keys().unwrap() {
            assert!(range.contains(&key), "shard {i} holds {key} outside its range");
            union.push(key);
        }
    }
    assert_eq!(union, keys);
    assert!(sharded.plan.plans[0].candidates.keys().unwrap()[0].starts_with("_lake/clock/"));
}

/// On S3 (LocalStack): a multipart upload of a managed object never completed nor aborted (a
/// `lake ingest` of a file above 8 MiB killed mid-way) is planned as
/// `objects/<ULID>/<name>#upload=<id>` and aborted by apply; a clock probe whose delete was
/// throttled is planned and deleted; a young upload stays.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_incomplete_uploads_and_throttled_probes_are_collected() {
    let _serial = crate::conformance::S3_SERIAL.lock().await;
    let store = LakeStore::open(&crate::conformance::s3_root("own-garbage")).unwrap();
    LakeDescriptor::create(&store, HOUR).await.unwrap();
    let requests = store.s3_requests().unwrap();
    let full = |key: &str| format!("{}/{key}", store.prefix());
    let killed = minted("big.bin", chrono::Duration::zero());
    let mut upload = store.object_store().put_multipart(&store.path(&killed)).await.unwrap();
    upload.put_part(PutPayload::from(vec![7u8; 5 * 1024 * 1024])).await.unwrap();
    drop(upload); // an S3 upload stays until completed or aborted
    let young = minted("young.bin", chrono::Duration::minutes(-90));
    let young_upload = store.object_store().put_multipart(&store.path(&young)).await.unwrap();
    drop(young_upload);
    let uploads = requests.list_multipart_uploads(&format!("{}/objects/", store.prefix())).await.unwrap();
    assert_eq!(uploads.len(), 2, "{uploads:?}");
    let killed_id = uploads.iter().find(|u| u.key == full(&killed)).unwrap().upload_id.clone();
    read_store_clock(&throttled(&store)).await.expect("a throttled probe delete does not fail the reading");
    let probes: Vec<String> = store.list_all("_lake/clock").await.unwrap().into_iter().map(|(k, _)| k).collect();
    assert_eq!(probes.len(), 1, "{probes:?}");
    let engine = MemoryEngine::new();
    let later = Utc::now() + chrono::Duration::hours(2);
    let planned = plan_at(&store, &engine, later).await;
    let want = vec![probes[0].clone(), format!("{killed}#upload={killed_id}")];
    assert_eq!(planned.plan.candidates.keys().unwrap(), want);
    assert_eq!((planned.stats.staged_uploads, planned.stats.clock_probes), (1, 1));
    assert_eq!(apply_at(&store, &engine, later, &planned).await, 2);
    let left = requests.list_multipart_uploads(&format!("{}/objects/", store.prefix())).await.unwrap();
    assert_eq!(
        left.iter().map(|u| u.key.clone()).collect::<Vec<_>>(),
        vec![full(&young)],
        "only the young upload stays"
    );
    assert!(store.list_all("_lake/clock").await.unwrap().is_empty());
    assert!(store.head(&killed).await.unwrap().is_none(), "aborting completes nothing");
}
