//! Resolution of write intents: is a commit that may have landed late committed, abandoned, or
//! still pending? (`docs/safety.md`, "Commits that land late", states the argument.)
//!
//! An intent of table `t` (read version `r`, transaction UUIDs `U`: the intent's and its attempt
//! markers', deadline span `d`, written at `L = last_modified(intent)` by the store's clock) is:
//!
//! - **committed** when a version in `(r, latest]` carries a transaction whose UUID is in `U`
//!   (Lance keeps a transaction's UUID through every rebase and retry of one commit call; the
//!   version's manifest or `_transactions/` file records it). If that version has no journal
//!   entry, the resolver writes it from the intent (a streamed write's head naming its log; the
//!   entry computed from the two manifests; a restore's or branch's snapshot from the journal)
//!   and advances the registry. Then the intent is removed.
//! - **abandoned** when some version `M > r` has a manifest the store last wrote after
//!   `L + d + slack`, and every version in `(r, M]` exists and carries another UUID. Every
//!   manifest write of the intent's commit was issued before `anchor + d` (the commit gate
//!   refuses later ones), and the anchor precedes the intent's write, so every attempt started
//!   before `L + d` (+ the slack: S3's `Last-Modified` has a granularity of one second). An
//!   attempt targets the version after the latest it saw when it started, so at most the
//!   version after the latest that existed before `L + d + slack`: at most `M`, since `M`'s
//!   manifest appeared only after that. Lance writes manifests create-only (a conditional PUT
//!   `If-None-Match: *` on S3, a hard link that never replaces locally: lance-table
//!   `ConditionalPutCommitHandler`), so once every slot up to `M` is taken by another
//!   transaction, no attempt of this commit can ever land. The intent (and its write's log) is
//!   removed.
//! - **pending** otherwise: not yet provable (no version after the deadline yet), a version in
//!   the range no longer exists (cleaned up by another client) or has no readable transaction,
//!   or the table has no dataset (a create whose version 1 may still land: no other writer can
//!   take that slot without creating the table). A pending intent stays and keeps its objects.
//!
//! Resolution runs in every engine write to a table before it commits (for intents already past
//! their deadline, without fencing), in a writer whose commit failed after a manifest write was
//! issued (fencing), in `lake cleanup` before it removes versions, and in `lake refs recover`
//! ([`LanceEngine::recover_writes`]). To fence, the resolver waits until the host's clock is past
//! `L + d + slack`, commits a content-preserving version (a Lance config change, key
//! `lake.fence`, journaled as an empty delta), and checks again; a host clock behind the store's
//! shows as a fence manifest not yet late enough, and the resolver waits the difference and
//! fences again (at most [`FENCE_ATTEMPTS`] times).

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use crate::intent_commit::IntentWrite;
use crate::sidecar;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use lake_common::intent::{IntentOperation, IntentReferences, WriteIntent};
use lake_common::{DeltaKind, LogHead, LogRef, ObjectReferenceDelta};
use lake_store::intents::{self, ListedIntent};
use lake_store::layout::{dataset_key, reference_log_key, sidecar_key, split_lineage};
use lake_store::registry;
use lance_table::io::commit::ManifestNamingScheme;
use std::collections::BTreeMap;
use std::time::Duration;

/// Slack added to an intent's deadline on S3: `Last-Modified` has a granularity of one second,
/// and one more second for the store's clocks.
pub const S3_RESOLUTION_SLACK: Duration = Duration::from_secs(2);
/// Slack added to an intent's deadline on a local root (file times are exact; one second for
/// the host clock's steps).
pub const LOCAL_RESOLUTION_SLACK: Duration = Duration::from_secs(1);
/// Fences a resolver commits at most for one intent (each after waiting for the store's clock).
pub const FENCE_ATTEMPTS: usize = 3;

/// Whether a resolver may commit a fence version to prove an intent abandoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// Never (a write resolving other writers' intents before its own commit).
    No,
    /// Only when the intent's deadline has already passed by this host's clock (no waiting).
    IfDue,
    /// Wait for the deadline to pass, then fence (the timed-out writer, `lake refs recover`).
    Wait,
}

