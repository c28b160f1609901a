//! The live references of one table for planning, in bounded memory.
//!
//! Lineage is read with the journal streamed, version by version, into a
//! [`SpilledJournal`] (an external sort of journal events keyed by identity, spilled to the
//! temporary folder past the engine's memory budget); only each version's kind is kept for the
//! chain check. The live identities then come out of [`SpilledJournal::live`] ascending, and
//! [`lake_engine::Engine::retained_object_references`] pages are cut from that stream by a
//! [`LiveCursor`] that the next page continues: no table's references are ever all in memory.
//!
//! When the table's oldest retained version is newer than the replay base, the same pass
//! collects the counts at that version and, once the stream ends without error, writes the
//! reference checkpoint there ([`crate::refs_checkpoint`]); those counts are held in memory
//! (the checkpoint is one document), which happens only after version cleanup moved the base.

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use crate::refs_checkpoint;
use lake_common::ObjectIdentity;
use lake_engine::{EngineError, LineageProblem, LiveIdentities, SpilledJournal, SpilledReplayError, TableLineage};

/// A table's lineage and its journal spilled for replay, as one read saw them.
#[derive(Debug)]
pub(crate) struct JournalSnapshot {
    pub lineage: TableLineage,
    pub journal: SpilledJournal,
}

/// A live-reference listing in progress: the stream of one table's live identities for one
/// set of retained versions, positioned after the last identity it returned.
#[derive(Debug)]
pub(crate) struct LiveCursor {
    table: String,
    roots: Vec<u64>,
    stream: LiveIdentities,
    /// The next live identity, read ahead (so a page knows whether another follows).
    pending: Option<ObjectIdentity>,
    /// The last identity returned: the `after` token the next page must carry.
    last: Option<ObjectIdentity>,
    /// The version whose counts become the reference checkpoint when the stream ends.
    checkpoint_at: Option<u64>,
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
        SpilledReplayError::Spill(e) => EngineError::Storage { path: e.path, message: e.source.to_string() },
    }
}

impl LiveCursor {
    /// Whether this cursor continues a listing of `table` at `roots` after `after`.
    pub fn continues(&self, table: &str, roots: &[u64], after: Option<&ObjectIdentity>) -> bool {
        after.is_some() && self.table == table && self.roots == roots && self.last.as_ref() == after
    }

    /// Starts the live-identity stream of `snapshot` at `roots`, positioned after `after`.
    ///
    /// # Errors
    /// [`EngineError::Lineage`] when the lineage has problems or the journal does not replay;
    /// [`EngineError::Storage`] when the spill folder fails.
    pub fn start(
        snapshot: JournalSnapshot,
        roots: &[u64],
        after: Option<&ObjectIdentity>,
    ) -> Result<Self, EngineError> {
        let JournalSnapshot { lineage, journal } = snapshot;
        let table = lineage.table.clone();
        let base = lineage.complete_base()?;
        let checkpoint_at = lineage.retained.first().copied().filter(|oldest| *oldest > base);
        let stream =
            journal.live(base, lineage.latest_version, roots, checkpoint_at).map_err(|e| spill_error(&table, e))?;
        let mut cursor = Self { table, roots: roots.to_vec(), stream, pending: None, last: None, checkpoint_at };
        cursor.advance()?;
        while let (Some(p), Some(a)) = (&cursor.pending, after) {
            if p > a {
                break;
            }
            cursor.advance()?;
        }
        Ok(cursor)
    }

    fn advance(&mut self) -> Result<(), EngineError> {
        self.pending = self.stream.next_live().map_err(|e| spill_error(&self.table, e))?;
        Ok(())
    }

    /// Up to `limit` (at least 1) next live identities, and whether more follow.
    ///
    /// # Errors
    /// As [`LiveCursor::start`].
    pub fn page(&mut self, limit: usize) -> Result<(Vec<ObjectIdentity>, bool), EngineError> {
        let mut identities = Vec::with_capacity(limit.clamp(1, 4096));
        while identities.len() < limit.max(1) {
            let Some(identity) = self.pending.take() else { break };
            identities.push(identity);
            self.advance()?;
        }
        self.last = identities.last().cloned();
        Ok((identities, self.pending.is_some()))
    }

    /// Writes the reference checkpoint collected by an exhausted stream (an optimisation: a
    /// failure is logged, never fatal).
    pub async fn finish(self, engine: &LanceEngine) {
        let (Some(version), Some(counts)) = (self.checkpoint_at, self.stream.counts_at()) else {
            return;
        };
        if let Err(e) = refs_checkpoint::write(engine.store(), &self.table, version, counts).await {
            tracing::warn!(table = %self.table, "could not write the reference checkpoint: {e}");
        }
    }
}

impl LanceEngine {
    /// The lineage of `table`, with its journal from the replay's start streamed into a
    /// [`SpilledJournal`] (see the module documentation). A valid reference checkpoint at
    /// version C stands in for C's sidecar, and sidecars before C are not read.
    ///
    /// # Errors
    /// Storage and Lance errors, and a spill folder that cannot be written.
    pub(crate) async fn lineage_and_journal(&self, table: &str) -> Result<JournalSnapshot, LanceEngineError> {
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
        Ok(JournalSnapshot { lineage, journal })
    }
}
