//! Sharded plans: one GC plan made as N shards over disjoint key ranges, bound by a manifest.
//!
//! A coordinator fixes, once, the cutoff (from the store's clock) and N key ranges
//! ([`ShardSpec`], made by [`crate::collector::GarbageCollector::shard_ranges`]). Each shard is
//! a whole [`GcPlan`] of the keys of its range ([`GcPlan::shard`] says which), with its own
//! candidate list and digest, planned by any process
//! ([`crate::collector::GarbageCollector::plan_shard`]) or all of them by one process from one
//! listing ([`crate::collector::GarbageCollector::plan_sharded`]): the plans are identical either
//! way, and the union of their candidates is the candidate list of an unsharded plan at the same
//! cutoff. The [`ShardManifest`] records the cutoff, horizon, lake, and per shard its range,
//! digest and counts; its own digest (SHA-256 of its canonical JSON) covers the shards' digests.
//! Each shard is applied, and checkpointed, on its own
//! ([`crate::collector::GarbageCollector::apply_shard`]), only with a manifest it is bound to.
//!
//! Invariants, each checked where a manifest is built or read and where a shard is applied:
//! - the ranges are what [`KeyRange::split_at`] makes: disjoint, covering every key, shard `i`
//!   at index `i` ([`KeyRange::check_partition`]);
//! - every shard has the manifest's lake, `min_age` and cutoff, and its plan hashes to the
//!   digest the manifest records for its index;
//! - a manifest with any shard planned on incomplete lineage is applied in no shard (a symbolic
//!   link met by one shard's listing may alias an object of another).
//!
//! On disk (`lake gc --shards N --out DIR`): `DIR/manifest.json`, the manifest document
//! (`{"digest": ..., "manifest": {...}}`, pretty-printed), and `DIR/shard-00000.json`, ... the
//! shards' plan documents (as `lake gc --out FILE` writes a plan). The manifest is written last.
//!
//! Size: about 600 lines, no unit tests (they are in `tests/it/shards.rs`); the manifest's
//! invariants are checked where it is built, read and applied (`check_bound` alone is 60 lines of
//! named refusals), and its folder is saved and loaded here too: one format, one file.

use crate::error::GcError;
use crate::key_range::KeyRange;
use crate::output::{
    check_outside, check_replaceable, document_root, write_in, Destination, DocumentFolder, DocumentKind, OutputPath,
};
use crate::plan::{GcPlan, PlanShard};
use crate::plan_time::PlanTime;
use lake_common::ErrorKind;
use lake_store::StoreError;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The manifest format this build writes and reads.
pub const SHARD_MANIFEST_FORMAT_VERSION: u64 = 1;
/// Most shards a plan may have. Every shard reads the whole journal (only the listing is
/// split), so more shards than this costs more than it saves; it also bounds the files one
/// process holds open while planning every shard.
pub const MAX_SHARDS: usize = 256;
/// The manifest's file name in a sharded plan's folder.
pub const MANIFEST_FILE: &str = "manifest.json";

/// The file name of shard `index`'s plan document in a sharded plan's folder: `shard-00003.json`.
pub fn shard_file_name(index: u64) -> String {
    format!("shard-{index:05}.json")
}

/// The index of a shard plan document's file name (`shard-00003.json` -> 3), as
/// [`shard_file_name`] writes it; `None` for any other name.
pub fn parse_shard_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("shard-")?.strip_suffix(".json")?;
    let index: u64 = digits.parse().ok().filter(|_| digits.bytes().all(|b| b.is_ascii_digit()))?;
    (shard_file_name(index) == name).then_some(index)
}

/// The file name of shard `index`'s apply checkpoint in a checkpoint folder: `shard-00003.ckpt`
/// (its plan document is saved beside it, `shard-00003.ckpt.plan.json`).
pub fn shard_checkpoint_name(index: u64) -> String {
    format!("shard-{index:05}.ckpt")
}

