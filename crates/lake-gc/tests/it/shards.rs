//! Sharded plans over a real store (a local folder; S3 on LocalStack): the shards' candidates
//! are the unsharded plan's, one process's shards equal each shard planned alone, edited or
//! foreign manifests and shards are refused, and shard applies revalidate, resume and, in any
//! order, delete exactly what the unsharded plan would.

use crate::refused;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lake_common::ErrorKind;
use lake_common::ObjectIdentity;
use lake_engine::memory::MemoryEngine;
use lake_engine::{Engine, EngineError, LineageStamp, TableLocation, TableSet, TableSnapshot, UnreferencedFile};
use lake_gc::apply::ApplyOptions;
use lake_gc::checkpoint::CheckpointLocation;
use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings};
use lake_gc::key_range::KeyRange;
use lake_gc::plan::{Candidate, GcPlan};
use lake_gc::shards::{
    shard_checkpoint_name, shard_file_name, ShardEntry, ShardManifest, ShardSpec, ShardedPlan, MANIFEST_FILE,
};
use lake_gc::GcError;
use lake_store::clock::FixedClock;
use lake_store::descriptor::LakeDescriptor;
use lake_store::LakeStore;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;
use ulid::Ulid;

const HOUR_MS: i64 = 3_600_000;

/// The in-memory tables, plus reference logs of table `t` that no journal entry names (GC's
/// own garbage, `tables/...` keys: they sort after every `objects/` key, in the last shard).
struct Tables {
    memory: MemoryEngine,
    garbage: Vec<UnreferencedFile>,
}

#[async_trait]
impl Engine for Tables {
    fn lake_root(&self) -> Option<String> {
        None
    }
    async fn tables(&self) -> Result<TableSet, EngineError> {
        self.memory.tables().await
    }
    async fn snapshot(&self, location: &TableLocation) -> Result<Box<dyn TableSnapshot>, EngineError> {
        self.memory.snapshot(location).await
    }
    async fn lineage_stamp(&self, location: &TableLocation) -> Result<LineageStamp, EngineError> {
        self.memory.lineage_stamp(location).await
    }
    async fn references_added_between(
        &self,
        location: &TableLocation,
        after: u64,
        upto: u64,
    ) -> Result<Vec<ObjectIdentity>, EngineError> {
        self.memory.references_added_between(location, after, upto).await
    }
    async fn references_removed_between(
        &self,
        location: &TableLocation,
        after: Option<u64>,
        upto: u64,
        range: &lake_engine::UriRange,
        visit: &mut (dyn FnMut(ObjectIdentity) -> Result<(), EngineError> + Send),
    ) -> Result<lake_engine::Removals, EngineError> {
        self.memory.references_removed_between(location, after, upto, range, visit).await
    }
    async fn unreferenced_journal_files(
        &self,
        location: &TableLocation,
        cutoff_ms: i64,
    ) -> Result<Vec<UnreferencedFile>, EngineError> {
        let old = self.garbage.iter().filter(|f| location.name == "t" && f.last_modified_ms < cutoff_ms);
        Ok(old.cloned().collect())
    }
    async fn write_intents(
        &self,
        visit: &mut (dyn FnMut(ObjectIdentity) -> Result<(), EngineError> + Send),
    ) -> Result<lake_engine::WriteIntents, EngineError> {
        self.memory.write_intents(visit).await
    }
}

/// A lake whose clock reads two hours ahead (so a one-hour horizon's cutoff is an hour from
/// now: every object written now is old), with 40 objects minted 6 hours apart over 10 days
/// (every third one referenced), two young ones minted after the cutoff, unmanaged keys and one
/// reference log no journal entry names.
struct Lake {
    dir: tempfile::TempDir,
    store: LakeStore,
    tables: Tables,
    now: DateTime<Utc>,
    young: Vec<String>,
    garbage_key: String,
}

fn key_at(ms: i64, random: u128, name: &str) -> String {
    format!("objects/{}/{name}", Ulid::from_parts(ms as u64, random))
}

