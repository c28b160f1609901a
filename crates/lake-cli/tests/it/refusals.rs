//! Every refusal of `lake gc` exits non-zero, says why, and deletes nothing.

use crate::{lake, object_files, ok, stderr, write_files};
use std::time::Duration;

pub(crate) struct Lake {
    pub _dir: tempfile::TempDir,
    pub root: String,
}

/// A lake (policy floor 1s) with one ingested version and an old orphan.
pub(crate) fn lake_with_orphan() -> Lake {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let src = dir.path().join("src");
    write_files(&src, &[("ep1/a.txt", "alpha"), ("ep2/b.txt", "beta")]);
    ok(&["init", &root, "--min-age", "4s"]);
    ok(&["ingest", &root, "--table", "t", src.to_str().unwrap()]);
    ok(&["delete", &root, "--table", "t", "--where", "episode = 'ep1'"]);
    ok(&["cleanup", &root, "--table", "t", "--older-than", "0s"]);
    crate::advance_clock(Duration::from_millis(4200));
    Lake { _dir: dir, root }
}

fn refused(args: &[&str], needle: &str) {
    let o = lake(args);
    assert!(!o.status.success(), "lake {args:?} should be refused");
    assert_eq!(o.status.code(), Some(1), "lake {args:?}: {}", stderr(&o));
    assert!(stderr(&o).contains(needle), "lake {args:?}: expected `{needle}` in: {}", stderr(&o));
}

#[test]
fn gc_refusals_delete_nothing() {
    let l = lake_with_orphan();
    let root = l.root.as_str();
    let before = object_files(std::path::Path::new(root));
    assert_eq!(before.len(), 2);
    let ckpt = l._dir.path().join("c.json");
    let ckpt = ckpt.to_str().unwrap();
    refused(&["gc", root], "--min-age is required");
    refused(&["gc", root, "--min-age", "0s", "--apply", "--checkpoint", ckpt], "must be at least 1s");
    refused(&["gc", root, "--min-age", "500ms", "--apply", "--checkpoint", ckpt], "must be at least 1s");
    refused(&["gc", root, "--min-age", "abc", "--apply", "--checkpoint", ckpt], "is not a duration");
    refused(&["gc", root, "--min-age=-5s", "--apply", "--checkpoint", ckpt], "is not a duration");
    refused(&["gc", root, "--min-age", "4s", "--apply"], "--apply requires --checkpoint");
    refused(&["gc", root, "--min-age", "4s", "--checkpoint", ckpt], "only used with --apply");
    refused(
        &["gc", root, "--min-age", "4s", "--page-size", "1001", "--apply", "--checkpoint", ckpt],
        "between 1 and 1000",
    );
    refused(
        &["gc", root, "--min-age", "4s", "--cutoff", "2999-01-01T00:00:00Z", "--apply", "--checkpoint", ckpt],
        "later than the store's now",
    );
    refused(&["gc", root, "--min-age", "4s", "--cutoff", "yesterday"], "not an RFC 3339 time");
    // Checkpoint paths: an empty one, a folder, one in a folder that does not exist (a typo
    // must not create folders).
    refused(&["gc", root, "--min-age", "4s", "--apply", "--checkpoint", ""], "is empty");
    refused(&["gc", root, "--min-age", "4s", "--apply", "--checkpoint", "  "], "is empty");
    let folder = l._dir.path().to_str().unwrap().to_string();
    refused(&["gc", root, "--min-age", "4s", "--apply", "--checkpoint", &folder], "names a folder");
    refused(&["gc", root, "--min-age", "4s", "--apply", "--checkpoint", &format!("{folder}/new/")], "names a folder");
    let typo = l._dir.path().join("chekpoints/c.json");
    refused(&["gc", root, "--min-age", "4s", "--apply", "--checkpoint", typo.to_str().unwrap()], "does not exist");
    assert!(!l._dir.path().join("chekpoints").exists(), "no folder is created from a checkpoint path");
    // Inside the lake: never (apply would write the checkpoint and its plan among the lake's files).
    let inside = format!("{root}/objects/ckpt");
    refused(&["gc", root, "--min-age", "4s", "--apply", "--checkpoint", &inside], "inside the lake root");
    let nolake = l._dir.path().join("nolake");
    refused(&["gc", nolake.to_str().unwrap(), "--min-age", "4s"], "no lake at");
    assert_eq!(object_files(std::path::Path::new(root)), before, "nothing deleted by any refusal");
    assert!(!std::path::Path::new(ckpt).exists());
}

