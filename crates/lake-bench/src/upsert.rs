//! `upsert_time_ratio`: an upsert through the engine (guarded source, journal from the two
//! manifests) vs plain Lance's merge insert of the same rows into the same table.
//!
//! Each sample starts from a fresh table of n rows keyed `id` 0..n (written through the engine for
//! the journaled side, by plain Lance for the other; not timed), then times one upsert of m rows:
//! ids n - m/2..n + m/2, so half replace rows and half are new, each referencing a fresh managed
//! key. Two sizes: n = m = `--upsert-rows`, and m = `--upsert-small-rows` into n =
//! `--upsert-large-table-rows`.

use crate::lakes::new_lake;
use crate::{median, median_ratio, seconds, Args};
use arrow_array::{ArrayRef, RecordBatch, RecordBatchIterator, RecordBatchReader, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use lake_common::{data_location_field, DataLocationBuilder};
use lake_store::keys::mint_key;
use lance::dataset::{MergeInsertBuilder, WhenMatched, WhenNotMatched, WriteMode, WriteParams};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BATCH: usize = 8192;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("id", DataType::UInt64, false), data_location_field("file", true)]))
}

/// Rows with ids `from..to`, each referencing its own fresh managed key (`file`, nullable).
pub(crate) fn rows(from: u64, to: u64) -> Box<dyn RecordBatchReader + Send> {
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

/// One timed upsert of `m` rows (ids `n - m/2..n + m - m/2`: half replace the table's last rows,
/// half are new) into a fresh table of `n` rows named `table` in the lake at `root`: through the
/// engine, or by plain Lance.
async fn upsert_once(root: &str, table: &str, journaled: bool, n: u64, m: u64) -> Result<Duration, String> {
    let (_, engine) = new_lake(root).await?;
    let on = vec!["id".to_string()];
    let source = rows(n - m / 2, n + m - m / 2);
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

/// Prints `upsert_time_ratio` (journaled time / plain time; 1.0 is no overhead) for `--upsert-rows`
/// rows into as many, then for `--upsert-small-rows` rows into `--upsert-large-table-rows`.
pub(crate) async fn time_ratio(args: &Args) -> Result<(), String> {
    let n = args.upsert_rows as u64;
    sized_ratio(args, n, n).await?;
    let large = args.upsert_large_table_rows as u64;
    sized_ratio(args, large, (args.upsert_small_rows as u64).min(large)).await
}

/// `upsert_time_ratio` for `m` rows into a table of `n`.
async fn sized_ratio(args: &Args, n: u64, m: u64) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().join("lake").display().to_string();
    let (mut journaled, mut plain) = (Vec::new(), Vec::new());
    for i in 0..args.repeat.max(1) {
        let (j, p) = (format!("journaled{i}"), format!("plain{i}"));
        if i % 2 == 0 {
            journaled.push(upsert_once(&root, &j, true, n, m).await?);
            plain.push(upsert_once(&root, &p, false, n, m).await?);
        } else {
            plain.push(upsert_once(&root, &p, false, n, m).await?);
            journaled.push(upsert_once(&root, &j, true, n, m).await?);
        }
    }
    println!("# upsert samples (s): journaled [{}], plain Lance [{}]", seconds(&journaled), seconds(&plain));
    let ratio = median_ratio(&journaled, &plain);
    let (j, p) = (median(journaled), median(plain));
    println!(
        "# upsert of {m} rows ({} replacing, {} new) into {n}: journaled {:.3}s, plain Lance merge insert {:.3}s (medians)",
        m / 2,
        m - m / 2,
        j.as_secs_f64(),
        p.as_secs_f64()
    );
    println!("upsert_time_ratio: {ratio:.3} ({m} rows into {n})");
    Ok(())
}
