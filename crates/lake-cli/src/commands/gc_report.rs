//! The report of one `lake gc` run in its three forms: human-readable text, the `--json` object
//! (its candidate array streamed from the plan's list), and Prometheus text metrics.

use super::gc_run::{apply_counts_text, apply_json, intents_json, RunFacts};
use lake::collect::apply::ApplyReport;
use lake::collect::inventory::report::ReportSummary;
use lake::collect::plan::{GcPlan, PlanMode, PlanModeRecord};
use lake::collect::planner::format_time;
use serde_json::{json, Value};

/// What a GC run did.
#[derive(Debug, Clone)]
pub(crate) struct GcReport {
    /// The plan made or resumed.
    pub plan: GcPlan,
    /// The plan's digest ([`GcPlan::digest`], computed once).
    pub digest: String,
    /// The clock, policy, planning counters and wall times.
    pub run: RunFacts,
    /// Apply outcome, when applying.
    pub apply: Option<ApplyReport>,
    /// True when the plan came from an existing checkpoint.
    pub resumed: bool,
    /// The S3 Inventory report planned from (`--inventory`), and how much of the listing it
    /// gave.
    pub inventory: Option<ReportSummary>,
    /// Restore tags of the lake's tables (`lake-restore-*`): each pins its version (and the
    /// objects it references) until its restore ends, or, stale, until `lake cleanup`.
    pub restore_tags: Vec<lake::lance::history::RestoreTag>,
}

/// The `--json` document of a run: [`GcReport::to_json`]'s fields and `candidates`, the plan's
/// candidate array streamed from its list (a spilled list is read once, never loaded whole).
/// Keys are in ascending order, as in every other `--json` object.
pub(crate) struct JsonReport<'a>(pub &'a GcReport);

impl serde::Serialize for JsonReport<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let fields = match self.0.to_json() {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        let mut map = serializer.serialize_map(Some(fields.len() + 1))?;
        let mut candidates = Some(&self.0.plan.candidates);
        for (key, value) in &fields {
            if key.as_str() > "candidates" {
                if let Some(list) = candidates.take() {
                    map.serialize_entry("candidates", list)?;
                }
            }
            map.serialize_entry(key, value)?;
        }
        if let Some(list) = candidates {
            map.serialize_entry("candidates", list)?;
        }
        map.end()
    }
}

impl GcReport {
    /// The `--json` object without its `candidates` array (see [`JsonReport`], which adds it
    /// streamed).
    pub(crate) fn to_json(&self) -> Value {
        let p = &self.plan;
        let mut v = self.run.json(&p.root, p.cutoff, p.min_age_seconds);
        v["digest"] = json!(self.digest);
        v["lineage_complete"] = json!(p.lineage_complete);
        v["problems"] = json!(p.problems);
        v["foreign_count"] = json!(p.foreign_count);
        v["foreign"] = json!(p.foreign);
        v["basis"] = json!(p.basis);
        v["candidate_count"] = json!(p.candidates.len());
        v["candidate_bytes"] = json!(p.candidate_bytes());
        v["resumed"] = json!(self.resumed);
        if let Value::Object(map) = &mut v {
            map.extend(mode_json(self.plan.mode.as_ref(), self.apply.as_ref().and_then(|a| a.state.as_ref())));
        }
        v["restore_tags"] = serde_json::to_value(&self.restore_tags).unwrap_or(Value::Null);
        if let Some(i) = &self.inventory {
            v["inventory"] = serde_json::to_value(i).unwrap_or(Value::Null);
        }
        if let (Some(a), Value::Object(map)) = (&self.apply, &mut v) {
            map.extend(apply_json(a));
        }
        v
    }

