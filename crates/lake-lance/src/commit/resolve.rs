//! Resolution of write intents (docs/protocol.md, "Resolution"): is the write of an intent
//! committed, abandoned, or not decided yet? Decided by what the store proves, never by a clock.
//!
//! To resolve an intent of lineage `t` (read version `r`), a resolver
//!
//! 1. **revokes** it: creates its revocation marker ([`lake_store::intents::revoke`]). From then
//!    on the writer's gate refuses every manifest write (it checks the marker, then the intent,
//!    right before each one: `commit::gate`);
//! 2. **fences**: commits a version of its own on `t` after the revocation returned, at slot
//!    `M` (a content-preserving config change; for a create that never landed, an empty version
//!    1 with the schema its intent records; a writer's own next commit serves too). A manifest
//!    write of the write that passed the gate before the revocation targets a slot no later than
//!    `M`: it was numbered after a version that existed then, and every slot up to `M - 1` was
//!    taken before the fence was written (Lance numbers a commit `latest + 1` and writes its
//!    manifest create-only: an `If-None-Match: *` PUT on S3, a hard link locally). So no version
//!    of the write can appear after `M`;
//! 3. **journals** every version in `(r, M]` without an entry, from its two manifests
//!    (`commit::recover`), and reports which of them carries the write's transaction (committed)
//!    or that none does (abandoned). A version it may not journal (another client's) keeps the
//!    intent pending: the intent stays until `lake refs repair` journals it;
//! 4. **removes** the intent, then its markers, then the write's reference log unless an entry
//!    names it.
//!
//! A version of `(r, M]` that no longer exists (cleaned up) does not stop resolution: it is not
//! retained, so nothing it references needs to stay live.
//!
//! When a resolver may revoke: when the intent's deadline has passed by the store's clock
//! (`last_modified + deadline_ms`, a probe of the store's clock), or at once for the writer's own
//! intent (its commit failed uncertainly) and for a branch being deleted. The deadline is only a
//! liveness rule: an early revocation makes a live writer fail cleanly ("not committed"), never
//! lose data.

use crate::commit::change::{Change, Journal, Made};
use crate::commit::intent::IntentWrite;
use crate::commit::marker::CommitMarker;
use crate::commit::recover::{VersionRecovery, Versions};
use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use lake_common::intent::WriteIntent;
use lake_store::failpoint;
use lake_store::intents::{self, ListedIntent};
use lake_store::layout::{reference_log_key, sidecar_key, split_lineage};
use lake_store::registry;
use std::sync::Arc;
use std::time::Duration;

/// Slack added to an intent's deadline on S3 before it is due: `Last-Modified` has whole
/// seconds, and one more second for the store's clocks.
pub const S3_RESOLUTION_SLACK: Duration = Duration::from_secs(2);
/// Slack added to an intent's deadline on a local root.
pub const LOCAL_RESOLUTION_SLACK: Duration = Duration::from_secs(1);
/// Longest single wait of a resolver waiting for an intent to become due, between two progress
/// lines.
const WAIT_STEP: Duration = Duration::from_secs(30);

/// What resolution found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Resolution {
    /// The commit landed as `version`, which is journaled now; the intent is removed.
    Committed {
        /// The version the commit landed as (Lance's version number).
        version: u64,
    },
    /// The commit can no longer land: the write was revoked and version `proof`, written after
    /// that, is not the write's, nor is any version before it. The intent and its write's log
    /// are removed.
    Abandoned {
        /// The version that proves it (Lance's version number; 0 when the lineage is gone).
        proof: u64,
    },
    /// The commit can no longer land, as for `Abandoned`, but whether it landed cannot be told:
    /// `versions` (in the range it could have landed in) were cleaned up since. Nothing of them
    /// is retained, so nothing it may have referenced needs to stay live. The intent and its
    /// write's log are removed.
    CleanedUp {
        /// The version written after the revocation (Lance's version number).
        proof: u64,
        /// The versions that no longer exist.
        versions: Vec<u64>,
    },
    /// Not decided; the intent stays and keeps its objects.
    Pending {
        /// Why it is not decided, one sentence that says what to do.
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
    /// When the store wrote it (RFC 3339 UTC).
    pub written: String,
    /// The finding.
    pub resolution: Resolution,
}

