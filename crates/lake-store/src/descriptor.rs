//! The lake descriptor `_lake/lake.json` and its GC policy.

use crate::error::StoreError;
use crate::layout::DESCRIPTOR_KEY;
use crate::store::{CreateOutcome, LakeStore};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Format version of the descriptor this build writes and reads.
pub const DESCRIPTOR_FORMAT_VERSION: u64 = 1;
/// Default GC policy floor: 7 days (Delta's VACUUM default retention).
pub const DEFAULT_MIN_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// The GC policy stored in the lake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcPolicy {
    /// The smallest `--min-age` a GC run may use without an explicit override, in seconds.
    pub min_age_seconds: u64,
}

/// The lake descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LakeDescriptor {
    /// Always [`DESCRIPTOR_FORMAT_VERSION`].
    pub format_version: u64,
    /// Creation time, RFC 3339 UTC.
    pub created_at: String,
    /// The lake's identity: a ULID minted when the lake was created, never changed. A lake
    /// deleted and created again at the same root is another lake; GC plans and checkpoints
    /// are bound to it ([`LakeDescriptor::identity`]). Absent in lakes created by earlier
    /// builds (and then not written back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lake_id: Option<String>,
    /// GC policy floor.
    pub gc: GcPolicy,
}

impl LakeDescriptor {
    /// Checks a GC policy floor before a lake is created with it: positive, and no longer than
    /// the time since the Unix epoch (every managed key's ULID counts from it: no object could
    /// ever be older, and GC would never collect anything).
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] naming the floor.
    pub fn check_floor(min_age: Duration) -> Result<(), StoreError> {
        if min_age.is_zero() {
            return Err(StoreError::InvalidInput(
                "the policy floor (min_age) must be positive (for example 7d)".into(),
            ));
        }
        let since_epoch = chrono::Utc::now().signed_duration_since(chrono::DateTime::UNIX_EPOCH);
        if chrono::Duration::from_std(min_age).map_or(true, |floor| floor > since_epoch) {
            return Err(StoreError::InvalidInput(format!(
                "the policy floor (min_age) {} is longer than any age a managed object can represent (its key's time counts from 1970): no object could ever be that old, so GC would never collect anything; use a floor such as 7d",
                humantime::format_duration(min_age)
            )));
        }
        Ok(())
    }

    /// Creates the descriptor of a new lake (create-only), its floor `min_age` in whole seconds
    /// rounded up.
    ///
    /// # Errors
    /// [`StoreError::InvalidInput`] for a floor [`LakeDescriptor::check_floor`] refuses,
    /// [`StoreError::Capability`] for a store that does not refuse create-only writes over
    /// existing keys ([`LakeStore::require_create_only`]); [`StoreError::Root`] when a lake with a
    /// different descriptor already exists at the root.
    pub async fn create(store: &LakeStore, min_age: Duration) -> Result<(Self, bool), StoreError> {
        Self::check_floor(min_age)?;
        // A store that overwrites on a create-only write cannot hold a lake (docs/protocol.md).
        store.require_create_only().await?;
        // Whole seconds, rounded up: a floor is a lower bound, so `1500ms` is kept as 2s (GC at
        // 1s would need the explicit override), never lowered to 1s.
        let seconds = min_age.as_secs().saturating_add(u64::from(min_age.subsec_nanos() > 0));
        let descriptor = Self {
            format_version: DESCRIPTOR_FORMAT_VERSION,
            created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            lake_id: Some(ulid::Ulid::new().to_string()),
            gc: GcPolicy { min_age_seconds: seconds },
        };
        let bytes = serde_json::to_vec_pretty(&descriptor).map_err(|e| StoreError::storage(DESCRIPTOR_KEY, e))?;
        match store.put_create(DESCRIPTOR_KEY, bytes).await? {
            CreateOutcome::Created => Ok((descriptor, true)),
            CreateOutcome::Exists(existing) => {
                let current = Self::decode(&existing)?;
                if current.gc == descriptor.gc {
                    Ok((current, false))
                } else {
                    Err(StoreError::Root {
                        root: store.display_root(),
                        message: format!(
                            "a lake already exists here with min_age {}s; it was left unchanged",
                            current.gc.min_age_seconds
                        ),
                    })
                }
            }
        }
    }

    /// Loads the descriptor.
    ///
    /// # Errors
    /// [`StoreError::NotALake`] when missing; [`StoreError::Corrupt`] when undecodable.
    pub async fn load(store: &LakeStore) -> Result<Self, StoreError> {
        match store.get(DESCRIPTOR_KEY).await? {
            Some(bytes) => Self::decode(&bytes),
            None => Err(StoreError::NotALake { root: store.display_root(), key: DESCRIPTOR_KEY.into() }),
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        let d: Self = serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
            path: DESCRIPTOR_KEY.into(),
            what: "lake descriptor",
            message: e.to_string(),
        })?;
        if d.format_version != DESCRIPTOR_FORMAT_VERSION {
            return Err(StoreError::Corrupt {
                path: DESCRIPTOR_KEY.into(),
                what: "lake descriptor",
                message: format!(
                    "format version {} is not supported (expected {DESCRIPTOR_FORMAT_VERSION})",
                    d.format_version
                ),
            });
        }
        Ok(d)
    }

    /// The lake's identity: its `lake_id`, or for a lake created by an earlier build (no
    /// `lake_id`) `created-<created_at>`, its creation time to the millisecond (a lake deleted
    /// and created again at the same root has another).
    pub fn identity(&self) -> String {
        match &self.lake_id {
            Some(id) => id.clone(),
            None => format!("created-{}", self.created_at),
        }
    }

    /// The policy floor as a duration.
    pub fn min_age(&self) -> Duration {
        Duration::from_secs(self.gc.min_age_seconds)
    }
}