async fn lake(root: Option<String>) -> Lake {
    let dir = tempfile::tempdir().unwrap();
    let root = root.unwrap_or_else(|| dir.path().join("lake").to_str().unwrap().to_string());
    let store = LakeStore::open(&root).unwrap();
    LakeDescriptor::create(&store, Duration::from_secs(3600)).await.unwrap();
    let now = Utc::now();
    let first = now.timestamp_millis() - 240 * HOUR_MS;
    let mut referenced = Vec::new();
    for i in 0..40i64 {
        let key = key_at(first + i * 6 * HOUR_MS, i as u128, &format!("o{i}.bin"));
        let bytes = vec![b'x'; i as usize + 1];
        store.put(&key, bytes.clone()).await.unwrap();
        if i % 3 == 0 {
            referenced.push(ObjectIdentity::new(key, [0; 32], bytes.len() as u64));
        }
    }
    let young = vec![
        key_at(now.timestamp_millis() + HOUR_MS + 60_000, 1, "young.bin"),
        key_at(now.timestamp_millis() + 3 * HOUR_MS, 2, "younger.bin"),
    ];
    for key in
        young.iter().chain(["objects/not-a-ulid/x.bin".to_string(), "objects/zz-unmanaged.bin".to_string()].iter())
    {
        store.put(key, b"kept".to_vec()).await.unwrap();
    }
    let garbage_key = format!(
        "tables/t.lance/_lake/object_ref_logs/{}.arrows",
        Ulid::from_parts((now.timestamp_millis() - 24 * HOUR_MS) as u64, 7)
    );
    store.put(&garbage_key, b"log".to_vec()).await.unwrap();
    let memory = MemoryEngine::new();
    memory.append("t", &referenced);
    let garbage =
        vec![UnreferencedFile { key: garbage_key.clone(), size: 3, last_modified_ms: now.timestamp_millis() - 60_000 }];
    Lake { dir, store, tables: Tables { memory, garbage }, now, young, garbage_key }
}

async fn collector(l: &Lake) -> GarbageCollector<'_> {
    let clock = FixedClock(l.now + chrono::Duration::hours(2));
    GarbageCollector::open(l.store.clone(), &l.tables).await.unwrap().with_unchecked_clock(clock)
}

fn horizon() -> Horizon {
    Horizon::new(Duration::from_secs(3600))
}

fn settings() -> PlanSettings {
    PlanSettings { inventory_page_size: 7, memory_budget: 1 << 20, ..PlanSettings::default() }
}

fn ckpt(l: &Lake, name: &str) -> CheckpointLocation {
    CheckpointLocation::parse(l.dir.path().join(name).to_str().unwrap()).unwrap()
}

/// For every boundary of `spec`, an object minted exactly at it (`objects/<boundary>/...`, the
/// first key after the boundary: the next shard's) and one minted just before it (this shard's).
/// Returns `(expected shard, key)`.
async fn boundary_keys(l: &Lake, spec: &ShardSpec) -> Vec<(usize, String)> {
    let mut keys = Vec::new();
    for (i, range) in spec.ranges.iter().enumerate().skip(1) {
        let boundary = range.after.clone().unwrap();
        let ulid = Ulid::from_string(boundary.strip_prefix("objects/").unwrap()).unwrap();
        let on = format!("{boundary}/on-boundary.bin");
        let before = key_at(ulid.timestamp_ms() as i64 - 1, (1u128 << 80) - 1, "before-boundary.bin");
        for (shard, key) in [(i, on), (i - 1, before)] {
            l.store.put(&key, b"edge".to_vec()).await.unwrap();
            keys.push((shard, key));
        }
    }
    keys
}

fn all_candidates(plans: &[GcPlan]) -> Vec<Candidate> {
    plans.iter().flat_map(|p| p.candidates.to_vec().unwrap()).collect()
}

