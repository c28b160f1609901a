//! Through the binary: `lake gc` plans incrementally from the GC state a complete apply recorded
//! (issue 40), says so in its text and `--json` (`mode`, `state`, `mode_reason`), and `--full`
//! and `--full-every` force a full plan.

use crate::{advance_clock, json, ok, write_files};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// Ingests `file` into table `t`, deletes its row and cleans up every older version: its object
/// is an orphan once older than the floor.
fn orphan(root: &str, dir: &Path, file: &str) {
    let src = dir.join(file.replace('.', "_"));
    write_files(&src, &[(file, file)]);
    ok(&["ingest", root, "--table", "t", src.to_str().unwrap()]);
    ok(&["delete", root, "--table", "t", "--where", &format!("path = '{file}'")]);
    ok(&["cleanup", root, "--table", "t", "--older-than", "0s"]);
}

/// The candidates' keys of a `--json` report.
fn candidates(report: &Value) -> Vec<String> {
    report["candidates"].as_array().unwrap().iter().map(|c| c["uri"].as_str().unwrap().to_string()).collect()
}

#[test]
fn gc_is_full_until_an_apply_records_a_state_then_incremental_unless_full_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let checkpoint = dir.path().join("gc.ckpt").display().to_string();
    ok(&["init", &root, "--min-age", "4s"]);
    orphan(&root, dir.path(), "a.bin");
    advance_clock(Duration::from_secs(5));

    // No state yet: a full plan, and why.
    let first = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(first["mode"], "full", "{first}");
    assert!(first["mode_reason"].as_str().unwrap().contains("no GC state is recorded yet"), "{first}");
    assert_eq!(first["state"], Value::Null, "{first}");
    assert_eq!(first["candidate_count"], 1, "{first}");
    let text = ok(&["gc", &root, "--min-age", "4s"]);
    assert!(text.contains("mode:        full: no GC state is recorded yet"), "{text}");

    // A complete apply records the state the next run starts from.
    let applied = json(&ok(&["gc", &root, "--min-age", "4s", "--apply", "--checkpoint", &checkpoint, "--json"]));
    assert_eq!((applied["mode"].as_str(), applied["complete"].as_bool()), (Some("full"), Some(true)), "{applied}");
    let recorded = applied["state_recorded"].as_str().unwrap().to_string();
    assert!(recorded.starts_with("_lake/gc/state/"), "{applied}");
    assert!(Path::new(&root).join(&recorded).is_file(), "{recorded}");

    // The daily way: a new orphan (ingest, delete its row, cleanup: the cleanup writes a
    // reference checkpoint past the versions the state retained), and a branch created since the
    // state that ingests a file, deletes its row and is cleaned up too: the next plan is still
    // incremental (what the versions since the state removed is read from their journal entries).
    orphan(&root, dir.path(), "b.bin");
    let versions = json(&ok(&["versions", &root, "--table", "t", "--json"]));
    let latest = versions["versions"].as_array().unwrap().iter().filter_map(|v| v["version"].as_u64()).max().unwrap();
    ok(&["branch", "create", &root, "--table", "t", "--name", "b", "--from", &latest.to_string()]);
    let src = dir.path().join("c");
    write_files(&src, &[("c.bin", "c.bin")]);
    ok(&["ingest", &root, "--table", "t@b", src.to_str().unwrap()]);
    ok(&["delete", &root, "--table", "t@b", "--where", "path = 'c.bin'"]);
    ok(&["cleanup", &root, "--table", "t@b", "--older-than", "0s"]);
    assert!(Path::new(&root).join("tables/t.lance/_lake/refs_checkpoint.json").is_file(), "cleanup wrote a checkpoint");
    advance_clock(Duration::from_secs(5));
    let incremental = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(incremental["mode"], "incremental", "{incremental}");
    assert_eq!(incremental["mode_reason"], Value::Null, "{incremental}");
    let state = incremental["state"].as_str().unwrap();
    assert!(state.len() == 64 && state.chars().all(|c| c.is_ascii_hexdigit()), "{incremental}");
    assert_eq!(incremental["candidate_count"], 2, "b.bin's and c.bin's objects: {incremental}");
    let found = candidates(&incremental);
    assert!(
        found.iter().any(|k| k.ends_with("/b.bin")) && found.iter().any(|k| k.ends_with("/c.bin")),
        "{incremental}"
    );
    let text = ok(&["gc", &root, "--min-age", "4s"]);
    assert!(text.contains(&format!("mode:        incremental, from GC state {state}")), "{text}");

    // --full lists everything and finds the same candidates at the same cutoff.
    let cutoff = incremental["cutoff"].as_str().unwrap();
    let full = json(&ok(&["gc", &root, "--min-age", "4s", "--cutoff", cutoff, "--full", "--json"]));
    assert_eq!(full["mode"], "full", "{full}");
    assert!(full["mode_reason"].as_str().unwrap().contains("a full plan was asked for"), "{full}");
    assert_eq!(candidates(&full), candidates(&incremental), "{full}\n{incremental}");

    // An incremental apply records a state too; past --full-every the next plan is full again.
    let applied = json(&ok(&["gc", &root, "--min-age", "4s", "--apply", "--checkpoint", &checkpoint, "--json"]));
    assert_eq!(
        (applied["mode"].as_str(), applied["complete"].as_bool(), applied["deleted"].as_u64()),
        (Some("incremental"), Some(true), Some(2)),
        "{applied}"
    );
    assert_ne!(applied["state_recorded"].as_str(), Some(recorded.as_str()), "{applied}");
    let again = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(again["mode"], "incremental", "{again}");
    // A sharded plan with a state there is one incremental shard over every key, and its
    // complete apply records the next state; with --full it has the shards asked for.
    let full_sharded = json(&ok(&["gc", &root, "--min-age", "4s", "--shards", "2", "--full", "--json"]));
    assert_eq!(full_sharded["mode"], "full", "{full_sharded}");
    assert!(full_sharded["mode_reason"].as_str().unwrap().contains("--full"), "{full_sharded}");
    let out = dir.path().join("sharded");
    let out_text = out.display().to_string();
    let sharded = json(&ok(&["gc", &root, "--min-age", "4s", "--shards", "2", "--out", &out_text, "--json"]));
    assert_eq!(
        (sharded["mode"].as_str(), sharded["shard_count"].as_u64()),
        (Some("incremental"), Some(1)),
        "{sharded}"
    );
    let metrics = dir.path().join("gc.prom").display().to_string();
    let text = ok(&["gc", &root, "--min-age", "4s", "--shards", "2", "--metrics-file", &metrics]);
    assert!(text.contains("mode:        incremental, from GC state"), "{text}");
    let prometheus = std::fs::read_to_string(&metrics).unwrap();
    assert!(
        prometheus.lines().any(|l| l.starts_with("lake_gc_plan_incremental{") && l.ends_with(" 1")),
        "{prometheus}"
    );
    let checkpoints = dir.path().join("shard-checkpoints");
    std::fs::create_dir(&checkpoints).unwrap();
    let manifest = out.join("manifest.json").display().to_string();
    let checkpoints = checkpoints.display().to_string();
    let applied_shard = json(&ok(&[
        "gc",
        &root,
        "--min-age",
        "4s",
        "--apply",
        "--manifest",
        &manifest,
        "--checkpoint-dir",
        &checkpoints,
        "--json",
    ]));
    assert_eq!(
        (applied_shard["mode"].as_str(), applied_shard["complete"].as_bool()),
        (Some("incremental"), Some(true)),
        "{applied_shard}"
    );
    let shard_state = applied_shard["state_recorded"].as_str().unwrap();
    assert!(Path::new(&root).join(shard_state).is_file(), "{applied_shard}");
    advance_clock(Duration::from_secs(3));
    let due = json(&ok(&["gc", &root, "--min-age", "4s", "--full-every", "2s", "--json"]));
    assert_eq!(due["mode"], "full", "{due}");
    assert!(due["mode_reason"].as_str().unwrap().contains("full every 2s"), "{due}");
}
