//! Doors an adversarial run found on local roots, each closed and tried with the input that
//! opened it and more of its kind: symbolic links and special files under `objects/` (never
//! listed, planned or deleted through), GC's own garbage (emptied folders, reference logs of
//! writes that never committed), spellings of one object (RFC 8089, routes through links), and
//! a journal edited in place (sealed by digests).

use crate::gc_scenario::dry_run;
use crate::support::{apply_fresh, batch, new_lake, reader, schema, TestLake};
use arrow_array::{ArrayRef, RecordBatch, RecordBatchIterator, StringArray};
use chrono::Utc;
use lake_common::DataLocationBuilder;
use lake_gc::apply::{ApplyOptions, ApplyReport};
use lake_gc::plan::GcPlan;
use lake_gc::unchecked::apply_unchecked as apply;
use lake_store::layout::{reference_log_key, sidecar_key};
use lake_store::writer::ManagedObject;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A ULID minted `ago` before now, as a key segment.
pub(crate) fn minted_ago(ago: Duration) -> ulid::Ulid {
    let ms = (Utc::now() - chrono::Duration::from_std(ago).unwrap()).timestamp_millis() as u64;
    ulid::Ulid::from_parts(ms, rand_bits())
}

fn rand_bits() -> u128 {
    ulid::Ulid::new().random()
}

fn root(lake: &TestLake) -> PathBuf {
    lake.store.local_dir().unwrap().to_path_buf()
}

/// Every file under `dir`, relative, with its bytes (symbolic links as their targets' names).
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let e = e.unwrap();
        if e.file_type().is_file() {
            out.push((e.path().strip_prefix(dir).unwrap().display().to_string(), std::fs::read(e.path()).unwrap()));
        }
    }
    out
}

/// Plans with a cutoff just past now and applies the plan to completion.
async fn plan_and_apply(lake: &TestLake) -> (GcPlan, ApplyReport) {
    tokio::time::sleep(Duration::from_millis(15)).await;
    let plan = dry_run(lake, Utc::now(), 3).await;
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("gc.ckpt");
    let deleter = lake_gc::deleter::for_store(&lake.store);
    let options = ApplyOptions { page_size: 2, ..ApplyOptions::default() };
    let report = apply(&lake.engine, &deleter, &ckpt.as_path().into(), Some(&plan), &options).await.unwrap();
    assert!(report.checkpoint.complete, "{:?}", report.checkpoint);
    (plan, report)
}

async fn table_with(lake: &TestLake, objects: &[&ManagedObject]) {
    let rows: Vec<(&str, Option<&ManagedObject>)> = objects.iter().map(|o| ("e", Some(*o))).collect();
    lake.engine.append("t", reader(vec![batch(&rows)])).await.unwrap();
}

/// The adversarial input: `objects/<ULID minted an hour ago>` made a symbolic link to the
/// table's data folder. The plan names it as foreign and plans nothing through it; apply
/// leaves the table's data files alone and the table still reads.
#[tokio::test(flavor = "multi_thread")]
async fn a_link_to_the_tables_data_is_never_planned_or_deleted_through() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    table_with(&lake, &[&a]).await;
    let root = root(&lake);
    let link = format!("objects/{}", minted_ago(Duration::from_secs(3600)));
    std::os::unix::fs::symlink("../tables/t.lance/data", root.join(&link)).unwrap();
    let data = tree(&root.join("tables/t.lance/data"));
    assert!(!data.is_empty());
    let (plan, _) = plan_and_apply(&lake).await;
    assert!(plan.candidates.keys().unwrap().iter().all(|k| !k.starts_with(&link)), "{:?}", plan.candidates.keys());
    assert_eq!(plan.foreign, vec![format!("{link}: symbolic link")]);
    assert_eq!(tree(&root.join("tables/t.lance/data")), data, "the table's data files are untouched");
    assert!(lake.engine.scan_version("t", 1).await.unwrap().total() == 1, "the table still reads");
}

