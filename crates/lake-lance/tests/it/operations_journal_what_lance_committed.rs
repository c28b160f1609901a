//! An adversarial pass against the engine operations beyond append (update, upsert, schema evolution,
//! implied journal entries of foreign versions). Each test asserts the SAFE outcome: GC refuses
//! (lineage incomplete), or no object a retained version references is planned, and the journal
//! equals the scans (`verify_refs`). A failing test is a successful attack.

use crate::gc_scenario::dry_run;
use crate::support::{batch, keyed_locations, new_lake, reader, TestLake};
use chrono::Utc;
use lake_lance::update::Assignment;
use lake_store::writer::ManagedObject;
use lance::dataset::transaction::{Operation, RewriteGroup, Transaction};
use lance::dataset::{CommitBuilder, InsertBuilder, WriteMode, WriteParams};
use lance::Dataset;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

fn set(s: &str) -> Assignment {
    s.parse().unwrap()
}

/// Keys referenced by any retained version of `table`, from full scans. A version the engine
/// cannot scan (a look-alike column, say) counts as referencing every object of the lake.
async fn live_keys(lake: &TestLake, table: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for v in lake.engine.versions(table).await.unwrap() {
        match lake.engine.scan_version(table, v.version).await {
            Ok(counts) => {
                for (id, _) in counts.iter() {
                    keys.insert(id.uri.clone());
                }
            }
            Err(e) => {
                eprintln!("version {} cannot be scanned ({e}): every object counts as live", v.version);
                keys.extend(lake.all_object_keys().await.into_iter().filter(|k| k.starts_with("objects/")));
            }
        }
    }
    keys
}

/// Outcome of a dry run at "now": (lineage complete, live objects planned, problems).
async fn gc_outcome(lake: &TestLake, table: &str) -> (bool, Vec<String>, Vec<String>) {
    tokio::time::sleep(Duration::from_millis(20)).await;
    let plan = dry_run(lake, Utc::now(), 10).await;
    let candidates: BTreeSet<String> = plan.candidates.keys().unwrap().into_iter().collect();
    let live = live_keys(lake, table).await;
    let planned_live: Vec<String> = candidates.intersection(&live).cloned().collect();
    (plan.lineage_complete, planned_live, plan.problems.into_iter().map(|p| p.message).collect())
}

/// The safe outcome: no live object planned; and either GC refuses or the journal is exact.
async fn assert_safe(lake: &TestLake, table: &str, label: &str) {
    let (complete, planned_live, problems) = gc_outcome(lake, table).await;
    let report = match lake.engine.verify_refs(&[]).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("[{label}] verify_refs failed: {e}; lineage_complete={complete} planned_live={planned_live:?} problems={problems:?}");
            assert!(planned_live.is_empty(), "[{label}] HOLE: live objects planned for deletion: {planned_live:?}");
            assert!(!complete, "[{label}] HOLE: verify cannot read the table yet lineage is complete");
            return;
        }
    };
    eprintln!(
        "[{label}] lineage_complete={complete} planned_live={planned_live:?} problems={problems:?} verify_ok={} mismatches={:?}",
        report.is_ok(),
        report.mismatches
    );
    assert!(planned_live.is_empty(), "[{label}] HOLE: live objects planned for deletion: {planned_live:?}");
    assert!(
        !complete || report.is_ok(),
        "[{label}] HOLE: lineage complete but the journal disagrees with the table: {report:?}"
    );
}

async fn uploads(lake: &TestLake, n: usize, prefix: &str) -> Vec<ManagedObject> {
    let mut v = Vec::new();
    for i in 0..n {
        v.push(lake.upload(&format!("{prefix}{i}.bin"), format!("{prefix} object {i}").as_bytes()).await);
    }
    v
}

async fn table_of(lake: &TestLake, objects: &[ManagedObject]) {
    let names: Vec<String> = (0..objects.len()).map(|i| format!("e{i}")).collect();
    let rows: Vec<(&str, Option<&ManagedObject>)> =
        names.iter().zip(objects).map(|(n, o)| (n.as_str(), Some(o))).collect();
    lake.engine.append("t", reader(vec![batch(&rows)])).await.unwrap();
}

// -------------------------------------------------------------------------------------------
// 1. Update: the delta is a pre-scan, the commit re-evaluates the expression.

