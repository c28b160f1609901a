//! Versions the journal may take as empty without a sidecar: those whose Lance transaction
//! proves they change no row's references, whoever committed them (this engine's compaction, or
//! another Lance client's index build).
//!
//! A version without a sidecar is a lineage problem (GC refuses until `lake refs repair`),
//! except when its transaction (`_transactions/<read_version>-<uuid>.txn`, read with
//! `Dataset::read_transaction_by_version`) is one of [`CONTENT_PRESERVING`] and passes that
//! operation's check ([`preserves_content`]). Such a version is an *implied* empty entry of the
//! journal: replay, revalidation and verification read it as an empty delta, and a plan's
//! lineage stamp records it (`implied:<operation>`), so a sidecar written for it later is a
//! change of the journal. Planning never writes one (a dry run writes nothing); the engine's
//! version cleanup writes them ([`materialize_implied`]) before Lance removes the transactions
//! that prove them. A version whose transaction cannot be read (cleaned up by another client,
//! unreadable, another operation) stays a problem.
//!
//! The transaction's word is not taken alone: the version's manifest is compared with the
//! previous version's (the same reference columns; the same fragments, or for a rewrite,
//! rewritten fragments whose references net to nothing), so a transaction forged to look like
//! compaction or an index build while it changes rows is not implied.

use crate::scan::reference_columns;
use crate::sidecar::JournalListing;
use crate::version_diff::diff_entry;
use lake_common::LakeRootUri;
use lance::dataset::transaction::Operation;
use lance::table::format::Fragment;
use lance::Dataset;

/// The Lance 14 operations that change no row's references, each with why (from the operation's
/// definition in `lance_table::transaction::Operation` and how Lance builds the next manifest from
/// it):
pub const CONTENT_PRESERVING: [(&str, &str); 4] = [
    (
        "ReserveFragments",
        "reserves fragment ids for a later commit; the manifest's fragments are unchanged",
    ),
    (
        "CreateIndex",
        "adds or replaces index metadata (new_indices, removed_indices); fragments and schema are unchanged",
    ),
    (
        "UpdateConfig",
        "changes table config and table, schema or field metadata maps; no data file, fragment or field is added or removed",
    ),
    (
        "Rewrite",
        "compaction: each group's new fragments hold the live rows of its old fragments, rewritten; accepted only when every group's row counts prove it (old rows minus deleted rows equal new rows, no deletions and no data overlays in the new fragments)",
    ),
];

/// Whether `operation` is one of [`CONTENT_PRESERVING`] and passes its check.
///
/// # Errors
/// Why not, in words (the operation's name, or which rewrite group's row counts do not match).
pub fn preserves_content(operation: &Operation) -> Result<(), String> {
    match operation {
        Operation::ReserveFragments { .. } | Operation::CreateIndex { .. } | Operation::UpdateConfig { .. } => Ok(()),
        Operation::Rewrite { groups, .. } => {
            for (i, group) in groups.iter().enumerate() {
                let old = live_rows(&group.old_fragments);
                let new = live_rows(&group.new_fragments);
                let new_has_deletions = group.new_fragments.iter().any(|f| f.deletion_file.is_some());
                // A compaction writes its rows anew: an overlay in a new fragment changes cells.
                let new_has_overlays = group.new_fragments.iter().any(|f| !f.overlays.is_empty());
                match (old, new) {
                    (Some(old), Some(new)) if old == new && !new_has_deletions && !new_has_overlays => {}
                    _ => {
                        return Err(format!(
                            "rewrite group {i} does not prove its rows unchanged (old live rows {old:?}, new rows {new:?}, deletions in new fragments: {new_has_deletions}, data overlays in new fragments: {new_has_overlays})"
                        ))
                    }
                }
            }
            Ok(())
        }
        other => Err(format!("a `{}` operation may change references", other.name())),
    }
}

/// Live rows of `fragments` (physical rows minus deleted rows), when every count is recorded.
fn live_rows(fragments: &[Fragment]) -> Option<usize> {
    fragments.iter().try_fold(0usize, |sum, f| {
        let deleted = match &f.deletion_file {
            Some(d) => d.num_deleted_rows?,
            None => 0,
        };
        sum.checked_add(f.physical_rows?.checked_sub(deleted)?)
    })
}

/// The operation of version `version` of `ds`'s table when it is content-preserving; `None` when
/// it is not, or when it cannot be proven (see [`proven_against_previous`]).
pub(crate) async fn content_preserving_operation(
    ds: &Dataset,
    table: &str,
    root: &LakeRootUri,
    version: u64,
) -> Option<&'static str> {
    let tx = ds.read_transaction_by_version(version).await.ok().flatten()?;
    preserves_content(&tx.operation).ok()?;
    if !proven_against_previous(ds, table, root, version, &tx.operation).await {
        return None;
    }
    CONTENT_PRESERVING.iter().map(|(name, _)| *name).find(|name| *name == tx.operation.name())
}

