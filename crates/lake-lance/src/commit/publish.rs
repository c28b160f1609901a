//! Steps 6 and 7 of the protocol (docs/protocol.md): a committed version's journal entry,
//! bound to the version's manifest and written create-only, then the registry pin.
//!
//! An entry that is already there is accepted when it is bound to the same manifest: a resolver
//! journaled the version from its two manifests while its writer was between its commit and its
//! entry (both describe the one version; the resolver's is computed from what the version is).
//! Any other entry is a conflict.

use crate::commit::change::Journal;
use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use crate::sidecar;
use lake_common::{DeltaKind, LogHead, ObjectIdentity, ObjectReferenceDelta, VersionBinding};
use lake_store::failpoint;
use lake_store::layout::split_lineage;
use lake_store::registry;
use lance::Dataset;

/// What publishing a version wrote.
#[derive(Debug, Default)]
pub(crate) struct Published {
    /// References the entry adds (sum of counts).
    pub added: u64,
    /// References the entry removes (sum of counts).
    pub removed: u64,
    /// The identities the entry adds, when it was computed in memory from the manifests.
    pub added_identities: Vec<ObjectIdentity>,
    /// The write id of the reference log the entry names as its additions, if any (the write's
    /// own log is kept then; otherwise it is removed with the intent).
    pub names_log: Option<String>,
}

impl LanceEngine {
    /// Journals `ds`'s version of `table` by `journal`, then advances the registry (creating a
    /// branch's entry only when `registers`). `ours` are the versions this change published (a
    /// content-preserving change journals each as empty, once the manifests prove it; a version
    /// another writer committed meanwhile is left to it, or to recovery).
    ///
    /// # Errors
    /// [`LanceEngineError::Objects`] ([`lake_store::StoreError::Registry`]) when `table` is a
    /// branch that is no longer registered (deleted while this write committed: nothing is
    /// journaled into it); [`LanceEngineError::Unjournaled`], [`LanceEngineError::SidecarWrite`],
    /// [`LanceEngineError::SidecarConflict`], registry errors, each naming the version.
    pub(crate) async fn publish(
        &self,
        table: &str,
        journal: Journal,
        ds: &Dataset,
        registers: bool,
        ours: &[u64],
    ) -> Result<Published, LanceEngineError> {
        let version = ds.version().version;
        let branch = split_lineage(table).1.is_some();
        if branch && !registers && registry::current(self.store(), table).await?.is_none() {
            return Err(lake_store::StoreError::Registry {
                table: table.into(),
                message: format!(
                    "version {version} was committed into a branch that is no longer registered (deleted while this write committed); nothing was journaled into it. Delete what is left of it with `branch delete`, then write again"
                ),
            }
            .into());
        }
        let published = match journal {
            Journal::Log { log, kind, read_version } => {
                if kind == DeltaKind::Delta && crate::version_diff::schema_moved(ds, read_version).await {
                    tracing::warn!(
                        table,
                        version,
                        "the append was rebased onto a schema changed by a concurrent commit: journaling it from the manifests"
                    );
                    self.publish_manifests(table, ds).await?
                } else {
                    let added = log.references;
                    let names = log.write_id.clone();
                    let head = LogHead::new(table, version, kind, log).bound(self.binding(table, ds).await?);
                    let ours = self.write_head(&head).await?;
                    Published { added, names_log: ours.then_some(names), ..Published::default() }
                }
            }
            Journal::Manifests => self.publish_manifests(table, ds).await?,
            Journal::Upsert { log, on } => {
                let logged = match log.totals.references > sidecar::INLINE_MAX_IDENTITIES as u64 {
                    true => crate::version_diff::logged_entry(ds, table, self.store(), &log, &on).await.unwrap_or_else(
                        |e| {
                            tracing::warn!(
                                table,
                                version,
                                "computing the upsert's entry from the manifests instead: {e}"
                            );
                            None
                        },
                    ),
                    false => None,
                };
                match logged {
                    Some(entry) => {
                        let head = entry.head.bound(self.binding(table, ds).await?);
                        let ours = self.write_head(&head).await?;
                        Published {
                            added: entry.added,
                            removed: entry.removed,
                            names_log: ours.then(|| log.write_id.clone()),
                            ..Published::default()
                        }
                    }
                    None => self.publish_manifests(table, ds).await?,
                }
            }
            Journal::Snapshot(counts) => {
                let added = counts.total();
                let entry =
                    ObjectReferenceDelta::snapshot(table, version, &counts).bound(self.binding(table, ds).await?);
                self.write_entry(&entry).await?;
                Published { added, ..Published::default() }
            }
            Journal::Scan => {
                let now = crate::scan::count_references(ds, table, self.store().root(), None).await.map_err(|e| {
                    LanceEngineError::Unjournaled { table: table.into(), version, reason: e.to_string() }
                })?;
                let added = now.total();
                let entry = ObjectReferenceDelta::snapshot(table, version, &now).bound(self.binding(table, ds).await?);
                self.write_entry(&entry).await?;
                Published { added, ..Published::default() }
            }
            Journal::ContentPreserving => {
                self.journal_content_preserving(ds, table, ours).await?;
                Published::default()
            }
        };
        failpoint::step("commit.after_entry")?;
        if registers && branch {
            registry::register_branch(self.store(), table, version).await?;
        } else {
            registry::advance(self.store(), table, version).await?;
        }
        failpoint::step("commit.after_registry")?;
        Ok(published)
    }

