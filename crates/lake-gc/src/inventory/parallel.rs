//! [`ParallelInventory`]: one listing of the managed prefix made of several listings of key
//! ranges in flight at once, yielded in key order: the same entries, in the same pages, as the
//! inventory it wraps.
//!
//! # Ranges
//!
//! Managed keys sort by mint time (`objects/<ULID>/<name>`), so ranges of time are ranges of keys
//! ([`crate::key_range`]). A listing from `after`:
//! 1. lists its first page with the wrapped inventory (the probe). A listing that fits in it is
//!    that page alone, exactly as the wrapped inventory lists it; while its pages have no key in
//!    a ULID folder ([`key_time`]: keys sorting before the ULIDs), the wrapped listing goes on.
//! 2. splits the time from the first key in a ULID folder of that page to the host's now into
//!    `streams x` [`RANGES_PER_STREAM`] ranges ([`KeyRange::split_by_time`]), keeping the part of
//!    each after the page's last key. The first range continues the probe's own listing; keys
//!    minted after now, and unmanaged keys sorting after the ULIDs, fall in the last range.
//! 3. lists each range with the wrapped inventory from its `after` key
//!    ([`ObjectInventory::list_from`]), stopping at the first key past its `until`
//!    ([`KeyRange::is_past`]), at most `streams` ranges listing at once.
//! 4. splits a range whose first page shows it is big: from the time its first page covered,
//!    it estimates the range's density (entries per millisecond), and from it the width of time
//!    holding [`ParallelInventory::buffered_pages`]` / 2` pages. When the rest is wider than one
//!    and a half such pieces, the range stops one piece after its first page and its rest
//!    becomes a new range right after it, listed in pieces of that width (each piece splits
//!    itself again when its own first page is denser; a piece that listed less than half a
//!    page widens the pieces after it). Objects unevenly spread in time thus still make ranges
//!    of about the same number of pages: every stream stays busy and no range outgrows its
//!    buffer. Each piece costs one request more than its pages (its last page also lists keys
//!    of the next ranges, which are dropped).
//! 5. skips ranges known to be empty: the last page of a range also lists keys of the next ones
//!    (dropped), and the first of them shows that no key lies between the range's end and it, so
//!    the ranges not started yet that end before it are never listed, and the pieces after it
//!    are measured from its time.
//!
//! # Order and memory
//!
//! Pages are yielded range by range, in key order, and repacked into pages of exactly
//! `page_size` entries (the last page of the listing excepted), each page's `next` set only when
//! more entries follow: the pages of the wrapped inventory's own listing. Every entry is checked
//! to sort after the one before; a listing whose ranges overlapped would fail rather than repeat
//! a key.
//!
//! Each range in flight buffers at most `buffered_pages` pages (a bounded channel: a range whose
//! buffer is full waits until the listing reaches it). A range starts only while fewer than
//! `streams` ranges are listing and the pages buffered, plus `buffered_pages` for each listing
//! range and for the new one (what they may still buffer), stay within
//! `2 x streams x buffered_pages`; the range to yield next starts whatever the limits (every
//! other one may be waiting on its full buffer). With the page each listing holds while it waits
//! and the pages being repacked, a listing holds at most
//! `(2 x streams + 1) x (buffered_pages + 1) + 2` pages: with 8 streams, 8 buffered pages and 1000 keys a page, 155,000 entries, about 19 MiB at
//! about 128 bytes an entry ([`buffered_pages`] derives it from a memory budget). A slow range
//! therefore never makes later ranges fill memory; it slows them down.
//!
//! # Errors and symbolic links
//!
//! An error of any range ends the listing with that error when the listing reaches that range
//! (after the pages before it), as the wrapped inventory's own listing would: never a partial
//! listing treated as complete. The symbolic links a range's pages report (`links`, local
//! roots) are passed on with the page that yields the first entries read with them, or an
//! earlier one, each link once.
//!
//! # Where it helps
//!
//! On S3, where each page is one ListObjectsV2 request whose time is mostly the round trip,
//! `streams` requests in flight list up to `streams` times as fast, as long as the server keeps
//! up (`lake-bench`'s `parallel_listing_speedup`, and what limits it on LocalStack, in README).
//! A timing study with an in-memory inventory whose pages took 20 ms each (not kept: no timed
//! tests) listed 200 pages of 1000 keys with 8 streams 6.5 times as fast as with one when keys
//! were minted at a steady rate (about 10% more requests), and 4.5 to 5 times as fast when half
//! of them were minted in 1% of the time (50 to 60% more requests: pieces sized in the dense
//! part are small in the sparse one); 1, 2 or 4 ranges per stream made no difference beyond the
//! study's noise. On a local root it does not help, and
//! [`crate::collector::GarbageCollector`] lists a local root with one walk whatever the number
//! of streams: each range starts a new folder walk, whose first read of `objects/` is one pass
//! over all of its sub-folders (past the walk's window, sorted through run files), and the walk
//! is already bound by kernel time in the folders of one object each, on the cores the streams
//! would share. Measured on 200,000 objects (one folder each) on 2 shared cores, release build,
//! pages of 1000, three runs each: one walk 1.75 to 2.54 s; 2 streams 2.73 to 3.20 s, whether
//! with 1 or 4 ranges per stream.
//!
//! Size: about 970 lines: 80 of documentation (the algorithm and its measurements), the scheduler
//! of ranges in flight (`Scheduler`, `Task`), and 240 lines of tests, one a property test against
//! the plain listing. One file: its order and memory bounds span all of these parts.

