//! The cutoff of a GC run and the rules on its horizon: at least 1 s, not below the lake's
//! policy floor unless the caller allows it, and judged by the store's clock, not this host's.
//!
//! Why the store's clock: a host clock running ahead would make young objects look old. The
//! local clock only bounds the skew it reports; it never moves the cutoff.

use crate::error::GcError;
use chrono::{DateTime, Utc};
use lake_common::ErrorKind;
use lake_store::clock::ClockReading;
use std::time::Duration;

/// The shortest horizon GC accepts: a shorter one would race writers that are still
/// publishing the objects they uploaded.
pub const MIN_HORIZON: Duration = Duration::from_secs(1);

/// Checks a requested horizon `min_age` against [`MIN_HORIZON`] and the lake's policy floor
/// `floor` (its descriptor's `min_age`); `allow_below_policy` lets it go below the floor,
/// never below [`MIN_HORIZON`].
///
/// # Errors
/// [`GcError::Refused`]: [`ErrorKind::Horizon`] below 1 s, [`ErrorKind::PolicyFloor`] below
/// the floor without the allowance.
pub fn check_horizon(min_age: Duration, floor: Duration, allow_below_policy: bool) -> Result<(), GcError> {
    if min_age < MIN_HORIZON {
        return Err(GcError::refused(ErrorKind::Horizon, format!(
            "min_age {} must be at least 1s: a shorter horizon would race writers that are still publishing; nothing was deleted",
            humantime::format_duration(min_age)
        )));
    }
    if min_age < floor && !allow_below_policy {
        return Err(GcError::refused(ErrorKind::PolicyFloor, format!(
            "min_age {} is below this lake's policy floor of {}; nothing was deleted. Use a larger min_age, or allow a horizon below the policy floor (`allow below policy`) if you are sure no writer is still publishing objects that old",
            humantime::format_duration(min_age),
            humantime::format_duration(floor)
        )));
    }
    Ok(())
}

/// The GC cutoff from a clock reading: the store's now minus `min_age`. The local clock only
/// serves to report (and bound) the skew; it never moves the cutoff.
///
/// # Errors
/// [`GcError::Refused`] ([`ErrorKind::ClockSkew`]) when the local clock differs from the store's by more than
/// `max_skew` (an operator should fix the host's clock, or raise the bound knowingly), or when
/// `min_age` is out of range ([`ErrorKind::Horizon`]).
pub fn gc_cutoff(
    reading: &ClockReading,
    min_age: std::time::Duration,
    max_skew: std::time::Duration,
) -> Result<DateTime<Utc>, GcError> {
    let skew = reading.skew_ms().unsigned_abs();
    if u128::from(skew) > max_skew.as_millis() {
        return Err(GcError::refused(ErrorKind::ClockSkew, format!(
            "this host's clock differs from the store's by {} ({} ms; local {}, store {}), more than the bound on clock skew ({}); nothing was deleted. Fix the host's clock, or raise the bound (`max clock skew`) if you know why",
            humantime::format_duration(std::time::Duration::from_millis(skew)),
            reading.skew_ms(),
            reading.local_now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            reading.store_now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            humantime::format_duration(max_skew)
        )));
    }
    let min_age = chrono::Duration::from_std(min_age)
        .map_err(|_| GcError::refused(ErrorKind::Horizon, "the horizon (min_age) is too large"))?;
    reading.store_now.checked_sub_signed(min_age).ok_or_else(|| {
        GcError::refused(
            ErrorKind::Horizon,
            format!(
                "the horizon (min_age) {} reaches before the earliest time this build can represent; use a shorter horizon",
                humantime::format_duration(std::time::Duration::from_secs(min_age.num_seconds().unsigned_abs()))
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(err.kind(), ErrorKind::ClockSkew);
    }

    #[test]
    fn horizons_below_one_second_or_the_floor_are_refused() {
        let s = Duration::from_secs;
        assert_eq!(check_horizon(Duration::from_millis(999), s(0), true).unwrap_err().kind(), ErrorKind::Horizon);
        assert_eq!(check_horizon(s(60), s(3600), false).unwrap_err().kind(), ErrorKind::PolicyFloor);
        assert!(check_horizon(s(60), s(3600), true).is_ok());
        assert!(check_horizon(s(3600), s(3600), false).is_ok());
    }
}
