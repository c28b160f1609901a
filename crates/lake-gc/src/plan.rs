//! [`GcPlan`]: the deterministic result of a dry run, bound by a SHA-256 digest.
//!
//! The same lake state and cutoff give byte-identical plans: every field is derived from
//! storage state and the cutoff (never from the time of the run), lists are sorted, and the
//! encoding is compact JSON with a fixed field order. The digest is the SHA-256 of those bytes;
//! a plan document on disk (`--out FILE`) is `{"digest": ..., "plan": {...}}`, and reading it
//! back recomputes the digest, so an edited plan is refused.
//!
//! In memory a plan is typed: its cutoff and candidates' times are [`PlanTime`]s, a candidate's
//! key an [`ObjectKey`], a problem a [`PlanProblem`] with a stable kind. The document is their
//! JSON (serde's, field names as earlier builds wrote them: a candidate's key is `uri`): read in
//! one place ([`GcPlan::read_document_and_digest`], where every time is parsed, once, in its one
//! spelling) and hashed by one function that returns its errors ([`GcPlan::digest`]).

use crate::candidates::CandidateList;
use crate::error::GcError;
use crate::key_range::KeyRange;
use crate::output::{DocumentKind, OutputPath};
use crate::plan_time::PlanTime;
use lake_engine::{LineageBasis, LineageProblem};
use lake_store::keys::ObjectKey;
use lake_store::StoreError;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The plan format this build writes and reads. Format 1 (earlier builds) recorded only each
/// table's latest version, which apply cannot tell from a restored backup's; format 2 did not
/// record the retained versions' manifests, so apply could not tell a table whose Lance files
/// were swapped since; both are refused.
pub const PLAN_FORMAT_VERSION: u64 = 3;
/// How many foreign entries a plan names (all are counted in `foreign_count`).
pub const FOREIGN_LISTED: usize = 100;
/// The stage a plan belongs to (the only one so far: orphan managed objects).
pub const STAGE_ORPHAN_OBJECTS: &str = "orphan_objects";

/// One table's lineage when the plan was made: what apply checks the table only moved forward
/// from (see [`lake_engine::stamp`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BasisEntry {
    /// Table name.
    pub table: String,
    /// Latest version at planning time.
    pub version: u64,
    /// Versions retained at planning time, ascending.
    pub retained: Vec<u64>,
    /// SHA-256 of the identities (store metadata) of the journal files up to `version`.
    pub journal_sha256: String,
    /// The manifest file (`size:e-tag`, from the version listing) of every retained version,
    /// by version (absent in plans of format 2, which are refused).
    #[serde(default)]
    pub manifests: std::collections::BTreeMap<u64, String>,
}

impl BasisEntry {
    /// The entry of `table` at `basis`.
    pub fn new(table: impl Into<String>, basis: LineageBasis) -> Self {
        Self {
            table: table.into(),
            version: basis.version,
            retained: basis.retained,
            journal_sha256: basis.journal_sha256,
            manifests: basis.manifests,
        }
    }

    /// The lineage basis it records.
    pub fn basis(&self) -> LineageBasis {
        LineageBasis {
            version: self.version,
            retained: self.retained.clone(),
            journal_sha256: self.journal_sha256.clone(),
            manifests: self.manifests.clone(),
        }
    }
}

/// An object the plan would delete.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    /// Key relative to the lake root (the document's field is `uri`, as earlier builds wrote).
    #[serde(rename = "uri")]
    pub key: ObjectKey,
    /// Size in bytes.
    pub size: u64,
    /// The store's `last_modified` (UTC, milliseconds).
    pub last_modified: PlanTime,
}

/// Why a plan is incomplete: a stable `kind` beside a sentence naming what is wrong and what to
/// do. Kinds: every [`LineageProblem::kind`], and [`PlanProblem::UNMANAGED_REFERENCE`],
/// [`PlanProblem::WRITE_INTENT`], [`PlanProblem::LINKED_REFERENCE`], [`PlanProblem::INCOMPLETE_SHARD`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanProblem {
    /// A stable snake_case name of the problem's kind.
    pub kind: String,
    /// One sentence: what is wrong, and what to do.
    pub message: String,
}

