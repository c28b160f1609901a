//! Reading rows back (`LanceEngine::read_rows`, `read_rows_stream`): row offsets in the order
//! given, predicates, every row, projections, and the refusals (offsets out of range, unknown
//! columns, missing tables).

use crate::support::{batch, new_lake, reader, TestLake};
use arrow_array::cast::AsArray;
use arrow_array::RecordBatch;
use futures::TryStreamExt;
use lake_lance::{LanceEngineError, RowSelection};
use lake_store::writer::ManagedObject;

/// A table `t` of 5 rows in two versions (two fragments), `episode` e0..e4, row 3 without a
/// file, and the objects of the others.
async fn table() -> (TestLake, Vec<ManagedObject>) {
    let lake = new_lake().await;
    let mut objects = Vec::new();
    for i in 0..4 {
        objects.push(lake.upload(&format!("f{i}.bin"), format!("content {i}").as_bytes()).await);
    }
    let o = &objects;
    lake.engine
        .append("t", reader(vec![batch(&[("e0", Some(&o[0])), ("e1", Some(&o[1])), ("e2", Some(&o[2]))])]))
        .await
        .unwrap();
    lake.engine.append("t", reader(vec![batch(&[("e3", None), ("e4", Some(&o[3]))])])).await.unwrap();
    (lake, objects)
}

/// The `episode` values of `batches`, in order.
fn episodes(batches: &[RecordBatch]) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| {
            let column = b.column_by_name("episode").expect("an episode column").as_string::<i32>();
            (0..b.num_rows()).map(|i| column.value(i).to_string()).collect::<Vec<_>>()
        })
        .collect()
}

