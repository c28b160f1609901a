//! `lake_lance::ingest` streams a folder's uploads into one append: the table it produces (rows
//! in path order, one reference per file, one version), what it tells its progress, and failures
//! that commit nothing. (`lake ingest`'s own tests drive the command, with an injected upload
//! failure.)

use crate::support::new_lake;
use arrow_array::{Array, StringArray, StructArray, UInt64Array};
use futures::TryStreamExt;
use lake_lance::ingest::{
    ingest_dir, ingest_dir_with, FileRow, IngestError, IngestMode, IngestOptions, UploadProgress,
};
use lake_lance::LanceEngine;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Writes `n` files under `dir` (three episode folders and a few files at the top) and returns
/// `(path, content)` in walk order (sorted by path).
fn source(dir: &Path, n: usize) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = (0..n)
        .map(|i| {
            let path = if i % 50 == 7 { format!("top{i:05}.txt") } else { format!("ep{}/f{i:05}.bin", i % 3) };
            (path, format!("file {i} {}", "x".repeat(i % 13)))
        })
        .collect();
    for (rel, content) in &files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    files.sort();
    files
}

/// Every row of `table` at its latest version: (episode, path, uri, size).
async fn table_rows(engine: &LanceEngine, table: &str) -> (u64, Vec<(String, String, String, u64)>) {
    let ds = engine.open(table).await.unwrap();
    let batches: Vec<_> = ds.scan().try_into_stream().await.unwrap().try_collect().await.unwrap();
    let mut rows = Vec::new();
    for b in batches {
        let text = |name: &str| b.column_by_name(name).unwrap().as_any().downcast_ref::<StringArray>().unwrap().clone();
        let (episodes, paths) = (text("episode"), text("path"));
        let files = b.column_by_name("file").unwrap().as_any().downcast_ref::<StructArray>().unwrap().clone();
        let uris = files.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        let sizes = files.column(2).as_any().downcast_ref::<UInt64Array>().unwrap();
        assert_eq!(files.null_count(), 0);
        for i in 0..b.num_rows() {
            rows.push((
                episodes.value(i).to_string(),
                paths.value(i).to_string(),
                uris.value(i).to_string(),
                sizes.value(i),
            ));
        }
    }
    (ds.version().version, rows)
}

/// The paths it was told of, and how many times the uploads finished.
#[derive(Default)]
struct Recorded {
    paths: Mutex<Vec<String>>,
    finished: Mutex<usize>,
}

impl UploadProgress for Recorded {
    fn uploaded(&self, row: &FileRow) {
        self.paths.lock().unwrap().push(row.path.clone());
    }

    fn finished(&self) {
        *self.finished.lock().unwrap() += 1;
    }
}

