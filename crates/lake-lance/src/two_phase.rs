//! Journaled two-phase writes: many workers prepare pieces, one coordinator commits them as one
//! version (`docs/distributed-writes.md`). Lance's distributed write (`execute_uncommitted` on
//! the workers, one commit on the driver: lance-ray's datasink) maps onto it.
//!
//! - [`LanceEngine::prepare_append`] (any worker, any process): writes Lance data files for its
//!   batches without committing, through the streamed append's own [`JournalingReader`] (every
//!   reference validated, counted and logged as an append does), and returns a
//!   [`PreparedPiece`]: serde JSON holding the uncommitted fragments, the piece's rows,
//!   references and oldest managed key, its reference log, the table, the lake root, the
//!   table's schema fingerprint and the version it read. Uploading the objects the rows
//!   reference is the caller's job (`lake_store::writer::ManagedObjectWriter`), before.
//! - [`LanceEngine::commit_pieces`] (one coordinator): refuses pieces of another table, lake or
//!   schema, pieces given twice, pieces whose data files the table's latest version holds
//!   already (committed before), and pieces whose counts differ from their fragments; then one
//!   Lance transaction (Append or Overwrite) and one journal entry, through the write protocol
//!   of every lake commit (`crate::commit`).
//!
//! **What the commit checks of a piece, and why the journal is exact.** Metadata first (cheap,
//! no read): format, lake root, table, schema fingerprint equal to the table's at the commit's
//! read version, a read version not above it, no piece or data file twice, every fragment with
//! a known row count and no deletion file, and the fragments' physical rows summing to the
//! piece's `rows`. Then the coordinator reads the reference columns (only those: a projection)
//! of every piece's fragments once, and that read **is** the journal: it streams into the
//! version's row log as it goes, validating every reference as a new one (managed keys inside
//! the root), and must give exactly the piece's `rows`, `references` and oldest managed key,
//! else the piece is refused. So the entry never trusts what a piece says: it is computed from
//! the very fragments the transaction commits (an Append adds exactly them; an Overwrite's
//! content is exactly them), and equals a full scan of the committed version by construction.
//! The piece's own counts serve to refuse a damaged or edited piece, and a piece's reference
//! log (written by the worker) is not read. Not checked: that a piece's reference log holds the
//! same identities as its fragments (it is not used), and per-identity counts of a piece (only
//! totals and the oldest key: a forger who writes fragments and a matching piece commits rows
//! that the journal then records exactly, as an append of those rows would). Cost: the
//! reference columns of the new rows, read once by the coordinator, which merging the pieces'
//! logs into the one entry would cost too.