/// What `lake refs recover` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoveryReport {
    /// Every intent found, with what resolution found.
    pub intents: Vec<ResolvedIntent>,
    /// Markers (revocations, or attempt markers of earlier builds) whose intent was already
    /// gone, removed.
    pub stray_markers_removed: u64,
    /// Versions without a journal entry, and what recovery did with each
    /// (`crate::commit::recover`).
    pub versions: Vec<crate::commit::recover::RecoveredVersion>,
}

impl RecoveryReport {
    /// Intents still pending.
    pub fn pending(&self) -> usize {
        self.intents.iter().filter(|i| matches!(i.resolution, Resolution::Pending { .. })).count()
    }

    /// Versions without a journal entry left as they were (not provably this lake's): each
    /// stays a lineage problem that makes GC refuse until `lake refs repair` journals it.
    pub fn left(&self) -> usize {
        self.versions.iter().filter(|v| matches!(v.outcome, VersionRecovery::Left { .. })).count()
    }
}

/// How a resolver treats an intent whose deadline has not passed (its writer may still run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Leave it pending, saying when it becomes due (`lake refs recover --no-wait`,
    /// `lake cleanup`).
    No,
    /// Wait until it is due, reporting each wait (`lake refs recover`).
    UntilDue,
    /// Revoke it now (its lineage is being deleted).
    Revoke,
}

/// How `lake refs recover` runs ([`LanceEngine::recover_writes_with`]).
#[derive(Clone)]
pub struct RecoverOptions {
    /// What to do with an intent whose writer may still be running.
    pub wait: Wait,
    /// Called with one line (what is waited for, until when, UTC) before each wait.
    pub progress: Option<Progress>,
}

/// A receiver of progress lines (`lake refs recover` prints them on standard error).
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

impl Default for RecoverOptions {
    fn default() -> Self {
        Self { wait: Wait::UntilDue, progress: None }
    }
}

impl std::fmt::Debug for RecoverOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoverOptions").field("wait", &self.wait).finish()
    }
}

/// "Now" by the store's clock, read once when first needed.
#[derive(Default)]
struct StoreNow(Option<DateTime<Utc>>);

impl StoreNow {
    async fn get(&mut self, engine: &LanceEngine) -> Result<DateTime<Utc>, LanceEngineError> {
        if let Some(now) = self.0 {
            return Ok(now);
        }
        let now = engine.store_clock().read(engine.store()).await?.store_now;
        self.0 = Some(now);
        Ok(now)
    }
}

impl LanceEngine {
    /// Resolves the write intents of `table` (of every table when `None`), waiting for those
    /// whose writer may still be running, then journals the versions without an entry that
    /// recovery may journal (`crate::commit::recover`). Markers left without their intent are
    /// removed. As [`LanceEngine::recover_writes_with`] with [`Wait::UntilDue`] and no progress.
    ///
    /// # Errors
    /// Storage errors while listing; an error resolving one intent is that intent's pending
    /// reason, not an error of the call.
    pub async fn recover_writes(&self, table: Option<&str>) -> Result<RecoveryReport, LanceEngineError> {
        self.recover_writes_with(table, &RecoverOptions::default()).await
    }