use super::{InventoryEntry, InventoryPage, ObjectInventory};
use crate::error::GcError;
use crate::key_range::{key_time, KeyRange};
use chrono::{DateTime, Utc};
use futures::channel::mpsc;
use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesUnordered, StreamExt};
use futures::SinkExt;
use lake_store::keys::first_key_at;
use lake_store::layout::OBJECTS_PREFIX;
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

/// Ranges of time per stream a listing starts with (before ranges split by density): more
/// ranges than streams, so that streams whose ranges are small move on to the next ones.
pub const RANGES_PER_STREAM: usize = 4;

/// The most pages a range in flight buffers ([`buffered_pages`] at a large budget).
pub const MAX_BUFFERED_PAGES: usize = 16;

/// The fewest pages a range in flight buffers (a range then aims at one page).
pub const MIN_BUFFERED_PAGES: usize = 2;

/// Bytes one listed entry is counted for (its key, size, time and the allocation's overhead).
pub const ENTRY_BYTES: usize = 128;

/// The pages each range in flight may buffer so that a listing of `streams` streams and pages
/// of `page_size` entries holds about an eighth of `memory_budget` bytes (like the planner's
/// prefetch, [`crate::planner::prefetch_pages`]), between [`MIN_BUFFERED_PAGES`] and
/// [`MAX_BUFFERED_PAGES`]. `lake gc`'s default budget (256 MiB, half of it here) with 8 streams
/// and 1000 keys a page gives 8.
pub fn buffered_pages(memory_budget: usize, page_size: usize, streams: usize) -> usize {
    let per_page = page_size.max(1).saturating_mul(ENTRY_BYTES);
    let pages = (memory_budget / 8) / per_page.saturating_mul(2 * streams.max(1)).max(1);
    pages.clamp(MIN_BUFFERED_PAGES, MAX_BUFFERED_PAGES)
}

type Item = Result<InventoryPage, GcError>;
type Pages<'a> = BoxStream<'a, Item>;

/// A listing of `inner`'s keys in ranges listed concurrently (see the module documentation).
/// `inner` must be an inventory of one store (any [`ObjectInventory`]: references and boxes of
/// one are inventories too).
#[derive(Debug, Clone)]
pub struct ParallelInventory<I> {
    inner: I,
    streams: usize,
    ranges_per_stream: usize,
    buffered_pages: usize,
    span_end: Option<DateTime<Utc>>,
}

impl<I: ObjectInventory> ParallelInventory<I> {
    /// Lists `inner` with up to `streams` ranges listing at once (1 or 0: `inner`'s own
    /// listing, unchanged), each buffering up to [`MAX_BUFFERED_PAGES`] pages.
    pub fn new(inner: I, streams: usize) -> Self {
        Self {
            inner,
            streams: streams.max(1),
            ranges_per_stream: RANGES_PER_STREAM,
            buffered_pages: MAX_BUFFERED_PAGES,
            span_end: None,
        }
    }

    /// The same listing buffering up to `pages` pages per range in flight (at least
    /// [`MIN_BUFFERED_PAGES`]); ranges aim at half of it.
    pub fn with_buffered_pages(mut self, pages: usize) -> Self {
        self.buffered_pages = pages.max(MIN_BUFFERED_PAGES);
        self
    }

    /// The same listing starting with `n` (at least 1) ranges of time per stream.
    pub fn with_ranges_per_stream(mut self, n: usize) -> Self {
        self.ranges_per_stream = n.max(1);
        self
    }

    /// The same listing splitting time up to `end` (UTC) rather than the host's now when a
    /// listing starts (keys minted later fall in the last range).
    pub fn with_span_end(mut self, end: DateTime<Utc>) -> Self {
        self.span_end = Some(end);
        self
    }

    /// The ranges listing at once.
    pub fn streams(&self) -> usize {
        self.streams
    }

    /// The pages each range in flight buffers.
    pub fn buffered_pages(&self) -> usize {
        self.buffered_pages
    }

    /// The most entries a listing in pages of `page_size` holds (see "Order and memory");
    /// times [`ENTRY_BYTES`] for bytes.
    pub fn max_buffered_entries(&self, page_size: usize) -> usize {
        ((2 * self.streams + 1) * (self.buffered_pages + 1) + 2).saturating_mul(page_size.max(1))
    }
}

