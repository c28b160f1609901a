//! Folder ingest: every regular file under a folder uploaded as a managed object and appended to
//! a table as one row per file (episode, relative path, DataLocation), in one version. `lake
//! ingest` and `lake demo` are thin layers over it; `lake-bench --only memory` measures it.
//!
//! Streamed: a producer task walks DIR (sorted by path, symbolic links not followed), uploads
//! its files ([`UPLOAD_CONCURRENCY`] at a time, rows kept in path order) and hands record
//! batches of [`BATCH_ROWS`] uploaded rows through a channel of [`CHANNEL_BATCHES`] batches to
//! the engine's append, whose reader Lance consumes on a blocking thread. Memory is a few batches
//! and the uploads in flight, not one row per file. The stream ends only on an explicit end
//! message: a failed walk or upload (or a producer that stopped) fails the stream, so Lance
//! commits nothing, and the original error is returned.
//!
//! Size: about 555 lines, no unit tests; the upload producer, its channel protocol (`Uploaded`) and
//! the reader the append consumes are one pipeline whose error handover spans both ends, and
//! `LanceEngine::check_ingest` holds the up-front checks of the four `IngestMode`s.

use crate::columns::check_new_columns;
use crate::error::LanceEngineError;
use crate::scan::writable_columns;
use crate::{CommitOutcome, LanceEngine};
use arrow_array::{ArrayRef, RecordBatch, RecordBatchReader, StringArray};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use futures::StreamExt;
use lake_common::{data_location_field, DataLocationBuilder};
use lake_store::layout::{split_lineage, validate_table_name};
use lake_store::writer::{ManagedObject, ManagedObjectWriter};
use lake_store::StoreError;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use thiserror::Error;
use tokio::sync::mpsc;

/// Rows per record batch handed to Lance.
pub const BATCH_ROWS: usize = 1024;

/// Batches queued between the uploads and Lance (besides the one being built and the one Lance
/// holds).
pub const CHANNEL_BATCHES: usize = 2;

/// Files uploaded at once.
pub const UPLOAD_CONCURRENCY: usize = 4;

/// Why a folder ingest failed. Nothing was committed, except where the append's error says
/// which version was (`LanceEngineError::committed_version`); objects uploaded before the failure
/// stay, unreferenced, for GC.
#[derive(Debug, Error)]
pub enum IngestError {
    /// The folder to ingest is not a folder (refused before anything is uploaded).
    #[error("{} is not a folder", dir.display())]
    NotAFolder {
        /// The path given to ingest.
        dir: PathBuf,
    },
    /// The folder holds no regular file (symbolic links are not followed); refused before
    /// anything is appended.
    #[error("{} has no regular files to ingest", dir.display())]
    NoRegularFiles {
        /// The folder given to ingest.
        dir: PathBuf,
    },
    /// The walk could not read a folder, or a path is not UTF-8 (`path` names it).
    #[error("{path}: {source}")]
    Walk {
        /// The local path at fault (the folder given, when the walk itself failed).
        path: String,
        /// What went wrong, as an I/O error.
        source: std::io::Error,
    },
    /// An upload failed.
    #[error(transparent)]
    Upload(#[from] StoreError),
    /// The append (Lance, the journal, the registry) failed, or refused the ingest's inputs
    /// before any file was uploaded ([`LanceEngine::check_ingest`]).
    #[error(transparent)]
    Append(#[from] LanceEngineError),
    /// The stream between the uploads and the append broke: a batch could not be built, the
    /// append stopped reading, or the upload task failed (the sentence says which).
    #[error("{0}")]
    Stream(String),
}

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

/// The schema of an ingested table: `episode` (Utf8), `path` (Utf8) and `file` (DataLocation),
/// none nullable.
pub fn file_table_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("episode", DataType::Utf8, false),
        Field::new("path", DataType::Utf8, false),
        data_location_field("file", false),
    ]))
}

/// One record batch of `rows` in [`file_table_schema`].
///
/// # Errors
/// Arrow errors (none for rows built by [`upload_dir`]).
pub fn file_rows_batch(rows: &[FileRow]) -> Result<RecordBatch, ArrowError> {
    let episodes: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.episode.as_str())));
    let paths: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.path.as_str())));
    let mut files = DataLocationBuilder::new();
    for r in rows {
        files.append(&r.object.key, r.object.sha256, r.object.size);
    }
    RecordBatch::try_new(file_table_schema(), vec![episodes, paths, Arc::new(files.finish())])
}

