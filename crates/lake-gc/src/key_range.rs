//! [`KeyRange`]: a contiguous range of keys in byte order, and the split of the managed key
//! space into ranges by ULID time.
//!
//! Managed keys are `objects/<ULID>/<name>` and ULIDs sort by their time
//! ([`lake_store::keys::first_key_at`]), so a range of mint times is a range of keys. Ranges are
//! half-open on the left, `after < key <= until`, because that is how S3 ListObjectsV2 resumes
//! (`start-after`) and how [`crate::inventory::ObjectInventory::list_from`] starts: a range's
//! listing is `list_from(after)` stopped at the first key past `until`. Whatever the boundary
//! keys are, and whether or not an object has exactly a boundary key, ranges built from one
//! ascending list of boundaries ([`KeyRange::split_at`]) are disjoint and cover every key.
//!
//! Used by parallel listing (ranges listed concurrently and concatenated in order) and by
//! sharded plans (one shard per range).

use chrono::{DateTime, Utc};
use lake_store::keys::first_key_at;
use lake_store::layout::OBJECTS_PREFIX;
use serde::{Deserialize, Serialize};
use ulid::Ulid;

/// The time (UTC, milliseconds) of the ULID that is the first segment of `key` under
/// `objects/`: the mint time of a managed key `objects/<ULID>/<name>` or folder
/// `objects/<ULID>/`, and of a boundary key `objects/<ULID>` ([`first_key_at`]); also of an
/// unmanaged key inside a ULID folder (`objects/<ULID>/a/b`). `None` when that segment is no
/// canonical ULID (26 characters of uppercase Crockford base32).
///
/// A key with time `t` sorts at or after `first_key_at(t)` and before `first_key_at(t + 1 ms)`,
/// which is what lets a listing split the key space at times.
pub fn key_time(key: &str) -> Option<DateTime<Utc>> {
    let rest = key.strip_prefix(OBJECTS_PREFIX)?.strip_prefix('/')?;
    let segment = rest.split('/').next()?;
    if segment.len() != 26 {
        return None;
    }
    let ulid = Ulid::from_string(segment).ok().filter(|u| u.to_string() == segment)?;
    DateTime::<Utc>::from_timestamp_millis(i64::try_from(ulid.timestamp_ms()).ok()?)
}

/// The keys `k` with `after < k <= until` in byte order (the order of S3 ListObjectsV2); `None`
/// leaves that side unbounded.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRange {
    /// Keys strictly greater than this (all keys from the first when `None`).
    pub after: Option<String>,
    /// Keys up to and including this (all keys to the last when `None`).
    pub until: Option<String>,
}

impl KeyRange {
    /// Every key.
    pub fn all() -> Self {
        Self { after: None, until: None }
    }

    /// True when `key` lies in the range.
    pub fn contains(&self, key: &str) -> bool {
        self.after.as_deref().is_none_or(|a| key > a) && !self.is_past(key)
    }

    /// True when `key` sorts after the range's last key: a listing in key order can stop.
    pub fn is_past(&self, key: &str) -> bool {
        self.until.as_deref().is_some_and(|u| key > u)
    }

    /// True when the range covers every key.
    pub fn is_all(&self) -> bool {
        self.after.is_none() && self.until.is_none()
    }

    /// The keys of this range strictly after `key`: the range itself when `key` sorts before
    /// it, `None` when no key of the range is after `key`.
    pub fn after_key(&self, key: &str) -> Option<KeyRange> {
        if self.until.as_deref().is_some_and(|u| u <= key) {
            return None;
        }
        match self.after.as_deref() {
            Some(a) if a >= key => Some(self.clone()),
            _ => Some(KeyRange { after: Some(key.to_string()), until: self.until.clone() }),
        }
    }

    /// The ranges between ascending `boundaries`: `(-, b0]`, `(b0, b1]`, ..., `(bn, -)`;
    /// `boundaries.len() + 1` ranges, disjoint and covering every key. Duplicate boundaries are
    /// dropped (an empty range helps no one); boundaries must ascend.
    pub fn split_at(boundaries: &[String]) -> Vec<KeyRange> {
        let mut cuts: Vec<&String> = boundaries.iter().collect();
        cuts.dedup();
        let mut ranges = Vec::with_capacity(cuts.len() + 1);
        let mut after: Option<String> = None;
        for cut in cuts {
            ranges.push(KeyRange { after: after.clone(), until: Some(cut.clone()) });
            after = Some(cut.clone());
        }
        ranges.push(KeyRange { after, until: None });
        ranges
    }

    /// Checks that `ranges` are what [`KeyRange::split_at`] makes: at least one, the first
    /// unbounded below, the last unbounded above, each ending where the next begins, each
    /// non-empty (`after < until`). Such ranges are disjoint and cover every key.
    ///
    /// # Errors
    /// A sentence naming the first range at fault (by its index).
    pub fn check_partition(ranges: &[KeyRange]) -> Result<(), String> {
        let (Some(first), Some(last)) = (ranges.first(), ranges.last()) else {
            return Err("there are no key ranges".into());
        };
        if first.after.is_some() {
            return Err(format!("range 0 {first} does not start at the first key"));
        }
        if last.until.is_some() {
            return Err(format!("range {} {last} does not end at the last key", ranges.len() - 1));
        }
        for (i, pair) in ranges.windows(2).enumerate() {
            if pair[0].until.is_none() || pair[0].until != pair[1].after {
                return Err(format!("range {i} {} does not end where range {} {} begins", pair[0], i + 1, pair[1]));
            }
        }
        for (i, r) in ranges.iter().enumerate() {
            if let (Some(a), Some(u)) = (&r.after, &r.until) {
                if a >= u {
                    return Err(format!("range {i} {r} is empty"));
                }
            }
        }
        Ok(())
    }

