//! crates/lake/examples/write_from_rust.rs: upload objects, write rows that reference them,
//! read them back, and collect what no version references. `cargo test -p lake` runs it, and a
//! test checks that the README's copy of this file is identical to it.

use arrow_array::{RecordBatch, RecordBatchIterator, RecordBatchReader, StringArray};
use arrow_schema::{ArrowError, DataType, Field, Schema};
use lake::{data_location_field, DataLocationBuilder, Lake, ManagedObject};
use std::sync::Arc;
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A new lake in a temporary folder. Its GC policy floor (`min_age`): GC never deletes an
    // unreferenced object younger than that. Real lakes keep days; one second here.
    let dir = tempfile::tempdir()?;
    let lake = Lake::init(dir.path().join("lake").to_str().ok_or("not UTF-8")?, Duration::from_secs(1)).await?;

    // Objects enter through `put`: a fresh key `objects/<ULID>/<name>`, its SHA-256 and size.
    let kept = lake.objects().put("run-1.log", &b"sensor log of run 1"[..]).await?;
    let dropped = lake.objects().put("run-2.log", &b"sensor log of run 2"[..]).await?;

    // Rows reference objects in DataLocation columns; every write journals its references.
    let episodes = lake.table("episodes")?;
    let out = episodes.append(rows(&[("run-1", &kept), ("run-2", &dropped)])?).await?;
    println!("version {}: {} rows, {} references", out.version, out.rows, out.references_added);
    episodes.delete("episode = 'run-2'").await?;

    // Reads are verified against the reference's size and SHA-256.
    assert_eq!(&lake.objects().read(&kept.identity()).await?[..], b"sensor log of run 1");

    // GC: a dry run names the orphans; an apply deletes them through a checkpoint outside the
    // lake. `run-2.log` is still referenced by version 1, which the lake retains, so it stays.
    let plan = lake.gc().plan(Duration::from_secs(1)).await?;
    println!("{} candidates, lineage complete: {}", plan.candidates.len(), plan.lineage_complete);
    let applied = lake.gc().apply(&plan, &dir.path().join("gc.ckpt").to_string_lossy()).await?;
    assert!(applied.checkpoint.complete);
    lake.objects().read(&dropped.identity()).await?;

    // Errors have one kind each, which says whether retrying can help.
    let refused = lake.table("bad name!").map(|_| ()).unwrap_err();
    println!("{} (kind {}, transient: {})", refused, refused.kind(), refused.is_transient());
    Ok(())
}

/// A batch of `(episode, log)` rows: a name and a DataLocation `(uri, sha256, size)`.
fn rows(rows: &[(&str, &ManagedObject)]) -> Result<Box<dyn RecordBatchReader + Send>, ArrowError> {
    let schema =
        Arc::new(Schema::new(vec![Field::new("episode", DataType::Utf8, false), data_location_field("log", false)]));
    let mut logs = DataLocationBuilder::new();
    for (_, log) in rows {
        logs.append(&log.key, log.sha256, log.size);
    }
    let names = StringArray::from_iter_values(rows.iter().map(|(name, _)| *name));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(names), Arc::new(logs.finish())])?;
    Ok(Box::new(RecordBatchIterator::new([Ok(batch)], schema)))
}
