//! The report of a sharded `lake gc` run in its three forms: text, the `--json` object (per
//! shard counts; the candidates are in the shard plans), and Prometheus text metrics.

use super::gc_report::{mode_json, mode_text};
use super::gc_run::{apply_counts_text, apply_json, RunFacts};
use lake::collect::apply::ApplyReport;
use lake::collect::plan::{PlanMode, PlanModeRecord, PlanProblem};
use lake::collect::shards::{shard_file_name, ShardEntry, ShardManifest, MANIFEST_FILE};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// One shard of a sharded run.
#[derive(Debug, Clone)]
pub(crate) struct ShardOutcome {
    /// The manifest's entry.
    pub entry: ShardEntry,
    /// Its plan's lineage problems (empty when its plan was not read).
    pub problems: Vec<PlanProblem>,
    /// Foreign entries its listing met (0 when its plan was not read).
    pub foreign_count: u64,
    /// Its apply in this run, when applied.
    pub apply: Option<ApplyReport>,
    /// True when the apply resumed an existing checkpoint.
    pub resumed: bool,
}

/// What a sharded GC run did.
#[derive(Debug, Clone)]
pub(crate) struct ShardedReport {
    /// The manifest made or applied.
    pub manifest: ShardManifest,
    /// Every shard of the manifest, in order.
    pub shards: Vec<ShardOutcome>,
    /// The clock, policy, planning counters (a dry run) and wall times (of planning, of the
    /// applies).
    pub run: RunFacts,
    /// The folder the sharded plan was written to (`--out DIR`).
    pub written: Option<PathBuf>,
    /// True for an apply (`--manifest`).
    pub applying: bool,
    /// The mode record of a sharded plan of one shard over every key (an incremental sharded
    /// plan, or a full one from a build that records it); `None` for a plan of several shards,
    /// which lists every managed key.
    pub mode: Option<PlanModeRecord>,
}

/// Why a sharded plan without a mode record is full.
const SEVERAL_SHARDS: &str =
    "the shards list every managed key (no usable GC state, or --full; with a usable state a sharded plan is one incremental shard)";

impl ShardedReport {
    /// The `--json` object.
    pub(crate) fn to_json(&self) -> Value {
        let m = &self.manifest;
        let shards: Vec<Value> = self.shards.iter().map(shard_json).collect();
        let mut v = self.run.json(&m.root, m.cutoff, m.min_age_seconds);
        v["sharded"] = json!(true);
        // A sharded plan of several shards lists every managed key; an incremental one has one
        // shard (docs/gc.md).
        match &self.mode {
            Some(record) => {
                let recorded = self.shards.iter().filter_map(|s| s.apply.as_ref()).find_map(|a| a.state.as_ref());
                for (key, value) in mode_json(Some(record), recorded) {
                    v[key] = value;
                }
            }
            None => {
                v["mode"] = json!("full");
                v["mode_reason"] = json!(SEVERAL_SHARDS);
            }
        }
        v["manifest_digest"] = json!(m.digest());
        v["shard_count"] = json!(m.count);
        v["lineage_complete"] = json!(m.lineage_complete());
        v["candidate_count"] = json!(m.candidates());
        v["candidate_bytes"] = json!(m.candidate_bytes());
        v["shards"] = json!(shards);
        if let Some(dir) = &self.written {
            v["manifest"] = json!(dir.join(MANIFEST_FILE).display().to_string());
        }
        if self.applying {
            let applied = || self.shards.iter().filter_map(|s| s.apply.as_ref()).map(|a| &a.checkpoint);
            v["deleted"] = json!(applied().map(|c| c.deleted).sum::<u64>());
            v["absent"] = json!(applied().map(|c| c.absent).sum::<u64>());
            v["revived"] = json!(applied().map(|c| c.revived.len()).sum::<usize>());
            v["failed"] = json!(applied().map(|c| c.failed.len()).sum::<usize>());
            v["complete"] = json!(applied().all(|c| c.complete));
        }
        v
    }

