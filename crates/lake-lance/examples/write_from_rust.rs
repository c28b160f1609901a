//! crates/lake-lance/examples/write_from_rust.rs: write rows that reference managed objects.
//!
//! Run it with `cargo run -p lake-lance --example write_from_rust`. `cargo test -p lake-lance`
//! runs it too (alone: `cargo test -p lake-lance --example write_from_rust`), and a test checks
//! that the README's copy of this file is identical to it.

use arrow_array::cast::AsArray;
use arrow_array::{ListArray, RecordBatch, RecordBatchIterator, RecordBatchReader, StringArray};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use lake_common::{data_location_field, data_location_list_field, data_location_type, DataLocationBuilder};
use lake_lance::{LanceEngine, LanceEngineError};
use lake_store::descriptor::LakeDescriptor;
use lake_store::guard::{FixedWriterClock, GuardError};
use lake_store::writer::{ManagedObject, ManagedObjectWriter};
use lake_store::LakeStore;
use std::sync::Arc;
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. A new lake in a temporary folder (removed when `dir` is dropped). `min_age` is the GC
    //    policy floor: GC deletes only unreferenced objects older than that. A real lake keeps
    //    days (`lake init` defaults to 7d); one hour here.
    let dir = tempfile::tempdir()?;
    let store = LakeStore::open(dir.path().join("lake").to_str().ok_or("the temporary path is not UTF-8")?)?;
    LakeDescriptor::create(&store, Duration::from_secs(3600)).await?;
    let writer = ManagedObjectWriter::new(store.clone());
    let engine = LanceEngine::new(store.clone());

    // 2. Upload objects through the managed writer, the only way objects enter the lake: each
    //    gets a fresh key `objects/<ULID>/<name>` and comes back with its SHA-256 and size.
    //    `upload` takes any `AsyncRead` (here bytes), `upload_file` a local file.
    let left = writer.upload("left.jpg", &b"left camera frame"[..]).await?;
    let right = writer.upload("right.jpg", &b"right camera frame"[..]).await?;
    let log2 = writer.upload("run-2.log", &b"sensor log of run 2"[..]).await?;
    let log_file = dir.path().join("run-1.log");
    std::fs::write(&log_file, "sensor log of run 1")?;
    let log1 = writer.upload_file(&log_file).await?;
    for object in [&left, &right, &log2, &log1] {
        println!("uploaded {} ({} bytes)", object.key, object.size);
    }

    // 3. Rows reference objects by key in DataLocation columns, and are appended through the
    //    engine, which journals every reference of the new version (what `lake gc` replays).
    let rows = episodes(&[("run-1", &log1, &[&left, &right]), ("run-2", &log2, &[])])?;
    let out = engine.append("episodes", reader(rows)).await?;
    println!(
        "committed version {} of `{}`: {} rows, {} references",
        out.version, out.table, out.rows, out.references_added
    );

    // 4. The publication guard. A writer that stalls between an upload and the append could
    //    publish a reference to an object a GC plan already lists for deletion, so every new
    //    reference must be younger than min_age - margin (margin = min_age / 4: 45 minutes
    //    here), or the append is refused and nothing is committed. Here the writer stalls for
    //    46 minutes: rather than wait, its engine reads a clock 46 minutes ahead (the guard reads
    //    the writer's clock, which minted the object's key).
    let stalled = writer.upload("run-3.log", &b"sensor log of run 3"[..]).await?;
    let later = chrono::Utc::now() + chrono::Duration::minutes(46);
    let stalled_writer = LanceEngine::new(store.clone()).with_writer_clock(Arc::new(FixedWriterClock::new(later)));
    let err = match stalled_writer.append("episodes", reader(episodes(&[("run-3", &stalled, &[])])?)).await {
        Err(err) => err,
        Ok(out) => return Err(format!("the guard let version {} through", out.version).into()),
    };
    // The refusal is typed: match on it rather than on the message.
    let LanceEngineError::Guard { source: GuardError::TooOld { uri, .. }, .. } = &err else {
        return Err(err.into());
    };
    assert_eq!(uri, &stalled.key);
    println!("refused: {err}");
    assert_eq!(engine.open("episodes").await?.version().version, 1, "nothing was committed");
    // The way out: a server-side copy to a fresh key (same bytes, new ULID), then reference it.
    let copy = writer.copy_fresh(&stalled.identity()).await?;
    let out = engine.append("episodes", reader(episodes(&[("run-3", &copy, &[])])?)).await?;
    println!("copied {} to {}; committed version {}", stalled.key, copy.key, out.version);

    // 5. Read the table back with Lance itself: the latest version, every row.
    let batch = engine.open("episodes").await?.scan().try_into_batch().await?;
    // The columns are those of `schema()`, in order, so these casts cannot fail (they panic
    // on another type).
    let (names, logs, images) =
        (batch.column(0).as_string::<i32>(), batch.column(1).as_struct(), batch.column(2).as_list::<i32>());
    let log_keys = logs.column_by_name("uri").ok_or("a DataLocation has a uri")?.as_string::<i32>();
    for row in 0..batch.num_rows() {
        println!("{}: log {}, {} images", names.value(row), log_keys.value(row), images.value(row).len());
    }
    assert_eq!(batch.num_rows(), 3);
    Ok(())
}

/// The table's schema: an episode name, its log (one object per row) and its images (a list).
fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("episode", DataType::Utf8, false),
        data_location_field("log", false),
        data_location_list_field("images", false),
    ]))
}

/// One batch of `(episode, log, images)` rows. A DataLocation is `(uri, sha256, size)`, with the
/// key the writer returned as `uri`.
fn episodes(rows: &[(&str, &ManagedObject, &[&ManagedObject])]) -> Result<RecordBatch, ArrowError> {
    let names = StringArray::from_iter_values(rows.iter().map(|(name, _, _)| *name));
    let (mut logs, mut images) = (DataLocationBuilder::new(), DataLocationBuilder::new());
    for (_, log, row_images) in rows {
        logs.append(&log.key, log.sha256, log.size);
        for image in *row_images {
            images.append(&image.key, image.sha256, image.size);
        }
    }
    // A list column is every row's images in one DataLocation array, cut into rows by lengths.
    let images = ListArray::try_new(
        Arc::new(Field::new("item", data_location_type(), true)),
        OffsetBuffer::from_lengths(rows.iter().map(|(_, _, row_images)| row_images.len())),
        Arc::new(images.finish()),
        None,
    )?;
    RecordBatch::try_new(schema(), vec![Arc::new(names), Arc::new(logs.finish()), Arc::new(images)])
}

/// `LanceEngine::append` streams a `RecordBatchReader`; here one batch.
fn reader(batch: RecordBatch) -> Box<dyn RecordBatchReader + Send> {
    let schema = batch.schema();
    Box::new(RecordBatchIterator::new([Ok(batch)], schema))
}
