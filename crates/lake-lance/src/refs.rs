//! Verification and repair of the reference journal against full scans.
//!
//! `verify` ([`crate::verify_refs`], re-exported here) scans the reference columns of every
//! retained version, compares each with the journal's replayed counts at that version, and
//! checks every referenced managed object exists with its recorded size, in bounded memory. It
//! is also the baseline GC's journal-based planning is measured against. `repair` rebuilds a
//! missing sidecar as a snapshot from a scan of its version.

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use crate::sidecar;
use lake_common::ObjectReferenceDelta;
use lake_objects::registry;

/// Verification lives in [`crate::verify_refs`] (bounded memory); re-exported here.
pub use crate::verify_refs::{CountMismatch, VerifyReport, MAX_LISTED};

impl LanceEngine {
    /// Rebuilds the missing sidecar of `table` at `version` as a snapshot from a scan of that
    /// version (create-only: an existing different sidecar is never replaced), then advances the
    /// registry to it. Returns the snapshot written.
    ///
    /// # Errors
    /// Lance errors (the version must still exist); [`LanceEngineError::SidecarConflict`];
    /// [`LanceEngineError::InvalidInput`] for a version that reads files outside its dataset
    /// folder; [`LanceEngineError::Unreadable`] for columns or values a scan cannot read with
    /// certainty.
    pub async fn repair_refs(&self, table: &str, version: u64) -> Result<ObjectReferenceDelta, LanceEngineError> {
        // A version that reads files outside its dataset folder has rows a scan of this table
        // cannot vouch for.
        let ds = self.open(table).await?.checkout_version(version).await.map_err(|source| LanceEngineError::Lance {
            table: table.into(),
            action: "checkout",
            source,
        })?;
        if let Some(base) = ds.manifest().base_paths.values().next() {
            return Err(LanceEngineError::InvalidInput(format!(
                "table `{table}` version {version} reads files from `{}`, outside its dataset folder (a shallow clone or an added base path); refusing to journal it from a scan of this table",
                base.path
            )));
        }
        let counts = self.scan_version(table, version).await?;
        let snapshot = ObjectReferenceDelta::snapshot(table, version, &counts);
        sidecar::write(self.store(), &snapshot).await?;
        registry::advance(self.store(), table, version).await?;
        Ok(snapshot)
    }
}
