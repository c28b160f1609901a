//! Parallel listing ([`ParallelInventory`]) on both backends: the same pages as the plain
//! inventory (keys exactly at range boundaries, unmanaged keys around the ULIDs, keys minted
//! after now, S3 folder markers, empty folders and symbolic links on a local root, any `after`,
//! pages of 1 to 1000), an error in one range ending the listing, and plans from 8 streams equal
//! to plans from 1. `check_*` run in the conformance suite (`conformance.rs`) on each backend.

use chrono::{DateTime, Utc};
use futures::stream::{BoxStream, StreamExt};
use lake_engine::memory::MemoryEngine;
use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings};
use lake_gc::inventory::parallel::ParallelInventory;
use lake_gc::inventory::{self, InventoryPage, ObjectInventory};
use lake_gc::plan::GcPlan;
use lake_gc::GcError;
use lake_store::clock::FixedClock;
use lake_store::descriptor::LakeDescriptor;
use lake_store::keys::first_key_at;
use lake_store::writer::ManagedObjectWriter;
use lake_store::LakeStore;
use std::collections::BTreeSet;
use std::time::Duration;
use ulid::Ulid;

/// `objects/<ULID>` of time `t` and random part `random`.
fn folder(t: DateTime<Utc>, random: u128) -> String {
    format!("objects/{}", Ulid::from_parts(t.timestamp_millis() as u64, random))
}

/// Writes the keys of a lake whose objects were minted in four bursts of 6 ms over the last half
/// hour (each millisecond with a key exactly at its boundary `first_key_at`, which is where
/// ranges split, an object, and on every other one a nested key), keys around the ULIDs, an
/// object minted tomorrow, and each backend's foreign entries. Returns the keys to use as
/// `after`.
async fn write_lake(store: &LakeStore) -> Vec<String> {
    let now = Utc::now();
    let mut keys = Vec::new();
    for burst in 0..4 {
        let base = now - chrono::Duration::minutes(7 * (4 - burst));
        for ms in 0..6 {
            let t = base + chrono::Duration::milliseconds(ms);
            keys.push(first_key_at(t));
            keys.push(format!("{}/o", folder(t, 1)));
            if ms % 2 == 0 {
                keys.push(format!("{}/a/b", folder(t, 2)));
            }
        }
    }
    let tomorrow = format!("{}/future", folder(now + chrono::Duration::days(1), 3));
    let lowercase = format!("{}/low", folder(now, 5).to_lowercase());
    keys.extend(["objects/-first".to_string(), "objects/zz".into(), "objects/zzz/x".into(), tomorrow, lowercase]);
    for key in &keys {
        store.put(key, key.as_bytes().to_vec()).await.unwrap();
    }
    let (t1, t2) = (now - chrono::Duration::minutes(21), now - chrono::Duration::minutes(14));
    match store.local_dir() {
        Some(root) => {
            std::fs::create_dir_all(root.join(folder(t1, 6)).join("empty")).unwrap();
            std::fs::create_dir_all(root.join(folder(t2, 6))).unwrap();
            let target = root.join(&keys[1]);
            std::os::unix::fs::symlink(&target, root.join(format!("{}/l", folder(t2, 1)))).unwrap();
            std::os::unix::fs::symlink(&target, root.join("objects/link")).unwrap();
        }
        None => {
            let prefix = store.prefix().to_string();
            for marker in [format!("{}/dir/", folder(t1, 7)), format!("{}/", folder(t2, 1)), "objects/zzz/".into()] {
                crate::s3_requests::put_raw(store, &format!("{prefix}/{marker}"), b"").await;
            }
        }
    }
    keys.sort();
    keys
}

/// Every page of a listing, or the error that ended it (checking it ends there).
async fn pages(inventory: &dyn ObjectInventory, after: Option<String>, size: usize) -> (Vec<InventoryPage>, bool) {
    let mut stream = inventory.list_from(after, size);
    let mut got = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(page) => got.push(page),
            Err(_) => {
                assert!(stream.next().await.is_none(), "a listing ends after its error");
                return (got, true);
            }
        }
    }
    (got, false)
}

/// The pages without their links (which a parallel listing may report earlier).
fn shape(pages: &[InventoryPage]) -> Vec<InventoryPage> {
    pages.iter().map(|p| InventoryPage { links: Vec::new(), ..p.clone() }).collect()
}

fn links(pages: &[InventoryPage]) -> BTreeSet<String> {
    pages.iter().flat_map(|p| p.links.iter().cloned()).collect()
}

/// An inventory whose pages fail when they would list `fail`: a storage error in one range.
struct Failing<I> {
    inner: I,
    fail: String,
}

impl<I: ObjectInventory> ObjectInventory for Failing<I> {
    fn list_from(&self, after: Option<String>, size: usize) -> BoxStream<'_, Result<InventoryPage, GcError>> {
        self.inner
            .list_from(after, size)
            .map(|item| match item {
                Ok(page) if page.entries.iter().any(|e| e.key == self.fail) => {
                    Err(GcError::storage(self.fail.clone(), "injected failure"))
                }
                other => other,
            })
            .boxed()
    }
}