use crate::commit::change::{Adds, Change, Journal, Named};
use crate::engine::{CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::journaling::{discard_log, JournalingReader, OldestKey};
use crate::log_upload::RowLogWriter;
use crate::scan::{writable_columns, SCAN_IO_BUFFER_BYTES};
use crate::uncommitted::{data_file_keys, discard_refused_write};
use arrow_array::RecordBatchReader;
use futures::TryStreamExt;
use lake_common::intent::IntentOperation;
use lake_common::ErrorKind;
use lake_common::{DeltaKind, LogRef, LogTotals, ObjectIdentity, ReferenceColumns};
use lake_store::layout::validate_table_name;
use lance::dataset::fragment::FileFragment;
use lance::dataset::transaction::{Operation, Transaction};
use lance::dataset::{InsertBuilder, WriteMode};
use lance::table::format::Fragment;
use lance::Dataset;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::sync::Arc;

/// The first piece (its index and a data file) whose data files a fragment of `ds`'s version
/// already holds: a piece committed before, given again (a driver's retry after a commit that
/// landed). Cost: one pass over the version's fragment list (manifest metadata, no read), with
/// memory for the pieces' data file names only.
fn committed_already(ds: &Dataset, pieces: &[PreparedPiece]) -> Option<(usize, String)> {
    let mut owner = std::collections::BTreeMap::new();
    for (i, piece) in pieces.iter().enumerate() {
        for file in piece.fragments.iter().flat_map(|f| f.files.iter()) {
            owner.entry((file.base_id, file.path.as_str())).or_insert(i);
        }
    }
    ds.fragments()
        .iter()
        .flat_map(|f| f.files.iter())
        .find_map(|file| owner.get(&(file.base_id, file.path.as_str())).map(|i| (*i, file.path.clone())))
}

/// The first piece (its index, a data file, and the version) whose data files a version
/// committed after the earliest version the pieces read holds: a piece committed before, given
/// again, also when a compaction or a delete has since taken its files out of the latest version
/// (re-adding them would add rows twice or bring deleted rows back). Cost: one manifest read per
/// version committed since the pieces were prepared (metadata, no data).
///
/// # Errors
/// Lance errors listing or opening those versions.
async fn committed_since(
    table: &str,
    ds: &Dataset,
    pieces: &[PreparedPiece],
) -> Result<Option<(usize, String, u64)>, LanceEngineError> {
    let lance_err = |source| LanceEngineError::Lance {
        table: table.into(),
        action: "read the versions since the pieces were prepared",
        source,
    };
    let latest = ds.version().version;
    if let Some((i, path)) = committed_already(ds, pieces) {
        return Ok(Some((i, path, latest)));
    }
    let Some(read) = pieces.iter().map(|p| p.read_version).min() else { return Ok(None) };
    let versions = ds.versions().await.map_err(lance_err)?;
    for version in versions.iter().map(|v| v.version).filter(|v| *v > read && *v < latest).rev() {
        let then = ds.checkout_version(version).await.map_err(lance_err)?;
        if let Some((i, path)) = committed_already(&then, pieces) {
            return Ok(Some((i, path, version)));
        }
    }
    Ok(None)
}

/// The format of a [`PreparedPiece`] this build writes and reads.
pub const PIECE_FORMAT_VERSION: u32 = 1;

/// One worker's prepared share of a two-phase write: data files written, nothing committed.
///
/// Serialise it with `serde_json` to hand it to the coordinator (another process); the
/// coordinator passes it to [`LanceEngine::commit_pieces`]. A piece never committed leaves
/// uncommitted data files (Lance's cleanup removes unreferenced files older than 7 days) and
/// its reference log (GC's own garbage once older than its cutoff).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreparedPiece {
    /// [`PIECE_FORMAT_VERSION`].
    pub format_version: u32,
    /// The lake root the piece was written under, as `LakeRootUri` displays it.
    pub lake: String,
    /// The table (lineage name: `t` or `t@b`).
    pub table: String,
    /// The table version the piece read (its schema's), a Lance version number.
    pub read_version: u64,
    /// The table's schema fingerprint at `read_version` ([`schema_fingerprint`]: 64 lowercase
    /// hex).
    pub schema: String,
    /// Rows the piece wrote.
    pub rows: u64,
    /// References (non-null DataLocation values) in those rows, counted as an append counts
    /// them: one per row and reference column.
    pub references: u64,
    /// The managed reference minted earliest among them (what the publication guard checks),
    /// if any.
    pub oldest: Option<ObjectIdentity>,
    /// The piece's reference log (a row log, written by the worker as a streamed append writes
    /// its own), under `tables/<t>.lance/_lake/object_ref_logs/<write_id>.arrows`.
    pub log: LogRef,
    /// The uncommitted Lance fragments (Lance's own metadata; ids are assigned at commit).
    pub fragments: Vec<Fragment>,
}

/// How [`LanceEngine::commit_pieces`] commits its pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceMode {
    /// Add the pieces' rows (Lance `Append`; journaled as a `delta`).
    Append,
    /// Replace the table's content by the pieces' rows, keeping its schema (Lance `Overwrite`;
    /// journaled as a `snapshot`).
    Overwrite,
}

/// The fingerprint of `ds`'s schema: SHA-256 (64 lowercase hex) of every field in pre-order
/// (id, parent id, name, logical type, nullability, metadata sorted by key) and the schema's
/// metadata sorted by key. Two schemas with one fingerprint write interchangeable fragments.
pub fn schema_fingerprint(ds: &Dataset) -> String {
    let schema = ds.schema();
    let mut hasher = Sha256::new();
    for field in schema.fields_pre_order() {
        let metadata: std::collections::BTreeMap<_, _> = field.metadata.iter().collect();
        hasher.update(
            format!(
                "{}\u{1f}{}\u{1f}{}\u{1f}{:?}\u{1f}{}\u{1f}{:?}\u{1e}",
                field.id, field.parent_id, field.name, field.logical_type, field.nullable, metadata
            )
            .as_bytes(),
        );
    }
    let metadata: std::collections::BTreeMap<_, _> = schema.metadata.iter().collect();
    hasher.update(format!("{metadata:?}").as_bytes());
    hex::encode(hasher.finalize())
}

