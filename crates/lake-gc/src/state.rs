//! The GC state: what the last complete apply of a whole plan leaves for the next run, so that
//! the next plan examines only the keys that may have become garbage since
//! (`docs/gc.md`, "Incremental plans").
//!
//! A state is written under the root, at `_lake/gc/state/<cutoff ms:013>-<plan digest>.json`,
//! create-only and sealed by the SHA-256 of its canonical bytes like every lake document
//! ([`lake_common::delta::seal`]), and only by an apply that finished every candidate of its
//! plan ([`GcState::of_apply`]): a dry run, an interrupted apply or a shard of several writes
//! none (the one shard of an incremental sharded plan, over every key, writes one). It
//! records the lake it is of (root and identity), the plan's cutoff and digest, the plan's
//! basis (per lineage: latest version, retained versions, the digest of its journal files), the
//! cutoff of the last full plan of its chain, and what the run left: keys apply skipped or
//! failed, and keys held as young by the store's time.
//!
//! Safety never rests on a state: it only chooses which keys a plan examines, and every key
//! examined passes every check of a full plan (age by ULID and by the store's time, the live
//! set read whole from the journal and the write intents, lineage completeness, symbolic links).
//! A wrong state can only make a plan miss garbage, which the next full plan collects. Still, a
//! state that is not trustworthy is not used: corrupt or edited (its seal or its name), of
//! another lake, from the future, a stray file beside it ([`choose`], before planning); naming a
//! lineage no longer registered or journal positions that no longer exist (found by the plan
//! itself, from the lineage it reads anyway, so the lineage is read once). The run then makes a
//! full plan and says why ([`crate::plan::PlanModeRecord::reason`]).

use crate::checkpoint::ApplyCheckpoint;
use crate::error::GcError;
use crate::plan::{BasisEntry, GcPlan, PlanMode};
use crate::plan_time::PlanTime;
use chrono::{DateTime, Utc};
use lake_engine::Engine;
use lake_store::keys::first_key_at;
use lake_store::layout::OBJECTS_PREFIX;
use lake_store::store::{CreateOutcome, LakeStore};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// The state format this build writes and reads.
pub const STATE_FORMAT_VERSION: u64 = 1;
/// The folder of GC states under the root.
pub const STATE_PREFIX: &str = "_lake/gc/state";
/// How long an incremental chain runs before a full plan is made again, by default: a week.
pub const DEFAULT_FULL_EVERY: Duration = Duration::from_secs(7 * 24 * 3600);
/// How far before the state's cutoff an incremental plan starts listing, by default: an hour.
pub const DEFAULT_MARGIN: Duration = Duration::from_secs(3600);

/// Whether a run may plan incrementally, and its bounds ([`crate::run::RunRequest::incremental`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncrementalPolicy {
    /// Make a full plan whatever the state (`lake gc --full`).
    pub full: bool,
    /// Make a full plan when the last full plan of the state's chain has a cutoff more than
    /// this before this run's (`--full-every`, default [`DEFAULT_FULL_EVERY`]).
    pub full_every: Duration,
    /// List the keys minted since the state's cutoff minus this (default [`DEFAULT_MARGIN`]):
    /// an upload minted earlier and still in flight when the state's plan listed its key is
    /// missed by incremental plans (a full plan collects it).
    pub margin: Duration,
}

impl Default for IncrementalPolicy {
    /// Incremental when a valid state allows, a full plan every 7 days, a margin of an hour.
    fn default() -> Self {
        Self { full: false, full_every: DEFAULT_FULL_EVERY, margin: DEFAULT_MARGIN }
    }
}

impl IncrementalPolicy {
    /// Always a full plan.
    pub fn full() -> Self {
        Self { full: true, ..Self::default() }
    }
}

