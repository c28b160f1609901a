//! "Now" by the store's clock.
//!
//! GC judges age by the store's clock, not the GC host's alone (a host clock running ahead
//! would make young objects look old): it writes a probe object under `_lake/clock/`, reads the
//! probe's `last_modified` as set by the store, and deletes the probe.

use crate::error::ObjectsError;
use crate::layout::CLOCK_PREFIX;
use crate::store::LakeStore;
use chrono::{DateTime, Utc};

/// A reading of both clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockReading {
    /// The store's time (the probe's `last_modified`), UTC.
    pub store_now: DateTime<Utc>,
    /// The local time when the probe was written, UTC.
    pub local_now: DateTime<Utc>,
}

impl ClockReading {
    /// Local minus store time, in milliseconds (positive: the local clock is ahead).
    pub fn skew_ms(&self) -> i64 {
        (self.local_now - self.store_now).num_milliseconds()
    }
}

/// Reads the store's clock with a probe object.
///
/// # Errors
/// [`ObjectsError::Storage`] when the probe cannot be written or read.
pub async fn read_store_clock(store: &LakeStore) -> Result<ClockReading, ObjectsError> {
    let key = format!("{CLOCK_PREFIX}/{}", ulid::Ulid::new());
    let local_before = Utc::now();
    store.put(&key, b"clock probe".to_vec()).await?;
    let local_after = Utc::now();
    let meta =
        store.head(&key).await?.ok_or_else(|| ObjectsError::storage(&key, "clock probe vanished after writing"))?;
    store.delete(&key).await?;
    let local_now = local_before + (local_after - local_before) / 2;
    Ok(ClockReading { store_now: meta.last_modified, local_now })
}