/// What a coordinator fixes once for every shard of one plan: the lake, the horizon, the cutoff
/// and the key ranges (shard `i` plans `ranges[i]`). Serialisable (JSON) to hand to workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardSpec {
    /// The lake root (normalised URI), as plans record it.
    pub root: String,
    /// The horizon, `min_age` in seconds.
    pub min_age_seconds: u64,
    /// The cutoff (as plans record it): fixed once, from the store's clock, before any shard
    /// reads lineage.
    pub cutoff: PlanTime,
    /// The shards' key ranges, in order (see [`KeyRange::check_partition`]).
    pub ranges: Vec<KeyRange>,
    /// Set when the coordinator found a GC state an incremental plan may start from: then the
    /// spec has one shard over every key, planned as [`crate::collector::GarbageCollector::plan_with`]
    /// plans (incrementally, or in full when the state fails a check by the time the worker
    /// plans). An incremental plan lists only the keys minted since its state, the work that
    /// sharding splits; its journal read, which every shard repeats, is the whole of its cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental: Option<ShardIncremental>,
}

/// The incremental policy a coordinator hands to the worker of an incremental sharded plan
/// ([`crate::state::IncrementalPolicy`] without `full`), in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardIncremental {
    /// A full plan is made when the state's chain's last full plan is this much older
    /// ([`crate::state::IncrementalPolicy::full_every`]), seconds.
    pub full_every_seconds: u64,
    /// How far before the state's cutoff the listing starts
    /// ([`crate::state::IncrementalPolicy::margin`]), seconds.
    pub margin_seconds: u64,
}

impl ShardIncremental {
    /// The policy `policy` as a spec records it.
    pub fn of(policy: &crate::state::IncrementalPolicy) -> Self {
        Self { full_every_seconds: policy.full_every.as_secs(), margin_seconds: policy.margin.as_secs() }
    }

    /// The policy it records (never `full`).
    pub fn policy(&self) -> crate::state::IncrementalPolicy {
        crate::state::IncrementalPolicy {
            full: false,
            full_every: std::time::Duration::from_secs(self.full_every_seconds),
            margin: std::time::Duration::from_secs(self.margin_seconds),
        }
    }
}

impl ShardSpec {
    /// How many shards.
    pub fn count(&self) -> usize {
        self.ranges.len()
    }

    /// Checks the ranges (1 to [`MAX_SHARDS`], a partition of the key space); the cutoff's
    /// spelling was checked where the spec was read ([`PlanTime`]).
    ///
    /// # Errors
    /// [`GcError::Refused`] naming what is wrong.
    pub fn check(&self) -> Result<(), GcError> {
        check_count(self.ranges.len())?;
        if self.incremental.is_some() && self.ranges != [KeyRange::all()] {
            return Err(GcError::refused(
                ErrorKind::ShardMismatch,
                format!(
                    "the shard spec is incremental with {} ranges: an incremental sharded plan has one shard over every key; nothing was planned",
                    self.ranges.len()
                ),
            ));
        }
        KeyRange::check_partition(&self.ranges).map_err(|m| {
            GcError::refused(
                ErrorKind::ShardMismatch,
                format!("the shard spec's ranges are not usable: {m}; nothing was planned"),
            )
        })
    }

    /// The cutoff as a time.
    pub fn cutoff_time(&self) -> chrono::DateTime<chrono::Utc> {
        self.cutoff.datetime()
    }
}

pub(crate) fn check_count(count: usize) -> Result<(), GcError> {
    if count == 0 || count > MAX_SHARDS {
        return Err(GcError::refused(ErrorKind::ShardMismatch, format!(
            "{count} shards: a sharded plan has 1 to {MAX_SHARDS} shards (each reads the whole journal; only the listing is split)"
        )));
    }
    Ok(())
}

/// One shard as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardEntry {
    /// The shard's index (its place in the manifest).
    pub index: u64,
    /// The keys it covers.
    pub range: KeyRange,
    /// SHA-256 of its plan ([`GcPlan::digest`]).
    pub digest: String,
    /// Its candidates.
    pub candidates: u64,
    /// Their total size, bytes.
    pub bytes: u64,
    /// False when it was planned on incomplete lineage (then no shard is applied).
    pub lineage_complete: bool,
}