/// What the last complete apply of a whole plan left for the next run (module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcState {
    /// Always [`STATE_FORMAT_VERSION`].
    pub format_version: u64,
    /// The lake root (normalised URI).
    pub root: String,
    /// The lake's identity ([`lake_store::descriptor::LakeDescriptor::identity`]).
    pub lake_id: String,
    /// The plan's horizon, in seconds.
    pub min_age_seconds: u64,
    /// The plan's cutoff.
    pub cutoff: PlanTime,
    /// The plan's digest.
    pub plan_digest: String,
    /// Whether the plan was incremental or full.
    pub mode: PlanMode,
    /// The cutoff of the last full plan of the chain (this plan's own when it was full).
    pub full_cutoff: PlanTime,
    /// The plan's basis: per lineage, the latest version, the retained versions and the digest
    /// of its journal files when the plan read them.
    pub basis: Vec<BasisEntry>,
    /// Keys under `objects/` the apply left: skipped or failed, sorted.
    pub unfinished: Vec<String>,
    /// Keys minted before the cutoff but last written at or after it, sorted.
    pub held: Vec<String>,
    /// True when the plan held more keys than it records: the next run is full.
    pub held_overflow: bool,
}

impl GcState {
    /// The state a complete apply of `plan` leaves, `None` when it leaves none: a shard of
    /// several (the one shard of an incremental sharded plan, over every key, is a whole plan),
    /// a plan on incomplete lineage, a plan of an earlier build (without a mode record) or of
    /// no recorded lake, or an apply that did not finish every candidate.
    pub fn of_apply(plan: &GcPlan, checkpoint: &ApplyCheckpoint) -> Option<Self> {
        let record = plan.mode.as_ref()?;
        let whole = plan.shard.as_ref().is_none_or(|s| s.count == 1 && s.range.is_all());
        if !checkpoint.complete || !whole || !plan.lineage_complete {
            return None;
        }
        let mut unfinished: Vec<String> = checkpoint
            .skipped
            .iter()
            .map(|s| s.key.to_string())
            .chain(checkpoint.failed.iter().cloned())
            .filter(|k| k.starts_with(OBJECTS_PREFIX))
            .collect();
        unfinished.sort();
        unfinished.dedup();
        Some(Self {
            format_version: STATE_FORMAT_VERSION,
            root: plan.root.clone(),
            lake_id: plan.lake_id.clone()?,
            min_age_seconds: plan.min_age_seconds,
            cutoff: plan.cutoff,
            plan_digest: checkpoint.plan_digest.clone(),
            mode: record.mode,
            full_cutoff: record.full_cutoff,
            basis: plan.basis.clone(),
            unfinished,
            held: record.held.clone(),
            held_overflow: record.held_overflow,
        })
    }

    /// Its key under the root: `_lake/gc/state/<cutoff ms:013>-<plan digest>.json` (states sort
    /// by cutoff).
    pub fn key(&self) -> String {
        state_key(self.cutoff.timestamp_millis(), &self.plan_digest)
    }

    /// The canonical bytes (compact JSON, fields in declaration order) sealed by their SHA-256.
    pub fn encode(&self) -> Vec<u8> {
        // Strings, integers, booleans and lists of them: serialising cannot fail.
        lake_common::delta::seal(serde_json::to_vec(self).unwrap_or_default())
    }

    /// The state's digest: the SHA-256 of its canonical bytes (its seal).
    pub fn digest(&self) -> String {
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(serde_json::to_vec(self).unwrap_or_default()))
    }

    /// Decodes the document stored at `key` and checks it: its format, its seal (an edit
    /// anywhere changes what it decodes to), and that `key` is the one its content names.
    ///
    /// # Errors
    /// A sentence saying what is wrong.
    pub fn decode(bytes: &[u8], key: &str) -> Result<Self, String> {
        let mut value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| format!("it is not valid JSON ({e})"))?;
        let object = value.as_object_mut().ok_or("it is not a JSON object")?;
        match object.get("format_version").and_then(serde_json::Value::as_u64) {
            Some(STATE_FORMAT_VERSION) => {}
            other => return Err(format!("its format version {other:?} is not {STATE_FORMAT_VERSION}")),
        }
        let seal = match object.remove("sha256") {
            Some(serde_json::Value::String(seal)) => seal,
            _ => return Err("it has no seal (`sha256`)".into()),
        };
        let state: Self = serde_json::from_value(value).map_err(|e| format!("it is not a GC state ({e})"))?;
        lake_common::delta::check_seal(&serde_json::to_vec(&state).unwrap_or_default(), &seal)
            .map_err(|e| format!("it was edited: {e}"))?;
        if state.key() != key {
            return Err(format!(
                "its content is the state {}, not the one its name says (it was renamed)",
                state.key()
            ));
        }
        Ok(state)
    }

    /// Writes the state create-only; a state already there (the same apply recorded again) is
    /// kept. Returns its key.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn record(&self, store: &LakeStore) -> Result<String, GcError> {
        let key = self.key();
        match store.put_create(&key, self.encode()).await? {
            CreateOutcome::Created => tracing::info!(key, "GC state recorded"),
            CreateOutcome::Exists(_) => tracing::info!(key, "GC state already recorded"),
        }
        Ok(key)
    }
}

