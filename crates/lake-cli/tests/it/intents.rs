//! Write intents through the binary: a writer killed after writing its
//! intent and before its commit leaves the intent; every dry run reports it and keeps its
//! objects; `lake refs recover` proves the commit can no longer land (a fence after the
//! deadline), removes the intent, and the objects become orphans.

use crate::{json, lake_command, ok, stderr, write_files};
use lake::common::intent::{IntentOperation, IntentReferences, WriteIntent, INTENT_FORMAT_VERSION};
use lake::store::writer::ManagedObjectWriter;
use lake::store::LakeStore;
use std::time::Duration;

#[test]
fn an_intent_left_by_a_killed_writer_is_reported_protected_and_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let src = dir.path().join("src");
    write_files(&src, &[("a.bin", "a")]);
    ok(&["init", &root, "--min-age", "4s"]);
    ok(&["ingest", &root, "--table", "t", src.to_str().unwrap()]);
    // What a writer leaves when it is killed between its intent and its commit: an object it
    // uploaded and the intent naming it (its deadline long past).
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (object, key) = runtime.block_on(async {
        let store = LakeStore::open(&root).unwrap();
        let object = ManagedObjectWriter::new(store.clone()).upload("killed.bin", &b"killed writer"[..]).await.unwrap();
        let intent = WriteIntent {
            format_version: INTENT_FORMAT_VERSION,
            table: "t".into(),
            write_id: ulid::Ulid::new().to_string(),
            operation: IntentOperation::Append,
            transaction_uuid: Some("0b6c1f64-5d2e-4c1a-9f3e-7a8b9c0d1e2f".into()),
            read_version: 1,
            deadline_ms: 10,
            restored_version: None,
            references: IntentReferences::Inline(vec![object.identity()]),
            schema: None,
        };
        (object, lake::store::intents::write(&store, &intent).await.unwrap())
    });
    crate::advance_clock(Duration::from_millis(4200));

    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(dry["write_intents"]["count"], 1, "{dry}");
    assert_eq!(dry["write_intents"]["tables"], serde_json::json!(["t"]));
    assert_eq!(dry["write_intents"]["intents"][0]["key"], key.as_str());
    assert_eq!(dry["candidate_count"], 0, "the intent keeps the killed writer's object: {dry}");
    let text = ok(&["gc", &root, "--min-age", "4s"]);
    assert!(text.contains("write intents: 1") && text.contains("lake refs recover"), "{text}");

    let recovered = json(&ok(&["refs", "recover", &root, "--json"]));
    assert_eq!(recovered["pending"], 0, "{recovered}");
    assert_eq!(recovered["intents"][0]["resolution"]["state"], "abandoned", "{recovered}");
    assert_eq!(recovered["intents"][0]["resolution"]["proof"], 2, "the fence is version 2: {recovered}");
    let text = ok(&["refs", "recover", &root]);
    assert!(text.contains("no write intents"), "{text}");

    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(dry["write_intents"]["count"], 0, "{dry}");
    assert_eq!(dry["lineage_complete"], true, "the fence is journaled: {dry}");
    let candidates: Vec<&str> =
        dry["candidates"].as_array().unwrap().iter().filter_map(|c| c["uri"].as_str()).collect();
    assert_eq!(candidates, vec![object.key.as_str()], "{dry}");
    let verify = json(&ok(&["refs", "verify", &root, "--json"]));
    assert_eq!(verify["ok"], true, "{verify}");
}

