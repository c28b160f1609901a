//! Integration tests of lake-gc (one test binary per crate).
//!
//! `conformance` is the storage-facing suite every backend runs (object_store's pattern);
//! `planner` and `documents` test planning, plans and checkpoints over a real local store;
//! `inventory` checks the local inventory against object_store's full listing; `report` plans
//! from S3 Inventory reports (LocalStack); `outputs` checks where documents written for an
//! operator may go, and how plans, checkpoints and shards bind;
//! `written_where_checked` re-points links and mounts overlays after documents are checked;
//! `lake_identity` binds plans and checkpoints to a lake and one apply to a checkpoint;
//! `s3_options` runs GC on a store configured by storage
//! options alone, in a child process without `AWS_*` variables; `delete_proxy` makes DeleteObjects
//! answer per-key errors.

mod collector;
mod conformance;
mod delete_proxy;
mod documents;
mod incremental;
mod incremental_attacks;
mod inventory;
mod lake_identity;
mod managed_grammar;
mod outputs;
mod own_garbage;
mod parallel_listing;
mod planner;
mod public_api_refusals;
mod report;
mod s3_options;
mod s3_requests;
mod shards;
mod written_where_checked;

/// Asserts that `err` is a refusal of kind `expected` (tests match the kind, not the message).
pub fn refused(err: lake_gc::GcError, expected: lake_common::ErrorKind) {
    match err {
        lake_gc::GcError::Refused { kind, message } => assert_eq!(kind, expected, "{message}"),
        other => panic!("expected a {expected} refusal, got {other:?}"),
    }
}
