//! `two_phase_append_vs_lance`: a two-phase write through the engine (`--pieces` pieces prepared
//! with `prepare_append`, one `commit_pieces`) vs Lance's own distributed write of the same rows
//! (`InsertBuilder::execute_uncommitted` per piece, one `CommitBuilder` append of their
//! fragments), in one process: the cost lake adds to each task and to the driver of a Ray write
//! (`lake.ray.LakeDatasink`), without Ray's own.
//!
//! Each sample appends `--rows` rows (split evenly into the pieces, each referencing its own
//! managed keys) to a table of its own side, created before the clock starts. Both phases are
//! timed apart; the ratio is of their sum.

use crate::lakes::{new_lake, Rows};
use crate::{median, median_ratio, seconds, Args};
use lance::dataset::transaction::{Operation, Transaction};
use lance::dataset::{CommitBuilder, InsertBuilder, WriteMode, WriteParams};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The two phases of one write.
struct Sample {
    prepare: Duration,
    commit: Duration,
}

impl Sample {
    fn total(&self) -> Duration {
        self.prepare + self.commit
    }
}

/// One two-phase append of `rows` rows in `pieces` pieces to table `two_phase` (journaled) or to
/// the plain dataset `plain`, beside it.
async fn once(root: &str, journaled: bool, rows: usize, pieces: usize) -> Result<Sample, String> {
    let (_, engine) = new_lake(root).await?;
    let share = rows.div_ceil(pieces.max(1));
    let err = |e: &dyn std::fmt::Display| e.to_string();
    if journaled {
        if !engine.table_exists("two_phase").await.map_err(|e| err(&e))? {
            engine.append("two_phase", Box::new(Rows::new(1))).await.map_err(|e| err(&e))?;
        }
        let started = Instant::now();
        let mut prepared = Vec::new();
        for _ in 0..pieces {
            prepared.push(engine.prepare_append("two_phase", Box::new(Rows::new(share))).await.map_err(|e| err(&e))?);
        }
        let prepare = started.elapsed();
        let started = Instant::now();
        engine
            .commit_pieces("two_phase", prepared, lake_lance::two_phase::PieceMode::Append)
            .await
            .map_err(|e| err(&e))?;
        return Ok(Sample { prepare, commit: started.elapsed() });
    }
    let uri = engine.dataset_uri("plain");
    if !engine.table_exists("plain").await.map_err(|e| err(&e))? {
        let params = WriteParams { mode: WriteMode::Create, skip_auto_cleanup: true, ..Default::default() };
        lance::Dataset::write(Rows::new(1), uri.as_str(), Some(params)).await.map_err(|e| err(&e))?;
    }
    let started = Instant::now();
    let dataset = Arc::new(lance::Dataset::open(uri.as_str()).await.map_err(|e| err(&e))?);
    let params = WriteParams { mode: WriteMode::Append, skip_auto_cleanup: true, ..Default::default() };
    let mut fragments = Vec::new();
    for _ in 0..pieces {
        let written = InsertBuilder::new(dataset.clone())
            .with_params(&params)
            .execute_uncommitted_stream(Box::new(Rows::new(share)) as Box<dyn arrow_array::RecordBatchReader + Send>)
            .await
            .map_err(|e| err(&e))?;
        match written.operation {
            Operation::Append { fragments: f } => fragments.extend(f),
            other => return Err(format!("Lance prepared a {other}, not an append")),
        }
    }
    let prepare = started.elapsed();
    let started = Instant::now();
    let transaction = Transaction::new(dataset.version().version, Operation::Append { fragments }, None);
    CommitBuilder::new(dataset).execute(transaction).await.map_err(|e| err(&e))?;
    Ok(Sample { prepare, commit: started.elapsed() })
}

/// Prints `two_phase_append_vs_lance` (journaled time / plain time; 1.0 is no overhead).
pub(crate) async fn ratio(args: &Args) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().join("lake").display().to_string();
    let pieces = args.pieces.max(1);
    let (mut journaled, mut plain) = (Vec::new(), Vec::new());
    for i in 0..args.repeat.max(1) {
        // Alternate which side goes first.
        for side in if i % 2 == 0 { [true, false] } else { [false, true] } {
            let sample = once(&root, side, args.rows, pieces).await?;
            if side { journaled.push(sample) } else { plain.push(sample) }
        }
    }
    let phase = |samples: &[Sample], f: fn(&Sample) -> Duration| samples.iter().map(f).collect::<Vec<_>>();
    for (name, f) in [("prepare", (|s: &Sample| s.prepare) as fn(&Sample) -> Duration), ("commit", |s| s.commit)] {
        println!(
            "# two-phase {name} samples (s): journaled [{}], plain Lance [{}]",
            seconds(&phase(&journaled, f)),
            seconds(&phase(&plain, f))
        );
    }
    let (j, p) = (phase(&journaled, Sample::total), phase(&plain, Sample::total));
    println!(
        "# two-phase append of {} rows in {pieces} pieces: journaled {:.3}s, plain Lance {:.3}s (medians; prepare {:.3}s vs {:.3}s, commit {:.3}s vs {:.3}s)",
        args.rows,
        median(j.clone()).as_secs_f64(),
        median(p.clone()).as_secs_f64(),
        median(phase(&journaled, |s| s.prepare)).as_secs_f64(),
        median(phase(&plain, |s| s.prepare)).as_secs_f64(),
        median(phase(&journaled, |s| s.commit)).as_secs_f64(),
        median(phase(&plain, |s| s.commit)).as_secs_f64(),
    );
    println!("two_phase_append_vs_lance: {:.3}", median_ratio(&j, &p));
    Ok(())
}