/// What resolution found for one intent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Resolution {
    /// The commit landed as `version`, which is journaled now; the intent is removed.
    Committed {
        /// The version the commit landed as (Lance's version number).
        version: u64,
    },
    /// The commit can no longer land: version `proof` appeared after the deadline and no
    /// version up to it is the write's. The intent and its write's log are removed.
    Abandoned {
        /// The version that proves it (Lance's version number): no version up to it is the write's.
        proof: u64,
    },
    /// Not decided; the intent stays and keeps its objects.
    Pending {
        /// Why it is not decided, one phrase.
        reason: String,
    },
}

/// One intent and what resolution found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ResolvedIntent {
    /// The intent's key.
    pub key: String,
    /// The lineage written.
    pub table: String,
    /// The operation that wrote it.
    pub operation: String,
    /// When the store last wrote it (RFC 3339 UTC).
    pub written: String,
    /// The finding.
    pub resolution: Resolution,
}

/// What `lake refs recover` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoveryReport {
    /// Every intent found, with what resolution found.
    pub intents: Vec<ResolvedIntent>,
    /// Attempt markers whose intent was already gone, removed.
    pub stray_markers_removed: u64,
    /// Versions without a journal entry that no intent names, and what recovery did with each
    /// (`crate::recovery`: journaled when the engine provably committed them).
    pub versions: Vec<crate::recovery::RecoveredVersion>,
}

impl RecoveryReport {
    /// Intents still pending.
    pub fn pending(&self) -> usize {
        self.intents.iter().filter(|i| matches!(i.resolution, Resolution::Pending { .. })).count()
    }

    /// Versions without a journal entry left as they were (not provably this lake's): each
    /// stays a lineage problem that makes GC refuse until `lake refs repair` journals it.
    pub fn left(&self) -> usize {
        self.versions.iter().filter(|v| matches!(v.outcome, crate::recovery::VersionRecovery::Left { .. })).count()
    }
}

/// What the search of `(read_version, latest]` found.
enum Search {
    /// A version carries one of the write's UUIDs.
    Found(u64),
    /// Every version in the range carries another UUID.
    NotFound,
    /// This version of the range cannot be judged (missing, or no readable transaction).
    Gap(u64, String),
}

impl LanceEngine {
    /// Resolves the write intents of `table` (of every table when `None`), fencing where the
    /// deadline must be waited for (`lake refs recover`). Attempt markers left without their
    /// intent are removed.
    ///
    /// # Errors
    /// Storage errors while listing; an error resolving one intent is that intent's pending
    /// reason, not an error of the call.
    pub async fn recover_writes(&self, table: Option<&str>) -> Result<RecoveryReport, LanceEngineError> {
        let (listed, strays) = intents::list(self.store(), table).await?;
        let mut report = RecoveryReport::default();
        for key in &strays.orphan_markers {
            self.store().delete(key).await?;
            report.stray_markers_removed += 1;
        }
        for intent in &listed {
            report.intents.push(self.resolve_reported(intent, Fence::Wait).await);
        }
        let tables = match table {
            Some(t) => vec![t.to_string()],
            None => registry::tables(self.store()).await?,
        };
        for t in &tables {
            report.versions.extend(self.recover_unjournaled(t, crate::recovery::Versions::All).await?);
        }
        Ok(report)
    }

    /// Resolves the intents of `table` whose deadline (with the slack) has passed by this host's
    /// clock: those of writers that may be gone. Younger ones belong to writers still within
    /// their deadline, which resolve their own; with `landed_streamed`, a younger intent of a
    /// streamed write (append, overwrite, create) whose commit has landed is resolved too: its
    /// entry is the head naming the write's own log, the one its writer publishes (create-only:
    /// whichever lands first, the other reads the same counts, `sidecar::write_head`), so a
    /// writer killed right after its commit is journaled by the next write.
    ///
    /// # Errors
    /// Storage errors while listing.
    pub(crate) async fn resolve_due_intents(
        &self,
        table: &str,
        fence: Fence,
        landed_streamed: bool,
    ) -> Result<Vec<ResolvedIntent>, LanceEngineError> {
        let (listed, _) = intents::list(self.store(), Some(table)).await?;
        let mut out = Vec::new();
        for intent in &listed {
            if self.is_due(intent) {
                out.push(self.resolve_reported(intent, fence).await);
            } else if landed_streamed && intent.intent.as_ref().is_ok_and(|i| i.operation.is_streamed()) {
                // Not due: only a landed commit is acted on (no fence, and no abandonment can be
                // proven before the deadline).
                let resolved = self.resolve_reported(intent, Fence::No).await;
                if matches!(resolved.resolution, Resolution::Committed { .. }) {
                    out.push(resolved);
                }
            }
        }
        Ok(out)
    }

