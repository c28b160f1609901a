//! Adversarial tests (an attack run against the closed doors). Each test asserts the SAFE
//! behaviour: a failing test is a successful attack.

use crate::gc_scenario::dry_run;
use crate::support::{batch, new_lake, reader, schema, unchecked_plan_now, TestLake};
use arrow_array::{ArrayRef, RecordBatch, RecordBatchIterator, StringArray};
use chrono::Utc;
use lake_common::DataLocationBuilder;
use lake_gc::apply::{ApplyOptions, ApplyReport};
use lake_gc::plan::GcPlan;
use lake_gc::unchecked::apply_unchecked as apply;
use lake_store::writer::ManagedObject;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

fn root(lake: &TestLake) -> PathBuf {
    lake.store.local_dir().unwrap().to_path_buf()
}

/// Rows of (episode, uri spelled freely, identity of `object`).
fn spelled(rows: &[(&str, &str, &ManagedObject)]) -> RecordBatch {
    let mut files = DataLocationBuilder::new();
    for (_, uri, o) in rows {
        files.append(uri, o.sha256, o.size);
    }
    let episodes: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|(e, _, _)| *e)));
    RecordBatch::try_new(schema(), vec![episodes, Arc::new(files.finish())]).unwrap()
}

async fn append_spelled(lake: &TestLake, table: &str, rows: &[(&str, &str, &ManagedObject)]) -> Result<(), String> {
    lake.engine
        .append(table, Box::new(RecordBatchIterator::new(vec![Ok(spelled(rows))], schema())))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Appends `rows` around the engine (plain Lance), then journals the version with `lake refs
/// repair`: how a reference the engine refuses to write (an in-root key that is not managed)
/// still reaches a lake (a build before that rule, another Lance client and a repair).
async fn append_spelled_around_the_engine(lake: &TestLake, table: &str, rows: &[(&str, &str, &ManagedObject)]) {
    let params = lance::dataset::WriteParams { mode: lance::dataset::WriteMode::Append, ..Default::default() };
    let batches = RecordBatchIterator::new(vec![Ok(spelled(rows))], schema());
    let ds = lance::Dataset::write(batches, &lake.engine.dataset_uri(table), Some(params)).await.unwrap();
    lake.engine.repair_refs(table, ds.version().version).await.unwrap();
}

/// The engine refuses to write `rows` (a reference inside the lake root that is not a managed
/// key), and nothing is committed.
async fn assert_refused_by_the_engine(lake: &TestLake, table: &str, rows: &[(&str, &str, &ManagedObject)]) {
    let before = lake.engine.versions(table).await.unwrap().len();
    let refused = append_spelled(lake, table, rows).await.unwrap_err();
    assert!(refused.contains("not a managed object key") && refused.contains("nothing was committed"), "{refused}");
    assert_eq!(lake.engine.versions(table).await.unwrap().len(), before, "nothing committed");
}

async fn apply_plan(lake: &TestLake, plan: &GcPlan) -> Result<ApplyReport, String> {
    let dir = tempfile::tempdir().unwrap();
    let deleter = lake_gc::deleter::for_store(&lake.store);
    let options = ApplyOptions { page_size: 1, concurrency: 1, ..ApplyOptions::default() };
    apply(&lake.engine, &deleter, &dir.path().join("c").as_path().into(), Some(plan), &options)
        .await
        .map_err(|e| e.to_string())
}

/// Safe outcome for an object `o` that a retained row reaches: it is not planned on complete
/// lineage, and after apply (when the plan is applicable) its bytes are still readable.
async fn assert_kept(lake: &TestLake, plan: &GcPlan, o: &ManagedObject, what: &str) {
    let planned = plan.candidates.keys().unwrap().contains(&o.key);
    let applied = apply_plan(lake, plan).await;
    let exists = lake.store.head(&o.key).await.unwrap().is_some();
    assert!(
        !(plan.lineage_complete && planned) && exists,
        "{what}: live object {} planned={planned} lineage_complete={} exists_after_apply={exists} apply={:?} problems={:?}",
        o.key,
        plan.lineage_complete,
        applied.as_ref().map(|r| (r.checkpoint.deleted, r.checkpoint.complete)),
        plan.problems
    );
}

/// A link at the lake root (outside `objects/`), `<root>/alias -> objects`, and a row that
/// names an old object through it with a relative key (`alias/<ULID>/x.bin`). The key is not
/// managed, so the publication guard lets an old object be referenced again; the sweep never
/// meets the link (it lists `objects/` only). The engine refuses to write such a key; written
/// around it (and repaired), GC refuses to plan.
#[tokio::test(flavor = "multi_thread")]
async fn attack_relative_key_through_a_root_level_link() {
    let lake = new_lake().await;
    let x = lake.upload("x.bin", b"precious x").await;
    lake.engine.append("t", reader(vec![batch(&[("keep", None)])])).await.unwrap();
    std::os::unix::fs::symlink("objects", root(&lake).join("alias")).unwrap();
    let through = format!("alias/{}", x.key.strip_prefix("objects/").unwrap());
    assert_eq!(std::fs::read(root(&lake).join(&through)).unwrap(), b"precious x");
    assert_refused_by_the_engine(&lake, "t", &[("e", &through, &x)]).await;
    append_spelled_around_the_engine(&lake, "t", &[("e", &through, &x)]).await;
    tokio::time::sleep(Duration::from_millis(15)).await;
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert_kept(&lake, &plan, &x, "relative key through <root>/alias").await;
}

/// The same with a `file:` URL textually under the root (never resolved on the file system).
#[tokio::test(flavor = "multi_thread")]
async fn attack_file_url_through_a_root_level_link() {
    let lake = new_lake().await;
    let x = lake.upload("x.bin", b"precious x").await;
    lake.engine.append("t", reader(vec![batch(&[("keep", None)])])).await.unwrap();
    std::os::unix::fs::symlink("objects", root(&lake).join("alias")).unwrap();
    let through = format!("file://{}/alias/{}", root(&lake).display(), x.key.strip_prefix("objects/").unwrap());
    assert_refused_by_the_engine(&lake, "t", &[("e", &through, &x)]).await;
    append_spelled_around_the_engine(&lake, "t", &[("e", &through, &x)]).await;
    tokio::time::sleep(Duration::from_millis(15)).await;
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert_kept(&lake, &plan, &x, "file URL through <root>/alias").await;
}

/// A link under `objects/` that the sweep never meets: `objects/<L>` (a young ULID) -> the
/// folder of an old object, and a row naming `objects/<L>/x.bin` (young: the guard passes).
/// Any young managed object minted before `L` stops the listing before it reaches the link, so
/// the "goes through the symbolic link" check never runs for it.
#[tokio::test(flavor = "multi_thread")]
async fn attack_link_after_the_first_young_key() {
    let lake = new_lake().await;
    let x = lake.upload("x.bin", b"precious x").await;
    lake.engine.append("t", reader(vec![batch(&[("keep", None)])])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(15)).await;
    let cutoff = Utc::now();
    tokio::time::sleep(Duration::from_millis(15)).await;
    let young = lake.upload("young.bin", b"young").await;
    lake.engine.append("t", reader(vec![batch(&[("y", Some(&young))])])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (folder, name) = x.key.rsplit_once('/').unwrap();
    let link = format!("objects/{}", ulid::Ulid::new());
    std::os::unix::fs::symlink(root(&lake).join(folder), root(&lake).join(&link)).unwrap();
    let through = format!("{link}/{name}");
    append_spelled(&lake, "t", &[("e", &through, &x)]).await.unwrap();
    let plan = dry_run(&lake, cutoff, 10).await;
    assert_kept(&lake, &plan, &x, "objects/<young link>/x.bin").await;
}

/// A bind mount (as root, or in a user namespace) that is undone when dropped.
struct BindMount(PathBuf);

impl BindMount {
    /// Binds `from` on `to`; `None` when this machine does not allow mounts.
    fn new(from: &std::path::Path, to: &std::path::Path) -> Option<Self> {
        let ok = std::process::Command::new("mount")
            .arg("--bind")
            .arg(from)
            .arg(to)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("mount --bind is not allowed here: attack not tried");
        }
        ok.then(|| Self(to.to_path_buf()))
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Every regular file under `dir` with its bytes.
fn files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in walkdir::WalkDir::new(dir).sort_by_file_name().into_iter().flatten() {
        if e.file_type().is_file() {
            out.push((e.path().strip_prefix(dir).unwrap().display().to_string(), std::fs::read(e.path()).unwrap()));
        }
    }
    out
}

fn minted_ago(ago: Duration) -> ulid::Ulid {
    crate::local_links_spellings_and_own_garbage::minted_ago(ago)
}

/// A bind mount is no symbolic link: `objects/<old ULID>` made a bind mount of the table's
/// data folder. Lance data file names fit the managed grammar, so each data file looks like an
/// old, unreferenced managed object.
#[tokio::test(flavor = "multi_thread")]
async fn attack_bind_mount_of_the_tables_data_under_objects() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
    let root = root(&lake);
    let folder = root.join(format!("objects/{}", minted_ago(Duration::from_secs(7200))));
    std::fs::create_dir_all(&folder).unwrap();
    let Some(_mount) = BindMount::new(&root.join("tables/t.lance/data"), &folder) else { return };
    let data = files(&root.join("tables/t.lance/data"));
    tokio::time::sleep(Duration::from_millis(15)).await;
    let plan = dry_run(&lake, Utc::now(), 10).await;
    let planned: Vec<String> = plan.candidates.keys().unwrap();
    let applied = apply_plan(&lake, &plan).await;
    let after = files(&root.join("tables/t.lance/data"));
    assert!(
        after == data && lake.engine.scan_version("t", 1).await.is_ok(),
        "table data deleted through a bind mount: planned {planned:?}, apply {:?}",
        applied.map(|r| r.checkpoint.deleted)
    );
}

/// The same with a folder outside the lake root bound on `objects/<old ULID>`: GC must never
/// touch a file outside the root.
#[tokio::test(flavor = "multi_thread")]
async fn attack_bind_mount_of_a_folder_outside_the_root() {
    let lake = new_lake().await;
    lake.engine.append("t", reader(vec![batch(&[("e", None)])])).await.unwrap();
    let root = root(&lake);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("precious.bin"), b"precious").unwrap();
    let folder = root.join(format!("objects/{}", minted_ago(Duration::from_secs(7200))));
    std::fs::create_dir_all(&folder).unwrap();
    let Some(_mount) = BindMount::new(outside.path(), &folder) else { return };
    tokio::time::sleep(Duration::from_millis(15)).await;
    let plan = dry_run(&lake, Utc::now(), 10).await;
    let planned: Vec<String> = plan.candidates.keys().unwrap();
    let applied = apply_plan(&lake, &plan).await;
    assert!(
        outside.path().join("precious.bin").exists(),
        "a file outside the root deleted through a bind mount: planned {planned:?}, apply {:?}",
        applied.map(|r| r.checkpoint.deleted)
    );
}