impl PlanProblem {
    /// A table references a key inside the lake root that is not a managed object key.
    pub const UNMANAGED_REFERENCE: &'static str = "unmanaged_reference";
    /// A write intent (or the reference log it names) cannot be read or does not match its seal.
    pub const WRITE_INTENT: &'static str = "write_intent";
    /// A shard of a sharded plan was planned on incomplete lineage.
    pub const INCOMPLETE_SHARD: &'static str = "incomplete_shard";
    /// A live reference goes through a symbolic link under `objects/`.
    pub const LINKED_REFERENCE: &'static str = "linked_reference";

    /// A problem of kind `kind` saying `message`.
    pub fn new(kind: &str, message: impl Into<String>) -> Self {
        Self { kind: kind.to_string(), message: message.into() }
    }
}

impl From<&LineageProblem> for PlanProblem {
    fn from(problem: &LineageProblem) -> Self {
        Self::new(problem.kind(), problem.to_string())
    }
}

impl std::fmt::Display for PlanProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The shard a plan is of a sharded plan: its candidates are the keys of `range` only, and the
/// manifest binding the shards ([`crate::shards::ShardManifest`]) must accompany it at apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanShard {
    /// The shard's index, 0 to `count - 1`.
    pub index: u64,
    /// How many shards the plan has.
    pub count: u64,
    /// The keys the shard covers (`after < key <= until`).
    pub range: KeyRange,
}

/// How a plan found its candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanMode {
    /// Only the keys that may have become garbage since a GC state (`docs/gc.md`, "Incremental
    /// plans"): keys minted since the state's cutoff minus a margin, keys that lost their last
    /// retained reference since, and what the state's apply left unfinished. Its candidates are
    /// a subset of the full plan's at the same cutoff.
    Incremental,
    /// Every managed key, listed.
    Full,
}

impl PlanMode {
    /// `incremental` or `full`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Incremental => "incremental",
            Self::Full => "full",
        }
    }
}

impl std::fmt::Display for PlanMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The most keys a plan holds for the next run as young by the store's time
/// ([`PlanModeRecord::held`]); past it the next run is a full plan.
pub const MAX_HELD: usize = 10_000;

/// How a whole plan found its candidates, and what it leaves for the next run: recorded in the
/// plan (so in its digest) and, once the plan's apply is complete, in the GC state
/// ([`crate::state::GcState`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanModeRecord {
    /// Incremental or full.
    pub mode: PlanMode,
    /// The digest of the GC state an incremental plan started from ([`crate::state::GcState::digest`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Why a plan is full: it was asked for, no state was recorded yet, the last full plan is
    /// older than `full_every`, or the state could not be trusted (which check it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// An incremental plan listed only the managed keys after this one (the first key minted at
    /// the state's cutoff minus the margin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listed_after: Option<String>,
    /// The cutoff of the last full plan this plan's chain of states started from (a full plan's
    /// own cutoff): `full_every` counts from it.
    pub full_cutoff: PlanTime,
    /// Managed keys minted before the cutoff but last written at or after it (young by the
    /// store's time: an upload that finished around the cutoff), sorted, at most [`MAX_HELD`]:
    /// the next incremental plan looks at them again even when they were minted before the
    /// keys it lists.
    pub held: Vec<String>,
    /// True when more than [`MAX_HELD`] keys were held: the next run is a full plan.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held_overflow: bool,
}

