//! A table's snapshot for planning, and the live references read from it in bounded memory.
//!
//! Lineage is read with the journal streamed, version by version, into a [`SpilledJournal`] (an
//! external sort of journal events keyed by identity, spilled to the temporary folder past the
//! engine's memory budget); only each version's kind is kept for the chain check. The snapshot
//! ([`LanceSnapshot`]) is that value: the planner reads its lineage, then its live identities,
//! which come out of [`SpilledJournal::live`] ascending, as a stream: no table's references are
//! ever all in memory, and the engine keeps nothing between calls.
//!
//! The reference checkpoint (replay's shortcut past version 1, [`crate::refs_checkpoint`]) is
//! written by version cleanup ([`LanceEngine::cleanup`]), the operation that moves the replay's
//! base: never by a plan, so that a dry run changes nothing under the lake root.

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use crate::refs_checkpoint;
use lake_common::ObjectIdentity;
use lake_engine::{
    EngineError, IdentityStream, LineageProblem, LiveIdentities, RetainedRoots, SpilledJournal, SpilledReplayError,
    TableLineage, TableSnapshot,
};

/// A table's lineage and its journal spilled for replay, as one read saw them.
#[derive(Debug)]
pub(crate) struct LanceSnapshot {
    pub lineage: TableLineage,
    pub journal: SpilledJournal,
}

fn spill_error(table: &str, e: SpilledReplayError) -> EngineError {
    match e {
        SpilledReplayError::Replay(e) => EngineError::Lineage {
            table: table.into(),
            problems: vec![LineageProblem::Inconsistent {
                table: table.into(),
                version: e.version(),
                reason: e.to_string(),
            }],
        },
        SpilledReplayError::Spill(e) => {
            let transient = lake_objects::error::is_transient_error(&e.source);
            EngineError::Storage { path: e.path, source: Box::new(e.source), transient }
        }
    }
}

impl TableSnapshot for LanceSnapshot {
    fn lineage(&self) -> &TableLineage {
        &self.lineage
    }

    fn live(self: Box<Self>, roots: &RetainedRoots) -> Result<Box<dyn IdentityStream>, EngineError> {
        let LanceSnapshot { lineage, journal } = *self;
        let table = lineage.table.clone();
        let base = lineage.complete_base()?;
        let stream =
            journal.live(base, lineage.latest_version, roots.versions(), None).map_err(|e| spill_error(&table, e))?;
        Ok(Box::new(LanceLive { table, stream }))
    }
}

/// The live identities of a [`LanceSnapshot`], ascending.
struct LanceLive {
    table: String,
    stream: LiveIdentities,
}

impl IdentityStream for LanceLive {
    fn next_identity(&mut self) -> Result<Option<ObjectIdentity>, EngineError> {
        self.stream.next_live().map_err(|e| spill_error(&self.table, e))
    }
}

impl LanceEngine {
    /// The lineage of `table`, with its journal from the replay's start streamed into a
    /// [`SpilledJournal`] (see the module documentation). A valid reference checkpoint at
    /// version C stands in for C's sidecar, and sidecars before C are not read.
    ///
    /// # Errors
    /// Storage and Lance errors, and a spill folder that cannot be written.
    pub(crate) async fn lineage_and_journal(&self, table: &str) -> Result<LanceSnapshot, LanceEngineError> {
        let mut journal = SpilledJournal::new(self.memory_budget());
        let lineage = self
            .read_lineage(table, true, |_, entry| match entry {
                Ok(delta) => journal.add(delta).map_err(|e| match e {
                    SpilledReplayError::Spill(e) => LanceEngineError::Objects(e.into()),
                    SpilledReplayError::Replay(e) => LanceEngineError::InvalidInput(e.to_string()),
                }),
                // Named by the lineage's chain check.
                Err(_) => Ok(()),
            })
            .await?;
        Ok(LanceSnapshot { lineage, journal })
    }

    /// Writes the reference checkpoint of `table` at its oldest retained version, when that is
    /// newer than the replay's base (after version cleanup): the counts there, replayed from the
    /// journal in bounded memory except for the checkpoint document itself. Returns the version
    /// written at, or `None` when there was nothing to shorten (or the journal is incomplete).
    ///
    /// # Errors
    /// Storage, Lance and spill errors; an inconsistent journal.
    pub async fn write_reference_checkpoint(&self, table: &str) -> Result<Option<u64>, LanceEngineError> {
        let LanceSnapshot { lineage, journal } = self.lineage_and_journal(table).await?;
        if !lineage.is_complete() {
            return Ok(None);
        }
        let Some(base) = lineage.replay_base else { return Ok(None) };
        let Some(oldest) = lineage.retained.first().copied().filter(|oldest| *oldest > base) else {
            return Ok(None);
        };
        let mut stream = journal
            .live(base, lineage.latest_version, &lineage.retained, Some(oldest))
            .map_err(|e| LanceEngineError::InvalidInput(spill_error(table, e).to_string()))?;
        while stream
            .next_live()
            .map_err(|e| LanceEngineError::InvalidInput(spill_error(table, e).to_string()))?
            .is_some()
        {}
        let Some(counts) = stream.counts_at() else { return Ok(None) };
        refs_checkpoint::write(self.store(), table, oldest, counts).await?;
        Ok(Some(oldest))
    }
}
