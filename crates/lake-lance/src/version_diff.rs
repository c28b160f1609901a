//! The journal entry of one committed version computed from Lance's manifests: what changed
//! between version `v - 1` and version `v`, whoever's commit `v - 1` was.
//!
//! Lance builds manifest `v` from manifest `v - 1` and `v`'s transaction, so the fragments that
//! differ between the two (by id, data files, deletion file or row count) hold every row the
//! commit wrote or removed, and no other. The entry is a `delta`: removed = the references of the
//! changed fragments in `v - 1`, added = those of the changed fragments in `v` (deletion vectors
//! applied in each), netted. When the two versions' reference columns differ (a column added,
//! dropped or renamed), the entry is a `snapshot` of `v` instead: a full scan of its reference
//! columns. Cost: a scan of the reference columns of the changed fragments, twice.

use crate::error::LanceEngineError;
use crate::scan::{count_references, count_scanned, reference_columns};
use lake_common::{LakeRootUri, ObjectReferenceDelta};
use lance::table::format::Fragment;
use lance::Dataset;
use std::collections::BTreeMap;

/// A version's journal entry and the net number of references it added and removed.
pub(crate) struct VersionEntry {
    /// The entry to publish.
    pub entry: ObjectReferenceDelta,
    /// References added, net of removals (sum of counts).
    pub added: u64,
    /// References removed, net of additions (sum of counts).
    pub removed: u64,
}

/// The journal entry of `ds`'s checked-out version `v` relative to `v - 1` (a snapshot for
/// version 1).
///
/// # Errors
/// Lance errors (version `v - 1` no longer exists); invalid references.
pub(crate) async fn diff_entry(
    ds: &Dataset,
    table: &str,
    root: &LakeRootUri,
) -> Result<VersionEntry, LanceEngineError> {
    let version = ds.version().version;
    let lance_err =
        |action: &'static str| move |source| LanceEngineError::Lance { table: table.into(), action, source };
    if version < 2 {
        let counts = count_references(ds, table, root, None).await?;
        let added = counts.total();
        return Ok(VersionEntry { entry: ObjectReferenceDelta::snapshot(table, version, &counts), added, removed: 0 });
    }
    let previous = ds.checkout_version(version - 1).await.map_err(lance_err("open the previous version"))?;
    let (before_columns, after_columns) = (reference_columns(&previous, table)?, reference_columns(ds, table)?);
    if before_columns.columns() != after_columns.columns() {
        let now = count_references(ds, table, root, None).await?;
        let then = count_references(&previous, table, root, None).await?;
        let net = ObjectReferenceDelta::delta(table, version, &now, &then);
        let (added, removed) = (sum(&net.added), sum(&net.removed));
        return Ok(VersionEntry { entry: ObjectReferenceDelta::snapshot(table, version, &now), added, removed });
    }
    let before: BTreeMap<u64, &Fragment> = previous.manifest().fragments.iter().map(|f| (f.id, f)).collect();
    let after: BTreeMap<u64, &Fragment> = ds.manifest().fragments.iter().map(|f| (f.id, f)).collect();
    let changed = |of: &BTreeMap<u64, &Fragment>, other: &BTreeMap<u64, &Fragment>| -> Vec<Fragment> {
        of.iter().filter(|(id, f)| other.get(id) != Some(f)).map(|(_, f)| (*f).clone()).collect()
    };
    let removed = count_scanned(&previous, table, root, None, Some(changed(&before, &after))).await?;
    let added = count_scanned(ds, table, root, None, Some(changed(&after, &before))).await?;
    let entry = ObjectReferenceDelta::delta(table, version, &added, &removed);
    let (added, removed) = (sum(&entry.added), sum(&entry.removed));
    Ok(VersionEntry { entry, added, removed })
}

/// The journal entry of the version `ds` is at, which the calling write just committed: as
/// [`diff_entry`]; when that fails (a row of the previous version that cannot be read, written
/// by another client), a snapshot of the version from a full scan, which is exact on its own
/// (`added` is then every reference of the version, `removed` 0).
///
/// # Errors
/// [`LanceEngineError::Unjournaled`] naming the committed version when neither can be computed.
pub(crate) async fn committed_entry(
    ds: &Dataset,
    table: &str,
    root: &LakeRootUri,
) -> Result<VersionEntry, LanceEngineError> {
    let version = ds.version().version;
    let diffed = match diff_entry(ds, table, root).await {
        Ok(entry) => return Ok(entry),
        Err(e) => e,
    };
    match count_references(ds, table, root, None).await {
        Ok(now) => {
            tracing::warn!(table, version, "journaling the version as a snapshot: {diffed}");
            let added = now.total();
            Ok(VersionEntry { entry: ObjectReferenceDelta::snapshot(table, version, &now), added, removed: 0 })
        }
        Err(scanned) => Err(LanceEngineError::Unjournaled {
            table: table.into(),
            version,
            reason: format!("{diffed}; a scan of version {version} failed too: {scanned}"),
        }),
    }
}

fn sum(counts: &[lake_common::ReferenceCount]) -> u64 {
    counts.iter().map(|r| r.count).sum()
}
