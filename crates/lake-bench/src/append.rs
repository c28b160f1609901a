//! `append_throughput_ratio`: a journaled engine append vs a plain Lance append of the same rows.

use crate::lakes::{new_lake, Rows};
use crate::{median, median_ratio, seconds, Args};
use lance::dataset::{WriteMode, WriteParams};
use std::time::{Duration, Instant};

/// One append of `rows` rows into a table of a lake at `root`: through the engine (journaled),
/// or as a plain Lance append to a dataset beside it.
pub(crate) async fn append_once(root: &str, journaled: bool, rows: usize) -> Result<Duration, String> {
    // Creating the lake is idempotent: repeated appends reuse it.
    let (_, engine) = new_lake(root).await?;
    let reader = Box::new(Rows::new(rows));
    let started = Instant::now();
    if journaled {
        engine.append("journaled", reader).await.map_err(|e| e.to_string())?;
    } else {
        let uri = engine.dataset_uri("plain");
        let mode = if engine.table_exists("plain").await.map_err(|e| e.to_string())? {
            WriteMode::Append
        } else {
            WriteMode::Create
        };
        let params = WriteParams { mode, skip_auto_cleanup: true, ..Default::default() };
        lance::Dataset::write(reader, uri.as_str(), Some(params)).await.map_err(|e| e.to_string())?;
    }
    Ok(started.elapsed())
}

/// One engine append of `rows` rows built in memory before the clock starts (the Python
/// package's benchmark builds its pyarrow table first too, so both time the append alone).
pub(crate) async fn append_built(root: &str, rows: usize) -> Result<Duration, String> {
    let (_, engine) = new_lake(root).await?;
    let generated = Rows::new(rows);
    let schema = arrow_array::RecordBatchReader::schema(&generated);
    let batches: Vec<_> = generated.collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let reader = Box::new(arrow_array::RecordBatchIterator::new(batches.into_iter().map(Ok), schema));
    let started = Instant::now();
    engine.append("journaled", reader).await.map_err(|e| e.to_string())?;
    Ok(started.elapsed())
}

/// Prints `append_throughput_ratio` (journaled throughput / plain throughput).
pub(crate) async fn throughput(args: &Args) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().join("lake").display().to_string();
    let mut journaled = Vec::new();
    let mut plain = Vec::new();
    for i in 0..args.repeat.max(1) {
        // Alternate which side goes first, so neither always follows the other's writeback.
        if i % 2 == 0 {
            journaled.push(append_once(&root, true, args.rows).await?);
            plain.push(append_once(&root, false, args.rows).await?);
        } else {
            plain.push(append_once(&root, false, args.rows).await?);
            journaled.push(append_once(&root, true, args.rows).await?);
        }
    }
    println!("# append samples (s): journaled [{}], plain Lance [{}]", seconds(&journaled), seconds(&plain));
    let ratio = median_ratio(&plain, &journaled);
    let (j, p) = (median(journaled), median(plain));
    println!(
        "# append of {} rows: journaled {:.3}s, plain Lance {:.3}s (medians)",
        args.rows,
        j.as_secs_f64(),
        p.as_secs_f64()
    );
    println!("append_throughput_ratio: {ratio:.3}");
    Ok(())
}