/// `SET file = CASE WHEN random() < 0.5 THEN NULL ELSE file END`: the pre-scan and Lance's
/// update each draw their own random numbers; the row counts agree (every row matches), the
/// values do not.
#[tokio::test(flavor = "multi_thread")]
async fn update_with_a_nondeterministic_expression() {
    let candidates = [
        "file = nvl2(nullif(random() < 0.5, true), file, nullif(file, file))",
        "file = array_element(make_array(file, nullif(file, file)), arrow_cast(floor(random() * 2), 'Int64') + 1)",
        "file = make_array(file, nullif(file, file))[arrow_cast(floor(random() * 2), 'Int64') + 1]",
        "file = nullif(file, arrow_cast(nullif(random() < 0.5, true), 'Boolean'))",
        "file = coalesce(nullif(file, file), file)",
    ];
    for expression in candidates {
        let lake = new_lake().await;
        let objects = uploads(&lake, 16, "o").await;
        table_of(&lake, &objects).await;
        let out = lake.engine.update("t", &[set(expression)], None).await;
        match out {
            Ok(o) => {
                eprintln!("[{expression}] accepted: {:?}", o.map(|o| (o.version, o.references_removed)));
                lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
                assert_safe(&lake, "t", expression).await;
            }
            Err(e) => eprintln!("[{expression}] refused: {}", e.to_string().chars().take(200).collect::<String>()),
        }
    }
}

/// `WHERE random() < 0.5`: count_rows, the pre-scan and the update each pick their own rows;
/// when the counts happen to agree, the delta is of other rows than the update changed.
#[tokio::test(flavor = "multi_thread")]
async fn update_with_a_nondeterministic_predicate() {
    for attempt in 0..25 {
        let lake = new_lake().await;
        let objects = uploads(&lake, 6, "p").await;
        table_of(&lake, &objects).await;
        match lake.engine.update("t", &[set("file = NULL")], Some("random() < 0.5")).await {
            Ok(_) => {
                lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
                assert_safe(&lake, "t", &format!("random predicate, attempt {attempt}")).await;
            }
            Err(e) => eprintln!("attempt {attempt}: {e}"),
        }
    }
}

// -------------------------------------------------------------------------------------------
// 2. Implied Rewrite versions of a second client.

/// A Rewrite whose new fragment holds other rows with the same count: row e1 now references a
/// fresh object `c` (written by the second client), `b` is gone.
#[tokio::test(flavor = "multi_thread")]
async fn forged_rewrite_with_equal_row_counts() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let b = lake.upload("b.bin", b"b").await;
    let c = lake.upload("c.bin", b"c, referenced only by the rewrite").await;
    lake.engine.append("t", reader(vec![batch(&[("e0", Some(&a)), ("e1", Some(&b))])])).await.unwrap();
    let ds = Arc::new(Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap());
    let old = ds.manifest().fragments.as_ref().clone();
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    let written = InsertBuilder::new(ds.clone())
        .with_params(&params)
        .execute_uncommitted(vec![batch(&[("e0", Some(&a)), ("e1", Some(&c))])])
        .await
        .unwrap();
    let Operation::Append { fragments } = written.operation else { panic!("append") };
    let op = Operation::Rewrite {
        groups: vec![RewriteGroup { old_fragments: old, new_fragments: fragments }],
        rewritten_indices: vec![],
        frag_reuse_index: None,
    };
    let committed = CommitBuilder::new(ds.clone()).execute(Transaction::new(ds.version().version, op, None)).await;
    match committed {
        Ok(d) => eprintln!("forged rewrite committed as version {}", d.version().version),
        Err(e) => {
            eprintln!("Lance refused the forged rewrite: {e}");
            return;
        }
    }
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_safe(&lake, "t", "forged rewrite").await;
}

