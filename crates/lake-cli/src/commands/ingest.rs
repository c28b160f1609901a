//! `lake ingest ROOT --table NAME DIR`.

use crate::cli::IngestArgs;
use crate::commands::{open_lake, print_json};
use crate::error::CliError;
use arrow_array::{ArrayRef, RecordBatch, RecordBatchReader, StringArray};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use lake_common::{data_location_field, DataLocationBuilder};
use lake_lance::{CommitOutcome, LanceEngine};
use lake_objects::writer::{ManagedObject, ManagedObjectWriter};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

/// Rows per record batch handed to Lance.
const BATCH_ROWS: usize = 1024;

/// One ingested file.
#[derive(Debug, Clone)]
pub struct FileRow {
    /// First path component below the ingested folder ("" for files directly in it).
    pub episode: String,
    /// Path relative to the ingested folder, `/`-separated.
    pub path: String,
    /// The uploaded object.
    pub object: ManagedObject,
}

/// The schema of an ingested table.
pub fn file_table_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("episode", DataType::Utf8, false),
        Field::new("path", DataType::Utf8, false),
        data_location_field("file", false),
    ]))
}

/// Turns rows into record batches lazily, one batch of up to 1024 rows at a time.
pub struct RowBatches {
    rows: std::vec::IntoIter<FileRow>,
    schema: SchemaRef,
}

impl RowBatches {
    /// A reader over `rows`.
    pub fn new(rows: Vec<FileRow>) -> Self {
        Self { rows: rows.into_iter(), schema: file_table_schema() }
    }
}

impl Iterator for RowBatches {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let chunk: Vec<FileRow> = self.rows.by_ref().take(BATCH_ROWS).collect();
        if chunk.is_empty() {
            return None;
        }
        let episodes: ArrayRef = Arc::new(StringArray::from_iter_values(chunk.iter().map(|r| r.episode.as_str())));
        let paths: ArrayRef = Arc::new(StringArray::from_iter_values(chunk.iter().map(|r| r.path.as_str())));
        let mut files = DataLocationBuilder::new();
        for r in &chunk {
            files.append(&r.object.key, r.object.sha256, r.object.size);
        }
        Some(RecordBatch::try_new(self.schema.clone(), vec![episodes, paths, Arc::new(files.finish())]))
    }
}

impl RecordBatchReader for RowBatches {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// Uploads every regular file under `dir` (sorted by path; symbolic links are not followed)
/// and returns the rows to append.
///
/// # Errors
/// [`CliError::Io`] for unreadable folders or non-UTF-8 paths; upload errors.
pub async fn upload_dir(writer: &ManagedObjectWriter, dir: &Path) -> Result<Vec<FileRow>, CliError> {
    let io = |p: &Path, e: std::io::Error| CliError::Io { path: p.display().to_string(), source: e };
    if !dir.is_dir() {
        return Err(CliError::Usage(format!("{} is not a folder", dir.display())));
    }
    let mut rows = Vec::new();
    // A progress bar on stderr when it is a terminal (indicatif hides it otherwise).
    let bar = indicatif::ProgressBar::new_spinner().with_message(format!("uploading {}", dir.display()));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg}: {pos} files, {bytes_per_sec}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    for entry in walkdir::WalkDir::new(dir).sort_by_file_name().follow_links(false) {
        let entry = entry.map_err(|e| io(dir, std::io::Error::other(e.to_string())))?;
        if !entry.file_type().is_file() {
            continue;
        }
        let rel = entry.path().strip_prefix(dir).map_err(|e| io(entry.path(), std::io::Error::other(e.to_string())))?;
        let parts: Vec<&str> = rel
            .components()
            .map(|c| c.as_os_str().to_str())
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| io(entry.path(), std::io::Error::other("path is not UTF-8")))?;
        let episode = if parts.len() > 1 { parts[0].to_string() } else { String::new() };
        let object = writer.upload_file(entry.path()).await?;
        bar.inc(1);
        rows.push(FileRow { episode, path: parts.join("/"), object });
    }
    bar.finish_and_clear();
    Ok(rows)
}

/// Uploads `dir` and appends its rows to `table` in one version.
///
/// # Errors
/// As [`upload_dir`] and [`LanceEngine::append`].
pub async fn ingest_dir(engine: &LanceEngine, table: &str, dir: &Path) -> Result<(CommitOutcome, u64), CliError> {
    ingest_dir_with(engine, table, dir, false).await
}

/// As [`ingest_dir`], replacing the table's content (a snapshot) when `overwrite` is set.
///
/// # Errors
/// As [`upload_dir`], [`LanceEngine::append`] and [`LanceEngine::overwrite`].
pub async fn ingest_dir_with(
    engine: &LanceEngine,
    table: &str,
    dir: &Path,
    overwrite: bool,
) -> Result<(CommitOutcome, u64), CliError> {
    let writer = ManagedObjectWriter::new(engine.store().clone());
    let rows = upload_dir(&writer, dir).await?;
    if rows.is_empty() {
        return Err(CliError::Usage(format!("{} has no regular files to ingest", dir.display())));
    }
    let bytes = rows.iter().map(|r| r.object.size).sum();
    let batches = Box::new(RowBatches::new(rows));
    let outcome =
        if overwrite { engine.overwrite(table, batches).await? } else { engine.append(table, batches).await? };
    Ok((outcome, bytes))
}

/// Runs `lake ingest`.
///
/// # Errors
/// As [`ingest_dir`].
pub async fn run(args: &IngestArgs) -> Result<(), CliError> {
    let (_, _, engine) = open_lake(&args.table.root).await?;
    let (outcome, bytes) = ingest_dir_with(&engine, &args.table.table, &args.dir, args.overwrite).await?;
    if args.table.json {
        print_json(
            &json!({"table": outcome.table, "version": outcome.version, "rows": outcome.rows, "bytes": bytes, "references_added": outcome.references_added}),
        );
    } else {
        println!(
            "ingested {} files ({bytes} bytes) into table `{}` as version {}",
            outcome.rows, outcome.table, outcome.version
        );
    }
    Ok(())
}