impl<I: ObjectInventory> ObjectInventory for ParallelInventory<I> {
    /// The wrapped inventory's listing from `after`, in the same pages, made of ranges listed
    /// concurrently (see the module documentation).
    fn list_from(&self, after: Option<String>, page_size: usize) -> BoxStream<'_, Item> {
        if self.streams <= 1 {
            return self.inner.list_from(after, page_size);
        }
        let page_size = page_size.max(1);
        let listing = Listing {
            inner: &self.inner,
            config: Config {
                page_size,
                streams: self.streams,
                ranges: self.streams.saturating_mul(self.ranges_per_stream),
                buffered: self.buffered_pages,
                target: (self.buffered_pages / 2).max(1),
                span_end: self.span_end,
            },
            phase: Phase::Probe(after),
            links_seen: BTreeSet::new(),
        };
        futures::stream::unfold(listing, |mut listing| async move {
            let item = listing.next().await?;
            Some((item, listing))
        })
        .fuse()
        .boxed()
    }

    /// The wrapped inventory's own garbage.
    fn own_garbage(&self, cutoff: DateTime<Utc>) -> BoxFuture<'_, Result<Vec<InventoryEntry>, GcError>> {
        self.inner.own_garbage(cutoff)
    }

    /// The wrapped inventory's.
    fn head(&self, key: &str) -> BoxFuture<'_, Result<Option<InventoryEntry>, GcError>> {
        self.inner.head(key)
    }
}

/// How one listing runs.
#[derive(Debug, Clone, Copy)]
struct Config {
    page_size: usize,
    streams: usize,
    /// Ranges of time to start with.
    ranges: usize,
    /// Pages a range in flight buffers.
    buffered: usize,
    /// Pages a range aims at when it splits.
    target: usize,
    /// Where time is split up to (the host's now when `None`).
    span_end: Option<DateTime<Utc>>,
}

/// A listing's state.
enum Phase<'a> {
    /// The first page is still to be listed, after this key.
    Probe(Option<String>),
    /// The wrapped inventory's listing, no key in a ULID folder met yet.
    Probing(Pages<'a>),
    /// Ranges in flight.
    Ranges(Box<Scheduler<'a>>),
    Done,
}

struct Listing<'a> {
    inner: &'a (dyn ObjectInventory + 'a),
    config: Config,
    phase: Phase<'a>,
    /// The links the probing pages reported (each is reported once).
    links_seen: BTreeSet<String>,
}

impl<'a> Listing<'a> {
    async fn next(&mut self) -> Option<Item> {
        match &mut self.phase {
            Phase::Done => None,
            Phase::Ranges(scheduler) => {
                let item = futures::future::poll_fn(|cx| scheduler.poll_page(cx)).await;
                if item.is_none() {
                    self.phase = Phase::Done;
                }
                item
            }
            Phase::Probe(after) => {
                let pages = self.inner.list_from(after.take(), self.config.page_size);
                self.probe(pages).await
            }
            Phase::Probing(pages) => {
                let pages = std::mem::replace(pages, futures::stream::empty().boxed());
                self.probe(pages).await
            }
        }
    }

    /// The next page of `pages`, the wrapped listing: its last page ends the listing, a page with
    /// a key in a ULID folder starts the ranges after it, and a page without one is followed by
    /// the next page of `pages`.
    async fn probe(&mut self, mut pages: Pages<'a>) -> Option<Item> {
        let page = match pages.next().await {
            Some(Ok(page)) => page,
            other => {
                self.phase = Phase::Done;
                return other;
            }
        };
        let from = page.entries.iter().find_map(|e| key_time(&e.key));
        self.links_seen.extend(page.links.iter().cloned());
        self.phase = match (page.next.clone(), from) {
            (None, _) => Phase::Done,
            (Some(last), Some(from)) => {
                let mut scheduler = Scheduler::new(
                    self.inner,
                    self.config,
                    pages,
                    last,
                    from,
                    self.config.span_end.unwrap_or_else(Utc::now),
                );
                scheduler.links_seen = std::mem::take(&mut self.links_seen);
                Phase::Ranges(Box::new(scheduler))
            }
            (Some(_), None) => Phase::Probing(pages),
        };
        Some(Ok(page))
    }
}

/// A range to list, and what is known of its times.
struct Task<'a> {
    range: KeyRange,
    /// The time of `range.after`, milliseconds since the Unix epoch (UTC).
    from_ms: Option<i64>,
    /// The time of `range.until` (of the host's now when it is unbounded).
    to_ms: Option<i64>,
    /// What the pieces of one range learn about the rest of it.
    chain: Arc<Chain>,
    /// A listing already started at `range.after` (the probe's).
    pages: Option<Pages<'a>>,
}

impl<'a> Task<'a> {
    /// A range whose `after` is at `from_ms`; `now_ms` stands for the time of an unbounded
    /// `until` (keys minted later are few).
    fn new(range: KeyRange, from_ms: Option<i64>, now_ms: i64) -> Self {
        let to_ms = match range.until.as_deref() {
            Some(until) => key_time(until).map(|t| t.timestamp_millis()),
            None => Some(now_ms),
        };
        let chain = Arc::new(Chain { width: AtomicI64::new(0), next_ms: AtomicI64::new(i64::MIN) });
        Self { range, from_ms, to_ms, chain, pages: None }
    }

