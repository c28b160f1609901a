//! The planner: which managed objects are orphans older than the cutoff.
//!
//! 1. The cutoff is fixed first (by the caller, from the store's clock), then the write intents
//!    are read (their references are live: commits that may still land), then lineage: an
//!    object that becomes referenced after lineage was read was either named by an intent read
//!    here or published after the cutoff and is younger than it (the writer-side guard), so it
//!    cannot be a candidate (`docs/safety.md`, "Commits that land late").
//! 2. Lineage of every registered table; any problem makes the plan incomplete, with no
//!    candidates (apply refuses it; the dry run names every problem).
//! 3. The live set: the union over tables of the live identities of each table's snapshot
//!    ([`Engine::snapshot`], a stream read from the one read of its journal),
//!    keeping the keys of references inside the lake root, as sorted runs that spill to local
//!    disk past `memory_budget` bytes ([`crate::spill`]) and are merged in key order. Each table
//!    is replayed right after its lineage is read (until a problem is found).
//! 4. The sweep: inventory pages in key order; a key is a candidate only if it is an object
//!    matching the managed grammar (or an empty managed folder, `objects/<ULID>/`, on a local
//!    root), its ULID time and its `last_modified` are both before the cutoff, and it is not
//!    live. Foreign entries (symbolic links, devices, S3 folder markers) are never candidates;
//!    they are counted and named in the plan, and a live reference that goes through a symbolic
//!    link met by the sweep makes the plan incomplete (it may name a listed object by another
//!    path). Listing stops at the first key minted at or after the cutoff; on a local root the
//!    live keys after the last listed entry (young ones: their folders are never read) are then
//!    looked up for links, so a young live key made a link to an old object is met too. Candidates
//!    arrive in key order and go to a [`CandidateWriter`], which moves them to a temporary file
//!    past `memory_budget` bytes: during the sweep, the live keys' merge and the candidates
//!    each hold at most `memory_budget`.
//!
//! 5. GC's own garbage in the journals ([`Engine::unreferenced_journal_files`]): reference logs
//!    (and staged uploads of them) that no journal entry names, minted and last written before
//!    the cutoff, are candidates too, after the objects.
//! 6. GC's own garbage elsewhere, under the same age rule (minted and last written before the
//!    cutoff; nothing can reference it): uploads of managed objects that never finished (a local
//!    staging file `objects/<ULID>/<name>#<n>` the sweep lists, or an S3 multipart upload), and
//!    store-clock probes a killed or failed run left under `_lake/clock/`
//!    ([`ObjectInventory::own_garbage`], merged into the sweep in key order). A staging file
//!    goes before its folder: the folder it empties goes with it.
//!
//! A plan may cover one range of keys ([`PlanOptions::range`], a shard of a sharded plan,
//! [`crate::shards`]): the sweep lists from the range's start and stops past its end, foreign
//! entries and symbolic links are the range's own, and journal garbage (`tables/...` keys, after
//! every `objects/` key) is kept only in the range that holds it. Lineage and the live set are
//! read whole, as for an unsharded plan. `plan_ranges` plans several contiguous ranges from
//! one read of the lineage and one listing; each of its plans is the plan of its range alone.
//!
//! Steps 2-3 and the listing of step 4 run concurrently (the listing fills a bounded channel of
//! [`prefetch_pages`] pages, an eighth of the memory budget): when the listing happens does not
//! matter to safety, because only objects older than the cutoff can be candidates and they existed
//! before it was fixed. On S3, where both the journal phase and the listing wait on requests, a
//! plan then costs about the longer of the two instead of their sum.
//!
//! Size: about 1000 lines, 50 of them this documentation; `plan_ranges` is one function of about 250
//! lines running steps 1-6 over one listing, its range bookkeeping (`RangeSweep`, `Aliases`) beside
//! it. Kept whole because the order of the steps is the safety argument.

use crate::candidates::{CandidateList, CandidateWriter};
use crate::error::GcError;
use crate::inventory::Foreign;
use crate::inventory::InventoryEntry;
use crate::inventory::{EntryKind, InventoryPage, ObjectInventory};
use crate::key_range::KeyRange;
use crate::live_keys::{push_intent_keys, push_live_keys};
use crate::plan::{
    BasisEntry, Candidate, GcPlan, PlanProblem, FOREIGN_LISTED, MAX_HELD, PLAN_FORMAT_VERSION, STAGE_ORPHAN_OBJECTS,
};
use crate::plan_time::PlanTime;
use crate::spill::SortedRuns;
use crate::state::IncrementalScope;
use chrono::{DateTime, Utc};
use lake_common::ErrorKind;
use lake_engine::{Engine, LineageBasis};
use lake_store::keys::{first_key_at, garbage_kind, minted_at, GarbageKind};
use lake_store::layout::OBJECTS_PREFIX;
use std::time::Duration;

/// Fewest inventory pages listed ahead of the sweep while the live set is read.
pub const MIN_PREFETCH_PAGES: usize = 4;
/// Live keys an incremental plan on a local root looks up together for a symbolic link.
const LIVE_LOOKUP_BATCH: usize = 4096;
/// Keys an incremental plan looks up at once (HEAD requests in flight on S3; AWS supports at
/// least 5,500 GET and HEAD requests a second per prefix).
pub const LOOKUPS_IN_FLIGHT: usize = 32;
/// Most inventory pages listed ahead of the sweep (about 8 MiB at 1000 keys a page).
pub const MAX_PREFETCH_PAGES: usize = 64;

/// How many inventory pages of `page_size` entries the listing may hold ahead of the sweep: an
/// eighth of `memory_budget` bytes, between [`MIN_PREFETCH_PAGES`] and [`MAX_PREFETCH_PAGES`].
/// With `lake gc`'s default budget (256 MiB, half of it here) and 1000 keys a page, 64 pages:
/// 64,000 keys listed while the journal is read.
pub fn prefetch_pages(memory_budget: usize, page_size: usize) -> usize {
    (memory_budget / 8 / page_size.max(1).saturating_mul(crate::inventory::parallel::ENTRY_BYTES))
        .clamp(MIN_PREFETCH_PAGES, MAX_PREFETCH_PAGES)
}

