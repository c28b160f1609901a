//! Version history operations: restore an older version, tags.
//!
//! A restore commits an older version's content as the new latest version; its journal entry is
//! a snapshot of that version's references, computed from the journal (not a scan). While the
//! restore runs, the source version is protected from version cleanup by a temporary Lance tag
//! `lake-restore-<ULID>` (Lance's cleanup never removes tagged versions), so its data files
//! cannot vanish under it, nor (GC keeping every retained version's references) its objects;
//! and a write intent names the references it restores (`crate::commit`), so they stay
//! live should the commit land after the tag is gone.
//!
//! A restore killed between its tag and its end leaves the tag, which would pin the old version
//! (and its objects) for good. Such a tag is **stale** once it is older than
//! [`restore_tag_stale_after`] (by the store's clock: `lake cleanup`, or this host's: the next
//! restore of the lineage), and then it is removed. Staleness is a liveness rule, not a safety
//! one: a restore publishes only while its tag still names its source (the write protocol
//! checks the tag's file right before each manifest write), and whoever removes a stale tag
//! commits a fence right after (`LanceEngine::remove_stale_restore_tags`), before any version
//! is cleaned up. A restore that saw its tag before it was removed targets a version slot no
//! later than the fence's, so it either landed before the fence (while its source was still
//! retained) or never will (docs/protocol.md, "Preconditions"). A live restore whose tag was
//! judged stale too early fails cleanly ("nothing was committed"). A stale tag is reported by
//! `lake versions` and `lake gc` until it is removed.
//!
//! Tags are shared by a table and its branches in Lance 14 (one `_refs/tags/` folder at the
//! table's root), each recording the branch of the version it names (`TagContents::branch`:
//! `None` or `main` for the main line). The engine shows, creates and deletes only the tags of
//! the lineage it is given (`t` or `t@b`); a tag of another lineage is refused with a message
//! naming where it points. Lance's cleanup of a lineage keeps only that lineage's tagged
//! versions (`dataset/cleanup.rs`: tags are filtered by the current branch), and GC's retained
//! versions are the manifests that exist: a branch's tag never pins the main line's version of
//! the same number, nor the reverse.

use crate::commit::change::{Adds, Change, Journal, Precondition};
use crate::commit::default_commit_deadline;
use crate::engine::{CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::scan::writable_columns;
use chrono::{DateTime, Utc};
use lake_common::intent::IntentOperation;
use lake_common::ReferenceCounts;
use lake_engine::{EngineError, LineageProblem};
use lake_store::descriptor::LakeDescriptor;
use lake_store::failpoint;
use lake_store::guard::PublicationGuard;
use lake_store::layout::{branch_lineage, dataset_key, split_lineage};
use lance::dataset::refs::TagContents;
use lance::dataset::transaction::{Operation, Transaction};
use lance::Dataset;
use std::sync::Arc;
use std::time::Duration;

/// Prefix of the temporary tags that protect a restore's source version.
pub const RESTORE_TAG_PREFIX: &str = "lake-restore-";

/// A restore tag (`lake-restore-<ULID>`) of a lineage.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RestoreTag {
    /// The lineage (`t` or `t@b`).
    pub table: String,
    /// The tag's name.
    pub name: String,
    /// The version it pins.
    pub version: u64,
    /// When its restore began (the ULID in its name, minted by the restoring host's clock), UTC.
    pub started: DateTime<Utc>,
    /// True when no restore can still commit under it ([`restore_tag_stale_after`]): a restore
    /// killed after tagging; `lake cleanup` removes it.
    pub stale: bool,
}

/// How old a restore tag must be to be stale: the lake's policy floor `min_age` plus twice the
/// publication guard's margin (`min_age / 4`) plus the restore's commit deadline
/// ([`default_commit_deadline`]: the margin clamped to 30 s..5 min), so 95 minutes for a
/// one-hour floor and 36 seconds for a 4-second one: long past any restore that still runs. A
/// liveness rule (see the module documentation): a restore whose tag is removed earlier fails
/// cleanly.
pub fn restore_tag_stale_after(policy: &LakeDescriptor) -> Duration {
    let guard = PublicationGuard::from_policy(policy);
    policy.min_age().saturating_add(guard.margin().saturating_mul(2)).saturating_add(default_commit_deadline(&guard))
}

/// The ULID time of a restore tag's name; `None` for any other tag.
fn restore_tag_started(name: &str) -> Option<DateTime<Utc>> {
    let text = name.strip_prefix(RESTORE_TAG_PREFIX)?.to_ascii_uppercase();
    let ulid = ulid::Ulid::from_string(&text).ok()?;
    DateTime::<Utc>::from_timestamp_millis(i64::try_from(ulid.timestamp_ms()).ok()?)
}