/// What the uploads of one folder sent to the append.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UploadSummary {
    /// Files uploaded (rows sent).
    pub files: u64,
    /// Bytes uploaded.
    pub bytes: u64,
}

/// What an ingest tells while it uploads (the `lake` command draws a spinner from it). Both
/// methods do nothing by default; `()` is the progress that shows nothing.
pub trait UploadProgress: Send + Sync {
    /// `row`'s file was uploaded (called once per file, in path order).
    fn uploaded(&self, _row: &FileRow) {}
    /// Every file was uploaded and sent (the append may still be writing). Not called when the
    /// walk or an upload fails.
    fn finished(&self) {}
}

impl UploadProgress for () {}

/// How [`ingest_dir_with`] writes, and whom it tells of its uploads.
#[derive(Clone)]
pub struct IngestOptions {
    /// What the files' rows do to the table.
    pub mode: IngestMode,
    /// Told of every upload; `()` (nothing) by default.
    pub progress: Arc<dyn UploadProgress>,
}

/// What an ingest does with the rows of its files (`episode`, `path`, `file`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum IngestMode {
    /// Append them ([`LanceEngine::append`]; creates the table).
    #[default]
    Append,
    /// Replace the table's content with them, journaled as a snapshot ([`LanceEngine::overwrite`]).
    Overwrite,
    /// Upsert them keyed on these columns (`path`, say): a file whose key matches a row replaces
    /// it ([`LanceEngine::upsert`]).
    Upsert {
        /// Key columns.
        on: Vec<String>,
    },
    /// Add the files as a new reference column named `column` to the rows whose `path` matches
    /// a file's path below the folder ([`LanceEngine::add_columns`]); rows without a file get a
    /// null.
    AddColumn {
        /// The new column's name.
        column: String,
    },
}

impl Default for IngestOptions {
    fn default() -> Self {
        Self { mode: IngestMode::Append, progress: Arc::new(()) }
    }
}

impl std::fmt::Debug for IngestOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngestOptions").field("mode", &self.mode).finish_non_exhaustive()
    }
}

/// A message from the uploads to the append's reader.
#[derive(Debug)]
pub enum Uploaded {
    /// Up to [`BATCH_ROWS`] uploaded rows.
    Batch(RecordBatch),
    /// Every file was uploaded and sent: the end of the stream.
    Done,
    /// The walk or an upload failed (the sentence); the stream fails.
    Failed(String),
}

/// The reader the append consumes: the batches the uploads send, ended only by
/// [`Uploaded::Done`]. Blocks its (Lance's background) thread while it waits.
pub struct UploadedBatches {
    first: Option<Uploaded>,
    receiver: mpsc::Receiver<Uploaded>,
    done: bool,
    schema: SchemaRef,
}

impl UploadedBatches {
    /// A reader of `receiver`, starting with `first` (a message already received).
    pub fn new(first: Uploaded, receiver: mpsc::Receiver<Uploaded>) -> Self {
        Self { first: Some(first), receiver, done: false, schema: file_table_schema() }
    }
}

impl Iterator for UploadedBatches {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let message = match self.first.take() {
            Some(m) => Some(m),
            None => self.receiver.blocking_recv(),
        };
        match message {
            Some(Uploaded::Batch(batch)) => Some(Ok(batch)),
            Some(Uploaded::Done) => {
                self.done = true;
                None
            }
            Some(Uploaded::Failed(message)) => {
                self.done = true;
                Some(Err(ArrowError::ExternalError(message.into())))
            }
            None => {
                self.done = true;
                Some(Err(ArrowError::ExternalError("the uploads stopped before every file was sent".into())))
            }
        }
    }
}

