//! Version history operations: restore an older version, tags.
//!
//! A restore commits an older version's content as the new latest version; its journal entry is
//! a snapshot of that version's references, computed from the journal (not a scan). While the
//! restore runs, the source version is protected from version cleanup by a temporary Lance tag
//! `lake-restore-<ULID>` (Lance's cleanup never removes tagged versions), so its data files
//! cannot vanish under it, nor (GC keeping every retained version's references) its objects;
//! and a write intent names the references it restores (`crate::intent_commit`), so they stay
//! live should the commit land after the tag is gone.
//!
//! A restore killed between its tag and its end leaves the tag, which would pin the old version
//! (and its objects) for good. Such a tag is **stale** once no restore can still commit under
//! it, and then `lake cleanup` (and the next restore of the lineage) removes it. What bounds a
//! restore: right before its commit it checks that its tag is younger than the publication
//! guard's limit (`min_age - margin` of the lake's policy floor, by the restoring host's clock,
//! against the tag's ULID minted by the same clock) and still exists, and its commit goes
//! through the write intent's gate, which publishes no manifest after the commit deadline
//! ([`crate::intent_commit::default_commit_deadline`], counted from before that check). With
//! the guard's assumption that a host's clock and the store's differ by less than `margin` (so
//! two hosts' clocks by less than `2 x margin`), a restore tag older than
//! `min_age + 2 x margin + deadline` by the clock of any host or the store
//! ([`restore_tag_stale_after`]) belongs to a restore that has committed, failed, or can no
//! longer commit (a manifest write already in flight then targets a version that exists, or is
//! the restore's own: `docs/write-intents.md`). A stale tag is reported by `lake versions` and `lake gc` until it is
//! removed.
//!
//! Tags are shared by a table and its branches in Lance 14 (one `_refs/tags/` folder at the
//! table's root), each recording the branch of the version it names (`TagContents::branch`:
//! `None` or `main` for the main line). The engine shows, creates and deletes only the tags of
//! the lineage it is given (`t` or `t@b`); a tag of another lineage is refused with a message
//! naming where it points. Lance's cleanup of a lineage keeps only that lineage's tagged
//! versions (`dataset/cleanup.rs`: tags are filtered by the current branch), and GC's retained
//! versions are the manifests that exist: a branch's tag never pins the main line's version of
//! the same number, nor the reverse.