impl ShardEntry {
    /// The entry of the shard plan `plan` (computes its digest, streaming a spilled list).
    /// A worker hands this to the coordinator ([`ShardManifest::from_entries`]).
    ///
    /// # Errors
    /// [`GcError::Refused`] when `plan` is not a shard.
    pub fn of(plan: &GcPlan) -> Result<Self, GcError> {
        let shard = shard_of(plan)?;
        Ok(Self {
            index: shard.index,
            range: shard.range.clone(),
            digest: plan.digest()?,
            candidates: plan.candidates.len() as u64,
            bytes: plan.candidate_bytes(),
            lineage_complete: plan.lineage_complete,
        })
    }
}

fn shard_of(plan: &GcPlan) -> Result<&PlanShard, GcError> {
    match plan.shard.as_ref() {
        Some(shard) => Ok(shard),
        None => Err(GcError::refused(
            ErrorKind::BoundToManifest,
            format!(
                "the plan of cutoff {} (digest {}) is a whole plan, not a shard of a sharded plan",
                plan.cutoff,
                plan.digest()?
            ),
        )),
    }
}

/// The manifest of a sharded plan (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardManifest {
    /// Always [`SHARD_MANIFEST_FORMAT_VERSION`].
    pub format_version: u64,
    /// The lake root (normalised URI).
    pub root: String,
    /// The horizon, seconds.
    pub min_age_seconds: u64,
    /// The cutoff every shard was planned at.
    pub cutoff: PlanTime,
    /// How many shards (`shards.len()`).
    pub count: u64,
    /// The shards, shard `i` at index `i`.
    pub shards: Vec<ShardEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestDocument {
    digest: String,
    manifest: ShardManifest,
}

#[derive(Serialize)]
struct ManifestDocumentRef<'a> {
    digest: String,
    manifest: &'a ShardManifest,
}

impl ShardManifest {
    /// The manifest of `plans`, the shard plans of one sharded plan in any order (computes each
    /// one's digest).
    ///
    /// # Errors
    /// [`GcError::Refused`] when a plan is not a shard, when they differ in lake, `min_age`,
    /// cutoff or shard count, when an index is missing or repeated, or when their ranges are
    /// not a partition of the key space (as [`KeyRange::split_at`] makes).
    pub fn assemble(plans: &[GcPlan]) -> Result<Self, GcError> {
        let first =
            plans.first().ok_or_else(|| GcError::refused(ErrorKind::ShardMismatch, "no shard plans to assemble"))?;
        for plan in plans {
            plan.check_format().map_err(|m| GcError::refused(ErrorKind::ShardMismatch, m))?;
            let shard = shard_of(plan)?;
            if plan.root != first.root || plan.min_age_seconds != first.min_age_seconds || plan.cutoff != first.cutoff {
                return Err(GcError::refused(ErrorKind::ShardMismatch, format!(
                    "shard {} was planned for lake {} with min_age {}s at cutoff {}, shard {} for lake {} with min_age {}s at cutoff {}: they are not shards of one plan",
                    shard.index,
                    plan.root,
                    plan.min_age_seconds,
                    plan.cutoff,
                    shard_of(first)?.index,
                    first.root,
                    first.min_age_seconds,
                    first.cutoff
                )));
            }
            if shard.count != plans.len() as u64 {
                return Err(GcError::refused(
                    ErrorKind::ShardMismatch,
                    format!(
                        "shard {} is one of {} shards, but {} shard plans were given",
                        shard.index,
                        shard.count,
                        plans.len()
                    ),
                ));
            }
        }
        let entries = plans.iter().map(ShardEntry::of).collect::<Result<Vec<_>, _>>()?;
        Self::build(first.root.clone(), first.min_age_seconds, first.cutoff, entries)
    }