/// More of the kind: a link to one data file inside a managed folder, a link out of the root,
/// a named pipe and a socket: all foreign, none followed, all still there after apply, and
/// nothing outside the root touched. A real orphan beside them is deleted.
#[tokio::test(flavor = "multi_thread")]
async fn links_pipes_and_sockets_are_foreign_and_survive() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let orphan = lake.upload("orphan.bin", b"orphan").await;
    table_with(&lake, &[&a]).await;
    let root = root(&lake);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("precious.bin"), b"precious").unwrap();
    let data_file = std::fs::read_dir(root.join("tables/t.lance/data")).unwrap().next().unwrap().unwrap().path();
    let folder = format!("objects/{}", minted_ago(Duration::from_secs(3600)));
    std::fs::create_dir_all(root.join(&folder)).unwrap();
    std::os::unix::fs::symlink(&data_file, root.join(format!("{folder}/data.lance"))).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join(format!("{folder}/out"))).unwrap();
    std::os::unix::fs::symlink(outside.path().join("precious.bin"), root.join(format!("{folder}/p.bin"))).unwrap();
    let made = std::process::Command::new("mkfifo").arg(root.join(format!("{folder}/pipe"))).status().unwrap();
    assert!(made.success());
    let _socket = std::os::unix::net::UnixListener::bind(root.join(format!("{folder}/sock"))).unwrap();
    let (plan, report) = plan_and_apply(&lake).await;
    assert_eq!(plan.candidates.keys().unwrap(), vec![orphan.key.clone()]);
    assert_eq!(plan.foreign_count, 5, "{:?}", plan.foreign);
    for (name, what) in [
        ("data.lance", "symbolic link"),
        ("out", "symbolic link"),
        ("p.bin", "symbolic link"),
        ("pipe", "named pipe"),
        ("sock", "socket"),
    ] {
        assert!(plan.foreign.contains(&format!("{folder}/{name}: {what}")), "{name}: {:?}", plan.foreign);
        assert!(std::fs::symlink_metadata(root.join(format!("{folder}/{name}"))).is_ok(), "{name} stays");
    }
    assert_eq!(report.checkpoint.deleted, 1);
    assert!(data_file.exists());
    assert_eq!(std::fs::read(outside.path().join("precious.bin")).unwrap(), b"precious");
}

/// A folder swapped for a link between the plan and its apply: the planned key is now reached
/// through the link, and the deleter refuses it (skipped, not retried); the file outside stays.
/// A live reference written through a link makes the plan incomplete (it may name a listed
/// object by another path).
#[tokio::test(flavor = "multi_thread")]
async fn a_link_swapped_in_after_the_plan_or_referenced_by_a_row_deletes_nothing() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let orphan = lake.upload("x.bin", b"orphan").await;
    table_with(&lake, &[&a]).await;
    let root = root(&lake);
    tokio::time::sleep(Duration::from_millis(15)).await;
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert_eq!(plan.candidates.keys().unwrap(), vec![orphan.key.clone()]);
    let folder = root.join(orphan.key.rsplit_once('/').unwrap().0);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("x.bin"), b"precious").unwrap();
    std::fs::remove_dir_all(&folder).unwrap();
    std::os::unix::fs::symlink(outside.path(), &folder).unwrap();
    let report = apply_fresh(&lake, &plan, &ApplyOptions::default()).await.unwrap();
    assert_eq!((report.checkpoint.deleted, report.checkpoint.skipped.len()), (0, 1), "{:?}", report.checkpoint);
    assert!(report.checkpoint.complete, "a skipped key is not retried");
    assert_eq!(std::fs::read(outside.path().join("x.bin")).unwrap(), b"precious");

    // A row that names an object through a link (`objects/<L>/y.bin`, L -> the object's folder).
    let lake = new_lake().await;
    let y = lake.upload("y.bin", b"y").await;
    let root = crate::local_links_spellings_and_own_garbage::root(&lake);
    let (folder, name) = y.key.rsplit_once('/').unwrap();
    let link = format!("objects/{}", ulid::Ulid::new());
    std::os::unix::fs::symlink(root.join(folder), root.join(&link)).unwrap();
    let through = ManagedObject { key: format!("{link}/{name}"), ..y.clone() };
    table_with(&lake, &[&through]).await;
    tokio::time::sleep(Duration::from_millis(15)).await;
    let plan = dry_run(&lake, Utc::now() + chrono::Duration::hours(2), 10).await;
    assert!(!plan.lineage_complete && plan.candidates.is_empty(), "{:?}", plan.candidates.keys());
    assert!(plan.problems.iter().any(|p| p.kind == "linked_reference"), "{:?}", plan.problems);
    assert!(lake.store.head(&y.key).await.unwrap().is_some());
}

