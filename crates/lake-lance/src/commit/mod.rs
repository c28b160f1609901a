//! The write protocol, written once (docs/protocol.md states it and why it is safe).
//!
//! Every version-producing operation of the engine (append, overwrite, create, two-phase
//! commits, upsert, update, delete, columns added, renamed and dropped, index create and drop,
//! branch create, restore, compaction, config, a resolver's fence) describes itself as a
//! [`Change`] and goes through [`LanceEngine::commit`], which owns every step:
//!
//! 1. **Resolution** of what earlier writes left (`resolve`, `recover`): versions after the
//!    registry pin without a journal entry are journaled from their manifests; intents of the
//!    lineage past their deadline (store clock) are revoked, and this change's commit is their
//!    fence.
//! 2. **Capability**: the store refuses create-only writes over existing keys (probed once per
//!    store and process, `LakeStore::require_create_only`).
//! 3. **Lance's commit** through the one [`gate::CheckedCommitHandler`]: a staged transaction
//!    marked here (`marker`) and committed by the one `CommitBuilder` below, or Lance's own call
//!    on a dataset opened with that handler. Before each manifest write the gate writes the
//!    intent (once), checks the publication guard and asks the store whether the intent is
//!    revoked or gone (`gate`).
//! 4. **The outcome**: committed → the journal entry bound to the version, the registry, the end
//!    of the intent (`publish`, `intent`), the fences of step 1; refused with no manifest write
//!    that may land → the intent and the staged files go; any other failure → the writer
//!    resolves its own intent (revoke, fence, conclude: `resolve`) and reports the truth.
//!
//! Operation files build a [`Change`] and read the [`Committed`] back; they hold no protocol
//! code. `CommitBuilder` is built only here, the marker set only here.

pub(crate) mod change;
pub(crate) mod gate;
pub(crate) mod intent;
pub mod marker;
mod publish;
pub mod recover;
pub mod resolve;

pub use intent::{default_commit_deadline, MAX_COMMIT_DEADLINE, MIN_COMMIT_DEADLINE};
pub use recover::{RecoveredVersion, VersionRecovery};
pub use resolve::{Progress, RecoverOptions, RecoveryReport, Resolution, ResolvedIntent, Wait};

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use change::{Change, Committed, Made, Make};
use gate::Gate;
use intent::IntentSpec;
use lake_store::descriptor::LakeDescriptor;
use lake_store::failpoint;
use lake_store::guard::PublicationGuard;
use lake_store::layout::reference_log_key;
use lance::dataset::CommitBuilder;
use std::sync::Arc;
use std::time::Duration;

