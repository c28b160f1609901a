//! Write intents around the commits that add references (`docs/safety.md`, "Commits that land
//! late").
//!
//! Every engine operation that can add references (append, overwrite, create, upsert, update,
//! add_columns, restore, create_branch) follows one protocol:
//!
//! 1. Anchor the deadline (`Instant::now()`), then write the intent create-only
//!    ([`lake_store::intents`]): the references the commit may add (the streamed write's
//!    reference log, inline identities, or a log written for the intent), the read version, the
//!    transaction's UUID when known, the deadline's span. The anchor comes before the intent's
//!    write begins, so `last_modified(intent) + deadline_ms` (store clock) is not before the end
//!    of the span.
//! 2. The publication guard, then the commit through a [`CommitGate`]: the gate refuses to
//!    publish a manifest once the span has passed, and records the transaction's UUID (an
//!    attempt marker) before the first manifest write of an operation whose intent could not
//!    name it. Two-phase commits also get Lance's own timeout of the remaining span (so the
//!    caller does not wait longer).
//! 3. Success: the journal entry is written, the registry advanced, then the intent removed.
//!    A failure when no manifest write was issued, or each one issued was refused by the store
//!    as a create-only conflict (its slot belongs to another commit): nothing can land; the
//!    intent (and a log of a write that never committed) is removed. Any other failure: the
//!    outcome is unknown
//!    (a timeout stops the waiting, not the write); the writer resolves the intent
//!    (`crate::resolve`, fencing once the deadline has passed) and reports what it found:
//!    committed (the entry is written and the call succeeds), not committed, or pending
//!    ([`LanceEngineError::CommitUncertain`], the intent stays and keeps the objects).

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use crate::journaling::{discard_log, JournalLog};
use lake_common::intent::{IntentLog, IntentOperation, IntentReferences, WriteIntent, INLINE_INTENT_LIMIT};
use lake_common::{ObjectIdentity, ReferenceLogEncoder};
use lake_store::guard::PublicationGuard;
use lake_store::intents;
use lake_store::layout::reference_log_key;
use lake_store::store::LakeStore;
use lance_table::format::{Manifest, Transaction};
use lance_table::io::commit::CommitError;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Shortest deadline a write gets by default (the guard's margin is used when longer): room for
/// a commit on a loaded machine.
pub const MIN_COMMIT_DEADLINE: Duration = Duration::from_secs(30);
/// Longest deadline a two-phase commit gets by default: a pending intent can be resolved this
/// long (plus a slack) after it was written.
pub const MAX_COMMIT_DEADLINE: Duration = Duration::from_secs(300);
/// Deadline of an operation that writes its data inside Lance's own call (update, add_columns,
/// create_branch): the span covers its data phase too. Lance's own default timeout of
/// a commit call (`lance::dataset::write::commit::DEFAULT_COMMIT_TIMEOUT`).
pub const IN_LANCE_COMMIT_DEADLINE: Duration = Duration::from_secs(1800);

/// The default deadline of a two-phase commit under `guard`: its margin, at least
/// [`MIN_COMMIT_DEADLINE`] and at most [`MAX_COMMIT_DEADLINE`]. Safety does not depend on it
/// (an intent protects its references however long the commit takes); it bounds how long a
/// writer waits for its commit and how soon a pending intent can be resolved.
pub fn default_commit_deadline(guard: &PublicationGuard) -> Duration {
    guard.margin().clamp(MIN_COMMIT_DEADLINE, MAX_COMMIT_DEADLINE)
}

/// The last step before Lance publishes a manifest of a write with an intent: refuses once the
/// write's deadline has passed, records the transaction's UUID when the intent could not name
/// it, and counts the manifest writes it let through.
#[derive(Debug)]
pub(crate) struct CommitGate {
    anchor: Instant,
    deadline: Duration,
    /// Where to record attempt markers (operations committing inside Lance).
    markers: Option<(LakeStore, String, String)>,
    issued: AtomicU64,
    /// Manifest writes the store refused as create-only conflicts (never to land).
    refused: AtomicU64,
    recorded: Mutex<BTreeSet<String>>,
}

impl CommitGate {
    /// Whether a manifest write was issued whose outcome is not known to be a refusal: it may
    /// have landed, or land later (false: nothing of this write can land).
    pub(crate) fn uncertain(&self) -> bool {
        self.issued.load(Ordering::Acquire) > self.refused.load(Ordering::Acquire)
    }

    /// Records that the store refused one manifest write (a create-only conflict).
    pub(crate) fn refused(&self) {
        self.refused.fetch_add(1, Ordering::AcqRel);
    }

    /// Time left before the deadline (zero once it passed).
    pub(crate) fn remaining(&self) -> Duration {
        self.deadline.saturating_sub(self.anchor.elapsed())
    }

    fn refuse_if_late(&self) -> Result<(), CommitError> {
        if self.anchor.elapsed() >= self.deadline {
            return Err(CommitError::OtherError(lance::Error::timeout(format!(
                "the write's commit deadline of {:?} has passed; lake publishes no manifest after it",
                self.deadline
            ))));
        }
        Ok(())
    }

    /// See [`CommitGate`]. The UUID comes from the inline transaction, else from the
    /// transaction file's name (`<read_version>-<uuid>.txn`).
    pub(crate) async fn before_publish(
        &self,
        manifest: &Manifest,
        transaction: Option<&Transaction>,
    ) -> Result<(), CommitError> {
        self.refuse_if_late()?;
        if let Some((store, table, write_id)) = &self.markers {
            let uuid = transaction.map(|t| t.inner.uuid.clone()).or_else(|| {
                let file = manifest.transaction_file.as_deref()?;
                let stem = file.strip_suffix(".txn")?;
                stem.split_once('-').map(|(_, uuid)| uuid.to_string())
            });
            let Some(uuid) = uuid.filter(|u| lake_common::intent::is_uuid(u)) else {
                return Err(CommitError::OtherError(lance::Error::invalid_input(
                    "the commit carries no transaction UUID to record in its write intent",
                )));
            };
            let known = self.recorded.lock().map(|r| r.contains(&uuid)).unwrap_or(false);
            if !known {
                intents::record_attempt(store, table, write_id, &uuid)
                    .await
                    .map_err(|e| CommitError::OtherError(lance::Error::io_source(Box::new(e))))?;
                if let Ok(mut recorded) = self.recorded.lock() {
                    recorded.insert(uuid);
                }
                // The marker's write took time: the deadline is checked again.
                self.refuse_if_late()?;
            }
        }
        self.issued.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

/// How a commit with an intent ended, when it did not fail.
pub(crate) enum Committed<T> {
    /// The commit call succeeded: its result (the caller journals the version).
    Now(T),
    /// The call failed but the commit landed as this version, journaled by the resolver.
    Late(u64),
}

/// The references an intent names.
pub(crate) enum IntentRefs<'a> {
    /// The write's own reference log (finished, named by the write's id): a streamed write's,
    /// or an upsert's source's.
    Log(&'a JournalLog),
    /// Identities in memory: inline up to [`INLINE_INTENT_LIMIT`], else written as a log for
    /// the intent.
    Identities(Vec<ObjectIdentity>),
}

/// A write whose intent is written (step 1 of the module's protocol).
#[derive(Debug)]
pub(crate) struct IntentWrite {
    pub(crate) table: String,
    pub(crate) write_id: String,
    /// The intent's key.
    pub(crate) key: String,
    pub(crate) gate: Arc<CommitGate>,
    /// The version the write read.
    pub(crate) read_version: u64,
    /// The operation (the commit's marker names it: `crate::marker`).
    pub(crate) operation: IntentOperation,
    /// The transaction's UUID, when the intent names it.
    transaction_uuid: Option<String>,
    /// A reference log written for the intent (not a streamed write's own log).
    own_log: bool,
}

impl IntentWrite {
    /// The write's journal entry names the log written for the intent (an upsert journaled from
    /// its own row log): ending the intent keeps the log.
    pub(crate) fn keep_log(&mut self) {
        self.own_log = false;
    }

    /// Marks `transaction` as this write's commit for the lake at `root` (`crate::marker`).
    pub(crate) fn mark(&self, root: &str, transaction: &mut lance::dataset::transaction::Transaction) {
        crate::marker::CommitMarker::new(root, self.operation.as_str(), &self.write_id).set_on(transaction);
    }

    /// Every transaction UUID the write may have published: the intent's, and those its gate
    /// recorded.
    pub(crate) fn transaction_uuids(&self) -> Vec<String> {
        let mut uuids: Vec<String> = self.gate.recorded.lock().map(|r| r.iter().cloned().collect()).unwrap_or_default();
        uuids.extend(self.transaction_uuid.clone());
        uuids.sort();
        uuids.dedup();
        uuids
    }
}

/// What the intent needs to say about a write besides its references.
pub(crate) struct IntentFacts {
    pub(crate) operation: IntentOperation,
    /// The write id: a streamed write's log id, else a new ULID.
    pub(crate) write_id: String,
    pub(crate) transaction_uuid: Option<String>,
    pub(crate) read_version: u64,
    pub(crate) restored_version: Option<u64>,
}

impl IntentFacts {
    /// Facts of a write that mints its own write id.
    pub(crate) fn new(operation: IntentOperation, read_version: u64) -> Self {
        Self {
            operation,
            write_id: ulid::Ulid::new().to_string(),
            transaction_uuid: None,
            read_version,
            restored_version: None,
        }
    }
}

impl LanceEngine {
    /// The deadline of a write of `operation` under `guard` (the engine's override, if set).
    fn deadline_for(&self, operation: IntentOperation, guard: &PublicationGuard) -> Duration {
        if let Some(d) = self.commit_deadline_override() {
            return d;
        }
        match operation {
            // A restore writes no data (a manifest of an older version's fragments), and the
            // staleness of its tag is bounded by this deadline (`crate::history`).
            IntentOperation::Append
            | IntentOperation::Overwrite
            | IntentOperation::Create
            | IntentOperation::Upsert
            | IntentOperation::Restore => default_commit_deadline(guard),
            IntentOperation::Update | IntentOperation::AddColumns | IntentOperation::CreateBranch => {
                IN_LANCE_COMMIT_DEADLINE
            }
        }
    }

    /// Step 1: anchors the deadline and writes the intent of a write to `table`.
    ///
    /// # Errors
    /// Storage errors (nothing was committed; a log written here is removed again).
    pub(crate) async fn begin_intent(
        &self,
        table: &str,
        facts: IntentFacts,
        references: IntentRefs<'_>,
        guard: &PublicationGuard,
    ) -> Result<IntentWrite, LanceEngineError> {
        let anchor = Instant::now();
        let deadline = self.deadline_for(facts.operation, guard);
        let (references, own_log) = match references {
            // A streamed write's journal entry names its log; an upsert's log serves the
            // intent only.
            IntentRefs::Log(log) => (
                IntentReferences::Log(IntentLog {
                    references: log.totals.references,
                    bytes: log.totals.bytes,
                    sha256: log.totals.sha256.clone(),
                }),
                !facts.operation.is_streamed(),
            ),
            IntentRefs::Identities(mut ids) => {
                ids.sort();
                ids.dedup();
                if ids.len() <= INLINE_INTENT_LIMIT {
                    (IntentReferences::Inline(ids), false)
                } else {
                    (IntentReferences::Log(self.write_intent_log(table, &facts.write_id, &ids).await?), true)
                }
            }
        };
        let intent = WriteIntent {
            format_version: lake_common::intent::INTENT_FORMAT_VERSION,
            table: table.to_string(),
            write_id: facts.write_id.clone(),
            operation: facts.operation,
            transaction_uuid: facts.transaction_uuid.clone(),
            read_version: facts.read_version,
            deadline_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
            restored_version: facts.restored_version,
            references,
        };
        let key = match intents::write(self.store(), &intent).await {
            Ok(key) => key,
            Err(e) => {
                if own_log {
                    discard_log(self.store(), &reference_log_key(table, &facts.write_id)).await;
                }
                return Err(e.into());
            }
        };
        let markers =
            facts.transaction_uuid.is_none().then(|| (self.store().clone(), table.to_string(), facts.write_id.clone()));
        let gate = Arc::new(CommitGate {
            anchor,
            deadline,
            markers,
            issued: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            recorded: Mutex::new(BTreeSet::new()),
        });
        Ok(IntentWrite {
            table: table.to_string(),
            write_id: facts.write_id,
            key,
            gate,
            read_version: facts.read_version,
            operation: facts.operation,
            transaction_uuid: facts.transaction_uuid,
            own_log,
        })
    }

    /// Steps 1 and 2's guard for a write whose new references are `ids` (in memory): resolves
    /// the table's intents past their deadline, writes the intent, then checks the guard on
    /// `ids` (a refusal removes the intent again: nothing was committed).
    ///
    /// # Errors
    /// [`LanceEngineError::Guard`]; as [`LanceEngine::begin_intent`].
    pub(crate) async fn begin_guarded(
        &self,
        table: &str,
        facts: IntentFacts,
        ids: Vec<ObjectIdentity>,
        guard: &PublicationGuard,
    ) -> Result<IntentWrite, LanceEngineError> {
        self.resolve_before_commit(table).await;
        let intent = self.begin_intent(table, facts, IntentRefs::Identities(ids.clone()), guard).await?;
        if let Err(source) = guard.check(ids.iter(), self.writer_now()) {
            self.drop_intent(&intent, false).await;
            return Err(LanceEngineError::Guard { table: table.into(), source });
        }
        Ok(intent)
    }

    /// Writes `ids` (sorted) as a reference log of write `write_id`, for an intent.
    async fn write_intent_log(
        &self,
        table: &str,
        write_id: &str,
        ids: &[ObjectIdentity],
    ) -> Result<IntentLog, LanceEngineError> {
        let log_error = |e: &dyn std::fmt::Display| LanceEngineError::JournalLog {
            table: table.into(),
            message: format!("the write intent's reference log: {e}"),
        };
        let mut encoder = ReferenceLogEncoder::new(table, write_id).map_err(|e| log_error(&e))?;
        let mut bytes = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            encoder.push(id);
            if (i + 1) % 8192 == 0 {
                encoder.flush_batch().map_err(|e| log_error(&e))?;
                bytes.extend(encoder.take_bytes());
            }
        }
        let (rest, totals) = encoder.finish().map_err(|e| log_error(&e))?;
        bytes.extend(rest);
        self.store().put(&reference_log_key(table, write_id), bytes).await?;
        Ok(IntentLog { references: totals.references, bytes: totals.bytes, sha256: totals.sha256 })
    }

    /// Step 3 on success, once the version's journal entry is written: removes the intent (and
    /// a log written for it, which no journal entry names). A failure is logged: the intent
    /// then stays until a resolver finds the version journaled.
    pub(crate) async fn end_intent(&self, write: &IntentWrite) {
        if let Err(e) = self.remove_intent(write).await {
            tracing::warn!(intent = %write.key, "could not remove the write intent of a journaled version: {e}");
            return;
        }
        if write.own_log {
            discard_log(self.store(), &reference_log_key(&write.table, &write.write_id)).await;
        }
    }

    /// Removes `write`'s intent and the attempt markers its gate wrote (no listing).
    async fn remove_intent(&self, write: &IntentWrite) -> Result<(), lake_store::StoreError> {
        let markers: Vec<String> = match &write.gate.markers {
            Some(_) => write
                .transaction_uuids()
                .iter()
                .map(|uuid| intents::attempt_key(&write.table, &write.write_id, uuid))
                .collect(),
            None => Vec::new(),
        };
        intents::remove_known(self.store(), &write.table, &write.write_id, &markers).await
    }

    /// Step 3 when the commit failed with no manifest write that may land ([`CommitGate::uncertain`]
    /// is false): nothing of the write can land. Removes the intent, then the write's reference log (a streamed write's own when
    /// `discard_streamed_log`).
    pub(crate) async fn drop_intent(&self, write: &IntentWrite, discard_streamed_log: bool) {
        if let Err(e) = self.remove_intent(write).await {
            // The intent stays and keeps the objects until a resolver removes it (its deadline
            // passes with no version carrying its transaction).
            tracing::warn!(intent = %write.key, "could not remove the write intent of a write that was not committed: {e}");
            return;
        }
        if write.own_log || discard_streamed_log {
            discard_log(self.store(), &reference_log_key(&write.table, &write.write_id)).await;
        }
    }

    /// Step 3 for every outcome of a commit: success as it is; a failure with no manifest write
    /// that may land drops the intent (and, with `discard_streamed_log`, the write's own log)
    /// and returns the failure; any other failure is settled ([`LanceEngine::settle_intent`]):
    /// the version it landed as, or the error that says the truth.
    ///
    /// # Errors
    /// The commit's failure, [`LanceEngineError::NotCommitted`], or
    /// [`LanceEngineError::CommitUncertain`].
    pub(crate) async fn after_commit<T>(
        &self,
        write: &IntentWrite,
        committed: Result<T, LanceEngineError>,
        discard_streamed_log: bool,
    ) -> Result<Committed<T>, LanceEngineError> {
        match committed {
            Ok(value) => Ok(Committed::Now(value)),
            Err(e) if !write.gate.uncertain() => {
                self.drop_intent(write, discard_streamed_log).await;
                Err(e)
            }
            Err(e) => self.settle_intent(write, e).await.map(Committed::Late),
        }
    }

    /// Step 3 after a commit failed once a manifest write that may land was issued: the outcome is unknown
    /// until the intent is resolved. Resolves it (fencing after the deadline) and returns the
    /// version it landed as, or the error that says the truth: `failure` with "not committed"
    /// when it was proven not to land, [`LanceEngineError::CommitUncertain`] when it is still
    /// pending.
    pub(crate) async fn settle_intent(
        &self,
        write: &IntentWrite,
        failure: LanceEngineError,
    ) -> Result<u64, LanceEngineError> {
        use crate::resolve::{Fence, Resolution};
        let resolved = self.resolve_write(write, Fence::Wait).await;
        match resolved {
            Ok(Resolution::Committed { version }) => {
                tracing::warn!(table = %write.table, version, "the commit reported as failed ({failure}) landed; journaled");
                Ok(version)
            }
            Ok(Resolution::Abandoned { proof }) => {
                Err(LanceEngineError::NotCommitted { table: write.table.clone(), proof, source: Box::new(failure) })
            }
            Ok(Resolution::Pending { reason }) => Err(self.uncertain(write, reason, failure)),
            Err(e) => Err(self.uncertain(write, format!("resolving it failed: {e}"), failure)),
        }
    }

    fn uncertain(&self, write: &IntentWrite, reason: String, failure: LanceEngineError) -> LanceEngineError {
        LanceEngineError::CommitUncertain {
            table: write.table.clone(),
            intent: write.key.clone(),
            root: self.store().display_root(),
            reason,
            source: Box::new(failure),
        }
    }
}