/// What to plan (inside the crate: callers go through [`crate::collector::GarbageCollector`]).
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// The normalised lake root (recorded in the plan).
    pub root: String,
    /// The lake's identity ([`lake_store::descriptor::LakeDescriptor::identity`], recorded in
    /// the plan); `None` only for plans made without a collector (tests and benchmarks).
    pub lake_id: Option<String>,
    /// The horizon (`--min-age`).
    pub min_age: Duration,
    /// Objects at or after this instant are young. Truncated to milliseconds.
    pub cutoff: DateTime<Utc>,
    /// Inventory page size (objects per listing request).
    pub inventory_page_size: usize,
    /// Bytes of live keys held in memory before they spill to a sorted run on local disk
    /// (about 24 bytes plus the key's length each).
    pub memory_budget: usize,
    /// The keys planned: every key by default; a shard's range otherwise. The sweep lists from
    /// `range.after` and stops at the first key past `range.until` (as well as at the first
    /// young key), and journal garbage is kept only when its key lies in the range.
    pub range: KeyRange,
    /// An incremental plan ([`crate::state`]): list only the keys after the scope's
    /// `listed_after`, and examine besides them the keys before it that lost their last
    /// reference since the state or that its run left; `None` (the default) for a full plan.
    pub incremental: Option<IncrementalScope>,
    /// Whether the live keys after the last listed entry (young, or past the listing) are
    /// looked up for symbolic links ([`ObjectInventory::links_among`]): true for a local root,
    /// whose folders the sweep does not read past where it stops (a link there, aliasing a
    /// listed object, is met as the sweep meets one); an S3 root has none.
    pub check_links_past_listing: bool,
}

impl PlanOptions {
    /// A plan of the lake at `root` with horizon `min_age` and cutoff `cutoff`, listing and
    /// holding memory as [`crate::collector::PlanSettings::default`] does (1000 keys a page,
    /// half the default memory budget).
    pub fn new(root: &lake_common::uri::LakeRootUri, min_age: Duration, cutoff: DateTime<Utc>) -> Self {
        let settings = crate::collector::PlanSettings::default();
        Self {
            root: root.to_string(),
            lake_id: None,
            min_age,
            cutoff,
            inventory_page_size: settings.inventory_page_size,
            memory_budget: settings.memory_budget,
            range: KeyRange::all(),
            incremental: None,
            check_links_past_listing: root.scheme() == "file",
        }
    }

    /// The same options with `settings`' page size and memory budget.
    pub fn with_settings(self, settings: &crate::collector::PlanSettings) -> Self {
        Self { inventory_page_size: settings.inventory_page_size, memory_budget: settings.memory_budget, ..self }
    }

    /// The same options listing `keys` objects per request (1 to 1000 on S3).
    pub fn page_size(self, keys: usize) -> Self {
        Self { inventory_page_size: keys, ..self }
    }

    /// The same options holding `bytes` of live keys before they spill.
    pub fn memory_budget(self, bytes: usize) -> Self {
        Self { memory_budget: bytes, ..self }
    }

    /// The same options planning only the keys in `range` (a shard's).
    pub fn range(self, range: KeyRange) -> Self {
        Self { range, ..self }
    }
}

/// Counters of one planning run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Tables read.
    pub tables: u64,
    /// Live references (identities) read from the journal.
    pub live_references: u64,
    /// Inventory entries listed.
    pub objects_listed: u64,
    /// Inventory pages requested.
    pub inventory_pages: u64,
    /// Listed keys outside the managed grammar (never candidates).
    pub unmanaged_keys: u64,
    /// Listed entries that are no objects (symbolic links, devices, S3 folder markers).
    pub foreign_entries: u64,
    /// Empty managed folders listed (candidates when old).
    pub empty_folders: u64,
    /// Journal files no journal entry names, old enough to collect (reference logs of writes
    /// that never committed, and staged uploads of them).
    pub journal_garbage: u64,
    /// Uploads of managed objects that never finished, old enough to collect (local staging
    /// files, S3 multipart uploads).
    pub staged_uploads: u64,
    /// Store-clock probes left behind by killed or failed runs, old enough to collect.
    pub clock_probes: u64,
    /// Managed keys skipped as live.
    pub live_objects: u64,
    /// Managed keys skipped as younger than the cutoff.
    pub young_objects: u64,
    /// Sorted runs of live keys spilled to disk (0: the live set fit the memory budget).
    pub spilled_runs: u64,
    /// Write intents read (commits that may still land; their references are live), sorted by
    /// key. A pending one is resolved by the next write to its table or by `lake refs recover`.
    pub write_intents: Vec<lake_engine::IntentInfo>,
    /// References the write intents name (kept live).
    pub intent_references: u64,
    /// Incremental plans: keys before the listed range that were looked up one by one (released
    /// since the state, or left by its run) and not live.
    pub looked_up: u64,
    /// Incremental plans: of those, the keys the store no longer holds.
    pub looked_up_gone: u64,
    /// Incremental plans on a local root: live keys before the listed range looked up for a
    /// symbolic link.
    pub live_keys_looked_up: u64,
    /// Lineages whose journal entries since the state an incremental plan read to find the keys
    /// they released (their removals; the journal replayed again for a snapshot entry since).
    pub released_tables: u64,
    /// Managed keys minted before the cutoff but last written at or after it, sorted, at most
    /// [`MAX_HELD`] (an upload that finished around the cutoff): the next incremental plan
    /// looks at them again.
    pub held: Vec<String>,
    /// More keys than [`MAX_HELD`] were held.
    pub held_overflow: bool,
}

/// RFC 3339 UTC with milliseconds, the plan's time format ([`PlanTime`]'s spelling).
pub fn format_time(t: DateTime<Utc>) -> String {
    PlanTime::from_datetime(t).to_string()
}

