//! A journal entry is bound to the Lance version it describes (its transaction UUID and its
//! manifest's size and e-tag): a table whose Lance files were replaced under its journal is a
//! named lineage problem when planning and stops apply, on real Lance datasets, local and on S3
//! (LocalStack). An entry of an earlier build (format 3, unbound) is refused until `lake refs
//! bind` has checked it against full scans.

use crate::gc_scenario::dry_run;
use crate::support::{apply_fresh, batch, copy_tree, new_lake, new_s3_lake, reader, schema, TestLake};
use chrono::Utc;
use lake_common::{ObjectReferenceDelta, SidecarDocument};
use lake_gc::apply::ApplyOptions;
use lake_gc::plan::GcPlan;
use lake_gc::GcError;
use lake_store::layout::sidecar_key;
use lake_store::writer::ManagedObject;
use lance::dataset::{WriteMode, WriteParams};
use lance::Dataset;
use std::path::Path;
use std::time::Duration;

type Rows<'a> = Vec<(&'a str, Option<&'a ManagedObject>)>;

/// Writes one version per entry of `versions` to the Lance dataset at `uri` (creating it first):
/// another table, by a plain Lance client, whose version numbers are the same as a lake table's.
async fn other_table(uri: &str, versions: &[Rows<'_>]) {
    for rows in versions {
        let mode = if Path::new(uri).exists() { WriteMode::Append } else { WriteMode::Create };
        let params = WriteParams { mode, ..Default::default() };
        let batches = arrow_array::RecordBatchIterator::new(vec![Ok(batch(rows))], schema());
        Dataset::write(batches, uri, Some(params)).await.unwrap();
    }
}

/// Replaces the Lance files of the dataset folder `table` (everything but its journal,
/// `_lake/`) by those of the dataset folder `from`.
fn replace_lance_files(table: &Path, from: &Path) {
    for entry in std::fs::read_dir(table).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "_lake" {
            std::fs::remove_dir_all(entry.path()).unwrap();
        }
    }
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "_lake" {
            copy_tree(&entry.path(), &table.join(entry.file_name()));
        }
    }
}

/// The lineage problems of a refused apply, as sentences.
fn refusal(err: GcError) -> Vec<String> {
    match err {
        GcError::LineageIncomplete { problems } => problems.iter().map(ToString::to_string).collect(),
        other => panic!("expected a lineage refusal, got {other}"),
    }
}

