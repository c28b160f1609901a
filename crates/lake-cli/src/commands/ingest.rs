//! `lake ingest ROOT --table NAME DIR`: the flags and the output over [`lake::lance::ingest`]
//! (walk, streamed uploads, one append), with a spinner on stderr while the files upload.

use crate::cli::{IngestArgs, TableArgs, UpsertArgs};
use crate::commands::{open_lake, print_json};
use crate::error::CliError;
use lake::lance::ingest::{ingest_dir_with, FileRow, IngestError, IngestMode, IngestOptions, UploadProgress};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

/// A spinner on stderr counting uploaded files (indicatif hides it when stderr is not a
/// terminal), cleared once every file is uploaded.
struct Spinner(indicatif::ProgressBar);

impl UploadProgress for Spinner {
    fn uploaded(&self, _row: &FileRow) {
        self.0.inc(1);
    }

    fn finished(&self) {
        self.0.finish_and_clear();
    }
}

/// Ingest options for `dir` that draw the spinner (`lake ingest`, `lake upsert`, `lake demo`).
pub(crate) fn options(dir: &Path, mode: IngestMode) -> IngestOptions {
    let bar = indicatif::ProgressBar::new_spinner().with_message(format!("uploading {}", dir.display()));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg}: {pos} files, {bytes_per_sec}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    IngestOptions { mode, progress: Arc::new(Spinner(bar)) }
}

/// The library's refusals are usage errors, its walk errors I/O errors, as before the ingest
/// moved to `lake-lance`.
impl From<IngestError> for CliError {
    fn from(e: IngestError) -> Self {
        match e {
            IngestError::NotAFolder { .. } | IngestError::NoRegularFiles { .. } => CliError::Usage(e.to_string()),
            IngestError::Walk { path, source } => CliError::Io { path, source },
            IngestError::Upload(e) => CliError::Gc(e.into()),
            IngestError::Append(e) => CliError::Engine(e),
            IngestError::Stream(message) => CliError::Refused(message),
        }
    }
}

/// Runs `lake ingest`.
///
/// # Errors
/// As [`lake::lance::ingest::ingest_dir_with`].
pub(crate) async fn run(args: &IngestArgs) -> Result<(), CliError> {
    let mode = if args.overwrite { IngestMode::Overwrite } else { IngestMode::Append };
    report(&args.table, &args.dir, options(&args.dir, mode)).await
}

/// Runs `lake upsert`.
///
/// # Errors
/// As [`lake::lance::ingest::ingest_dir_with`] with an upsert.
pub(crate) async fn upsert(args: &UpsertArgs) -> Result<(), CliError> {
    report(&args.table, &args.dir, options(&args.dir, IngestMode::Upsert { on: args.on.clone() })).await
}

/// Ingests `dir` into `table.table` with `options` and prints what it did.
async fn report(table: &TableArgs, dir: &Path, options: IngestOptions) -> Result<(), CliError> {
    let (_, _, engine) = open_lake(&table.root).await?;
    let (outcome, bytes) = ingest_dir_with(&engine, &table.table, dir, &options).await?;
    if table.json {
        print_json(&json!({
            "table": outcome.table, "version": outcome.version, "rows": outcome.rows, "bytes": bytes,
            "references_added": outcome.references_added, "references_removed": outcome.references_removed,
        }));
    } else {
        println!(
            "ingested {} files ({bytes} bytes) into table `{}` as version {} ({} references added, {} removed)",
            outcome.rows, outcome.table, outcome.version, outcome.references_added, outcome.references_removed
        );
    }
    Ok(())
}