impl RecordBatchReader for UploadedBatches {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// A regular file found by the walk: its path, episode and `/`-separated relative path.
struct Found {
    file: PathBuf,
    episode: String,
    path: String,
}

/// The regular files under `dir`, sorted by path (symbolic links are not followed), lazily.
fn walk(dir: &Path) -> impl Iterator<Item = Result<Found, IngestError>> + '_ {
    let io = |p: &Path, e: std::io::Error| IngestError::Walk { path: p.display().to_string(), source: e };
    walkdir::WalkDir::new(dir).sort_by_file_name().follow_links(false).into_iter().filter_map(move |entry| {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => return Some(Err(io(dir, std::io::Error::other(e.to_string())))),
        };
        if !entry.file_type().is_file() {
            return None;
        }
        let found = (|| {
            let rel =
                entry.path().strip_prefix(dir).map_err(|e| io(entry.path(), std::io::Error::other(e.to_string())))?;
            let parts: Vec<&str> = rel
                .components()
                .map(|c| c.as_os_str().to_str())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| io(entry.path(), std::io::Error::other("path is not UTF-8")))?;
            let episode = if parts.len() > 1 { parts[0].to_string() } else { String::new() };
            Ok(Found { file: entry.path().to_path_buf(), episode, path: parts.join("/") })
        })();
        Some(found)
    })
}

/// Uploads every regular file under `dir` (sorted by path; symbolic links are not followed),
/// [`UPLOAD_CONCURRENCY`] at a time, tells `progress` of each, and sends the rows in path order
/// to `batches` as record batches of up to [`BATCH_ROWS`] rows. Sends neither
/// [`Uploaded::Done`] nor [`Uploaded::Failed`]: the caller ends the stream.
///
/// # Errors
/// [`IngestError::NotAFolder`] when `dir` is not a folder; [`IngestError::Walk`] for unreadable
/// folders or non-UTF-8 paths; [`IngestError::Upload`]; [`IngestError::Stream`] when the
/// receiver is gone (the append stopped reading).
pub async fn upload_dir(
    writer: &ManagedObjectWriter,
    dir: &Path,
    batches: &mpsc::Sender<Uploaded>,
    progress: &dyn UploadProgress,
) -> Result<UploadSummary, IngestError> {
    if !dir.is_dir() {
        return Err(IngestError::NotAFolder { dir: dir.to_path_buf() });
    }
    let mut uploads = futures::stream::iter(walk(dir))
        .map(move |found| async move {
            let found = found?;
            let object = writer.upload_file(&found.file).await?;
            Ok::<_, IngestError>(FileRow { episode: found.episode, path: found.path, object })
        })
        .buffered(UPLOAD_CONCURRENCY);
    let mut summary = UploadSummary::default();
    let mut rows: Vec<FileRow> = Vec::with_capacity(BATCH_ROWS);
    let send = |rows: &mut Vec<FileRow>| {
        let batch = file_rows_batch(rows);
        rows.clear();
        async move {
            let batch = batch.map_err(|e| IngestError::Stream(format!("could not build a batch of rows: {e}")))?;
            batches
                .send(Uploaded::Batch(batch))
                .await
                .map_err(|_| IngestError::Stream("the append stopped reading the uploaded rows".into()))
        }
    };
    while let Some(row) = uploads.next().await {
        let row = row?;
        progress.uploaded(&row);
        summary.files += 1;
        summary.bytes += row.object.size;
        rows.push(row);
        if rows.len() == BATCH_ROWS {
            send(&mut rows).await?;
        }
    }
    if !rows.is_empty() {
        send(&mut rows).await?;
    }
    progress.finished();
    Ok(summary)
}

/// Uploads `dir` and appends its rows to `table` in one version. Returns the committed version
/// and the bytes uploaded.
///
/// # Errors
/// As [`ingest_dir_with`].
pub async fn ingest_dir(engine: &LanceEngine, table: &str, dir: &Path) -> Result<(CommitOutcome, u64), IngestError> {
    ingest_dir_with(engine, table, dir, &IngestOptions::default()).await
}

