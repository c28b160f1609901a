//! Apply's revalidation: every key apply deletes is checked against the lineage as it is at
//! that moment, not against a version number.
//!
//! [`Revalidation::start`] checks every table against the plan's basis (its latest version,
//! retained versions and the identities of its journal files; see [`lake_engine::stamp`]): a
//! table that went backwards, has a version that reappeared, a rewritten journal, a registry
//! ahead of its dataset, or that vanished from the registry stops apply with a named problem.
//! Otherwise the table only moved forward, and the references its new versions added are read:
//! every managed key among them that was minted before the plan's cutoff (only those can be
//! candidates) is revived, never deleted. [`Revalidation::refresh`] does the same again before
//! every group of deletes, against the moment last checked, reading only the journal entries of
//! versions committed since; a table whose listings did not change costs its listings only.
//! Retries of failed deletes go through the same check as first attempts. A journal file (the
//! reference log of a write that never committed) is deleted only while the engine still finds
//! no journal entry naming it, asked again whenever its table's lineage changed.

use crate::error::GcError;
use crate::plan::GcPlan;
use chrono::{DateTime, Utc};
use lake_common::is_external_identity;
use lake_engine::{Engine, EngineError, LineageBasis, LineageProblem, LineageStamp, TableLocation};
use lake_store::keys::parse_managed_key;
use std::collections::{BTreeMap, BTreeSet};

/// One table as last checked.
struct Checked {
    /// The basis the next stamp must have moved forward from.
    basis: LineageBasis,
    /// The stamp that basis came from (`None`: the plan's basis, not checked yet).
    stamp: Option<LineageStamp>,
}

/// The lineage of every table as apply last checked it, and the candidates it revived.
pub(crate) struct Revalidation<'a> {
    engine: &'a dyn Engine,
    cutoff: DateTime<Utc>,
    tables: BTreeMap<String, Checked>,
    /// Managed keys minted before the cutoff that a version committed since the plan added.
    added: BTreeSet<String>,
    /// Per table, the journal files no journal entry named when its lineage was last checked:
    /// the only journal files apply may delete.
    garbage: BTreeMap<String, BTreeSet<String>>,
}

impl<'a> Revalidation<'a> {
    /// Checks every table against `plan`'s basis and reads what versions since then added.
    ///
    /// # Errors
    /// [`GcError::LineageIncomplete`] naming every problem; engine and storage errors.
    pub(crate) async fn start(engine: &'a dyn Engine, plan: &GcPlan) -> Result<Self, GcError> {
        let cutoff = plan.cutoff.datetime();
        let tables = plan.basis.iter().map(|b| (b.table.clone(), Checked { basis: b.basis(), stamp: None })).collect();
        let mut revalidation = Self { engine, cutoff, tables, added: BTreeSet::new(), garbage: BTreeMap::new() };
        revalidation.refresh().await?;
        Ok(revalidation)
    }

    /// Reads every table's stamp and checks each one that changed since it was last checked
    /// (see the module documentation).
    ///
    /// # Errors
    /// As [`Revalidation::start`].
    pub(crate) async fn refresh(&mut self) -> Result<(), GcError> {
        let set = self.engine.tables().await?;
        let mut problems = set.problems.clone();
        let registered: BTreeSet<&str> = set.tables.iter().map(|l| l.name.as_str()).collect();
        for table in self.tables.keys().filter(|t| !registered.contains(t.as_str())) {
            problems.push(LineageProblem::TableVanished { table: table.clone() });
        }
        for location in &set.tables {
            let stamp = match self.engine.lineage_stamp(location).await {
                Ok(stamp) => stamp,
                // Deleted between the listing of the registry and its stamp (a branch deleted
                // while apply runs): what the plan knew of it is gone; stop with the reason.
                Err(EngineError::Table { .. }) if self.tables.contains_key(&location.name) => {
                    problems.push(LineageProblem::TableVanished { table: location.name.clone() });
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let checked = self
                .tables
                .entry(location.name.clone())
                .or_insert_with(|| Checked { basis: LineageBasis::empty(), stamp: None });
            if checked.stamp.as_ref() == Some(&stamp) {
                continue;
            }
            let found = checked.basis.check_forward(&location.name, &stamp);
            if !found.is_empty() {
                problems.extend(found);
                continue;
            }
            match added_keys(self.engine, location, checked.basis.version, stamp.latest_version, self.cutoff).await? {
                Ok(keys) => self.added.extend(keys),
                Err(found) => {
                    problems.extend(found);
                    continue;
                }
            }
            let garbage = self.engine.unreferenced_journal_files(location, self.cutoff.timestamp_millis()).await?;
            self.garbage.insert(location.name.clone(), garbage.into_iter().map(|f| f.key).collect());
            checked.basis = LineageBasis::of(&stamp);
            checked.stamp = Some(stamp);
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(GcError::LineageIncomplete { problems })
        }
    }

    /// The plan's cutoff: only keys minted before it may be deleted.
    pub(crate) fn cutoff(&self) -> DateTime<Utc> {
        self.cutoff
    }

    /// True when a version committed since the plan references `key`: it must not be deleted.
    pub(crate) fn revives(&self, key: &str) -> bool {
        if lake_store::keys::parse_journal_file(key).is_some() {
            // A journal file may go only while no journal entry names it.
            return !self.garbage.values().any(|files| files.contains(key));
        }
        self.added.contains(key)
    }
}

/// The managed keys minted before `cutoff` that the versions in `(after, upto]` of `location`
/// added, or the lineage problems that keep them from being read.
async fn added_keys(
    engine: &dyn Engine,
    location: &TableLocation,
    after: u64,
    upto: u64,
    cutoff: DateTime<Utc>,
) -> Result<Result<Vec<String>, Vec<LineageProblem>>, GcError> {
    if upto <= after {
        return Ok(Ok(Vec::new()));
    }
    match engine.references_added_between(location, after, upto).await {
        Ok(ids) => Ok(Ok(ids
            .into_iter()
            .map(|id| id.uri)
            .filter(|uri| !is_external_identity(uri) && parse_managed_key(uri).is_some_and(|k| k.minted_at() < cutoff))
            .collect())),
        // A version committed without its journal entry (yet): apply stops until it is there.
        Err(EngineError::Lineage { problems, .. }) => Ok(Err(problems)),
        Err(e) => Err(e.into()),
    }
}
