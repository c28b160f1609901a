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
    /// Lance errors (the version must still exist); [`LanceEngineError::SidecarConflict`].
    pub async fn repair_refs(&self, table: &str, version: u64) -> Result<ObjectReferenceDelta, LanceEngineError> {
        let counts = self.scan_version(table, version).await?;
        let snapshot = ObjectReferenceDelta::snapshot(table, version, &counts);
        sidecar::write(self.store(), &snapshot).await?;
        registry::advance(self.store(), table, version).await?;
        Ok(snapshot)
    }
}
