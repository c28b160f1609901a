//! The operator walkthrough through the binary: ingest, delete, compact, cleanup, versions,
//! dry run, interrupted apply, resume, no-op.

use crate::{json, lake, object_files, ok, stderr, write_files};
use std::path::Path;
use std::time::Duration;

#[test]
fn operator_walkthrough() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let src1 = dir.path().join("in1");
    let src2 = dir.path().join("in2");
    write_files(
        &src1,
        &[("Asia/a1.bin", "asia one"), ("Asia/a2.bin", "asia two"), ("Europe/e1.bin", "europe"), ("top.txt", "top")],
    );
    write_files(&src2, &[("Asia/a3.bin", "asia three"), ("Africa/f1.bin", "africa")]);
    ok(&["init", &root, "--min-age", "4s"]);
    let v1 = json(&ok(&["ingest", &root, "--table", "episodes", src1.to_str().unwrap(), "--json"]));
    assert_eq!((v1["version"].as_u64(), v1["rows"].as_u64()), (Some(1), Some(4)));
    let v2 = json(&ok(&["ingest", &root, "--table", "episodes", src2.to_str().unwrap(), "--json"]));
    assert_eq!(v2["version"], 2);
    let d = json(&ok(&["delete", &root, "--table", "episodes", "--where", "episode = 'Asia'", "--json"]));
    assert_eq!((d["rows_deleted"].as_u64(), d["references_removed"].as_u64()), (Some(3), Some(3)));
    ok(&["compact", &root, "--table", "episodes"]);
    // An update of a column that holds no reference, and an index built, listed and dropped:
    // journaled versions that move no reference.
    let u = json(&ok(&[
        "update",
        &root,
        "--table",
        "episodes",
        "--set",
        "path=upper(path)",
        "--where",
        "episode <> 'Africa'",
        "--json",
    ]));
    assert_eq!(
        (u["rows_updated"].as_u64(), u["references_added"].as_u64(), u["references_removed"].as_u64()),
        (Some(2), Some(0), Some(0))
    );
    ok(&["index", "create", &root, "--table", "episodes", "--column", "episode", "--kind", "bitmap"]);
    let listed = json(&ok(&["index", "list", &root, "--table", "episodes", "--json"]));
    assert_eq!(listed["indexes"][0]["columns"][0], "episode", "{listed}");
    let name = listed["indexes"][0]["name"].as_str().unwrap().to_string();
    ok(&["index", "drop", &root, "--table", "episodes", "--name", &name]);
    let bad = crate::lake(&["update", &root, "--table", "episodes", "--set", "path"]);
    assert_eq!(bad.status.code(), Some(1), "{}", crate::stderr(&bad));
    assert!(crate::stderr(&bad).contains("COLUMN=EXPRESSION"), "{}", crate::stderr(&bad));
    crate::advance_clock(Duration::from_millis(4200));
    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(dry["candidate_count"], 0, "old versions still reference Asia: {dry}");
    let c = json(&ok(&["cleanup", &root, "--table", "episodes", "--older-than", "0s", "--json"]));
    assert!(c["old_versions"].as_u64().unwrap() >= 3);
    let versions = json(&ok(&["versions", &root, "--table", "episodes", "--json"]));
    assert_eq!(versions["versions"].as_array().unwrap().len(), 1);
    assert_eq!(versions["versions"][0]["journaled"], true);

    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    for field in [
        "digest",
        "cutoff",
        "min_age_seconds",
        "lineage_complete",
        "problems",
        "candidate_count",
        "candidate_bytes",
        "candidates",
    ] {
        assert!(dry.get(field).is_some(), "missing {field}: {dry}");
    }
    assert_eq!(dry["candidate_count"], 3);
    assert_eq!(dry["candidate_bytes"], "asia one".len() + "asia two".len() + "asia three".len());
    assert_eq!(dry["lineage_complete"], true);
    let cutoff = dry["cutoff"].as_str().unwrap().to_string();
    // Same state, same cutoff: identical plan documents, also with the smallest memory budget
    // (1 MiB; 0 is refused: it would spill every key alone). A spilled candidate list streamed
    // into `--json` is tested in `gc_report`'s unit tests.
    let p1 = dir.path().join("p1.json");
    let p2 = dir.path().join("p2.json");
    ok(&["gc", &root, "--min-age", "4s", "--cutoff", &cutoff, "--out", p1.to_str().unwrap()]);
    let spilled = ["--memory-budget-mib", "1", "--out", p2.to_str().unwrap()];
    let spilled_json =
        json(&ok(&[&["gc", &root, "--min-age", "4s", "--cutoff", &cutoff, "--json"][..], &spilled].concat()));
    assert_eq!(std::fs::read(&p1).unwrap(), std::fs::read(&p2).unwrap());
    // `--json` gives the same candidates as the plan document.
    let document: serde_json::Value = serde_json::from_slice(&std::fs::read(&p1).unwrap()).unwrap();
    assert_eq!(spilled_json["candidates"], document["plan"]["candidates"]);
    assert_eq!(spilled_json["candidates"].as_array().map(Vec::len), Some(3));
    assert_eq!(spilled_json["digest"], document["digest"]);

    let before = object_files(Path::new(&root));
    let ckpt = dir.path().join("gc.ckpt");
    let ckpt = ckpt.to_str().unwrap();
    let o = lake(&[
        "gc",
        &root,
        "--min-age",
        "4s",
        "--cutoff",
        &cutoff,
        "--apply",
        "--checkpoint",
        ckpt,
        "--page-size",
        "1",
        "--max-pages",
        "1",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(4), "work left: {}", stderr(&o));
    let first = json(&String::from_utf8_lossy(&o.stdout));
    assert_eq!((first["deleted"].as_u64(), first["complete"].as_bool()), (Some(1), Some(false)));
    assert_eq!(first["digest"], dry["digest"]);
    let resumed = json(&ok(&["gc", &root, "--min-age", "4s", "--apply", "--checkpoint", ckpt, "--json"]));
    assert_eq!(
        (resumed["deleted"].as_u64(), resumed["complete"].as_bool(), resumed["resumed"].as_bool()),
        (Some(3), Some(true), Some(true))
    );
    for f in ["already_gone", "failed", "revived"] {
        assert_eq!(resumed[f], 0, "{f}");
    }
    // Finished, the same command is a new run: a new plan (nothing left to delete) replaces it.
    let again = json(&ok(&["gc", &root, "--min-age", "4s", "--apply", "--checkpoint", ckpt, "--json"]));
    assert_eq!((again["candidate_count"].as_u64(), again["delete_pages"].as_u64()), (Some(0), Some(0)));
    assert_eq!(again["replaced"]["plan_digest"], dry["digest"], "{again}");
    let after = object_files(Path::new(&root));
    assert_eq!(before.len() - after.len(), 3);
    let deleted: Vec<&String> = before.iter().filter(|k| !after.contains(k)).collect();
    let planned: Vec<String> =
        dry["candidates"].as_array().unwrap().iter().map(|c| c["uri"].as_str().unwrap().to_string()).collect();
    assert_eq!(deleted.into_iter().cloned().collect::<Vec<_>>(), planned);
    let text = ok(&["gc", &root, "--min-age", "4s"]);
    assert!(text.contains("candidates:  0 objects"), "{text}");
}

