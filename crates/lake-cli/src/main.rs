//! The `lake` binary: a thin layer of commands over the lake libraries.

// First: its `print!`, `println!` and `eprintln!` replace std's in every module below.
#[macro_use]
mod stdio;
mod cli;
mod commands;
mod error;
mod logging;
mod remedy;

use clap::Parser;
use cli::{Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    stdio::reserve_standard_descriptors();
    let cli = Cli::parse();
    if cli.command.runs_under_memory_budget() {
        // Before any thread starts (docs/cost-model.md, "Bounded memory").
        lake::engine::allocator::limit_malloc_arenas();
    }
    logging::init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lake: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match &cli.command {
            Command::Init(a) => commands::init::run(a).await,
            Command::Ingest(a) => commands::ingest::run(a).await,
            Command::Upsert(a) => commands::ingest::upsert(a).await,
            Command::Delete(a) => commands::tables::delete(a).await,
            Command::Update(a) => commands::operations::update(a).await,
            Command::Index(c) => commands::operations::index(c).await,
            Command::Columns(c) => commands::operations::columns(c).await,
            Command::Branch(c) => commands::operations::branch(c).await,
            Command::Restore(a) => commands::history::restore(a).await,
            Command::Tag(a) => commands::history::tag(a).await,
            Command::Refs(c) => commands::refs::run(c).await,
            Command::Compact(a) => commands::tables::compact(a).await,
            Command::Cleanup(a) => commands::tables::cleanup(a).await,
            Command::Versions(a) => commands::tables::versions(a).await,
            Command::Config(a) => commands::tables::config(a).await,
            Command::Cat(a) => commands::objects::cat(a).await,
            Command::Get(a) => commands::objects::get(a).await,
            Command::Gc(a) => commands::gc::run(a).await,
            Command::Demo(a) => commands::demo::run(a).await,
        }
    });
    let code = match result {
        Ok(()) => 0,
        Err(e) => {
            if cli.command.json_output() {
                // One line on standard error: `{"error": {"kind", "message", "transient"}}`.
                eprintln!("{}", e.to_json());
            } else {
                eprintln!("lake: {}", crate::remedy::with_hints(&e.to_string(), "  "));
            }
            e.exit_code()
        }
    };
    // Output that was lost (not a reader that went away) fails a command that succeeded.
    match stdio::stdout_failure() {
        Some(failure) if code == 0 => {
            eprintln!("lake: cannot write standard output: {failure}");
            ExitCode::from(1)
        }
        _ => ExitCode::from(code),
    }
}