    /// The manifest of the shards of `spec` from their entries (in any order), as workers
    /// report them ([`ShardEntry::of`]): a coordinator need not hold the shards' candidates.
    ///
    /// # Errors
    /// [`GcError::Refused`] when an index is missing, repeated or out of `spec`, or an
    /// entry's range is not `spec`'s range of its index.
    pub fn from_entries(spec: &ShardSpec, entries: Vec<ShardEntry>) -> Result<Self, GcError> {
        spec.check()?;
        for entry in &entries {
            let expected = usize::try_from(entry.index).ok().and_then(|i| spec.ranges.get(i));
            if expected != Some(&entry.range) {
                return Err(GcError::refused(
                    ErrorKind::ShardMismatch,
                    format!(
                    "shard {} covers {}, which is not the spec's range of that index; it is a shard of another plan",
                    entry.index, entry.range
                ),
                ));
            }
        }
        if entries.len() != spec.ranges.len() {
            return Err(GcError::refused(
                ErrorKind::ShardMismatch,
                format!("the spec has {} shards but {} entries were given", spec.ranges.len(), entries.len()),
            ));
        }
        Self::build(spec.root.clone(), spec.min_age_seconds, spec.cutoff, entries)
    }

    fn build(
        root: String,
        min_age_seconds: u64,
        cutoff: PlanTime,
        mut entries: Vec<ShardEntry>,
    ) -> Result<Self, GcError> {
        entries.sort_by_key(|e| e.index);
        let manifest = Self {
            format_version: SHARD_MANIFEST_FORMAT_VERSION,
            root,
            min_age_seconds,
            cutoff,
            count: entries.len() as u64,
            shards: entries,
        };
        manifest.check_structure().map_err(|m| GcError::refused(ErrorKind::ShardMismatch, m))?;
        Ok(manifest)
    }

    /// Checks the format, the count, the indexes (shard `i` at index `i`) and the ranges (a
    /// partition of the key space).
    fn check_structure(&self) -> Result<(), String> {
        if self.format_version != SHARD_MANIFEST_FORMAT_VERSION {
            return Err(format!(
                "shard manifest format version {} is not supported (expected {SHARD_MANIFEST_FORMAT_VERSION})",
                self.format_version
            ));
        }
        check_count(self.shards.len()).map_err(|e| e.to_string())?;
        if self.count != self.shards.len() as u64 {
            return Err(format!("it says {} shards but lists {}", self.count, self.shards.len()));
        }
        if let Some((i, e)) = self.shards.iter().enumerate().find(|(i, e)| e.index != *i as u64) {
            return Err(format!("shard {} is listed at position {i}: an index is missing or repeated", e.index));
        }
        let ranges: Vec<KeyRange> = self.shards.iter().map(|e| e.range.clone()).collect();
        KeyRange::check_partition(&ranges)
            .map_err(|m| format!("its shards' ranges do not cover every key once: {m}"))?;
        if let Some(e) =
            self.shards.iter().find(|e| e.digest.len() != 64 || !e.digest.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(format!("shard {}'s digest `{}` is not a SHA-256", e.index, e.digest));
        }
        Ok(())
    }