/// The shards' candidates, in order, are the unsharded plan's; one process's shards are the
/// shards planned alone; the manifest is the same from plans or from workers' entries.
async fn shards_equal_the_unsharded_plan(l: &Lake) {
    let gc = collector(l).await;
    let mut edges = 0;
    for n in [1, 3, 8] {
        let spec = gc.shard_ranges(&horizon(), n).await.unwrap();
        assert_eq!(spec.count(), n, "ten days of keys split into {n} ranges");
        let boundaries = boundary_keys(l, &spec).await;
        let whole = gc.plan(&horizon(), &settings()).await.unwrap().plan;
        assert!(whole.lineage_complete && whole.shard.is_none(), "{:?}", whole.problems);
        assert!(
            !String::from_utf8(whole.to_document().unwrap()).unwrap().contains("\"shard\""),
            "unsharded plans unchanged"
        );
        edges += boundaries.len();
        assert_eq!(whole.candidates.len(), 26 + edges + 1, "orphans, keys at boundaries, the reference log");
        // One process, a memory budget so small that every shard's list spills.
        let tight = PlanSettings { inventory_page_size: 3, memory_budget: 64, ..PlanSettings::default() };
        let sharded = gc.plan_sharded(&horizon(), &tight, n).await.unwrap();
        let ShardedPlan { manifest, plans } = &sharded.plan;
        assert_eq!(plans.iter().map(|p| p.shard.clone().unwrap().range).collect::<Vec<_>>(), spec.ranges);
        assert_eq!(all_candidates(plans), whole.candidates.to_vec().unwrap(), "{n} shards");
        assert_eq!(manifest.candidates(), whole.candidates.len() as u64);
        assert_eq!(manifest.candidate_bytes(), whole.candidate_bytes());
        for (i, plan) in plans.iter().enumerate() {
            let shard = plan.shard.as_ref().unwrap();
            assert_eq!((shard.index, shard.count), (i as u64, n as u64));
            assert!(plan.candidates.keys().unwrap().iter().all(|k| shard.range.contains(k)));
            assert!(plan.candidates.is_empty() || plan.candidates.is_spilled());
        }
        for (shard, key) in &boundaries {
            assert!(plans[*shard].candidates.keys().unwrap().contains(key), "{key} in shard {shard}");
        }
        assert!(plans[n - 1].candidates.keys().unwrap().contains(&l.garbage_key), "journal garbage: last shard");
        let planned: BTreeSet<String> = whole.candidates.keys().unwrap().into_iter().collect();
        assert!(l.young.iter().all(|k| !planned.contains(k)));
        // Each shard planned alone (a worker) is byte-identical to the one-process shard.
        let mut alone = Vec::new();
        for (i, (plan, entry)) in plans.iter().zip(&manifest.shards).enumerate() {
            let planned = gc.plan_shard(&horizon(), &settings(), &spec, i).await.unwrap().plan;
            assert_eq!(planned.canonical_bytes().unwrap(), plan.canonical_bytes().unwrap(), "shard {i} of {n}");
            assert_eq!(planned.digest().unwrap(), entry.digest);
            alone.push(planned);
        }
        alone.reverse();
        assert_eq!(&ShardManifest::assemble(&alone).unwrap(), manifest);
        let entries = alone.iter().map(|p| ShardEntry::of(p).unwrap()).collect();
        assert_eq!(&ShardManifest::from_entries(&spec, entries).unwrap(), manifest);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn shards_have_the_candidates_of_the_unsharded_plan() {
    shards_equal_the_unsharded_plan(&lake(None).await).await;
}

/// The keys the store holds under `objects/` and `tables/`.
async fn keys(l: &Lake) -> BTreeSet<String> {
    let all = l.store.list_all("").await.unwrap().into_iter().map(|(k, _)| k);
    all.filter(|k| k.starts_with("objects/") || k.starts_with("tables/")).collect()
}

/// Shards applied one by one, in an order unlike theirs, each with its own checkpoint, delete
/// exactly the unsharded plan's candidates.
async fn shards_in_any_order_delete_the_unsharded_plan(l: &Lake) {
    let gc = collector(l).await;
    let whole: BTreeSet<String> =
        gc.plan(&horizon(), &settings()).await.unwrap().plan.candidates.keys().unwrap().into_iter().collect();
    let sharded = gc.plan_sharded(&horizon(), &settings(), 4).await.unwrap().plan;
    let before = keys(l).await;
    let options = ApplyOptions { page_size: 2, ..ApplyOptions::default() };
    for index in [2usize, 0, 3, 1] {
        let at = ckpt(l, &shard_checkpoint_name(index as u64));
        let done = gc.apply_shard(&sharded.manifest, &sharded.plans[index], &horizon(), &at, &options).await.unwrap();
        assert!(done.checkpoint.complete && done.checkpoint.failed.is_empty());
        let removed = done.checkpoint.deleted + done.checkpoint.absent;
        assert_eq!(removed, sharded.manifest.shards[index].candidates, "shard {index}");
    }
    let gone: BTreeSet<String> = before.difference(&keys(l).await).cloned().collect();
    assert_eq!(gone, whole, "the shards deleted exactly the unsharded plan's candidates");
}

#[tokio::test(flavor = "multi_thread")]
async fn shards_applied_in_any_order_delete_exactly_the_unsharded_plan() {
    shards_in_any_order_delete_the_unsharded_plan(&lake(None).await).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_shards_equal_the_unsharded_plan_and_delete_it() {
    let _serial = crate::conformance::S3_SERIAL.lock().await;
    shards_equal_the_unsharded_plan(&lake(Some(crate::conformance::s3_root("shards"))).await).await;
    shards_in_any_order_delete_the_unsharded_plan(&lake(Some(crate::conformance::s3_root("shards-apply"))).await).await;
}

fn corrupt(err: GcError, needle: &str) {
    match err {
        lake_gc::GcError::Store(lake_store::StoreError::Corrupt { message, .. }) => {
            assert!(message.contains(needle), "expected `{needle}` in: {message}")
        }
        other => panic!("expected a corrupt document ({needle}), got {other}"),
    }
}

/// The manifest's JSON, edited by `edit`, with its digest as written or recomputed.
fn edited_manifest(dir: &Path, edit: impl Fn(&mut serde_json::Value), recompute: bool) -> Vec<u8> {
    let mut doc: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join(MANIFEST_FILE)).unwrap()).unwrap();
    edit(&mut doc["manifest"]);
    if recompute {
        let manifest: ShardManifest = serde_json::from_value(doc["manifest"].clone()).unwrap();
        doc["digest"] = manifest.digest().into();
    }
    serde_json::to_vec_pretty(&doc).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn edited_manifests_and_shards_and_shards_of_another_manifest_are_refused() {
    let l = lake(None).await;
    let gc = collector(&l).await;
    let sharded = gc.plan_sharded(&horizon(), &settings(), 3).await.unwrap().plan;
    let dir = l.dir.path().join("plan");
    std::fs::create_dir(&dir).unwrap();
    sharded.save(&dir).unwrap();
    assert_eq!(ShardedPlan::load(&dir).unwrap(), sharded);
    let m = &sharded.manifest;
    assert_eq!(m.digest().len(), 64);

    // The manifest edited: a shard's digest, a range, the count. As written, its own digest no
    // longer matches; recomputed, the shards or its own structure no longer match.
    let digest = |v: &mut serde_json::Value| v["shards"][1]["digest"] = "0".repeat(64).into();
    let range = |v: &mut serde_json::Value| {
        let moved = serde_json::Value::from(key_at(0, 0, "x").trim_end_matches("/x").to_string());
        v["shards"][0]["range"]["until"] = moved.clone();
        v["shards"][1]["range"]["after"] = moved;
    };
    let count = |v: &mut serde_json::Value| v["count"] = 2.into();
    for edit in [&digest as &dyn Fn(&mut serde_json::Value), &range, &count] {
        corrupt(ShardManifest::from_document(&edited_manifest(&dir, edit, false), "m").unwrap_err(), "digest mismatch");
    }
    let forged = ShardManifest::from_document(&edited_manifest(&dir, digest, true), "m").unwrap();
    refused(forged.load_shard(&dir, 1).unwrap_err(), ErrorKind::BoundToManifest);
    let forged = ShardManifest::from_document(&edited_manifest(&dir, range, true), "m").unwrap();
    refused(forged.load_shard(&dir, 0).unwrap_err(), ErrorKind::BoundToManifest);
    corrupt(ShardManifest::from_document(&edited_manifest(&dir, count, true), "m").unwrap_err(), "says 2 shards");
    let gap = |v: &mut serde_json::Value| v["shards"][1]["range"]["after"] = "objects/0".into();
    corrupt(ShardManifest::from_document(&edited_manifest(&dir, gap, true), "m").unwrap_err(), "cover every key");
    let swapped = |v: &mut serde_json::Value| v["shards"][0]["index"] = 1.into();
    corrupt(
        ShardManifest::from_document(&edited_manifest(&dir, swapped, true), "m").unwrap_err(),
        "missing or repeated",
    );

    // A shard plan document edited: its own digest, or (recomputed) the manifest's.
    let shard_path = dir.join(shard_file_name(2));
    let original = std::fs::read(&shard_path).unwrap();
    let mut doc: serde_json::Value = serde_json::from_slice(&original).unwrap();
    doc["plan"]["candidates"][0]["size"] = 999.into();
    std::fs::write(&shard_path, serde_json::to_vec(&doc).unwrap()).unwrap();
    corrupt(m.load_shard(&dir, 2).unwrap_err(), "digest mismatch");
    let plan: GcPlan = serde_json::from_value(doc["plan"].clone()).unwrap();
    std::fs::write(&shard_path, plan.to_document().unwrap()).unwrap();
    refused(m.load_shard(&dir, 2).unwrap_err(), ErrorKind::BoundToManifest);
    std::fs::write(&shard_path, &original).unwrap();

    // A shard of another manifest (another cutoff), in the folder or passed to apply.
    let earlier = Horizon { earlier_cutoff: Some(l.now - chrono::Duration::hours(1)), ..horizon() };
    let other = gc.plan_sharded(&earlier, &settings(), 3).await.unwrap().plan;
    std::fs::write(dir.join(shard_file_name(1)), other.plans[1].to_document().unwrap()).unwrap();
    refused(m.load_shard(&dir, 1).unwrap_err(), ErrorKind::BoundToManifest);
    let before = keys(&l).await;
    let other_shard =
        gc.apply_shard(m, &other.plans[1], &horizon(), &ckpt(&l, "x.ckpt"), &ApplyOptions::default()).await;
    refused(other_shard.unwrap_err(), ErrorKind::BoundToManifest);
    // A shard applied as a whole plan, or a whole plan as a shard.
    let whole = gc.plan(&horizon(), &settings()).await.unwrap().plan;
    refused(
        gc.apply(&sharded.plans[0], &horizon(), &ckpt(&l, "y.ckpt"), &ApplyOptions::default()).await.unwrap_err(),
        ErrorKind::BoundToManifest,
    );
    refused(
        gc.apply_shard(m, &whole, &horizon(), &ckpt(&l, "z.ckpt"), &ApplyOptions::default()).await.unwrap_err(),
        ErrorKind::BoundToManifest,
    );
    // A forger who recomputes every digest to add a key of shard 1 to shard 0: apply deletes
    // only keys of a shard's own range, and stops before the group that holds it.
    let mut forged_plan = sharded.plans[0].clone();
    let mut list = forged_plan.candidates.to_vec().unwrap();
    let stolen = sharded.plans[1].candidates.to_vec().unwrap()[0].clone();
    list.push(stolen.clone());
    forged_plan.candidates = lake_gc::candidates::CandidateList::from_sorted(list);
    let mut forged = m.clone();
    forged.shards[0] = ShardEntry::of(&forged_plan).unwrap();
    let forged = ShardManifest::from_document(&forged.to_document(), "forged").unwrap();
    let refused =
        gc.apply_shard(&forged, &forged_plan, &horizon(), &ckpt(&l, "f.ckpt"), &ApplyOptions::default()).await;
    // Refused before its first delete (every candidate is checked against the shard's range
    // when the shard is bound to its manifest), not when apply reaches the stolen key.
    match refused {
        Err(lake_gc::GcError::Refused { kind: refusal, message }) => {
            assert_eq!(refusal, ErrorKind::BoundToManifest, "{message}")
        }
        other => panic!("expected the forged shard refused, got {other:?}"),
    }
    assert!(l.store.head(stolen.key.as_str()).await.unwrap().is_some());
    assert_eq!(keys(&l).await, before, "nothing deleted by any refusal");
    assert!(
        ShardManifest::assemble(&[sharded.plans[0].clone(), other.plans[1].clone(), sharded.plans[2].clone()]).is_err()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shard_spec_is_checked_like_a_cutoff() {
    let l = lake(None).await;
    let gc = collector(&l).await;
    let spec = gc.shard_ranges(&horizon(), 3).await.unwrap();
    let s = settings();
    refused(gc.plan_shard(&horizon(), &s, &spec, 3).await.unwrap_err(), ErrorKind::ShardMismatch);
    refused(
        gc.plan_shard(&Horizon::new(Duration::from_secs(7200)), &s, &spec, 0).await.unwrap_err(),
        ErrorKind::BoundToMinAge,
    );
    let later = ShardSpec { cutoff: "2999-01-01T00:00:00.000Z".parse().unwrap(), ..spec.clone() };
    refused(gc.plan_shard(&horizon(), &s, &later, 0).await.unwrap_err(), ErrorKind::CutoffTooLate);
    let gap = ShardSpec { ranges: vec![spec.ranges[0].clone(), spec.ranges[2].clone()], ..spec.clone() };
    refused(gc.plan_shard(&horizon(), &s, &gap, 0).await.unwrap_err(), ErrorKind::ShardMismatch);
    let other = ShardSpec { root: "file:///elsewhere".into(), ..spec.clone() };
    refused(gc.plan_shard(&horizon(), &s, &other, 0).await.unwrap_err(), ErrorKind::BoundToRoot);
    refused(gc.shard_ranges(&horizon(), 0).await.unwrap_err(), ErrorKind::ShardMismatch);
    refused(gc.shard_ranges(&horizon(), 257).await.unwrap_err(), ErrorKind::ShardMismatch);
    // A spec round-trips through JSON (what a coordinator hands its workers).
    let json = serde_json::to_string(&spec).unwrap();
    assert_eq!(serde_json::from_str::<ShardSpec>(&json).unwrap(), spec);
    // A cutoff spelled otherwise than plans spell it (another offset, a comma) is not read: every
    // shard records the spec's cutoff, and their plans must hash alike.
    let cutoff = spec.cutoff.to_string();
    let loose = json.replace(&cutoff, &cutoff.replace('.', ",").replace('Z', "+00:00"));
    let err = serde_json::from_str::<ShardSpec>(&loose).unwrap_err().to_string();
    assert!(err.contains("is not a time as GC records it"), "{err}");
    // An empty lake: one shard of every key.
    let empty = lake(None).await;
    std::fs::remove_dir_all(empty.store.local_dir().unwrap().join("objects")).unwrap();
    let spec = collector(&empty).await.shard_ranges(&horizon(), 4).await.unwrap();
    assert_eq!(spec.ranges, vec![KeyRange::all()]);
}

/// A candidate of shard 1 referenced after the plan is revived by shard 1's apply, never
/// deleted; the shard's other candidates are.
#[tokio::test(flavor = "multi_thread")]
async fn a_shard_apply_revalidates_like_a_whole_plan() {
    let l = lake(None).await;
    let gc = collector(&l).await;
    let sharded = gc.plan_sharded(&horizon(), &settings(), 3).await.unwrap().plan;
    let shard = &sharded.plans[1];
    let candidates = shard.candidates.to_vec().unwrap();
    assert!(candidates.len() >= 3, "{candidates:?}");
    let revived = &candidates[1];
    l.tables.memory.append("t", &[ObjectIdentity::new(revived.key.to_string(), [0; 32], revived.size)]);
    let done = gc
        .apply_shard(&sharded.manifest, shard, &horizon(), &ckpt(&l, "s1.ckpt"), &ApplyOptions::default())
        .await
        .unwrap();
    assert!(done.checkpoint.complete);
    assert_eq!(done.checkpoint.revived, vec![revived.key.to_string()]);
    assert_eq!(done.checkpoint.deleted, candidates.len() as u64 - 1);
    assert!(l.store.head(revived.key.as_str()).await.unwrap().is_some(), "the revived candidate survives");
}

/// A shard's apply stopped after one page (a worker killed mid-shard) resumes from its
/// checkpoint, by the checkpoint alone or by a retry with the same shard plan; done, it is a
/// no-op. Its checkpoint is refused as a whole plan's.
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_shard_apply_resumes_from_its_checkpoint() {
    let l = lake(None).await;
    let gc = collector(&l).await;
    let sharded = gc.plan_sharded(&horizon(), &settings(), 3).await.unwrap().plan;
    let (m, shard) = (&sharded.manifest, &sharded.plans[2]);
    let at = ckpt(&l, &shard_checkpoint_name(2));
    let one_page = ApplyOptions { page_size: 2, max_pages: Some(1), concurrency: 1, ..ApplyOptions::default() };
    let first = gc.apply_shard(m, shard, &horizon(), &at, &one_page).await.unwrap();
    assert!(!first.checkpoint.complete && first.checkpoint.deleted == 2, "{:?}", first.checkpoint);
    refused(gc.resume(&horizon(), &at, &ApplyOptions::default()).await.unwrap_err(), ErrorKind::BoundToManifest);
    // The unfinished checkpoint of shard 2 resumed with another sharded plan's manifest is
    // refused.
    let other = gc.plan_sharded(&horizon(), &settings(), 2).await.unwrap().plan;
    refused(
        gc.resume_shard(&other.manifest, &horizon(), &at, &ApplyOptions::default()).await.unwrap_err(),
        ErrorKind::BoundToManifest,
    );
    let retried = gc.apply_shard(m, shard, &horizon(), &at, &one_page).await.unwrap();
    assert_eq!(retried.checkpoint.deleted, 4, "a retry with the plan continues from the checkpoint");
    let resumed = gc.resume_shard(m, &horizon(), &at, &ApplyOptions::default()).await.unwrap().unwrap();
    assert!(resumed.checkpoint.complete);
    assert_eq!(resumed.checkpoint.deleted, m.shards[2].candidates);
    let again = gc.apply_shard(m, shard, &horizon(), &at, &ApplyOptions::default()).await.unwrap();
    assert!(again.was_complete && again.pages == 0);
    assert!(gc.resume_shard(m, &horizon(), &ckpt(&l, "none.ckpt"), &ApplyOptions::default()).await.unwrap().is_none());
    // Finished, it is nothing to resume for another manifest (a later sharded plan at the same
    // checkpoint folder replaces it; `outputs::shard_documents_are_checked_...` applies one).
    assert!(gc.resume_shard(&other.manifest, &horizon(), &at, &ApplyOptions::default()).await.unwrap().is_none());
}

/// A symbolic link in one shard's range through which a live reference may name an object
/// makes that shard incomplete (as it makes the unsharded plan), and then no shard is applied:
/// the aliased object may lie in another shard.
#[tokio::test(flavor = "multi_thread")]
async fn a_link_met_by_one_shard_stops_every_shard() {
    let l = lake(None).await;
    let root = l.store.local_dir().unwrap().to_path_buf();
    let first = l.now.timestamp_millis() - 240 * HOUR_MS;
    let target = key_at(first + 6 * HOUR_MS, 1, "o1.bin");
    let target_folder = root.join(Path::new(&target).parent().unwrap());
    let link = key_at(first + 7 * HOUR_MS, 9, "x").trim_end_matches("/x").to_string();
    std::os::unix::fs::symlink(&target_folder, root.join(&link)).unwrap();
    l.tables.memory.append("t", &[ObjectIdentity::new(format!("{link}/o1.bin"), [0; 32], 2)]);
    let gc = collector(&l).await;
    let whole = gc.plan(&horizon(), &settings()).await.unwrap().plan;
    assert!(
        !whole.lineage_complete && whole.problems[0].kind == lake_gc::plan::PlanProblem::LINKED_REFERENCE,
        "{:?}",
        whole.problems
    );
    let sharded = gc.plan_sharded(&horizon(), &settings(), 3).await.unwrap().plan;
    let complete: Vec<bool> = sharded.manifest.shards.iter().map(|e| e.lineage_complete).collect();
    assert_eq!(complete, vec![false, true, true], "only the shard that met the link");
    assert_eq!(sharded.plans[0].problems, whole.problems);
    assert!(sharded.plans[0].candidates.is_empty() && !sharded.plans[2].candidates.is_empty());
    let spec = gc.shard_ranges(&horizon(), 3).await.unwrap();
    for i in 0..3 {
        let alone = gc.plan_shard(&horizon(), &settings(), &spec, i).await.unwrap().plan;
        assert_eq!(alone.canonical_bytes().unwrap(), sharded.plans[i].canonical_bytes().unwrap(), "shard {i}");
    }
    let refused = gc
        .apply_shard(&sharded.manifest, &sharded.plans[2], &horizon(), &ckpt(&l, "c"), &ApplyOptions::default())
        .await;
    assert!(matches!(refused, Err(GcError::PlanIncomplete { .. })), "{refused:?}");
    assert!(l.store.head(&target).await.unwrap().is_some());
}