#[test]
fn min_age_below_the_policy_needs_an_explicit_override() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    ok(&["init", &root, "--min-age", "7d"]);
    refused(&["gc", &root, "--min-age", "1h"], "below this lake's policy floor of 7days");
    let o = lake(&["gc", &root, "--min-age", "1h", "--allow-below-policy", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    refused(&["init", &root, "--min-age", "1d"], "a lake already exists here");
    refused(&["init", &dir.path().join("l2").display().to_string(), "--min-age", "0s"], "must be positive");
}

#[test]
fn apply_on_incomplete_lineage_is_refused() {
    let l = lake_with_orphan();
    let root = l.root.as_str();
    // Lose the journal of version 2 (the delete): lineage becomes incomplete.
    let sidecar = std::path::Path::new(root).join("tables/t.lance/_lake/object_refs/2.json");
    std::fs::remove_file(&sidecar).unwrap();
    let before = object_files(std::path::Path::new(root));
    let o = lake(&["gc", root, "--min-age", "4s", "--json"]);
    assert_eq!(o.status.code(), Some(3), "a dry run on incomplete lineage exits 3");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["lineage_complete"], false);
    assert_eq!(v["candidate_count"], 0);
    // Each problem has a stable kind beside its sentence.
    assert_eq!(v["problems"][0]["kind"], "missing_sidecar", "{v}");
    assert!(v["problems"][0]["message"].as_str().unwrap().contains("version 2"), "{v}");
    let ckpt = l._dir.path().join("c.json");
    let o = lake(&["gc", root, "--min-age", "4s", "--apply", "--checkpoint", ckpt.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "an apply refused on incomplete lineage exits 3: {}", stderr(&o));
    assert!(stderr(&o).contains("incomplete lineage"), "{}", stderr(&o));
    assert_eq!(object_files(std::path::Path::new(root)), before);
}

#[test]
fn bad_table_input_is_refused() {
    let l = lake_with_orphan();
    refused(&["delete", &l.root, "--table", "t", "--where", "no_such_column = 1"], "table `t`");
    refused(&["delete", &l.root, "--table", "missing", "--where", "episode = 'x'"], "does not exist");
    refused(&["compact", &l.root, "--table", "bad/name"], "invalid table name");
    refused(&["cleanup", &l.root, "--table", "t", "--older-than", "soon"], "is not a duration");
    refused(&["ingest", &l.root, "--table", "t", "/no/such/folder"], "is not a folder");
}

#[test]
fn a_saved_plan_is_applied_only_if_unedited() {
    let l = lake_with_orphan();
    let root = l.root.as_str();
    let plan = l._dir.path().join("plan.json");
    let plan_s = plan.to_str().unwrap();
    ok(&["gc", root, "--min-age", "4s", "--out", plan_s]);
    let text = std::fs::read_to_string(&plan).unwrap();
    assert!(text.contains("\"digest\""));
    let edited = l._dir.path().join("edited.json");
    std::fs::write(&edited, text.replacen("\"size\": ", "\"size\": 1", 1)).unwrap();
    let ckpt = l._dir.path().join("c.json");
    let ckpt_s = ckpt.to_str().unwrap();
    let before = object_files(std::path::Path::new(root));
    refused(
        &["gc", root, "--min-age", "4s", "--apply", "--checkpoint", ckpt_s, "--plan", edited.to_str().unwrap()],
        "digest mismatch",
    );
    refused(
        &["gc", root, "--min-age", "5s", "--apply", "--checkpoint", ckpt_s, "--plan", plan_s],
        "was made with min_age 4s",
    );
    assert_eq!(object_files(std::path::Path::new(root)), before);
    refused(&["gc", root, "--min-age", "4s", "--max-clock-skew", "soon"], "is not a duration");
    let metrics = l._dir.path().join("gc.prom");
    let o = lake(&[
        "gc",
        root,
        "--min-age",
        "4s",
        "--apply",
        "--checkpoint",
        ckpt_s,
        "--plan",
        plan_s,
        "--json",
        "--metrics-file",
        metrics.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["deleted"].as_u64(), v["complete"].as_bool()), (Some(1), Some(true)));
    assert_eq!(object_files(std::path::Path::new(root)).len(), before.len() - 1);
    let prom = std::fs::read_to_string(&metrics).unwrap();
    assert!(prom.contains("# TYPE lake_gc_deleted gauge"), "{prom}");
    assert!(prom.lines().any(|l| l.starts_with("lake_gc_deleted{root=\"file://") && l.ends_with(" 1")), "{prom}");
    assert!(prom.lines().any(|l| l.starts_with("lake_gc_complete{") && l.ends_with(" 1")), "{prom}");
}

/// `lake gc --json` names every refusal by its kind on standard error
/// (`{"error": {"kind", "message", "transient"}}`), one command per kind of
/// `lake::store::Refusal`, and deletes nothing.
#[test]
fn every_refusal_kind_is_named_in_the_json_error() {
    let l = lake_with_orphan();
    let root = l.root.as_str();
    let dir = l._dir.path();
    let path = |name: &str| dir.join(name).display().to_string();
    let before = object_files(std::path::Path::new(root));
    let plan = path("plan.json");
    ok(&["gc", root, "--min-age", "4s", "--out", &plan]);
    let sharded = path("sharded");
    ok(&["gc", root, "--min-age", "4s", "--shards", "2", "--out", &sharded]);
    let other = path("other");
    ok(&["init", &other, "--min-age", "4s"]);
    let checkpoints = path("ck");
    std::fs::create_dir(&checkpoints).unwrap();
    let manifest = format!("{sharded}/manifest.json");
    let shard0 = format!("{sharded}/shard-00000.json");
    let ckpt = path("c.json");

    let cases: Vec<(&str, Vec<&str>, Option<(&str, &str)>)> = vec![
        ("horizon", vec!["gc", root, "--min-age", "500ms"], None),
        ("policy_floor", vec!["gc", root, "--min-age", "1s"], None),
        ("clock_skew", vec!["gc", root, "--min-age", "4s"], Some(("LAKE_UNCHECKED_HOST_CLOCK_AHEAD", "1h"))),
        ("cutoff_too_late", vec!["gc", root, "--min-age", "4s", "--cutoff", "2999-01-01T00:00:00Z"], None),
        (
            "bound_to_min_age",
            vec!["gc", root, "--min-age", "5s", "--apply", "--checkpoint", &ckpt, "--plan", &plan],
            None,
        ),
        (
            "bound_to_root",
            vec!["gc", &other, "--min-age", "4s", "--apply", "--checkpoint", &ckpt, "--plan", &plan],
            None,
        ),
        (
            "bound_to_manifest",
            vec!["gc", root, "--min-age", "4s", "--apply", "--checkpoint", &ckpt, "--plan", &shard0],
            None,
        ),
        (
            "shard_mismatch",
            vec![
                "gc",
                root,
                "--min-age",
                "4s",
                "--apply",
                "--manifest",
                &manifest,
                "--checkpoint-dir",
                &checkpoints,
                "--shard",
                "5",
            ],
            None,
        ),
    ];
    for (kind, mut args, env) in cases {
        args.push("--json");
        let mut command = crate::lake_command();
        command.args(&args);
        if let Some((name, value)) = env {
            command.env(name, value);
        }
        let o = command.output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{kind}: lake {args:?}: {}", stderr(&o));
        let error = crate::json(stderr(&o).lines().last().unwrap_or_default());
        assert_eq!(error["error"]["kind"], kind, "lake {args:?}: {error}");
        assert!(error["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{error}");
        assert_eq!(error["error"]["transient"], false, "{error}");
    }
    assert_eq!(object_files(std::path::Path::new(root)), before, "nothing deleted by any refusal");
    assert!(!std::path::Path::new(&ckpt).exists());
}

/// Every command that takes `--json` prints its failure as the JSON error too, writes included
/// (a bad table name, a table that does not exist).
#[test]
fn writes_and_table_commands_with_json_print_their_failure_as_json() {
    let l = lake_with_orphan();
    let root = l.root.as_str();
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("table_name", vec!["delete", root, "--table", "bad name!", "--where", "true"]),
        ("table_name", vec!["versions", root, "--table", "bad name!"]),
        ("table_name", vec!["tag", root, "x", "--table", "bad name!", "--version", "1"]),
        ("table_name", vec!["cleanup", root, "--table", "bad name!", "--older-than", "1d"]),
    ];
    for (kind, mut args) in cases {
        args.push("--json");
        let o = crate::lake_command().args(&args).output().unwrap();
        assert_ne!(o.status.code(), Some(0), "lake {args:?}");
        let error = crate::json(stderr(&o).lines().last().unwrap_or_default());
        assert_eq!(error["error"]["kind"], kind, "lake {args:?}: {error}");
    }
}