/// Makes a plan of the keys in `options.range`. See the module documentation for the rules.
///
/// # Errors
/// [`GcError::Engine`] or [`StoreError::Storage`](lake_store::StoreError::Storage) when the journal or the listing
/// cannot be read; nothing is planned from a partial read.
pub(crate) async fn plan(
    engine: &dyn Engine,
    inventory: &dyn ObjectInventory,
    options: &PlanOptions,
) -> Result<(GcPlan, PlanStats), GcError> {
    let (plans, stats) = plan_ranges(engine, inventory, options, std::slice::from_ref(&options.range)).await?;
    let plan =
        plans.into_iter().next().ok_or_else(|| GcError::refused(ErrorKind::ShardMismatch, "no key range to plan"))?;
    Ok((plan, stats))
}

/// One plan per range of `ranges`, from one read of the lineage and live set and one listing
/// from the first range's `after` to the last range's `until` (`options.range` is not used).
/// Each plan is the plan of its range alone ([`plan`] with `options.range` set to it): its
/// candidates, foreign entries and symbolic-link problems are those of its keys. Its
/// candidates are held in memory up to `options.memory_budget / ranges.len()` bytes each (the
/// budget is shared; past it a list spills, which changes neither its bytes nor its digest).
///
/// # Errors
/// [`GcError::Refused`] when `ranges` is empty or not contiguous (each range's `until` the
/// next one's `after`); otherwise as [`plan`].
pub(crate) async fn plan_ranges(
    engine: &dyn Engine,
    inventory: &dyn ObjectInventory,
    options: &PlanOptions,
    ranges: &[KeyRange],
) -> Result<(Vec<GcPlan>, PlanStats), GcError> {
    let full = PlanOptions { incremental: None, ..options.clone() };
    match plan_planning(engine, inventory, &full, ranges).await? {
        Planning::Done(plans, stats) => Ok((plans, stats)),
        Planning::Fallback(reason) => Err(GcError::storage("the plan", reason)),
    }
}

/// What an incremental plan came to: a plan, or a reason why only a full plan can be made
/// (found while the journal was read).
#[derive(Debug)]
pub(crate) enum Planning {
    /// The plans and their counters.
    Done(Vec<GcPlan>, PlanStats),
    /// The state cannot be used after all: why.
    Fallback(String),
}

/// Makes the plan of `options` over the whole key space: incremental when
/// `options.incremental` is set (then possibly [`Planning::Fallback`]), full otherwise.
///
/// # Errors
/// As [`plan`].
pub(crate) async fn plan_incremental(
    engine: &dyn Engine,
    inventory: &dyn ObjectInventory,
    options: &PlanOptions,
) -> Result<Planning, GcError> {
    plan_planning(engine, inventory, options, &[KeyRange::all()]).await
}