    /// As [`LanceEngine::recover_writes`], with `options`: an intent whose deadline has not
    /// passed by the store's clock is waited for (with a progress line), or reported pending
    /// ([`Wait::No`]).
    ///
    /// # Errors
    /// As [`LanceEngine::recover_writes`].
    pub async fn recover_writes_with(
        &self,
        table: Option<&str>,
        options: &RecoverOptions,
    ) -> Result<RecoveryReport, LanceEngineError> {
        let (listed, strays) = intents::list(self.store(), table).await?;
        let mut report = RecoveryReport::default();
        for key in &strays.orphan_markers {
            self.store().delete(key).await?;
            report.stray_markers_removed += 1;
        }
        for intent in &listed {
            report.intents.push(self.resolve_reported(intent, options).await);
        }
        let tables = match table {
            Some(t) => vec![t.to_string()],
            None => registry::tables(self.store()).await?,
        };
        for t in &tables {
            report.versions.extend(self.recover_unjournaled(t, Versions::All).await?);
        }
        Ok(report)
    }

    /// Resolves every intent of lineage `table` (`lake cleanup`: [`Wait::No`]; a branch
    /// deletion: [`Wait::Revoke`]).
    ///
    /// # Errors
    /// Storage errors while listing.
    pub(crate) async fn resolve_lineage(
        &self,
        table: &str,
        wait: Wait,
    ) -> Result<Vec<ResolvedIntent>, LanceEngineError> {
        let (listed, _) = intents::list(self.store(), Some(table)).await?;
        let options = RecoverOptions { wait, progress: None };
        let mut out = Vec::new();
        for intent in &listed {
            out.push(self.resolve_reported(intent, &options).await);
        }
        Ok(out)
    }

    async fn resolve_reported(&self, listed: &ListedIntent, options: &RecoverOptions) -> ResolvedIntent {
        let resolution = match self.resolve_listed(listed, options).await {
            Ok(r) => r,
            Err(e) => Resolution::Pending { reason: format!("resolving it failed: {e}") },
        };
        if !matches!(resolution, Resolution::Pending { .. }) {
            tracing::info!(intent = %listed.key, ?resolution, "resolved a write intent");
        }
        ResolvedIntent {
            key: listed.key.clone(),
            table: listed.table.clone(),
            operation: listed.info().operation,
            written: crate::engine::fmt_time(listed.last_modified),
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

    /// When `listed` becomes due by the store's clock: `last_modified + deadline + slack`.
    fn due_at(&self, listed: &ListedIntent) -> Option<DateTime<Utc>> {
        let deadline_ms = listed.intent.as_ref().ok()?.deadline_ms;
        let span = chrono::Duration::milliseconds(i64::try_from(deadline_ms).ok()?)
            + chrono::Duration::from_std(self.resolution_slack()).ok()?;
        listed.last_modified.checked_add_signed(span)
    }

    /// Resolves one listed intent (module documentation). Boxed: the futures of the writes that
    /// await it stay small.
    fn resolve_listed<'a>(
        &'a self,
        listed: &'a ListedIntent,
        options: &'a RecoverOptions,
    ) -> BoxFuture<'a, Result<Resolution, LanceEngineError>> {
        Box::pin(async move {
            let intent = match &listed.intent {
                Ok(intent) => intent,
                Err(why) => {
                    return Ok(Resolution::Pending {
                        reason: format!(
                            "the intent cannot be read ({why}): restore it from a backup; only once no process of its writer can run and no version carries its write, move it out of `_lake/intents/`"
                        ),
                    })
                }
            };
            if listed.revoked.is_none() && options.wait != Wait::Revoke {
                let Some(due) = self.due_at(listed) else {
                    return Ok(Resolution::Pending { reason: "its deadline is out of range".into() });
                };
                loop {
                    let now = self.store_clock().read(self.store()).await?.store_now;
                    if now >= due {
                        break;
                    }
                    if options.wait == Wait::No {
                        return Ok(Resolution::Pending {
                            reason: format!(
                                "its writer may still be running: it can be resolved from {} (its deadline, by the store's clock); run `refs recover` after that time, or run it allowing it to wait (this run did not wait)",
                                crate::engine::fmt_time(due)
                            ),
                        });
                    }
                    if let Some(progress) = &options.progress {
                        progress(&format!(
                            "waiting until {} (store clock) for write intent {} of table `{}` ({}, written {}): its writer may still be running (recovery without waiting reports and stops instead)",
                            crate::engine::fmt_time(due),
                            listed.key,
                            listed.table,
                            intent.operation.as_str(),
                            crate::engine::fmt_time(listed.last_modified)
                        ));
                    }
                    let wait = (due - now).to_std().unwrap_or_default().min(WAIT_STEP);
                    tokio::time::sleep(wait + Duration::from_millis(20)).await;
                }
            }
            // Its writer (or another resolver) may have ended it meanwhile: nothing to decide.
            if self.store().head(&listed.key).await?.is_none() {
                let landed = self.landed_since(&listed.table, intent.read_version, &listed.transaction_uuids()).await?;
                let latest = self.manifest_times(&listed.table).await?.keys().next_back().copied().unwrap_or(0);
                return Ok(
                    landed.map_or(Resolution::Abandoned { proof: latest }, |version| Resolution::Committed { version })
                );
            }
            intents::revoke(self.store(), &listed.table, &listed.write_id).await?;
            failpoint::step("resolve.after_revoke")?;
            let proof = match self.fence(&listed.table, &listed.write_id, intent).await {
                Ok(Some(proof)) => proof,
                Ok(None) => return self.conclude_lineage_gone(listed, intent).await,
                Err(e) => {
                    return Ok(Resolution::Pending {
                        reason: format!("its fence could not be committed ({e}); run `refs recover` again"),
                    })
                }
            };
            self.conclude(listed, intent, &[], proof).await
        })
    }

