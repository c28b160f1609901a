//! Memory figures of the two commands that once held one entry per file or reference:
//! `ingest_peak_rss_growth_10x` (`lake ingest` of N vs 10N tiny files) and
//! `verify_peak_rss_growth_10x` (`lake refs verify` of a lake of R vs 10R references, same memory
//! budget). Each measurement is a child process running what the command runs, through the
//! same library calls (`lake_lance::ingest`, `LanceEngine::verify_refs`), in-process (`VmHWM`).

use crate::lakes::{new_lake, Rows};
use crate::rss::child_peak;
use crate::{median, Args};
use futures::StreamExt;
use lake_lance::LanceEngine;
use lake_store::descriptor::LakeDescriptor;
use lake_store::keys::mint_key;
use lake_store::LakeStore;
use object_store::{ObjectStoreExt, PutPayload};
use std::path::Path;
use std::time::{Duration, Instant};

/// Files per episode folder of an ingest source.
const FILES_PER_FOLDER: usize = 1000;

/// Rows referencing one object in a verify lake.
const ROWS_PER_OBJECT: usize = 4;

/// Rows per appended version of a verify lake (the journal decodes one version whole, so this
/// stays the same at 1x and 10x).
const ROWS_PER_VERSION: usize = 10_000;

/// Repetitions of each side (peak memory varies little; a 10x side takes up to a minute).
const MAX_REPEAT: usize = 3;