/// Whether version `version` holds the references of version `version - 1`, checked on the two
/// manifests rather than trusted from the transaction (a client can commit a transaction whose
/// files contradict its operation): the same reference columns, and
/// - for a `Rewrite`, the references of the fragments that differ between the two versions net
///   to nothing (`crate::version_diff`: a scan of the rewritten fragments' reference columns);
/// - for the others, exactly the same fragments (data files, data overlays and deletion files).
///
/// False when either version cannot be read (version `version - 1` cleaned up, say).
async fn proven_against_previous(
    ds: &Dataset,
    table: &str,
    root: &LakeRootUri,
    version: u64,
    operation: &Operation,
) -> bool {
    if version < 2 {
        return false;
    }
    let (Ok(at), Ok(previous)) = (ds.checkout_version(version).await, ds.checkout_version(version - 1).await) else {
        return false;
    };
    let same_columns = match (reference_columns(&at, table), reference_columns(&previous, table)) {
        (Ok(a), Ok(b)) => a.columns() == b.columns(),
        _ => false,
    };
    if !same_columns {
        return false;
    }
    match operation {
        Operation::Rewrite { .. } => match diff_entry(&at, table, root).await {
            Ok(diff) => diff.entry.added.is_empty() && diff.entry.removed.is_empty(),
            Err(_) => false,
        },
        _ => at.manifest().fragments == previous.manifest().fragments,
    }
}

/// Records in `listing` an implied empty entry for every version in `versions` that has no
/// sidecar and is content-preserving (see the module documentation). One transaction read per
/// version without a sidecar; versions with one are not read. A transaction that cannot be read
/// implies nothing (the version stays a problem: a refusal, never a deletion).
pub(crate) async fn imply_entries(
    ds: &Dataset,
    table: &str,
    root: &LakeRootUri,
    listing: &mut JournalListing,
    versions: std::ops::RangeInclusive<u64>,
) {
    for version in versions {
        if listing.files.contains_key(&version) {
            continue;
        }
        if let Some(operation) = content_preserving_operation(ds, table, root, version).await {
            listing.implied.insert(version, operation);
        }
    }
}

/// Writes an empty sidecar for every implied entry of `ds`'s table (versions from 1 to its
/// latest without a sidecar whose transaction is content-preserving), so that the journal no
/// longer depends on transactions a version cleanup removes.
///
/// # Errors
/// Storage errors listing the journal; sidecar write errors.
pub(crate) async fn materialize_implied(
    store: &lake_store::store::LakeStore,
    ds: &Dataset,
    table: &str,
) -> Result<(), crate::error::LanceEngineError> {
    let mut listing = crate::sidecar::list(store, table).await?;
    let versions = ds.version_refs().await.map_err(|source| crate::error::LanceEngineError::Lance {
        table: table.into(),
        action: "list versions",
        source,
    })?;
    let oldest = versions.iter().map(|v| v.version).min().unwrap_or(ds.version().version);
    imply_entries(ds, table, store.root(), &mut listing, oldest..=ds.version().version).await;
    for version in listing.implied.keys() {
        // Bound to the manifest its transaction was judged from.
        let binding = crate::binding::binding_at(store, table, ds, *version).await?;
        crate::sidecar::write(store, &lake_common::ObjectReferenceDelta::empty(table, *version).bound(binding)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lance::dataset::transaction::RewriteGroup;

    fn fragment(id: u64, rows: usize, deleted: Option<usize>) -> Fragment {
        let mut f = Fragment::new(id);
        f.physical_rows = Some(rows);
        f.deletion_file = deleted.map(|n| lance::table::format::DeletionFile {
            read_version: 1,
            id: 1,
            file_type: lance::table::format::DeletionFileType::Array,
            num_deleted_rows: Some(n),
            base_id: None,
        });
        f
    }

    fn rewrite(old: Vec<Fragment>, new: Vec<Fragment>) -> Operation {
        Operation::Rewrite {
            groups: vec![RewriteGroup { old_fragments: old, new_fragments: new }],
            rewritten_indices: vec![],
            frag_reuse_index: None,
        }
    }

    #[test]
    fn a_rewrite_is_content_preserving_only_when_its_row_counts_prove_it() {
        assert!(preserves_content(&rewrite(
            vec![fragment(0, 10, Some(3)), fragment(1, 5, None)],
            vec![fragment(2, 12, None)]
        ))
        .is_ok());
        // A row more or less, deletions in the new fragment, or an unknown count: not proven.
        assert!(preserves_content(&rewrite(vec![fragment(0, 10, Some(3))], vec![fragment(2, 8, None)])).is_err());
        assert!(preserves_content(&rewrite(vec![fragment(0, 10, None)], vec![fragment(2, 11, Some(1))])).is_err());
        let mut unknown = fragment(2, 10, None);
        unknown.physical_rows = None;
        assert!(preserves_content(&rewrite(vec![fragment(0, 10, None)], vec![unknown])).is_err());
        let err = preserves_content(&Operation::Restore { version: 1 }).unwrap_err();
        assert!(err.contains("Restore"), "{err}");
        assert!(preserves_content(&Operation::ReserveFragments { num_fragments: 2 }).is_ok());
    }
}