/// `<root>/objects` itself a symbolic link to a folder outside the root.
#[tokio::test(flavor = "multi_thread")]
async fn attack_objects_folder_is_a_link_outside_the_root() {
    let lake = new_lake().await;
    lake.engine.append("t", reader(vec![batch(&[("e", None)])])).await.unwrap();
    let root = root(&lake);
    let outside = tempfile::tempdir().unwrap();
    let old = outside.path().join(minted_ago(Duration::from_secs(7200)).to_string());
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(old.join("precious.bin"), b"precious").unwrap();
    let _ = std::fs::remove_dir_all(root.join("objects"));
    std::os::unix::fs::symlink(outside.path(), root.join("objects")).unwrap();
    tokio::time::sleep(Duration::from_millis(15)).await;
    let planned = unchecked_plan_now(&lake, Duration::from_secs(1)).await;
    eprintln!(
        "objects/ as a link: {:?}",
        planned.as_ref().map(|(p, _)| (&p.foreign, p.lineage_complete)).map_err(|e| e.to_string())
    );
    if let Ok((plan, _)) = planned {
        let keys = plan.candidates.keys().unwrap();
        let applied = apply_plan(&lake, &plan).await;
        assert!(
            old.join("precious.bin").exists(),
            "a file outside the root deleted through a linked objects/: planned {keys:?}, apply {:?}",
            applied.map(|r| r.checkpoint.deleted)
        );
    }
}

