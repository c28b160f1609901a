//! Versions without a journal entry, journaled from what they are (docs/protocol.md,
//! "Recovery"): a writer killed between its Lance commit and its entry, a commit reported as
//! failed that landed anyway, a version committed inside Lance's own call (an update) whose
//! writer died.
//!
//! The entry is always computed from the version's two manifests
//! (`version_diff::committed_entry`), never taken from a write intent, a marker or any other
//! document: whoever committed the version, the entry says what it references. A version is
//! journaled without an operator when
//! - it is this lake's: its Lance transaction carries the lake's marker with this root
//!   (`crate::commit::marker`), or a write intent of the lineage claims it (names its
//!   transaction's UUID, or the marker's write id is the intent's). Neither is a signature: they
//!   only decide whose versions an operator must look at; a forged one gains nothing the next
//!   rule does not allow;
//! - and every reference its entry adds is safe to have been published then: it passes the
//!   publication guard judged at the store time of the version's manifest (plus the second S3
//!   truncates it by), or a write intent of the lineage that exists now names it and it passes
//!   the guard judged at that intent's store time (the latest such intent). A version that only
//!   removes references passes at once.
//!
//! Anything else stays a lineage problem for `lake refs repair`, after an operator checks who
//! wrote the version.
//!
//! Why the rule is enough: a plan made at store time `P` proposes only managed keys older than
//! `min_age` at `P`. A version written before `P` without an entry is a lineage problem of that
//! plan: it plans nothing. A version written at `W > P` adds only references that were younger
//! than `min_age - margin` at `W` (no candidate of `P`), or that an intent existing since `L`
//! names: plans before `L` found them young at `L`, plans after `L` read the intent and kept them.

use crate::commit::marker::CommitMarker;
use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use crate::sidecar;
use chrono::{DateTime, Utc};
use lake_common::ObjectIdentity;
use lake_store::descriptor::LakeDescriptor;
use lake_store::guard::PublicationGuard;
use lake_store::intents::{self, ListedIntent};
use lake_store::layout::sidecar_key;
use lake_store::registry;
use lance::Dataset;
use std::collections::BTreeMap;

/// What recovery did with one version that had no journal entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum VersionRecovery {
    /// Journaled now, from the two manifests.
    Journaled {
        /// The operation the marker names (`append`, `delete`, ...), or `unmarked` for a version
        /// a write intent claims that carries no marker (committed inside Lance's own call).
        operation: String,
        /// References the entry adds (sum of counts).
        added: u64,
        /// References the entry removes (sum of counts).
        removed: u64,
    },
    /// Left as it is: a lineage problem until `lake refs repair`.
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
    /// The versions in `(after, upto]` that exist (a resolver's range).
    Range(u64, u64),
}

/// The write intents of a lineage as recovery reads them: who claims which version, and which
/// references an intent protects.
pub(crate) struct Claims {
    intents: Vec<ListedIntent>,
    /// Identities named by a readable intent, with the latest store time of one naming it
    /// (loaded on first need).
    named: Option<BTreeMap<ObjectIdentity, DateTime<Utc>>>,
}

impl Claims {
    /// The intents of `table` now.
    ///
    /// # Errors
    /// Storage errors listing them.
    pub(crate) async fn of(engine: &LanceEngine, table: &str) -> Result<Self, LanceEngineError> {
        let (intents, _) = intents::list(engine.store(), Some(table)).await?;
        Ok(Self { intents, named: None })
    }

    /// Whether an intent claims a version whose transaction is `uuid` and whose marker (if any)
    /// names write `write_id`.
    fn claims(&self, uuid: &str, write_id: Option<&str>) -> bool {
        self.intents
            .iter()
            .any(|i| i.transaction_uuids().iter().any(|u| u == uuid) || Some(i.write_id.as_str()) == write_id)
    }

    async fn named(
        &mut self,
        engine: &LanceEngine,
    ) -> Result<&BTreeMap<ObjectIdentity, DateTime<Utc>>, LanceEngineError> {
        if self.named.is_none() {
            let mut named: BTreeMap<ObjectIdentity, DateTime<Utc>> = BTreeMap::new();
            for listed in &self.intents {
                let Ok(intent) = &listed.intent else { continue };
                let written = listed.last_modified;
                let read = intents::visit_references(engine.store(), intent, |id| {
                    let at = named.entry(id).or_insert(written);
                    *at = (*at).max(written);
                    Ok(())
                })
                .await?;
                if let Err(why) = read {
                    tracing::warn!(intent = %listed.key, "its references cannot be read: {why}");
                }
            }
            self.named = Some(named);
        }
        Ok(self.named.get_or_insert_with(BTreeMap::new))
    }
}

