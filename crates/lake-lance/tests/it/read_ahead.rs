//! Deletes and updates journal the removed rows' references from a read-ahead of the rows their
//! predicate matched (read beside Lance's own change) when it holds them, and fall back to
//! reading them by row address when it does not (a predicate that does not evaluate the same way
//! twice). Either way the entry is the difference of full scans of the two versions, which is
//! what the entry computed without a read-ahead is (`version_diff`'s unit tests compare the two
//! directly), and the journal verifies against the scans. Which path ran is read from the
//! engine's `version journal entry computed` debug event.

use crate::support::{batch, new_lake, reader, TestLake};
use lake_common::ObjectReferenceDelta;
use lake_lance::update::Assignment;
use std::sync::{Arc, Mutex};

const ROWS: usize = 4_000;

/// A table `t` of `ROWS` rows, `a0`..`a1999` then `b2000`..`b3999`, in two appends (two
/// fragments): row `i` references object `i % 40` (counts above 1).
async fn table() -> TestLake {
    let lake = new_lake().await;
    let mut objects = Vec::new();
    for i in 0..40 {
        objects.push(lake.upload(&format!("o{i}.bin"), format!("object {i}").as_bytes()).await);
    }
    let names: Vec<String> = (0..ROWS).map(|i| format!("{}{i}", if i < ROWS / 2 { 'a' } else { 'b' })).collect();
    for half in names.chunks(ROWS / 2).map(|c| c.to_vec()).collect::<Vec<_>>() {
        let rows: Vec<(&str, Option<&lake_store::writer::ManagedObject>)> = half
            .iter()
            .map(|n| {
                let i: usize = n[1..].parse().unwrap();
                (n.as_str(), Some(&objects[i % 40]))
            })
            .collect();
        lake.engine.append("t", reader(vec![batch(&rows)])).await.unwrap();
    }
    lake
}

/// The journal entry of version `v` of `t` equals the full scans' difference, and the journal
/// verifies against the scans.
async fn assert_exact(lake: &TestLake, v: u64) {
    let entry = lake_lance::sidecar::read(&lake.store, "t", v).await.unwrap().expect("an entry").unwrap();
    let now = lake.engine.scan_version("t", v).await.unwrap();
    let then = lake.engine.scan_version("t", v - 1).await.unwrap();
    let full = ObjectReferenceDelta::delta("t", v, &now, &then);
    assert_eq!((&entry.added, &entry.removed), (&full.added, &full.removed), "version {v}");
    assert!(!entry.removed.is_empty(), "version {v} removed references");
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(report.mismatch_count == 0 && report.problems.is_empty(), "{report:?}");
}

/// The `(read_ahead_rows, taken_rows)` of each `version journal entry computed` debug event
/// while the returned guard lives (on this thread: the tests run on tokio's current-thread
/// runtime, where the read-ahead's task runs too).
fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let entries = Arc::new(Mutex::new(Vec::new()));
    (entries.clone(), tracing::subscriber::set_default(Entries(entries)))
}

/// `(read_ahead_rows, taken_rows)` of each entry computed, in order.
type Captured = Arc<Mutex<Vec<(u64, u64)>>>;

/// A subscriber keeping the reads of the journal entries computed.
struct Entries(Captured);

#[derive(Default)]
struct Reads {
    message: String,
    read_ahead: u64,
    taken: u64,
}

impl tracing::field::Visit for Reads {
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        match field.name() {
            "read_ahead_rows" => self.read_ahead = value,
            "taken_rows" => self.taken = value,
            _ => {}
        }
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Entries {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target().starts_with("lake_lance")
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut reads = Reads::default();
        event.record(&mut reads);
        if reads.message.contains("version journal entry computed") {
            self.0.lock().unwrap().push((reads.read_ahead, reads.taken));
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// `(read_ahead_rows, taken_rows)` of the last entry computed.
fn entry_reads(entries: &Captured) -> (u64, u64) {
    *entries.lock().unwrap().last().expect("an entry computed")
}

#[tokio::test]
async fn a_delete_takes_the_removed_rows_from_the_read_ahead_and_journals_what_the_scans_show() {
    let lake = table().await;
    let (events, _guard) = capture();
    // 20 rows of each fragment (a hundredth: without the read-ahead, taken by address).
    let outcome = lake.engine.delete("t", "episode LIKE '%17'").await.unwrap().unwrap();
    assert_eq!(outcome.rows, 40);
    assert_eq!(entry_reads(&events), (40, 0), "the read-ahead served every removed row");
    assert_exact(&lake, outcome.version).await;
    // A delete that removes what is left of the first fragment (Lance drops it) and 200 rows
    // of the other.
    let outcome = lake.engine.delete("t", "episode LIKE 'a%' OR episode LIKE 'b%5'").await.unwrap().unwrap();
    assert_eq!(outcome.rows, 1_980 + 200);
    assert_eq!(entry_reads(&events), (outcome.rows, 0), "the read-ahead served the dropped fragment and the rows");
    assert_exact(&lake, outcome.version).await;
}

#[tokio::test]
async fn a_delete_whose_predicate_evaluates_otherwise_twice_reads_the_rows_by_address() {
    let lake = table().await;
    let (events, _guard) = capture();
    // The read-ahead's draw and Lance's are two draws of about 200 of 4,000 rows: the removed
    // rows are never all among the read-ahead's.
    let outcome = lake.engine.delete("t", "random() < 0.05").await.unwrap().unwrap();
    assert!(outcome.rows > 0);
    assert_eq!(entry_reads(&events), (0, outcome.rows), "fell back to the take by address");
    assert_exact(&lake, outcome.version).await;
}

#[tokio::test]
async fn an_update_takes_the_old_rows_from_the_read_ahead_and_falls_back_for_random() {
    let lake = table().await;
    let (events, _guard) = capture();
    let null: Assignment = "file = NULL".parse().unwrap();
    let outcome =
        lake.engine.update("t", std::slice::from_ref(&null), Some("episode LIKE '%3'")).await.unwrap().unwrap();
    assert_eq!(outcome.rows, 400);
    assert_eq!(entry_reads(&events), (400, 0), "the read-ahead served every rewritten row");
    assert_exact(&lake, outcome.version).await;
    // Another column updated: the rows are rewritten with the same references (removed and
    // added, netted to nothing); the read-ahead served them all the same.
    let rename: Assignment = "episode = concat(episode, 'x')".parse().unwrap();
    let outcome = lake.engine.update("t", &[rename], Some("episode LIKE '%1'")).await.unwrap().unwrap();
    assert_eq!(entry_reads(&events), (outcome.rows, 0));
    // A predicate drawn again: the take by address.
    let outcome = lake.engine.update("t", &[null], Some("random() < 0.05")).await.unwrap().unwrap();
    assert_eq!(entry_reads(&events), (0, outcome.rows), "fell back to the take by address");
    assert_exact(&lake, outcome.version).await;
}