/// A second Lance client commits a DETACHED version (Lance 14 `CommitBuilder::with_detached`):
/// `_versions/d<n>.manifest`, left out of `version_refs()`, yet a version anyone can check out
/// (or restore). Its rows reference an old object no journaled version references.
#[tokio::test(flavor = "multi_thread")]
async fn attack_detached_version_references_an_old_object() {
    use lance::dataset::{CommitBuilder, InsertBuilder, WriteMode, WriteParams};
    let lake = new_lake().await;
    let x = lake.upload("x.bin", b"precious x").await;
    lake.engine.append("t", reader(vec![batch(&[("e", None)])])).await.unwrap();
    let ds = Arc::new(lance::Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap());
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    let tx = InsertBuilder::new(ds.clone())
        .with_params(&params)
        .execute_uncommitted(vec![batch(&[("detached", Some(&x))])])
        .await
        .unwrap();
    let detached = match CommitBuilder::new(ds.clone()).with_detached(true).execute(tx).await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("detached commit refused by Lance: {e}: attack not tried");
            return;
        }
    };
    let version = detached.version().version;
    let reread = lance::Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap().checkout_version(version).await;
    assert!(reread.is_ok(), "the detached version can be checked out");
    tokio::time::sleep(Duration::from_millis(15)).await;
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert_kept(&lake, &plan, &x, &format!("detached version {version:#x}")).await;
}