/// GC's own garbage: the folders its deletes empty go with them; old empty managed folders
/// (left by earlier builds) are planned and removed; a young one stays; the staging file of an
/// upload minted before the cutoff (`name#1`, a process killed mid-upload: earlier builds
/// planned its folder as empty and skipped it on every run) is planned as a staged upload and
/// removed with its folder, while a young upload's staging file stays.
#[tokio::test(flavor = "multi_thread")]
async fn emptied_and_empty_folders_are_collected_safely() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let orphans = [lake.upload("o1.bin", b"1").await, lake.upload("o2.bin", b"2").await];
    table_with(&lake, &[&a]).await;
    let root = root(&lake);
    let old_empty = format!("objects/{}/", minted_ago(Duration::from_secs(7200)));
    let staging = format!("objects/{}/", minted_ago(Duration::from_secs(7200)));
    std::fs::create_dir_all(root.join(&old_empty)).unwrap();
    std::fs::create_dir_all(root.join(&staging)).unwrap();
    std::fs::write(root.join(&staging).join("big.bin#1"), b"half an upload").unwrap();
    tokio::time::sleep(Duration::from_millis(15)).await;
    let cutoff = Utc::now();
    tokio::time::sleep(Duration::from_millis(15)).await;
    let young_empty = format!("objects/{}/", ulid::Ulid::new());
    std::fs::create_dir_all(root.join(&young_empty)).unwrap();
    let young_staging = format!("objects/{}/", ulid::Ulid::new());
    std::fs::create_dir_all(root.join(&young_staging)).unwrap();
    std::fs::write(root.join(&young_staging).join("big.bin#1"), b"an upload in progress").unwrap();
    let plan = dry_run(&lake, cutoff, 2).await;
    let mut want: Vec<String> =
        orphans.iter().map(|o| o.key.clone()).chain([old_empty.clone(), format!("{staging}big.bin#1")]).collect();
    want.sort();
    assert_eq!(plan.candidates.keys().unwrap(), want);
    let report = apply_fresh(&lake, &plan, &ApplyOptions::default()).await.unwrap();
    assert!(report.checkpoint.complete);
    assert_eq!((report.checkpoint.deleted, report.checkpoint.skipped.len()), (4, 0), "{:?}", report.checkpoint);
    for o in &orphans {
        let folder = root.join(o.key.rsplit_once('/').unwrap().0);
        assert!(!folder.exists(), "{} emptied by the delete and removed", folder.display());
    }
    assert!(!root.join(&old_empty).exists());
    assert!(!root.join(&staging).exists(), "an old staged upload goes, and its folder with it");
    assert!(root.join(&young_staging).join("big.bin#1").exists(), "a young staged upload stays");
    assert!(root.join(&young_empty).exists());
    assert!(root.join("objects").is_dir(), "the managed prefix itself stays");
    assert!(lake.store.head(&a.key).await.unwrap().is_some());
}

/// Reference logs of writes that never committed (a log under an old write id, and
/// object_store's staging file of one) are planned and deleted; the log a sidecar names, and a
/// young unnamed log, stay.
#[tokio::test(flavor = "multi_thread")]
async fn reference_logs_of_uncommitted_writes_are_collected() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    table_with(&lake, &[&a]).await;
    let named = match lake_common::SidecarDocument::decode(
        &lake.store.get(&sidecar_key("t", 1)).await.unwrap().unwrap(),
        "t",
        1,
    )
    .unwrap()
    {
        lake_common::SidecarDocument::Log(head) => head.log.write_id,
        other => panic!("{other:?}"),
    };
    let log = lake.store.get(&reference_log_key("t", &named)).await.unwrap().unwrap();
    let old = minted_ago(Duration::from_secs(7200)).to_string();
    let old_staged = minted_ago(Duration::from_secs(7200)).to_string();
    lake.store.put(&reference_log_key("t", &old), log.to_vec()).await.unwrap();
    let staged_key = format!("{}#3", reference_log_key("t", &old_staged));
    std::fs::write(root(&lake).join(&staged_key), &log[..log.len() / 2]).unwrap();
    tokio::time::sleep(Duration::from_millis(15)).await;
    let cutoff = Utc::now();
    tokio::time::sleep(Duration::from_millis(15)).await;
    let young = ulid::Ulid::new().to_string();
    lake.store.put(&reference_log_key("t", &young), log.to_vec()).await.unwrap();
    let plan = dry_run(&lake, cutoff, 10).await;
    let keys = plan.candidates.keys().unwrap();
    assert!(keys.contains(&reference_log_key("t", &old)) && keys.contains(&staged_key), "{keys:?}");
    assert!(!keys.contains(&reference_log_key("t", &young)), "a young log is never planned");
    assert!(!keys.contains(&reference_log_key("t", &named)), "a log a sidecar names is never planned");
    let report = apply_fresh(&lake, &plan, &ApplyOptions::default()).await.unwrap();
    assert!(report.checkpoint.complete);
    assert!(lake.store.head(&reference_log_key("t", &old)).await.unwrap().is_none());
    assert!(!root(&lake).join(&staged_key).exists());
    for kept in [&named, &young] {
        assert!(lake.store.head(&reference_log_key("t", kept)).await.unwrap().is_some(), "{kept}");
    }
    let after = dry_run(&lake, cutoff, 10).await;
    assert!(after.lineage_complete, "{:?}", after.problems);
}