/// What one piece's fragments hold, read by the coordinator.
#[derive(Default)]
struct Read {
    rows: u64,
    references: u64,
    oldest: OldestKey,
}

impl LanceEngine {
    /// Phase 1 of a two-phase write (module documentation): writes `batches` as uncommitted
    /// Lance fragments of `table` (which must exist; its schema is the batches'), journaling
    /// their references as an append does, and returns the piece for
    /// [`LanceEngine::commit_pieces`]. Nothing is committed; no write intent is written (the
    /// commit writes one for all pieces).
    ///
    /// # Errors
    /// [`LanceEngineError::NoSuchTable`]; [`LanceEngineError::UnreadableTable`];
    /// [`LanceEngineError::Location`] for an invalid DataLocation column or value;
    /// [`LanceEngineError::JournalLog`]; Lance errors (a schema other than the table's). The
    /// data files and log of a refused piece are removed.
    pub async fn prepare_append(
        &self,
        table: &str,
        batches: Box<dyn RecordBatchReader + Send>,
    ) -> Result<PreparedPiece, LanceEngineError> {
        validate_table_name(table)?;
        ReferenceColumns::from_schema(&batches.schema())
            .map_err(|source| LanceEngineError::Location { table: table.into(), source })?;
        let ds = self.open(table).await?;
        writable_columns(&ds, table)?;
        let read_version = ds.version().version;
        let schema = schema_fingerprint(&ds);
        let (reader, worker) = JournalingReader::new(batches, self.store(), table)?;
        let params = self.write_params(WriteMode::Append);
        let source: Box<dyn RecordBatchReader + Send> = Box::new(reader);
        let written = InsertBuilder::new(Arc::new(ds)).with_params(&params).execute_uncommitted_stream(source).await;
        let data_files = written.as_ref().map(|tx| data_file_keys(table, tx)).unwrap_or_default();
        let log = match worker.finish().await {
            Ok(log) => log,
            Err(failure) => {
                discard_refused_write(self.store(), table, &data_files, false).await;
                return Err(failure.into_error(table));
            }
        };
        let prepared = match written {
            Ok(transaction) => match transaction.operation {
                Operation::Append { fragments } => Ok(fragments),
                other => Err(LanceEngineError::InvalidInput(format!(
                    "table `{table}`: Lance prepared a {other} instead of an Append; nothing was committed"
                ))),
            },
            Err(source) => Err(LanceEngineError::Lance { table: table.into(), action: "prepare", source }),
        };
        let fragments = match prepared {
            Ok(fragments) => fragments,
            Err(e) => {
                discard_log(self.store(), &log.key).await;
                discard_refused_write(self.store(), table, &data_files, false).await;
                return Err(e);
            }
        };
        Ok(PreparedPiece {
            format_version: PIECE_FORMAT_VERSION,
            lake: self.store().root().to_string(),
            table: table.into(),
            read_version,
            schema,
            rows: log.rows,
            references: log.totals.references,
            oldest: log.oldest.clone(),
            log: LogRef::of(log.write_id.clone(), &log.totals, false),
            fragments,
        })
    }