/// A plan document edited to name a live (old, collectable) object, digest recomputed (the
/// digest is an unkeyed SHA-256 anyone can recompute): apply must not delete a live object.
#[tokio::test(flavor = "multi_thread")]
async fn attack_edited_plan_with_a_recomputed_digest_names_a_live_object() {
    let lake = new_lake().await;
    let live = lake.upload("live.bin", b"live").await;
    let orphan = lake.upload("orphan.bin", b"orphan").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&live))])])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(15)).await;
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert_eq!(plan.candidates.keys().unwrap(), vec![orphan.key.clone()]);
    let mut doc: serde_json::Value = serde_json::from_slice(&plan.to_document().unwrap()).unwrap();
    let candidates = doc["plan"]["candidates"].as_array_mut().unwrap();
    let mut extra = candidates[0].clone();
    extra["uri"] = serde_json::Value::String(live.key.clone());
    candidates.push(extra);
    candidates.sort_by(|a, b| a["uri"].as_str().cmp(&b["uri"].as_str()));
    let edited: GcPlan = serde_json::from_value(doc["plan"].clone()).unwrap();
    doc["digest"] = serde_json::Value::String(edited.digest().unwrap());
    let bytes = serde_json::to_vec_pretty(&doc).unwrap();
    let accepted = GcPlan::from_document(&bytes, "edited.json");
    let Ok(edited) = accepted else { return };
    let applied = apply_plan(&lake, &edited).await;
    assert!(
        lake.store.head(&live.key).await.unwrap().is_some(),
        "an edited plan (recomputed digest) deleted the live {}: apply {:?}",
        live.key,
        applied.map(|r| r.checkpoint.deleted)
    );
}