/// The key of the state of the plan of cutoff `cutoff_ms` and digest `digest`.
fn state_key(cutoff_ms: i64, digest: &str) -> String {
    format!("{STATE_PREFIX}/{cutoff_ms:013}-{digest}.json")
}

/// Whether `name` (a file name in the state folder) is a state's: `<13 digits>-<64 hex>.json`.
fn is_state_name(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".json") else { return false };
    let Some((ms, digest)) = stem.split_once('-') else { return false };
    ms.len() == 13
        && ms.bytes().all(|b| b.is_ascii_digit())
        && digest.len() == 64
        && digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What an incremental plan examines besides the keys it lists (planner input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncrementalScope {
    /// The listing starts after this key: the first key minted at the state's cutoff minus the
    /// margin.
    pub listed_after: String,
    /// The state's basis, by lineage: a lineage whose basis changed since is replayed over the
    /// versions from the oldest the state retained, to find the keys it released.
    pub basis: BTreeMap<String, BasisEntry>,
    /// Keys under `objects/` before `listed_after` the state's run left unfinished or held,
    /// sorted: examined again (each looked up in the store).
    pub revisit: Vec<String>,
    /// Whether every live key before `listed_after` is looked up for a symbolic link (a local
    /// root: the listing does not read those folders; an S3 root has no links).
    pub check_links: bool,
}

/// How a run plans: incrementally from a state, or in full and why.
#[derive(Debug, Clone)]
pub(crate) enum Choice {
    /// From the state of digest `state`, whose chain's last full plan had `full_cutoff`.
    Incremental { scope: IncrementalScope, state: String, full_cutoff: PlanTime },
    /// A full plan, for this reason.
    Full(String),
}

/// What the collector knows when it chooses.
pub(crate) struct Chooser<'a> {
    pub store: &'a LakeStore,
    pub lake_id: String,
    pub cutoff: DateTime<Utc>,
    pub store_now: DateTime<Utc>,
}

