//! One module per command; each exposes a library-style function the demo and tests reuse.

pub mod demo;
pub mod gc;
pub mod gc_report;
pub mod gc_shards;
pub mod gc_shards_report;
pub mod history;
pub mod ingest;
pub mod init;
pub mod operations;
pub mod refs;
pub mod tables;

use crate::error::CliError;
use lake_lance::LanceEngine;
use lake_objects::descriptor::LakeDescriptor;
use lake_objects::LakeStore;

/// Opens an existing lake: its store (checked to hold a lake descriptor) and engine.
///
/// # Errors
/// [`CliError::Objects`] when ROOT cannot be opened or holds no lake.
pub async fn open_lake(root: &str) -> Result<(LakeStore, LakeDescriptor, LanceEngine), CliError> {
    let store = LakeStore::open(root)?;
    let descriptor = LakeDescriptor::load(&store).await?;
    let engine = LanceEngine::new(store.clone());
    Ok((store, descriptor, engine))
}

/// Prints `value` as one line of JSON.
pub fn print_json(value: &serde_json::Value) {
    println!("{}", serde_json::to_string(value).unwrap_or_default());
}