/// The lineage a tag of `table`'s Lance dataset names (Lance records `None` or `main` for the
/// main line, the branch's name otherwise).
pub fn tag_lineage(table: &str, contents: &TagContents) -> String {
    let main = split_lineage(table).0;
    match contents.branch.as_deref().filter(|b| *b != lance::dataset::refs::MAIN_BRANCH) {
        None => main.to_string(),
        Some(branch) => branch_lineage(main, branch),
    }
}

fn lance_err<'a>(table: &'a str, action: &'static str) -> impl Fn(lance::Error) -> LanceEngineError + 'a {
    move |source| LanceEngineError::Lance { table: table.into(), action, source }
}

impl LanceEngine {
    /// The reference counts of `table` at `version`, replayed from the journal: the journal is
    /// streamed into sorted runs (bounded by the engine's memory budget); the counts returned
    /// are held in memory (one entry per identity referenced at `version`).
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] naming the lineage problem when the journal cannot
    /// reach `version` (a missing or undecodable entry at or below it).
    pub async fn journal_counts_at(&self, table: &str, version: u64) -> Result<ReferenceCounts, LanceEngineError> {
        let crate::live::LanceSnapshot { lineage, journal } = self.lineage_and_journal(table).await?;
        if version > lineage.latest_version {
            return Err(LanceEngineError::InvalidInput(format!(
                "table `{table}` has no version {version} (latest is {})",
                lineage.latest_version
            )));
        }
        let unreachable = |reason: String| {
            lineage_error(table, LineageProblem::Inconsistent { table: table.into(), version, reason })
        };
        // The replay's base for `version` alone (the newest snapshot at or below it), and a
        // whole chain from it to `version`: checked by the replay itself.
        let base = journal
            .base_for(version)
            .ok_or_else(|| unreachable("no snapshot or version 1 in the journal at or below it".into()))?;
        let mut stream = journal.retained_counts(base, version, &[version]).map_err(|e| unreachable(e.to_string()))?;
        let mut counts = ReferenceCounts::new();
        let mut at = Vec::new();
        while let Some(identity) = stream.next_counts(&mut at).map_err(|e| unreachable(e.to_string()))? {
            if let Some((_, n)) = at.first() {
                counts.add(identity, *n);
            }
        }
        Ok(counts)
    }

    /// Restores `version` of `table` as a new latest version, journaled as a snapshot of
    /// `version`'s references, through the write protocol (`crate::commit`). Stale restore tags
    /// of the lineage (restores killed earlier) are removed first
    /// ([`LanceEngine::remove_stale_restore_tags`], by this host's clock).
    ///
    /// The restored version's schema must be one the engine can journal, and every reference it
    /// holds is published again, so each must pass the rule for new references (external or a
    /// managed key: [`check_republished`]). Restoring a version whose schema the engine can read
    /// is a way out of a latest version whose schema it cannot.
    ///
    /// # Errors
    /// Before the commit (nothing committed): [`LanceEngineError::InvalidInput`] when `version`
    /// no longer exists, its journal is incomplete, it references an in-root key that is not
    /// managed, or its tag was removed meanwhile (judged stale): run it again; [`LanceEngineError::UnreadableTable`] for its schema;
    /// Lance errors. After it: sidecar and registry errors. The protecting tag is removed on
    /// every path.
    pub async fn restore(&self, table: &str, version: u64) -> Result<CommitOutcome, LanceEngineError> {
        let ds = self.open(table).await?;
        self.remove_stale_restore_tags(table, Utc::now()).await?;
        let minted = ulid::Ulid::new();
        let tag = format!("{RESTORE_TAG_PREFIX}{}", minted.to_string().to_lowercase());
        ds.tags().create(&tag, version).await.map_err(lance_err(table, "tag the restore source"))?;
        // A restore killed here leaves its tag (stale once older than the deadline bounds).
        failpoint::hit("restore.after_tag")?;
        let result = self.restore_tagged(&ds, table, version, &tag).await;
        let untag = ds.tags().delete(&tag).await;
        let outcome = result?;
        // The version is committed: a tag left behind is stale and removed by a later restore
        // (`remove_stale_restore_tags`), so its removal failing does not fail the restore (a
        // caller retrying it would restore twice).
        if let Err(e) = untag {
            tracing::warn!(table, tag = %tag, error = %e, "the restore tag could not be removed; a later restore removes it");
        }
        Ok(outcome)
    }

    /// The restore under its tag `tag`: the source's references replayed from the journal, then
    /// the commit through the write protocol, whose gate publishes only while the tag still names
    /// the source (`lake cleanup` removes a stale tag and fences before it removes versions).
    async fn restore_tagged(
        &self,
        ds: &Dataset,
        table: &str,
        version: u64,
        tag: &str,
    ) -> Result<CommitOutcome, LanceEngineError> {
        let counts = self.journal_counts_at(table, version).await?;
        let source = ds.checkout_version(version).await.map_err(lance_err(table, "checkout"))?;
        writable_columns(&source, table)?;
        check_republished(table, version, &counts)?;
        let latest = Arc::new(self.open(table).await?);
        let read_version = latest.version().version;
        let transaction = Transaction::new(read_version, Operation::Restore { version }, None);
        let ids: Vec<_> = counts.iter().map(|(id, _)| id.clone()).collect();
        // The intent names the restored references: the tag keeps the source version's data, the
        // intent its objects, should the commit land after the tag is gone. They are held by a
        // retained version (the tagged source): no guard.
        let adds = Adds::identities(IntentOperation::Restore, read_version, ids, Vec::new()).restoring(version);
        let tagged = Precondition::Tagged {
            key: format!("{}/_refs/tags/{tag}.json", dataset_key(split_lineage(table).0)),
            name: tag.to_string(),
            version,
        };
        let change = Change::staged(table, "restore", transaction, Some(latest), Journal::Snapshot(counts))
            .adding(adds)
            .requiring(tagged);
        let committed = self.commit(change).await?;
        Ok(committed.outcome(table, 0))
    }

    /// The restore tags of lineage `table`, each judged stale or not at `now` (this host's clock
    /// or the store's, UTC; [`restore_tag_stale_after`]), by name.
    ///
    /// # Errors
    /// Lance and storage errors.
    pub async fn restore_tags(&self, table: &str, now: DateTime<Utc>) -> Result<Vec<RestoreTag>, LanceEngineError> {
        let ds = self.open(table).await?;
        let policy = LakeDescriptor::load(self.store()).await?;
        let stale_after = chrono::Duration::from_std(restore_tag_stale_after(&policy)).unwrap_or(chrono::Duration::MAX);
        let mut found: Vec<RestoreTag> = self
            .lineage_tags(&ds, table)
            .await?
            .into_iter()
            .filter_map(|(name, contents)| {
                let started = restore_tag_started(&name)?;
                let stale = now.signed_duration_since(started) >= stale_after;
                Some(RestoreTag { table: table.into(), name, version: contents.version, started, stale })
            })
            .collect();
        found.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(found)
    }

    /// Removes the stale restore tags of lineage `table` at `now` (see
    /// [`LanceEngine::restore_tags`]), then commits a fence when it removed any (see the module
    /// documentation), and returns them: the versions they pinned are then retained only by
    /// Lance's own rules (latest, tagged by a user, younger than a cleanup's horizon), so
    /// `lake cleanup` can remove them and GC collect what only they referenced.
    ///
    /// # Errors
    /// Lance and storage errors.
    pub async fn remove_stale_restore_tags(
        &self,
        table: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<RestoreTag>, LanceEngineError> {
        let stale: Vec<RestoreTag> = self.restore_tags(table, now).await?.into_iter().filter(|t| t.stale).collect();
        if stale.is_empty() {
            return Ok(stale);
        }
        let ds = self.open(table).await?;
        for tag in &stale {
            match ds.tags().delete(&tag.name).await {
                Ok(()) | Err(lance::Error::RefNotFound { .. }) => {
                    tracing::info!(table, tag = %tag.name, version = tag.version, "removed a stale restore tag");
                }
                Err(source) => {
                    return Err(LanceEngineError::Lance {
                        table: table.into(),
                        action: "remove a stale restore tag",
                        source,
                    })
                }
            }
        }
        // A restore still running under one of them saw its tag before each manifest write: a
        // version written now is after the slot any such write targets, so none of them can
        // land once it exists (docs/protocol.md, "Preconditions").
        self.commit_fence(table, "stale-restore-tags").await?;
        Ok(stale)
    }

    /// The tags of lineage `table`, by name (Lance lists the tags of the table and all its
    /// branches; see the module documentation).
    pub(crate) async fn lineage_tags(
        &self,
        ds: &Dataset,
        table: &str,
    ) -> Result<Vec<(String, TagContents)>, LanceEngineError> {
        let mut tags: Vec<(String, TagContents)> = ds
            .tags()
            .list()
            .await
            .map_err(lance_err(table, "list tags"))?
            .into_iter()
            .filter(|(_, contents)| tag_lineage(table, contents) == table)
            .collect();
        tags.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(tags)
    }

    /// The tag `name` of lineage `table` (the version it names).
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] when the tag names a version of another lineage of the
    /// table (where it points); Lance errors (no such tag).
    pub async fn tag_of_lineage(&self, table: &str, name: &str) -> Result<TagContents, LanceEngineError> {
        let ds = self.open(table).await?;
        let contents = ds.tags().get(name).await.map_err(lance_err(table, "read tag"))?;
        let lineage = tag_lineage(table, &contents);
        if lineage != table {
            return Err(LanceEngineError::InvalidInput(format!(
                "tag `{name}` names version {} of `{lineage}`, not a version of `{table}` (a table and its branches share tag names); nothing was changed. Name the table `{lineage}` (also to delete the tag)",
                contents.version
            )));
        }
        Ok(contents)
    }

    /// Tags `version` of lineage `table` as `name` (a tagged version is retained: cleanup skips
    /// it, and GC keeps what it references).
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] when a tag of that name exists (on this lineage or
    /// another of the table: names are shared), naming where it points, or when `name` starts
    /// with [`RESTORE_TAG_PREFIX`] in any letter case (reserved for restores' own tags); Lance
    /// errors (an invalid name, a missing version).
    pub async fn create_tag(&self, table: &str, version: u64, name: &str) -> Result<(), LanceEngineError> {
        // A restore's own tags are judged stale by the time in their name and removed: a user's
        // tag under that prefix would be removed as one, and its version cleaned up.
        if name.to_ascii_lowercase().starts_with(RESTORE_TAG_PREFIX) {
            return Err(LanceEngineError::InvalidInput(format!(
                "tag names starting with `{RESTORE_TAG_PREFIX}` are reserved for restores' own tags (removed once stale); nothing was tagged. Choose another name"
            )));
        }
        let ds = self.open(table).await?;
        if let Ok(existing) = ds.tags().get(name).await {
            return Err(LanceEngineError::InvalidInput(format!(
                "tag `{name}` already exists: it names version {} of `{}` (a table and its branches share tag names); nothing was tagged. Choose another name, or delete that tag first",
                existing.version,
                tag_lineage(table, &existing)
            )));
        }
        ds.tags().create(name, version).await.map_err(lance_err(table, "create tag"))
    }

    /// Deletes tag `name` of lineage `table`.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] when the tag names a version of another lineage (it
    /// is left alone; the message says which, [`LanceEngine::tag_of_lineage`]); Lance errors (an
    /// unknown tag).
    pub async fn delete_tag(&self, table: &str, name: &str) -> Result<(), LanceEngineError> {
        self.tag_of_lineage(table, name).await?;
        let ds = self.open(table).await?;
        ds.tags().delete(name).await.map_err(lance_err(table, "delete tag"))
    }
}