/// [`plan_ranges`], incremental when `options.incremental` is set (with one range, every key).
async fn plan_planning(
    engine: &dyn Engine,
    inventory: &dyn ObjectInventory,
    options: &PlanOptions,
    ranges: &[KeyRange],
) -> Result<Planning, GcError> {
    if ranges.is_empty() || ranges.windows(2).any(|w| w[0].until.is_none() || w[0].until != w[1].after) {
        return Err(GcError::refused(
            ErrorKind::ShardMismatch,
            "key ranges to plan must be contiguous (each range ends where the next begins); nothing was planned",
        ));
    }
    let cutoff = PlanTime::from_datetime(options.cutoff).datetime();
    let mut stats = PlanStats::default();
    // The listing runs concurrently with reading lineage and the live set: a producer fills a
    // channel of at most `prefetch_pages` pages (bounded memory) while the journal is read; the sweep
    // then consumes them in key order. Listing before or during the lineage read is as safe as
    // after it: only objects older than the cutoff can be candidates, and those existed before
    // the cutoff was fixed. Dropping the receiver (a young key, the end of the last range, or
    // incomplete lineage) stops it.
    let page_size = options.inventory_page_size.max(1);
    let prefetch = prefetch_pages(options.memory_budget, page_size);
    let (sender, mut receiver) = futures::channel::mpsc::channel::<Result<InventoryPage, GcError>>(prefetch);
    let incremental = options.incremental.as_ref();
    // An incremental plan lists only the keys minted since the state's cutoff minus the margin.
    let start_after = incremental.map(|i| i.listed_after.clone()).or_else(|| ranges[0].after.clone());
    let producer = async move {
        let mut sender = sender;
        // The stream ends after its last page or its first error.
        let mut pages = inventory.list_from(start_after, page_size);
        while let Some(page) = futures::StreamExt::next(&mut pages).await {
            if futures::SinkExt::send(&mut sender, page).await.is_err() {
                break;
            }
        }
    };
    let started = std::time::Instant::now();
    let consumer = async {
        let mut sweeps: Vec<RangeSweep> =
            ranges.iter().map(|_| RangeSweep::new(options.memory_budget / ranges.len())).collect();
        // The write intents, after the cutoff and before any lineage: the references of a
        // commit that may still land are live.
        let mut live_runs = SortedRuns::new(options.memory_budget);
        // Incremental plans: the keys before the listed range to look up (released since the
        // state, or left by its run).
        let mut released = SortedRuns::new(options.memory_budget / 4);
        for key in incremental.map(|i| i.revisit.as_slice()).unwrap_or_default() {
            released.push(key.clone())?;
        }
        let intents = push_intent_keys(engine, &mut live_runs).await?;
        stats.intent_references = intents.intents.iter().map(|i| i.references).sum();
        stats.write_intents = intents.intents;
        let table_set = engine.tables().await?;
        // Every lineage the state records must still be registered: one deleted since released
        // every key only it referenced, which only a full plan finds.
        if let Some(scope) = incremental {
            let registered = |name: &String| table_set.tables.iter().any(|t| &t.name == name);
            if let Some(gone) = scope.basis.keys().find(|name| !registered(name)) {
                return Ok(Err(format!("lineage `{gone}` it records is no longer registered")));
            }
        }
        let mut problems: Vec<PlanProblem> = table_set.problems.iter().map(PlanProblem::from).collect();
        problems.extend(intents.problems.into_iter().map(|m| PlanProblem::new(PlanProblem::WRITE_INTENT, m)));
        let mut basis = Vec::new();
        // Table by table: lineage, then (while every table so far is complete) its live keys, as
        // sorted runs spilled past the memory budget and merged in key order later. Replaying
        // right after reading lineage lets the engine reuse what it just read. Once any problem
        // is found the plan is incomplete: the remaining tables' lineage is still read, to name
        // every problem, but not replayed. A table whose journal turns out incomplete while it
        // is replayed (a version committed since its lineage was read, its sidecar not yet
        // written) makes the plan incomplete, like any problem.
        // Only the references these ranges concern are read from large journal entries (the
        // blocks of a log outside them are skipped): a shard reads about its part of the journal.
        let uris = lake_engine::UriRange {
            after: ranges.first().and_then(|r| r.after.clone()),
            until: ranges.last().and_then(|r| r.until.as_deref().map(live_until)),
        };
        for location in &table_set.tables {
            let snapshot = match engine.snapshot_in(location, &uris).await {
                Ok(snapshot) => snapshot,
                // Deleted since the registry was listed (a branch deleted meanwhile).
                Err(lake_engine::EngineError::Table { .. }) => {
                    problems.push(PlanProblem::from(&lake_engine::LineageProblem::TableVanished {
                        table: location.name.clone(),
                    }));
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let lineage = snapshot.lineage();
            stats.tables += 1;
            let now = LineageBasis::of(&lineage.stamp);
            let (latest, stamp, replay_base) = (lineage.latest_version, lineage.stamp.clone(), lineage.replay_base);
            basis.push(BasisEntry::new(location.name.clone(), now.clone()));
            problems.extend(lineage.problems.iter().map(PlanProblem::from));
            if !problems.is_empty() {
                continue;
            }
            let (read, found) = push_live_keys(snapshot, &mut live_runs)?;
            stats.live_references += read;
            problems.extend(found);
            if let (Some(scope), true) = (incremental, problems.is_empty()) {
                let then = scope.basis.get(&location.name);
                if then.is_some_and(|b| b.basis() == now) {
                    continue; // Unchanged since the state: it released nothing.
                }
                // A key the state saw referenced by a version it retained, and referenced by
                // none now, stopped being referenced at a version after the oldest the state
                // retained: that version's entry removes it (or is a snapshot). A lineage new
                // since the state: the versions after its first entry.
                let since = match then {
                    Some(b) => {
                        if let Some(p) = b.basis().check_forward(&location.name, &stamp).first() {
                            return Ok(Err(format!("the journal positions the state records no longer exist: {p}")));
                        }
                        Some(b.retained.first().copied().unwrap_or(b.version.saturating_add(1)))
                    }
                    None => None,
                };
                let at = Lineage { location, uris: &uris, since, latest, replay_base };
                match push_released(engine, &at, &scope.listed_after, &mut released).await? {
                    Released::Read(found) => problems.extend(found),
                    Released::Unreadable(reason) => return Ok(Err(reason)),
                }
                stats.released_tables += 1;
            }
        }
        // GC's own garbage in the journals: found while the journal is fresh in mind, planned
        // after the objects (`tables/...` keys sort after `objects/...`).
        let mut garbage = Vec::new();
        if problems.is_empty() {
            for location in &table_set.tables {
                garbage.extend(engine.unreferenced_journal_files(location, cutoff.timestamp_millis()).await?);
            }
            garbage.sort_by(|a, b| a.key.cmp(&b.key));
        }
        // GC's own garbage outside the listing (clock probes, S3 multipart uploads of objects).
        let own = if problems.is_empty() {
            inventory.own_garbage(cutoff).await?.into_iter().collect()
        } else {
            std::collections::VecDeque::new()
        };
        let journal_read = started.elapsed();
        basis.sort();
        problems.sort();
        problems.dedup();
        let lineage_complete = problems.is_empty();
        let mut aliases = Aliases::new(ranges);
        if lineage_complete {
            stats.spilled_runs = live_runs.runs() as u64;
            let mut live = live_runs.finish()?;
            let live_next = live.next_key()?;
            let mut sweep = Sweep { ranges, cutoff, stop_at: first_key_at(cutoff), live, live_next, own };
            let mut first = None;
            if let Some(scope) = incremental {
                // The first page's links first: a local walk reports every link directly under
                // `objects/`, also those before the listed range.
                if let Some(page) = futures::StreamExt::next(&mut receiver).await {
                    let page = page?;
                    for link in &page.links {
                        aliases.link(link.clone());
                    }
                    first = Some(page);
                }
                // Only collectable keys, each once, in ascending order, before the listed range:
                // a key the state or the journal names is never trusted to be one (a state
                // anyone can rewrite, a reference to a path below an object).
                let mut keys = released.finish()?;
                let listed_after = scope.listed_after.clone();
                let mut previous: Option<String> = None;
                let wanted = std::iter::from_fn(move || loop {
                    let key = match keys.next_key() {
                        Ok(Some(key)) if key.as_str() < listed_after.as_str() => key,
                        Ok(_) => return None,
                        Err(e) => return Some(Err(e)),
                    };
                    if lake_store::keys::is_collectable(&key) && previous.as_deref() < Some(key.as_str()) {
                        previous = Some(key.clone());
                        return Some(Ok(key));
                    }
                });
                // Looked up [`LOOKUPS_IN_FLIGHT`] at a time ahead of the sweep, which takes the
                // answers in key order, exactly as it would one at a time (a key that turns
                // out live costs a request whose answer is not used).
                let mut looked_up = futures::StreamExt::buffered(
                    futures::StreamExt::map(futures::stream::iter(wanted), |key| async move {
                        let key = key?;
                        let entry = inventory.head(&key).await?;
                        Ok::<_, GcError>((key, entry))
                    }),
                    LOOKUPS_IN_FLIGHT,
                );
                while let Some(next) = futures::StreamExt::next(&mut looked_up).await {
                    let (key, entry) = next?;
                    sweep.unlisted_live_before(&key, scope, inventory, &mut aliases, &mut stats).await?;
                    if sweep.live_next.as_deref() == Some(key.as_str()) {
                        continue; // Live: never a candidate.
                    }
                    stats.looked_up += 1;
                    let Some(entry) = entry else {
                        stats.looked_up_gone += 1;
                        continue;
                    };
                    if let EntryKind::Foreign(Foreign::SymbolicLink) = entry.kind {
                        aliases.link(entry.key.clone());
                    }
                    // A look-up answered under another key (a local path below a regular file
                    // resolves to that file) is not this key's entry: the merge with the live set
                    // has passed that key, so it is never judged here (a full plan lists it).
                    if entry.key != key {
                        stats.looked_up_gone += 1;
                        continue;
                    }
                    if sweep.entry(entry, &mut sweeps, &mut aliases, &mut stats)? != Step::Go {
                        break; // Young: so is every later key.
                    }
                }
                drop(looked_up);
                let end = scope.listed_after.clone();
                sweep.unlisted_live_before(&end, scope, inventory, &mut aliases, &mut stats).await?;
            }
            let mut pages =
                futures::StreamExt::chain(futures::stream::iter(first.map(Ok::<_, GcError>)), &mut receiver);
            'listing: while let Some(page) = futures::StreamExt::next(&mut pages).await {
                let page = page?;
                stats.inventory_pages += 1;
                for link in page.links {
                    aliases.link(link);
                }
                for entry in page.entries {
                    stats.objects_listed += 1;
                    if sweep.entry(entry, &mut sweeps, &mut aliases, &mut stats)? != Step::Go {
                        break 'listing;
                    }
                }
            }
            drop(pages);
            // The rest of GC's own garbage sorts after every listed entry (each is minted before
            // the cutoff, so before the first young key).
            while let Some(o) = sweep.own.pop_front() {
                own_candidate(o, ranges, &mut sweeps, &mut stats, cutoff)?;
            }
            // The live keys after the last listed entry (young, or past the end of the prefix
            // or of the ranges) name no listed object: with a link met anywhere, each is checked
            // against it. On a local root the sweep did not read their folders (it stops at the
            // first young key): each one in the ranges is looked up for a link first, so that a
            // young live key made a link to an old object is met as a listed link is.
            if options.check_links_past_listing {
                sweep.live_past_listing(inventory, &mut aliases).await?;
            } else if aliases.any() {
                while sweep.live_next.is_some() {
                    aliases.check(sweep.live_next.as_deref());
                    sweep.live_next = sweep.live.next_key()?;
                }
            }
        }
        drop(receiver);
        tracing::debug!(
            journal_s = journal_read.as_secs_f64(),
            sweep_s = (started.elapsed() - journal_read).as_secs_f64(),
            objects_listed = stats.objects_listed,
            live_references = stats.live_references,
            ranges = ranges.len(),
            "planned: lineage and live set read, then the sweep"
        );
        if lineage_complete {
            for file in garbage {
                // `tables/...` keys sort after every listed `objects/...` key of their range.
                let Some(at) = range_of(ranges, &file.key) else { continue };
                stats.journal_garbage += 1;
                let last_modified = DateTime::<Utc>::from_timestamp_millis(file.last_modified_ms).unwrap_or(cutoff);
                sweeps[at].candidates.push(Candidate {
                    key: file.key.into(),
                    size: file.size,
                    last_modified: last_modified.into(),
                })?;
            }
        }
        let mut outcomes = Vec::with_capacity(sweeps.len());
        for (sweep, alias_problems) in sweeps.into_iter().zip(aliases.finish()) {
            outcomes.push(sweep.finish(&problems, lineage_complete, alias_problems)?);
        }
        Ok::<_, GcError>(Ok((outcomes, basis, stats)))
    };
    let ((), consumed) = futures::join!(producer, consumer);
    let (outcomes, basis, stats) = match consumed? {
        Ok(done) => done,
        Err(reason) => return Ok(Planning::Fallback(reason)),
    };
    let plans = outcomes
        .into_iter()
        .map(|o| GcPlan {
            format_version: PLAN_FORMAT_VERSION,
            stage: STAGE_ORPHAN_OBJECTS.to_string(),
            root: options.root.clone(),
            lake_id: options.lake_id.clone(),
            min_age_seconds: options.min_age.as_secs(),
            cutoff: PlanTime::from_datetime(cutoff),
            basis: basis.clone(),
            lineage_complete: o.lineage_complete,
            problems: o.problems,
            foreign_count: o.foreign_count,
            foreign: o.foreign,
            shard: None,
            mode: None,
            candidates: o.candidates,
        })
        .collect();
    Ok(Planning::Done(plans, stats))
}

/// Whether the sweep goes on after an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// On to the next entry.
    Go,
    /// A key minted at or after the cutoff: every later key is younger (time-ordered keys).
    Young,
    /// Past the last range.
    Past,
}

