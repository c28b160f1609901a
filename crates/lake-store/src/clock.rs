//! "Now" by the store's clock.
//!
//! GC judges age by the store's clock, not the GC host's alone (a host clock running ahead
//! would make young objects look old): it writes a probe object under `_lake/clock/`, reads the
//! probe's `last_modified` as set by the store, and deletes the probe.
//!
//! A probe that stays (the run killed between writing and deleting it, or its delete failing:
//! S3 throttling with `SlowDown` past object_store's retries) is GC's own garbage: a later plan
//! makes it a candidate once it was minted and written before that plan's cutoff
//! ([`crate::keys::parse_clock_probe`], and the GC crate's own-garbage listing), and
//! that plan's apply deletes it. So a failed delete does not fail the reading: it is logged.

use crate::error::StoreError;
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

/// "Now" by the store's clock and by this host's: what the GC crate's collector
/// judges age by. Production reads the store ([`ProbeClock`]); a test of an age gate injects a
/// fixed reading ([`FixedClock`]) instead of sleeping.
#[async_trait::async_trait]
pub trait StoreClock: Send + Sync {
    /// Reads both clocks.
    ///
    /// # Errors
    /// [`StoreError::Storage`] when the store cannot be read.
    async fn read(&self, store: &LakeStore) -> Result<ClockReading, StoreError>;
}

/// The store's clock, read with a probe object ([`read_store_clock`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProbeClock;

#[async_trait::async_trait]
impl StoreClock for ProbeClock {
    async fn read(&self, store: &LakeStore) -> Result<ClockReading, StoreError> {
        let reading = read_store_clock(store).await?;
        #[cfg(feature = "test-clock")]
        let reading = shifted_for_tests(reading);
        Ok(reading)
    }
}

/// Test builds of the `lake` binary only (the `test-clock` feature): both clocks moved forward by
/// the duration in `LAKE_UNCHECKED_CLOCK_SHIFT` (humantime, e.g. `5s`), so that tests of the
/// `lake` binary need not sleep for objects to grow old; and this host's clock alone moved
/// forward by `LAKE_UNCHECKED_HOST_CLOCK_AHEAD`, so that they can meet a clock skew. Compiled out
/// of every other build.
#[cfg(feature = "test-clock")]
fn shifted_for_tests(reading: ClockReading) -> ClockReading {
    let read = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| humantime::parse_duration(&v).ok())
            .and_then(|d| chrono::Duration::from_std(d).ok())
            .unwrap_or_else(chrono::Duration::zero)
    };
    let (shift, ahead) = (read("LAKE_UNCHECKED_CLOCK_SHIFT"), read("LAKE_UNCHECKED_HOST_CLOCK_AHEAD"));
    ClockReading { store_now: reading.store_now + shift, local_now: reading.local_now + shift + ahead }
}

/// A fixed reading: both clocks at `at` (UTC). For tests only (see
/// the GC crate's `GarbageCollector::with_unchecked_clock`).
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub DateTime<Utc>);

#[async_trait::async_trait]
impl StoreClock for FixedClock {
    async fn read(&self, _store: &LakeStore) -> Result<ClockReading, StoreError> {
        Ok(ClockReading { store_now: self.0, local_now: self.0 })
    }
}

/// Reads the store's clock with a probe object `_lake/clock/<ULID>` (the ULID minted by this
/// host's clock), then deletes it. A delete that fails leaves the probe for a later apply to
/// collect (see the module documentation) and is logged, not returned.
///
/// # Errors
/// [`StoreError::Storage`] when the probe cannot be written or read.
pub async fn read_store_clock(store: &LakeStore) -> Result<ClockReading, StoreError> {
    let key = format!("{CLOCK_PREFIX}/{}", ulid::Ulid::new());
    let probe_folder = store.local_dir().map(|dir| dir.join(CLOCK_PREFIX)).filter(|folder| !folder.exists());
    let local_before = Utc::now();
    store.put(&key, b"clock probe".to_vec()).await?;
    let local_after = Utc::now();
    let meta =
        store.head(&key).await?.ok_or_else(|| StoreError::storage(&key, "clock probe vanished after writing"))?;
    if let Err(e) = store.delete(&key).await {
        tracing::warn!(
            probe = %key,
            "the clock probe could not be deleted ({e}); the clock reading stands, and a later GC apply collects the probe once it is older than its cutoff"
        );
    }
    // On a local store, a probe folder this probe created is removed again when empty (a
    // concurrent probe's file keeps it), so that a dry run leaves the tree as it found it.
    if let Some(folder) = probe_folder {
        let _ = std::fs::remove_dir(folder);
    }
    let local_now = local_before + (local_after - local_before) / 2;
    Ok(ClockReading { store_now: meta.last_modified, local_now })
}