/// Writes `files` tiny files under `dir`, `FILES_PER_FOLDER` per episode folder.
fn write_source(dir: &Path, files: usize) -> Result<(), String> {
    for i in 0..files {
        let folder = dir.join(format!("ep{:05}", i / FILES_PER_FOLDER));
        if i % FILES_PER_FOLDER == 0 {
            std::fs::create_dir_all(&folder).map_err(|e| e.to_string())?;
        }
        std::fs::write(folder.join(format!("f{i:07}.bin")), format!("{i}")).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The existing lake at `root` (its descriptor checked, as `lake` opens a lake) and its engine.
async fn open_lake(root: &str) -> Result<LanceEngine, String> {
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    LakeDescriptor::load(&store).await.map_err(|e| e.to_string())?;
    Ok(LanceEngine::new(store))
}

/// The child side of `ingest`: what `lake ingest ROOT --table files DIR` runs, in this process.
pub(crate) async fn ingest_once(root: &str, dir: &Path) -> Result<(), String> {
    let engine = open_lake(root).await?;
    lake_lance::ingest::ingest_dir(&engine, "files", dir).await.map_err(|e| e.to_string())?;
    Ok(())
}

/// The child side of `verify`: what `lake refs verify ROOT --memory-budget-mib MIB` runs, in
/// this process; fails when the journal does not match the tables.
pub(crate) async fn verify_once(root: &str, budget_mib: usize) -> Result<(), String> {
    let engine = open_lake(root).await?.with_memory_budget(budget_mib.saturating_mul(1024 * 1024));
    let report = engine.verify_refs(&[]).await.map_err(|e| e.to_string())?;
    if !report.is_ok() {
        return Err(format!("the journal of {root} does not match the tables: {report:?}"));
    }
    Ok(())
}

/// The baseline of `ingest`: a plain Lance write (no lake) of `rows` rows of the ingested table's
/// schema, like the rows of [`write_source`]'s files, generated batch by batch as the ingest
/// hands them to its append.
pub(crate) async fn plain_append_once(rows: usize) -> Result<(), String> {
    use lake_lance::ingest::{file_rows_batch, file_table_schema, FileRow, BATCH_ROWS};
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let uri = dir.path().join("plain.lance").display().to_string();
    let now = chrono::Utc::now();
    let batches = (0..rows).step_by(BATCH_ROWS).map(move |first| {
        let batch: Vec<FileRow> = (first..rows.min(first + BATCH_ROWS))
            .map(|i| FileRow {
                episode: format!("ep{:05}", i / FILES_PER_FOLDER),
                path: format!("ep{:05}/f{i:07}.bin", i / FILES_PER_FOLDER),
                object: lake_store::writer::ManagedObject {
                    // A fresh ULID per object, as uploads mint them.
                    key: mint_key(&format!("f{i:07}.bin")).0,
                    sha256: [7; 32],
                    size: format!("{i}").len() as u64,
                    last_modified: now,
                },
            })
            .collect();
        file_rows_batch(&batch)
    });
    let reader = arrow_array::RecordBatchIterator::new(batches, file_table_schema());
    let params = lance::dataset::WriteParams {
        mode: lance::dataset::WriteMode::Create,
        skip_auto_cleanup: true,
        ..Default::default()
    };
    lance::Dataset::write(reader, uri.as_str(), Some(params)).await.map_err(|e| e.to_string())?;
    Ok(())
}

/// Peak RSS (KiB) of one `lake ingest` of `source` into a new lake under `work`, removed after.
async fn ingest_peak(work: &Path, source: &Path) -> Result<u64, String> {
    let root = work.join("ingest-lake");
    let root_s = root.display().to_string();
    new_lake(&root_s).await?;
    let peak = child_peak("ingest", &["--root".into(), root_s, "--dir".into(), source.display().to_string()]);
    std::fs::remove_dir_all(&root).map_err(|e| e.to_string())?;
    peak
}

/// A verify lake at `root`: `references` rows in table `t`, each object referenced by
/// `ROWS_PER_OBJECT` consecutive rows, appended `ROWS_PER_VERSION` rows per version; the
/// middle version is tagged and the others cleaned up, so two versions are retained (scans read
/// about 1.5 x `references`). Returns the number of versions appended.
pub(crate) async fn verify_lake(root: &str, references: usize) -> Result<usize, String> {
    let (store, engine) = new_lake(root).await?;
    let objects = references.div_ceil(ROWS_PER_OBJECT);
    let mut keys = Vec::with_capacity(objects);
    for start in (0..objects).step_by(FILES_PER_FOLDER) {
        let (key, _) = mint_key("o");
        let prefix = key.trim_end_matches("/o").to_string();
        keys.extend((start..objects.min(start + FILES_PER_FOLDER)).map(|i| format!("{prefix}/o{i}")));
    }
    let put = |k: &String| {
        let (s, p) = (store.object_store(), store.path(k));
        async move { s.put(&p, PutPayload::from_static(b"x")).await.map(|_| ()) }
    };
    let mut puts = futures::stream::iter(keys.iter().map(put)).buffer_unordered(64);
    while let Some(r) = puts.next().await {
        r.map_err(|e| e.to_string())?;
    }
    let mut versions = 0;
    for first in (0..references).step_by(ROWS_PER_VERSION) {
        let rows: Vec<String> =
            (first..references.min(first + ROWS_PER_VERSION)).map(|r| keys[r / ROWS_PER_OBJECT].clone()).collect();
        let batch = Rows::batch_for(&rows);
        let schema = batch.schema();
        let reader = arrow_array::RecordBatchIterator::new(vec![Ok(batch)], schema);
        engine.append("t", Box::new(reader)).await.map_err(|e| e.to_string())?;
        versions += 1;
    }
    engine.create_tag("t", (versions as u64).div_ceil(2), "bench").await.map_err(|e| e.to_string())?;
    engine.cleanup("t", Duration::ZERO).await.map_err(|e| e.to_string())?;
    Ok(versions)
}

/// Prints `ingest_peak_rss_growth_10x` and `verify_peak_rss_growth_10x`.
pub(crate) async fn figures(args: &Args) -> Result<(), String> {
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repeat = args.repeat.clamp(1, MAX_REPEAT);

    let (n, started) = (args.ingest_files, Instant::now());
    let (small, large) = (work.path().join("files-1x"), work.path().join("files-10x"));
    write_source(&small, n)?;
    write_source(&large, n * 10)?;
    println!("# ingest sources: {n} and {} tiny files, written in {:.1}s", n * 10, started.elapsed().as_secs_f64());
    let (mut a, mut b, mut plain_a, mut plain_b) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let plain = |rows: usize| child_peak("ingest-plain", &["--rows".to_string(), rows.to_string()]);
    for i in 0..repeat {
        plain_a.push(plain(n)?);
        plain_b.push(plain(n * 10)?);
        let started = Instant::now();
        if i % 2 == 0 {
            a.push(ingest_peak(work.path(), &small).await?);
            b.push(ingest_peak(work.path(), &large).await?);
        } else {
            b.push(ingest_peak(work.path(), &large).await?);
            a.push(ingest_peak(work.path(), &small).await?);
        }
        println!("# ingest pair {} of {repeat}: {:.1}s", i + 1, started.elapsed().as_secs_f64());
    }
    println!("# ingest peak RSS samples (KiB): 1x {a:?}, 10x {b:?}; plain Lance 1x {plain_a:?}, 10x {plain_b:?}");
    let (a, b, pa, pb) = (median(a), median(b), median(plain_a), median(plain_b));
    println!("# ingest peak RSS: 1x {a} KiB ({n} files), 10x {b} KiB ({} files)", n * 10);
    // Lance's writer caches up to 8 MiB per column before it writes a page: part of the growth
    // is Lance's own, which a plain write of as many rows shows.
    println!(
        "# plain Lance write of as many rows: 1x {pa} KiB, 10x {pb} KiB (growth {:.3}); lake ingest over it: 1x {} KiB, 10x {} KiB",
        pb as f64 / pa.max(1) as f64,
        a as i64 - pa as i64,
        b as i64 - pb as i64
    );
    println!("ingest_peak_rss_growth_10x: {:.3}", b as f64 / a.max(1) as f64);
    // What lake adds over Lance's own writer at 10x: what grows with the rows is Lance's when
    // this stays near 1.
    println!("ingest_peak_rss_vs_lance: {:.3}", b as f64 / pb.max(1) as f64);
    std::fs::remove_dir_all(&small).map_err(|e| e.to_string())?;
    std::fs::remove_dir_all(&large).map_err(|e| e.to_string())?;

    let r = args.verify_references;
    let budget_mib = args.memory_budget_kib.div_ceil(1024).max(1);
    let mut roots = Vec::new();
    for (what, references) in [("1x", r), ("10x", r * 10)] {
        let root = work.path().join(format!("verify-{what}")).display().to_string();
        let started = Instant::now();
        let versions = verify_lake(&root, references).await?;
        println!(
            "# verify lake {what}: {references} references to {} objects in {versions} appended versions, 2 retained, built in {:.1}s",
            references.div_ceil(ROWS_PER_OBJECT),
            started.elapsed().as_secs_f64()
        );
        roots.push(root);
    }
    let extra = |root: &str| {
        vec!["--root".to_string(), root.to_string(), "--memory-budget-kib".into(), (budget_mib * 1024).to_string()]
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..repeat {
        let started = Instant::now();
        if i % 2 == 0 {
            a.push(child_peak("verify", &extra(&roots[0]))?);
            b.push(child_peak("verify", &extra(&roots[1]))?);
        } else {
            b.push(child_peak("verify", &extra(&roots[1]))?);
            a.push(child_peak("verify", &extra(&roots[0]))?);
        }
        println!("# verify pair {} of {repeat}: {:.1}s", i + 1, started.elapsed().as_secs_f64());
    }
    println!("# verify peak RSS samples (KiB): 1x {a:?}, 10x {b:?}");
    let (a, b) = (median(a), median(b));
    println!(
        "# verify peak RSS: 1x {a} KiB ({r} references), 10x {b} KiB ({} references), memory budget {budget_mib} MiB",
        r * 10
    );
    println!("verify_peak_rss_growth_10x: {:.3}", b as f64 / a.max(1) as f64);
    Ok(())
}