/// Checks that every reference of `counts` (the references of `table` at `version`, about to be
/// published again by a restore or a new branch) is external or a managed key, the rule for
/// new references (`lake_common::managed`).
///
/// # Errors
/// [`LanceEngineError::InvalidInput`] naming the first reference that is not.
pub(crate) fn check_republished(table: &str, version: u64, counts: &ReferenceCounts) -> Result<(), LanceEngineError> {
    for (identity, _) in counts.iter() {
        if let Err(e) = lake_common::check_new_reference(&identity.uri, &identity.uri) {
            return Err(LanceEngineError::InvalidInput(format!(
                "table `{table}` version {version} references what no write may publish again: {e}; nothing was committed"
            )));
        }
    }
    Ok(())
}

fn lineage_error(table: &str, problem: LineageProblem) -> LanceEngineError {
    LanceEngineError::InvalidInput(EngineError::Lineage { table: table.into(), problems: vec![problem] }.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_tags_carry_their_start_and_go_stale_after_the_floor_and_margin() {
        let ulid = ulid::Ulid::new();
        let name = format!("{RESTORE_TAG_PREFIX}{}", ulid.to_string().to_lowercase());
        let started = restore_tag_started(&name).unwrap();
        assert_eq!(started.timestamp_millis() as u64, ulid.timestamp_ms());
        assert!(restore_tag_started("release-1").is_none());
        assert!(restore_tag_started("lake-restore-notaulid").is_none());
        let policy = LakeDescriptor {
            format_version: lake_store::descriptor::DESCRIPTOR_FORMAT_VERSION,
            created_at: "2026-01-01T00:00:00.000Z".into(),
            lake_id: None,
            gc: lake_store::descriptor::GcPolicy { min_age_seconds: 3600 },
        };
        // 3600 s + 2 x 900 s + a 300 s deadline (the 900 s margin clamped to 5 minutes).
        assert_eq!(restore_tag_stale_after(&policy), Duration::from_secs(5700));
    }
}