    /// The canonical bytes its digest is computed over: compact JSON, fields in a fixed order.
    pub fn canonical_bytes(&self) -> Vec<u8> {
        // Strings, integers and booleans only: serialisation cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// SHA-256 of [`ShardManifest::canonical_bytes`], 64 lowercase hex characters. It covers
    /// every shard's digest, so it binds every shard's candidates.
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(self.canonical_bytes()))
    }

    /// True when every shard was planned on complete lineage (else no shard may be applied).
    pub fn lineage_complete(&self) -> bool {
        self.shards.iter().all(|e| e.lineage_complete)
    }

    /// Candidates of every shard.
    pub fn candidates(&self) -> u64 {
        self.shards.iter().map(|e| e.candidates).sum()
    }

    /// Bytes of every shard's candidates.
    pub fn candidate_bytes(&self) -> u64 {
        self.shards.iter().map(|e| e.bytes).sum()
    }

    /// The manifest document, `{"digest": ..., "manifest": {...}}`, pretty-printed.
    pub fn to_document(&self) -> Vec<u8> {
        let doc = ManifestDocumentRef { digest: self.digest(), manifest: self };
        serde_json::to_vec_pretty(&doc).unwrap_or_default()
    }

    /// Reads a manifest document, recomputing its digest and checking its structure.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`](lake_store::StoreError::Corrupt) when it is malformed, of another format, its digest does not
    /// match its content (an edited manifest), or its shards are not a partition of the keys.
    pub fn from_document(bytes: &[u8], path: &str) -> Result<Self, GcError> {
        let corrupt = |m: String| {
            GcError::from(StoreError::Corrupt { path: path.to_string(), what: "shard manifest", message: m })
        };
        let doc: ManifestDocument = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
        let actual = doc.manifest.digest();
        if actual != doc.digest {
            return Err(corrupt(format!(
                "digest mismatch: the document says {} but its manifest hashes to {actual}; the manifest was edited. Make a new sharded plan with a dry run",
                doc.digest
            )));
        }
        doc.manifest.check_structure().map_err(corrupt)?;
        Ok(doc.manifest)
    }

    /// Reads the manifest document at `path` (a local file).
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when it cannot be read; as [`ShardManifest::from_document`].
    pub fn load(path: &Path) -> Result<Self, GcError> {
        let shown = path.display().to_string();
        let bytes =
            std::fs::read(path).map_err(|source| GcError::from(StoreError::Io { path: shown.clone(), source }))?;
        Self::from_document(&bytes, &shown)
    }

    /// Writes the manifest document to `dir`/[`MANIFEST_FILE`] (the folder must exist),
    /// atomically, under the rules of [`crate::output`]: outside the manifest's lake, over
    /// nothing or another manifest document.
    ///
    /// # Errors
    /// [`StoreError::Root`](lake_store::StoreError::Root) for a folder inside the lake; [`GcError::Output`] for a file
    /// of another kind there; [`StoreError::Io`](lake_store::StoreError::Io).
    pub fn save(&self, dir: &Path) -> Result<(), GcError> {
        let root = document_root(&self.root)?;
        let file = dir.join(MANIFEST_FILE);
        check_outside(&file.display().to_string(), Destination::Local(&file), &root)?;
        self.save_in(&DocumentFolder::open(dir, &root)?, false)
    }

    fn save_in(&self, folder: &DocumentFolder, force: bool) -> Result<(), GcError> {
        let bytes = self.to_document();
        write_in(folder, MANIFEST_FILE, DocumentKind::ShardManifest, force, |out| out.write_all(&bytes))
    }

    /// Checks that `plan` is shard `i` of this manifest: a shard whose index, count and range
    /// are the manifest's entry `i`'s, of the same lake, `min_age` and cutoff, hashing to the
    /// entry's digest with its counts.
    ///
    /// # Errors
    /// [`GcError::Refused`] naming the first difference (an edited shard plan, or a shard
    /// of another manifest), or a manifest whose own structure is not usable (as
    /// [`ShardManifest::from_document`] checks it).
    pub fn check_shard(&self, plan: &GcPlan) -> Result<(), GcError> {
        self.check_bound(plan, &plan.digest()?)
    }

    /// [`ShardManifest::check_shard`] with the plan's digest already computed (by the reader of
    /// its document, or a checkpoint's load).
    pub(crate) fn check_bound(&self, plan: &GcPlan, digest: &str) -> Result<(), GcError> {
        let refuse = |m: String| {
            GcError::refused(ErrorKind::BoundToManifest, format!(
                "{m}; it is not a shard of manifest {} (an edited shard plan, or a shard of another sharded plan). Nothing was deleted",
                self.digest()
            ))
        };
        // A manifest built in memory (its fields are public) is held to a read one's rules.
        self.check_structure().map_err(|m| {
            GcError::refused(ErrorKind::ShardMismatch, format!("the shard manifest is not usable: {m}"))
        })?;
        plan.check_format().map_err(refuse)?;
        let shard = shard_of(plan)?;
        let entry = usize::try_from(shard.index)
            .ok()
            .and_then(|i| self.shards.get(i))
            .ok_or_else(|| refuse(format!("the plan is shard {} of {}", shard.index, shard.count)))?;
        if shard.count != self.count {
            return Err(refuse(format!(
                "the plan is shard {} of {}, the manifest has {} shards",
                shard.index, shard.count, self.count
            )));
        }
        if shard.range != entry.range {
            return Err(refuse(format!(
                "shard {} covers {}, the manifest's shard {} covers {}",
                shard.index, shard.range, shard.index, entry.range
            )));
        }
        if plan.root != self.root || plan.min_age_seconds != self.min_age_seconds || plan.cutoff != self.cutoff {
            return Err(refuse(format!(
                "shard {} was planned for lake {} with min_age {}s at cutoff {}, the manifest for lake {} with min_age {}s at cutoff {}",
                shard.index, plan.root, plan.min_age_seconds, plan.cutoff, self.root, self.min_age_seconds, self.cutoff
            )));
        }
        if digest != entry.digest {
            return Err(refuse(format!(
                "shard {} hashes to {digest}, the manifest records {}",
                shard.index, entry.digest
            )));
        }
        if plan.candidates.len() as u64 != entry.candidates
            || plan.candidate_bytes() != entry.bytes
            || plan.lineage_complete != entry.lineage_complete
        {
            return Err(refuse(format!(
                "shard {} has {} candidates of {} bytes (lineage complete: {}), the manifest records {} of {} bytes ({})",
                shard.index,
                plan.candidates.len(),
                plan.candidate_bytes(),
                plan.lineage_complete,
                entry.candidates,
                entry.bytes,
                entry.lineage_complete
            )));
        }
        // Every candidate inside the shard's range (and collectable, minted before the cutoff),
        // checked before any shard deletes anything.
        plan.check_candidates(0).map_err(refuse)?;
        Ok(())
    }

    /// Reads shard `index`'s plan document from `dir`/[`shard_file_name`] (streamed: a long
    /// candidate list spills to a temporary file) and checks it against this manifest: it must
    /// be shard `index` (a shard document renamed or swapped with another is refused, never
    /// applied under the other's index), hash to the manifest's digest at that index, have its
    /// range, and name only keys of that range.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when it cannot be read; [`StoreError::Corrupt`](lake_store::StoreError::Corrupt) for a document
    /// that does not match its own digest; [`GcError::Refused`] for a document of another
    /// index, and as [`ShardManifest::check_shard`].
    pub fn load_shard(&self, dir: &Path, index: u64) -> Result<GcPlan, GcError> {
        let path = dir.join(shard_file_name(index));
        let shown = path.display().to_string();
        let file = std::fs::File::open(&path)
            .map_err(|source| GcError::from(StoreError::Io { path: shown.clone(), source }))?;
        let (plan, digest) = GcPlan::read_document_and_digest(std::io::BufReader::new(file), &shown)?;
        let found = shard_of(&plan)?.index;
        if found != index {
            return Err(GcError::refused(ErrorKind::BoundToManifest, format!(
                "{shown} holds shard {found} of manifest {}, not shard {index}: shard documents were renamed or swapped. Nothing was deleted; put each document back under its own name, or plan again",
                self.digest()
            )));
        }
        self.check_bound(&plan, &digest)?;
        Ok(plan)
    }

    /// Checks the shard documents of `indexes` in the folder `dir` against this manifest, each
    /// as [`ShardManifest::load_shard`] does (its index, digest, range and candidates), before
    /// any of them is applied: a sharded apply refuses an edited, swapped, missing or foreign
    /// shard document before its first delete, not after earlier shards were deleted. Each
    /// document is read and dropped (one candidate list in memory at a time).
    ///
    /// # Errors
    /// As [`ShardManifest::load_shard`], for the first shard at fault; an index outside the
    /// manifest is [`GcError::Refused`].
    pub fn check_folder(&self, dir: &Path, indexes: &[u64]) -> Result<(), GcError> {
        for &index in indexes {
            if index >= self.count {
                return Err(GcError::refused(
                    ErrorKind::ShardMismatch,
                    format!(
                        "shard {index} does not exist: manifest {} has {} shards (0 to {})",
                        self.digest(),
                        self.count,
                        self.count - 1
                    ),
                ));
            }
            self.load_shard(dir, index)?;
        }
        Ok(())
    }
}