/// Chooses how a run plans under `policy` (module documentation): incrementally from the
/// latest state when every check passes, else in full with the reason.
///
/// # Errors
/// Storage errors (reading the state folder and the latest state).
pub(crate) async fn choose(at: &Chooser<'_>, policy: &IncrementalPolicy) -> Result<Choice, GcError> {
    if policy.full {
        return Ok(Choice::Full("a full plan was asked for".into()));
    }
    let listed = at.store.list_all(STATE_PREFIX).await?;
    if let Some((stray, _)) = listed.iter().find(|(k, _)| !k.rsplit('/').next().is_some_and(is_state_name)) {
        return Ok(Choice::Full(format!(
            "`{stray}` in the GC state folder {STATE_PREFIX}/ is not a GC state; no state there is trusted (move the file out)"
        )));
    }
    // The latest cutoff; of states with the same cutoff (two applies within one millisecond of
    // the store's clock), the one written last.
    let cutoff_of = |key: &str| key.rsplit('/').next().map(|name| name.get(..13).unwrap_or(name).to_string());
    let latest = listed
        .iter()
        .max_by(|a, b| (cutoff_of(&a.0), a.1.last_modified, &a.0).cmp(&(cutoff_of(&b.0), b.1.last_modified, &b.0)));
    let Some((key, _)) = latest else {
        return Ok(Choice::Full("no GC state is recorded yet (a state is recorded by a complete apply)".into()));
    };
    let untrusted = |why: String| Ok(Choice::Full(format!("the GC state {key} is not used: {why}")));
    let Some(bytes) = at.store.get(key).await? else {
        return untrusted("it vanished while it was read".into());
    };
    let state = match GcState::decode(&bytes, key) {
        Ok(state) => state,
        Err(why) => return untrusted(format!("{why}; it is corrupt or was edited")),
    };
    let root = at.store.root().to_string();
    if state.root != root || state.lake_id != at.lake_id {
        return untrusted(format!(
            "it is of lake {} at {}, not of lake {} at {root}",
            state.lake_id, state.root, at.lake_id
        ));
    }
    if state.cutoff.datetime() > at.store_now {
        return untrusted(format!(
            "its cutoff {} is after the store's now ({}): it is from the future",
            state.cutoff,
            PlanTime::from_datetime(at.store_now)
        ));
    }
    if state.full_cutoff.datetime() > at.store_now || state.full_cutoff.datetime() > state.cutoff.datetime() {
        return untrusted(format!(
            "the cutoff of its last full plan {} is after its own cutoff {} or the store's now ({}): a chain \
             that would never plan in full again",
            state.full_cutoff,
            state.cutoff,
            PlanTime::from_datetime(at.store_now)
        ));
    }
    if state.held_overflow {
        return untrusted(format!("its run held more than {} keys as young", crate::plan::MAX_HELD));
    }
    let since_full = at.cutoff.signed_duration_since(state.full_cutoff.datetime());
    if since_full.to_std().is_ok_and(|d| d >= policy.full_every) {
        return Ok(Choice::Full(format!(
            "the last full plan (cutoff {}) is at least {} older than this one (full every {})",
            state.full_cutoff,
            humantime::format_duration(policy.full_every),
            humantime::format_duration(policy.full_every)
        )));
    }
    // The journal positions the state names are checked by the plan itself, against the lineage
    // it reads anyway (`planner`): a lineage no longer registered, or one that did not only move
    // forward since, makes the plan fall back to a full one and say why.
    let margin = chrono::Duration::from_std(policy.margin).unwrap_or(chrono::Duration::MAX);
    let from = state.cutoff.datetime().checked_sub_signed(margin).unwrap_or(DateTime::<Utc>::MIN_UTC);
    let listed_after = first_key_at(from);
    let mut revisit: Vec<String> = state
        .unfinished
        .iter()
        .chain(&state.held)
        .filter(|k| k.starts_with(OBJECTS_PREFIX) && k.as_str() < listed_after.as_str())
        .cloned()
        .collect();
    revisit.sort();
    revisit.dedup();
    let scope = IncrementalScope {
        listed_after,
        basis: state.basis.iter().map(|b| (b.table.clone(), b.clone())).collect(),
        revisit,
        check_links: at.store.local_dir().is_some(),
    };
    Ok(Choice::Incremental { scope, state: state.digest(), full_cutoff: state.full_cutoff })
}

/// Why an incremental plan from `scope` would fall back to a full one because of its lineages
/// (one no longer registered, or one that did not only move forward since the state), `None`
/// when none would: the checks the plan itself makes (`planner`), made ahead by a sharded
/// plan's coordinator, which splits the keys into shards only for a full plan.
///
/// # Errors
/// Engine errors (the registry, the lineages' stamps).
pub(crate) async fn lineage_fallback(engine: &dyn Engine, scope: &IncrementalScope) -> Result<Option<String>, GcError> {
    let tables = engine.tables().await?;
    for (name, entry) in &scope.basis {
        let Some(location) = tables.tables.iter().find(|t| &t.name == name) else {
            return Ok(Some(format!("lineage `{name}` it records is no longer registered")));
        };
        let stamp = engine.lineage_stamp(location).await?;
        if let Some(problem) = entry.basis().check_forward(name, &stamp).first() {
            return Ok(Some(format!("the journal positions the state records no longer exist: {problem}")));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_names_are_cutoff_then_digest() {
        let name = format!("{:013}-{}.json", 1_700_000_000_000i64, "a".repeat(64));
        assert!(is_state_name(&name));
        assert!(!is_state_name("1700000000000-abc.json"));
        assert!(!is_state_name(&name.replace(".json", ".txt")));
        assert!(!is_state_name(&format!("{:013}-{}.json", 1, "A".repeat(64))));
        assert_eq!(state_key(5, "d"), "_lake/gc/state/0000000000005-d.json");
    }
}