    /// Splits off this range's first piece of the known width (from the first key known to
    /// be in it), when the range is wider than one and a half pieces: the piece, and this task
    /// keeps the rest.
    fn piece(&mut self) -> Option<Task<'a>> {
        let width = self.chain.width.load(Ordering::Relaxed);
        let (from, to) = (self.from_ms?, self.to_ms?);
        let start = from.max(self.chain.next_ms.load(Ordering::Relaxed));
        if self.pages.is_some() || width <= 0 || to.saturating_sub(start) <= width.saturating_add(width / 2) {
            return None;
        }
        let cut_ms = start.saturating_add(width);
        let cut = boundary(cut_ms)?;
        // Ranges stay disjoint and covering whatever the times said.
        if self.range.after.as_deref().is_some_and(|a| cut.as_str() <= a)
            || self.range.until.as_deref().is_some_and(|u| cut.as_str() >= u)
        {
            return None;
        }
        let piece = Task {
            range: KeyRange { after: self.range.after.clone(), until: Some(cut.clone()) },
            from_ms: Some(start),
            to_ms: Some(cut_ms),
            chain: self.chain.clone(),
            pages: None,
        };
        self.range.after = Some(cut);
        self.from_ms = Some(cut_ms);
        Some(piece)
    }

    /// After this range's first page, `page` (full, and not its last), when the rest of the
    /// range is wider than one and a half pieces of `target` pages at the page's density: the
    /// range stops one piece after the page, and its rest is returned.
    fn split_rest(&mut self, page: &InventoryPage, config: &Config) -> Option<Task<'a>> {
        let last = page.entries.last()?;
        let (from, to) = (self.from_ms?, self.to_ms?);
        let last_ms = key_time(&last.key)?.timestamp_millis();
        let spent = i128::from(last_ms.saturating_sub(from).max(1));
        let entries = i128::try_from(page.entries.len()).ok()?.max(1);
        // Milliseconds holding `target` pages at this density.
        let wanted = i128::try_from(config.target.saturating_mul(config.page_size)).ok()?;
        let width = i64::try_from((wanted * spent + entries - 1) / entries).unwrap_or(i64::MAX).max(1);
        self.chain.width.store(width, Ordering::Relaxed);
        if to.saturating_sub(last_ms) <= width.saturating_add(width / 2) {
            return None;
        }
        let cut_ms = last_ms.saturating_add(width);
        let cut = boundary(cut_ms)?;
        if cut.as_str() <= last.key.as_str() || self.range.until.as_deref().is_some_and(|u| cut.as_str() >= u) {
            return None;
        }
        let rest = Task {
            range: KeyRange { after: Some(cut.clone()), until: self.range.until.clone() },
            from_ms: Some(cut_ms),
            to_ms: Some(to),
            chain: self.chain.clone(),
            pages: None,
        };
        self.range.until = Some(cut);
        self.to_ms = Some(cut_ms);
        Some(rest)
    }

    /// After this range listed `listed` entries in all: a range that listed less than half a
    /// page (of `page_size` entries) widens the pieces after it to about a page at its density
    /// (at most fourfold its own width).
    fn widen(&self, listed: usize, page_size: usize) {
        let (Some(from), Some(to)) = (self.from_ms, self.to_ms) else { return };
        let span = to.saturating_sub(from).max(1);
        if listed.saturating_mul(2) >= page_size {
            return;
        }
        let scaled = i128::from(span) * i128::try_from(page_size).unwrap_or(i128::MAX)
            / i128::try_from(listed.max(1)).unwrap_or(1);
        let width = i64::try_from(scaled).unwrap_or(i64::MAX).min(span.saturating_mul(4));
        self.chain.width.fetch_max(width, Ordering::Relaxed);
    }
}

/// What the pieces of one range learn about the rest of it (read and written concurrently: only
/// the size of later pieces depends on it, never which keys they list).
struct Chain {
    /// The width of time of a piece, milliseconds (0: not known yet).
    width: AtomicI64,
    /// The time of the latest key a piece listed past its end: no key lies between that
    /// piece's end and it, so a later piece starting before it measures its width from there.
    next_ms: AtomicI64,
}

/// The first key minted at `ms` (milliseconds since the Unix epoch, UTC).
fn boundary(ms: i64) -> Option<String> {
    DateTime::<Utc>::from_timestamp_millis(ms).map(first_key_at)
}

/// What a range's listing tells the scheduler, besides its pages.
enum Event<'a> {
    /// The range `id` stopped early: `rest` is the rest of it, to list right after it.
    Split { id: u64, rest: Task<'a> },
    /// The range `id`, which ends at `end`, listed `key` past its end (or, `None`, the end of
    /// the listing): no key lies between the two, so the ranges after it that end before `key`
    /// (all of them) are empty.
    Past { id: u64, end: String, key: Option<String> },
}

