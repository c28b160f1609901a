//! Journaled appends: counts, nulls, lists, refusals, and no retained batches.

use crate::support::{batch, new_lake, reader, schema};
use arrow_array::{ArrayRef, RecordBatch, RecordBatchIterator, StringArray};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema};
use lake_common::{data_location_list_field, data_location_type, DataLocationBuilder};
use lake_lance::LanceEngineError;
use lake_store::layout::sidecar_key;
use std::sync::{Arc, Weak};

#[tokio::test(flavor = "multi_thread")]
async fn append_writes_object_reference_delta_with_counts() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"aaaa").await;
    let b = lake.upload("b.bin", b"bbbbbb").await;
    let out = lake
        .engine
        .append(
            "t",
            reader(vec![batch(&[("e1", Some(&a)), ("e1", Some(&a))]), batch(&[("e2", Some(&b)), ("e3", None)])]),
        )
        .await
        .unwrap();
    assert_eq!((out.version, out.rows, out.references_added), (1, 4, 3));
    let delta = lake_lance::sidecar::read(&lake.store, "t", 1).await.unwrap().expect("sidecar written").unwrap();
    assert_eq!(delta.parent, None);
    let counts: Vec<(String, u64)> = delta.added.iter().map(|e| (e.identity.uri.clone(), e.count)).collect();
    let mut expected = vec![(a.key.clone(), 2), (b.key.clone(), 1)];
    expected.sort();
    assert_eq!(counts, expected);
    assert!(delta.removed.is_empty());
    // The journal equals a full scan of the version.
    assert_eq!(lake.engine.scan_version("t", 1).await.unwrap().to_entries(), delta.added);
    // The registry follows.
    assert_eq!(lake_store::registry::current(&lake.store, "t").await.unwrap().unwrap().version, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn list_of_data_locations_is_journaled() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let b = lake.upload("b.bin", b"b").await;
    let mut items = DataLocationBuilder::new();
    items.append(&a.key, a.sha256, a.size);
    items.append(&b.key, b.sha256, b.size);
    items.append(&a.key, a.sha256, a.size);
    let item = Arc::new(Field::new("item", data_location_type(), true));
    let list = arrow_array::ListArray::new(
        item,
        arrow_buffer::OffsetBuffer::from_lengths([2, 1]),
        Arc::new(items.finish()),
        None,
    );
    let schema = Arc::new(Schema::new(vec![
        Field::new("episode", DataType::Utf8, false),
        data_location_list_field("files", true),
    ]));
    let b1 = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(StringArray::from(vec!["x", "y"])) as ArrayRef, Arc::new(list)],
    )
    .unwrap();
    let out = lake.engine.append("lists", Box::new(RecordBatchIterator::new(vec![Ok(b1)], schema))).await.unwrap();
    assert_eq!(out.references_added, 3);
    let scanned = lake.engine.scan_version("lists", out.version).await.unwrap();
    assert_eq!(scanned.get(&a.identity()), 2);
    assert_eq!(scanned.get(&b.identity()), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_references_commit_nothing() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
    // A uri escaping the root, in the second batch: the whole append is refused.
    let mut bad = DataLocationBuilder::new();
    bad.append("objects/../../etc/passwd", [0; 32], 1);
    let bad_batch = RecordBatch::try_new(
        schema(),
        vec![Arc::new(StringArray::from(vec!["e"])) as ArrayRef, Arc::new(bad.finish())],
    )
    .unwrap();
    let err = lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))]), bad_batch])).await.unwrap_err();
    assert!(matches!(err, LanceEngineError::Location { .. }), "{err}");
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), 1, "no version was committed");
    assert!(lake.store.get(&sidecar_key("t", 2)).await.unwrap().is_none());
    // Only the committed version's reference log remains.
    let logs = lake.store.list_all(&lake_store::layout::reference_log_prefix("t")).await.unwrap();
    assert_eq!(logs.len(), 1, "the refused write's log was discarded: {logs:?}");
    // A column marked as DataLocation with another layout is refused before writing.
    let wrong = Arc::new(Schema::new(vec![Field::new(
        "file",
        DataType::Struct(Fields::from(vec![Field::new("uri", DataType::Utf8, false)])),
        true,
    )
    .with_metadata([("ARROW:extension:name".to_string(), "lake.data_location".to_string())].into())]));
    let empty: Vec<Result<RecordBatch, ArrowError>> = vec![];
    let err = lake.engine.append("t", Box::new(RecordBatchIterator::new(empty, wrong))).await.unwrap_err();
    assert!(matches!(err, LanceEngineError::Location { .. }), "{err}");
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn append_does_not_retain_batches() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let batches: Vec<RecordBatch> = (0..20).map(|_| batch(&[("e", Some(&a)); 100])).collect();
    let weak: Vec<Weak<dyn arrow_array::Array>> = batches.iter().map(|b| Arc::downgrade(b.column(1))).collect();
    let out = lake.engine.append("t", reader(batches)).await.unwrap();
    assert_eq!(out.references_added, 2000);
    assert!(weak.iter().all(|w| w.upgrade().is_none()), "a batch outlived the append");
}