/// Puts the newest manifest of the dataset folder `other` over the newest of `table` (both of
/// version `version`), with the data and transaction files it names (new file names: nothing
/// else of `table` is overwritten).
fn graft_newest_manifest(table: &Path, other: &Path, version: u64) {
    for folder in ["data", "_transactions"] {
        for entry in std::fs::read_dir(other.join(folder)).unwrap() {
            let entry = entry.unwrap();
            let target = table.join(folder).join(entry.file_name());
            if !target.exists() {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    // V2 manifest names sort newest first.
    let newest = |dir: &Path| {
        let mut names: Vec<_> = std::fs::read_dir(dir.join("_versions")).unwrap().map(|e| e.unwrap().path()).collect();
        names.sort();
        names.into_iter().next().unwrap()
    };
    let (ours, theirs) = (newest(table), newest(other));
    assert_eq!(ours.file_name(), theirs.file_name(), "both are version {version}");
    std::fs::copy(&theirs, &ours).unwrap();
}

/// Asserts that `fresh` names `t`'s versions 1 and 2 as written for another Lance transaction
/// and that an apply of `before` (planned before the swap) stops on the changed manifests.
async fn swapped_versions_are_named(lake: &TestLake, fresh: &GcPlan, before: &GcPlan) {
    for version in [1, 2] {
        let needle = format!("table `t` version {version}: its journal entry was written for Lance transaction");
        assert!(
            fresh.problems.iter().any(|p| p.kind == "entry_of_another_version" && p.message.contains(&needle)),
            "{:?}",
            fresh.problems
        );
    }
    let found = refusal(apply_fresh(lake, before, &ApplyOptions::default()).await.unwrap_err());
    assert!(found.iter().any(|p| p.contains("its Lance manifest is another file now")), "{found:?}");
}

/// A lake table `t` referencing `a` (v1) and `b` (v2), and an object `x` that only another
/// table's versions 1 and 2 reference.
async fn lake_and_other(lake: &TestLake, other: &str) -> (ManagedObject, ManagedObject, ManagedObject) {
    let a = lake.upload("a.bin", b"a").await;
    let b = lake.upload("b.bin", b"b").await;
    let x = lake.upload("x.bin", b"x").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
    lake.engine.append("t", reader(vec![batch(&[("f", Some(&b))])])).await.unwrap();
    other_table(other, &[vec![("o", Some(&x))], vec![("p", Some(&x)), ("q", Some(&a))]]).await;
    tokio::time::sleep(Duration::from_millis(15)).await;
    (a, b, x)
}

/// The issue's input: table `t`'s Lance files replaced by those of another table with the same
/// version numbers, its journal kept. A fresh plan names every retained version's entry as
/// written for another version and plans nothing; an apply of a plan made before the swap stops
/// before deleting, and `x`, which `t`'s versions now reference, is still there.
#[tokio::test(flavor = "multi_thread")]
async fn a_table_whose_lance_files_are_another_tables_is_refused_and_stops_apply() {
    let lake = new_lake().await;
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.lance");
    let (_, _, x) = lake_and_other(&lake, other.to_str().unwrap()).await;
    let before = dry_run(&lake, Utc::now(), 10).await;
    assert!(before.lineage_complete, "{:?}", before.problems);
    assert_eq!(before.candidates.keys().unwrap(), vec![x.key.clone()], "x is referenced by no journal");

    let root = lake.store.local_dir().unwrap().to_path_buf();
    replace_lance_files(&root.join("tables/t.lance"), &other);
    assert_eq!(lake.engine.scan_version("t", 2).await.unwrap().get(&x.identity()), 2, "t's version 2 references x");

    let fresh = dry_run(&lake, Utc::now(), 10).await;
    assert!(!fresh.lineage_complete, "a swapped table's journal is not trusted");
    assert!(fresh.candidates.is_empty(), "{:?}", fresh.candidates.keys());
    swapped_versions_are_named(&lake, &fresh, &before).await;
    assert!(lake.store.head(&x.key).await.unwrap().is_some(), "nothing was deleted");
    // `lake refs verify` names the problem and the differences the scans show.
    let report = lake.engine.verify_refs(&["t".into()]).await.unwrap();
    assert!(!report.is_ok());
    assert!(report.problems.iter().any(|p| p.contains("written for Lance transaction")), "{:?}", report.problems);
    assert!(report.mismatches.iter().any(|m| m.uri == x.key), "{:?}", report.mismatches);
    // And `lake refs bind` refuses to bind a journal the scans contradict, rewriting nothing.
    let sidecar = lake.store.get(&sidecar_key("t", 2)).await.unwrap().unwrap();
    let err = lake.engine.bind_refs("t").await.unwrap_err().to_string();
    assert!(
        err.contains("no journal entry was bound") && err.contains("differs from the table's Lance files"),
        "{err}"
    );
    assert_eq!(lake.store.get(&sidecar_key("t", 2)).await.unwrap().unwrap(), sidecar);
}

/// One version's manifest (and the files it names) replaced by another table's manifest of the
/// same number: only that version is named. Also when a reference checkpoint stands in for it.
#[tokio::test(flavor = "multi_thread")]
async fn one_manifest_swapped_for_another_tables_is_named_also_under_a_checkpoint() {
    let lake = new_lake().await;
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.lance");
    let (_, _, x) = lake_and_other(&lake, other.to_str().unwrap()).await;
    let c = lake.upload("c.bin", b"c").await;
    lake.engine.append("t", reader(vec![batch(&[("g", Some(&c))])])).await.unwrap();
    other_table(other.to_str().unwrap(), &[vec![("r", Some(&x))]]).await;
    let root = lake.store.local_dir().unwrap().to_path_buf();
    let t_dir = root.join("tables/t.lance");
    graft_newest_manifest(&t_dir, &other, 3);

    let fresh = dry_run(&lake, Utc::now(), 10).await;
    let named: Vec<&lake_gc::plan::PlanProblem> =
        fresh.problems.iter().filter(|p| p.kind == "entry_of_another_version").collect();
    assert_eq!(named.len(), 1, "{:?}", fresh.problems);
    assert!(named[0].message.contains("table `t` version 3"), "{named:?}");
    assert!(fresh.candidates.is_empty());

    // A reference checkpoint standing in for the swapped version's entry carries its binding:
    // on a fresh lake cleaned up to version 2 (the checkpoint is at 2), the same swap of
    // version 2 is named.
    let lake = new_lake().await;
    let other = dir.path().join("other2.lance");
    let (_, _, x) = lake_and_other(&lake, other.to_str().unwrap()).await;
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert!(lake.store.head(&lake_lance::refs_checkpoint::checkpoint_key("t")).await.unwrap().is_some());
    let complete = dry_run(&lake, Utc::now(), 10).await;
    assert!(complete.lineage_complete, "{:?}", complete.problems);
    graft_newest_manifest(&lake.store.local_dir().unwrap().join("tables/t.lance"), &other, 2);
    let fresh = dry_run(&lake, Utc::now(), 10).await;
    assert!(
        fresh
            .problems
            .iter()
            .any(|p| p.kind == "entry_of_another_version" && p.message.contains("table `t` version 2:")),
        "{:?}",
        fresh.problems
    );
    assert!(fresh.candidates.is_empty(), "x ({}) is referenced by version 2 now", x.key);
}

/// The whole table folder (journal included) restored from a byte-for-byte backup of itself:
/// locally every manifest gets a new e-tag (inode and mtime), so each entry is checked by its
/// transaction UUID, which is the same: still bound, the plan is the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_byte_for_byte_restore_of_the_table_stays_bound() {
    let lake = new_lake().await;
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.lance");
    let (_, _, x) = lake_and_other(&lake, other.to_str().unwrap()).await;
    let before = dry_run(&lake, Utc::now(), 10).await;
    let root = lake.store.local_dir().unwrap().to_path_buf();
    let backup = tempfile::tempdir().unwrap();
    copy_tree(&root.join("tables/t.lance"), backup.path());
    let listed_before = lake_lance::binding::list_manifests(&lake.store, "t").await.unwrap();
    std::fs::remove_dir_all(root.join("tables/t.lance")).unwrap();
    copy_tree(backup.path(), &root.join("tables/t.lance"));
    let listed_after = lake_lance::binding::list_manifests(&lake.store, "t").await.unwrap();
    assert_eq!(listed_before.keys().collect::<Vec<_>>(), listed_after.keys().collect::<Vec<_>>());
    for (v, m) in &listed_after {
        assert_ne!(Some(m), listed_before.get(v), "version {v}: a copy has a new local e-tag (the slow path runs)");
    }
    let fresh = dry_run(&lake, Utc::now(), 10).await;
    assert!(fresh.lineage_complete, "{:?}", fresh.problems);
    assert_eq!(fresh.candidates.keys().unwrap(), vec![x.key.clone()]);
    assert_eq!(fresh.candidates.keys().unwrap(), before.candidates.keys().unwrap());
    // A plan made before the restore stops apply (the manifests are other files now); a new
    // plan applies.
    let found = refusal(apply_fresh(&lake, &before, &ApplyOptions::default()).await.unwrap_err());
    assert!(found.iter().any(|p| p.contains("its Lance manifest is another file now")), "{found:?}");
    let report = apply_fresh(&lake, &fresh, &ApplyOptions::default()).await.unwrap();
    assert_eq!(report.checkpoint.deleted, 1);
    assert!(lake.store.head(&x.key).await.unwrap().is_none());
}

/// Between plan and apply, a new version is committed through the engine and then its manifest
/// is replaced by another table's of the same number: its entry is checked before apply trusts
/// what it added, and apply stops.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_versions_entry_is_checked_against_its_manifest_before_apply_trusts_it() {
    let lake = new_lake().await;
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.lance");
    let (a, _, x) = lake_and_other(&lake, other.to_str().unwrap()).await;
    other_table(other.to_str().unwrap(), &[vec![("s", Some(&x))]]).await;
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert_eq!(plan.candidates.keys().unwrap(), vec![x.key.clone()]);
    lake.engine.append("t", reader(vec![batch(&[("h", Some(&a))])])).await.unwrap();
    graft_newest_manifest(&lake.store.local_dir().unwrap().join("tables/t.lance"), &other, 3);
    let found = refusal(apply_fresh(&lake, &plan, &ApplyOptions::default()).await.unwrap_err());
    assert!(found.iter().any(|p| p.contains("table `t` version 3: its journal entry was written for")), "{found:?}");
    assert!(lake.store.head(&x.key).await.unwrap().is_some(), "version 3 references x now");
}

/// Rewrites every journal entry of `table` as an earlier build wrote it: format 3, no binding.
async fn unbind_journal(lake: &TestLake, table: &str) -> usize {
    let mut n = 0;
    for (key, _) in lake.store.list_all(&format!("tables/{table}.lance/_lake/object_refs")).await.unwrap() {
        let version: u64 = key.rsplit('/').next().unwrap().trim_end_matches(".json").parse().unwrap();
        let bytes = lake.store.get(&key).await.unwrap().unwrap();
        let old = match SidecarDocument::decode(&bytes, table, version).unwrap() {
            SidecarDocument::Inline(mut d) => {
                d.binding = None;
                d.encode()
            }
            SidecarDocument::Log(mut h) => {
                h.lance = None;
                h.format_version = lake_common::UNBOUND_FORMAT_VERSION;
                h.encode()
            }
        };
        assert!(String::from_utf8_lossy(&old).starts_with("{\"format_version\":3,"));
        lake.store.put(&key, old).await.unwrap();
        n += 1;
    }
    n
}

/// A lake written by the previous build (every entry format 3): planning fails closed, naming
/// each retained version and the command; `lake refs bind` checks the journal against full
/// scans and binds the entries; then the plan is complete and the same as a bound lake's.
#[tokio::test(flavor = "multi_thread")]
async fn a_lake_of_an_earlier_build_is_refused_until_refs_bind_checks_and_binds_it() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let b = lake.upload("b.bin", b"b").await;
    let orphan = lake.upload("o.bin", b"o").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
    lake.engine.append("t", reader(vec![batch(&[("f", Some(&b)), ("g", Some(&a))])])).await.unwrap();
    lake.engine.delete("t", "episode = 'g'").await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(15)).await;
    let bound = dry_run(&lake, Utc::now(), 10).await;
    assert!(bound.lineage_complete, "{:?}", bound.problems);
    assert_eq!(unbind_journal(&lake, "t").await, 3);

    let old = dry_run(&lake, Utc::now(), 10).await;
    assert!(!old.lineage_complete && old.candidates.is_empty());
    for version in 1..=3 {
        assert!(
            old.problems.iter().any(|p| p.kind == "unbound_entry"
                && p.message.contains(&format!(
                    "table `t` version {version}: its journal entry was written by an earlier lake build"
                ))
                && p.message.contains("`refs bind` on table `t`")),
            "{:?}",
            old.problems
        );
    }
    let report = lake.engine.bind_refs("t").await.unwrap();
    assert_eq!(report.bound, vec![1, 2, 3]);
    assert_eq!(report.versions_compared, 3);
    let again = lake.engine.bind_refs("t").await.unwrap();
    assert!(again.bound.is_empty(), "idempotent");
    let fresh = dry_run(&lake, Utc::now(), 10).await;
    assert!(fresh.lineage_complete, "{:?}", fresh.problems);
    assert_eq!(fresh.candidates.keys().unwrap(), bound.candidates.keys().unwrap());
    assert_eq!(fresh.candidates.keys().unwrap(), vec![orphan.key.clone()]);
    for v in 1..=3 {
        let entry: ObjectReferenceDelta =
            lake_lance::sidecar::read(&lake.store, "t", v).await.unwrap().unwrap().unwrap();
        assert!(entry.binding.is_some(), "version {v} bound");
    }
}