    /// Resolves the intent of `write` (the caller's own write). An intent already gone was
    /// resolved by another resolver: the write is committed if a version above its read version
    /// carries its transaction, else that resolver proved it abandoned. (Boxed: the future of
    /// the write that awaits it stays small.)
    ///
    /// # Errors
    /// Storage, Lance and journal errors.
    pub(crate) fn resolve_write<'a>(
        &'a self,
        write: &'a IntentWrite,
        fence: Fence,
    ) -> BoxFuture<'a, Result<Resolution, LanceEngineError>> {
        Box::pin(async move {
            let (listed, _) = intents::list(self.store(), Some(&write.table)).await?;
            if let Some(intent) = listed.iter().find(|i| i.write_id == write.write_id) {
                return self.resolve_listed(intent, fence).await;
            }
            let versions = self.manifest_times(&write.table).await?;
            let latest = versions.keys().next_back().copied().unwrap_or(0);
            match self.search(&write.table, &write.transaction_uuids(), write.read_version, &versions).await? {
                Search::Found(version) => Ok(Resolution::Committed { version }),
                _ => Ok(Resolution::Abandoned { proof: latest }),
            }
        })
    }

    async fn resolve_reported(&self, intent: &ListedIntent, fence: Fence) -> ResolvedIntent {
        let resolution = match self.resolve_listed(intent, fence).await {
            Ok(r) => r,
            Err(e) => Resolution::Pending { reason: format!("resolving it failed: {e}") },
        };
        ResolvedIntent {
            key: intent.key.clone(),
            table: intent.table.clone(),
            operation: intent.info().operation,
            written: crate::engine::fmt_time(intent.last_modified),
            resolution,
        }
    }

    /// The slack added to a deadline on this store.
    fn resolution_slack(&self) -> Duration {
        if self.store().s3().is_some() {
            S3_RESOLUTION_SLACK
        } else {
            LOCAL_RESOLUTION_SLACK
        }
    }

    /// The granularity of the store's `last_modified` (S3's `Last-Modified` has whole seconds).
    fn time_granularity(&self) -> Duration {
        if self.store().s3().is_some() {
            Duration::from_secs(1)
        } else {
            Duration::from_millis(1)
        }
    }

    /// `last_modified + deadline + slack`: after it (store clock) no attempt of the intent's
    /// commit can start.
    fn deadline_bound(&self, intent: &ListedIntent) -> Option<DateTime<Utc>> {
        let deadline_ms = intent.intent.as_ref().ok()?.deadline_ms;
        let span = chrono::Duration::milliseconds(i64::try_from(deadline_ms).ok()?)
            + chrono::Duration::from_std(self.resolution_slack()).ok()?;
        intent.last_modified.checked_add_signed(span)
    }

    /// Whether `intent`'s deadline bound has passed by this host's clock (an unreadable intent
    /// counts as due: only a resolver can report it).
    fn is_due(&self, intent: &ListedIntent) -> bool {
        self.deadline_bound(intent).is_none_or(|bound| Utc::now() > bound)
    }

    /// The manifests of `table`'s versions with the time the store last wrote each (empty when
    /// the table has no dataset). Detached versions and staging files are not versions.
    pub(crate) async fn manifest_times(&self, table: &str) -> Result<BTreeMap<u64, DateTime<Utc>>, LanceEngineError> {
        let prefix = format!("{}/_versions/", dataset_key(table));
        let mut times = BTreeMap::new();
        for (key, meta) in self.store().list_all(&prefix).await? {
            let Some(name) = key.strip_prefix(&prefix).filter(|n| !n.contains('/') && n.ends_with(".manifest")) else {
                continue;
            };
            let version = ManifestNamingScheme::detect_scheme(name).and_then(|s| s.parse_version(name));
            if let Some(v) = version.filter(|v| *v > 0 && !lance_table::format::is_detached_version(*v)) {
                times.insert(v, meta.last_modified);
            }
        }
        Ok(times)
    }

    /// Searches `(read_version, latest]` of `table` for a version carrying one of `uuids`.
    async fn search(
        &self,
        table: &str,
        uuids: &[String],
        read_version: u64,
        versions: &BTreeMap<u64, DateTime<Utc>>,
    ) -> Result<Search, LanceEngineError> {
        let Some(&latest) = versions.keys().next_back() else { return Ok(Search::NotFound) };
        if latest <= read_version {
            return Ok(Search::NotFound);
        }
        let ds = self.open(table).await?;
        for v in read_version + 1..=latest {
            if !versions.contains_key(&v) {
                return Ok(Search::Gap(v, "its manifest no longer exists (cleaned up?)".into()));
            }
            let tx = match ds.read_transaction_by_version(v).await {
                Ok(Some(tx)) => tx,
                Ok(None) => return Ok(Search::Gap(v, "it records no transaction".into())),
                Err(e) => return Ok(Search::Gap(v, format!("its transaction cannot be read: {e}"))),
            };
            if uuids.contains(&tx.uuid) {
                return Ok(Search::Found(v));
            }
        }
        Ok(Search::NotFound)
    }

    /// Resolves one listed intent (see the module documentation). Boxed: the futures of the
    /// writes that await it stay small.
    fn resolve_listed<'a>(
        &'a self,
        listed: &'a ListedIntent,
        fence: Fence,
    ) -> BoxFuture<'a, Result<Resolution, LanceEngineError>> {
        Box::pin(self.resolve_listed_inner(listed, fence))
    }

    async fn resolve_listed_inner(&self, listed: &ListedIntent, fence: Fence) -> Result<Resolution, LanceEngineError> {
        let intent = match &listed.intent {
            Ok(intent) => intent,
            Err(why) => return Ok(Resolution::Pending { reason: format!("the intent cannot be read: {why}") }),
        };
        let Some(bound) = self.deadline_bound(listed) else {
            return Ok(Resolution::Pending { reason: "its deadline is out of range".into() });
        };
        let mut fences = 0;
        loop {
            let versions = self.manifest_times(&listed.table).await?;
            let search =
                self.search(&listed.table, &listed.transaction_uuids(), intent.read_version, &versions).await?;
            if let Search::Found(version) = search {
                self.journal_landed(intent, version).await?;
                intents::remove(self.store(), &listed.table, &listed.write_id).await?;
                if !intent.operation.is_streamed() && matches!(intent.references, IntentReferences::Log(_)) {
                    // A log written for the intent, removed unless the version's entry names it
                    // (an upsert journaled from its own row log, `version_diff::logged_entry`):
                    // a sidecar that mentions the write id keeps it.
                    let entry = self.store().get(&sidecar_key(&listed.table, version)).await?;
                    let named = entry.is_none_or(|bytes| {
                        bytes.windows(intent.write_id.len()).any(|w| w == intent.write_id.as_bytes())
                    });
                    if !named {
                        self.store().delete(&reference_log_key(&intent.table, &intent.write_id)).await?;
                    }
                }
                return Ok(Resolution::Committed { version });
            }
            let proof = versions.iter().find(|(v, written)| **v > intent.read_version && **written > bound);
            if let Some((&proof, _)) = proof {
                if let Search::Gap(v, why) = &search {
                    if *v <= proof {
                        return Ok(Resolution::Pending {
                            reason: format!(
                                "version {v} of table `{}` cannot be judged ({why}): it may be this write's",
                                listed.table
                            ),
                        });
                    }
                }
                intents::remove(self.store(), &listed.table, &listed.write_id).await?;
                if matches!(intent.references, IntentReferences::Log(_)) {
                    self.store().delete(&reference_log_key(&intent.table, &intent.write_id)).await?;
                }
                return Ok(Resolution::Abandoned { proof });
            }
            if versions.is_empty() {
                return Ok(Resolution::Pending {
                    reason: format!(
                        "table `{}` has no version: the write's create may still land as version 1 (no other writer can take that slot without creating the table). Once no process of that writer can still run, remove the intent by hand",
                        listed.table
                    ),
                });
            }
            // A fence must be written when the store's clock, as its `Last-Modified` reads it
            // (whole seconds on S3), is past the bound: by this host's clock, one granularity
            // later; if the last version (an earlier fence) still reads too early, this host's
            // clock is behind the store's by at least the difference, which is waited too.
            let behind = versions
                .values()
                .next_back()
                .map(|last| bound - *last)
                .filter(|d| *d > chrono::Duration::zero() && fences > 0)
                .unwrap_or_else(chrono::Duration::zero);
            let granularity = chrono::Duration::from_std(self.time_granularity()).unwrap_or_default();
            let waiting = bound + granularity + behind - Utc::now();
            let may_fence = match fence {
                Fence::No => false,
                Fence::IfDue => waiting <= chrono::Duration::zero(),
                Fence::Wait => true,
            };
            if !may_fence || fences >= FENCE_ATTEMPTS {
                return Ok(Resolution::Pending {
                    reason: format!(
                        "no version of table `{}` appeared after its deadline ({}) yet",
                        listed.table,
                        crate::engine::fmt_time(bound)
                    ),
                });
            }
            if let Ok(wait) = waiting.to_std() {
                tokio::time::sleep(wait + Duration::from_millis(20)).await;
            }
            fences += 1;
            if let Err(e) = self.fence(&listed.table, &listed.write_id).await {
                return Ok(Resolution::Pending { reason: format!("its fence could not be committed: {e}") });
            }
        }
    }

    /// Writes the journal entry of `version`, the landed commit of `intent`, unless it has one,
    /// and advances the registry to it.
    async fn journal_landed(&self, intent: &WriteIntent, version: u64) -> Result<(), LanceEngineError> {
        let table = intent.table.as_str();
        if self.store().head(&sidecar_key(table, version)).await?.is_none() {
            // Bound to the landed version like every entry a writer publishes
            // ([`crate::binding::binding_of`]): an unbound entry is a lineage problem.
            let ds = self.open_version(table, version).await?;
            let binding = crate::binding::binding_of(self.store(), table, &ds).await?;
            // An append Lance rebased onto another schema is journaled from the manifests
            // (`version_diff::schema_moved`), not from its log.
            let rebased_onto_another_schema = intent.operation == IntentOperation::Append
                && crate::version_diff::schema_moved(&ds, intent.read_version).await;
            match (&intent.operation, &intent.references) {
                (op, IntentReferences::Log(log)) if op.is_streamed() && !rebased_onto_another_schema => {
                    let kind = if *op == IntentOperation::Append { DeltaKind::Delta } else { DeltaKind::Snapshot };
                    let log = LogRef {
                        write_id: intent.write_id.clone(),
                        references: log.references,
                        bytes: log.bytes,
                        sha256: log.sha256.clone(),
                        sorted: false,
                        index: None,
                    };
                    sidecar::write_head(self.store(), &LogHead::new(table, version, kind, log).bound(binding)).await?;
                }
                (IntentOperation::Restore | IntentOperation::CreateBranch, _) => {
                    let source = intent.restored_version.ok_or_else(|| {
                        LanceEngineError::InvalidInput(format!(
                            "write intent of table `{table}` records no restored version"
                        ))
                    })?;
                    let source_table = match intent.operation {
                        IntentOperation::CreateBranch => split_lineage(table).0,
                        _ => table,
                    };
                    let counts = self.journal_counts_at(source_table, source).await?;
                    sidecar::write(
                        self.store(),
                        &ObjectReferenceDelta::snapshot(table, version, &counts).bound(binding),
                    )
                    .await?;
                }
                _ => {
                    let diff = crate::version_diff::diff_entry(&ds, table, self.store().root()).await?;
                    sidecar::write(self.store(), &diff.entry.bound(binding)).await?;
                }
            }
        }
        registry::advance(self.store(), table, version).await?;
        Ok(())
    }

    /// Commits a fence on `table`: a content-preserving config change (`lake.fence` = the write
    /// id), journaled as an empty delta, within the engine's fence timeout. Returns its version.
    ///
    /// # Errors
    /// Lance errors; a timeout; sidecar and registry errors.
    async fn fence(&self, table: &str, write_id: &str) -> Result<u64, LanceEngineError> {
        let commit = async {
            let mut ds = self.open(table).await?;
            let before = ds.version().version;
            ds.update_config([("lake.fence", write_id)]).await.map_err(|source| LanceEngineError::Lance {
                table: table.into(),
                action: "fence",
                source,
            })?;
            self.publish_content_preserving(&ds, table, before).await.map(|o| o.version)
        };
        match tokio::time::timeout(self.fence_timeout(), commit).await {
            Ok(result) => result,
            Err(_) => Err(LanceEngineError::InvalidInput(format!(
                "the fence on table `{table}` did not commit within {:?}",
                self.fence_timeout()
            ))),
        }
    }
}