    /// Phase 2 of a two-phase write (module documentation): checks `pieces`, then commits all
    /// their fragments to `table` as ONE Lance version (`mode`) with ONE journal entry: a head
    /// naming a row log of the fragments' references, read from the fragments themselves (a
    /// `delta` for [`PieceMode::Append`], a `snapshot` for [`PieceMode::Overwrite`]). The
    /// protocol is an append's: the write intent (naming that log), the publication guard on
    /// the oldest managed key of all pieces right before the commit, the commit through the
    /// intent's gate (Lance's timeout: what is left of the deadline), then the sidecar
    /// (create-only), the registry advance, the intent removed, and the pieces' own logs
    /// deleted. A commit that fails after a manifest write that may land is resolved before the
    /// call returns, as an append's.
    ///
    /// Returns the version, the rows committed (sum of the pieces') and the references added
    /// (sum of counts); `references_removed` is 0 (an overwrite's removals are implied by its
    /// snapshot).
    ///
    /// # Errors
    /// Nothing committed: [`LanceEngineError::PieceRefused`] (no piece, a piece of another
    /// format, lake, table or schema, read after the table's current version, given twice,
    /// sharing a data file, committed already (a data file of it is in the latest version),
    /// with a deletion file, or whose rows, references or oldest key
    /// differ from its fragments'); [`LanceEngineError::Unreadable`] for a reference a new row
    /// may not hold; [`LanceEngineError::NoSuchTable`], [`LanceEngineError::UnreadableTable`],
    /// [`LanceEngineError::Guard`], [`LanceEngineError::NotCommitted`]. Unknown:
    /// [`LanceEngineError::CommitUncertain`] (the intent keeps the objects; `lake refs
    /// recover`). Committed: sidecar and registry errors naming the version. A commit that
    /// landed although Lance reported a failure is journaled and returned as success.
    pub async fn commit_pieces(
        &self,
        table: &str,
        pieces: Vec<PreparedPiece>,
        mode: PieceMode,
    ) -> Result<CommitOutcome, LanceEngineError> {
        validate_table_name(table)?;
        let refuse =
            |piece: usize, reason: String| LanceEngineError::PieceRefused { table: table.into(), piece, reason };
        if pieces.is_empty() {
            return Err(refuse(0, "no piece was given".into()));
        }
        self.check_metadata(table, &pieces)?;
        let ds = self.open(table).await?;
        let columns = writable_columns(&ds, table)?.for_new_references();
        let read_version = ds.version().version;
        let schema = schema_fingerprint(&ds);
        for (i, piece) in pieces.iter().enumerate() {
            if piece.schema != schema {
                return Err(refuse(i, format!("it was written for another schema of the table (fingerprint {}, the table's at version {read_version} is {schema})", piece.schema)));
            }
            if piece.read_version > read_version {
                return Err(refuse(
                    i,
                    format!("it read version {}, after the table's latest ({read_version})", piece.read_version),
                ));
            }
        }
        if let Some((piece, data_file, version)) = committed_since(table, &ds, &pieces).await? {
            return Err(LanceEngineError::PieceCommitted { table: table.into(), piece, data_file, version });
        }
        // The journal entry, read from the fragments (module documentation), checked piece by
        // piece against what the piece says.
        let (log_ref, oldest) = self.read_pieces(table, &ds, &columns, &pieces).await?;
        let rows: u64 = pieces.iter().fold(0u64, |sum, p| sum.saturating_add(p.rows));
        let fragments: Vec<Fragment> = pieces.iter().flat_map(|p| p.fragments.iter().cloned()).collect();
        let (operation, intent_op, kind, action) = match mode {
            PieceMode::Append => (Operation::Append { fragments }, IntentOperation::Append, DeltaKind::Delta, "append"),
            PieceMode::Overwrite => (
                Operation::Overwrite {
                    fragments,
                    schema: ds.schema().clone(),
                    config_upsert_values: None,
                    initial_bases: None,
                },
                IntentOperation::Overwrite,
                DeltaKind::Snapshot,
                "overwrite",
            ),
        };
        let transaction = Transaction::new(read_version, operation, None);
        let totals = LogTotals {
            references: log_ref.references,
            bytes: log_ref.bytes,
            sha256: log_ref.sha256.clone(),
            index: log_ref.index.clone(),
        };
        // The intent names the log read from the pieces' fragments, the version's journal. The
        // pieces' rows were read under the schema the commit started from: an append Lance
        // rebased onto another schema is journaled from the manifests.
        let named = Named::Log { write_id: log_ref.write_id.clone(), totals, oldest };
        let journal = Journal::Log { log: log_ref.clone(), kind, read_version };
        let change =
            Change::staged(table, action, transaction, None, journal).adding(Adds::of(intent_op, read_version, named));
        let committed = self.commit(change).await?;
        // The pieces' own logs are not deleted here: a piece names its log by a write id the
        // coordinator cannot trust (one naming another write's log would delete a journaled
        // version's entry). No entry or intent names them: GC collects them as its own garbage
        // past its cutoff (`journal_garbage`).
        tracing::debug!(
            table,
            version = committed.version,
            rows,
            pieces = pieces.len(),
            references = log_ref.references,
            "two-phase {action} committed and journaled"
        );
        Ok(committed.outcome(table, rows))
    }

