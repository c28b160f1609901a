//! The live keys of the lake: every key inside the lake root that a retained version of a table
//! references, read from the engine's journal replay into sorted runs (spilled past a memory
//! budget) and merged in key order. Planning merges them against the inventory; apply against
//! the candidates it is about to delete, so that a plan document edited after it was made
//! (its digest is unkeyed: anyone can recompute it) can never make apply delete a live object.
//!
//! A live key inside the root that is not a managed object key (`objects/<ULID>/<name>`) is a
//! named problem: it can only name an object through another route (a symbolic link at the root,
//! say), which GC cannot follow to tell which object it reaches.

use crate::error::GcError;
use crate::plan::PlanProblem;
use crate::spill::{MergedKeys, SortedRuns};
use lake_common::is_external_identity;
use lake_engine::{Engine, EngineError, RetainedRoots, TableSnapshot, WriteIntents};
use lake_store::keys::parse_managed_key;

/// Reads the live identities of `snapshot` at its retained versions and pushes the keys inside
/// the lake root to `runs`. Returns the number of live identities read and the problems met (an
/// inconsistent journal, a key inside the root that is not managed).
///
/// # Errors
/// Engine errors other than an incomplete lineage; a spill folder that fails.
pub(crate) fn push_live_keys(
    snapshot: Box<dyn TableSnapshot>,
    runs: &mut SortedRuns,
) -> Result<(u64, Vec<PlanProblem>), GcError> {
    let table = snapshot.lineage().table.clone();
    let roots = RetainedRoots::new(snapshot.lineage().retained.clone());
    let (mut read, mut problems) = (0u64, Vec::new());
    let mut stream = match snapshot.live(&roots) {
        Ok(stream) => stream,
        Err(EngineError::Lineage { problems: found, .. }) => {
            return Ok((0, found.iter().map(PlanProblem::from).collect()));
        }
        Err(e) => return Err(e.into()),
    };
    loop {
        let identity = match stream.next_identity() {
            Ok(Some(identity)) => identity,
            Ok(None) => return Ok((read, problems)),
            Err(EngineError::Lineage { problems: found, .. }) => {
                problems.extend(found.iter().map(PlanProblem::from));
                return Ok((read, problems));
            }
            Err(e) => return Err(e.into()),
        };
        read += 1;
        if is_external_identity(&identity.uri) {
            continue;
        }
        if parse_managed_key(&identity.uri).is_none() && problems.len() < 100 {
            problems.push(PlanProblem::new(PlanProblem::UNMANAGED_REFERENCE, format!(
                "table `{table}` references {:?}, inside the lake root but not a managed object key (objects/<ULID>/<name>): GC cannot tell which object it names (a route through a link, a mistyped key?). Remove the reference (delete the rows of table `{table}` that hold it, or update them to the object's own key), then remove the versions that still hold it (`cleanup` of table `{table}`, after deleting any tag on them)",
                identity.uri
            )));
        }
        runs.push(identity.uri)?;
    }
}

/// Reads the lake's write intents ([`Engine::write_intents`]) and pushes the key of every
/// reference inside the lake root they name to `runs`: the objects of commits that may still
/// land are live. Called after the cutoff is fixed and before any lineage is read
/// (`docs/safety.md`, "Commits that land late").
///
/// # Errors
/// Engine and storage errors; a spill folder that fails.
pub(crate) async fn push_intent_keys(engine: &dyn Engine, runs: &mut SortedRuns) -> Result<WriteIntents, GcError> {
    let mut push = |identity: lake_common::ObjectIdentity| {
        if is_external_identity(&identity.uri) {
            return Ok(());
        }
        runs.push(identity.uri).map_err(|e| {
            let kind = e.kind();
            EngineError::backend(e, kind)
        })
    };
    Ok(engine.write_intents(&mut push).await?)
}

/// The live keys of every registered table as the engine shows them now, for apply, and the
/// references of every write intent (read first, as a plan reads them).
///
/// # Errors
/// [`GcError::LineageIncomplete`] when any table's lineage has problems; engine, storage
/// and spill errors.
pub(crate) async fn live_now(engine: &dyn Engine, budget: usize) -> Result<LiveKeys, GcError> {
    let mut runs = SortedRuns::new(budget);
    let intents = push_intent_keys(engine, &mut runs).await?;
    let tables = engine.tables().await?;
    let mut problems: Vec<lake_engine::LineageProblem> = tables.problems.clone();
    let mut messages: Vec<PlanProblem> =
        intents.problems.into_iter().map(|m| PlanProblem::new(PlanProblem::WRITE_INTENT, m)).collect();
    for location in &tables.tables {
        let snapshot = match engine.snapshot(location).await {
            Ok(snapshot) => snapshot,
            // Deleted since the registry was listed (a branch deleted while apply starts).
            Err(lake_engine::EngineError::Table { .. }) => {
                problems.push(lake_engine::LineageProblem::TableVanished { table: location.name.clone() });
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if !snapshot.lineage().problems.is_empty() {
            problems.extend(snapshot.lineage().problems.clone());
            continue;
        }
        let (_, found) = push_live_keys(snapshot, &mut runs)?;
        messages.extend(found);
    }
    if !problems.is_empty() {
        return Err(GcError::LineageIncomplete { problems });
    }
    if !messages.is_empty() {
        return Err(GcError::PlanIncomplete { problems: messages });
    }
    Ok(LiveKeys { keys: runs.finish()?, next: None, last: None, started: false })
}

/// Live keys read in ascending order, asked about in ascending order.
pub(crate) struct LiveKeys {
    keys: MergedKeys,
    next: Option<String>,
    last: Option<String>,
    started: bool,
}

impl LiveKeys {
    /// Whether `key` is live. Keys must be asked about in ascending order; one asked out of
    /// order is taken for live (never deleted).
    ///
    /// # Errors
    /// A spill file that cannot be read.
    pub(crate) fn is_live(&mut self, key: &str) -> Result<bool, GcError> {
        if self.last.as_deref().is_some_and(|last| key < last) {
            return Ok(true);
        }
        if !self.started {
            self.next = self.keys.next_key()?;
            self.started = true;
        }
        while self.next.as_deref().is_some_and(|n| n < key) {
            self.next = self.keys.next_key()?;
        }
        self.last = Some(key.to_string());
        Ok(self.next.as_deref() == Some(key))
    }
}
