//! Synthetic inputs: batches of rows referencing fresh managed keys, and planning lakes.

use arrow_array::{ArrayRef, RecordBatch, RecordBatchReader, StringArray};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use lake_common::{data_location_field, DataLocationBuilder};
use lake_lance::LanceEngine;
use lake_store::descriptor::LakeDescriptor;
use lake_store::keys::mint_key;
use lake_store::LakeStore;
use object_store::{ObjectStoreExt, PutPayload};
use std::sync::Arc;
use std::time::Duration;

/// Rows per batch.
const BATCH: usize = 8192;

/// The rows' schema: `episode` (UTF-8) and `file` (a DataLocation).
pub(crate) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("episode", DataType::Utf8, false), data_location_field("file", false)]))
}

/// A reader of `rows` rows, each referencing its own managed key, generated batch by batch.
pub(crate) struct Rows {
    next: usize,
    rows: usize,
    prefix: String,
    schema: SchemaRef,
}

impl Rows {
    /// `rows` rows whose keys share one fresh ULID folder per reader.
    pub(crate) fn new(rows: usize) -> Self {
        let (key, _) = mint_key("r");
        let prefix = key.trim_end_matches("/r").to_string();
        Self { next: 0, rows, prefix, schema: schema() }
    }

    /// Rows referencing the given keys (one row per key).
    pub(crate) fn batch_for(keys: &[String]) -> RecordBatch {
        Self::batch_with_episodes(keys, |_| "e".to_string())
    }

    /// Rows referencing the given keys (one row per key), row `i`'s episode `episode(i)`.
    pub(crate) fn batch_with_episodes(keys: &[String], episode: impl Fn(usize) -> String) -> RecordBatch {
        let episodes: ArrayRef = Arc::new(StringArray::from_iter_values((0..keys.len()).map(episode)));
        let mut files = DataLocationBuilder::new();
        for k in keys {
            files.append(k, [7; 32], 1);
        }
        RecordBatch::try_new(schema(), vec![episodes, Arc::new(files.finish())]).expect("valid batch")
    }
}

impl Iterator for Rows {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.next >= self.rows {
            return None;
        }
        let n = BATCH.min(self.rows - self.next);
        let keys: Vec<String> = (self.next..self.next + n).map(|i| format!("{}/r{i}", self.prefix)).collect();
        self.next += n;
        Some(Ok(Self::batch_for(&keys)))
    }
}

impl RecordBatchReader for Rows {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// A new lake (policy 7 days) at `root`.
pub(crate) async fn new_lake(root: &str) -> Result<(LakeStore, LanceEngine), String> {
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    LakeDescriptor::create(&store, Duration::from_secs(7 * 86400)).await.map_err(|e| e.to_string())?;
    Ok((store.clone(), LanceEngine::new(store)))
}

/// A planning lake: `objects` tiny managed objects, half of them referenced by `versions`
/// appended versions of table `t` (all retained).
pub(crate) async fn planning_lake(root: &str, objects: usize, versions: usize) -> Result<LanceEngine, String> {
    let (store, engine) = new_lake(root).await?;
    let keys: Vec<String> = (0..objects).map(|i| mint_key(&format!("o{i}")).0).collect();
    let put = |k: String| {
        let s = store.object_store();
        let p = store.path(&k);
        async move { s.put(&p, PutPayload::from_static(b"x")).await.map(|_| ()) }
    };
    use futures::StreamExt;
    let results: Vec<_> = futures::stream::iter(keys.iter().cloned().map(put)).buffer_unordered(64).collect().await;
    for r in results {
        r.map_err(|e| e.to_string())?;
    }
    let referenced: Vec<String> = keys.iter().step_by(2).cloned().collect();
    let per_version = referenced.len().div_ceil(versions.max(1)).max(1);
    for chunk in referenced.chunks(per_version) {
        let batch = Rows::batch_for(chunk);
        let reader = arrow_array::RecordBatchIterator::new(vec![Ok(batch)], schema());
        engine.append("t", Box::new(reader)).await.map_err(|e| e.to_string())?;
    }
    Ok(engine)
}