/// `lake upsert --on path`: a file whose path matches a row replaces it (its old object loses
/// its reference), others are inserted; one journaled version.
#[test]
fn upsert_replaces_rows_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let first = dir.path().join("first");
    let second = dir.path().join("second");
    write_files(&first, &[("e1/a.bin", "a, first take"), ("e1/b.bin", "b")]);
    write_files(&second, &[("e1/a.bin", "a, second take"), ("e2/c.bin", "c")]);
    ok(&["init", &root, "--min-age", "4s"]);
    ok(&["upsert", &root, "--table", "files", "--on", "path", first.to_str().unwrap()]);
    let out = json(&ok(&["upsert", &root, "--table", "files", "--on", "path", second.to_str().unwrap(), "--json"]));
    assert_eq!(
        (
            out["version"].as_u64(),
            out["rows"].as_u64(),
            out["references_added"].as_u64(),
            out["references_removed"].as_u64()
        ),
        (Some(2), Some(2), Some(2), Some(1)),
        "{out}"
    );
    let verify = json(&ok(&["refs", "verify", &root, "--json"]));
    assert_eq!(verify["ok"], true, "{verify}");
    ok(&["cleanup", &root, "--table", "files", "--older-than", "0s"]);
    crate::advance_clock(Duration::from_millis(4200));
    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!((dry["candidate_count"].as_u64(), dry["lineage_complete"].as_bool()), (Some(1), Some(true)), "{dry}");
    assert_eq!(dry["candidate_bytes"], "a, first take".len(), "only the replaced take is an orphan: {dry}");
    let bad = crate::lake(&["upsert", &root, "--table", "files", second.to_str().unwrap()]);
    assert_ne!(bad.status.code(), Some(0), "--on is required");
}