/// A Rewrite that lies only about its old fragment's deletions: it re-lists the fragment's own
/// data file without the deletion vector (no new data written), "undeleting" a row whose object
/// the journal already dropped.
#[tokio::test(flavor = "multi_thread")]
async fn rewrite_that_undeletes_a_row() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let b = lake.upload("b.bin", b"b, deleted then undeleted").await;
    lake.engine.append("t", reader(vec![batch(&[("e0", Some(&a)), ("e1", Some(&b))])])).await.unwrap();
    lake.engine.delete("t", "episode = 'e1'").await.unwrap().unwrap();
    let ds = Arc::new(Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap());
    let frag = ds.manifest().fragments[0].clone();
    assert!(frag.deletion_file.is_some(), "premise: a deletion vector");
    let mut claimed_old = frag.clone();
    claimed_old.deletion_file = None;
    let mut new = frag.clone();
    new.deletion_file = None;
    new.id = 0;
    let op = Operation::Rewrite {
        groups: vec![RewriteGroup { old_fragments: vec![claimed_old], new_fragments: vec![new] }],
        rewritten_indices: vec![],
        frag_reuse_index: None,
    };
    match CommitBuilder::new(ds.clone()).execute(Transaction::new(ds.version().version, op, None)).await {
        Ok(d) => eprintln!(
            "undeleting rewrite committed as version {}, rows {}",
            d.version().version,
            d.count_rows(None).await.unwrap()
        ),
        Err(e) => {
            eprintln!("Lance refused: {e}");
            return;
        }
    }
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_safe(&lake, "t", "undeleting rewrite").await;
}

// -------------------------------------------------------------------------------------------
// 3. Upsert and add_columns with duplicate keys.