/// Rows that spell one managed object in other ways (the RFC 8089 short form `file:/` that Java
/// and Hadoop print, `file://localhost/`, an upper-case scheme, a route through a symbolic
/// link to the root) are journaled as its key: each object stays live. A spelling naming
/// another host is refused before anything is committed.
#[tokio::test(flavor = "multi_thread")]
async fn every_spelling_of_an_object_keeps_it_live() {
    let lake = new_lake().await;
    let root = root(&lake);
    let alias_dir = tempfile::tempdir().unwrap();
    let alias = alias_dir.path().join("alias");
    std::os::unix::fs::symlink(&root, &alias).unwrap();
    let objects: Vec<ManagedObject> = {
        let mut v = Vec::new();
        for i in 0..5 {
            v.push(lake.upload(&format!("o{i}.bin"), format!("object {i}").as_bytes()).await);
        }
        v
    };
    let r = root.display().to_string();
    let spellings = [
        format!("file:{r}/{}", objects[0].key),
        format!("file://localhost{r}/{}", objects[1].key),
        format!("FILE://{r}/{}", objects[2].key),
        format!("file://{}/{}", alias.display(), objects[3].key),
        format!("File:{}/{}", alias.display(), objects[4].key),
    ];
    let spelled = |uris: &[String], objects: &[ManagedObject]| {
        let mut files = DataLocationBuilder::new();
        for (uri, o) in uris.iter().zip(objects) {
            files.append(uri, o.sha256, o.size);
        }
        let episodes: ArrayRef = Arc::new(StringArray::from_iter_values(uris.iter().map(|_| "e")));
        RecordBatch::try_new(schema(), vec![episodes, Arc::new(files.finish())]).unwrap()
    };
    let rows = spelled(&spellings, &objects);
    lake.engine.append("t", Box::new(RecordBatchIterator::new(vec![Ok(rows)], schema()))).await.unwrap();
    let counts = lake.engine.journal_counts_at("t", 1).await.unwrap();
    for o in &objects {
        assert!(counts.iter().any(|(id, _)| id.uri == o.key), "{} journaled by its key: {counts:?}", o.key);
    }
    let (plan, _) = plan_and_apply(&lake).await;
    assert!(plan.candidates.is_empty(), "{:?}", plan.candidates.keys());
    for o in &objects {
        assert!(lake.store.head(&o.key).await.unwrap().is_some(), "{}", o.key);
    }
    let other_host = spelled(&[format!("file://otherhost{r}/{}", objects[0].key)], &objects[..1]);
    let err = lake.engine.append("t", Box::new(RecordBatchIterator::new(vec![Ok(other_host)], schema()))).await;
    assert!(err.unwrap_err().to_string().contains("another host"));
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), 1, "nothing committed");
}

