//! Recovery of versions the engine committed whose journal entry is missing and which no write
//! intent names: a write killed after its Lance commit and before its sidecar whose intent is
//! gone, or an operation that writes no intent (a delete, a dropped column) killed there.
//!
//! A version is journaled without an operator only when all of these hold
//! (`docs/safety.md`, "Issue 25: a crashed writer recovers without an operator"):
//! - its Lance transaction carries this lake's marker (`crate::marker`: writer `lake`, this
//!   root): the commit went through the engine, whose publication guard ran right before it;
//! - no write intent names its transaction (those are resolved from the intent,
//!   `crate::resolve`);
//! - every reference its entry adds passes the publication guard again, judged at the time the
//!   store wrote the version's manifest (its `Last-Modified`, plus the second S3 truncates
//!   it by), by the store's clock as GC's ages are: a marker is not a signature, and
//!   this is the rule that makes a journaled-late version safe against any GC plan made before
//!   it (no object it adds was old enough to be a candidate). A version that only removes
//!   references (a delete, a dropped column) passes at once.
//!
//! The entry is computed from the two manifests (`version_diff::committed_entry`), as a delete's
//! is, and published create-only and bound to the version like any other. Anything else stays a
//! lineage problem for `lake refs repair` after an operator checks who wrote the version.
//!
//! Every engine write runs this for the versions after the table's registry pin before it
//! commits; `lake refs recover` runs it for every version of every table.

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use crate::marker::CommitMarker;
use crate::sidecar;
use lake_store::descriptor::LakeDescriptor;
use lake_store::guard::PublicationGuard;
use lake_store::intents;
use lake_store::layout::sidecar_key;
use lake_store::registry;
use lance::Dataset;
use std::collections::BTreeSet;

/// What recovery did with one version that had no journal entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum VersionRecovery {
    /// Journaled now, from the two manifests.
    Journaled {
        /// The operation the marker names (`append`, `delete`, ...).
        operation: String,
        /// References the entry adds (sum of counts).
        added: u64,
        /// References the entry removes (sum of counts).
        removed: u64,
    },
    /// Left as it is: a lineage problem until `lake refs recover` or `lake refs repair`.
    Left {
        /// Why, one sentence that names what to do.
        reason: String,
    },
}

/// One version that had no journal entry, and what recovery did with it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RecoveredVersion {
    /// The lineage (`t` or `t@branch`).
    pub table: String,
    /// The version (Lance's version number).
    pub version: u64,
    /// What was done.
    #[serde(flatten)]
    pub outcome: VersionRecovery,
}

/// Which versions of a table recovery examines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Versions {
    /// The versions after the table's registry pin (a HEAD of each one's sidecar): what an
    /// engine write examines before its commit, at the cost of the versions since the last
    /// journaled one.
    AfterPin,
    /// Every version whose manifest exists (a listing of the manifests and of the sidecars).
    All,
}