/// Lists `task`'s range into `pages`: the wrapped listing from the range's `after`, cut at the
/// first key past its `until`. After its first page, a big range sends its rest to `events`
/// (before that page, so the rest is known before the range ends), and the first key past its
/// end too. An error is sent as the range's last item.
async fn list_range<'a>(
    inner: &'a (dyn ObjectInventory + 'a),
    mut task: Task<'a>,
    config: Config,
    mut pages: mpsc::Sender<Item>,
    events: mpsc::UnboundedSender<Event<'a>>,
    id: u64,
    buffered: Arc<AtomicUsize>,
) {
    let mut listing = match task.pages.take() {
        Some(listing) => listing,
        None => inner.list_from(task.range.after.clone(), config.page_size),
    };
    let (mut first, mut listed) = (true, 0usize);
    while let Some(item) = listing.next().await {
        let mut page = match item {
            Ok(page) => page,
            Err(e) => {
                buffered.fetch_add(1, Ordering::Relaxed);
                let _ = pages.send(Err(e)).await;
                return;
            }
        };
        let mut end = page.next.is_none();
        let past = page.entries.iter().position(|e| task.range.is_past(&e.key));
        if let Some(past) = past {
            let key = &page.entries[past].key;
            if let Some(t) = key_time(key) {
                task.chain.next_ms.fetch_max(t.timestamp_millis(), Ordering::Relaxed);
            }
            if let Some(until) = task.range.until.clone() {
                let _ = events.unbounded_send(Event::Past { id, end: until, key: Some(key.clone()) });
            }
            page.entries.truncate(past);
            end = true;
        } else if let (true, Some(until)) = (end, task.range.until.clone()) {
            let _ = events.unbounded_send(Event::Past { id, end: until, key: None });
        }
        if std::mem::take(&mut first) && !end {
            if let Some(rest) = task.split_rest(&page, &config) {
                if events.unbounded_send(Event::Split { id, rest }).is_err() {
                    return; // the listing was dropped
                }
            }
        }
        listed += page.entries.len();
        page.next = None;
        buffered.fetch_add(1, Ordering::Relaxed);
        if pages.send(Ok(page)).await.is_err() || end {
            break;
        }
    }
    task.widen(listed, config.page_size);
}

/// A range of the listing, in key order.
enum Slot<'a> {
    /// Not started.
    Pending(Task<'a>),
    /// Listing (or listed), its pages buffered in `pages`.
    Started { id: u64, pages: mpsc::Receiver<Item> },
}

/// The ranges of one listing, their listings, and the pages being repacked.
struct Scheduler<'a> {
    inner: &'a (dyn ObjectInventory + 'a),
    config: Config,
    /// Every range not yet yielded, in key order: started ones and pending ones.
    order: VecDeque<Slot<'a>>,
    /// Pages the ranges listed and the listing has not taken yet.
    buffered: Arc<AtomicUsize>,
    next_id: u64,
    producers: FuturesUnordered<BoxFuture<'a, ()>>,
    event_sender: mpsc::UnboundedSender<Event<'a>>,
    events: mpsc::UnboundedReceiver<Event<'a>>,
    /// Entries received and not yet yielded (at most two pages).
    entries: VecDeque<InventoryEntry>,
    links: Vec<String>,
    links_seen: BTreeSet<String>,
    /// The last key received: every entry must sort after it.
    last_key: String,
    done: bool,
}

impl<'a> Scheduler<'a> {
    /// The ranges after the probe's page, whose last key is `last`, from the time `from` of its
    /// first key in a ULID folder to `now`; the first continues `probe`.
    fn new(
        inner: &'a (dyn ObjectInventory + 'a),
        config: Config,
        probe: Pages<'a>,
        last: String,
        from: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Self {
        let to = now.max(from + chrono::Duration::milliseconds(1));
        let mut order: VecDeque<Slot<'a>> = KeyRange::split_by_time(from, to, config.ranges)
            .into_iter()
            .filter_map(|r| r.after_key(&last))
            .map(|r| {
                let from_ms = r.after.as_deref().and_then(key_time).map(|t| t.timestamp_millis());
                Slot::Pending(Task::new(r, from_ms, to.timestamp_millis()))
            })
            .collect();
        if let Some(Slot::Pending(first)) = order.front_mut() {
            first.pages = Some(probe);
        }
        let (event_sender, events) = mpsc::unbounded();
        Self {
            inner,
            config,
            order,
            buffered: Arc::new(AtomicUsize::new(0)),
            next_id: 0,
            producers: FuturesUnordered::new(),
            event_sender,
            events,
            entries: VecDeque::new(),
            links: Vec::new(),
            links_seen: BTreeSet::new(),
            last_key: last,
            done: false,
        }
    }