/// A parallel listing yields the plain inventory's pages, whatever the streams, buffers, page
/// size and `after`; an error in one range ends it with the error, never with a last page.
pub(crate) async fn check_parallel_listing_matches_the_plain_one(store: &LakeStore) {
    let keys = write_lake(store).await;
    let plain = inventory::for_store(store);
    let (all, failed) = pages(plain.as_ref(), None, 1000).await;
    assert!(!failed && all.len() == 1);
    let listed = all[0].entries.len();
    assert!(listed >= keys.len() + 2, "{listed} entries for {} keys and the foreign entries", keys.len());
    let middle = keys[keys.len() / 2].clone();
    let boundary = keys.iter().find(|k| !k.contains("/o") && k.len() == "objects/".len() + 26).unwrap().clone();
    let mut cases = Vec::new();
    for size in [1, 3, 1000] {
        for (streams, buffered) in [(2, 2), (8, 2), (8, 16)] {
            cases.push((None, size, streams, buffered));
        }
    }
    for after in [middle, boundary, "objects/zz".to_string(), "objects".to_string(), "objects/~".to_string()] {
        cases.push((Some(after), 2, 4, 2));
    }
    for (after, size, streams, buffered) in cases {
        let (want, _) = pages(plain.as_ref(), after.clone(), size).await;
        let parallel = ParallelInventory::new(plain.as_ref(), streams).with_buffered_pages(buffered);
        let (got, failed) = pages(&parallel, after.clone(), size).await;
        let case = format!("after {after:?}, pages of {size}, {streams} streams, {buffered} buffered");
        assert!(!failed, "{case}");
        assert_eq!(shape(&got), shape(&want), "{case}");
        assert_eq!(links(&got), links(&want), "{case}");
        let reported: Vec<&String> = got.iter().flat_map(|p| &p.links).collect();
        assert_eq!(reported.len(), links(&got).len(), "{case}: each link once");
    }
    if store.local_dir().is_some() {
        assert_eq!(links(&all).len(), 2, "the links of objects/ and of a ULID folder");
    }
    // A storage error in a range after the first: the pages before it, then the error.
    for fail in [&keys[keys.len() / 3], &keys[keys.len() - 2]] {
        let failing = Failing { inner: inventory::for_store(store), fail: fail.clone() };
        let parallel = ParallelInventory::new(&failing, 4).with_buffered_pages(2);
        let (got, failed) = pages(&parallel, None, 2).await;
        assert!(failed, "a failure listing {fail} ends the listing with it");
        assert!(got.iter().all(|p| p.next.is_some()), "no page says the listing is complete");
        let keys_got: Vec<&str> = got.iter().flat_map(|p| p.entries.iter().map(|e| e.key.as_str())).collect();
        let keys_all: Vec<&str> = all[0].entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys_got[..], keys_all[..keys_got.len()], "a prefix of the listing");
        assert!(!keys_got.contains(&fail.as_str()));
    }
}

/// The plan of `store` by a collector listing with `streams` streams in pages of `size`: on S3
/// through [`PlanSettings::list_streams`], on a local root (which the collector lists with one
/// walk) through a parallel inventory given to the collector.
async fn plan_with(
    store: &LakeStore,
    engine: &MemoryEngine,
    now: DateTime<Utc>,
    streams: usize,
    size: usize,
) -> GcPlan {
    let clock = FixedClock(now);
    let mut gc = GarbageCollector::open(store.clone(), engine).await.unwrap().with_unchecked_clock(clock);
    if store.local_dir().is_some() && streams > 1 {
        gc = gc.with_inventory(Box::new(ParallelInventory::new(inventory::for_store(store), streams)));
    }
    let settings = PlanSettings { inventory_page_size: size, memory_budget: 1 << 20, list_streams: streams };
    gc.plan(&Horizon::new(Duration::from_secs(3600)), &settings).await.unwrap().plan
}

/// Plans from 8 listing streams and from 1 are identical (candidates and digest), at any page
/// size, on a lake of 240 objects (half referenced) with keys GC never plans among them.
pub(crate) async fn check_plans_from_parallel_listings_are_identical(store: &LakeStore) {
    LakeDescriptor::create(store, Duration::from_secs(3600)).await.unwrap();
    let writer = ManagedObjectWriter::new(store.clone());
    let uploads = (0..240).map(|i| {
        let writer = writer.clone();
        async move { writer.upload(&format!("o{i}"), format!("{i}").as_bytes()).await.unwrap() }
    });
    let objects: Vec<_> = futures::stream::iter(uploads).buffer_unordered(16).collect().await;
    write_lake(store).await;
    let engine = MemoryEngine::new();
    let live: Vec<_> = objects.iter().step_by(2).map(|o| o.identity()).collect();
    engine.append("t", &live);
    let later = Utc::now() + chrono::Duration::hours(2);
    for size in [7, 1000] {
        let one = plan_with(store, &engine, later, 1, size).await;
        let eight = plan_with(store, &engine, later, 8, size).await;
        assert!(one.lineage_complete, "{:?}", one.problems);
        // The orphans, the objects of the bursts, and on a local root an empty managed folder.
        let expected = 120 + 24 + usize::from(store.local_dir().is_some());
        assert_eq!(one.candidates.len(), expected);
        assert_eq!(eight.candidates.keys().unwrap(), one.candidates.keys().unwrap(), "pages of {size}");
        assert_eq!(
            (eight.digest().unwrap(), eight.foreign_count),
            (one.digest().unwrap(), one.foreign_count),
            "pages of {size}"
        );
    }
}
