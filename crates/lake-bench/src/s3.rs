//! `bulk_delete_speedup` on LocalStack: an apply with one DELETE per object (object_store's
//! `aws_disable_bulk_delete`) vs bulk DeleteObjects, same server, same number of objects. Each
//! apply runs in a child process, whose environment (`AWS_DISABLE_BULK_DELETE`, read when the
//! child opens its S3 store) chooses the side; the child times the apply alone.

use crate::rss::child_value;
use crate::{median, median_ratio, seconds, Args};
use lake_engine::memory::MemoryEngine;
use lake_gc::apply::ApplyOptions;
use lake_gc::checkpoint::CheckpointLocation;
use lake_gc::deleter::s3::StoreDeleter;
use lake_gc::inventory;
use lake_gc::unchecked::apply_unchecked as apply;
use lake_gc::unchecked::{plan_with_unchecked_cutoff as plan, PlanOptions};
use lake_store::keys::mint_key;
use lake_store::LakeStore;
use object_store::{ObjectStoreExt, PutPayload};
use std::time::{Duration, Instant};

async fn fill(store: &LakeStore, n: usize) -> Result<(), String> {
    use futures::StreamExt;
    let puts = (0..n).map(|i| {
        let s = store.object_store();
        let p = store.path(&mint_key(&format!("d{i}")).0);
        async move { s.put(&p, PutPayload::from_static(b"d")).await.map(|_| ()) }
    });
    for r in futures::stream::iter(puts).buffer_unordered(32).collect::<Vec<_>>().await {
        r.map_err(|e| e.to_string())?;
    }
    Ok(())
}

async fn apply_all(store: &LakeStore, n: usize) -> Result<Duration, String> {
    fill(store, n).await?;
    let engine = MemoryEngine::new();
    let options =
        PlanOptions::new(store.root(), Duration::from_secs(1), chrono::Utc::now() + chrono::Duration::seconds(5));
    let inv = inventory::for_store(store);
    let (p, _) = plan(&engine, inv.as_ref(), &options).await.map_err(|e| e.to_string())?;
    if p.candidates.len() != n {
        return Err(format!("expected {n} candidates, planned {}", p.candidates.len()));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let r = apply(
        &engine,
        &StoreDeleter::new(store.clone()),
        &CheckpointLocation::Local(dir.path().join("c")),
        Some(&p),
        &ApplyOptions::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let t = started.elapsed();
    if !r.checkpoint.complete {
        return Err("apply did not complete".into());
    }
    Ok(t)
}

/// The child side of `delete`: fills the lake store at `root` with `n` fresh objects, plans them
/// all and applies the plan; returns the apply's wall time.
pub(crate) async fn apply_once(root: &str, n: usize) -> Result<Duration, String> {
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    apply_all(&store, n).await
}

/// One `delete` child at `root` with `n` objects: one DELETE request per object when `single`,
/// else bulk DeleteObjects. Returns the child's apply time.
fn apply_in_child(root: &str, n: usize, single: bool) -> Result<Duration, String> {
    let extra = ["--root".to_string(), root.to_string(), "--delete-objects".into(), n.to_string()];
    let env = [("AWS_DISABLE_BULK_DELETE", single.then_some("true"))];
    let nanos = child_value("delete", &extra, &env, "apply_nanos")?;
    nanos.parse().map(Duration::from_nanos).map_err(|e| format!("child delete printed apply_nanos {nanos}: {e}"))
}

/// Prints `bulk_delete_speedup`, or why it was skipped.
pub(crate) async fn bulk_delete(args: &Args) -> Result<(), String> {
    let Ok(bucket) = std::env::var("LAKE_TEST_S3_BUCKET") else {
        println!("# bulk_delete_speedup skipped: no LocalStack (run: scripts/localstack.sh run -- cargo run --release -p lake-bench --features bench)");
        return Ok(());
    };
    let run = ulid::Ulid::new().to_string().to_lowercase();
    let (bulk, single) = (format!("s3://{bucket}/bench-{run}/bulk"), format!("s3://{bucket}/bench-{run}/single"));
    let (mut b, mut s) = (Vec::new(), Vec::new());
    for _ in 0..args.repeat.max(1) {
        // The same server without bulk deletes: object_store sends one DELETE per key.
        s.push(apply_in_child(&single, args.delete_objects, true)?);
        b.push(apply_in_child(&bulk, args.delete_objects, false)?);
    }
    println!("# delete samples (s): one request per object [{}], bulk [{}]", seconds(&s), seconds(&b));
    let speedup = median_ratio(&s, &b);
    let (b, s) = (median(b), median(s));
    println!(
        "# apply of {} deletes on LocalStack: one request per object {:.3}s, bulk {:.3}s (medians)",
        args.delete_objects,
        s.as_secs_f64(),
        b.as_secs_f64()
    );
    println!("bulk_delete_speedup: {speedup:.2}");
    Ok(())
}