/// The `uri` of the `file` column of `batches`, `None` for a null.
fn file_uris(batches: &[RecordBatch]) -> Vec<Option<String>> {
    batches
        .iter()
        .flat_map(|b| {
            let files = b.column_by_name("file").expect("a file column").as_struct();
            let uris = files.column_by_name("uri").expect("a uri child").as_string::<i32>();
            (0..b.num_rows())
                .map(|i| arrow_array::Array::is_valid(files, i).then(|| uris.value(i).to_string()))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn indices_come_back_in_the_order_given_with_duplicates() {
    let (lake, o) = table().await;
    let selection = RowSelection::Indices(vec![4, 0, 3, 0, 2]);
    let batches = lake.engine.read_rows("t", &selection, None).await.unwrap();
    assert_eq!(episodes(&batches), ["e4", "e0", "e3", "e0", "e2"]);
    assert_eq!(
        file_uris(&batches),
        [Some(o[3].key.clone()), Some(o[0].key.clone()), None, Some(o[0].key.clone()), Some(o[2].key.clone())]
    );
    // Offsets count rows in scan order, deleted rows skipped: after deleting e1, offset 1 is e2.
    lake.engine.delete("t", "episode = 'e1'").await.unwrap();
    let batches = lake.engine.read_rows("t", &RowSelection::Indices(vec![1, 3]), None).await.unwrap();
    assert_eq!(episodes(&batches), ["e2", "e4"]);
    // No offsets: no rows, with the table's columns.
    let batches = lake.engine.read_rows("t", &RowSelection::Indices(vec![]), None).await.unwrap();
    assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), 0);
    // The stream gives the same rows.
    let streamed: Vec<RecordBatch> = lake
        .engine
        .read_rows_stream("t", &RowSelection::Indices(vec![3, 0]), None)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(episodes(&streamed), ["e4", "e0"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filter_selects_the_matching_rows_in_scan_order() {
    let (lake, o) = table().await;
    let selection = RowSelection::Filter("episode IN ('e4', 'e1') OR file IS NULL".into());
    let batches = lake.engine.read_rows("t", &selection, None).await.unwrap();
    assert_eq!(episodes(&batches), ["e1", "e3", "e4"]);
    assert_eq!(file_uris(&batches), [Some(o[1].key.clone()), None, Some(o[3].key.clone())]);
    let streamed: Vec<RecordBatch> =
        lake.engine.read_rows_stream("t", &selection, None).await.unwrap().try_collect().await.unwrap();
    assert_eq!(episodes(&streamed), ["e1", "e3", "e4"]);
    // Nothing matches: no rows.
    let none = lake.engine.read_rows("t", &RowSelection::Filter("episode = 'x'".into()), None).await.unwrap();
    assert_eq!(none.iter().map(RecordBatch::num_rows).sum::<usize>(), 0);
    // More than one expression is refused as delete refuses it; an unknown column is Lance's error.
    for (bad, kind) in [("episode = 'e1'; DROP TABLE t", "invalid_input"), ("nope = 1", "invalid_input")] {
        let err = lake.engine.read_rows("t", &RowSelection::Filter(bad.into()), None).await.unwrap_err();
        assert_eq!(err.kind().as_str(), kind, "{bad}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn all_reads_every_row_of_the_latest_version() {
    let (lake, _) = table().await;
    let batches = lake.engine.read_rows("t", &RowSelection::All, None).await.unwrap();
    assert_eq!(episodes(&batches), ["e0", "e1", "e2", "e3", "e4"]);
    let names: Vec<String> = batches[0].schema().fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(names, ["episode", "file"]);
    lake.engine.delete("t", "episode = 'e0'").await.unwrap();
    let batches = lake.engine.read_rows("t", &RowSelection::All, None).await.unwrap();
    assert_eq!(episodes(&batches), ["e1", "e2", "e3", "e4"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn columns_project_every_selection() {
    let (lake, o) = table().await;
    let only = |name: &str| Some(vec![name.to_string()]);
    for selection in [RowSelection::Indices(vec![1]), RowSelection::Filter("episode = 'e1'".into()), RowSelection::All]
    {
        let batches = lake.engine.read_rows("t", &selection, only("file").as_deref()).await.unwrap();
        for b in &batches {
            let names: Vec<&str> = b.schema_ref().fields().iter().map(|f| f.name().as_str()).collect();
            assert_eq!(names, ["file"], "{selection:?}");
        }
        assert!(file_uris(&batches).contains(&Some(o[1].key.clone())), "{selection:?}");
    }
    // A nested path.
    let batches =
        lake.engine.read_rows("t", &RowSelection::Indices(vec![0]), only("file.uri").as_deref()).await.unwrap();
    let file = batches[0].column_by_name("file").unwrap().as_struct();
    assert_eq!(file.num_columns(), 1);
    assert_eq!(file.column(0).as_string::<i32>().value(0), o[0].key);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_index_out_of_range_is_refused_naming_it_and_the_row_count() {
    let (lake, _) = table().await;
    for selection in [RowSelection::Indices(vec![0, 5]), RowSelection::Indices(vec![u64::MAX])] {
        let err = lake.engine.read_rows("t", &selection, None).await.unwrap_err();
        let RowSelection::Indices(indices) = &selection else { unreachable!() };
        let largest = indices.iter().max().unwrap();
        assert!(
            matches!(&err, LanceEngineError::InvalidInput(m) if m.contains(&format!("row index {largest} ")) && m.contains("has 5 rows")),
            "{err}"
        );
        assert!(lake.engine.read_rows_stream("t", &selection, None).await.is_err());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_column_or_table_is_refused_by_name() {
    let (lake, _) = table().await;
    let columns = vec!["episode".to_string(), "nope".to_string()];
    for selection in [RowSelection::Indices(vec![0]), RowSelection::Filter("episode = 'e0'".into()), RowSelection::All]
    {
        let err = lake.engine.read_rows("t", &selection, Some(&columns)).await.unwrap_err();
        assert!(matches!(&err, LanceEngineError::InvalidInput(m) if m.contains("no column `nope`")), "{err}");
    }
    let err = lake.engine.read_rows("missing", &RowSelection::All, None).await.unwrap_err();
    assert!(matches!(err, LanceEngineError::NoSuchTable { ref table, .. } if table == "missing"), "{err}");
}
