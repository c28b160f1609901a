//! `update_time_ratio` and `delete_time_ratio`: an update or a delete of `--changed-rows` rows
//! of a `--change-table-rows`-row table through the engine (its checks, the journal entry from
//! what Lance changed, the sidecar) vs plain Lance doing the same operation on the same rows.
//!
//! Each side has one table of rows keyed `id` 0..n, each referencing its own managed key
//! (written through the engine for the journaled side, by plain Lance for the other; not
//! timed). Sample `i` opens the table and changes the rows `id % (n / changed) = i`: `changed`
//! rows spread over the whole table (the update sets the reference column `file` to NULL, so the
//! engine's check scan runs). The sides alternate which goes first.

use crate::lakes::new_lake;
use crate::upsert::rows;
use crate::{median, median_ratio, seconds, Args};
use lake_lance::update::Assignment;
use lake_lance::LanceEngine;
use lance::dataset::{UpdateBuilder, WriteMode, WriteParams};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The operation measured.
#[derive(Clone, Copy)]
enum Change {
    Update,
    Delete,
}

/// One timed change of the rows matching `predicate` in `table`: through `engine`, or by plain
/// Lance on the dataset at `engine.dataset_uri(table)`.
async fn change_once(
    engine: &LanceEngine,
    table: &str,
    journaled: bool,
    change: Change,
    predicate: &str,
) -> Result<Duration, String> {
    let started = Instant::now();
    let changed = if journaled {
        let outcome = match change {
            Change::Update => {
                let set: Assignment = "file = NULL".parse().map_err(|e: lake_lance::LanceEngineError| e.to_string())?;
                engine.update(table, &[set], Some(predicate)).await
            }
            Change::Delete => engine.delete(table, predicate).await,
        };
        outcome.map_err(|e| e.to_string())?.map(|o| o.rows).unwrap_or(0)
    } else {
        let mut ds = lance::Dataset::open(engine.dataset_uri(table).as_str()).await.map_err(|e| e.to_string())?;
        match change {
            Change::Update => {
                let job = UpdateBuilder::new(Arc::new(ds))
                    .update_where(predicate)
                    .and_then(|b| b.set("file", "NULL"))
                    .and_then(|b| b.build())
                    .map_err(|e| e.to_string())?;
                job.execute().await.map_err(|e| e.to_string())?.rows_updated
            }
            Change::Delete => ds.delete(predicate).await.map_err(|e| e.to_string())?.num_deleted_rows,
        }
    };
    let elapsed = started.elapsed();
    if changed == 0 {
        return Err(format!("`{predicate}` changed no row of {table}"));
    }
    Ok(elapsed)
}

async fn ratio(args: &Args, change: Change) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().join("lake").display().to_string();
    let (_, engine) = new_lake(&root).await?;
    let n = args.change_table_rows as u64;
    let changed = (args.changed_rows as u64).clamp(1, n.max(1));
    let modulus = (n / changed).max(1);
    // Both tables, untimed.
    engine.append("journaled", rows(0, n)).await.map_err(|e| e.to_string())?;
    let params = WriteParams { mode: WriteMode::Create, skip_auto_cleanup: true, ..Default::default() };
    lance::Dataset::write(rows(0, n), engine.dataset_uri("plain").as_str(), Some(params))
        .await
        .map_err(|e| e.to_string())?;
    let (mut journaled, mut plain) = (Vec::new(), Vec::new());
    for i in 0..args.repeat.max(1) as u64 {
        let predicate = format!("id % {modulus} = {}", i % modulus);
        if i % 2 == 0 {
            journaled.push(change_once(&engine, "journaled", true, change, &predicate).await?);
            plain.push(change_once(&engine, "plain", false, change, &predicate).await?);
        } else {
            plain.push(change_once(&engine, "plain", false, change, &predicate).await?);
            journaled.push(change_once(&engine, "journaled", true, change, &predicate).await?);
        }
    }
    let (what, name) = match change {
        Change::Update => ("update (file = NULL)", "update_time_ratio"),
        Change::Delete => ("delete", "delete_time_ratio"),
    };
    println!("# {what} samples (s): journaled [{}], plain Lance [{}]", seconds(&journaled), seconds(&plain));
    let ratio = median_ratio(&journaled, &plain);
    let (j, p) = (median(journaled), median(plain));
    println!(
        "# {what} of {} rows (id % {modulus} = i) of a {n}-row table: journaled {:.3}s, plain Lance {:.3}s (medians)",
        n.div_ceil(modulus),
        j.as_secs_f64(),
        p.as_secs_f64()
    );
    println!("{name}: {ratio:.3}");
    Ok(())
}

/// Prints `update_time_ratio` (journaled time / plain time; 1.0 is no overhead).
pub(crate) async fn update_ratio(args: &Args) -> Result<(), String> {
    ratio(args, Change::Update).await
}

/// Prints `delete_time_ratio` (journaled time / plain time; 1.0 is no overhead).
pub(crate) async fn delete_ratio(args: &Args) -> Result<(), String> {
    ratio(args, Change::Delete).await
}