/// A GC plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcPlan {
    /// Always [`PLAN_FORMAT_VERSION`].
    pub format_version: u64,
    /// Always [`STAGE_ORPHAN_OBJECTS`].
    pub stage: String,
    /// The lake root the plan is for (normalised URI).
    pub root: String,
    /// The identity of the lake the plan is for ([`lake_store::descriptor::LakeDescriptor::identity`]):
    /// a lake deleted and created again at the same root is another lake, and a plan of the
    /// old one is refused by the new one. Absent in plans of earlier builds (and of planners
    /// run without a collector): those are taken for the lake now at their root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lake_id: Option<String>,
    /// The horizon: `--min-age` in seconds.
    pub min_age_seconds: u64,
    /// Objects younger than this are never candidates.
    pub cutoff: PlanTime,
    /// Latest version of every table when lineage was read, sorted by table.
    pub basis: Vec<BasisEntry>,
    /// False when any table's journal is incomplete: such a plan has no candidates and apply
    /// refuses it.
    pub lineage_complete: bool,
    /// Lineage problems, sorted (by kind, then message).
    pub problems: Vec<PlanProblem>,
    /// Entries under `objects/` that are no objects and were neither followed nor planned
    /// (symbolic links, named pipes, sockets, device nodes, S3 folder markers).
    pub foreign_count: u64,
    /// The first [`FOREIGN_LISTED`] of them in key order, `key: what it is`.
    pub foreign: Vec<String>,
    /// Which shard of a sharded plan this is ([`crate::shards`]); absent (and not written, so
    /// an unsharded plan's bytes and digest are those of earlier builds) for a whole plan. A
    /// shard is applied only with its manifest. Builds before shards refuse a plan with this
    /// field (unknown fields are refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<PlanShard>,
    /// How the candidates were found ([`PlanModeRecord`]: a full listing, or an incremental plan
    /// from a GC state, [`crate::state`]). Recorded by every whole plan a collector makes;
    /// absent (and not written, so such a plan's bytes and digest are those of earlier builds)
    /// in plans of earlier builds, sharded plans and planners run without a collector, which
    /// are all full plans. Builds before incremental GC refuse a plan with this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PlanModeRecord>,
    /// Objects to delete, sorted by key (in memory, or spilled to a temporary file by a
    /// planner past its memory budget: see [`CandidateList`]).
    pub candidates: CandidateList,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanDocument {
    digest: String,
    plan: GcPlan,
}

#[derive(Serialize)]
struct PlanDocumentRef<'a> {
    digest: String,
    plan: &'a GcPlan,
}

