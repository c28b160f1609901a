//! `lake ingest` streams its uploads into one append: what it reports, the objects and the one
//! version it produces, and failures that commit nothing (the rows themselves are checked by
//! `lake::lance::ingest`'s tests).

use crate::{json, lake, object_files, ok, stderr, write_files};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

/// Writes `n` small files of distinct content under `dir`, in two episode folders, and returns
/// `(path, content)`.
fn source(dir: &Path, n: usize) -> Vec<(String, String)> {
    let files: Vec<(String, String)> =
        (0..n).map(|i| (format!("ep{}/f{i:05}.bin", i % 2), format!("file {i}"))).collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    write_files(dir, &refs);
    files
}

#[test]
fn a_streamed_ingest_gives_the_same_objects_in_one_version() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let src = dir.path().join("src");
    // More than one batch of rows (1024), so the append reads several batches while uploads run.
    let files = source(&src, 1300);
    // No GC here: a floor no ingest on any machine comes near, so the publication guard (tested
    // in lake-lance with an injected clock) never refuses these uploads.
    ok(&["init", &root, "--min-age", "1h"]);
    let out = json(&ok(&["ingest", &root, "--table", "files", src.to_str().unwrap(), "--json"]));
    let bytes: usize = files.iter().map(|(_, c)| c.len()).sum();
    assert_eq!(out["version"], 1, "{out}");
    assert_eq!(out["rows"], files.len());
    assert_eq!(out["references_added"], files.len());
    assert_eq!(out["bytes"], bytes);

    // Each file became one object named after it, holding its bytes (the rows' order and
    // columns are checked by lake_lance's own ingest tests).
    let mut stored: Vec<(String, String)> = object_files(Path::new(&root))
        .iter()
        .map(|rel| {
            let name = rel.rsplit('/').next().unwrap().to_string();
            (name, std::fs::read_to_string(Path::new(&root).join(rel)).unwrap())
        })
        .collect();
    let mut want: Vec<(String, String)> =
        files.iter().map(|(p, c)| (p.rsplit('/').next().unwrap().to_string(), c.clone())).collect();
    stored.sort();
    want.sort();
    assert_eq!(stored, want);
    assert_eq!(object_files(Path::new(&root)).len(), files.len());
    let versions = json(&ok(&["versions", &root, "--table", "files", "--json"]));
    assert_eq!(versions["versions"].as_array().map(Vec::len), Some(1));
    let verify = json(&ok(&["refs", "verify", &root, "--json"]));
    assert_eq!(verify["ok"], true, "{verify}");
    assert_eq!((verify["references_scanned"].as_u64(), verify["objects_checked"].as_u64()), (Some(1300), Some(1300)));

    // --overwrite streams the same way: one more version holding only the new content.
    let small = dir.path().join("small");
    let replaced = source(&small, 3);
    let out = json(&ok(&["ingest", &root, "--table", "files", small.to_str().unwrap(), "--overwrite", "--json"]));
    assert_eq!((out["version"].as_u64(), out["rows"].as_u64()), (Some(2), Some(3)));
    assert_eq!(out["references_added"].as_u64(), Some(replaced.len() as u64));
    let verify = json(&ok(&["refs", "verify", &root, "--json"]));
    // Both retained versions are scanned: 1300 references in the first, 3 in the overwrite.
    assert_eq!(verify["ok"], true, "{verify}");
    assert_eq!((verify["versions_scanned"].as_u64(), verify["references_scanned"].as_u64()), (Some(2), Some(1303)));
}

#[test]
fn an_ingest_that_fails_midway_commits_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let first = dir.path().join("first");
    write_files(&first, &[("e/a.bin", "a"), ("e/b.bin", "b")]);
    // No GC here: a floor no ingest on any machine comes near, so the publication guard (tested
    // in lake-lance with an injected clock) never refuses these uploads.
    ok(&["init", &root, "--min-age", "1h"]);
    ok(&["ingest", &root, "--table", "t", first.to_str().unwrap()]);
    let logs =
        |root: &str| std::fs::read_dir(Path::new(root).join("tables/t.lance/_lake/object_ref_logs")).unwrap().count();
    assert_eq!(logs(&root), 1);

    // 1100 files, then one whose name is not UTF-8 (walked last): more than a batch of rows has
    // been uploaded and handed to the append when the walk fails.
    let big = dir.path().join("big");
    source(&big, 1100);
    std::fs::write(big.join(std::ffi::OsStr::from_bytes(b"zz\xff.bin")), "not UTF-8").unwrap();
    let o = lake(&["ingest", &root, "--table", "t", big.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("path is not UTF-8"), "the walk's own error: {}", stderr(&o));
    assert!(object_files(Path::new(&root)).len() >= 2 + 1024, "uploads ran before the failure");

    // An upload that fails (an injected failure after every upload).
    let o = Command::new(env!("CARGO_BIN_EXE_lake"))
        .args(["ingest", &root, "--table", "t", first.to_str().unwrap()])
        .env("LAKE_FAILPOINT", "append.after_upload")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("injected failure at `append.after_upload`"), "{}", stderr(&o));

    // An empty folder (a symbolic link is not followed) is refused.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    std::os::unix::fs::symlink(first.join("e/a.bin"), empty.join("link.bin")).unwrap();
    let o = lake(&["ingest", &root, "--table", "t", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("has no regular files to ingest"), "{}", stderr(&o));

    // Nothing was committed: one version, its journal intact, no reference log left behind.
    let versions = json(&ok(&["versions", &root, "--table", "t", "--json"]));
    assert_eq!(versions["versions"].as_array().map(Vec::len), Some(1), "{versions}");
    assert_eq!(logs(&root), 1);
    let verify = json(&ok(&["refs", "verify", &root, "--json"]));
    assert_eq!((verify["ok"].as_bool(), verify["references_scanned"].as_u64()), (Some(true), Some(2)));
}