    /// The metrics summary in the Prometheus text exposition format (for a node exporter's
    /// textfile collector): one gauge per figure, labelled with the lake root.
    pub(crate) fn to_prometheus(&self) -> String {
        let root = self.plan.root.replace('\\', "\\\\").replace('"', "\\\"");
        let mut figures: Vec<(&str, &str, f64)> = vec![
            ("lake_gc_candidates", "Objects the plan would delete.", self.plan.candidates.len() as f64),
            ("lake_gc_candidate_bytes", "Bytes of the candidates.", self.plan.candidate_bytes() as f64),
            (
                "lake_gc_lineage_complete",
                "1 when every table's journal is complete.",
                f64::from(u8::from(self.plan.lineage_complete)),
            ),
            (
                "lake_gc_foreign_entries",
                "Entries under objects/ that are no objects (links, devices, folder markers).",
                self.plan.foreign_count as f64,
            ),
            (
                "lake_gc_clock_skew_seconds",
                "Local clock minus the store's clock.",
                self.run.clock.skew_ms() as f64 / 1000.0,
            ),
            (
                "lake_gc_plan_incremental",
                "1 when the plan was incremental (from the GC state), 0 when full.",
                f64::from(u8::from(self.plan.mode.as_ref().is_some_and(|r| r.mode == PlanMode::Incremental))),
            ),
            ("lake_gc_plan_seconds", "Wall time of planning.", self.run.plan_seconds),
            ("lake_gc_apply_seconds", "Wall time of the apply.", self.run.apply_seconds),
        ];
        if let Some(s) = &self.run.stats {
            figures.push((
                "lake_gc_objects_listed",
                "Objects listed under the managed prefix.",
                s.objects_listed as f64,
            ));
            figures.push((
                "lake_gc_live_references",
                "Live references read from the journal.",
                s.live_references as f64,
            ));
            figures.push(("lake_gc_inventory_pages", "Listing requests.", s.inventory_pages as f64));
        }
        if let Some(a) = &self.apply {
            let c = &a.checkpoint;
            figures.push(("lake_gc_deleted", "Objects deleted.", c.deleted as f64));
            figures.push(("lake_gc_already_gone", "Candidates already gone.", c.already_gone as f64));
            figures.push((
                "lake_gc_absent",
                "Candidates the store confirms gone without saying whether this apply removed them (S3).",
                c.absent as f64,
            ));
            figures.push((
                "lake_gc_skipped",
                "Candidates left alone (no longer a regular file).",
                c.skipped.len() as f64,
            ));
            figures.push(("lake_gc_failed", "Deletes that failed and stay pending.", c.failed.len() as f64));
            figures.push((
                "lake_gc_revived",
                "Candidates dropped because a newer version references them.",
                c.revived.len() as f64,
            ));
            figures.push(("lake_gc_delete_requests", "Delete pages sent in this run.", a.pages as f64));
            figures.push(("lake_gc_complete", "1 when the apply is complete.", f64::from(u8::from(c.complete))));
        }
        let mut out = String::new();
        for (name, help, value) in figures {
            out += &format!("# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{root=\"{root}\"}} {value}\n");
        }
        out
    }

