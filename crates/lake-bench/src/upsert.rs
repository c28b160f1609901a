//! `upsert_time_ratio`: an upsert through the engine (guarded source, journal from the two
//! manifests) vs plain Lance's merge insert of the same rows into the same table.
//!
//! Each sample starts from a fresh table of `--upsert-rows` rows keyed `id` 0..n (written through
//! the engine for the journaled side, by plain Lance for the other; not timed), then times one
//! upsert of `--upsert-rows` rows: ids n/2..3n/2, so half replace rows and half are new, each
//! referencing a fresh managed key.

use crate::lakes::new_lake;
use crate::{median, median_ratio, seconds, Args};
use arrow_array::{ArrayRef, RecordBatch, RecordBatchIterator, RecordBatchReader, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use lake_common::{data_location_field, DataLocationBuilder};
use lake_objects::keys::mint_key;
use lance::dataset::{MergeInsertBuilder, WhenMatched, WhenNotMatched, WriteMode, WriteParams};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BATCH: usize = 8192;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("id", DataType::UInt64, false), data_location_field("file", false)]))
}

/// Rows with ids `from..to`, each referencing its own fresh managed key.
fn rows(from: u64, to: u64) -> Box<dyn RecordBatchReader + Send> {
    let (key, _) = mint_key("r");
    let prefix = key.trim_end_matches("/r").to_string();
    let batches: Vec<_> = (from..to)
        .step_by(BATCH)
        .map(|start| {
            let end = (start + BATCH as u64).min(to);
            let ids: ArrayRef = Arc::new(UInt64Array::from_iter_values(start..end));
            let mut files = DataLocationBuilder::new();
            for i in start..end {
                files.append(&format!("{prefix}/r{i}"), [7; 32], 1);
            }
            RecordBatch::try_new(schema(), vec![ids, Arc::new(files.finish())])
        })
        .collect();
    Box::new(RecordBatchIterator::new(batches, schema()))
}

/// One timed upsert of `n` rows into a fresh table of `n` rows named `table` in the lake at
/// `root`: through the engine, or by plain Lance.
async fn upsert_once(root: &str, table: &str, journaled: bool, n: u64) -> Result<Duration, String> {
    let (_, engine) = new_lake(root).await?;
    let on = vec!["id".to_string()];
    let source = rows(n / 2, n / 2 + n);
    if journaled {
        engine.append(table, rows(0, n)).await.map_err(|e| e.to_string())?;
        let started = Instant::now();
        engine.upsert(table, &on, source).await.map_err(|e| e.to_string())?;
        return Ok(started.elapsed());
    }
    let uri = engine.dataset_uri(table);
    let params = WriteParams { mode: WriteMode::Create, skip_auto_cleanup: true, ..Default::default() };
    let ds = lance::Dataset::write(rows(0, n), uri.as_str(), Some(params)).await.map_err(|e| e.to_string())?;
    let started = Instant::now();
    let job = MergeInsertBuilder::try_new(Arc::new(ds), on)
        .map_err(|e| e.to_string())?
        .when_matched(WhenMatched::UpdateAll)
        .when_not_matched(WhenNotMatched::InsertAll)
        .try_build()
        .map_err(|e| e.to_string())?;
    job.execute_reader(source).await.map_err(|e| e.to_string())?;
    Ok(started.elapsed())
}

/// Prints `upsert_time_ratio` (journaled time / plain time; 1.0 is no overhead).
pub async fn time_ratio(args: &Args) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().join("lake").display().to_string();
    let n = args.upsert_rows as u64;
    let (mut journaled, mut plain) = (Vec::new(), Vec::new());
    for i in 0..args.repeat.max(1) {
        let (j, p) = (format!("journaled{i}"), format!("plain{i}"));
        if i % 2 == 0 {
            journaled.push(upsert_once(&root, &j, true, n).await?);
            plain.push(upsert_once(&root, &p, false, n).await?);
        } else {
            plain.push(upsert_once(&root, &p, false, n).await?);
            journaled.push(upsert_once(&root, &j, true, n).await?);
        }
    }
    println!("# upsert samples (s): journaled [{}], plain Lance [{}]", seconds(&journaled), seconds(&plain));
    let ratio = median_ratio(&journaled, &plain);
    let (j, p) = (median(journaled), median(plain));
    println!(
        "# upsert of {n} rows ({} replacing, {} new) into {n}: journaled {:.3}s, plain Lance merge insert {:.3}s (medians)",
        n / 2,
        n - n / 2,
        j.as_secs_f64(),
        p.as_secs_f64()
    );
    println!("upsert_time_ratio: {ratio:.3}");
    Ok(())
}