/// A sharded plan: its manifest and its shards' plans, shard `i` at index `i`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardedPlan {
    /// The manifest.
    pub manifest: ShardManifest,
    /// The shards' plans.
    pub plans: Vec<GcPlan>,
}

impl ShardedPlan {
    /// Writes the sharded plan into the folder `dir` ([`ShardedPlan::save_to`] without force).
    ///
    /// # Errors
    /// As [`ShardedPlan::save_to`].
    pub fn save(&self, dir: &Path) -> Result<(), GcError> {
        self.save_to(&OutputPath::new(dir))
    }

    /// Writes every shard's plan document, then the manifest, into `folder`, each atomically,
    /// under the rules of [`crate::output`]: the folder (created when missing, its parent must
    /// exist) and its files lie outside the plan's lake by any route, and an existing folder is
    /// empty or holds a sharded plan (anything with [`OutputPath::force`]). Shard documents
    /// of an earlier plan beyond this one's count are removed after the manifest is written. A
    /// crash in between leaves the earlier manifest (if any), which the new shard documents do
    /// not match: loading them is refused, never mixed.
    ///
    /// # Errors
    /// [`StoreError::Root`](lake_store::StoreError::Root) for a folder inside the lake; [`GcError::Output`] for a
    /// folder holding other files; [`StoreError::Io`](lake_store::StoreError::Io).
    pub fn save_to(&self, folder: &OutputPath) -> Result<(), GcError> {
        let root = document_root(&self.manifest.root)?;
        let held = folder.prepare_folder(&root)?;
        for plan in &self.plans {
            let index = shard_of(plan)?.index;
            write_in(&held, &shard_file_name(index), DocumentKind::Plan, folder.forced(), |out| {
                plan.write_document(out)
            })?;
        }
        self.manifest.save_in(&held, folder.forced())?;
        for name in held.names()? {
            let stale = parse_shard_file_name(&name.to_string_lossy()).is_some_and(|i| i >= self.manifest.count);
            if stale && check_replaceable(&held, &name, DocumentKind::Plan, false).is_ok() {
                held.remove(&name)?;
            }
        }
        Ok(())
    }