impl LanceEngine {
    /// Commits `change` (module documentation) and journals its version.
    ///
    /// # Errors
    /// Before any manifest write that may land (nothing committed; the intent and the staged
    /// files are gone): [`LanceEngineError::Guard`], [`LanceEngineError::Revoked`],
    /// [`LanceEngineError::ConcurrentCreate`], the store's capability refusal, Lance's errors.
    /// After one: [`LanceEngineError::NotCommitted`] (proven not to land) or
    /// [`LanceEngineError::CommitUncertain`] (the intent keeps the objects). Committed: entry and
    /// registry errors naming the version. A commit that landed although Lance reported a
    /// failure is journaled and returned.
    pub(crate) fn commit(&self, change: Change) -> futures::future::BoxFuture<'_, Result<Committed, LanceEngineError>> {
        // Boxed: a writer's own resolution commits a fence through this protocol again.
        Box::pin(self.commit_change(change))
    }

    async fn commit_change(&self, change: Change) -> Result<Committed, LanceEngineError> {
        let Change { table, operation, make, adds, journal, staged, resolve_first, registers, precondition } = change;
        // The write id: a log's (the intent names the log under it), else a new one. A change
        // with an intent may leave a reference log under it (its own, or one written for the
        // intent): kept only when the version's entry names it.
        let write_id = adds
            .as_ref()
            .and_then(|a| a.named.write_id().map(str::to_string))
            .unwrap_or_else(|| ulid::Ulid::new().to_string());
        let log_key = adds.is_some().then(|| reference_log_key(&table, &write_id));
        let discard = |staged: change::Staged| async {
            if let Some(key) = &log_key {
                crate::journaling::discard_log(self.store(), key).await;
            }
            staged.discard(self.store(), &table).await;
        };
        let creating = matches!(make, Make::Transaction { creating: true, .. });
        let checked =
            self.check_and_gate(&table, &write_id, adds, resolve_first, registers, creating, precondition).await;
        let Checked { guard, revoked, deadline, expected, has_intent, gate } = match checked {
            Ok(checked) => checked,
            Err(e) => {
                discard(staged).await;
                return Err(e);
            }
        };
        let made = match make {
            Make::Transaction { transaction, base, creating, affected_rows } => {
                let uuid = transaction.uuid.clone();
                // The intent and the guard before Lance's commit begins (it writes its
                // transaction file first): a refusal leaves nothing of Lance's.
                let made = match gate.prepare(Some(uuid)).await {
                    Ok(()) => {
                        self.commit_staged(
                            &table,
                            operation,
                            &write_id,
                            *transaction,
                            base,
                            creating,
                            affected_rows,
                            &gate,
                            has_intent.then_some(deadline),
                        )
                        .await
                    }
                    Err(e) => Err(e),
                };
                made.map(|dataset| Made { dataset, rows: 0 })
            }
            Make::InLance { open, version, run } => match self.open_with(&open, version, &gate).await {
                Ok(ds) => run(ds).await,
                Err(e) => Err(e),
            },
        };
        let made = match made {
            Ok(made) => made,
            Err(e) => {
                let refusal = gate.take_refusal().await;
                let definite = refusal.is_some() || refused_for_certain(&e);
                let e = refusal.unwrap_or(e);
                if !gate.issued_any() || (gate.all_refused() && definite) {
                    // Nothing of this change can land: its intent, log and files go.
                    if let Some(intent) = gate.intent().await {
                        intent.end(self.store()).await;
                    }
                    discard(staged).await;
                    return Err(e);
                }
                let Some(intent) = gate.intent().await else {
                    // A change without references (a delete): its version, if it lands, is
                    // journaled from its marker by the next write or `refs recover`. Its
                    // manifest may have landed, so the failure is never transient: a blind
                    // retry could apply the change twice (a delete of other rows).
                    return Err(LanceEngineError::OutcomeUnknown { table: table.clone(), source: Box::new(e) });
                };
                let version = self.settle(&intent, &gate.uuids().await, e).await?;
                let (added, removed) = self.entry_counts(&table, version).await;
                return Ok(Committed { version, rows: 0, added, removed, rebased: false, unchanged: false });
            }
        };
        let ds = made.dataset;
        let version = ds.version().version;
        if !gate.issued_any() {
            // Lance's own call wrote no manifest: it committed nothing (a compaction with
            // nothing to compact).
            if let Some(intent) = gate.intent().await {
                intent.end(self.store()).await;
            }
            discard(staged).await;
            return Ok(Committed { version, rows: made.rows, added: 0, removed: 0, rebased: false, unchanged: true });
        }
        failpoint::step("commit.after_manifest")?;
        // The versions this change published (a compaction publishes two): what a
        // content-preserving entry may be written for. Lance may report success for a write whose
        // answer was lost (it read its own version back): the version it returned then.
        let mut ours = gate.published();
        if !ours.contains(&version) {
            ours.push(version);
        }
        // Past the manifest, a failure must say the version landed (a caller retrying the write
        // would commit its rows again), whatever failed.
        let published = match self.publish(&table, journal, &ds, registers, &ours).await {
            Ok(published) => published,
            Err(e) if e.committed_version().is_some() => return Err(e),
            Err(e) => return Err(LanceEngineError::Unpublished { table: table.clone(), version, source: Box::new(e) }),
        };
        if let Some(intent) = gate.intent().await {
            intent.end(self.store()).await;
        }
        // The write's log stays only when the entry names it.
        if let Some(key) = &log_key {
            if published.names_log.as_deref() != Some(write_id.as_str()) {
                crate::journaling::discard_log(self.store(), key).await;
            }
        }
        self.finish_revoked(&revoked, version).await;
        if let (Some(expected), Some(guard)) = (&expected, &guard) {
            let unseen: Vec<&lake_common::ObjectIdentity> =
                published.added_identities.iter().filter(|id| !expected.contains(*id)).collect();
            if let Some(reason) = unchecked_references(guard, &unseen, self.writer_now()) {
                return Err(LanceEngineError::CommittedUnchecked { table, version, reason });
            }
        }
        let rebased = crate::engine::rebased(&ds, version).await;
        Ok(Committed {
            version,
            rows: made.rows,
            added: published.added,
            removed: published.removed,
            rebased,
            unchanged: false,
        })
    }

    /// The steps before Lance's commit, each of which may refuse the change (the caller then
    /// discards what it staged): the store's capability, a branch still registered, the lake's
    /// policy for a change that may add references, resolution of what earlier writes left
    /// (when `resolve_first`), the intent's spec, and the gate (of a create when `creating`) with
    /// its guard checked.
    ///
    /// # Errors
    /// The capability refusal, [`LanceEngineError::InvalidInput`] for an unregistered branch,
    /// descriptor errors, [`LanceEngineError::Guard`].
    #[allow(clippy::too_many_arguments)]
    async fn check_and_gate(
        &self,
        table: &str,
        write_id: &str,
        mut adds: Option<change::Adds>,
        resolve_first: bool,
        registers: bool,
        creating: bool,
        precondition: Option<change::Precondition>,
    ) -> Result<Checked, LanceEngineError> {
        self.store().require_create_only().await?;
        // A write to a branch starts only while the branch is registered: the engine's deletion
        // of a registered branch spends its name, so a write that passed this check and lands
        // late cannot land in a new branch of that name (docs/protocol.md, "Branches").
        self.require_registered_branch(table, registers).await?;
        // The lake's policy, for the guard of a change that may add references.
        let guard = match &adds {
            None => None,
            Some(_) => Some(PublicationGuard::from_policy(&LakeDescriptor::load(self.store()).await?)),
        };
        let revoked = if resolve_first { self.before_commit(table).await } else { Vec::new() };
        let deadline = self
            .commit_deadline_override()
            .or_else(|| guard.as_ref().map(default_commit_deadline))
            .unwrap_or(MIN_COMMIT_DEADLINE);
        // What the version may add without a check after the commit: what the operation expects,
        // and what its intent names.
        let expected = adds.as_mut().and_then(|adds| {
            let mut ids = adds.expected.take()?;
            if let change::Named::Identities { named, .. } = &adds.named {
                ids.extend(named.iter().cloned());
            }
            Some(ids.into_iter().collect::<std::collections::BTreeSet<_>>())
        });
        let spec = adds.zip(guard).map(|(adds, guard)| IntentSpec::new(adds, guard, deadline)).transpose()?;
        let has_intent = spec.is_some();
        let gate = Arc::new(Gate::new(
            self.store().clone(),
            table,
            write_id,
            creating,
            spec,
            precondition,
            self.writer_clock(),
        ));
        // A reference the guard refuses is refused before anything of Lance's is written.
        gate.check_guard()?;
        Ok(Checked { guard, revoked, deadline, expected, has_intent, gate })
    }

    /// Lance's commit of a staged transaction: the marker, then the one `CommitBuilder` with the
    /// gate as its commit handler (and Lance's timeout of `deadline` for a write with an intent,
    /// so its caller does not wait longer).
    #[allow(clippy::too_many_arguments)]
    async fn commit_staged(
        &self,
        table: &str,
        operation: &'static str,
        write_id: &str,
        mut transaction: lance::dataset::transaction::Transaction,
        base: Option<Arc<lance::Dataset>>,
        creating: bool,
        affected_rows: Option<lance_select::RowAddrTreeMap>,
        gate: &Arc<Gate>,
        deadline: Option<Duration>,
    ) -> Result<lance::Dataset, LanceEngineError> {
        let lance_error =
            |source: lance::Error| LanceEngineError::Lance { table: table.into(), action: operation, source };
        // Lance commits a create (an `Overwrite` transaction) on top of a dataset that appeared
        // since the write began, replacing its rows: a table another writer created meanwhile
        // is refused here, and one created between this check and Lance's own by the gate
        // (version 1 only).
        if creating && self.table_exists(table).await? {
            return Err(LanceEngineError::ConcurrentCreate { table: table.into() });
        }
        marker::CommitMarker::new(&self.store().root().to_string(), operation, write_id).set_on(&mut transaction);
        let uri = self.dataset_uri(table);
        let store_params = self.store_params();
        let handler = gate.handler(&uri, &store_params).await.map_err(lance_error)?;
        let mut commit = match base {
            Some(ds) => CommitBuilder::new(ds),
            None => CommitBuilder::new(uri.as_str()),
        }
        .with_skip_auto_cleanup(true)
        .with_commit_handler(handler);
        if let Some(deadline) = deadline {
            commit = commit.with_timeout(Some(deadline.max(Duration::from_millis(1))));
        }
        if let Some(params) = store_params {
            commit = commit.with_store_params(params);
        }
        if creating {
            // One attempt: a retry would only meet the other writer's version 1 again.
            commit = commit.with_max_retries(1);
        }
        if let Some(rows) = affected_rows {
            commit = commit.with_affected_rows(rows);
        }
        commit.execute(transaction).await.map_err(|source| match source {
            lance::Error::DatasetAlreadyExists { .. }
            | lance::Error::CommitConflict { .. }
            | lance::Error::RetryableCommitConflict { .. }
            | lance::Error::TooMuchWriteContention { .. }
                if creating =>
            {
                LanceEngineError::ConcurrentCreate { table: table.into() }
            }
            source => lance_error(source),
        })
    }

    /// Opens lineage `table` (at `version`, else its latest) with every commit through `gate`:
    /// what an operation that commits inside Lance's own call runs on.
    async fn open_with(
        &self,
        table: &str,
        version: Option<u64>,
        gate: &Arc<Gate>,
    ) -> Result<lance::Dataset, LanceEngineError> {
        let lance_err = |source| LanceEngineError::Lance { table: table.into(), action: "open", source };
        if !self.table_exists(table).await? {
            return Err(LanceEngineError::NoSuchTable { table: table.into(), uri: self.dataset_uri(table) });
        }
        let handler = gate.handler(&self.dataset_uri(table), &self.store_params()).await.map_err(lance_err)?;
        let mut builder = self.dataset_builder(table).with_commit_handler(handler);
        if let Some(v) = version {
            builder = builder.with_version(v);
        }
        builder.load().await.map_err(lance_err)
    }
}

