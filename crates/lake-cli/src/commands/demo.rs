//! `lake demo`: the main job end to end on a fresh local lake, checked.

use crate::cli::DemoArgs;
use crate::commands::gc::{run_gc, GcReport, GcRequest};
use crate::commands::ingest;
use crate::error::CliError;
use lake::collect::apply::ApplyOptions;
use lake::lance::ingest::ingest_dir_with;
use lake::lance::verify::check_retained_objects;
use lake::lance::LanceEngine;
use lake::store::descriptor::LakeDescriptor;
use lake::store::writer::ManagedObjectWriter;
use lake::store::LakeStore;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

const TABLE: &str = "episodes";
/// The demo lake's GC policy floor: short so the demo runs in seconds, long enough that the
/// publication guard (new references younger than 3/4 of it) lets an ingest of a few hundred
/// files publish.
const MIN_AGE: Duration = Duration::from_secs(4);

fn io(path: &Path) -> impl Fn(std::io::Error) -> CliError + '_ {
    move |e| CliError::Io { path: path.display().to_string(), source: e }
}

/// The files to ingest, relative to `base`, sorted: `git ls-files` of the repository when
/// `from` is not given, else every regular file under `from`.
fn source_files(from: Option<&Path>) -> Result<(PathBuf, Vec<String>), CliError> {
    if let Some(dir) = from {
        let mut files = Vec::new();
        for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
            let entry = entry.map_err(|e| CliError::Io {
                path: dir.display().to_string(),
                source: std::io::Error::other(e.to_string()),
            })?;
            if entry.file_type().is_file() {
                if let Some(rel) = entry.path().strip_prefix(dir).ok().and_then(|p| p.to_str()) {
                    files.push(rel.to_string());
                }
            }
        }
        return Ok((dir.to_path_buf(), files));
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let repo = manifest.ancestors().nth(2).map(Path::to_path_buf).filter(|p| p.join(".git").exists());
    let repo = match repo {
        Some(r) => r,
        None => std::env::current_dir().map_err(io(Path::new(".")))?,
    };
    let output = std::process::Command::new("git").arg("-C").arg(&repo).args(["ls-files", "-z"]).output();
    match output {
        Ok(o) if o.status.success() => {
            let mut files: Vec<String> = o
                .stdout
                .split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .filter_map(|s| std::str::from_utf8(s).ok().map(str::to_string))
                .filter(|f| repo.join(f).is_file())
                .collect();
            files.sort();
            Ok((repo, files))
        }
        _ => Err(CliError::Usage(format!(
            "cannot list the tracked files of {} with git; pass --from DIR",
            repo.display()
        ))),
    }
}

fn stage(base: &Path, files: &[String], into: &Path) -> Result<(), CliError> {
    for f in files {
        let dest = into.join(f);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::copy(base.join(f), &dest).map_err(io(&dest))?;
    }
    Ok(())
}

fn episode_of(f: &str) -> &str {
    match f.split_once('/') {
        Some((e, _)) => e,
        None => "",
    }
}