    /// The next page of the listing; `None` once it has ended (after its last page or error).
    fn poll_page(&mut self, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            if self.entries.len() > self.config.page_size {
                return Poll::Ready(Some(Ok(self.page(true))));
            }
            while let Poll::Ready(Some(())) = self.producers.poll_next_unpin(cx) {}
            if let Err(e) = self.take_events() {
                return self.fail(e);
            }
            if self.start_ranges() {
                continue; // poll the new listings once before waiting
            }
            let Some(front) = self.order.front_mut() else {
                self.done = true;
                return Poll::Ready(Some(Ok(self.page(false))));
            };
            let Slot::Started { pages, .. } = front else {
                return self.fail(lost("the range to yield was never started"));
            };
            match pages.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(page))) => {
                    self.buffered.fetch_sub(1, Ordering::Relaxed);
                    if let Err(e) = self.receive(page) {
                        return self.fail(e);
                    }
                }
                Poll::Ready(Some(Err(e))) => return self.fail(e),
                Poll::Ready(None) => {
                    // Its rest, if it split, was sent before its first page and is in `order`.
                    self.order.pop_front();
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn fail(&mut self, e: GcError) -> Poll<Option<Item>> {
        self.done = true;
        self.order.clear();
        self.producers = FuturesUnordered::new();
        Poll::Ready(Some(Err(e)))
    }

    /// Places the rests of ranges that split right after their range, and drops the pending
    /// ranges right after a range that are known to be empty.
    fn take_events(&mut self) -> Result<(), GcError> {
        while let Ok(event) = self.events.try_recv() {
            let id = match &event {
                Event::Split { id, .. } | Event::Past { id, .. } => *id,
            };
            let at = self.order.iter().position(|s| matches!(s, Slot::Started { id: i, .. } if *i == id));
            match (event, at) {
                (Event::Split { rest, .. }, Some(at)) => self.order.insert(at + 1, Slot::Pending(rest)),
                (Event::Split { .. }, None) => return Err(lost("a range's rest arrived after the range")),
                (Event::Past { end, key, .. }, Some(at)) => {
                    // Pending ranges inside (end, key), or after `end` when nothing follows it:
                    // nothing to list there.
                    while let Some(Slot::Pending(task)) = self.order.get(at + 1) {
                        let inside = task.range.after.as_deref().is_some_and(|a| a >= end.as_str())
                            && match (task.range.until.as_deref(), key.as_deref()) {
                                (_, None) => true,
                                (Some(u), Some(k)) => u < k,
                                (None, Some(_)) => false,
                            };
                        if !inside {
                            break;
                        }
                        self.order.remove(at + 1);
                    }
                }
                (Event::Past { .. }, None) => {}
            }
        }
        Ok(())
    }

    /// Starts the first pending ranges while fewer than `streams` list and the pages buffered,
    /// plus `buffered` pages for each range listing (what it may still buffer), stay within
    /// `2 x streams x buffered` pages; and the range to yield next whatever the limits (every
    /// other range may be waiting on its full buffer). True when it started any.
    fn start_ranges(&mut self) -> bool {
        let mut any = false;
        let (streams, buffer) = (self.config.streams, self.config.buffered);
        loop {
            let running = self.producers.len();
            let held = self.buffered.load(Ordering::Relaxed) + (running + 1) * buffer;
            let room = running < streams && held <= 2 * streams * buffer;
            if !room && !matches!(self.order.front(), Some(Slot::Pending(_))) {
                return any;
            }
            let Some(at) = self.order.iter().position(|s| matches!(s, Slot::Pending(_))) else { return any };
            self.start(at);
            any = true;
        }
    }

    /// Starts the pending range at `at` (or its first piece, the rest staying pending after it).
    fn start(&mut self, at: usize) {
        let piece = match self.order.get_mut(at) {
            Some(Slot::Pending(task)) => task.piece(),
            _ => return,
        };
        let task = match piece {
            Some(piece) => piece,
            None => match self.order.remove(at) {
                Some(Slot::Pending(task)) => task,
                _ => return,
            },
        };
        let id = self.next_id;
        self.next_id += 1;
        // Capacity: the buffer plus one slot per sender.
        let (sender, receiver) = mpsc::channel(self.config.buffered.saturating_sub(1));
        self.order.insert(at, Slot::Started { id, pages: receiver });
        let (events, buffered) = (self.event_sender.clone(), self.buffered.clone());
        self.producers.push(Box::pin(list_range(self.inner, task, self.config, sender, events, id, buffered)));
    }

    /// Takes a range's page: its links (each once) and its entries, checked to ascend.
    fn receive(&mut self, page: InventoryPage) -> Result<(), GcError> {
        for link in page.links {
            if self.links_seen.insert(link.clone()) {
                self.links.push(link);
            }
        }
        for entry in page.entries {
            if entry.key <= self.last_key {
                return Err(GcError::storage(
                    entry.key,
                    format!(
                        "the parallel listing met this key after `{}`; refusing to plan from a listing out of order",
                        self.last_key
                    ),
                ));
            }
            self.last_key.clone_from(&entry.key);
            self.entries.push_back(entry);
        }
        Ok(())
    }

    /// The next page of `page_size` entries (fewer at the end); `next` is its last key when
    /// `more` entries follow.
    fn page(&mut self, more: bool) -> InventoryPage {
        let n = self.entries.len().min(self.config.page_size);
        let entries: Vec<InventoryEntry> = self.entries.drain(..n).collect();
        let next = if more { entries.last().map(|e| e.key.clone()) } else { None };
        InventoryPage { entries, next, links: std::mem::take(&mut self.links) }
    }
}

