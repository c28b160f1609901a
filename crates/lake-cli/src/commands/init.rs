//! `lake init ROOT [--min-age DUR]`.

use crate::cli::InitArgs;
use crate::error::{parse_duration, CliError};
use lake::store::descriptor::LakeDescriptor;
use lake::store::LakeStore;

/// Creates the lake (idempotent when the same policy is already there).
///
/// # Errors
/// Usage errors for a bad or zero duration; storage errors.
pub(crate) async fn run(args: &InitArgs) -> Result<(), CliError> {
    let min_age = parse_duration("--min-age", &args.min_age)?;
    if min_age.is_zero() {
        return Err(CliError::Usage("--min-age must be positive (for example 7d)".into()));
    }
    if min_age.as_secs() == 0 {
        return Err(CliError::Usage("--min-age must be at least 1s".into()));
    }
    // Before the root's folder is created.
    LakeDescriptor::check_floor(min_age)?;
    let store = LakeStore::open(&args.root)?;
    let (descriptor, created) = LakeDescriptor::create(&store, min_age).await?;
    let verb = if created { "created" } else { "already exists:" };
    println!(
        "lake {verb} {} (GC policy floor: min_age {})",
        store.display_root(),
        humantime::format_duration(descriptor.min_age())
    );
    Ok(())
}