impl LanceEngine {
    /// The manifests of `table`'s versions with the time the store last wrote each (empty when
    /// the table has no dataset). Detached versions and staging files are not versions.
    ///
    /// # Errors
    /// Storage errors.
    pub(crate) async fn manifest_times(&self, table: &str) -> Result<BTreeMap<u64, DateTime<Utc>>, LanceEngineError> {
        let prefix = format!("{}/_versions/", lake_store::layout::dataset_key(table));
        let mut times = BTreeMap::new();
        for (key, meta) in self.store().list_all(&prefix).await? {
            let Some(name) = key.strip_prefix(&prefix).filter(|n| !n.contains('/') && n.ends_with(".manifest")) else {
                continue;
            };
            let scheme = lance_table::io::commit::ManifestNamingScheme::detect_scheme(name);
            let version = scheme.and_then(|s| s.parse_version(name));
            if let Some(v) = version.filter(|v| *v > 0 && !lance_table::format::is_detached_version(*v)) {
                times.insert(v, meta.last_modified);
            }
        }
        Ok(times)
    }

    /// Journals the versions of `table` that have no journal entry and that recovery may
    /// journal (module documentation); reports every version without an entry it examined. A
    /// table without a dataset has none.
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
            Versions::All | Versions::Range(..) => {
                let versions = self.manifest_times(table).await?;
                let listing = sidecar::list(self.store(), table).await?;
                let (after, upto) = match which {
                    Versions::Range(after, upto) => (after, upto),
                    _ => (0, u64::MAX),
                };
                versions
                    .into_keys()
                    .filter(|v| *v > after && *v <= upto)
                    .filter(|v| !listing.files.contains_key(v) && !listing.implied.contains_key(v))
                    .collect()
            }
        };
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        let mut claims = Claims::of(self, table).await?;
        let guard = PublicationGuard::from_policy(&LakeDescriptor::load(self.store()).await?);
        let mut out = Vec::new();
        for version in missing {
            let outcome = match self.recover_version(&ds, table, version, &mut claims, &guard).await {
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
                    "journaled a version whose journal entry was missing, from its manifests"
                ),
                // Before a write, a version left is usually a concurrent writer's, between its
                // commit and its entry: GC reports it if it stays.
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
        claims: &mut Claims,
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
            Ok(None) => return left("it records no Lance transaction: check who wrote it, then `refs repair`".into()),
            Err(e) => return left(format!("its Lance transaction cannot be read ({e})")),
        };
        let root = self.store().root().to_string();
        let marker = CommitMarker::of(&transaction);
        let ours = marker.as_ref().is_some_and(|m| m.root == root);
        let claimed = claims.claims(&transaction.uuid, marker.as_ref().map(|m| m.write_id.as_str()));
        if !ours && !claimed {
            return left(match &marker {
                None => "its Lance transaction carries no lake marker and no write intent names it: another client's commit, or a build before markers; check who wrote it, then `refs repair`".into(),
                Some(m) => format!(
                    "its marker names the lake at {}, not this one: check who wrote it, then `refs repair`",
                    m.root
                ),
            });
        }
        let diff = crate::version_diff::committed_entry(&at, table, self.store().root()).await?;
        // S3 reports `Last-Modified` in whole seconds, truncated: the manifest was written
        // before the next second. Judging at that later bound only makes the guard stricter.
        let written =
            crate::binding::manifest_meta(self.store(), table, &at).await?.last_modified + chrono::Duration::seconds(1);
        let unsafe_refs: Vec<&ObjectIdentity> = diff
            .entry
            .added
            .iter()
            .map(|r| &r.identity)
            .filter(|id| guard.check(std::iter::once(*id), written).is_err())
            .collect();
        if !unsafe_refs.is_empty() {
            let named = claims.named(self).await?;
            for id in unsafe_refs {
                let protected = named
                    .get(id)
                    .is_some_and(|at| guard.check(std::iter::once(id), *at + chrono::Duration::seconds(1)).is_ok());
                if !protected {
                    let why =
                        guard.check(std::iter::once(id), written).err().map(|e| e.to_string()).unwrap_or_default();
                    return left(format!(
                        "its manifest was written at {} and {why}; no write intent of the table protects that object: not provably safe to journal without a check; check the version, then `refs repair`",
                        crate::engine::fmt_time(written)
                    ));
                }
            }
        }
        let (added, removed) = (diff.added, diff.removed);
        let entry = diff.entry.bound(self.binding(table, &at).await?);
        self.write_entry(&entry).await?;
        registry::advance(self.store(), table, version).await?;
        let operation = marker.map_or_else(|| "unmarked".to_string(), |m| m.operation);
        Ok(Some(VersionRecovery::Journaled { operation, added, removed }))
    }
}