/// As [`ingest_dir`] in `options.mode` (append, overwrite, upsert or a new column), telling `options.progress` of every upload. Returns the committed version and the
/// bytes uploaded.
///
/// Every input that can be checked without the files is checked before the first upload
/// ([`LanceEngine::check_ingest`]). The uploads stream into the append (see the module
/// documentation); a folder without a regular file is refused before anything is appended, and
/// a failed walk or upload fails the append (nothing is committed; objects uploaded before the
/// failure stay, unreferenced, for GC).
///
/// # Errors
/// As [`upload_dir`]; [`IngestError::Append`] as [`LanceEngine::check_ingest`],
/// [`LanceEngine::append`] and [`LanceEngine::overwrite`]; [`IngestError::NoRegularFiles`] when
/// `dir` has no regular file.
pub async fn ingest_dir_with(
    engine: &LanceEngine,
    table: &str,
    dir: &Path,
    options: &IngestOptions,
) -> Result<(CommitOutcome, u64), IngestError> {
    if !dir.is_dir() {
        return Err(IngestError::NotAFolder { dir: dir.to_path_buf() });
    }
    engine.check_ingest(table, &options.mode).await?;
    let (sender, mut receiver) = mpsc::channel(CHANNEL_BATCHES);
    // The producer's error, kept here (the stream carries only its sentence) and set before the
    // stream fails, so the append's failure can be reported as what caused it.
    let failure: Arc<Mutex<Option<IngestError>>> = Arc::new(Mutex::new(None));
    let producer = {
        let writer = ManagedObjectWriter::new(engine.store().clone());
        let dir = dir.to_path_buf();
        let failure = failure.clone();
        let progress = options.progress.clone();
        tokio::spawn(async move {
            match upload_dir(&writer, &dir, &sender, progress.as_ref()).await {
                Ok(summary) => {
                    // A receiver that is gone has already failed the append.
                    let _ = sender.send(Uploaded::Done).await;
                    Some(summary)
                }
                // The append stopped reading (it failed on its own): nothing to add.
                Err(_) if sender.is_closed() => None,
                Err(e) => {
                    let message = e.to_string();
                    *failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    let _ = sender.send(Uploaded::Failed(message)).await;
                    None
                }
            }
        })
    };
    let taken = |failure: &Mutex<Option<IngestError>>| failure.lock().unwrap_or_else(|p| p.into_inner()).take();
    let first = match receiver.recv().await {
        Some(Uploaded::Batch(batch)) => Uploaded::Batch(batch),
        Some(Uploaded::Done) => {
            return Err(IngestError::NoRegularFiles { dir: dir.to_path_buf() });
        }
        Some(Uploaded::Failed(_)) | None => {
            // The producer keeps its error before sending `Failed`; one that stopped without
            // either panicked.
            let joined = producer.await;
            return Err(taken(&failure).unwrap_or_else(|| {
                IngestError::Stream(match joined {
                    Err(e) => format!("the upload task failed: {e}"),
                    Ok(_) => format!("the uploads of {} stopped before sending any row", dir.display()),
                })
            }));
        }
    };
    let batches = Box::new(UploadedBatches::new(first, receiver));
    let appended = match &options.mode {
        IngestMode::Append => engine.append(table, batches).await,
        IngestMode::Overwrite => engine.overwrite(table, batches).await,
        IngestMode::Upsert { on } => engine.upsert(table, on, batches).await,
        IngestMode::AddColumn { column } => match PathAndFile::new(batches, column) {
            Ok(reader) => engine.add_columns(table, "path", Box::new(reader)).await,
            Err(e) => Err(e),
        },
    };
    match appended {
        Ok(outcome) => {
            let summary = producer.await.map_err(|e| IngestError::Stream(format!("the upload task failed: {e}")))?;
            let bytes = summary.map(|s| s.bytes).unwrap_or_default();
            Ok((outcome, bytes))
        }
        Err(e) => {
            // The stream failed because of the walk or an upload: report that, not Lance's echo.
            if let Some(cause) = taken(&failure) {
                return Err(cause);
            }
            producer.abort();
            Err(e.into())
        }
    }
}

/// The rows of an ingest as `(path, <column>)`: the key and the file under a new name, for
/// [`IngestMode::AddColumn`]. The DataLocation field keeps its marker and becomes nullable
/// (rows without a file get a null).
struct PathAndFile {
    inner: Box<dyn RecordBatchReader + Send>,
    schema: SchemaRef,
}

impl PathAndFile {
    fn new(inner: Box<dyn RecordBatchReader + Send>, column: &str) -> Result<Self, LanceEngineError> {
        Ok(Self { inner, schema: path_and_file_schema(column)? })
    }
}

/// The schema of [`IngestMode::AddColumn`]'s rows: `path` and the new column `column`.
///
/// # Errors
/// [`LanceEngineError::InvalidInput`] for a column named `path` or `episode`.
fn path_and_file_schema(column: &str) -> Result<SchemaRef, LanceEngineError> {
    if column == "path" || column == "episode" {
        return Err(LanceEngineError::InvalidInput(format!(
            "the new column cannot be named `{column}`: ingested rows already have it"
        )));
    }
    Ok(Arc::new(Schema::new(vec![
        Field::new("path", DataType::Utf8, false),
        lake_common::data_location_field(column, true),
    ])))
}