/// What [`LanceEngine::check_and_gate`] established for a change.
struct Checked {
    /// The publication guard of a change that may add references.
    guard: Option<PublicationGuard>,
    /// Intents of the lineage revoked by resolution: this change's commit is their fence.
    revoked: Vec<lake_store::intents::ListedIntent>,
    /// The commit deadline (Lance's timeout for a write with an intent).
    deadline: Duration,
    /// What the version may add without a check after the commit.
    expected: Option<std::collections::BTreeSet<lake_common::ObjectIdentity>>,
    /// Whether the change has an intent.
    has_intent: bool,
    /// The gate every manifest write of the change goes through.
    gate: Arc<Gate>,
}

impl LanceEngine {
    /// Refuses a change to branch lineage `table` (`t@b`) that is not registered, unless the
    /// change is the one that registers it (`registers`: the branch's creation). A table's
    /// lineage passes.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] naming the branch; storage errors reading the registry.
    async fn require_registered_branch(&self, table: &str, registers: bool) -> Result<(), LanceEngineError> {
        if registers || lake_store::layout::split_lineage(table).1.is_none() || self.is_registered(table).await? {
            return Ok(());
        }
        Err(LanceEngineError::InvalidInput(format!(
            "branch `{table}` is not registered with the lake (another Lance client made it, the engine's creation of it did not finish, or it was deleted); nothing was written. Write to a branch the engine created (`branch create`); delete this one with `branch delete`"
        )))
    }
}

