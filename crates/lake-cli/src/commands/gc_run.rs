//! What the reports of a whole and of a sharded `lake gc` run share: the run's facts (the
//! store's clock, the lake's policy, the planning counters, wall times) and how they, and an
//! apply's counts, read as text and as `--json` fields.

use lake::collect::apply::ApplyReport;
use lake::collect::checkpoint::ApplyCheckpoint;
use lake::collect::plan_time::PlanTime;
use lake::collect::planner::{format_time, PlanStats};
use lake::store::clock::ClockReading;
use lake::store::descriptor::LakeDescriptor;
use serde_json::{json, Value};
use std::time::Duration;

/// What every GC run reports beside its plans.
#[derive(Debug, Clone)]
pub(crate) struct RunFacts {
    /// Planning counters (absent when resuming or applying a saved plan).
    pub stats: Option<PlanStats>,
    /// The clock reading the cutoff came from.
    pub clock: ClockReading,
    /// The lake's policy floor.
    pub policy: LakeDescriptor,
    /// Wall time of planning, seconds (0 when resuming or applying a saved plan).
    pub plan_seconds: f64,
    /// Wall time of the apply, seconds (0 for a dry run).
    pub apply_seconds: f64,
}

impl RunFacts {
    /// The `--json` fields of every run, for a plan of lake `root` at `cutoff` with the
    /// horizon `min_age_seconds`: those, the policy, the store's clock, the wall times and,
    /// when planned in this run, `metrics`, `own_garbage` and `write_intents`.
    pub(crate) fn json(&self, root: &str, cutoff: PlanTime, min_age_seconds: u64) -> Value {
        let mut v = json!({
            "root": root,
            "cutoff": cutoff,
            "min_age_seconds": min_age_seconds,
            "policy_min_age_seconds": self.policy.gc.min_age_seconds,
            "store_now": format_time(self.clock.store_now),
            "clock_skew_ms": self.clock.skew_ms(),
            "plan_seconds": self.plan_seconds,
            "apply_seconds": self.apply_seconds,
        });
        if let Some(s) = &self.stats {
            v["metrics"] = json!({
                "tables": s.tables,
                "live_references": s.live_references,
                "objects_listed": s.objects_listed,
                "inventory_pages": s.inventory_pages,
                "unmanaged_keys": s.unmanaged_keys,
                "foreign_entries": s.foreign_entries,
                "empty_folders": s.empty_folders,
                "journal_garbage": s.journal_garbage,
                "staged_uploads": s.staged_uploads,
                "clock_probes": s.clock_probes,
                "live_objects": s.live_objects,
                "young_objects": s.young_objects,
                "spilled_runs": s.spilled_runs,
                "looked_up": s.looked_up,
                "looked_up_gone": s.looked_up_gone,
                "live_keys_looked_up": s.live_keys_looked_up,
                "released_tables": s.released_tables,
                "held": s.held.len(),
                "held_overflow": s.held_overflow,
            });
            v["own_garbage"] = json!({
                "empty_folders": s.empty_folders,
                "staged_uploads": s.staged_uploads,
                "clock_probes": s.clock_probes,
                "reference_logs": s.journal_garbage,
            });
            v["write_intents"] = intents_json(s);
        }
        v
    }

    /// The first lines of a run's text: what ran (`mode`), the lake, the horizon and the
    /// store's clock.
    pub(crate) fn header(&self, mode: &str, root: &str, min_age_seconds: u64) -> String {
        let mut out = format!("lake gc {mode}\n");
        out += &format!("  root:        {root}\n");
        out += &format!(
            "  policy:      min_age {} (lake floor {})\n",
            humantime::format_duration(Duration::from_secs(min_age_seconds)),
            humantime::format_duration(self.policy.min_age())
        );
        out += &format!(
            "  store clock: {} (local clock {:+} ms)\n",
            format_time(self.clock.store_now),
            self.clock.skew_ms()
        );
        out
    }
}

/// An apply's `--json` fields: the checkpoint's counts and keys, the delete pages of this run,
/// `already_complete`, and `replaced` (the finished apply of another plan this run's plan
/// replaced at the checkpoint, `{"plan_digest", "cutoff"}`, or null).
pub(crate) fn apply_json(a: &ApplyReport) -> serde_json::Map<String, Value> {
    let c = &a.checkpoint;
    let v = json!({
        "deleted": c.deleted,
        "already_gone": c.already_gone,
        "absent": c.absent,
        "skipped": c.skipped.len(),
        "skipped_keys": c.skipped,
        "failed": c.failed.len(),
        "failed_keys": c.failed,
        "revived": c.revived.len(),
        "revived_keys": c.revived,
        "complete": c.complete,
        "delete_pages": a.pages,
        "already_complete": a.was_complete,
        "replaced": match &a.replaced {
            Some(r) => json!({"plan_digest": r.plan_digest, "cutoff": r.cutoff}),
            None => Value::Null,
        },
    });
    match v {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

/// An apply's counts as one phrase of text.
pub(crate) fn apply_counts_text(c: &ApplyCheckpoint) -> String {
    format!(
        "deleted {}, already gone {}, gone (store does not say which run removed them) {}, revived {}, skipped {}, failed {}",
        c.deleted,
        c.already_gone,
        c.absent,
        c.revived.len(),
        c.skipped.len(),
        c.failed.len()
    )
}

/// The write intents a plan read (commits that may still land; their references are kept), for
/// `--json`: count, oldest, tables, references kept, and each intent.
pub(crate) fn intents_json(stats: &PlanStats) -> Value {
    let intents = &stats.write_intents;
    let mut tables: Vec<&str> = intents.iter().map(|i| i.table.as_str()).collect();
    tables.sort();
    tables.dedup();
    let oldest = intents.iter().map(|i| i.last_modified_ms).min().and_then(chrono::DateTime::from_timestamp_millis);
    json!({
        "count": intents.len(),
        "oldest": oldest.map(format_time),
        "tables": tables,
        "references": stats.intent_references,
        "intents": intents,
    })
}
