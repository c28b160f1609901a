//! Appends that Lance rebases over a concurrent schema change. Lance's `check_append_txn` lets an
//! `Append` pass a `Project` (a dropped column) committed after the append read its version: the
//! appended fragments keep the dropped column's data, which the version no longer has. The
//! append's journal entry must be the version's (from the two manifests), not its rows'.

use crate::support::{batch, new_lake, reader, schema};
use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::SchemaRef;
use std::sync::{Arc, Barrier};

/// A reader that yields its batch, then, before ending the stream, meets the test at `ended`
/// and waits at `go`: the append's data phase is written and its commit not yet started.
struct GatedReader {
    batch: Option<RecordBatch>,
    ended: Arc<Barrier>,
    go: Arc<Barrier>,
}

impl Iterator for GatedReader {
    type Item = Result<RecordBatch, arrow_schema::ArrowError>;
    fn next(&mut self) -> Option<Self::Item> {
        match self.batch.take() {
            Some(b) => Some(Ok(b)),
            None => {
                self.ended.wait();
                self.go.wait();
                None
            }
        }
    }
}

impl RecordBatchReader for GatedReader {
    fn schema(&self) -> SchemaRef {
        schema()
    }
}

async fn meet(barrier: &Arc<Barrier>) {
    let barrier = barrier.clone();
    tokio::task::spawn_blocking(move || barrier.wait()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_append_rebased_over_a_dropped_reference_column_journals_the_version_it_landed_as() {
    let lake = Arc::new(new_lake().await);
    let first = lake.upload("first", b"first").await;
    lake.engine.append("t", reader(vec![batch(&[("start", Some(&first))])])).await.unwrap();
    let late = lake.upload("late", b"appended while its column is dropped").await;
    let (ended, go) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let gated = GatedReader { batch: Some(batch(&[("late", Some(&late))])), ended: ended.clone(), go: go.clone() };
    let append = {
        let lake = lake.clone();
        tokio::spawn(async move { lake.engine.append("t", Box::new(gated)).await })
    };
    // The append has read version 1 and written its data files; the column goes before it commits.
    meet(&ended).await;
    let dropped = lake.engine.drop_columns("t", &["file"]).await.unwrap();
    assert_eq!((dropped.version, dropped.references_removed), (2, 1));
    meet(&go).await;
    let out = append.await.unwrap().unwrap();
    assert_eq!((out.version, out.rows, out.rebased), (3, 1, true), "Lance rebased the append over the drop");
    // Version 3 has no reference column: the append's rows add no reference to it.
    assert_eq!((out.references_added, out.references_removed), (0, 0));
    let entry = lake_lance::sidecar::read(&lake.store, "t", 3).await.unwrap().unwrap().unwrap();
    assert!(entry.added.is_empty() && entry.removed.is_empty(), "{entry:?}");
    assert!(lake.engine.scan_version("t", 3).await.unwrap().to_entries().is_empty());
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(report.is_ok(), "{report:?}");
    // The write's own log is named by no entry and was deleted: the one log left is version 1's.
    let prefix = lake_store::layout::reference_log_prefix("t");
    let logs = lake.store.list_all(&prefix).await.unwrap();
    assert_eq!(logs.len(), 1, "{logs:?}");
    // The rebased commit keeps the engine's marker (`lake_lance::commit::marker`).
    let ds = lance::Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    let tx = ds.read_transaction_by_version(3).await.unwrap().unwrap();
    let marker = lake_lance::commit::marker::CommitMarker::of(&tx).expect("the rebased commit is marked");
    assert_eq!(marker.operation, "append");
}