/// Whether Lance's failure `e` says that none of the change's manifest writes landed: it gave up
/// on create-only conflicts after reading each conflicting version back as another commit's
/// (`lance::io::commit::verify_commit_outcome`; it returns success when it finds its own), its
/// rebase onto such a version found the two incompatible (`IncompatibleTransaction`: an append
/// after a concurrent overwrite; Lance checks this only after that verification), or it is
/// another writer's create. A commit whose status Lance could not verify is never certain; the
/// caller also requires every manifest write to have been answered as a conflict.
fn refused_for_certain(e: &LanceEngineError) -> bool {
    match e {
        LanceEngineError::ConcurrentCreate { .. } => true,
        LanceEngineError::Lance { source, .. } => {
            !source.is_commit_status_unknown()
                && matches!(
                    source,
                    lance::Error::CommitConflict { .. }
                        | lance::Error::RetryableCommitConflict { .. }
                        | lance::Error::IncompatibleTransaction { .. }
                        | lance::Error::TooMuchWriteContention { .. }
                )
        }
        _ => false,
    }
}

/// What is wrong with references a committed version added that the operation's checks before
/// its commit did not see (`Adds::expected`): an in-root key that is not managed, or an object
/// older than the publication guard allows. `None` when nothing is.
fn unchecked_references(
    guard: &PublicationGuard,
    unseen: &[&lake_common::ObjectIdentity],
    now: chrono::DateTime<chrono::Utc>,
) -> Option<String> {
    if unseen.is_empty() {
        return None;
    }
    let mut reasons = Vec::new();
    for id in unseen {
        if let Err(e) = lake_common::check_new_reference(&id.uri, &id.uri) {
            reasons.push(format!("{e}. It blocks every GC plan until no retained version references it: update or delete the rows that hold it, then remove the versions that still do (`cleanup`)"));
        }
    }
    // The guard's own message says nothing was committed; here the version was.
    if let Err(lake_store::guard::GuardError::TooOld { uri, age, limit, .. }) = guard.check(unseen.iter().copied(), now)
    {
        reasons.push(format!(
            "it references {uri}, {age:?} old, past the {limit:?} the publication guard allows; a GC apply running now may delete that object: check with `refs verify`, and reference a fresh copy of it"
        ));
    }
    if reasons.is_empty() {
        return None;
    }
    Some(format!(
        "it holds references the checks before its commit did not see (an expression that did not evaluate the same way twice): {}",
        reasons.join("; ")
    ))
}