#[tokio::test(flavor = "multi_thread")]
async fn upsert_with_duplicate_keys_in_the_source() {
    let lake = new_lake().await;
    let o = uploads(&lake, 6, "u").await;
    lake.engine.append("t", reader(vec![batch(&[("e0", Some(&o[0])), ("e1", Some(&o[1]))])])).await.unwrap();
    let on = vec!["episode".to_string()];
    let r = lake
        .engine
        .upsert(
            "t",
            &on,
            reader(vec![batch(&[("e0", Some(&o[2])), ("e0", Some(&o[3])), ("e9", Some(&o[4])), ("e9", Some(&o[5]))])]),
        )
        .await;
    eprintln!(
        "upsert with duplicate keys: {:?}",
        r.as_ref().map(|o| (o.version, o.references_added, o.references_removed)).map_err(|e| e.to_string())
    );
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_safe(&lake, "t", "upsert duplicate keys").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn add_columns_with_duplicate_keys_in_the_source() {
    let lake = new_lake().await;
    let o = uploads(&lake, 5, "m").await;
    lake.engine.append("t", reader(vec![batch(&[("e0", Some(&o[0])), ("e1", Some(&o[1]))])])).await.unwrap();
    let r = lake
        .engine
        .add_columns(
            "t",
            "episode",
            keyed_locations("thumb", &[("e0", Some(&o[2])), ("e0", Some(&o[3])), ("e1", Some(&o[4]))]),
        )
        .await;
    eprintln!(
        "add_columns with duplicate keys: {:?}",
        r.as_ref().map(|o| (o.version, o.references_added)).map_err(|e| e.to_string())
    );
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_safe(&lake, "t", "add_columns duplicate keys").await;
}

// -------------------------------------------------------------------------------------------
// 4. Renames that change what looks like a reference column.

/// Renaming a CHILD of the reference column (`file.uri` -> `url`) through the engine: the column
/// no longer has the DataLocation layout; then renamed back.
#[tokio::test(flavor = "multi_thread")]
async fn rename_a_child_of_the_reference_column() {
    let lake = new_lake().await;
    let o = uploads(&lake, 2, "r").await;
    table_of(&lake, &o).await;
    let r = lake.engine.rename_column("t", "file.uri", "url").await;
    eprintln!(
        "rename file.uri -> url: {:?}",
        r.as_ref().map(|o| (o.version, o.references_removed)).map_err(|e| e.to_string())
    );
    let versions = lake.engine.versions("t").await.unwrap();
    eprintln!("versions: {:?}", versions.iter().map(|v| (v.version, v.journaled)).collect::<Vec<_>>());
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_safe(&lake, "t", "child renamed").await;
    let r = lake.engine.rename_column("t", "file.url", "uri").await;
    eprintln!("rename back: {:?}", r.as_ref().map(|o| (o.version, o.references_added)).map_err(|e| e.to_string()));
    assert_safe(&lake, "t", "child renamed back").await;
}

/// A second client renames a child through plain Lance (a Project version: a problem until
/// repair), repair journals it, cleanup, then the engine renames it back.
#[tokio::test(flavor = "multi_thread")]
async fn foreign_child_rename_repaired_then_renamed_back() {
    use lance::dataset::ColumnAlteration;
    let lake = new_lake().await;
    let o = uploads(&lake, 2, "s").await;
    table_of(&lake, &o).await;
    let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    ds.alter_columns(&[ColumnAlteration::new("file.uri".to_string()).rename("url".to_string())]).await.unwrap();
    let v = ds.version().version;
    let rep = lake.engine.repair_refs("t", v).await;
    eprintln!("repair of the child rename: {:?}", rep.as_ref().map(|d| d.objects).map_err(|e| e.to_string()));
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_safe(&lake, "t", "foreign child rename").await;
}

// -------------------------------------------------------------------------------------------
// 5. UpdateConfig field metadata that changes how the column reads.

#[tokio::test(flavor = "multi_thread")]
async fn update_config_marks_the_reference_column_as_a_blob() {
    let lake = new_lake().await;
    let o = uploads(&lake, 2, "b").await;
    table_of(&lake, &o).await;
    for (key, value) in [("ARROW:extension:name", "lance.blob.v2"), ("lance-encoding:blob", "true")] {
        let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
        let id = ds.schema().field("file").unwrap().id;
        let mut md = ds.schema().field("file").unwrap().metadata.clone();
        md.insert(key.to_string(), value.to_string());
        match ds.replace_field_metadata([(id as u32, md)]).await {
            Ok(()) => eprintln!("{key} set at version {}", ds.version().version),
            Err(e) => eprintln!("{key}: refused by Lance: {e}"),
        }
        let (complete, planned_live, problems) = gc_outcome(&lake, "t").await;
        eprintln!("[{key}] complete={complete} planned_live={planned_live:?} problems={problems:?}");
        assert!(planned_live.is_empty());
    }
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    let (complete, planned_live, problems) = gc_outcome(&lake, "t").await;
    eprintln!("[after cleanup] complete={complete} planned_live={planned_live:?} problems={problems:?}");
    assert!(planned_live.is_empty());
    for k in &o {
        assert!(!complete || !planned_live.contains(&k.key));
    }
}

/// The same with the engine's delete: the references removed are counted by a scan, the delete
/// re-evaluates `random() < 0.5` and deletes other rows (no row-count check at all).
#[tokio::test(flavor = "multi_thread")]
async fn delete_with_a_nondeterministic_predicate() {
    let lake = new_lake().await;
    let objects = uploads(&lake, 16, "d").await;
    table_of(&lake, &objects).await;
    let out = lake.engine.delete("t", "random() < 0.5").await;
    eprintln!(
        "delete: {:?}",
        out.as_ref().map(|o| o.as_ref().map(|o| (o.version, o.rows, o.references_removed))).map_err(|e| e.to_string())
    );
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_safe(&lake, "t", "random delete").await;
}

// -------------------------------------------------------------------------------------------
// 6. Lance's auto-cleanup switched on by a second client (an implied UpdateConfig version), then
// engine operations that commit without `with_skip_auto_cleanup` remove versions nobody
// journaled, with their transactions.

#[tokio::test(flavor = "multi_thread")]
async fn auto_cleanup_config_removes_an_unjournaled_foreign_append() {
    let lake = new_lake().await;
    let o = uploads(&lake, 3, "ac").await;
    lake.engine.append("t", reader(vec![batch(&[("e0", Some(&o[0])), ("e1", Some(&o[1]))])])).await.unwrap();
    let uri = lake.engine.dataset_uri("t");
    let mut ds = Dataset::open(&uri).await.unwrap();
    ds.update_config([
        ("lance.auto_cleanup.interval", "1"),
        ("lance.auto_cleanup.older_than", "0s"),
        ("lance.auto_cleanup.retain_versions", "1"),
    ])
    .await
    .unwrap();
    // A foreign append of a row referencing o[2]: a version without a sidecar (a problem).
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    Dataset::write(reader(vec![batch(&[("e2", Some(&o[2]))])]), uri.as_str(), Some(params)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    // The engine deletes e0: Lance's auto-cleanup removes the older versions.
    let r = lake.engine.delete("t", "episode = 'e0'").await;
    eprintln!("delete: {:?}", r.as_ref().map(|o| o.as_ref().map(|o| o.version)).map_err(|e| e.to_string()));
    let versions = lake.engine.versions("t").await.unwrap();
    eprintln!("versions after: {:?}", versions.iter().map(|v| (v.version, v.journaled)).collect::<Vec<_>>());
    assert_safe(&lake, "t", "auto cleanup after a foreign append").await;
    // Then an update through the engine (also auto-cleans), and a drop of a column.
    let r = lake.engine.update("t", &[set("episode = 'x'")], Some("episode = 'e1'")).await;
    eprintln!("update: {:?}", r.as_ref().map(|o| o.as_ref().map(|o| o.version)).map_err(|e| e.to_string()));
    assert_safe(&lake, "t", "auto cleanup, update").await;
}

// -------------------------------------------------------------------------------------------
// 7. Engine operations racing on one fragment (Lance rebases or refuses).

#[tokio::test(flavor = "multi_thread")]
async fn update_upsert_delete_append_race() {
    let lake = Arc::new(new_lake().await);
    let o = uploads(&lake, 8, "race").await;
    table_of(&lake, &o).await;
    let mut rebased = 0;
    for round in 0..6 {
        let fresh = uploads(&lake, 3, &format!("n{round}_")).await;
        let (l1, l2, l3, l4) = (lake.clone(), lake.clone(), lake.clone(), lake.clone());
        let (f0, f1, f2) = (fresh[0].clone(), fresh[1].clone(), fresh[2].clone());
        let e_upd = format!("e{}", round % 8);
        let e_del = format!("e{}", (round + 3) % 8);
        let e_ups = format!("e{}", (round + 5) % 8);
        let up = tokio::spawn(async move {
            l1.engine.update("t", &[set("file = NULL")], Some(&format!("episode = '{e_upd}'"))).await
        });
        let del = tokio::spawn(async move { l2.engine.delete("t", &format!("episode = '{e_del}'")).await });
        let ups = tokio::spawn(async move {
            l3.engine.upsert("t", &["episode".to_string()], reader(vec![batch(&[(e_ups.as_str(), Some(&f0))])])).await
        });
        let app = tokio::spawn(async move {
            l4.engine
                .append("t", reader(vec![batch(&[(format!("a{round}").as_str(), Some(&f1)), ("x", Some(&f2))])]))
                .await
        });
        let up = up.await.unwrap();
        let del = del.await.unwrap();
        let ups = ups.await.unwrap();
        let app = app.await.unwrap();
        for r in [
            up.as_ref().map(|o| o.as_ref().map(|o| o.rebased)).map_err(|e| e.to_string()),
            del.as_ref().map(|o| o.as_ref().map(|o| o.rebased)).map_err(|e| e.to_string()),
            ups.as_ref().map(|o| Some(o.rebased)).map_err(|e| e.to_string()),
            app.as_ref().map(|o| Some(o.rebased)).map_err(|e| e.to_string()),
        ] {
            if let Ok(Some(true)) = r {
                rebased += 1;
            }
            eprintln!("round {round}: {r:?}");
        }
    }
    eprintln!("rebased commits: {rebased}");
    lake.engine.cleanup("t", Duration::from_secs(3600)).await.unwrap();
    assert_safe(&lake, "t", "race").await;
}

// -------------------------------------------------------------------------------------------
// 8. An implied version, tagged, engine cleanup (materialises it), then restored.

#[tokio::test(flavor = "multi_thread")]
async fn implied_version_cleanup_then_restore() {
    let lake = new_lake().await;
    let o = uploads(&lake, 3, "ir").await;
    lake.engine.append("t", reader(vec![batch(&[("e0", Some(&o[0])), ("e1", Some(&o[1]))])])).await.unwrap();
    let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    let params = lance_index::scalar::ScalarIndexParams::default();
    lance::index::DatasetIndexExt::create_index(
        &mut ds,
        &["episode"],
        lance_index::IndexType::BTree,
        None,
        &params,
        false,
    )
    .await
    .unwrap();
    let implied = ds.version().version;
    lake.engine.create_tag("t", implied, "keep").await.unwrap();
    lake.engine.delete("t", "episode = 'e0'").await.unwrap();
    lake.engine.upsert("t", &["episode".to_string()], reader(vec![batch(&[("e1", Some(&o[2]))])])).await.unwrap();
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_safe(&lake, "t", "implied tagged, cleaned").await;
    let r = lake.engine.restore("t", implied).await;
    eprintln!("restore: {:?}", r.as_ref().map(|o| o.version).map_err(|e| e.to_string()));
    lake.engine.delete_tag("t", "keep").await.unwrap();
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_safe(&lake, "t", "restored implied").await;
}