/// The sweep's position: the live keys' merge and GC's own garbage, both in key order.
struct Sweep<'r> {
    ranges: &'r [KeyRange],
    cutoff: DateTime<Utc>,
    /// The first key minted at the cutoff.
    stop_at: String,
    live: crate::spill::MergedKeys,
    live_next: Option<String>,
    own: std::collections::VecDeque<InventoryEntry>,
}

impl Sweep<'_> {
    /// One entry, listed or looked up, in key order: every rule of a plan (the module
    /// documentation, step 4).
    fn entry(
        &mut self,
        entry: InventoryEntry,
        sweeps: &mut [RangeSweep],
        aliases: &mut Aliases<'_>,
        stats: &mut PlanStats,
    ) -> Result<Step, GcError> {
        let (ranges, cutoff) = (self.ranges, self.cutoff);
        if entry.key >= self.stop_at
            && entry.key.strip_prefix(OBJECTS_PREFIX).is_some_and(|k| k.starts_with('/'))
            && minted_at(&entry.key).is_some()
        {
            // Time-ordered keys: everything from here on was minted after the cutoff.
            stats.young_objects += 1;
            return Ok(Step::Young);
        }
        // GC's own garbage that sorts before this entry.
        while self.own.front().is_some_and(|o| o.key < entry.key) {
            if let Some(o) = self.own.pop_front() {
                own_candidate(o, ranges, sweeps, stats, cutoff)?;
            }
        }
        // The range of the entry; past the last range, the listing is done.
        let Some(at) = range_of(ranges, &entry.key) else {
            if ranges.last().is_some_and(|r| r.is_past(&entry.key)) {
                return Ok(Step::Past);
            }
            return Ok(Step::Go);
        };
        let sweep = &mut sweeps[at];
        // Live keys before this entry name objects that are not listed: through a symbolic
        // link, they could name one that is.
        while self.live_next.as_deref().is_some_and(|l| l < entry.key.as_str()) {
            aliases.check(self.live_next.as_deref());
            self.live_next = self.live.next_key()?;
        }
        match entry.kind {
            EntryKind::Foreign(what) => {
                stats.foreign_entries += 1;
                sweep.foreign(&entry.key, what.as_str());
                if what == Foreign::SymbolicLink {
                    aliases.link(entry.key);
                }
                return Ok(Step::Go);
            }
            EntryKind::EmptyFolder => stats.empty_folders += 1,
            EntryKind::Object | EntryKind::Staged => {}
        }
        // Each kind of listed entry has its one grammar (a key of the S3 listing that looks
        // like a staging file is an object outside the grammar).
        let grammar = match entry.kind {
            EntryKind::Staged => Some(GarbageKind::StagedUpload),
            EntryKind::EmptyFolder => Some(GarbageKind::EmptyFolder),
            _ => Some(GarbageKind::Object),
        };
        let minted = minted_at(&entry.key).filter(|_| garbage_kind(&entry.key) == grammar);
        let Some(minted) = minted else {
            stats.unmanaged_keys += 1;
            return Ok(Step::Go);
        };
        if minted >= cutoff || entry.last_modified >= cutoff {
            stats.young_objects += 1;
            if minted < cutoff {
                // Young by the store's time only: the next incremental plan looks again.
                if stats.held.len() < MAX_HELD {
                    stats.held.push(entry.key);
                } else {
                    stats.held_overflow = true;
                }
            }
            return Ok(Step::Go);
        }
        // Merge join: both sides ascend by key.
        if self.live_next.as_deref() == Some(entry.key.as_str()) {
            stats.live_objects += 1;
            return Ok(Step::Go);
        }
        if entry.kind == EntryKind::Staged {
            stats.staged_uploads += 1;
        }
        sweep.candidates.push(Candidate {
            key: entry.key.into(),
            size: entry.size,
            last_modified: entry.last_modified.into(),
        })?;
        Ok(Step::Go)
    }

    /// Moves the live keys' merge to its end after the listing, on a local root: the live keys
    /// in the ranges are looked up for symbolic links ([`Sweep::live_batch`]).
    async fn live_past_listing(
        &mut self,
        inventory: &dyn ObjectInventory,
        aliases: &mut Aliases<'_>,
    ) -> Result<(), GcError> {
        let ranges = self.ranges;
        while self.live_next.is_some() {
            self.live_batch(None, |l| range_of(ranges, l).is_some(), inventory, aliases).await?;
        }
        Ok(())
    }

    /// Moves the live keys' merge up to `end` (an incremental plan, before its listed range):
    /// each live key passed names no listed object, so it is checked against the symbolic
    /// links met; on a local root each is first looked up itself (the listing does not read its
    /// folder; [`Sweep::live_batch`]).
    async fn unlisted_live_before(
        &mut self,
        end: &str,
        scope: &IncrementalScope,
        inventory: &dyn ObjectInventory,
        aliases: &mut Aliases<'_>,
        stats: &mut PlanStats,
    ) -> Result<(), GcError> {
        while self.live_next.as_deref().is_some_and(|l| l < end) {
            let looked = self.live_batch(Some(end), |_| scope.check_links, inventory, aliases).await?;
            stats.live_keys_looked_up += looked as u64;
        }
        Ok(())
    }

    /// Takes the next [`LIVE_LOOKUP_BATCH`] live keys off the merge (those before `end`, when
    /// given), looks up for symbolic links those under `objects/` that `look` selects
    /// ([`ObjectInventory::links_among`]), meets every link found, then checks each key of the
    /// batch against every link met: a key before a link that goes through it meets it on its
    /// own path too. Returns how many keys were looked up.
    async fn live_batch(
        &mut self,
        end: Option<&str>,
        look: impl Fn(&str) -> bool,
        inventory: &dyn ObjectInventory,
        aliases: &mut Aliases<'_>,
    ) -> Result<usize, GcError> {
        let mut batch = Vec::new();
        while batch.len() < LIVE_LOOKUP_BATCH && self.live_next.as_deref().is_some_and(|l| end.is_none_or(|e| l < e)) {
            batch.extend(self.live_next.take());
            self.live_next = self.live.next_key()?;
        }
        let looked: Vec<String> = batch.iter().filter(|l| l.starts_with(OBJECTS_PREFIX) && look(l)).cloned().collect();
        let count = looked.len();
        if !looked.is_empty() {
            for link in inventory.links_among(looked).await? {
                aliases.link(link);
            }
        }
        for live in batch {
            aliases.check(Some(&live));
        }
        Ok(count)
    }
}

