//! Failure injection for crash tests: named points in append and apply where a test can make
//! the operation stop as if the process had crashed there. A point only stops or fails the
//! operation (an error, or the process ends); it never does part of the work itself: a test that
//! needs a crash half-way through a delete request wraps the deleter (lake-gc's conformance
//! suite, `check_apply_counts`).
//!
//! Compiled only with the `failpoints` cargo feature, which only test builds enable (through
//! dev-dependencies); without it [`hit`] is a no-op the optimiser removes, so production builds
//! ignore every injection. With the feature, a point fires when the current task runs inside
//! [`scope`] with that point's name, or when the `LAKE_FAILPOINT` environment variable names it
//! (for tests that drive the `lake` binary).
//!
//! Points: `append.after_upload`, the steps of the write protocol ([`step`]),
//! `apply.after_plan_persisted`, `apply.after_page`,
//! `apply.before_checkpoint_write`, `restore.after_tag` (a restore stopped after tagging its
//! source, before its commit: it leaves the tag). Crash points ([`crash`], the process ends at
//! once, as `kill -9` would): `upload.mid_multipart` (an upload of an object above
//! `writer::PART_SIZE`, its multipart upload started: locally, object_store's staging file is
//! left).

use crate::error::StoreError;

#[cfg(feature = "failpoints")]
tokio::task_local! {
    static ACTIVE: String;
}

/// Returns [`StoreError::Injected`] when failure point `name` is active (feature
/// `failpoints` only; otherwise always `Ok`).
///
/// # Errors
/// [`StoreError::Injected`] naming the point.
#[inline]
pub fn hit(name: &'static str) -> Result<(), StoreError> {
    #[cfg(feature = "failpoints")]
    {
        let scoped = ACTIVE.try_with(|active| active == name).unwrap_or(false);
        let from_env = std::env::var("LAKE_FAILPOINT").is_ok_and(|v| v == name);
        if scoped || from_env {
            tracing::warn!(point = name, "injected failure");
            return Err(StoreError::Injected(name));
        }
    }
    let _ = name;
    Ok(())
}

/// Ends the process at once when failure point `name` is active (feature `failpoints` only;
/// otherwise nothing): `std::process::abort`, so no destructor or cleanup runs, as when the
/// process is killed. Only for tests that drive the `lake` binary (`LAKE_FAILPOINT`): in a test
/// process it would end the test runner.
#[inline]
pub fn crash(name: &'static str) {
    #[cfg(feature = "failpoints")]
    {
        let scoped = ACTIVE.try_with(|active| active == name).unwrap_or(false);
        let from_env = std::env::var("LAKE_FAILPOINT").is_ok_and(|v| v == name);
        if scoped || from_env {
            eprintln!("lake: injected crash at `{name}`");
            std::process::abort();
        }
    }
    let _ = name;
}

/// A step of a protocol where a test can stop the operation: ends the process at once when the
/// `LAKE_CRASHPOINT` environment variable names it (as `kill -9` would: a child writer in a test),
/// else as [`hit`] (an error, for a scope or `LAKE_FAILPOINT`). Feature `failpoints` only;
/// otherwise always `Ok`.
///
/// Steps of the write protocol (lake-lance `commit`, docs/protocol.md): `commit.after_intent`,
/// `commit.before_manifest`, `commit.lost_manifest_response` (the manifest landed, its answer
/// is lost), `commit.after_manifest`, `commit.after_entry`, `commit.after_registry`; of a
/// resolver: `resolve.after_revoke`, `resolve.after_fence`, `resolve.after_journal`,
/// `resolve.after_intent_removed`.
///
/// # Errors
/// [`StoreError::Injected`] naming the point.
/// A step also suspends the process (`SIGSTOP` to itself, as a host suspended there would be)
/// when the `LAKE_PAUSEPOINT` environment variable names it: a test stops a child writer at an
/// exact step, acts while it is stopped, then resumes it with `SIGCONT`.
#[inline]
pub fn step(name: &'static str) -> Result<(), StoreError> {
    #[cfg(feature = "failpoints")]
    {
        if std::env::var("LAKE_CRASHPOINT").is_ok_and(|v| v == name) {
            eprintln!("lake: injected crash at `{name}`");
            std::process::abort();
        }
        if std::env::var("LAKE_PAUSEPOINT").is_ok_and(|v| v == name) {
            eprintln!("lake: suspending at `{name}`");
            // The process stops here until it is sent SIGCONT. `raise` directs the signal at this
            // thread, which stops before it returns from the call; a signal sent to the process
            // (`kill -STOP <pid>`) may be taken by another thread, and under load this one ran on
            // past the step (a manifest written before the stop took hold).
            // SAFETY: `raise(3)` takes a signal number and has no memory-safety preconditions;
            // SIGSTOP cannot be caught, so no handler runs.
            let _ = unsafe { libc::raise(libc::SIGSTOP) };
            eprintln!("lake: resumed at `{name}`");
        }
    }
    hit(name)
}

/// Runs `fut` with failure point `name` active for its task (feature `failpoints` only).
#[cfg(feature = "failpoints")]
pub async fn scope<F: std::future::Future>(name: &str, fut: F) -> F::Output {
    ACTIVE.scope(name.to_string(), fut).await
}
