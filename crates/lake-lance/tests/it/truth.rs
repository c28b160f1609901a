//! The truth GC is checked against, read without lake's rules: the keys every retained version
//! of a table and of each of its Lance branches references (a plain scan of every struct column
//! with a `uri` child), and the managed objects a plan proposes.

use crate::support::TestLake;
use arrow_array::{Array, StringArray, StructArray};
use futures::TryStreamExt;
use lake_gc::plan::GcPlan;
use lance::Dataset;
use std::collections::BTreeSet;

/// Keys in every struct column with a `uri` child of `ds` at its version.
pub(crate) async fn scanned_keys(ds: &Dataset) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut stream = ds.scan().try_into_stream().await.unwrap();
    while let Some(b) = stream.try_next().await.unwrap() {
        for column in b.columns() {
            let Some(s) = column.as_any().downcast_ref::<StructArray>() else { continue };
            let Some(uris) = s.column_by_name("uri").and_then(|u| u.as_any().downcast_ref::<StringArray>()) else {
                continue;
            };
            for i in 0..s.len() {
                if s.is_valid(i) {
                    keys.insert(uris.value(i).to_string());
                }
            }
        }
    }
    keys
}

/// Every key a retained version of table `table`, or of one of its branches, references (none
/// when the table cannot be opened).
pub(crate) async fn referenced(lake: &TestLake, table: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let Ok(ds) = Dataset::open(&lake.engine.dataset_uri(table)).await else { return keys };
    let mut lines = vec![ds.clone()];
    for name in ds.list_branches().await.unwrap().into_keys() {
        lines.push(ds.checkout_branch(&name).await.unwrap());
    }
    for line in lines {
        let branch = line.manifest().branch.clone();
        for v in line.version_refs().await.unwrap() {
            let at = match &branch {
                Some(b) => line.checkout_version((b.as_str(), v.version)).await.unwrap(),
                None => line.checkout_version(v.version).await.unwrap(),
            };
            keys.extend(scanned_keys(&at).await);
        }
    }
    keys
}

/// The managed objects (`objects/<ULID>/<name>`) `plan` proposes: not its folders or journal files.
pub(crate) fn planned_objects(plan: &GcPlan) -> BTreeSet<String> {
    plan.candidates.keys().unwrap().into_iter().filter(|k| k.starts_with("objects/") && !k.ends_with('/')).collect()
}