/// One byte of a key inside a reference log changed (same length, still a valid Arrow IPC
/// stream): the head's digest catches it, lineage is incomplete and apply refuses. The same for
/// an inline sidecar edited in place, a head whose row count is edited, and a head of the
/// unsealed format of earlier builds.
#[tokio::test(flavor = "multi_thread")]
async fn a_journal_edited_in_place_is_refused() {
    async fn tampered(edit: impl FnOnce(&TestLake, &ManagedObject) -> String) -> (GcPlan, String) {
        let lake = new_lake().await;
        let a = lake.upload("a.bin", b"a").await;
        let b = lake.upload("b.bin", b"b").await;
        table_with(&lake, &[&a, &b]).await;
        lake.engine.delete("t", "episode = 'nothing'").await.unwrap();
        let mut rows = vec![("x", Some(&a))];
        rows.push(("y", Some(&b)));
        lake.engine.append("t", reader(vec![batch(&rows)])).await.unwrap();
        lake.engine.delete("t", "episode = 'x'").await.unwrap().unwrap();
        let needle = edit(&lake, &a);
        tokio::time::sleep(Duration::from_millis(15)).await;
        let plan = dry_run(&lake, Utc::now(), 10).await;
        assert!(lake.store.head(&a.key).await.unwrap().is_some());
        let dir = tempfile::tempdir().unwrap();
        let deleter = lake_gc::deleter::for_store(&lake.store);
        let refused = apply(
            &lake.engine,
            &deleter,
            &dir.path().join("c").as_path().into(),
            Some(&plan),
            &ApplyOptions::default(),
        )
        .await;
        assert!(refused.is_err(), "apply must refuse a plan on a tampered journal");
        assert!(lake.store.head(&a.key).await.unwrap().is_some());
        (plan, needle)
    }
    fn rewrite(path: PathBuf, edit: impl FnOnce(&mut Vec<u8>)) {
        let mut bytes = std::fs::read(&path).unwrap();
        edit(&mut bytes);
        std::fs::write(path, bytes).unwrap();
    }
    fn log_of(lake: &TestLake, version: u64) -> PathBuf {
        let head = std::fs::read(root(lake).join(sidecar_key("t", version))).unwrap();
        let text = String::from_utf8(head).unwrap();
        let at = text.find("\"write_id\":\"").unwrap() + 12;
        root(lake).join(reference_log_key("t", &text[at..at + 26]))
    }
    // The adversarial input: a key in version 1's log now names another object.
    let (plan, needle) = tampered(|lake, a| {
        rewrite(log_of(lake, 1), |bytes| {
            let key = a.key.as_bytes();
            let at = bytes.windows(key.len()).position(|w| w == key).expect("the log holds the key");
            bytes[at + key.len() - 1] ^= 0x01;
        });
        "does not match the SHA-256".into()
    })
    .await;
    assert!(!plan.lineage_complete && plan.candidates.is_empty());
    assert!(plan.problems.iter().any(|p| p.message.contains(&needle)), "{:?}", plan.problems);
    // An inline sidecar (a delete's) with a count changed in place.
    let (plan, needle) = tampered(|lake, _| {
        rewrite(root(lake).join(sidecar_key("t", 4)), |bytes| {
            let text = String::from_utf8(bytes.clone()).unwrap().replacen("\"count\":1", "\"count\":2", 1);
            *bytes = text.into_bytes();
        });
        "does not match its seal".into()
    })
    .await;
    assert!(plan.problems.iter().any(|p| p.message.contains(&needle)), "{:?}", plan.problems);
    // A head whose row count says more than its log holds.
    let (plan, _) = tampered(|lake, _| {
        rewrite(root(lake).join(sidecar_key("t", 3)), |bytes| {
            let text = String::from_utf8(bytes.clone()).unwrap().replacen("\"references\":2", "\"references\":1", 1);
            *bytes = text.into_bytes();
        });
        String::new()
    })
    .await;
    assert!(
        !plan.lineage_complete && plan.problems.iter().any(|p| p.message.contains("version 3")),
        "{:?}",
        plan.problems
    );
    // A head of the unsealed format an earlier build wrote.
    let (plan, needle) = tampered(|lake, _| {
        rewrite(root(lake).join(sidecar_key("t", 1)), |bytes| {
            let text =
                String::from_utf8(bytes.clone()).unwrap().replacen("\"format_version\":4", "\"format_version\":2", 1);
            *bytes = text.into_bytes();
        });
        "earlier lake build".into()
    })
    .await;
    assert!(plan.problems.iter().any(|p| p.message.contains(&needle)), "{:?}", plan.problems);
}