    /// Human-readable lines.
    pub(crate) fn to_text(&self) -> String {
        let p = &self.plan;
        let mut out = String::new();
        let mode = if self.apply.is_some() { "apply" } else { "dry run (nothing deleted)" };
        out += &self.run.header(mode, &p.root, p.min_age_seconds);
        out += &format!("  cutoff:      {} (only older objects are candidates)\n", p.cutoff);
        out += &format!("  plan digest: {}\n", self.digest);
        out += &mode_text(self.plan.mode.as_ref());
        if let Some(i) = &self.inventory {
            out += &format!(
                "  inventory:   report {} (created {}): {} entries from the report, {} listed live after {} ({} requests)\n",
                i.manifest, i.created, i.from_report, i.from_listing, i.boundary, i.listing_requests
            );
        }
        for b in &p.basis {
            out += &format!("  table `{}` at version {}\n", b.table, b.version);
        }
        if let Some(s) = self.run.stats.as_ref().filter(|s| !s.write_intents.is_empty()) {
            out += &intents_text(s, &p.root);
        }
        if !p.lineage_complete {
            out += "  LINEAGE INCOMPLETE: no candidates are proposed and apply refuses. Problems:\n";
            for problem in &p.problems {
                out += &format!("    - {}\n", crate::remedy::with_hints(&problem.to_string(), "      "));
            }
        }
        if p.foreign_count > 0 {
            out += &format!(
                "  foreign:     {} entries under objects/ are no objects; never followed, planned or deleted:\n",
                p.foreign_count
            );
            for f in &p.foreign {
                out += &format!("    {f}\n");
            }
        }
        for t in &self.restore_tags {
            out += &match t.stale {
                true => format!(
                    "  restore tag: `{}` of `{}` pins version {} since {}: STALE (a restore killed after tagging); `lake cleanup ROOT --table {}` removes it\n",
                    t.name, t.table, t.version, format_time(t.started), t.table
                ),
                false => format!(
                    "  restore tag: `{}` of `{}` pins version {} since {} (a restore in progress, or killed: stale once older than the lake's floor + 2 x its margin + the commit deadline)\n",
                    t.name, t.table, t.version, format_time(t.started)
                ),
            };
        }
        out += &format!("  candidates:  {} objects, {} bytes\n", p.candidates.len(), p.candidate_bytes());
        if let Some(s) = self
            .run
            .stats
            .as_ref()
            .filter(|s| s.empty_folders + s.staged_uploads + s.clock_probes + s.journal_garbage > 0)
        {
            out += &format!(
                "  own garbage: {} empty folders, {} staged uploads, {} clock probes, {} reference logs (left by killed or failed runs; among the candidates)\n",
                s.empty_folders, s.staged_uploads, s.clock_probes, s.journal_garbage
            );
        }
        match p.candidates.first(50) {
            Ok(first) => {
                for c in first {
                    let kind = match lake::store::keys::garbage_kind(c.key.as_str()) {
                        Some(lake::store::keys::GarbageKind::Object) | None => String::new(),
                        Some(kind) => format!("  ({})", kind.name().replace('_', " ")),
                    };
                    out += &format!("    {}  {} bytes  {}{kind}\n", c.key, c.size, c.last_modified);
                }
            }
            Err(e) => out += &format!("    (cannot read the candidate list: {e})\n"),
        }
        if p.candidates.len() > 50 {
            out += &format!("    ... {} more (use --json or --out for the full list)\n", p.candidates.len() - 50);
        }
        if let Some(a) = &self.apply {
            let c = &a.checkpoint;
            if a.was_complete {
                out += "  apply: already complete; nothing to do\n";
            }
            if let Some(r) = &a.replaced {
                out += &format!(
                    "  apply: replaces the finished apply of plan {} (cutoff {}) the checkpoint recorded\n",
                    r.plan_digest, r.cutoff
                );
            }
            out += &format!("  {} ({} delete requests this run)\n", apply_counts_text(c), a.pages);
            for s in c.skipped.iter().take(20) {
                out += &format!("    skipped {s}\n");
            }
            out += if c.complete { "  complete\n" } else { "  NOT complete: run the same command again to resume\n" };
            if let Some(key) = &a.state {
                out += &format!("  GC state:    recorded {key} (the next plan may start from it)\n");
            }
        }
        out
    }

    /// Exit code: 0 done; 3 dry run on incomplete lineage; 4 apply with work left.
    pub(crate) fn exit_code(&self) -> u8 {
        match &self.apply {
            Some(a) if !a.checkpoint.complete => 4,
            Some(_) => 0,
            None if !self.plan.lineage_complete => 3,
            None => 0,
        }
    }
}