    /// The entry of `ds`'s version from its two manifests, written.
    async fn publish_manifests(&self, table: &str, ds: &Dataset) -> Result<Published, LanceEngineError> {
        let diff = crate::version_diff::committed_entry(ds, table, self.store().root()).await?;
        let added_identities = diff.entry.added.iter().map(|r| r.identity.clone()).collect();
        let entry = diff.entry.bound(self.binding(table, ds).await?);
        self.write_entry(&entry).await?;
        Ok(Published { added: diff.added, removed: diff.removed, added_identities, names_log: None })
    }

    /// The binding of `ds`'s version (`crate::binding::binding_of`).
    pub(crate) async fn binding(&self, table: &str, ds: &Dataset) -> Result<VersionBinding, LanceEngineError> {
        crate::binding::binding_of(self.store(), table, ds).await
    }

    /// Writes `entry` create-only, accepting an entry already there that is bound to the same
    /// manifest (module documentation).
    ///
    /// # Errors
    /// As `sidecar::write`.
    pub(crate) async fn write_entry(&self, entry: &ObjectReferenceDelta) -> Result<(), LanceEngineError> {
        match sidecar::write(self.store(), entry).await {
            Err(LanceEngineError::SidecarConflict { table, version }) => {
                self.accept_existing(&table, version, entry.binding.as_ref()).await
            }
            other => other,
        }
    }

    /// Writes `head` create-only, accepting an entry already there bound to the same manifest.
    /// True when the entry there is `head` (or one with the same counts), false when another
    /// entry bound to the version was accepted (it does not name `head`'s logs).
    ///
    /// # Errors
    /// As `sidecar::write_head`.
    pub(crate) async fn write_head(&self, head: &LogHead) -> Result<bool, LanceEngineError> {
        match sidecar::write_head(self.store(), head).await {
            Err(LanceEngineError::SidecarConflict { table, version }) => {
                self.accept_existing(&table, version, head.lance.as_ref()).await.map(|()| false)
            }
            other => other.map(|()| true),
        }
    }

    async fn accept_existing(
        &self,
        table: &str,
        version: u64,
        binding: Option<&VersionBinding>,
    ) -> Result<(), LanceEngineError> {
        let conflict = || LanceEngineError::SidecarConflict { table: table.into(), version };
        let Some(ours) = binding else { return Err(conflict()) };
        match sidecar::read(self.store(), table, version).await? {
            Some(Ok(existing)) if existing.binding.as_ref() == Some(ours) => {
                tracing::info!(
                    table,
                    version,
                    "the version was journaled from its manifests by a resolver first; its entry stands"
                );
                Ok(())
            }
            _ => Err(conflict()),
        }
    }