    /// The checks of `pieces` that read nothing (module documentation).
    fn check_metadata(&self, table: &str, pieces: &[PreparedPiece]) -> Result<(), LanceEngineError> {
        let refuse =
            |piece: usize, reason: String| LanceEngineError::PieceRefused { table: table.into(), piece, reason };
        let root = self.store().root().to_string();
        let mut logs = BTreeSet::new();
        let mut files = BTreeSet::new();
        for (i, piece) in pieces.iter().enumerate() {
            if piece.format_version != PIECE_FORMAT_VERSION {
                return Err(refuse(
                    i,
                    format!("format {} is not this build's ({PIECE_FORMAT_VERSION})", piece.format_version),
                ));
            }
            if piece.lake != root {
                return Err(refuse(i, format!("it was written for the lake at {}, not this one ({root})", piece.lake)));
            }
            if piece.table != table {
                return Err(refuse(i, format!("it was written for table `{}`", piece.table)));
            }
            if !logs.insert(piece.log.write_id.as_str()) {
                return Err(refuse(i, format!("write {} is given twice", piece.log.write_id)));
            }
            let mut physical = 0u64;
            for fragment in &piece.fragments {
                let Some(rows) = fragment.physical_rows else {
                    return Err(refuse(i, "a fragment has no row count".into()));
                };
                if fragment.deletion_file.is_some() || !fragment.overlays.is_empty() {
                    return Err(refuse(i, "a fragment has a deletion file or overlays: not a fresh write".into()));
                }
                physical = physical.saturating_add(rows as u64);
                for file in &fragment.files {
                    if !files.insert(file.path.clone()) {
                        return Err(refuse(i, format!("data file {} is in two fragments", file.path)));
                    }
                }
            }
            if physical != piece.rows {
                return Err(refuse(i, format!("its fragments hold {physical} rows, the piece says {}", piece.rows)));
            }
        }
        Ok(())
    }

    /// Reads the reference columns of every piece's fragments into one row log (the version's
    /// journal), checking each piece's rows, references and oldest key against what was read.
    /// Returns the finished log and the oldest managed key of all pieces.
    ///
    /// Every fragment is checked first ([`LanceEngine::check_fragments`]). Then one task scans
    /// the fragments, piece after piece in order, [`READ_AHEAD_BATCHES`] batches ahead of the
    /// writer: Lance decodes the next batches while the log encodes, hashes and uploads the
    /// last. The log is the same as one read in turn (same batches, same order).
    ///
    /// # Errors
    /// [`LanceEngineError::PieceRefused`], [`LanceEngineError::Unreadable`] for a reference a
    /// new row may not hold, Lance and log errors; the log is abandoned on any error.
    async fn read_pieces(
        &self,
        table: &str,
        ds: &Dataset,
        columns: &ReferenceColumns,
        pieces: &[PreparedPiece],
    ) -> Result<(LogRef, Option<ObjectIdentity>), LanceEngineError> {
        let shared = Arc::new(ds.clone());
        self.check_fragments(table, &shared, pieces).await?;
        let next = ds.version().version.saturating_add(1);
        let mut writer = RowLogWriter::start(self.store(), table, next, columns).await?;
        let mut reads: Vec<Read> = pieces.iter().map(|_| Read::default()).collect();
        if columns.is_empty() {
            // No reference column: the rows are the fragments' (checked above).
            for (read, piece) in reads.iter_mut().zip(pieces) {
                read.rows = piece.fragments.iter().filter_map(|f| f.physical_rows).map(|n| n as u64).sum();
            }
        } else if let Err(e) = self.scan_pieces(table, shared, columns, pieces, &mut writer, &mut reads).await {
            writer.abort().await;
            return Err(e);
        }
        let mut oldest = OldestKey::default();
        for (i, (piece, read)) in pieces.iter().zip(&reads).enumerate() {
            let differs = if read.rows != piece.rows {
                Some(format!("its fragments hold {} rows, the piece says {}", read.rows, piece.rows))
            } else if columns.is_empty() && (piece.references != 0 || piece.oldest.is_some()) {
                Some(format!("it names {} references, the table has no reference column", piece.references))
            } else if read.references != piece.references {
                Some(format!("its fragments hold {} references, the piece says {}", read.references, piece.references))
            } else if read.oldest.identity != piece.oldest {
                Some("its fragments' oldest managed key is not the one the piece names".to_string())
            } else {
                None
            };
            if let Some(reason) = differs {
                writer.abort().await;
                return Err(LanceEngineError::PieceRefused { table: table.into(), piece: i, reason });
            }
            if let Some(id) = &read.oldest.identity {
                oldest.offer(&id.uri, &id.sha256, id.size);
            }
        }
        let log = writer.finish().await?;
        Ok((log, oldest.identity))
    }