/// The gate's create-only check against real Lance datasets (here: the one file that builds
/// `CommitBuilder`).
#[cfg(test)]
mod tests {
    use super::gate::Gate;
    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use lake_store::store::LakeStore;
    use lance::dataset::{CommitBuilder, InsertBuilder, WriteMode, WriteParams};
    use lance::Dataset;
    use lance_table::io::commit::CommitHandler;
    use std::sync::Arc;

    fn rows(values: &[i64]) -> Vec<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        vec![RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))]).unwrap()]
    }

    async fn keys(uri: &str) -> (u64, Vec<i64>) {
        let ds = Dataset::open(uri).await.unwrap();
        let scan = ds.scan();
        let batch = scan.try_into_batch().await.unwrap();
        let column = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        (ds.version().version, column.values().to_vec())
    }

    /// A gate that only publishes version 1 (no intent).
    async fn create_only(uri: &str) -> Arc<dyn CommitHandler> {
        let dir = tempfile::tempdir().unwrap();
        let store = LakeStore::open(dir.path().to_str().unwrap()).unwrap();
        let gate = Arc::new(Gate::new(
            store,
            "t",
            "01J9Z3K8Q4W5X6Y7Z8A9B0C1D2",
            true,
            None,
            None,
            Arc::new(lake_store::guard::SystemClock),
        ));
        gate.handler(uri, &None).await.unwrap()
    }

    /// Two creates race: the second's data files are written while the table does not exist,
    /// the first lands, then the second commits. Through Lance's own handler the second lands
    /// as version 2 and replaces the first's rows (the hole, kept here so a Lance change that
    /// closes it shows); through a create-only gate it is refused as a conflict and
    /// the first's rows stay the table's.
    #[tokio::test]
    async fn a_create_landing_on_another_create_is_refused() {
        for wrapped in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let uri = dir.path().join("t.lance").to_string_lossy().into_owned();
            let params = WriteParams { mode: WriteMode::Create, ..Default::default() };
            let second =
                InsertBuilder::new(uri.as_str()).with_params(&params).execute_uncommitted(rows(&[2])).await.unwrap();
            InsertBuilder::new(uri.as_str()).with_params(&params).execute(rows(&[1])).await.unwrap();
            let mut commit = CommitBuilder::new(uri.as_str()).with_max_retries(1);
            if wrapped {
                commit = commit.with_commit_handler(create_only(&uri).await);
            }
            let outcome = commit.execute(second).await;
            if wrapped {
                assert!(matches!(outcome, Err(lance::Error::CommitConflict { .. })), "{outcome:?}");
                assert_eq!(keys(&uri).await, (1, vec![1]));
            } else {
                assert!(outcome.is_ok(), "{outcome:?}");
                assert_eq!(keys(&uri).await, (2, vec![2]), "Lance no longer commits a create over a table");
            }
        }
    }

    /// With no table, the wrapped handler publishes the create as version 1.
    #[tokio::test]
    async fn a_create_on_no_table_lands_as_version_one() {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().join("t.lance").to_string_lossy().into_owned();
        let params = WriteParams { mode: WriteMode::Create, ..Default::default() };
        let create =
            InsertBuilder::new(uri.as_str()).with_params(&params).execute_uncommitted(rows(&[7, 8])).await.unwrap();
        let handler = create_only(&uri).await;
        CommitBuilder::new(uri.as_str())
            .with_commit_handler(handler)
            .with_max_retries(1)
            .execute(create)
            .await
            .unwrap();
        assert_eq!(keys(&uri).await, (1, vec![7, 8]));
    }
}
