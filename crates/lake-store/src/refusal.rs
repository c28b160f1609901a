//! [`Refusal`]: the kinds of safety refusals, so that a caller (the CLI's JSON, the Python
//! exception's `kind`, a Ray task, a dashboard) tells one from another without reading English.
//! A refusal deletes and writes nothing; its error's message says what was wrong and what to do.

use serde::Serialize;

/// Why a request was refused by a safety rule. The names ([`Refusal::as_str`], and the serde
/// form) are stable: they appear in `lake --json` errors and as `kind` on Python exceptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Refusal {
    /// A `min_age` GC cannot use: not positive, under 1 s, or past what this build represents
    /// (docs/gc.md, invariant 9).
    Horizon,
    /// A `min_age` below the lake's policy floor without `allow_below_policy` (Delta Lake's
    /// retention check, docs/gc.md invariant 9).
    PolicyFloor,
    /// This host's clock differs from the store's by more than `max_clock_skew`.
    ClockSkew,
    /// A cutoff later than the store's now minus `min_age` (given explicitly, or a plan's):
    /// objects that young may still be published.
    CutoffTooLate,
    /// A plan, checkpoint, manifest or shard made for another lake.
    BoundToRoot,
    /// A plan made with another `min_age` than the one given.
    BoundToMinAge,
    /// A shard that is not the one its manifest binds (edited, swapped, of another sharded plan),
    /// or a shard applied without its manifest.
    BoundToManifest,
    /// Shards that do not fit together: a shard count or index out of range, ranges that do not
    /// partition the keys, documents of different plans, an unreadable spec.
    ShardMismatch,
    /// The store lacks a capability lake's safety rests on: it accepted a create-only write
    /// (`PutMode::Create`, S3's `If-None-Match: *`) over an existing key
    /// ([`crate::store::LakeStore::require_create_only`]).
    StoreCapability,
}

impl Refusal {
    /// The stable name (`policy_floor`, ...), as in the serde form.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Horizon => "horizon",
            Refusal::PolicyFloor => "policy_floor",
            Refusal::ClockSkew => "clock_skew",
            Refusal::CutoffTooLate => "cutoff_too_late",
            Refusal::BoundToRoot => "bound_to_root",
            Refusal::BoundToMinAge => "bound_to_min_age",
            Refusal::BoundToManifest => "bound_to_manifest",
            Refusal::ShardMismatch => "shard_mismatch",
            Refusal::StoreCapability => "store_capability",
        }
    }

    /// Every kind, for tests and documentation.
    pub const ALL: [Refusal; 9] = [
        Refusal::Horizon,
        Refusal::PolicyFloor,
        Refusal::ClockSkew,
        Refusal::CutoffTooLate,
        Refusal::BoundToRoot,
        Refusal::BoundToMinAge,
        Refusal::BoundToManifest,
        Refusal::ShardMismatch,
        Refusal::StoreCapability,
    ];
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_serde_form() {
        for r in Refusal::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), serde_json::Value::String(r.as_str().into()));
        }
    }
}
