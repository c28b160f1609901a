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
use crate::sidecar::{EntryHead, EntrySink};
use lake_common::{EntryList, ObjectIdentity};
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
            let transient = lake_store::error::is_transient_error(&e.source);
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
        self.lineage_and_journal_with(table, true, self.memory_budget()).await
    }

    /// As [`LanceEngine::lineage_and_journal`], with or without the checkpoint, holding at most
    /// `budget` bytes of the journal's events in memory.
    pub(crate) async fn lineage_and_journal_with(
        &self,
        table: &str,
        use_checkpoint: bool,
        budget: usize,
    ) -> Result<LanceSnapshot, LanceEngineError> {
        Ok(self.lineage_and_journal_in(table, use_checkpoint, budget, lake_engine::UriRange::all()).await?.0)
    }

    /// As [`LanceEngine::lineage_and_journal_with`], keeping only the references `range`
    /// concerns (the blocks of indexed logs that hold none are not read); also returns the bytes
    /// of journal read.
    pub(crate) async fn lineage_and_journal_in(
        &self,
        table: &str,
        use_checkpoint: bool,
        budget: usize,
        range: lake_engine::UriRange,
    ) -> Result<(LanceSnapshot, u64), LanceEngineError> {
        let mut sink = Spilling { journal: SpilledJournal::new(budget), range, bytes: 0 };
        let lineage = self.read_lineage(table, use_checkpoint, &mut sink).await?;
        Ok((LanceSnapshot { lineage, journal: sink.journal }, sink.bytes))
    }

    /// Writes the reference checkpoint of `table` at its oldest retained version, when that is
    /// newer than the replay's base (after version cleanup): the counts there, replayed from the
    /// journal and streamed into the checkpoint's sorted log, in bounded memory. Returns the
    /// version written at, or `None` when there was nothing to shorten (or the journal is
    /// incomplete).
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
        let counts = journal
            .retained_counts(base, lineage.latest_version, &[oldest])
            .map_err(|e| LanceEngineError::InvalidInput(spill_error(table, e).to_string()))?;
        refs_checkpoint::write(self.store(), table, oldest, counts).await?;
        Ok(Some(oldest))
    }
}

/// The sink that streams a journal into a [`SpilledJournal`]: an entry whose log turns out
/// defective is discarded (its version then counts as missing; the lineage names it).
pub(crate) struct Spilling {
    pub journal: SpilledJournal,
    /// Only the references this range concerns are kept (all for the whole key space).
    pub range: lake_engine::UriRange,
    /// Bytes of the journal read.
    pub bytes: u64,
}

fn spill_to_engine(e: SpilledReplayError) -> LanceEngineError {
    match e {
        SpilledReplayError::Spill(e) => LanceEngineError::Objects(e.into()),
        SpilledReplayError::Replay(e) => LanceEngineError::InvalidInput(e.to_string()),
    }
}

impl EntrySink for Spilling {
    fn begin(&mut self, head: &EntryHead) -> Result<(), LanceEngineError> {
        self.journal.begin(head.version, head.kind).map_err(spill_to_engine)
    }

    fn reference(
        &mut self,
        version: u64,
        list: EntryList,
        identity: ObjectIdentity,
        count: u64,
    ) -> Result<(), LanceEngineError> {
        if !self.range.is_all() && !self.range.concerns(&identity.uri) {
            return Ok(());
        }
        self.journal.push(version, list, identity, count).map_err(spill_to_engine)
    }

    fn range(&self) -> Option<&lake_engine::UriRange> {
        Some(&self.range)
    }

    fn read_bytes(&mut self, bytes: u64) {
        self.bytes += bytes;
    }

    fn end(
        &mut self,
        version: u64,
        entry: Result<EntryHead, lake_common::DecodeError>,
    ) -> Result<(), LanceEngineError> {
        if entry.is_err() {
            self.journal.discard(version);
        }
        Ok(())
    }
}
