//! Journal entries bound to the Lance versions they describe ([`lake_common::binding`]).
//!
//! Every entry the engine writes records its version's transaction UUID and manifest identity
//! ([`binding_of`], right after the commit). Planning, verification and apply's revalidation
//! check every retained version's entry against the manifest the table holds at that number now
//! ([`check_entries`]): the listed size and e-tag first (from the version listing they read
//! anyway), the transaction UUID (one manifest read) only when the file differs. An entry that
//! records nothing (format 3, earlier builds) or names another transaction is a lineage problem.
//!
//! [`transaction_uuid`] is the one place that reads a version's transaction UUID.

use crate::error::LanceEngineError;
use lake_common::{BindingCheck, ManifestIdentity, VersionBinding};
use lake_engine::LineageProblem;
use lake_store::layout::dataset_key;
use lake_store::store::LakeStore;
use lance::Dataset;
use lance_table::io::commit::ManifestLocation;
use std::collections::BTreeMap;

/// Lance's folder of manifests under a dataset.
const VERSIONS_DIR: &str = "_versions";

/// The manifest files of `table`'s versions by version, from one listing of `_versions/` (no
/// manifest read): every file Lance's own listing takes for a version
/// (`lance_table::io::commit::list_manifests` keeps what `ManifestLocation::try_from` accepts, V1
/// and V2 names alike; detached manifests and other files are not versions).
///
/// # Errors
/// Storage errors.
pub async fn list_manifests(
    store: &LakeStore,
    table: &str,
) -> Result<BTreeMap<u64, ManifestIdentity>, LanceEngineError> {
    let prefix = format!("{}/{VERSIONS_DIR}", dataset_key(table));
    let mut manifests = BTreeMap::new();
    for (_, meta) in store.list_all(&prefix).await? {
        if let Ok(location) = ManifestLocation::try_from(meta) {
            let identity = ManifestIdentity { size: location.size.unwrap_or(0), e_tag: location.e_tag };
            manifests.insert(location.version, identity);
        }
    }
    Ok(manifests)
}

/// The UUID of the Lance transaction that made `ds`'s checked-out version, as its manifest
/// names it: from the manifest's `transaction_file` (`{read_version}-{uuid}.txn`, Lance 14
/// `write_transaction_file`) without any read, or from the transaction itself when the
/// manifest carries it inline (`transaction_section`). `None` when the manifest names no
/// transaction (a client that disabled transaction files).
///
/// The one place lake reads a version's transaction UUID (journal bindings; write intents resolve
/// a UUID to its version with it too).
///
/// # Errors
/// Lance errors reading an inline transaction.
pub async fn transaction_uuid(ds: &Dataset) -> Result<Option<String>, LanceEngineError> {
    let manifest = ds.manifest();
    if let Some(file) = manifest.transaction_file.as_deref().filter(|f| !f.is_empty()) {
        let stem = file.strip_suffix(".txn").unwrap_or(file);
        // `{read_version}-{uuid}`: the read version has no `-`, the UUID has four.
        if let Some((_, uuid)) =
            stem.split_once('-').filter(|(v, u)| v.bytes().all(|b| b.is_ascii_digit()) && !u.is_empty())
        {
            return Ok(Some(uuid.to_string()));
        }
    }
    if manifest.transaction_section.is_none() {
        return Ok(None);
    }
    let table = ds.uri().to_string();
    let tx = ds.read_transaction().await.map_err(|source| LanceEngineError::Lance {
        table,
        action: "read the version's transaction",
        source,
    })?;
    Ok(tx.map(|t| t.uuid))
}

/// [`transaction_uuid`] of `version` of `ds`'s dataset (one manifest read).
///
/// # Errors
/// Lance errors (the version does not exist).
pub async fn transaction_uuid_at(ds: &Dataset, table: &str, version: u64) -> Result<Option<String>, LanceEngineError> {
    if ds.version().version == version {
        return transaction_uuid(ds).await;
    }
    let at = ds.checkout_version(version).await.map_err(|source| LanceEngineError::Lance {
        table: table.into(),
        action: "read the version's manifest",
        source,
    })?;
    transaction_uuid(&at).await
}