impl LanceEngine {
    /// Journals the versions of `table` that have no journal entry and that the engine provably
    /// committed (module documentation); reports every version without an entry it examined.
    /// A table without a dataset has none.
    ///
    /// # Errors
    /// Storage and Lance errors while listing or opening the table; an error journaling one
    /// version is that version's [`VersionRecovery::Left`] reason.
    pub(crate) async fn recover_unjournaled(
        &self,
        table: &str,
        which: Versions,
    ) -> Result<Vec<RecoveredVersion>, LanceEngineError> {
        if !self.table_exists(table).await? {
            return Ok(Vec::new());
        }
        let ds = self.open(table).await?;
        let latest = ds.version().version;
        let missing: Vec<u64> = match which {
            Versions::AfterPin => {
                let pin = registry::current(self.store(), table).await?.map_or(0, |entry| entry.version);
                let mut missing = Vec::new();
                for version in pin.saturating_add(1)..=latest {
                    if self.store().head(&sidecar_key(table, version)).await?.is_none() {
                        missing.push(version);
                    }
                }
                missing
            }
            Versions::All => {
                let versions = self.manifest_times(table).await?;
                let listing = sidecar::list(self.store(), table).await?;
                versions
                    .into_keys()
                    .filter(|v| !listing.files.contains_key(v) && !listing.implied.contains_key(v))
                    .collect()
            }
        };
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        let (listed, _) = intents::list(self.store(), Some(table)).await?;
        let claimed: BTreeSet<String> = listed.iter().flat_map(|i| i.transaction_uuids()).collect();
        let guard = PublicationGuard::from_policy(&LakeDescriptor::load(self.store()).await?);
        let mut out = Vec::new();
        for version in missing {
            let outcome = match self.recover_version(&ds, table, version, &claimed, &guard).await {
                Ok(Some(outcome)) => outcome,
                Ok(None) => continue,
                Err(e) => VersionRecovery::Left { reason: format!("it could not be journaled: {e}") },
            };
            match &outcome {
                VersionRecovery::Journaled { operation, added, removed } => tracing::info!(
                    table,
                    version,
                    operation,
                    added,
                    removed,
                    "journaled a version the engine committed whose journal entry was missing"
                ),
                // Before a write, a version left is usually a concurrent writer's, between its
                // commit and its sidecar: GC reports it if it stays.
                VersionRecovery::Left { reason } if which == Versions::AfterPin => {
                    tracing::debug!(table, version, "a version without a journal entry is left: {reason}")
                }
                VersionRecovery::Left { reason } => {
                    tracing::warn!(table, version, "a version without a journal entry is left: {reason}")
                }
            }
            out.push(RecoveredVersion { table: table.into(), version, outcome });
        }
        Ok(out)
    }

    /// Journals one version without an entry when the module's rules allow it. `None` for a
    /// version proven content-preserving (`crate::foreign`): GC reads it as an implied empty
    /// entry already, whoever committed it, and it is no lineage problem.
    async fn recover_version(
        &self,
        ds: &Dataset,
        table: &str,
        version: u64,
        claimed: &BTreeSet<String>,
        guard: &PublicationGuard,
    ) -> Result<Option<VersionRecovery>, LanceEngineError> {
        let left = |reason: String| Ok(Some(VersionRecovery::Left { reason }));
        if crate::foreign::content_preserving_operation(ds, table, self.store().root(), version).await.is_some() {
            return Ok(None);
        }
        let at = match ds.version().version == version {
            true => ds.clone(),
            false => ds.checkout_version(version).await.map_err(|source| LanceEngineError::Lance {
                table: table.into(),
                action: "open the version",
                source,
            })?,
        };
        let transaction = match at.read_transaction_by_version(version).await {
            Ok(Some(transaction)) => transaction,
            Ok(None) => {
                return left("it records no Lance transaction: check who wrote it, then `lake refs repair`".into())
            }
            Err(e) => return left(format!("its Lance transaction cannot be read ({e})")),
        };
        if claimed.contains(&transaction.uuid) {
            return left(
                "a write intent names its transaction: `lake refs recover` resolves it from the intent".into(),
            );
        }
        let root = self.store().root().to_string();
        let Some(marker) = CommitMarker::of(&transaction) else {
            return left("its Lance transaction carries no lake marker: another client's commit, or a build before markers; check who wrote it, then `lake refs repair`".into());
        };
        if marker.root != root {
            return left(format!(
                "its marker names the lake at {}, not this one: check who wrote it, then `lake refs repair`",
                marker.root
            ));
        }
        let diff = crate::version_diff::committed_entry(&at, table, self.store().root()).await?;
        // S3 reports `Last-Modified` in whole seconds, truncated: the manifest was written
        // before the next second. Judging at that later bound only makes the guard stricter.
        let written =
            crate::binding::manifest_meta(self.store(), table, &at).await?.last_modified + chrono::Duration::seconds(1);
        if let Err(e) = guard.check(diff.entry.added.iter().map(|r| &r.identity), written) {
            return left(format!(
                "its manifest was written at {} and {e}: not provably safe to journal without a check; check the version, then `lake refs repair`",
                crate::engine::fmt_time(written)
            ));
        }
        self.publish(diff.entry, &at).await?;
        Ok(Some(VersionRecovery::Journaled { operation: marker.operation, added: diff.added, removed: diff.removed }))
    }
}