/// An internal error of the scheduling of ranges: the listing fails rather than miss a range.
fn lost(what: &str) -> GcError {
    GcError::storage(
        OBJECTS_PREFIX,
        format!("internal error of the parallel listing: {what}; refusing a listing that may be incomplete (list with one stream)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::EntryKind;
    use proptest::prelude::*;

    /// An inventory of keys in memory: pages of keys after `after`; links are the keys starting
    /// with `objects/link`, reported with the page that lists them; a page that would list
    /// `fail` fails instead.
    struct Keys {
        keys: Vec<String>,
        fail: Option<String>,
        /// Listings started, and pages listed.
        calls: std::sync::atomic::AtomicUsize,
        pages: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Keys {
        fn new(keys: Vec<String>, fail: Option<String>) -> Self {
            Self { keys, fail, calls: Default::default(), pages: Default::default() }
        }
    }

    impl ObjectInventory for Keys {
        fn list_from(&self, after: Option<String>, page_size: usize) -> BoxStream<'_, Item> {
            let limit = page_size.max(1);
            self.calls.fetch_add(1, Ordering::Relaxed);
            let pages = self.pages.clone();
            futures::stream::unfold(Some(after), move |after| {
                let pages = pages.clone();
                async move {
                    let after = after?;
                    pages.fetch_add(1, Ordering::Relaxed);
                    let start = self.keys.partition_point(|k| after.as_deref().is_some_and(|a| k.as_str() <= a));
                    let keys = &self.keys[start..(start + limit).min(self.keys.len())];
                    if self.fail.as_ref().is_some_and(|f| keys.contains(f)) {
                        return Some((Err(GcError::storage("objects", "injected")), None));
                    }
                    let entries: Vec<InventoryEntry> = keys
                        .iter()
                        .map(|k| InventoryEntry {
                            key: k.clone(),
                            size: 1,
                            last_modified: Utc::now(),
                            kind: EntryKind::Object,
                        })
                        .collect();
                    let more = start + limit < self.keys.len();
                    let next = more.then(|| keys.last().cloned()).flatten();
                    let links = keys.iter().filter(|k| k.starts_with("objects/link")).cloned().collect();
                    Some((Ok(InventoryPage { entries, next: next.clone(), links }), next.map(Some)))
                }
            })
            .fuse()
            .boxed()
        }
    }

    /// Every item of a listing, and whether it ended with an error.
    fn drain(inventory: &dyn ObjectInventory, after: Option<String>, page_size: usize) -> (Vec<InventoryPage>, bool) {
        futures::executor::block_on(async {
            let mut pages = inventory.list_from(after, page_size);
            let mut got = Vec::new();
            while let Some(item) = pages.next().await {
                match item {
                    Ok(page) => got.push(page),
                    Err(_) => {
                        assert!(pages.next().await.is_none(), "the listing ends after its error");
                        return (got, true);
                    }
                }
            }
            (got, false)
        })
    }

    fn keys_of(pages: &[InventoryPage]) -> Vec<(Vec<String>, Option<String>)> {
        pages.iter().map(|p| (p.entries.iter().map(|e| e.key.clone()).collect(), p.next.clone())).collect()
    }

    /// Keys of a lake whose objects were minted at `times` (milliseconds before now; negative:
    /// after now), each also with a key exactly at its millisecond's boundary and a nested key,
    /// plus keys around the ULIDs and links.
    fn lake(times: &[i64]) -> Vec<String> {
        let now = Utc::now().timestamp_millis();
        let mut keys = vec!["objects/-first".to_string(), "objects/link-a".into(), "objects/zz".into()];
        for (i, t) in times.iter().enumerate() {
            let boundary = boundary(now - t).unwrap();
            keys.push(format!("{boundary}/exactly-after"));
            keys.push(boundary.clone());
            keys.push(format!("objects/{}/o{i}", ulid::Ulid::from_parts((now - t) as u64, i as u128 + 1)));
            if i % 5 == 0 {
                keys.push(format!("objects/{}/d/", ulid::Ulid::from_parts((now - t) as u64, 7)));
            }
        }
        keys.sort();
        keys.dedup();
        keys
    }

    fn check(keys: Vec<String>, streams: usize, buffered: usize, page_size: usize, after: Option<String>) {
        let plain = Keys::new(keys, None);
        let (want, failed) = drain(&plain, after.clone(), page_size);
        assert!(!failed);
        let parallel = ParallelInventory::new(&plain, streams).with_buffered_pages(buffered);
        let (got, failed) = drain(&parallel, after.clone(), page_size);
        assert!(!failed);
        assert_eq!(
            keys_of(&got),
            keys_of(&want),
            "streams {streams}, buffered {buffered}, page {page_size}, after {after:?}"
        );
        // Each link once, no later than the page listing it.
        let reported: Vec<&String> = got.iter().flat_map(|p| &p.links).collect();
        assert_eq!(reported.len(), reported.iter().collect::<BTreeSet<_>>().len());
        for (i, page) in got.iter().enumerate() {
            for e in page.entries.iter().filter(|e| e.key.starts_with("objects/link")) {
                assert!(got[..=i].iter().any(|p| p.links.contains(&e.key)), "{}", e.key);
            }
        }
    }

    #[test]
    fn ranges_concatenate_to_the_plain_listing() {
        // Objects spread over an hour, dense in places, some minted after now.
        let mut times: Vec<i64> = (0..60).map(|i| i * 60_000).collect();
        times.extend(1_000..1_200);
        times.extend([-5_000, -86_400_000]);
        let keys = lake(&times);
        for page_size in [1, 2, 7, 1000] {
            for streams in [2, 3, 8] {
                for buffered in [2, 3, 16] {
                    check(keys.clone(), streams, buffered, page_size, None);
                }
            }
        }
        for after in [&keys[0], &keys[1], &keys[keys.len() / 2], &keys[keys.len() - 1], &"objects/zzz".to_string()] {
            check(keys.clone(), 4, 2, 3, Some(after.clone()));
        }
        check(keys.clone(), 4, 2, 3, Some("a".into()));
        check(Vec::new(), 4, 2, 3, None);
    }

    #[test]
    fn an_error_in_any_range_ends_the_listing_with_it() {
        let times: Vec<i64> = (0..300).map(|i| i * 1_000).collect();
        let keys = lake(&times);
        for at in [1, keys.len() / 3, keys.len() / 2, keys.len() - 2] {
            for page_size in [1, 4] {
                let failing = Keys::new(keys.clone(), Some(keys[at].clone()));
                let parallel = ParallelInventory::new(&failing, 4).with_buffered_pages(2);
                let (got, failed) = drain(&parallel, None, page_size);
                assert!(failed, "failing at {at}, pages of {page_size}");
                assert!(got.iter().all(|p| p.next.is_some()), "no page says the listing is complete");
                let listed: Vec<String> = got.iter().flat_map(|p| p.entries.iter().map(|e| e.key.clone())).collect();
                assert_eq!(listed[..], keys[..listed.len()], "a prefix of the listing");
                assert!(listed.len() <= at);
            }
        }
    }

    #[test]
    fn big_ranges_split_into_pieces_of_about_half_the_buffer() {
        // One object every millisecond for 20 s: the first ranges are far bigger than a buffer.
        let times: Vec<i64> = (0..20_000).collect();
        let keys = lake(&times);
        let plain = Keys::new(keys.clone(), None);
        let parallel = ParallelInventory::new(&plain, 4).with_buffered_pages(4);
        let (got, failed) = drain(&parallel, None, 100);
        let (calls, pages) = (plain.calls.load(Ordering::Relaxed), plain.pages.load(Ordering::Relaxed));
        let (want, _) = drain(&plain, None, 100);
        assert!(!failed);
        assert_eq!(keys_of(&got), keys_of(&want));
        // 40,000 keys and more in pages of 100: ranges of about 2 pages (16 to start with), each
        // costing one more request than its pages.
        eprintln!("{calls} listings, {pages} pages for {} pages", want.len());
        assert!(calls > 16 * 4 && calls < want.len(), "{calls} listings");
        assert!(pages < want.len() * 2, "{pages} pages for {}", want.len());
        assert_eq!(parallel.max_buffered_entries(100), (9 * 5 + 2) * 100);
    }

    #[test]
    fn ranges_known_to_be_empty_are_skipped_but_not_the_range_ending_at_the_next_key() {
        // Two streams, eight ranges of one second: keys in the first second, then exactly at the
        // end of the fourth range (its last key), then in the last second.
        let t0 = Utc::now() - chrono::Duration::hours(1);
        let at = |ms: i64| t0 + chrono::Duration::milliseconds(ms);
        let mut keys = vec![format!("{}/a", folder(at(0))), format!("{}/b", folder(at(500))), first_key_at(at(4_000))];
        keys.extend([format!("{}/c", folder(at(4_000))), format!("{}/d", folder(at(7_500)))]);
        keys.sort();
        let plain = Keys::new(keys.clone(), None);
        let parallel = ParallelInventory::new(&plain, 2).with_buffered_pages(2).with_span_end(at(8_000));
        let (got, failed) = drain(&parallel, None, 1);
        assert!(!failed);
        assert_eq!(keys_of(&got), keys_of(&drain(&plain, None, 1).0));
        // The probe and 8 ranges (some split), less the empty ranges skipped.
        let calls = plain.calls.load(Ordering::Relaxed);
        assert!(calls < 9, "{calls} listings");
    }

    /// `objects/<ULID>` of time `t`, random part 1.
    fn folder(t: DateTime<Utc>) -> String {
        format!("objects/{}", ulid::Ulid::from_parts(t.timestamp_millis() as u64, 1))
    }

    #[test]
    fn sparse_keys_cost_few_listings() {
        // 200 objects a few seconds apart over ten minutes, in pages of 1 (ranges of 1 page):
        // pieces start from the next key a listing saw, not from empty time.
        let times: Vec<i64> = (0..200).map(|i| i * 3_001).collect();
        let keys = lake(&times);
        let plain = Keys::new(keys.clone(), None);
        let parallel = ParallelInventory::new(&plain, 8).with_buffered_pages(2);
        let (got, failed) = drain(&parallel, None, 1);
        assert!(!failed && got.len() == keys.len());
        let (calls, pages) = (plain.calls.load(Ordering::Relaxed), plain.pages.load(Ordering::Relaxed));
        eprintln!("{calls} listings, {pages} pages for {} keys", keys.len());
        assert!(pages < 3 * keys.len(), "{calls} listings, {pages} pages for {} keys", keys.len());
    }

    #[test]
    fn buffers_follow_the_memory_budget() {
        assert_eq!(buffered_pages(0, 1000, 8), MIN_BUFFERED_PAGES);
        assert_eq!(buffered_pages(128 << 20, 1000, 8), 8);
        assert_eq!(buffered_pages(usize::MAX, 1000, 8), MAX_BUFFERED_PAGES);
        assert_eq!(buffered_pages(usize::MAX, 0, 0), MAX_BUFFERED_PAGES);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_keys_any_streams(
            times in proptest::collection::vec(-2_000i64..4_000_000, 0..120),
            streams in 2usize..9,
            buffered in 2usize..6,
            page_size in prop_oneof![1usize..6, Just(1000)],
            after_at in proptest::option::of(0usize..400),
        ) {
            let keys = lake(&times);
            let after = after_at.and_then(|i| keys.get(i).cloned());
            check(keys, streams, buffered, page_size, after);
        }
    }
}