/// `lake columns add-files|rename|drop`: a thumbnail column from files matched by path, renamed,
/// then the original file column dropped (its objects become orphans after cleanup).
#[test]
fn columns_evolve_and_the_journal_follows() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let files = dir.path().join("files");
    let thumbs = dir.path().join("thumbs");
    write_files(&files, &[("e1/a.bin", "a"), ("e1/b.bin", "b"), ("e2/c.bin", "c")]);
    write_files(&thumbs, &[("e1/a.bin", "thumb of a"), ("e2/c.bin", "thumb of c")]);
    ok(&["init", &root, "--min-age", "4s"]);
    ok(&["ingest", &root, "--table", "files", files.to_str().unwrap()]);
    let out = json(&ok(&[
        "columns",
        "add-files",
        &root,
        "--table",
        "files",
        "--name",
        "thumb",
        thumbs.to_str().unwrap(),
        "--json",
    ]));
    assert_eq!((out["version"].as_u64(), out["references_added"].as_u64()), (Some(2), Some(2)), "{out}");
    let out =
        json(&ok(&["columns", "rename", &root, "--table", "files", "--from", "thumb", "--to", "preview", "--json"]));
    assert_eq!((out["references_added"].as_u64(), out["references_removed"].as_u64()), (Some(0), Some(0)), "{out}");
    let out = json(&ok(&["columns", "drop", &root, "--table", "files", "--column", "file", "--json"]));
    assert_eq!((out["references_added"].as_u64(), out["references_removed"].as_u64()), (Some(0), Some(3)), "{out}");
    let verify = json(&ok(&["refs", "verify", &root, "--json"]));
    assert_eq!(verify["ok"], true, "{verify}");
    ok(&["cleanup", &root, "--table", "files", "--older-than", "0s"]);
    crate::advance_clock(Duration::from_millis(4200));
    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!((dry["candidate_count"].as_u64(), dry["lineage_complete"].as_bool()), (Some(3), Some(true)), "{dry}");
    assert_eq!(dry["candidate_bytes"], 3, "the three dropped files, not the previews: {dry}");
}

/// `lake branch create|list|delete` and writes on `t@b`: the branch's objects stay alive while
/// it exists and become GC's once it is deleted.
#[test]
fn branches_are_lineages_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let main = dir.path().join("main");
    let more = dir.path().join("more");
    write_files(&main, &[("e1/a.bin", "a")]);
    write_files(&more, &[("e2/b.bin", "only on the branch")]);
    ok(&["init", &root, "--min-age", "4s"]);
    ok(&["ingest", &root, "--table", "files", main.to_str().unwrap()]);
    let out = json(&ok(&["branch", "create", &root, "--table", "files", "--name", "exp", "--from", "1", "--json"]));
    assert_eq!((out["table"].as_str(), out["version"].as_u64()), (Some("files@exp"), Some(1)), "{out}");
    ok(&["ingest", &root, "--table", "files@exp", more.to_str().unwrap()]);
    let listed = json(&ok(&["branch", "list", &root, "--table", "files", "--json"]));
    assert_eq!(listed["branches"], serde_json::json!(["exp"]));
    crate::advance_clock(Duration::from_millis(4200));
    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!((dry["candidate_count"].as_u64(), dry["lineage_complete"].as_bool()), (Some(0), Some(true)), "{dry}");
    ok(&["branch", "delete", &root, "--table", "files", "--name", "exp"]);
    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(dry["candidate_bytes"], "only on the branch".len(), "{dry}");
    let verify = json(&ok(&["refs", "verify", &root, "--json"]));
    assert_eq!(verify["ok"], true, "{verify}");
}

#[test]
fn help_teaches_the_commands() {
    let help = ok(&["--help"]);
    for cmd in [
        "init", "ingest", "upsert", "delete", "update", "index", "columns", "branch", "compact", "cleanup", "versions",
        "gc", "demo",
    ] {
        assert!(help.contains(cmd), "{cmd} missing from --help");
    }
    let gc = ok(&["gc", "--help"]);
    assert!(gc.contains("--checkpoint") && gc.contains("Exit codes"), "{gc}");
}