/// Copies every object under `from` to the same relative key under `to` on the lake's store,
/// after deleting the Lance files under `to` (its journal `_lake/` kept).
async fn replace_lance_objects(lake: &TestLake, to: &str, from: &str) {
    let mut copied = Vec::new();
    for (key, _) in lake.store.list_all(from).await.unwrap() {
        if !key.contains("/_lake/") {
            copied.push((format!("{to}{}", &key[from.len()..]), lake.store.get(&key).await.unwrap().unwrap()));
        }
    }
    for (key, _) in lake.store.list_all(to).await.unwrap() {
        if !key.contains("/_lake/") {
            lake.store.delete(&key).await.unwrap();
        }
    }
    for (key, bytes) in copied {
        lake.store.put(&key, bytes.to_vec()).await.unwrap();
    }
}

/// On S3 (LocalStack): the e-tag a writer records is the one the version listing shows (the
/// fast path), a byte-for-byte copy of a table's own objects put back (same e-tags: MD5) stays
/// bound, and a table whose Lance objects are replaced by another table's is named when
/// planning and stops an apply planned before.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_a_swapped_table_is_refused_and_a_copy_of_itself_stays_bound() {
    let lake = new_s3_lake("binding").await;
    let a = lake.upload("a.bin", b"a").await;
    let b = lake.upload("b.bin", b"b").await;
    let x = lake.upload("x.bin", b"x").await;
    let y = lake.upload("y.bin", b"y").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
    lake.engine.append("t", reader(vec![batch(&[("f", Some(&b))])])).await.unwrap();
    lake.engine.append("u", reader(vec![batch(&[("o", Some(&x))])])).await.unwrap();
    lake.engine.append("u", reader(vec![batch(&[("p", Some(&x))])])).await.unwrap();
    let listed = lake_lance::binding::list_manifests(&lake.store, "t").await.unwrap();
    for v in [1, 2] {
        let entry = lake_lance::sidecar::read(&lake.store, "t", v).await.unwrap().unwrap().unwrap();
        let binding = entry.binding.expect("bound");
        assert!(binding.manifest_e_tag.is_some(), "S3 gives e-tags");
        assert_eq!(Some(&binding.manifest()), listed.get(&v), "version {v}: HEAD and LIST agree");
        assert!(binding.transaction.is_some());
    }
    tokio::time::sleep(Duration::from_millis(15)).await;
    let before = dry_run(&lake, Utc::now(), 10).await;
    assert!(before.lineage_complete, "{:?}", before.problems);
    assert_eq!(before.candidates.keys().unwrap(), vec![y.key.clone()]);

    // A byte-for-byte copy of `t`'s own Lance objects, put back: same e-tags, still bound.
    replace_lance_objects(&lake, "tables/t.lance", "tables/t.lance").await;
    let restored = dry_run(&lake, Utc::now(), 10).await;
    assert!(restored.lineage_complete, "{:?}", restored.problems);

    // `u`'s Lance objects over `t`'s: `t`'s version 2 is `u`'s now.
    replace_lance_objects(&lake, "tables/t.lance", "tables/u.lance").await;
    let fresh = dry_run(&lake, Utc::now(), 10).await;
    assert!(!fresh.lineage_complete && fresh.candidates.is_empty());
    swapped_versions_are_named(&lake, &fresh, &before).await;
    assert!(lake.store.head(&y.key).await.unwrap().is_some(), "nothing was deleted");
}