    /// Checks every fragment of every piece as Lance checks a fragment (every data file
    /// opened: it exists and holds `physical_rows` rows; no field twice), and that every leaf
    /// field of the schema comes from one of its files: a fragment whose files are missing, of
    /// another table or lake, split or with an edited row count would otherwise commit a
    /// version that cannot be scanned (or hides rows, and their references). Up to
    /// [`CHECKS_IN_FLIGHT`] fragments at once; the first failure in piece order is returned.
    ///
    /// # Errors
    /// [`LanceEngineError::PieceRefused`]; [`LanceEngineError::Lance`] when the store is
    /// unavailable (a retry may help).
    async fn check_fragments(
        &self,
        table: &str,
        ds: &Arc<Dataset>,
        pieces: &[PreparedPiece],
    ) -> Result<(), LanceEngineError> {
        use futures::StreamExt;
        // Leaf fields: a data file lists the fields whose values it holds (a struct's children,
        // not the struct itself).
        let leaves: Arc<BTreeSet<i32>> =
            Arc::new(ds.schema().fields_pre_order().filter(|f| f.children.is_empty()).map(|f| f.id).collect());
        let mut checks = Vec::new();
        for (index, piece) in pieces.iter().enumerate() {
            for fragment in &piece.fragments {
                checks.push(check_fragment(table.to_string(), ds.clone(), leaves.clone(), index, fragment.clone()));
            }
        }
        let mut checked = futures::stream::iter(checks).buffered(CHECKS_IN_FLIGHT);
        while let Some(result) = checked.next().await {
            result?;
        }
        Ok(())
    }

    /// Streams the reference columns of every piece's fragments into `writer`, counting each
    /// piece's rows, references and oldest managed key into `reads` (module documentation).
    async fn scan_pieces(
        &self,
        table: &str,
        ds: Arc<Dataset>,
        columns: &ReferenceColumns,
        pieces: &[PreparedPiece],
        writer: &mut RowLogWriter,
        reads: &mut [Read],
    ) -> Result<(), LanceEngineError> {
        let (sender, mut receiver) = tokio::sync::mpsc::channel(READ_AHEAD_BATCHES);
        let fragments: Vec<Vec<Fragment>> = pieces.iter().map(|p| p.fragments.clone()).collect();
        let scan = tokio::spawn(scan_fragments(ds, columns.names(), fragments, sender));
        while let Some((index, scanned)) = receiver.recv().await {
            let batch = match scanned {
                Ok(batch) => batch,
                Err(ScanFailure::Read(source)) => return Err(refuse_unreadable(table, index, source)),
                Err(ScanFailure::Project(source)) => {
                    return Err(LanceEngineError::Lance { table: table.into(), action: "read a prepared piece", source })
                }
            };
            let read = reads.get_mut(index).ok_or_else(|| {
                LanceEngineError::InvalidInput(format!("table `{table}`: a scan returned piece {index} of {}", pieces.len()))
            })?;
            let (rows, references) = writer.push_batch_finding_oldest(&batch, &mut read.oldest).await?;
            read.rows += rows;
            read.references += references;
        }
        // The sender is dropped: the scan ended (or stopped at its first failure, sent above).
        // A panic in the scan is the panic of this call, as when the scan ran inline; the task is
        // never cancelled.
        match scan.await {
            Ok(()) => Ok(()),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => Err(LanceEngineError::JournalLog {
                table: table.into(),
                message: format!("the scan of the pieces' fragments stopped before its end ({e}); nothing was committed"),
            }),
        }
    }
}