/// A `Write` that feeds SHA-256.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl GcPlan {
    /// The canonical bytes the digest is computed over (all in memory: for tests and small
    /// plans; [`GcPlan::digest`] streams them).
    ///
    /// # Errors
    /// As [`GcPlan::digest`].
    pub fn canonical_bytes(&self) -> Result<Vec<u8>, GcError> {
        serde_json::to_vec(self).map_err(unreadable_list)
    }

    /// SHA-256 of [`GcPlan::canonical_bytes`], 64 lowercase hex characters, computed as the
    /// bytes are produced (a spilled candidate list is streamed, never held).
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when a spilled candidate list cannot be
    /// read (the only way serialising a plan fails: every other field is a string, an integer
    /// or a boolean).
    pub fn digest(&self) -> Result<String, GcError> {
        let mut hasher = HashWriter(Sha256::new());
        serde_json::to_writer(&mut hasher, self).map_err(unreadable_list)?;
        Ok(hex::encode(hasher.0.finalize()))
    }

    /// Total bytes of the candidates.
    pub fn candidate_bytes(&self) -> u64 {
        self.candidates.total_bytes()
    }

    /// Writes the plan document (`{"digest", "plan"}`), pretty-printed, for `--out FILE`,
    /// streaming the candidates.
    ///
    /// # Errors
    /// The writer's errors, and a spilled candidate list that cannot be read.
    pub fn write_document(&self, out: impl std::io::Write) -> Result<(), std::io::Error> {
        let digest = self.digest().map_err(std::io::Error::other)?;
        let doc = PlanDocumentRef { digest, plan: self };
        serde_json::to_writer_pretty(out, &doc).map_err(std::io::Error::other)
    }

    /// Writes the plan document ([`GcPlan::write_document`], what `lake gc --out FILE` writes)
    /// to `out`, under the rules of [`crate::output`]: outside the plan's own lake (its `root`)
    /// by any spelling or route, over nothing, an empty file or another plan document (any
    /// regular file with [`OutputPath::force`]), atomically.
    ///
    /// # Errors
    /// [`StoreError::Root`](lake_store::StoreError::Root) for a file inside the lake; [`GcError::Output`] for a file
    /// of another kind, a folder or a device there, or a folder that does not exist;
    /// [`StoreError::Io`](lake_store::StoreError::Io).
    pub fn save(&self, out: &OutputPath) -> Result<(), GcError> {
        let root = crate::output::document_root(&self.root)?;
        out.write(&root, DocumentKind::Plan, |w| self.write_document(w))
    }

    /// The plan document as bytes (see [`GcPlan::write_document`]).
    ///
    /// # Errors
    /// As [`GcPlan::digest`].
    pub fn to_document(&self) -> Result<Vec<u8>, GcError> {
        let mut out = Vec::new();
        self.write_document(&mut out).map_err(|source| {
            GcError::from(StoreError::Io { path: "the plan's spilled candidate list".to_string(), source })
        })?;
        Ok(out)
    }

    /// Reads a plan document and checks its digest and format.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`](lake_store::StoreError::Corrupt) when the document is malformed, of another format version, or
    /// its digest does not match its content (an edited plan).
    pub fn from_document(bytes: &[u8], path: &str) -> Result<Self, GcError> {
        Self::read_document(bytes, path)
    }

    /// Reads a plan document from `reader` (buffer it) and checks its digest and format,
    /// streaming: a long candidate list spills to a temporary file as it is read (see
    /// [`CandidateList`]'s deserialisation), and the digest is computed from that list.
    ///
    /// # Errors
    /// As [`GcPlan::from_document`]; candidates out of ascending key order are refused as
    /// malformed.
    pub fn read_document(reader: impl std::io::Read, path: &str) -> Result<Self, GcError> {
        Self::read_document_and_digest(reader, path).map(|(plan, _)| plan)
    }

    /// As [`GcPlan::read_document`], also returning the digest it checked (so that a caller
    /// comparing it with another record does not hash the plan again).
    ///
    /// # Errors
    /// As [`GcPlan::read_document`].
    pub fn read_document_and_digest(reader: impl std::io::Read, path: &str) -> Result<(Self, String), GcError> {
        let corrupt =
            |m: String| GcError::from(StoreError::Corrupt { path: path.to_string(), what: "GC plan", message: m });
        let doc: PlanDocument = serde_json::from_reader(reader).map_err(|e| corrupt(e.to_string()))?;
        doc.plan.check_format().map_err(corrupt)?;
        let actual = doc.plan.digest()?;
        if actual != doc.digest {
            return Err(corrupt(format!(
                "digest mismatch: the document says {} but its plan hashes to {actual}; the plan was edited. Make a new one with a dry run",
                doc.digest
            )));
        }
        Ok((doc.plan, actual))
    }

    /// Checks every candidate from index `from` on, before apply deletes anything: a
    /// collectable key ([`lake_store::keys::is_collectable`]) minted before the plan's cutoff, and for
    /// a shard inside its range (a list is in ascending key order by construction). A plan document carries its
    /// own digest, which anyone can recompute: whatever it names, only such keys are deleted,
    /// and a plan naming any other is refused as a whole rather than after earlier pages were
    /// deleted. Streams the list (a spilled list is read once, never loaded).
    ///
    /// # Errors
    /// A sentence naming the first candidate at fault (or an unreadable spilled list).
    pub fn check_candidates(&self, from: u64) -> Result<(), String> {
        let cutoff = self.cutoff.datetime();
        let mut cursor = self.candidates.cursor(from).map_err(|e| e.to_string())?;
        while let Some(candidate) = cursor.next_candidate().map_err(|e| e.to_string())? {
            if candidate.key.minted_at().is_none_or(|t| t >= cutoff) {
                return Err(format!(
                    "its plan names `{}`, which is not a managed object minted before the plan's cutoff {}; GC never deletes it",
                    candidate.key, self.cutoff
                ));
            }
            if let Some(shard) = self.shard.as_ref().filter(|s| !s.range.contains(candidate.key.as_str())) {
                return Err(format!(
                    "its plan is shard {} of {} covering {} but names `{}`, outside that range",
                    shard.index, shard.count, shard.range, candidate.key
                ));
            }
        }
        Ok(())
    }

    /// Checks the format version and stage.
    ///
    /// # Errors
    /// A sentence naming the unsupported field.
    pub fn check_format(&self) -> Result<(), String> {
        if self.format_version != PLAN_FORMAT_VERSION {
            return Err(format!(
                "plan format version {} is not supported (expected {PLAN_FORMAT_VERSION}); plans of formats 1 and 2 (earlier builds) do not record all of the lineage apply must check against (format 2: the retained versions' manifests): make a new plan with a dry run",
                self.format_version
            ));
        }
        if self.stage != STAGE_ORPHAN_OBJECTS {
            return Err(format!("unknown plan stage `{}`", self.stage));
        }
        Ok(())
    }
}

/// A plan that cannot be serialised: its spilled candidate list cannot be read.
fn unreadable_list(e: serde_json::Error) -> GcError {
    GcError::from(StoreError::Io {
        path: "the plan's spilled candidate list".to_string(),
        source: std::io::Error::other(e),
    })
}
