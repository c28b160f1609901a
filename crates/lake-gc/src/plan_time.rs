//! [`PlanTime`]: a UTC instant to the millisecond, as GC's documents record it (a plan's cutoff
//! and its candidates' `last_modified`, a shard spec's and a shard manifest's cutoff).
//!
//! The wire spelling is the only one: RFC 3339 in UTC with exactly three fractional digits and
//! `Z` (`2026-01-02T03:04:05.678Z`, chrono's `SecondsFormat::Millis`). A document is parsed
//! once, where it is read, and any other spelling of the same instant is refused there: the
//! digest of a plan covers its bytes, so one instant must have one spelling for a plan to hash
//! as it did when it was made.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The first instant RFC 3339 spells, 0000-01-01T00:00:00.000Z, in ms since the Unix epoch.
const FIRST_MS: i64 = -62_167_219_200_000;
/// The last, 9999-12-31T23:59:59.999Z.
const LAST_MS: i64 = 253_402_300_799_999;

/// A UTC instant in whole milliseconds (ordered; `Display` and serde give the wire spelling,
/// `FromStr` and serde accept only it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlanTime(DateTime<Utc>);

/// A time that is not in the wire spelling ([`PlanTime`]); the message names it and the form
/// expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{text}` is not a time as GC records it (RFC 3339 UTC with milliseconds, e.g. 2026-01-02T03:04:05.678Z){reason}"
)]
pub struct PlanTimeError {
    text: String,
    reason: String,
}

impl PlanTime {
    /// `t` to the millisecond, earlier sub-millisecond digits dropped (as the wire spelling
    /// drops them: a recorded cutoff is never later than the instant it came from; a leap
    /// second's instant, `23:59:60.x`, is recorded as `23:59:59.999`), within the years 0000 to
    /// 9999 that RFC 3339 spells (an earlier time, a file's modification time set before year 0,
    /// is recorded as the first instant of year 0000, a later one as the last of 9999: only a
    /// candidate's `last_modified` can be out of range, and apply judges a key's age by its ULID).
    pub fn from_datetime(t: DateTime<Utc>) -> Self {
        let ms = t.timestamp() * 1000 + i64::from(t.timestamp_subsec_millis().min(999));
        Self(DateTime::from_timestamp_millis(ms.clamp(FIRST_MS, LAST_MS)).unwrap_or(t))
    }

    /// The instant.
    pub fn datetime(self) -> DateTime<Utc> {
        self.0
    }

    /// Milliseconds since the Unix epoch (UTC).
    pub fn timestamp_millis(self) -> i64 {
        self.0.timestamp_millis()
    }

    /// The instant `ms` milliseconds after the Unix epoch (UTC); `None` out of chrono's range.
    pub fn from_timestamp_millis(ms: i64) -> Option<Self> {
        DateTime::from_timestamp_millis(ms).map(Self)
    }
}

impl From<DateTime<Utc>> for PlanTime {
    fn from(t: DateTime<Utc>) -> Self {
        Self::from_datetime(t)
    }
}

impl fmt::Display for PlanTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Millis, true))
    }
}

impl FromStr for PlanTime {
    type Err = PlanTimeError;

    /// Parses the wire spelling only.
    ///
    /// # Errors
    /// [`PlanTimeError`] for text that is no RFC 3339 time, or another spelling (another
    /// offset than `Z`, more or fewer fractional digits).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let error = |reason: String| PlanTimeError { text: text.to_string(), reason };
        let parsed = DateTime::parse_from_rfc3339(text).map_err(|e| error(format!(": {e}")))?.with_timezone(&Utc);
        let time = Self::from_datetime(parsed);
        if time.to_string() != text {
            return Err(error(format!("; it is the instant {time}, spelled otherwise")));
        }
        Ok(time)
    }
}

impl Serialize for PlanTime {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PlanTime {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_spelling_round_trips_and_no_other_is_read() {
        let t: PlanTime = "2026-01-02T03:04:05.678Z".parse().unwrap();
        assert_eq!(t.to_string(), "2026-01-02T03:04:05.678Z");
        assert_eq!(t.timestamp_millis(), 1_767_323_045_678);
        for other in [
            "2026-01-02T03:04:05Z",
            "2026-01-02T03:04:05.678+00:00",
            "2026-01-02T04:04:05.678+01:00",
            "2026-01-02T03:04:05.6789Z",
            "yesterday",
        ] {
            assert!(other.parse::<PlanTime>().is_err(), "{other} was read");
        }
        assert_eq!(serde_json::to_string(&t).unwrap(), "\"2026-01-02T03:04:05.678Z\"");
        assert_eq!(serde_json::from_str::<PlanTime>("\"2026-01-02T03:04:05.678Z\"").unwrap(), t);
        assert!(serde_json::from_str::<PlanTime>("\"2026-01-02T03:04:05Z\"").is_err());
    }

    #[test]
    fn instants_out_of_rfc_3339_are_clamped_and_leap_seconds_recorded_no_later() {
        let before_year_0 = DateTime::from_timestamp(-62_200_000_000, 0).unwrap();
        let t = PlanTime::from_datetime(before_year_0);
        assert_eq!(t.to_string(), "0000-01-01T00:00:00.000Z");
        assert_eq!(t.to_string().parse::<PlanTime>().unwrap(), t);
        let after_9999 = DateTime::from_timestamp(253_402_300_800 + 86_400, 0).unwrap();
        assert_eq!(PlanTime::from_datetime(after_9999).to_string(), "9999-12-31T23:59:59.999Z");
        let leap = chrono::NaiveDate::from_ymd_opt(2026, 12, 31)
            .unwrap()
            .and_hms_milli_opt(23, 59, 59, 1500)
            .unwrap()
            .and_utc();
        let t = PlanTime::from_datetime(leap);
        assert_eq!(t.to_string(), "2026-12-31T23:59:59.999Z");
        assert!(t.datetime() <= leap);
    }

    #[test]
    fn a_sub_millisecond_instant_is_recorded_no_later() {
        let precise = DateTime::from_timestamp(1_767_323_045, 678_999_999).unwrap();
        let t = PlanTime::from_datetime(precise);
        assert!(t.datetime() <= precise);
        assert_eq!(t.to_string(), "2026-01-02T03:04:05.678Z");
    }
}