/// Batches of the pieces' fragments the scan of a commit reads ahead of its log writer: with a
/// batch of 8,192 references of about 100 bytes, under 8 MiB.
const READ_AHEAD_BATCHES: usize = 8;

/// Fragments of the pieces of a commit checked at once (each opens its data files).
const CHECKS_IN_FLIGHT: usize = 8;

/// Why the scan of a piece's fragments stopped.
enum ScanFailure {
    /// The scan could not be planned (Lance refused the projection).
    Project(lance::Error),
    /// A fragment could not be read.
    Read(lance::Error),
}

/// The checks of one fragment of piece `index` ([`LanceEngine::check_fragments`]): every leaf
/// field of the schema (`leaves`) in one of its data files, and Lance's own `validate`.
async fn check_fragment(
    table: String,
    ds: Arc<Dataset>,
    leaves: Arc<BTreeSet<i32>>,
    index: usize,
    fragment: Fragment,
) -> Result<(), LanceEngineError> {
    let covered: BTreeSet<i32> = fragment.files.iter().flat_map(|f| f.fields.iter().copied()).collect();
    if let Some(missing) = leaves.iter().find(|id| !covered.contains(id)) {
        return Err(LanceEngineError::PieceRefused {
            table,
            piece: index,
            reason: format!("a fragment has no data file holding field {missing} (a leaf of the table's schema)"),
        });
    }
    FileFragment::new(ds, fragment).validate().await.map_err(|source| refuse_unreadable(&table, index, source))
}

/// Scans the `projection` of every piece's `fragments` (piece after piece, fragment after
/// fragment, one scan per fragment: uncommitted fragments may share an id, Lance assigns ids at
/// commit) and sends each batch with its piece's index; stops at the first failure, sent, or
/// when the receiver is gone.
async fn scan_fragments(
    ds: Arc<Dataset>,
    projection: Vec<String>,
    fragments: Vec<Vec<Fragment>>,
    sender: tokio::sync::mpsc::Sender<(usize, Result<arrow_array::RecordBatch, ScanFailure>)>,
) {
    for (index, piece) in fragments.into_iter().enumerate() {
        for fragment in piece {
            let scanned = async {
                let mut scanner = ds.scan();
                scanner.io_buffer_size(SCAN_IO_BUFFER_BYTES);
                scanner.with_fragments(vec![fragment]);
                scanner.project(&projection).map_err(ScanFailure::Project)?;
                let mut stream = scanner.try_into_stream().await.map_err(ScanFailure::Read)?;
                while let Some(batch) = stream.try_next().await.map_err(ScanFailure::Read)? {
                    if sender.send((index, Ok(batch))).await.is_err() {
                        return Ok(false); // The receiver is gone: it stopped reading.
                    }
                }
                Ok(true)
            };
            match scanned.await {
                Ok(true) => {}
                Ok(false) => return,
                Err(failure) => {
                    let _ = sender.send((index, Err(failure))).await;
                    return;
                }
            }
        }
    }
}

/// The error of a piece whose fragments Lance cannot read as the table's: the piece is refused,
/// except when the store is unavailable, which stays a Lance error of its own kind (a retry may
/// help).
fn refuse_unreadable(table: &str, piece: usize, source: lance::Error) -> LanceEngineError {
    match crate::error::lance_kind(&source) {
        ErrorKind::Unavailable | ErrorKind::Conflict | ErrorKind::CommitUncertain => {
            LanceEngineError::Lance { table: table.into(), action: "read a prepared piece", source }
        }
        _ => LanceEngineError::PieceRefused {
            table: table.into(),
            piece,
            reason: format!(
                "its fragments cannot be read as the table's ({source}): a data file is missing, of another \
                 table or lake, or edited"
            ),
        },
    }
}
