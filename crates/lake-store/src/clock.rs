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
use crate::refusal::Refusal;
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

/// The GC cutoff from a clock reading: the store's now minus `min_age`. The local clock only
/// serves to report (and bound) the skew; it never moves the cutoff.
///
/// # Errors
/// [`StoreError::Refused`] ([`Refusal::ClockSkew`]) when the local clock differs from the store's by more than
/// `max_skew` (an operator should fix the host's clock, or raise the bound knowingly), or when
/// `min_age` is out of range.
pub fn gc_cutoff(
    reading: &ClockReading,
    min_age: std::time::Duration,
    max_skew: std::time::Duration,
) -> Result<DateTime<Utc>, StoreError> {
    let skew = reading.skew_ms().unsigned_abs();
    if u128::from(skew) > max_skew.as_millis() {
        return Err(StoreError::refused(Refusal::ClockSkew, format!(
            "this host's clock differs from the store's by {} ({} ms; local {}, store {}), more than --max-clock-skew {}; nothing was deleted. Fix the host's clock, or raise --max-clock-skew if you know why",
            humantime::format_duration(std::time::Duration::from_millis(skew)),
            reading.skew_ms(),
            reading.local_now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            reading.store_now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            humantime::format_duration(max_skew)
        )));
    }
    let min_age = chrono::Duration::from_std(min_age)
        .map_err(|_| StoreError::refused(Refusal::Horizon, "--min-age is too large"))?;
    reading.store_now.checked_sub_signed(min_age).ok_or_else(|| {
        StoreError::refused(
            Refusal::Horizon,
            format!(
                "--min-age {} reaches before the earliest time this build can represent; use a shorter horizon",
                humantime::format_duration(std::time::Duration::from_secs(min_age.num_seconds().unsigned_abs()))
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_cutoff_follows_the_store_clock_and_large_skews_are_refused() {
        let store_now = DateTime::parse_from_rfc3339("2026-06-01T00:00:00Z").unwrap().with_timezone(&Utc);
        let days_ahead = ClockReading { store_now, local_now: store_now + chrono::Duration::days(3) };
        let cutoff = gc_cutoff(&days_ahead, Duration::from_secs(3600), Duration::from_secs(7 * 86400)).unwrap();
        assert_eq!(cutoff, store_now - chrono::Duration::hours(1), "a host clock days ahead does not move the cutoff");
        let err = gc_cutoff(&days_ahead, Duration::from_secs(3600), Duration::from_secs(300)).unwrap_err();
        assert!(err.to_string().contains("differs from the store's by 3days"), "{err}");
        let behind = ClockReading { store_now, local_now: store_now - chrono::Duration::minutes(10) };
        assert!(gc_cutoff(&behind, Duration::from_secs(1), Duration::from_secs(300)).is_err());
        assert!(gc_cutoff(&behind, Duration::from_secs(1), Duration::from_secs(3600)).is_ok());
    }
}