/// A sidecar replaced by another sealed document (the seal is an unkeyed SHA-256 that the
/// library's own public encoder computes): version 1's entry says it references nothing.
#[tokio::test(flavor = "multi_thread")]
async fn attack_resealed_sidecar() {
    let lake = new_lake().await;
    let x = lake.upload("x.bin", b"precious x").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&x))])])).await.unwrap();
    let forged = lake_common::ObjectReferenceDelta::snapshot("t", 1, &lake_common::ReferenceCounts::new()).encode();
    lake.store.put(&lake_store::layout::sidecar_key("t", 1), forged).await.unwrap();
    // A seal is an integrity check, not an authentication: a consistent forgery by someone who
    // can write the journal is not a decode error (docs/safety.md, "What seals do not do").
    // `lake refs verify` compares the journal with a scan of every retained version and finds it.
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(!report.is_ok(), "verify must find the forged entry");
    assert!(report.mismatches.iter().any(|m| m.uri == x.key && m.journal == 0 && m.scan == 1), "{report:?}");
}

/// `--checkpoint PATH` where `PATH.plan.json` is a live managed object (`objects/<U>/q3.plan.json`,
/// a name the grammar allows): apply writes its plan document there before anything else.
#[tokio::test(flavor = "multi_thread")]
async fn attack_checkpoint_path_beside_a_live_object() {
    let lake = new_lake().await;
    let live = lake.upload("q3.plan.json", b"precious report").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&live))])])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(15)).await;
    let plan = dry_run(&lake, Utc::now(), 10).await;
    let path = root(&lake).join(live.key.strip_suffix(".plan.json").unwrap());
    let deleter = lake_gc::deleter::for_store(&lake.store);
    let applied = apply(&lake.engine, &deleter, &path.as_path().into(), Some(&plan), &ApplyOptions::default()).await;
    let bytes = std::fs::read(root(&lake).join(&live.key)).unwrap_or_default();
    assert!(
        bytes == b"precious report",
        "apply overwrote the live object {} with its plan document (apply {:?})",
        live.key,
        applied.map(|r| r.checkpoint.complete)
    );
}

/// The table's data folder moved into the managed prefix and linked back
/// (`tables/t.lance/data -> ../../objects/<old ULID>`): Lance reads through the link; the
/// sweep meets real files under `objects/` with grammar-conforming names.
#[tokio::test(flavor = "multi_thread")]
async fn attack_table_data_folder_linked_into_objects() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
    let root = root(&lake);
    let ulid = minted_ago(Duration::from_secs(7200));
    let moved = root.join(format!("objects/{ulid}"));
    std::fs::rename(root.join("tables/t.lance/data"), &moved).unwrap();
    std::os::unix::fs::symlink(format!("../../objects/{ulid}"), root.join("tables/t.lance/data")).unwrap();
    assert_eq!(lake.engine.scan_version("t", 1).await.unwrap().total(), 1, "the table reads through the link");
    let data = files(&moved);
    tokio::time::sleep(Duration::from_millis(15)).await;
    let plan = dry_run(&lake, Utc::now(), 10).await;
    let planned: Vec<String> = plan.candidates.keys().unwrap();
    let applied = apply_plan(&lake, &plan).await;
    assert!(
        files(&moved) == data,
        "table data files deleted: planned {planned:?} (complete: {}), apply {:?}",
        plan.lineage_complete,
        applied.map(|r| r.checkpoint.deleted)
    );
}

/// A collector opened with the engine of another lake would plan against that lake's journal
/// (nothing live here) and delete this lake's live objects: refused when opened.
#[tokio::test(flavor = "multi_thread")]
async fn a_collector_with_the_engine_of_another_lake_is_refused() {
    use lake_gc::collector::GarbageCollector;
    let lake = new_lake().await;
    let other = new_lake().await;
    let a = lake.upload("a.bin", b"live in this lake").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
    let Err(err) = GarbageCollector::open(lake.store.clone(), &other.engine).await else {
        panic!("a collector with another lake's engine was opened");
    };
    assert!(matches!(err, lake_gc::GcError::Store(lake_store::StoreError::Root { .. })), "{err}");
    assert!(err.to_string().contains("another lake"), "{err}");
    assert!(GarbageCollector::open(lake.store.clone(), &lake.engine).await.is_ok());
    assert!(lake.store.head(&a.key).await.unwrap().is_some());
}