    /// Writes an empty entry for each version of `versions` (those this change published) that
    /// has none, once it is proven content-preserving the way an implied entry is
    /// (`crate::foreign::content_preserving_operation`: its transaction, and its manifest against
    /// the previous one). A version another client committed meanwhile is never journaled here
    /// (a forged compaction that changes rows would be journaled as empty): recovery computes its
    /// entry from its manifests, or leaves it for repair.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] when one of them is not provably content-preserving;
    /// Lance and sidecar errors.
    async fn journal_content_preserving(
        &self,
        ds: &Dataset,
        table: &str,
        versions: &[u64],
    ) -> Result<(), LanceEngineError> {
        for &v in versions {
            if matches!(sidecar::read(self.store(), table, v).await?, Some(Ok(_))) {
                continue;
            }
            if crate::foreign::content_preserving_operation(ds, table, self.store().root(), v).await.is_none() {
                return Err(LanceEngineError::InvalidInput(format!(
                    "table `{table}` version {v} is not provably content-preserving; refusing to journal it as empty"
                )));
            }
            let binding = crate::binding::binding_at(self.store(), table, ds, v).await?;
            self.write_entry(&ObjectReferenceDelta::empty(table, v).bound(binding)).await?;
        }
        Ok(())
    }

    /// Removes the journal and the registry entry of `lineage`, a branch whose Lance dataset is
    /// deleted: its versions are no longer retained, and the objects only they referenced become
    /// orphans. (A later commit into it is refused: its registry entry is gone, [`LanceEngine::publish`].)
    ///
    /// # Errors
    /// Storage errors.
    pub(crate) async fn forget_lineage(&self, lineage: &str) -> Result<(), LanceEngineError> {
        let journal = format!("{}/_lake", lake_store::layout::dataset_key(lineage));
        for prefix in [journal, lake_store::layout::registry_table_prefix(lineage)] {
            for (key, _) in self.store().list_all(&format!("{prefix}/")).await? {
                self.store().delete(&key).await?;
            }
            // A local store keeps the emptied folders, and a registry folder names a table.
            if let Some(dir) = self.store().local_dir() {
                let folder = dir.join(&prefix);
                if folder.exists() {
                    std::fs::remove_dir_all(&folder).map_err(|e| lake_store::StoreError::storage(&prefix, e))?;
                }
            }
        }
        if let Some(dir) = self.store().local_dir() {
            // The branch's folder, when nothing else lives in it any more.
            let _ = std::fs::remove_dir(dir.join(lake_store::layout::dataset_key(lineage)));
        }
        Ok(())
    }

    /// Whether `lineage` has a registry entry.
    ///
    /// # Errors
    /// Storage errors.
    pub(crate) async fn is_registered(&self, lineage: &str) -> Result<bool, LanceEngineError> {
        Ok(registry::current(self.store(), lineage).await?.is_some())
    }

    /// Every registered lineage (`t`, `t@b`), sorted.
    ///
    /// # Errors
    /// Storage errors.
    pub(crate) async fn registered_lineages(&self) -> Result<Vec<String>, LanceEngineError> {
        Ok(registry::tables(self.store()).await?)
    }

    /// References added and removed by the entry of `version` (sums of counts; zeros when it
    /// cannot be read): the outcome of a write found landed by resolution.
    pub(crate) async fn entry_counts(&self, table: &str, version: u64) -> (u64, u64) {
        match sidecar::read(self.store(), table, version).await {
            Ok(Some(Ok(entry))) => {
                (entry.added.iter().map(|r| r.count).sum(), entry.removed.iter().map(|r| r.count).sum())
            }
            _ => (0, 0),
        }
    }
}
