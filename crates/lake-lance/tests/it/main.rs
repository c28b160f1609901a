//! Integration tests of the Lance engine on real Lance datasets in temporary folders
//! (one test binary per crate: Lance links once).

mod append;
mod apply_doors;
mod attack;
mod attack_branches;
mod attack_create;
mod attack_operations;
mod attack_streamed;
mod binding;
mod branches;
mod budget;
mod crash;
mod dry_run;
mod foreign_model;
mod garbage;
mod gc_scenario;
mod guard;
mod history;
mod hold;
mod hold_proxy;
mod ingest;
mod intents;
mod large_entries;
mod lineage;
mod local_doors;
mod operations;
mod operations_model;

mod readme_example;
mod replay_checkpoint;
mod rows;
mod s3_doors;
mod second_client;
mod shard_reads;
mod stress;
mod support;
mod truth;
mod two_phase;
mod verify_bounded;
mod write_doors;