/// Runs the demo.
///
/// # Errors
/// Any step's error, or [`CliError::Exit`] when a check fails.
pub(crate) async fn run(args: &DemoArgs) -> Result<(), CliError> {
    let base = match &args.root {
        Some(r) => {
            std::fs::create_dir_all(r).map_err(io(r))?;
            r.clone()
        }
        None => tempfile::Builder::new().prefix("lake-demo-").tempdir().map_err(io(Path::new("temp")))?.keep(),
    };
    let lake_dir = base.join("lake");
    if lake_dir.exists() && std::fs::read_dir(&lake_dir).map_err(io(&lake_dir))?.next().is_some() {
        return Err(CliError::Usage(format!(
            "{} is not empty; give --root an empty or new folder",
            lake_dir.display()
        )));
    }
    let (src, files) = source_files(args.from.as_deref())?;
    if files.len() < 2 {
        return Err(CliError::Usage(format!("{} has fewer than 2 files to ingest", src.display())));
    }
    println!("lake demo in {}", base.display());
    println!("source: {} files from {}", files.len(), src.display());

    // Two ingests: alternate files go to each, so both versions hold rows of every episode.
    let (first, second): (Vec<String>, Vec<String>) = {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for (i, f) in files.iter().enumerate() {
            if i % 2 == 0 {
                a.push(f.clone())
            } else {
                b.push(f.clone())
            }
        }
        (a, b)
    };
    let stage1 = base.join("staging-1");
    let stage2 = base.join("staging-2");
    stage(&src, &first, &stage1)?;
    stage(&src, &second, &stage2)?;

    let root = lake_dir.display().to_string();
    let store = LakeStore::open(&root)?;
    LakeDescriptor::create(&store, MIN_AGE).await?;
    println!("1. init       lake at {root} (GC policy floor {})", humantime::format_duration(MIN_AGE));
    let engine = LanceEngine::new(store.clone());
    let (v1, bytes1) =
        ingest_dir_with(&engine, TABLE, &stage1, &ingest::options(&stage1, lake::lance::ingest::IngestMode::Append))
            .await?;
    println!("2. ingest     {} files, {bytes1} bytes -> table `{TABLE}` version {}", v1.rows, v1.version);
    let (v2, bytes2) =
        ingest_dir_with(&engine, TABLE, &stage2, &ingest::options(&stage2, lake::lance::ingest::IngestMode::Append))
            .await?;
    println!("3. ingest     {} files, {bytes2} bytes -> version {}", v2.rows, v2.version);

    // Delete the episode whose size is closest to a quarter of the files: enough to orphan a
    // good share of objects while most rows stay live.
    let mut per_episode: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &files {
        *per_episode.entry(episode_of(f)).or_default() += 1;
    }
    let quarter = files.len() / 4;
    let victim = per_episode
        .iter()
        .filter(|(e, _)| !e.is_empty())
        .min_by_key(|(e, n)| (n.abs_diff(quarter), **e))
        .map(|(e, _)| e.to_string())
        .unwrap_or_default();
    let predicate = format!("episode = '{}'", victim.replace('\'', "''"));
    // The objects the delete will orphan, read before deleting (a scan of the latest version).
    let ds = engine.open(TABLE).await?;
    let doomed = lake::lance::scan::count_references(&ds, TABLE, store.root(), Some(&predicate)).await?;
    let deleted = engine.delete(TABLE, &predicate).await?;
    let deleted_version = deleted.as_ref().map(|d| d.version).unwrap_or(v2.version);
    println!(
        "4. delete     {predicate}: {} rows -> version {deleted_version}",
        deleted.as_ref().map(|d| d.rows).unwrap_or(0)
    );
    let compacted = engine.compact(TABLE).await?;
    println!(
        "5. compact    -> {}",
        compacted.map(|c| format!("version {}", c.version)).unwrap_or_else(|| "nothing to compact".into())
    );

    let writer = ManagedObjectWriter::new(store.clone());
    let abandoned = writer.upload_file(&src.join(&files[0])).await?;
    println!("6. upload     {} (never appended: a writer that died before committing)", abandoned.key);
    tokio::time::sleep(MIN_AGE + Duration::from_millis(500)).await;
    let cleaned = engine.cleanup(TABLE, Duration::ZERO).await?;
    println!("7. cleanup    removed {} old versions (only the latest is retained)", cleaned.old_versions);
    let young = writer.upload_file(&src.join(&files[1])).await?;
    println!("8. upload     {} (young orphan: newer than the cutoff, must survive)", young.key);

    let dry_req = GcRequest {
        min_age: MIN_AGE,
        allow_below_policy: false,
        cutoff: None,
        checkpoint: None,
        apply: ApplyOptions {
            page_size: 25,
            max_pages: None,
            progress: None,
            concurrency: 1,
            ..ApplyOptions::default()
        },
        list_page_size: 100,
        list_streams: lake::collect::collector::DEFAULT_LIST_STREAMS,
        out: None,
        metrics: None,
        plan: None,
        max_clock_skew: Duration::from_secs(300),
        memory_budget: lake::engine::budget::DEFAULT_MEMORY_BUDGET,
        // A fresh lake has no GC state: both runs below are full plans.
        incremental: lake::collect::state::IncrementalPolicy::default(),
    };
    let collector = lake::collect::collector::GarbageCollector::open(store.clone(), &engine).await?;
    let dry = run_gc(&collector, &dry_req).await?;
    println!(
        "9. gc dry run  cutoff {}: {} candidates, {} bytes, digest {}",
        dry.plan.cutoff,
        dry.plan.candidates.len(),
        dry.plan.candidate_bytes(),
        &dry.digest[..16]
    );
    let expected: BTreeSet<String> =
        doomed.iter().map(|(id, _)| id.uri.clone()).chain([abandoned.key.clone()]).collect();
    let planned: BTreeSet<String> = dry.plan.candidates.to_vec()?.into_iter().map(|c| c.key.into_string()).collect();
    let mut failures = Vec::new();
    if planned != expected {
        failures.push(format!(
            "plan differs from the expected orphans: unexpected {:?}, missing {:?}",
            planned.difference(&expected).collect::<Vec<_>>(),
            expected.difference(&planned).collect::<Vec<_>>()
        ));
    }
    let checkpoint = base.join("gc-checkpoint.json");
    let apply_req = GcRequest {
        cutoff: Some(dry.plan.cutoff.datetime()),
        checkpoint: Some(lake::collect::checkpoint::CheckpointLocation::Local(checkpoint.clone())),
        ..dry_req
    };
    let applied: GcReport = run_gc(&collector, &apply_req).await?;
    let a = applied.apply.as_ref().map(|a| a.checkpoint.clone());
    if applied.digest != dry.digest {
        failures.push("the apply's plan differs from the dry run's at the same cutoff".into());
    }
    if let Some(c) = &a {
        println!(
            "10. gc apply  deleted {}, already gone {}, revived {}, failed {}, complete {} (checkpoint {})",
            c.deleted,
            c.already_gone,
            c.revived.len(),
            c.failed.len(),
            c.complete,
            checkpoint.display()
        );
        if !c.complete || c.deleted as usize != expected.len() {
            failures.push(format!("apply deleted {} of {} expected objects", c.deleted, expected.len()));
        }
    }
    for key in &expected {
        if store.head(key).await?.is_some() {
            failures.push(format!("{key} was planned but still exists"));
        }
    }
    if store.head(&young.key).await?.is_none() {
        failures.push(format!("the young orphan {} was deleted", young.key));
    }
    let report = check_retained_objects(&engine).await?;
    println!(
        "11. verify    {} retained versions scanned; {} referenced objects ({} bytes) read back: {} missing, {} with wrong size or SHA-256",
        report.versions_scanned,
        report.objects_checked,
        report.bytes_checked,
        report.missing.len(),
        report.mismatched.len()
    );
    if !report.is_ok() {
        failures.push(format!(
            "retained objects damaged: missing {:?}, mismatched {:?}",
            report.missing, report.mismatched
        ));
    }
    if failures.is_empty() {
        println!(
            "demo OK: GC deleted exactly the {} orphans and every retained reference reads back intact",
            expected.len()
        );
        println!("inspect it: lake versions {root} --table {TABLE}; lake gc {root} --min-age 4s --json");
        Ok(())
    } else {
        for f in &failures {
            eprintln!("CHECK FAILED: {f}");
        }
        Err(CliError::Exit {
            kind: lake::common::ErrorKind::Internal,
            message: format!("demo checks failed ({})", failures.len()),
        })
    }
}