    /// Reads the sharded plan saved in `dir`: its manifest, then every shard, each checked
    /// against it.
    ///
    /// # Errors
    /// As [`ShardManifest::load`] and [`ShardManifest::load_shard`].
    pub fn load(dir: &Path) -> Result<Self, GcError> {
        let manifest = ShardManifest::load(&dir.join(MANIFEST_FILE))?;
        let plans = (0..manifest.count).map(|i| manifest.load_shard(dir, i)).collect::<Result<Vec<_>, _>>()?;
        Ok(Self { manifest, plans })
    }
}

/// Writes the shard plan `plan`'s document to `dir`/[`shard_file_name`] (the folder must
/// exist) atomically, streaming its candidates (a worker's output), under the rules of
/// [`crate::output`]: outside the plan's lake, over nothing or another plan document.
///
/// # Errors
/// [`GcError::Refused`] when `plan` is not a shard; [`StoreError::Root`](lake_store::StoreError::Root) for a folder
/// inside the lake; [`GcError::Output`] for a file of another kind there;
/// [`StoreError::Io`](lake_store::StoreError::Io).
pub fn save_shard(plan: &GcPlan, dir: &Path) -> Result<(), GcError> {
    let index = shard_of(plan)?.index;
    let root = document_root(&plan.root)?;
    let file = dir.join(shard_file_name(index));
    check_outside(&file.display().to_string(), Destination::Local(&file), &root)?;
    let folder = DocumentFolder::open(dir, &root)?;
    write_in(&folder, &shard_file_name(index), DocumentKind::Plan, false, |out| plan.write_document(out))
}