    /// Human-readable lines.
    pub(crate) fn to_text(&self) -> String {
        let m = &self.manifest;
        let mode = if self.applying { "sharded apply" } else { "sharded dry run (nothing deleted)" };
        let mut out = self.run.header(mode, &m.root, m.min_age_seconds);
        out += &format!("  cutoff:      {} (one for every shard)\n", m.cutoff);
        out += &format!("  manifest:    {} ({} shards)\n", m.digest(), m.count);
        out += &match &self.mode {
            Some(record) => mode_text(Some(record)),
            None => format!("  mode:        full: {SEVERAL_SHARDS}\n"),
        };
        out += &format!("  candidates:  {} objects, {} bytes\n", m.candidates(), m.candidate_bytes());
        for s in &self.shards {
            let e = &s.entry;
            out += &format!(
                "  shard {:>3}  {}  {} candidates, {} bytes, digest {}\n",
                e.index,
                e.range,
                e.candidates,
                e.bytes,
                &e.digest[..16.min(e.digest.len())]
            );
            if !e.lineage_complete {
                out += "    LINEAGE INCOMPLETE: no shard of this plan is applied. Problems:\n";
                for problem in &s.problems {
                    out += &format!("      - {problem}\n");
                }
            }
            if let Some(a) = &s.apply {
                let c = &a.checkpoint;
                let how = if a.was_complete {
                    "already complete"
                } else if s.resumed {
                    "resumed"
                } else if a.replaced.is_some() {
                    "applied (replacing a finished apply of an earlier plan at its checkpoint)"
                } else {
                    "applied"
                };
                out += &format!(
                    "    {how}: {}; {}\n",
                    apply_counts_text(c),
                    if c.complete { "complete" } else { "NOT complete: run the same command again to resume" }
                );
            }
        }
        if let Some(dir) = &self.written {
            out += &format!(
                "  written:     {} and {} shard plans ({} ...)\n",
                dir.join(MANIFEST_FILE).display(),
                m.count,
                dir.join(shard_file_name(0)).display()
            );
            out += &format!(
                "  apply with:  lake gc {} --min-age {} --apply --manifest {} --checkpoint-dir CKDIR\n",
                m.root,
                humantime::format_duration(Duration::from_secs(m.min_age_seconds)),
                dir.join(MANIFEST_FILE).display()
            );
        }
        out
    }

    /// The metrics in the Prometheus text format: totals labelled with the root, and per shard
    /// candidates labelled with the shard.
    pub(crate) fn to_prometheus(&self) -> String {
        let root = self.manifest.root.replace('\\', "\\\\").replace('"', "\\\"");
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, values: Vec<(String, f64)>| {
            out += &format!("# HELP {name} {help}\n# TYPE {name} gauge\n");
            for (labels, value) in values {
                out += &format!("{name}{{root=\"{root}\"{labels}}} {value}\n");
            }
        };
        let m = &self.manifest;
        gauge("lake_gc_shards", "Shards of the plan.", vec![(String::new(), m.count as f64)]);
        let incremental = self.mode.as_ref().is_some_and(|r| r.mode == PlanMode::Incremental);
        gauge(
            "lake_gc_plan_incremental",
            "1 when the plan was incremental (from the GC state), 0 when full.",
            vec![(String::new(), f64::from(u8::from(incremental)))],
        );
        gauge(
            "lake_gc_lineage_complete",
            "1 when every shard was planned on complete lineage.",
            vec![(String::new(), f64::from(u8::from(m.lineage_complete())))],
        );
        let per_shard = |f: &dyn Fn(&ShardOutcome) -> f64| {
            self.shards.iter().map(|s| (format!(",shard=\"{}\"", s.entry.index), f(s))).collect::<Vec<_>>()
        };
        gauge("lake_gc_candidates", "Objects the shard would delete.", per_shard(&|s| s.entry.candidates as f64));
        gauge("lake_gc_candidate_bytes", "Bytes of the shard's candidates.", per_shard(&|s| s.entry.bytes as f64));
        let applied = |f: &dyn Fn(&ApplyReport) -> f64| {
            self.shards
                .iter()
                .filter_map(|s| s.apply.as_ref().map(|a| (format!(",shard=\"{}\"", s.entry.index), f(a))))
                .collect::<Vec<_>>()
        };
        if self.applying {
            gauge("lake_gc_deleted", "Objects the shard's apply deleted.", applied(&|a| a.checkpoint.deleted as f64));
            gauge(
                "lake_gc_complete",
                "1 when the shard's apply is complete.",
                applied(&|a| f64::from(u8::from(a.checkpoint.complete))),
            );
        }
        gauge("lake_gc_plan_seconds", "Wall time of planning.", vec![(String::new(), self.run.plan_seconds)]);
        gauge("lake_gc_apply_seconds", "Wall time of the applies.", vec![(String::new(), self.run.apply_seconds)]);
        out
    }

    /// Exit code: 0 done; 3 dry run with a shard on incomplete lineage; 4 an applied shard has
    /// work left.
    pub(crate) fn exit_code(&self) -> u8 {
        if self.applying {
            let left = self.shards.iter().filter_map(|s| s.apply.as_ref()).any(|a| !a.checkpoint.complete);
            return if left { 4 } else { 0 };
        }
        if self.manifest.lineage_complete() {
            0
        } else {
            3
        }
    }
}

fn shard_json(s: &ShardOutcome) -> Value {
    let e = &s.entry;
    let mut v = json!({
        "index": e.index,
        "range": {"after": e.range.after, "until": e.range.until},
        "digest": e.digest,
        "candidate_count": e.candidates,
        "candidate_bytes": e.bytes,
        "lineage_complete": e.lineage_complete,
        "problems": s.problems,
        "foreign_count": s.foreign_count,
    });
    if let (Some(a), Value::Object(map)) = (&s.apply, &mut v) {
        map.extend(apply_json(a));
        map.insert("resumed".into(), json!(s.resumed));
    }
    v
}