/// What reading a lineage's released keys came to.
enum Released {
    /// Read; problems of the lineage met while reading it again (a plan with any is
    /// incomplete).
    Read(Vec<PlanProblem>),
    /// The keys it released cannot be read: why (the plan falls back to a full one).
    Unreadable(String),
}

/// A lineage whose keys released since the state are read ([`push_released`]).
struct Lineage<'a> {
    location: &'a lake_engine::TableLocation,
    uris: &'a lake_engine::UriRange,
    /// The oldest version the state retained (`None`: a lineage new since the state).
    since: Option<u64>,
    /// Its latest version now.
    latest: u64,
    /// Where its replay starts now (a reference checkpoint moves it on).
    replay_base: Option<u64>,
}

/// Pushes to `runs` every key under `objects/` sorting before `listed_after` that the lineage
/// may have released since the state: the identities the journal entries of its versions after
/// `since` remove (after its first entry for a lineage new since the state). A key the state saw
/// referenced by a retained version (at or after `since`) and referenced by no version now
/// stopped being referenced at some version after `since`, whose entry removes it, unless that
/// entry is a snapshot (which lists the whole set). Cost: the entries since the state, whatever
/// a cleanup did (the journal outlives its versions). An entry in that range that is a snapshot:
/// when the replay still starts at or before `since` (no cleanup moved it past), every key a
/// version from `since` on references is pushed instead (the journal replayed again with them
/// as roots); otherwise the keys cannot be read and the plan falls back to a full one. Every key
/// pushed is still checked as a full plan checks it (those still live are dropped by the
/// sweep's merge before anything is looked up).
async fn push_released(
    engine: &dyn Engine,
    at: &Lineage<'_>,
    listed_after: &str,
    runs: &mut SortedRuns,
) -> Result<Released, GcError> {
    let name = &at.location.name;
    let mut failed: Option<GcError> = None;
    let removals = {
        let mut visit = |identity: lake_common::ObjectIdentity| {
            if identity.uri.starts_with(OBJECTS_PREFIX) && identity.uri.as_str() < listed_after {
                if let Err(e) = runs.push(identity.uri) {
                    failed = Some(e);
                    return Err(lake_engine::EngineError::InvalidInput(
                        "the plan's released keys could not be held".into(),
                    ));
                }
            }
            Ok(())
        };
        engine.references_removed_between(at.location, at.since, at.latest, at.uris, &mut visit).await
    };
    if let Some(e) = failed {
        return Err(e);
    }
    let removals = match removals {
        Ok(removals) => removals,
        Err(lake_engine::EngineError::Table { .. }) => {
            let vanished = lake_engine::LineageProblem::TableVanished { table: name.clone() };
            return Ok(Released::Read(vec![PlanProblem::from(&vanished)]));
        }
        Err(e) => return Err(e.into()),
    };
    let since_text = |since: Option<u64>| match since {
        Some(since) => format!("after version {since}, the oldest the state retained"),
        None => "since the state (a lineage new since, a branch or a table)".to_string(),
    };
    match removals {
        lake_engine::Removals::Read { snapshots, .. } if snapshots.is_empty() => Ok(Released::Read(Vec::new())),
        lake_engine::Removals::Read { after, snapshots } => {
            // A snapshot entry released what the version before it referenced: read by replaying
            // the journal again, when it starts before every such version.
            let first = snapshots.first().copied().unwrap_or(after);
            match at.replay_base {
                Some(base) if base < first => replay_released(engine, at, after.max(base), first, listed_after, runs).await,
                base => Ok(Released::Unreadable(format!(
                    "lineage `{name}`'s journal entry of version {first} is a snapshot (an overwrite, a restore or a repair writes one): what it released is what version {} referenced, and the journal is replayed from version {} now (a cleanup removed the versions before it: the replay starts at a snapshot or at the reference checkpoint cleanup wrote there), so that cannot be read: the keys its versions {} released cannot be known",
                    first.saturating_sub(1),
                    base.map_or_else(|| "(none)".to_string(), |b| b.to_string()),
                    since_text(at.since)
                ))),
            }
        }
        lake_engine::Removals::Unreadable { version, reason } => Ok(Released::Unreadable(format!(
            "lineage `{name}`'s journal entry of version {version} cannot be read ({reason}): the keys its versions {} released cannot be known",
            since_text(at.since)
        ))),
    }
}