/// Reference logs of table `t` (one per committed or abandoned write).
fn logs(root: &Path) -> usize {
    std::fs::read_dir(root.join("tables/t.lance/_lake/object_ref_logs")).unwrap().count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_ingest_gives_one_version_in_path_order() {
    let lake = new_lake().await;
    let src = tempfile::tempdir().unwrap();
    // More than one batch of rows (1024), so the append reads several batches while uploads run.
    let files = source(src.path(), 1300);
    let recorded = Arc::new(Recorded::default());
    let options = IngestOptions { progress: recorded.clone(), ..IngestOptions::default() };
    let (outcome, bytes) = ingest_dir_with(&lake.engine, "files", src.path(), &options).await.unwrap();
    assert_eq!((outcome.version, outcome.rows, outcome.references_added), (1, 1300, 1300));
    assert_eq!(bytes, files.iter().map(|(_, c)| c.len() as u64).sum::<u64>());
    let want_paths: Vec<String> = files.iter().map(|f| f.0.clone()).collect();
    assert_eq!(*recorded.paths.lock().unwrap(), want_paths, "told of every upload, in path order");
    assert_eq!(*recorded.finished.lock().unwrap(), 1);

    let (version, rows) = table_rows(&lake.engine, "files").await;
    assert_eq!(version, 1);
    assert_eq!(rows.len(), files.len());
    let root = lake.store.local_dir().unwrap().to_path_buf();
    for ((episode, path, uri, size), (want_path, content)) in rows.iter().zip(&files) {
        assert_eq!(path, want_path, "rows are in path order");
        assert_eq!(episode, want_path.split_once('/').map(|(e, _)| e).unwrap_or(""));
        let name = want_path.rsplit('/').next().unwrap();
        assert!(uri.starts_with("objects/") && uri.ends_with(&format!("/{name}")), "{uri}");
        assert_eq!(*size, content.len() as u64);
        assert_eq!(std::fs::read_to_string(root.join(uri)).unwrap(), *content);
    }
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.references_scanned, 1300);

    // Overwrite streams the same way: one more version holding only the new content.
    let small = tempfile::tempdir().unwrap();
    let replaced = source(small.path(), 3);
    let options = IngestOptions { mode: IngestMode::Overwrite, ..IngestOptions::default() };
    let (outcome, _) = ingest_dir_with(&lake.engine, "files", small.path(), &options).await.unwrap();
    assert_eq!((outcome.version, outcome.rows), (2, 3));
    let (version, rows) = table_rows(&lake.engine, "files").await;
    assert_eq!(version, 2);
    assert_eq!(
        rows.into_iter().map(|r| r.1).collect::<Vec<_>>(),
        replaced.into_iter().map(|f| f.0).collect::<Vec<_>>()
    );
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ingest_that_fails_midway_commits_nothing() {
    let lake = new_lake().await;
    let root = lake.store.local_dir().unwrap().to_path_buf();
    let src = tempfile::tempdir().unwrap();
    let first = src.path().join("first");
    std::fs::create_dir_all(first.join("e")).unwrap();
    std::fs::write(first.join("e/a.bin"), "a").unwrap();
    std::fs::write(first.join("e/b.bin"), "b").unwrap();
    ingest_dir(&lake.engine, "t", &first).await.unwrap();
    assert_eq!(logs(&root), 1);

    // 1100 files, then one whose name is not UTF-8 (walked last): more than a batch of rows has
    // been uploaded and handed to the append when the walk fails.
    let big = src.path().join("big");
    source(&big, 1100);
    std::fs::write(big.join(std::ffi::OsStr::from_bytes(b"zz\xff.bin")), "not UTF-8").unwrap();
    let recorded = Arc::new(Recorded::default());
    let options = IngestOptions { progress: recorded.clone(), ..IngestOptions::default() };
    let e = ingest_dir_with(&lake.engine, "t", &big, &options).await.unwrap_err();
    assert!(
        matches!(&e, IngestError::Walk { .. }) && e.to_string().contains("path is not UTF-8"),
        "the walk's own error: {e}"
    );
    assert_eq!(*recorded.finished.lock().unwrap(), 0, "the uploads did not finish");
    let objects =
        walkdir::WalkDir::new(root.join("objects")).into_iter().filter(|e| e.as_ref().unwrap().file_type().is_file());
    assert!(objects.count() >= 2 + 1024, "uploads ran before the failure");

    // A folder without a regular file (a symbolic link is not followed), and no folder at all.
    let empty = src.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    std::os::unix::fs::symlink(first.join("e/a.bin"), empty.join("link.bin")).unwrap();
    let e = ingest_dir(&lake.engine, "t", &empty).await.unwrap_err();
    assert!(matches!(e, IngestError::NoRegularFiles { .. }), "{e}");
    assert!(e.to_string().ends_with("has no regular files to ingest"), "{e}");
    let e = ingest_dir(&lake.engine, "t", &first.join("e/a.bin")).await.unwrap_err();
    assert!(matches!(e, IngestError::NotAFolder { .. }), "{e}");
    assert!(e.to_string().ends_with("is not a folder"), "{e}");

    // Nothing was committed: one version, its journal intact, no reference log left behind.
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), 1);
    assert_eq!(logs(&root), 1);
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.references_scanned, 2);
}