/// The binding of `ds`'s checked-out version of `table`: its transaction UUID and its manifest
/// file's size and e-tag from a HEAD (the fields a version listing shows: the store computes
/// both alike, on S3 from the object, on a local disk from its metadata).
///
/// # Errors
/// Storage and Lance errors; [`LanceEngineError::InvalidInput`] when the manifest file is
/// missing.
pub async fn binding_of(store: &LakeStore, table: &str, ds: &Dataset) -> Result<VersionBinding, LanceEngineError> {
    let meta = manifest_meta(store, table, ds).await?;
    let manifest = ManifestIdentity { size: meta.size, e_tag: meta.e_tag };
    Ok(VersionBinding::new(transaction_uuid(ds).await?, &manifest))
}

/// The store's metadata of the manifest file of `ds`'s checked-out version of `table` (a HEAD:
/// size, e-tag, and the time the store last wrote it, UTC).
///
/// # Errors
/// Storage errors; [`LanceEngineError::InvalidInput`] when the manifest file is missing.
pub(crate) async fn manifest_meta(
    store: &LakeStore,
    table: &str,
    ds: &Dataset,
) -> Result<object_store::ObjectMeta, LanceEngineError> {
    let location = ds.manifest_location();
    let file = location.path.filename().unwrap_or_default();
    let key = format!("{}/{VERSIONS_DIR}/{file}", dataset_key(table));
    store.head(&key).await?.ok_or_else(|| {
        LanceEngineError::InvalidInput(format!(
            "table `{table}` version {}: its manifest `{key}` is missing, so its journal entry cannot be bound to it",
            ds.version().version
        ))
    })
}

/// The binding of version `version` of `ds`'s dataset (checked out when it is not `ds`'s).
///
/// # Errors
/// As [`binding_of`]; Lance errors checking the version out.
pub async fn binding_at(
    store: &LakeStore,
    table: &str,
    ds: &Dataset,
    version: u64,
) -> Result<VersionBinding, LanceEngineError> {
    if ds.version().version == version {
        return binding_of(store, table, ds).await;
    }
    let at = ds.checkout_version(version).await.map_err(|source| LanceEngineError::Lance {
        table: table.into(),
        action: "read the version's manifest",
        source,
    })?;
    binding_of(store, table, &at).await
}

/// How a transaction or manifest is named in a problem.
fn describe(transaction: Option<&str>, manifest: &ManifestIdentity) -> String {
    match transaction {
        Some(uuid) => format!("Lance transaction {uuid}"),
        None => format!("the manifest file {manifest} (a version that names no transaction)"),
    }
}

/// Checks the entries `recorded` (version, and the binding its entry records: `None` for an
/// entry of format 3) against the manifests `listed` now. Versions not listed (cleaned up) are
/// not checked: nothing of them is left to compare. One manifest read per entry whose listed
/// size or e-tag differs from the recorded ones; none otherwise.
///
/// Returns [`LineageProblem::UnboundEntry`] for an entry that records nothing and
/// [`LineageProblem::EntryOfAnotherVersion`] for one whose transaction is not the version's.
///
/// # Errors
/// Lance errors reading a manifest.
pub(crate) async fn check_entries(
    ds: &Dataset,
    table: &str,
    listed: &BTreeMap<u64, ManifestIdentity>,
    recorded: &BTreeMap<u64, Option<VersionBinding>>,
) -> Result<Vec<LineageProblem>, LanceEngineError> {
    let mut problems = Vec::new();
    for (&version, binding) in recorded {
        let Some(now) = listed.get(&version) else { continue };
        let Some(binding) = binding else {
            problems.push(LineageProblem::UnboundEntry { table: table.into(), version });
            continue;
        };
        let BindingCheck::ReadTransaction(expected) = binding.check_listed(now) else { continue };
        let found = match &expected {
            // Nothing but the recorded file could match an entry that names no transaction.
            None => None,
            Some(_) => transaction_uuid_at(ds, table, version).await?,
        };
        if expected.is_none() || found != expected {
            tracing::warn!(table, version, ?expected, ?found, "journal entry bound to another Lance version");
            problems.push(LineageProblem::EntryOfAnotherVersion {
                table: table.into(),
                version,
                expected: describe(expected.as_deref(), &binding.manifest()),
                found: describe(found.as_deref(), now),
            });
        }
    }
    Ok(problems)
}