    /// Before a change to `table` commits (step 1 of the protocol): journals the versions after
    /// the registry pin that recovery may journal (a writer killed after its commit), and revokes
    /// the intents of `table` that are revoked already or due by the store's clock. Returns those
    /// intents: the change's own commit, made after their revocation, is their fence
    /// ([`LanceEngine::finish_revoked`]). A failure is logged: it never stops the change.
    pub(crate) async fn before_commit(&self, table: &str) -> Vec<ListedIntent> {
        if let Err(e) = self.recover_unjournaled(table, Versions::AfterPin).await {
            tracing::warn!(table, "could not look for versions without a journal entry: {e}");
        }
        let listed = match intents::list(self.store(), Some(table)).await {
            Ok((listed, _)) => listed,
            Err(e) => {
                tracing::warn!(table, "could not list the write intents: {e}");
                return Vec::new();
            }
        };
        let mut now = StoreNow::default();
        let mut revoked = Vec::new();
        for intent in listed {
            if intent.intent.is_err() {
                continue;
            }
            if intent.revoked.is_none() {
                // This host's clock only filters (a host clock behind only delays); the store's
                // clock decides.
                let due = self.due_at(&intent);
                if due.is_none_or(|due| Utc::now() < due) {
                    continue;
                }
                match now.get(self).await {
                    Ok(now) if due.is_some_and(|due| now >= due) => {}
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::warn!(table, "could not read the store's clock: {e}");
                        return revoked;
                    }
                }
                if let Err(e) = intents::revoke(self.store(), &intent.table, &intent.write_id).await {
                    tracing::warn!(intent = %intent.key, "could not revoke a write intent past its deadline: {e}");
                    continue;
                }
            }
            revoked.push(intent);
        }
        revoked
    }

    /// After a change committed `proof` (written after every intent in `revoked` was revoked):
    /// concludes those intents with `proof` as their fence. A failure is logged: the intent stays
    /// revoked, for the next resolver.
    pub(crate) async fn finish_revoked(&self, revoked: &[ListedIntent], proof: u64) {
        for listed in revoked {
            let Ok(intent) = &listed.intent else { continue };
            match self.conclude(listed, intent, &[], proof).await {
                Ok(resolution) => {
                    tracing::info!(intent = %listed.key, ?resolution, "resolved a write intent past its deadline")
                }
                Err(e) => tracing::warn!(intent = %listed.key, "could not resolve a revoked write intent: {e}"),
            }
        }
    }

    /// The writer's own resolution after its commit failed once a manifest write that may land
    /// was let through (`uuids`: the transactions of those writes): revokes its intent, fences,
    /// concludes. Returns the version the write landed as, or the error that says the truth:
    /// [`LanceEngineError::NotCommitted`] when it was proven not to land,
    /// [`LanceEngineError::CommitUncertain`] when it may still land (the intent stays, revoked).
    pub(crate) async fn settle(
        &self,
        write: &IntentWrite,
        uuids: &[String],
        failure: LanceEngineError,
    ) -> Result<u64, LanceEngineError> {
        let uncertain = |reason: String, failure: LanceEngineError| LanceEngineError::CommitUncertain {
            table: write.table.clone(),
            intent: write.key.clone(),
            root: self.store().display_root(),
            reason,
            source: Box::new(failure),
        };
        let resolved = async {
            intents::revoke(self.store(), &write.table, &write.write_id).await?;
            failpoint::step("resolve.after_revoke")?;
            let (listed, _) = intents::list(self.store(), Some(&write.table)).await?;
            let Some(listed) = listed.into_iter().find(|i| i.write_id == write.write_id) else {
                // Another resolver concluded it already.
                return self.landed_since(&write.table, write.read_version, uuids).await.map(|found| match found {
                    Some(version) => Resolution::Committed { version },
                    None => Resolution::Abandoned { proof: 0 },
                });
            };
            let intent = match &listed.intent {
                Ok(intent) => intent.clone(),
                Err(why) => return Ok(Resolution::Pending { reason: format!("the intent cannot be read: {why}") }),
            };
            match self.fence(&write.table, &write.write_id, &intent).await {
                Ok(Some(proof)) => self.conclude(&listed, &intent, uuids, proof).await,
                Ok(None) => self.conclude_lineage_gone(&listed, &intent).await,
                Err(e) => Ok(Resolution::Pending { reason: format!("its fence could not be committed: {e}") }),
            }
        }
        .await;
        match resolved {
            Ok(Resolution::Committed { version }) => {
                tracing::warn!(table = %write.table, version, "the commit reported as failed ({failure}) landed; journaled");
                Ok(version)
            }
            Ok(Resolution::Abandoned { proof }) => {
                Err(LanceEngineError::NotCommitted { table: write.table.clone(), proof, source: Box::new(failure) })
            }
            Ok(Resolution::CleanedUp { proof, versions }) => Err(LanceEngineError::OutcomeLost {
                table: write.table.clone(),
                proof,
                versions,
                source: Box::new(failure),
            }),
            Ok(Resolution::Pending { reason }) => Err(uncertain(reason, failure)),
            Err(e) => Err(uncertain(format!("resolving it failed: {e}"), failure)),
        }
    }

    /// Steps 3 and 4 of resolution (module documentation), with `proof` the fence: a version
    /// written after the intent was revoked.
    async fn conclude(
        &self,
        listed: &ListedIntent,
        intent: &WriteIntent,
        uuids: &[String],
        proof: u64,
    ) -> Result<Resolution, LanceEngineError> {
        failpoint::step("resolve.after_fence")?;
        let table = listed.table.as_str();
        let read_version = intent.read_version;
        let left: Vec<String> = self
            .recover_unjournaled(table, Versions::Range(read_version, proof))
            .await?
            .into_iter()
            .filter_map(|v| match v.outcome {
                VersionRecovery::Left { reason } => Some(format!("version {} ({reason})", v.version)),
                VersionRecovery::Journaled { .. } => None,
            })
            .collect();
        if !left.is_empty() {
            return Ok(Resolution::Pending {
                reason: format!(
                    "the write can no longer land, but {} of table `{table}` has no journal entry; the intent stays (and keeps its objects) until it is journaled",
                    left.join("; ")
                ),
            });
        }
        failpoint::step("resolve.after_journal")?;
        let mut claimed = listed.transaction_uuids();
        claimed.extend(uuids.iter().cloned());
        let landed = self.carrying(table, read_version, proof, &claimed, &listed.write_id).await?;
        let existing = self.manifest_times(table).await?;
        let gone: Vec<u64> = (read_version.saturating_add(1)..=proof).filter(|v| !existing.contains_key(v)).collect();
        self.store().delete(&listed.key).await?;
        failpoint::step("resolve.after_intent_removed")?;
        intents::remove(self.store(), table, &listed.write_id).await?;
        self.discard_unnamed_log(table, &listed.write_id, read_version, proof).await?;
        Ok(match landed {
            Some(version) => Resolution::Committed { version },
            None if gone.is_empty() => Resolution::Abandoned { proof },
            None => Resolution::CleanedUp { proof, versions: gone },
        })
    }

    /// An intent of a branch lineage that is not registered (deleted, or its creation never
    /// finished): nothing of it is retained by the lake's journal. Whatever of the branch is
    /// left (a version of a killed creation, or a manifest write that lands after the deletion)
    /// is a lineage problem of its table (a branch folder GC cannot see: it plans nothing) until
    /// `lake branch delete` removes it: safe. The intent and its log go.
    async fn conclude_lineage_gone(
        &self,
        listed: &ListedIntent,
        intent: &WriteIntent,
    ) -> Result<Resolution, LanceEngineError> {
        let table = listed.table.as_str();
        if split_lineage(table).1.is_none() {
            let reason = match intent.schema {
                None => format!(
                    "table `{table}` has no version and the intent records no schema to fence its create with (written by an earlier build): once no process of that writer can run, move the intent out of `_lake/intents/`"
                ),
                Some(_) => format!("table `{table}` has no version and its fence could not create one"),
            };
            return Ok(Resolution::Pending { reason });
        }
        intents::remove(self.store(), table, &listed.write_id).await?;
        crate::journaling::discard_log(self.store(), &reference_log_key(table, &listed.write_id)).await;
        Ok(Resolution::Abandoned { proof: 0 })
    }

    /// Removes the reference log of write `write_id` unless the entry of a version in
    /// `(after, upto]` names it (a head naming the write's own log).
    async fn discard_unnamed_log(
        &self,
        table: &str,
        write_id: &str,
        after: u64,
        upto: u64,
    ) -> Result<(), LanceEngineError> {
        let key = reference_log_key(table, write_id);
        if self.store().head(&key).await?.is_none() {
            return Ok(());
        }
        for version in after.saturating_add(1)..=upto {
            if let Some(bytes) = self.store().get(&sidecar_key(table, version)).await? {
                if bytes.windows(write_id.len()).any(|w| w == write_id.as_bytes()) {
                    return Ok(());
                }
            }
        }
        self.store().delete(&key).await?;
        Ok(())
    }

    /// The first version in `(after, upto]` whose transaction is one of `uuids` or carries the
    /// marker of write `write_id` (reporting only: which version was the write's).
    async fn carrying(
        &self,
        table: &str,
        after: u64,
        upto: u64,
        uuids: &[String],
        write_id: &str,
    ) -> Result<Option<u64>, LanceEngineError> {
        if upto <= after || !self.table_exists(table).await? {
            return Ok(None);
        }
        let ds = self.open(table).await?;
        for version in after + 1..=upto {
            let Ok(Some(tx)) = ds.read_transaction_by_version(version).await else { continue };
            if uuids.contains(&tx.uuid) || CommitMarker::of(&tx).is_some_and(|m| m.write_id == write_id) {
                return Ok(Some(version));
            }
        }
        Ok(None)
    }

    /// A version after `after` carrying one of `uuids`, among those that exist now.
    async fn landed_since(&self, table: &str, after: u64, uuids: &[String]) -> Result<Option<u64>, LanceEngineError> {
        let latest = self.manifest_times(table).await?.keys().next_back().copied().unwrap_or(0);
        self.carrying(table, after, latest, uuids, "").await
    }

    /// Commits a fence on `table`, which has a version: a content-preserving config change
    /// (`lake.fence` = `value`), journaled as an empty entry, with no resolution first. Returns
    /// its version.
    ///
    /// # Errors
    /// Lance, entry and registry errors.
    pub(crate) async fn commit_fence(&self, table: &str, value: &str) -> Result<u64, LanceEngineError> {
        let (name, value) = (table.to_string(), value.to_string());
        let run: crate::commit::change::InLanceCall =
            Box::new(move |mut ds| {
                Box::pin(async move {
                    ds.update_config([("lake.fence", value.as_str())])
                        .await
                        .map_err(|source| LanceEngineError::Lance { table: name, action: "fence", source })?;
                    Ok(Made { dataset: ds, rows: 0 })
                })
            });
        let change =
            Change::in_lance(table, "fence", table, None, Journal::ContentPreserving, run).without_resolution();
        self.commit(change).await.map(|c| c.version)
    }

    /// Commits a fence on `table` for write `write_id` (module documentation) and returns its
    /// version: a content-preserving config change (`lake.fence` = the write id) when the
    /// lineage has a version; for a create that never landed, an empty version 1 with the schema
    /// the intent records (when another create took version 1, that version). `None` for a
    /// branch lineage that was deleted. Bounded by the engine's fence timeout.
    ///
    /// # Errors
    /// Lance errors; a timeout; [`LanceEngineError::InvalidInput`] for a table without a version
    /// whose intent records no schema.
    async fn fence(&self, table: &str, write_id: &str, intent: &WriteIntent) -> Result<Option<u64>, LanceEngineError> {
        let commit = async {
            // A branch that is not registered was deleted, or its creation never finished: no
            // commit into it can be journaled (the protocol refuses), so there is nothing to
            // fence; what is left of it is a lineage problem of its table until
            // `lake branch delete` removes it.
            if split_lineage(table).1.is_some() && !self.is_registered(table).await? {
                return Ok(None);
            }
            if self.table_exists(table).await? {
                return self.commit_fence(table, write_id).await.map(Some);
            }
            let Some(schema) = &intent.schema else {
                return Err(LanceEngineError::InvalidInput(format!(
                    "table `{table}` has no version and the write intent records no schema to create one with"
                )));
            };
            let schema = lake_common::intent::schema_from_hex(schema)
                .map_err(|e| LanceEngineError::InvalidInput(format!("the write intent's schema: {e}")))?;
            let empty: Box<dyn arrow_array::RecordBatchReader + Send> =
                Box::new(arrow_array::RecordBatchIterator::new(Vec::new(), schema));
            let uri = self.dataset_uri(table);
            let params = self.write_params(lance::dataset::WriteMode::Create);
            let transaction = lance::dataset::InsertBuilder::new(uri.as_str())
                .with_params(&params)
                .execute_uncommitted_stream(empty)
                .await
                .map_err(|source| LanceEngineError::Lance { table: table.into(), action: "fence", source })?;
            let empty = Journal::Snapshot(lake_common::ReferenceCounts::new());
            let change =
                Change::staged(table, "fence", transaction, None, empty).creating(Vec::new()).without_resolution();
            match self.commit(change).await {
                Ok(committed) => Ok(Some(committed.version)),
                // Version 1 is taken (the write's own create, or another): it is the fence.
                Err(LanceEngineError::ConcurrentCreate { .. }) => Ok(Some(1)),
                Err(e) => Err(e),
            }
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