/// Reads `at`'s journal again and pushes to `runs` every key under `objects/` sorting before
/// `listed_after` that some version in `from..=latest` references: with the removals of the
/// delta entries already pushed, a superset of the keys the lineage released since the state
/// when `from` is at or before the version before its first snapshot entry `first_snapshot` since
/// (what a snapshot entry released, the version before it referenced). The replay must start
/// at or before `from`.
async fn replay_released(
    engine: &dyn Engine,
    at: &Lineage<'_>,
    from: u64,
    first_snapshot: u64,
    listed_after: &str,
    runs: &mut SortedRuns,
) -> Result<Released, GcError> {
    let snapshot = match engine.snapshot_in(at.location, at.uris).await {
        Ok(snapshot) => snapshot,
        Err(lake_engine::EngineError::Table { .. }) => {
            let vanished = lake_engine::LineageProblem::TableVanished { table: at.location.name.clone() };
            return Ok(Released::Read(vec![PlanProblem::from(&vanished)]));
        }
        Err(e) => return Err(e.into()),
    };
    let lineage = snapshot.lineage();
    if !lineage.problems.is_empty() {
        return Ok(Released::Read(lineage.problems.iter().map(PlanProblem::from).collect()));
    }
    if lineage.replay_base.is_none_or(|base| base > from) {
        return Ok(Released::Unreadable(format!(
            "lineage `{}`'s journal entry of version {first_snapshot} is a snapshot, and the journal is replayed from version {} now, after version {from} (a cleanup wrote a reference checkpoint while this plan read the journal)",
            at.location.name,
            lineage.replay_base.map_or_else(|| "(none)".to_string(), |b| b.to_string())
        )));
    }
    let roots = lake_engine::RetainedRoots::new((from..=at.latest.min(lineage.latest_version)).collect());
    let lineage_problems =
        |found: Vec<lake_engine::LineageProblem>| Ok(Released::Read(found.iter().map(PlanProblem::from).collect()));
    let mut stream = match snapshot.live(&roots) {
        Ok(stream) => stream,
        Err(lake_engine::EngineError::Lineage { problems, .. }) => return lineage_problems(problems),
        Err(e) => return Err(e.into()),
    };
    loop {
        match stream.next_identity() {
            Ok(Some(identity)) => {
                if identity.uri.starts_with(OBJECTS_PREFIX) && identity.uri.as_str() < listed_after {
                    runs.push(identity.uri)?;
                }
            }
            Ok(None) => return Ok(Released::Read(Vec::new())),
            Err(lake_engine::EngineError::Lineage { problems, .. }) => return lineage_problems(problems),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Plans an entry of [`ObjectInventory::own_garbage`] (a clock probe, or an S3 multipart upload
/// of a managed object) in the range that holds it, when it is one of those kinds, minted and
/// last written before `cutoff`. Nothing can reference such a key (a reference with `#` is
/// refused, and `_lake/` is no managed prefix), so no live set is consulted.
fn own_candidate(
    entry: InventoryEntry,
    ranges: &[KeyRange],
    sweeps: &mut [RangeSweep],
    stats: &mut PlanStats,
    cutoff: DateTime<Utc>,
) -> Result<(), GcError> {
    let kind = garbage_kind(&entry.key);
    let old = minted_at(&entry.key).is_some_and(|m| m < cutoff) && entry.last_modified < cutoff;
    let Some(at) = range_of(ranges, &entry.key) else { return Ok(()) };
    match kind {
        Some(GarbageKind::ClockProbe) if old => stats.clock_probes += 1,
        Some(GarbageKind::StagedUpload) if old => stats.staged_uploads += 1,
        _ => return Ok(()),
    }
    sweeps[at].candidates.push(Candidate {
        key: entry.key.into(),
        size: entry.size,
        last_modified: entry.last_modified.into(),
    })
}

/// The last live key a plan of the ranges ending at `until` reads (inclusive): `until`, or past
/// it every managed key of the folder `objects/<ULID>` that `until` lies in or ends at. A
/// symbolic link met in a range may be such a folder (a shard boundary of
/// [`KeyRange::split_by_time`] is `objects/<ULID>` exactly), and the live keys that go
/// through it sort after it, so they may lie past the range; the range's sweep must still see
/// them to name the problem (`Aliases::check`). A managed key is `objects/<26 chars>/<name>`:
/// the keys of a folder `f` are all below `f` followed by `0` (`/` sorts just before `0`), and
/// a folder below `until`'s own has all its keys below `until`. Reading more live keys than a
/// range holds is always safe (they only keep objects). Test:
/// `shard_ranges_keep_live_keys::attack_link_at_a_shard_boundary`.
fn live_until(until: &str) -> String {
    let folder = OBJECTS_PREFIX.len() + 1 + 26;
    match until.get(..folder) {
        Some(f) if until.starts_with(OBJECTS_PREFIX) && until.as_bytes().get(OBJECTS_PREFIX.len()) == Some(&b'/') => {
            format!("{f}0")
        }
        _ => until.to_string(),
    }
}

/// The index of the range of `ranges` (ascending, contiguous) that holds `key`.
fn range_of(ranges: &[KeyRange], key: &str) -> Option<usize> {
    let at = ranges.partition_point(|r| r.is_past(key));
    ranges.get(at).filter(|r| r.contains(key)).map(|_| at)
}

/// What the sweep found in one range.
struct RangeSweep {
    candidates: CandidateWriter,
    foreign_count: u64,
    foreign: Vec<String>,
}

/// One range's part of a plan.
struct RangeOutcome {
    candidates: CandidateList,
    lineage_complete: bool,
    problems: Vec<PlanProblem>,
    foreign_count: u64,
    foreign: Vec<String>,
}

impl RangeSweep {
    fn new(memory_budget: usize) -> Self {
        Self { candidates: CandidateWriter::new(memory_budget), foreign_count: 0, foreign: Vec::new() }
    }

    fn foreign(&mut self, key: &str, what: &str) {
        self.foreign_count += 1;
        if self.foreign.len() < FOREIGN_LISTED {
            self.foreign.push(format!("{key}: {what}"));
        }
    }

    /// The range's part: with lineage `problems` (shared by every range) or symbolic-link
    /// problems of its own, no candidates.
    fn finish(
        self,
        problems: &[PlanProblem],
        lineage_complete: bool,
        alias_problems: Vec<PlanProblem>,
    ) -> Result<RangeOutcome, GcError> {
        let mut problems = problems.to_vec();
        let (candidates, lineage_complete) = if alias_problems.is_empty() {
            (self.candidates.finish()?, lineage_complete)
        } else {
            // A live reference that may name a listed object through a link: plan nothing.
            problems.extend(alias_problems);
            problems.sort();
            (CandidateWriter::new(0).finish()?, false)
        };
        Ok(RangeOutcome {
            candidates,
            lineage_complete,
            problems,
            foreign_count: self.foreign_count,
            foreign: self.foreign,
        })
    }
}

/// Symbolic links met by the sweep (each in the range that holds its key), and live references
/// that may go through one.
struct Aliases<'r> {
    ranges: &'r [KeyRange],
    /// Symbolic links met so far, with the index of their range (a live key below one may name
    /// a listed object).
    links: std::collections::BTreeMap<String, usize>,
    /// Per range, the live references found going through one of its links.
    problems: Vec<Vec<PlanProblem>>,
}

impl<'r> Aliases<'r> {
    fn new(ranges: &'r [KeyRange]) -> Self {
        Self { ranges, links: Default::default(), problems: vec![Vec::new(); ranges.len()] }
    }

    /// Records the symbolic link `key`, when it lies in a range.
    fn link(&mut self, key: String) {
        if let Some(at) = range_of(self.ranges, &key) {
            self.links.insert(key, at);
        }
    }

    /// True when a link was met.
    fn any(&self) -> bool {
        !self.links.is_empty()
    }

    /// Names a problem when the live key `live`, which no listed object matched, goes through
    /// a symbolic link met before it: one for each range holding such a link (its first).
    fn check(&mut self, live: Option<&str>) {
        let Some(live) = live else { return };
        if self.links.is_empty() {
            return;
        }
        let prefixes = live.match_indices('/').map(|(i, _)| &live[..i]).chain([live]);
        let mut named: Vec<usize> = Vec::new();
        for prefix in prefixes {
            let Some(&at) = self.links.get(prefix) else { continue };
            if named.contains(&at) {
                continue;
            }
            named.push(at);
            self.problems[at].push(PlanProblem::new(PlanProblem::LINKED_REFERENCE, format!(
                "live reference `{live}` goes through the symbolic link `{prefix}`: GC cannot tell which object it names; replace the link by the object, or write the reference as the object's own key"
            )));
        }
    }

    /// Per range, its problems.
    fn finish(self) -> Vec<Vec<PlanProblem>> {
        self.problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_is_an_eighth_of_the_budget_within_bounds() {
        assert_eq!(prefetch_pages(0, 1000), MIN_PREFETCH_PAGES);
        assert_eq!(prefetch_pages(8 * 10 * 1000 * 128, 1000), 10);
        assert_eq!(prefetch_pages(128 << 20, 1000), MAX_PREFETCH_PAGES);
        assert_eq!(prefetch_pages(usize::MAX, 0), MAX_PREFETCH_PAGES);
    }
}