use crate::engine::{rebased, CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::intent_commit::{default_commit_deadline, Committed, IntentFacts, IntentRefs};
use crate::scan::writable_columns;
use chrono::{DateTime, Utc};
use lake_common::intent::IntentOperation;
use lake_common::{ObjectReferenceDelta, ReferenceCounts};
use lake_engine::{EngineError, LineageProblem};
use lake_store::descriptor::LakeDescriptor;
use lake_store::failpoint;
use lake_store::guard::PublicationGuard;
use lake_store::layout::{branch_lineage, split_lineage};
use lance::dataset::refs::TagContents;
use lance::Dataset;
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
/// one-hour floor and 36 seconds for a 4-second one. A restore starts its commit only while its
/// tag is younger than `min_age - margin` (by its own clock), its intent's gate refuses a
/// manifest write past the deadline, and any host's clock differs from the store's by less than
/// `margin` (the guard's assumption; see the module documentation), so from another host's
/// clock it has landed or stopped by then.
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
    /// `version`'s references. Stale restore tags of the lineage (restores killed earlier) are
    /// removed first ([`LanceEngine::remove_stale_restore_tags`], by this host's clock).
    ///
    /// The restored version's schema must be one the engine can journal, and every reference it
    /// holds is published again, so each must pass the rule for new references (external or a
    /// managed key: [`check_republished`]). Restoring a version whose schema the engine can read
    /// is a way out of a latest version whose schema it cannot.
    ///
    /// # Errors
    /// Before the commit (nothing committed): [`LanceEngineError::InvalidInput`] when `version`
    /// no longer exists, its journal is incomplete, it references an in-root key that is not
    /// managed, or the restore ran past its deadline (its tag older than the publication guard's
    /// limit, or removed): run it again; [`LanceEngineError::UnreadableTable`] for its schema;
    /// Lance errors. After it: sidecar and registry errors. The protecting tag is removed on
    /// every path.
    pub async fn restore(&self, table: &str, version: u64) -> Result<CommitOutcome, LanceEngineError> {
        let ds = self.open(table).await?;
        let policy = LakeDescriptor::load(self.store()).await?;
        let guard = PublicationGuard::from_policy(&policy);
        self.remove_stale_restore_tags(table, Utc::now()).await?;
        let minted = ulid::Ulid::new();
        let tag = format!("{RESTORE_TAG_PREFIX}{}", minted.to_string().to_lowercase());
        ds.tags().create(&tag, version).await.map_err(lance_err(table, "tag the restore source"))?;
        // A restore killed here leaves its tag (stale once older than the deadline bounds).
        failpoint::hit("restore.after_tag")?;
        let result = self.restore_tagged(&ds, table, version, &tag, &guard).await;
        let untag = ds.tags().delete(&tag).await;
        let outcome = result?;
        untag.map_err(lance_err(table, "remove the restore tag"))?;
        Ok(outcome)
    }

    /// The restore under its tag `tag`: replay, deadline check, commit within the margin,
    /// journal.
    async fn restore_tagged(
        &self,
        ds: &Dataset,
        table: &str,
        version: u64,
        tag: &str,
        guard: &PublicationGuard,
    ) -> Result<CommitOutcome, LanceEngineError> {
        let counts = self.journal_counts_at(table, version).await?;
        let source = ds.checkout_version(version).await.map_err(lance_err(table, "checkout"))?;
        writable_columns(&source, table)?;
        check_republished(table, version, &counts)?;
        // The deadline: a tag older than the guard's limit may be judged stale (and removed)
        // while this commit is in flight; refuse instead, and commit within the margin.
        let still_tagged = match ds.tags().get(tag).await {
            Ok(contents) => contents.version == version,
            Err(lance::Error::RefNotFound { .. }) => false,
            Err(source) => {
                return Err(LanceEngineError::Lance { table: table.into(), action: "read the restore tag", source })
            }
        };
        self.resolve_before_commit(table).await;
        // The intent names the restored references: the tag keeps the source version's data,
        // the intent its objects, should the commit land after both were released. Its gate
        // publishes no manifest after the deadline, counted from before the tag's age is checked.
        let facts = IntentFacts {
            restored_version: Some(version),
            ..IntentFacts::new(IntentOperation::Restore, ds.version().version)
        };
        let ids = counts.iter().map(|(id, _)| id.clone()).collect();
        let intent = self.begin_intent(table, facts, IntentRefs::Identities(ids), guard).await?;
        if let Err(late) = check_deadline(table, version, tag, still_tagged, guard, Utc::now()) {
            self.drop_intent(&intent, false).await;
            return Err(late);
        }
        let restored = async {
            let mut source = self.open_gated(table, Some(version), &intent.gate).await?;
            source.restore().await.map_err(lance_err(table, "restore"))?;
            Ok::<_, LanceEngineError>(source)
        }
        .await;
        let restored = match self.after_commit(&intent, restored, false).await? {
            Committed::Now(restored) => restored,
            Committed::Late(landed) => return self.landed_outcome(table, landed, 0).await,
        };
        let landed = restored.version().version;
        self.publish(ObjectReferenceDelta::snapshot(table, landed, &counts), &restored).await?;
        self.end_intent(&intent).await;
        Ok(CommitOutcome {
            table: table.into(),
            version: landed,
            rows: 0,
            references_added: counts.total(),
            references_removed: 0,
            rebased: rebased(&restored, landed).await,
        })
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
    /// [`LanceEngine::restore_tags`]) and returns them: the versions they pinned are then
    /// retained only by Lance's own rules (latest, tagged by a user, younger than a cleanup's
    /// horizon), so `lake cleanup` can remove them and GC collect what only they referenced.
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
                "tag `{name}` names version {} of `{lineage}`, not a version of `{table}` (a table and its branches share tag names); nothing was changed. Use `--table {lineage}` (to delete the tag: `lake tag ROOT --table {lineage} --delete {name}`)",
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
                "tag names starting with `{RESTORE_TAG_PREFIX}` are reserved for `lake restore`'s own tags (removed once stale); nothing was tagged. Choose another name"
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

/// Whether a restore under `tag` may still commit at `now` (its host's clock, which minted the
/// tag's ULID): the tag still names its source (`still_tagged`) and is younger than `guard`'s
/// limit (`min_age - margin`), so that its commit, which must land within `margin`, lands before
/// any cleanup can judge the tag stale ([`restore_tag_stale_after`]).
///
/// # Errors
/// [`LanceEngineError::InvalidInput`] saying nothing was committed and to run the restore again.
fn check_deadline(
    table: &str,
    version: u64,
    tag: &str,
    still_tagged: bool,
    guard: &PublicationGuard,
    now: DateTime<Utc>,
) -> Result<(), LanceEngineError> {
    let started = restore_tag_started(tag).unwrap_or(DateTime::<Utc>::MIN_UTC);
    let age = (now - started).to_std().unwrap_or(Duration::ZERO);
    if age < guard.limit() && still_tagged {
        return Ok(());
    }
    Err(LanceEngineError::InvalidInput(format!(
        "table `{table}`: the restore of version {version} ran {:.3}s since it tagged its source (`{tag}`{}), past its deadline of {}s (the lake's min_age minus the margin), so a cleanup may judge its tag stale; nothing was committed. Run the restore again",
        age.as_secs_f64(),
        if still_tagged { "" } else { ", which is gone" },
        guard.limit().as_secs(),
    )))
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
            gc: lake_store::descriptor::GcPolicy { min_age_seconds: 3600 },
        };
        // 3600 s + 2 x 900 s + a 300 s deadline (the 900 s margin clamped to 5 minutes).
        assert_eq!(restore_tag_stale_after(&policy), Duration::from_secs(5700));
    }

    #[test]
    fn a_restore_commits_only_before_its_deadline_and_while_tagged() {
        let guard = PublicationGuard::new(Duration::from_secs(3600));
        let ulid = ulid::Ulid::new();
        let tag = format!("{RESTORE_TAG_PREFIX}{}", ulid.to_string().to_lowercase());
        let started = restore_tag_started(&tag).unwrap();
        let at = |secs: i64| started + chrono::Duration::seconds(secs);
        assert!(check_deadline("t", 1, &tag, true, &guard, at(0)).is_ok());
        assert!(check_deadline("t", 1, &tag, true, &guard, at(2699)).is_ok());
        let late = check_deadline("t", 1, &tag, true, &guard, at(2700)).unwrap_err().to_string();
        assert!(late.contains("nothing was committed") && late.contains("deadline of 2700s"), "{late}");
        let gone = check_deadline("t", 1, &tag, false, &guard, at(1)).unwrap_err().to_string();
        assert!(gone.contains("which is gone"), "{gone}");
        // The deadline plus the commit's margin stays below staleness with clocks a margin apart.
        let stale_after = Duration::from_secs(3600) + 2 * guard.margin();
        assert!(guard.limit() + guard.margin() + guard.margin() <= stale_after);
    }
}