impl LanceEngine {
    /// Checks every input of an ingest of rows in [`file_table_schema`] into `table` in `mode`
    /// that can be checked without the files, so that a bad one is refused before the first
    /// upload: the table name; that a branch (`t@b`) exists (a branch is made by
    /// `create_branch`) and that the table exists for [`IngestMode::AddColumn`]; for an existing
    /// table, that its schema is one the engine can journal and that the rows fit it (an append
    /// or upsert: every row column is a column of the table with the same type, and the table's
    /// other columns are nullable), the upsert's key columns (present, in the rows and in the
    /// table, with the same type), and the new column of [`IngestMode::AddColumn`] (a top-level
    /// name not in use, and a `path` column of the table to match rows on). An overwrite
    /// replaces the schema: only the name and the branch are checked.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`], [`LanceEngineError::NoSuchTable`] or
    /// [`LanceEngineError::UnreadableTable`] naming what is wrong; storage and Lance errors.
    pub async fn check_ingest(&self, table: &str, mode: &IngestMode) -> Result<(), LanceEngineError> {
        validate_table_name(table)?;
        if matches!(mode, IngestMode::Upsert { on } if on.is_empty()) {
            return Err(LanceEngineError::InvalidInput(format!(
                "an upsert into `{table}` needs at least one key column (`on`)"
            )));
        }
        let new_column = match mode {
            IngestMode::AddColumn { column } => Some(path_and_file_schema(column)?),
            _ => None,
        };
        let exists = self.table_exists(table).await?;
        let branch = split_lineage(table).1.is_some();
        if !exists && (branch || new_column.is_some()) {
            return Err(LanceEngineError::NoSuchTable { table: table.into(), uri: self.dataset_uri(table) });
        }
        if !exists || matches!(mode, IngestMode::Overwrite) {
            return Ok(());
        }
        let ds = self.open(table).await?;
        writable_columns(&ds, table)?;
        if let Some(schema) = new_column {
            return check_new_columns(&ds, table, "path", &schema);
        }
        let stored = Schema::from(ds.schema());
        let rows = file_table_schema();
        let refuse = |why: String| {
            Err(LanceEngineError::InvalidInput(format!(
                "table `{table}`: {why}, so the ingested rows (episode, path, file) do not fit it; nothing was uploaded"
            )))
        };
        for field in rows.fields() {
            match stored.field_with_name(field.name()) {
                Err(_) => return refuse(format!("it has no column `{}`", field.name())),
                Ok(f) if !same_type(f.data_type(), field.data_type()) => {
                    return refuse(format!("its column `{}` is {}, not {}", f.name(), f.data_type(), field.data_type()))
                }
                Ok(_) => {}
            }
        }
        if let Some(f) = stored.fields().iter().find(|f| rows.field_with_name(f.name()).is_err() && !f.is_nullable()) {
            return refuse(format!("its column `{}` is not nullable", f.name()));
        }
        if let IngestMode::Upsert { on } = mode {
            for key in on {
                if rows.field_with_name(key).is_err() {
                    return Err(LanceEngineError::InvalidInput(format!(
                        "the upsert key `{key}` is not a column of the ingested rows (episode, path, file); nothing was uploaded"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Whether two Arrow types are the same for a write (Lance compares schemas without field
/// nullability or metadata): equal, or structs with the same child names and same-typed
/// children, or lists of such.
fn same_type(a: &DataType, b: &DataType) -> bool {
    match (a, b) {
        (DataType::Struct(x), DataType::Struct(y)) => {
            x.len() == y.len()
                && x.iter().zip(y.iter()).all(|(p, q)| p.name() == q.name() && same_type(p.data_type(), q.data_type()))
        }
        (DataType::List(x), DataType::List(y)) => same_type(x.data_type(), y.data_type()),
        _ => a == b,
    }
}

impl Iterator for PathAndFile {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let batch = match self.inner.next()? {
            Ok(batch) => batch,
            Err(e) => return Some(Err(e)),
        };
        let (Some(path), Some(file)) = (batch.column_by_name("path"), batch.column_by_name("file")) else {
            return Some(Err(ArrowError::SchemaError("an ingest batch without `path` or `file`".into())));
        };
        Some(RecordBatch::try_new(self.schema.clone(), vec![path.clone(), file.clone()]))
    }
}

impl RecordBatchReader for PathAndFile {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}
