//! One module per command; each exposes a library-style function the demo and tests reuse.

pub(crate) mod demo;
pub(crate) mod gc;
pub(crate) mod gc_report;
pub(crate) mod gc_run;
pub(crate) mod gc_shards;
pub(crate) mod gc_shards_report;
pub(crate) mod history;
pub(crate) mod ingest;
pub(crate) mod init;
pub(crate) mod objects;
pub(crate) mod operations;
pub(crate) mod refs;
pub(crate) mod tables;

use crate::error::CliError;
use lake::lance::LanceEngine;
use lake::store::descriptor::LakeDescriptor;
use lake::store::LakeStore;

/// Opens an existing lake: its store (checked to hold a lake descriptor) and engine.
///
/// # Errors
/// [`CliError::Gc`] when ROOT cannot be opened or holds no lake.
pub(crate) async fn open_lake(root: &str) -> Result<(LakeStore, LakeDescriptor, LanceEngine), CliError> {
    let store = LakeStore::open(root)?;
    let descriptor = LakeDescriptor::load(&store).await?;
    let engine = LanceEngine::new(store.clone());
    Ok((store, descriptor, engine))
}

/// Prints `value` as one line of JSON.
pub(crate) fn print_json(value: &serde_json::Value) {
    println!("{}", serde_json::to_string(value).unwrap_or_default());
}