/// The same as lines of text.
fn intents_text(stats: &lake::collect::planner::PlanStats, root: &str) -> String {
    let v = intents_json(stats);
    let mut out = format!(
        "  write intents: {} (oldest {}) in table(s) {}: commits that may still land; their {} references are kept. `lake refs recover {root}` resolves those whose writer stopped\n",
        stats.write_intents.len(),
        v["oldest"].as_str().unwrap_or("?"),
        v["tables"].as_array().map(|t| t.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(", ")).unwrap_or_default(),
        stats.intent_references
    );
    for i in stats.write_intents.iter().take(20) {
        out += &format!("    {} ({}, {} references)\n", i.key, i.operation, i.references);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use lake::collect::candidates::{CandidateList, CandidateWriter};
    use lake::collect::plan::{Candidate, PLAN_FORMAT_VERSION, STAGE_ORPHAN_OBJECTS};
    use lake::store::clock::ClockReading;
    use lake::store::descriptor::{GcPolicy, LakeDescriptor, DESCRIPTOR_FORMAT_VERSION};

    fn report(candidates: CandidateList) -> GcReport {
        let now = chrono::DateTime::parse_from_rfc3339("2026-01-02T00:00:00Z").unwrap().with_timezone(&chrono::Utc);
        let plan = GcPlan {
            format_version: PLAN_FORMAT_VERSION,
            stage: STAGE_ORPHAN_OBJECTS.into(),
            root: "file:///lake".into(),
            lake_id: None,
            min_age_seconds: 4,
            cutoff: now.into(),
            basis: Vec::new(),
            lineage_complete: true,
            problems: Vec::new(),
            foreign_count: 0,
            foreign: Vec::new(),
            shard: None,
            mode: None,
            candidates,
        };
        GcReport {
            digest: plan.digest().unwrap(),
            plan,
            run: RunFacts {
                stats: None,
                clock: ClockReading { store_now: now, local_now: now },
                policy: LakeDescriptor {
                    format_version: DESCRIPTOR_FORMAT_VERSION,
                    created_at: format_time(now),
                    lake_id: None,
                    gc: GcPolicy { min_age_seconds: 4 },
                },
                plan_seconds: 0.0,
                apply_seconds: 0.0,
            },
            apply: None,
            resumed: false,
            inventory: None,
            restore_tags: Vec::new(),
        }
    }

    /// `--json` streams a spilled candidate list (a zero budget spills every candidate) into
    /// the same document as the list held in memory (the CLI's smallest budget, 1 MiB, spills
    /// only large plans, so the binary's tests cannot reach this path cheaply).
    #[test]
    fn a_spilled_candidate_list_streams_into_the_same_json() {
        let candidates: Vec<Candidate> = (0..50)
            .map(|i| Candidate {
                key: format!("objects/01J0000000000000000000{i:04}/c.bin").into(),
                size: i,
                last_modified: "2026-01-01T00:00:00.000Z".parse().unwrap(),
            })
            .collect();
        let mut writer = CandidateWriter::new(0);
        for c in &candidates {
            writer.push(c.clone()).unwrap();
        }
        let spilled = writer.finish().unwrap();
        assert!(spilled.is_spilled());
        let json = |r: &GcReport| serde_json::to_value(JsonReport(r)).unwrap();
        let (from_disk, from_memory) = (json(&report(spilled)), json(&report(CandidateList::from_sorted(candidates))));
        assert_eq!(from_disk["candidates"].as_array().map(Vec::len), Some(50));
        assert_eq!(from_disk, from_memory);
    }
}

/// How a plan found its candidates, as `--json` fields: `mode` (`incremental` or `full`; a plan
/// without a mode record, made by an earlier build, is full), `state` (the digest of the GC
/// state an incremental plan started from, else null), `mode_reason` (why a plan is full, else
/// null), `listed_after` (an incremental plan listed only the keys after it, else null),
/// `full_cutoff` (the cutoff of the last full plan of the chain, null without a mode record),
/// `held` (keys held as young for the next run), and `state_recorded` (the key of the GC state
/// a complete apply recorded, else null).
pub(crate) fn mode_json(
    record: Option<&PlanModeRecord>,
    state_recorded: Option<&String>,
) -> serde_json::Map<String, Value> {
    let v = json!({
        "mode": record.map_or(PlanMode::Full, |r| r.mode).as_str(),
        "state": record.and_then(|r| r.state.as_ref()),
        "mode_reason": record.and_then(|r| r.reason.as_ref()),
        "listed_after": record.and_then(|r| r.listed_after.as_ref()),
        "full_cutoff": record.map(|r| r.full_cutoff),
        "held": record.map_or(0, |r| r.held.len()),
        "state_recorded": state_recorded,
    });
    match v {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

/// The `mode:` line of a plan's text: incremental and the state it started from, or full and why.
pub(crate) fn mode_text(record: Option<&PlanModeRecord>) -> String {
    match record {
        Some(r) if r.mode == PlanMode::Incremental => format!(
            "  mode:        incremental, from GC state {} (listed the keys after {}; last full plan at cutoff {})\n",
            r.state.as_deref().unwrap_or("?"),
            r.listed_after.as_deref().unwrap_or("?"),
            r.full_cutoff
        ),
        Some(r) => format!("  mode:        full: {}\n", r.reason.as_deref().unwrap_or("every managed key listed")),
        None => "  mode:        full: a plan without a mode record (made by an earlier build)\n".into(),
    }
}