    /// `n` (at least 1) ranges of the managed key space whose boundaries are the first keys
    /// minted at equal steps of time between `from` and `to` (UTC): objects minted at a steady
    /// rate spread evenly over them. The first range takes every key before `from`'s (and keys
    /// below `objects/`), the last every key after `to`'s (young keys, and unmanaged keys under
    /// `objects/` that sort after ULIDs). `from` at or after `to` gives one range of every key.
    pub fn split_by_time(from: DateTime<Utc>, to: DateTime<Utc>, n: usize) -> Vec<KeyRange> {
        let n = n.max(1);
        let from_ms = from.timestamp_millis();
        let span = (to.timestamp_millis() - from_ms).max(0) as i128;
        if span == 0 {
            return vec![Self::all()];
        }
        let boundaries: Vec<String> = (1..n)
            .filter_map(|i| {
                let at = from_ms as i128 + span * i as i128 / n as i128;
                DateTime::<Utc>::from_timestamp_millis(at as i64).map(first_key_at)
            })
            .collect();
        Self::split_at(&boundaries)
    }
}

impl std::fmt::Display for KeyRange {
    /// `(after, until]`, with `-` for an unbounded side.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({}, {}]", self.after.as_deref().unwrap_or("-"), self.until.as_deref().unwrap_or("-"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_from_boundaries_are_disjoint_and_cover_every_key() {
        let ranges = KeyRange::split_at(&["b".to_string(), "b".to_string(), "d".to_string()]);
        assert_eq!(ranges.len(), 3);
        for key in ["", "a", "b", "b0", "c", "d", "d/x", "z"] {
            assert_eq!(ranges.iter().filter(|r| r.contains(key)).count(), 1, "{key}");
        }
        assert!(ranges[0].contains("b") && ranges[1].contains("d") && ranges[2].contains("d0"));
        assert!(ranges[0].is_past("b0") && !ranges[2].is_past("zzz"));
        assert_eq!(ranges[1].to_string(), "(b, d]");
        assert!(KeyRange::split_at(&[]).first().is_some_and(KeyRange::is_all));
        assert_eq!(KeyRange::check_partition(&ranges), Ok(()));
        let mut gap = ranges.clone();
        gap[1].after = Some("c".into());
        assert!(KeyRange::check_partition(&gap).unwrap_err().contains("range 0"));
        assert!(KeyRange::check_partition(&ranges[1..]).unwrap_err().contains("first key"));
        assert!(KeyRange::check_partition(&ranges[..2]).unwrap_err().contains("last key"));
        assert!(KeyRange::check_partition(&[]).is_err());
        let empty = KeyRange::split_at(&["b".to_string(), "a".to_string()]);
        assert!(KeyRange::check_partition(&empty).unwrap_err().contains("empty"));
    }

    #[test]
    fn time_ranges_follow_mint_times() {
        let from = DateTime::<Utc>::from_timestamp_millis(1_700_000_000_000).unwrap();
        let to = from + chrono::Duration::hours(4);
        let ranges = KeyRange::split_by_time(from, to, 4);
        assert_eq!(ranges.len(), 4);
        let key_at = |h: i64, m: i64| {
            let t = from + chrono::Duration::hours(h) + chrono::Duration::minutes(m);
            format!("{}Z/x", first_key_at(t))
        };
        for (h, expected) in [(0, 0), (1, 1), (2, 2), (3, 3), (5, 3)] {
            let key = key_at(h, 30);
            assert!(ranges[expected].contains(&key), "{h}h30 -> {expected}");
        }
        assert!(ranges[0].contains("objects/") && ranges[3].contains("objects/unmanaged"));
        assert_eq!(KeyRange::split_by_time(to, from, 3).len(), 1, "an empty span has one range");
        assert_eq!(KeyRange::split_by_time(from, to, 0).len(), 1);
    }

    #[test]
    fn key_times_place_keys_between_boundaries() {
        let t = DateTime::<Utc>::from_timestamp_millis(1_700_000_000_123).unwrap();
        let boundary = first_key_at(t);
        let key = format!("{boundary}/x");
        assert_eq!(key_time(&boundary), Some(t));
        assert_eq!(key_time(&key), Some(t));
        assert_eq!(key_time(&format!("{key}/nested")), Some(t));
        assert!(key.as_str() < first_key_at(t + chrono::Duration::milliseconds(1)).as_str());
        let longer = format!("{boundary}Z/x");
        for other in ["objects/a", "objects/", "tables/x", &boundary.to_lowercase(), &longer] {
            assert_eq!(key_time(other), None, "{other}");
        }
    }

    #[test]
    fn the_part_after_a_key() {
        let r = KeyRange { after: Some("b".into()), until: Some("d".into()) };
        assert_eq!(r.after_key("a"), Some(r.clone()));
        assert_eq!(r.after_key("b"), Some(r.clone()));
        assert_eq!(r.after_key("c").unwrap().to_string(), "(c, d]");
        assert_eq!(r.after_key("d"), None);
        assert_eq!(r.after_key("e"), None);
        assert_eq!(KeyRange::all().after_key("x").unwrap().to_string(), "(x, -]");
    }
}
