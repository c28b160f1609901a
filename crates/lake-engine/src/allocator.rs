//! Process-wide allocator settings for the commands that run lake's bounded-memory work (the
//! `lake` CLI's `gc`, `refs verify` and `refs repair`, and `lake-bench`'s children measuring
//! them); a library never changes them (the Python package leaves the interpreter's allocator
//! alone), and writes keep glibc's default (their journal worker allocates beside Lance's
//! encoder: with 2 arenas `append_throughput_ratio` fell from about 0.83 to 0.72).
//!
//! glibc's `malloc` gives each thread that allocates concurrently an arena of its own, up to
//! eight per core (`M_ARENA_MAX`, glibc's `mallopt(3)`). A bounded-memory job fills a run buffer
//! of millions of small allocations on whichever Tokio worker polls the scan, frees it at each
//! spill, and fills it again on another: each arena keeps the freed memory of the runs its thread
//! filled, so the peak grows with the number of runs. Measured on a repair of one version of
//! 10,000,000 references at `--memory-budget-mib 64` (docs/cost-model.md, "Bounded memory"): 331
//! MB with glibc's default, 281 MB with 2 arenas, 264 MB with 1, against 175 to 179 MB for
//! 1,000,000 references with any setting.

/// Limits glibc `malloc` to one arena per available core (at least 2), before the caller starts
/// any thread. Returns whether the limit was set: false on other C libraries and platforms,
/// which keep their own allocator policy, and when `MALLOC_ARENA_MAX` is set in the environment
/// (the operator's choice wins).
pub fn limit_malloc_arenas() -> bool {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return false;
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get()).max(2);
    set_arena_max(i32::try_from(cores).unwrap_or(i32::MAX))
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_arena_max(arenas: i32) -> bool {
    // SAFETY: `mallopt` only sets a tuning parameter of glibc's allocator; M_ARENA_MAX takes
    // any positive value and affects arenas created after the call.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_arena_max(_arenas: i32) -> bool {
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_operators_setting_wins() {
        // The environment variable, when present, is left to glibc (read at its first malloc).
        if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
            assert!(!super::limit_malloc_arenas());
        } else if cfg!(all(target_os = "linux", target_env = "gnu")) {
            assert!(super::limit_malloc_arenas());
        }
    }
}