/// A crashed writer recovers without an operator, through the binary: a delete
/// stopped right after its Lance commit (a failure point) leaves a version without a journal
/// entry and without an intent (deletes write none); `lake gc` refuses (exit 3) naming
/// `lake refs recover`, which journals the version from the lake's marker in its transaction.
/// A version another Lance client committed has no marker: `recover` leaves it (exit 1, naming
/// `lake refs repair`), and GC refuses until the operator repairs it.
#[test]
fn a_stopped_delete_is_recovered_from_its_marker_and_a_foreign_version_is_left_for_repair() {
    use crate::{lake, lake_command, stderr, stdout};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let src = dir.path().join("src");
    write_files(&src, &[("gone/a.bin", "gone a"), ("kept/k.bin", "kept")]);
    ok(&["init", &root, "--min-age", "4s"]);
    ok(&["ingest", &root, "--table", "t", src.to_str().unwrap()]);
    let o = lake_command()
        .args(["delete", &root, "--table", "t", "--where", "episode = 'gone'"])
        .env("LAKE_FAILPOINT", "commit.after_manifest")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let gc = lake(&["gc", &root, "--min-age", "4s"]);
    assert_eq!(gc.status.code(), Some(3), "{}{}", stdout(&gc), stderr(&gc));
    assert!(stdout(&gc).contains("lake refs recover"), "{}", stdout(&gc));

    let recovered = json(&ok(&["refs", "recover", &root, "--json"]));
    assert_eq!(
        recovered["versions"],
        serde_json::json!([{"table": "t", "version": 2, "state": "journaled", "operation": "delete", "added": 0, "removed": 1}]),
        "{recovered}"
    );
    assert_eq!((recovered["pending"].as_u64(), recovered["left"].as_u64()), (Some(0), Some(0)), "{recovered}");
    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(dry["lineage_complete"], true, "{dry}");

    // Another Lance client deletes a row: its version has no marker and no journal entry.
    let dataset = dir.path().join("lake/tables/t.lance");
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut ds = lance::Dataset::open(dataset.to_str().unwrap()).await.unwrap();
        ds.delete("episode = 'kept'").await.unwrap();
    });
    let o = lake(&["refs", "recover", &root, "--json"]);
    assert_eq!(o.status.code(), Some(3), "a version recover cannot prove is a lineage problem: {}", stderr(&o));
    let report = json(&stdout(&o));
    assert_eq!((report["versions"][0]["version"].as_u64(), report["left"].as_u64()), (Some(3), Some(1)), "{report}");
    assert_eq!(report["versions"][0]["state"], "left", "{report}");
    let reason = report["versions"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("carries no lake marker") && reason.contains("`refs repair`"), "{reason}");
    let o = lake(&["refs", "recover", &root]);
    assert!(stdout(&o).contains("table `t` version 3 had no journal entry: LEFT"), "{}", stdout(&o));
    assert!(stderr(&o).contains("not provably this lake's"), "{}", stderr(&o));
    assert_eq!(lake(&["gc", &root, "--min-age", "4s"]).status.code(), Some(3));
    ok(&["refs", "repair", &root, "--table", "t", "--version", "3"]);
    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(dry["lineage_complete"], true, "{dry}");
    let verify = json(&ok(&["refs", "verify", &root, "--json"]));
    assert_eq!(verify["ok"], true, "{verify}");
}

/// An intent written by hand for table `t` of the lake at `root`, naming a fresh upload, with
/// deadline `deadline_ms`.
fn killed_writers_intent(root: &str, deadline_ms: u64) -> String {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = LakeStore::open(root).unwrap();
        let object = ManagedObjectWriter::new(store.clone()).upload("killed.bin", &b"killed writer"[..]).await.unwrap();
        let intent = WriteIntent {
            format_version: INTENT_FORMAT_VERSION,
            table: "t".into(),
            write_id: ulid::Ulid::new().to_string(),
            operation: IntentOperation::Append,
            transaction_uuid: Some("0b6c1f64-5d2e-4c1a-9f3e-7a8b9c0d1e2f".into()),
            read_version: 1,
            deadline_ms,
            restored_version: None,
            references: IntentReferences::Inline(vec![object.identity()]),
            schema: None,
        };
        lake::store::intents::write(&store, &intent).await.unwrap()
    })
}

/// The fourth adversarial run: `lake refs recover` waited silently behind a writer's deadline.
/// With `--no-wait` it reports the intent pending with the time it becomes due (by the store's
/// clock) and exits 1 at once; without it, it says on standard error what it waits for and until
/// when, then resolves the intent.
#[test]
fn recover_says_what_it_waits_for_and_no_wait_reports_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let src = dir.path().join("src");
    write_files(&src, &[("a.bin", "a")]);
    ok(&["init", &root, "--min-age", "4s"]);
    ok(&["ingest", &root, "--table", "t", src.to_str().unwrap()]);
    let key = killed_writers_intent(&root, 3_600_000);
    let out = lake_command().args(["refs", "recover", &root, "--no-wait", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(4), "a pending write is work left: {}", stderr(&out));
    let report = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(report["pending"], 1, "{report}");
    assert_eq!(report["intents"][0]["key"], key.as_str());
    let reason = report["intents"][0]["resolution"]["reason"].as_str().unwrap();
    assert!(reason.contains("can be resolved from") && reason.contains("allowing it to wait"), "{reason}");
    // Two hours on (the store's clock, as the binary's test clock reads it): due, resolved.
    crate::advance_clock(Duration::from_secs(7200));
    let recovered = json(&ok(&["refs", "recover", &root, "--json"]));
    assert_eq!(recovered["intents"][0]["resolution"]["state"], "abandoned", "{recovered}");
}

/// Without `--no-wait`, `lake refs recover` announces each wait (what, until when by the store's
/// clock) on standard error, then resolves the intent. (A deadline of 1.5 s, waited for by the
/// binary, not by the test.)
#[test]
fn recover_announces_its_wait_then_resolves() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let src = dir.path().join("src");
    write_files(&src, &[("a.bin", "a")]);
    ok(&["init", &root, "--min-age", "4s"]);
    ok(&["ingest", &root, "--table", "t", src.to_str().unwrap()]);
    killed_writers_intent(&root, 1500);
    let out = lake_command().args(["refs", "recover", &root, "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let waited = stderr(&out);
    assert!(
        waited.contains("waiting until") && waited.contains("(store clock)") && waited.contains("without waiting"),
        "{waited}"
    );
    let report = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(report["intents"][0]["resolution"]["state"], "abandoned", "{report}");
}