#[test]
fn history_and_journal_commands() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let src1 = dir.path().join("in1");
    let src2 = dir.path().join("in2");
    write_files(&src1, &[("A/a.bin", "a"), ("B/b.bin", "b")]);
    write_files(&src2, &[("C/c.bin", "c")]);
    ok(&["init", &root, "--min-age", "4s"]);
    ok(&["ingest", &root, "--table", "t", src1.to_str().unwrap()]);
    let o = json(&ok(&["ingest", &root, "--table", "t", src2.to_str().unwrap(), "--overwrite", "--json"]));
    assert_eq!(o["version"], 2);
    ok(&["tag", &root, "--table", "t", "--version", "1", "first"]);
    let r = json(&ok(&["restore", &root, "--table", "t", "--version", "1", "--json"]));
    assert_eq!((r["version"].as_u64(), r["references"].as_u64()), (Some(3), Some(2)));
    let versions = json(&ok(&["versions", &root, "--table", "t", "--json"]));
    assert_eq!(versions["versions"][0]["tags"][0], "first");
    let v = json(&ok(&["refs", "verify", &root, "--json"]));
    assert_eq!((v["ok"].as_bool(), v["versions_scanned"].as_u64()), (Some(true), Some(3)));
    ok(&["tag", &root, "--table", "t", "--delete", "first"]);
    // Lose version 2's journal entry: verify and gc refuse, repair rebuilds it.
    std::fs::remove_file(Path::new(&root).join("tables/t.lance/_lake/object_refs/2.json")).unwrap();
    let bad = lake(&["refs", "verify", &root]);
    assert_eq!(bad.status.code(), Some(3), "a journal that does not match is a lineage problem");
    assert!(String::from_utf8_lossy(&bad.stdout).contains("version 2 has no reference sidecar"));
    assert_eq!(lake(&["gc", &root, "--min-age", "4s"]).status.code(), Some(3));
    let fixed = json(&ok(&["refs", "repair", &root, "--table", "t", "--version", "2", "--json"]));
    assert_eq!((fixed["kind"].as_str(), fixed["references"].as_u64()), (Some("snapshot"), Some(1)));
    ok(&["refs", "verify", &root, "--table", "t"]);
    crate::advance_clock(Duration::from_millis(4100));
    ok(&["cleanup", &root, "--table", "t", "--older-than", "0s"]);
    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    // Version 3 (the restore of 1) references a and b; c went with version 2. Version 2's
    // reference log is named by no journal entry since repair replaced its head: GC's garbage.
    assert_eq!(dry["candidate_count"], 2, "{dry}");
    assert!(dry["candidates"][0]["uri"].as_str().unwrap().ends_with("/c.bin"));
    let log = dry["candidates"][1]["uri"].as_str().unwrap();
    assert!(log.starts_with("tables/t.lance/_lake/object_ref_logs/") && log.ends_with(".arrows"), "{dry}");
}

/// `text`, a sidecar this build wrote (format 4), as the previous build wrote it: format 3,
/// without the `lance` binding, sealed by the SHA-256 of its canonical bytes.
fn as_earlier_build(text: &str) -> String {
    let start = text.find(",\"lance\":{").expect("a bound sidecar");
    let end = start + text[start..].find('}').unwrap() + 1;
    let unbound =
        format!("{}{}", &text[..start], &text[end..]).replacen("\"format_version\":4", "\"format_version\":3", 1);
    let seal_at = unbound.rfind(",\"sha256\":\"").unwrap();
    let body = format!("{}}}", &unbound[..seal_at]);
    let seal = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(body.as_bytes()));
    format!("{},\"sha256\":\"{seal}\"}}", &unbound[..seal_at])
}

/// A lake written by the previous build (every journal entry format 3, bound to nothing): a dry
/// run fails closed naming `lake refs bind`; `lake refs bind` compares the journal with full
/// scans and binds it; then GC plans again.
#[test]
fn an_earlier_builds_lake_is_bound_by_refs_bind() {
    // Ingest (a head), delete (an inline entry), cleanup to the delete's version.
    let orphaned = crate::refusals::lake_with_orphan();
    let root = orphaned.root.clone();
    let bound = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!((bound["lineage_complete"].as_bool(), bound["candidate_count"].as_u64()), (Some(true), Some(1)));
    let journal = Path::new(&root).join("tables/t.lance/_lake/object_refs");
    for entry in std::fs::read_dir(&journal).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, as_earlier_build(&text)).unwrap();
    }
    let o = lake(&["gc", &root, "--min-age", "4s", "--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let old = json(&crate::stdout(&o));
    assert_eq!((old["lineage_complete"].as_bool(), old["candidate_count"].as_u64()), (Some(false), Some(0)));
    assert_eq!(old["problems"][0]["kind"], "unbound_entry", "{old}");
    assert!(old["problems"].to_string().contains("`refs bind` on table `t`"), "{old}");
    let report = json(&ok(&["refs", "bind", &root, "--json"]));
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["tables"][0]["bound"], serde_json::json!([2]), "only the retained version: {report}");
    let again = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(
        (again["lineage_complete"].as_bool(), again["candidate_count"].as_u64()),
        (Some(true), Some(1)),
        "{again}"
    );
    ok(&["refs", "verify", &root]);
}
