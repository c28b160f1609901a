//! The writer-side publication guard: an unsafe publication fails loudly instead of losing
//! data silently.
//!
//! GC may delete a managed object once it is older than `min_age` and unreferenced. A writer
//! that publishes a reference to an object that old could race a GC plan that already lists it.
//! So, right before committing, every newly referenced managed object must be younger than
//! `min_age - margin`; otherwise the commit is refused with [`GuardError::TooOld`] and nothing is
//! committed. To re-use an old object, copy it server-side to a fresh key first
//! ([`crate::writer::ManagedObjectWriter::copy_fresh`]).
//!
//! The check comes after the write recorded its write intent ([`crate::intents`]), which keeps
//! the references live from then until the commit is journaled or proven never to land, however
//! long the commit takes. GC reads the intents after fixing its cutoff: an intent it did not see
//! was written, and its guard checked, after the cutoff, so its objects are younger than the
//! cutoff (docs/protocol.md). A commit's duration is not assumed.
//!
//! Age is measured without a storage request per object: an object's age is the writer's clock
//! now ([`WriterClock`]) minus the time in its key's ULID, which the writer's clock minted when
//! the upload started. Both readings come from the same clock, so a constant offset between the
//! writer's clock and the store's cancels out. What is assumed: the writer's clock and the
//! store's clock differ by less than `margin` (GC judges age by the store's clock). `margin` is a
//! quarter of `min_age`.

use crate::descriptor::LakeDescriptor;
use crate::keys::parse_managed_key;
use chrono::{DateTime, Utc};
use lake_common::ObjectIdentity;
use std::sync::Mutex;
use std::time::Duration;
use thiserror::Error;

/// The writer's clock, which the guard reads "now" from (the ULID of a managed key was minted
/// by the same host's clock). Production uses [`SystemClock`]; a test of the guard injects a
/// [`FixedWriterClock`] (`LanceEngine::with_writer_clock`) instead of sleeping, so its verdict
/// does not depend on how fast the machine is.
pub trait WriterClock: Send + Sync + std::fmt::Debug {
    /// Now, UTC.
    fn now(&self) -> DateTime<Utc>;
}

/// This host's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl WriterClock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        #[cfg(feature = "test-clock")]
        if let Some(behind) = writer_clock_behind_for_tests() {
            return Utc::now() - behind;
        }
        Utc::now()
    }
}

/// Test builds of the `lake` binary only (the `test-clock` feature): the writer's clock, as the
/// guard reads it, set back by the duration in `LAKE_UNCHECKED_WRITER_CLOCK_BEHIND` (humantime,
/// e.g. `1h`), so that a test of the binary that ingests many files on a loaded machine is not
/// refused by a guard it does not test. Compiled out of every other build.
#[cfg(feature = "test-clock")]
fn writer_clock_behind_for_tests() -> Option<chrono::Duration> {
    std::env::var("LAKE_UNCHECKED_WRITER_CLOCK_BEHIND")
        .ok()
        .and_then(|v| humantime::parse_duration(&v).ok())
        .and_then(|d| chrono::Duration::from_std(d).ok())
}

/// A writer clock that reads a time the test sets: the guard's verdict on an object minted at
/// `t` is then a function of `set(t + age)`, not of the machine's speed.
#[derive(Debug)]
pub struct FixedWriterClock(Mutex<DateTime<Utc>>);

impl FixedWriterClock {
    /// A clock reading `at`.
    pub fn new(at: DateTime<Utc>) -> Self {
        Self(Mutex::new(at))
    }

    /// Makes the clock read `at` from now on.
    pub fn set(&self, at: DateTime<Utc>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = at;
    }
}

impl WriterClock for FixedWriterClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A refusal to publish.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum GuardError {
    /// A newly referenced managed object is too old to be published safely.
    #[error("refusing to publish a reference to {uri}: the object is {} old, but new references must be younger than {} (the lake's min_age {} minus the margin {}); GC may already plan to delete it. Copy it to a fresh key first (`copy fresh`) and reference the copy. Nothing was committed", humantime::format_duration(*age), humantime::format_duration(*limit), humantime::format_duration(*min_age), humantime::format_duration(*margin))]
    TooOld {
        /// The object's managed key, relative to the lake root.
        uri: String,
        /// Its age: the writer's clock minus the time minted into its key's ULID.
        age: Duration,
        /// The oldest a newly referenced object may be (`min_age - margin`).
        limit: Duration,
        /// The lake's GC policy `min_age`.
        min_age: Duration,
        /// The safety margin (a quarter of `min_age`).
        margin: Duration,
    },
}

/// The guard of one lake's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicationGuard {
    min_age: Duration,
    margin: Duration,
}

impl PublicationGuard {
    /// The guard for `descriptor`'s policy: margin = min_age / 4.
    pub fn from_policy(descriptor: &LakeDescriptor) -> Self {
        Self::new(descriptor.min_age())
    }

    /// The guard for `min_age`: margin = min_age / 4.
    pub fn new(min_age: Duration) -> Self {
        Self { min_age, margin: min_age / 4 }
    }

    /// The safety margin (a quarter of `min_age`).
    pub fn margin(&self) -> Duration {
        self.margin
    }

    /// The oldest a newly referenced object may be: `min_age - margin`.
    pub fn limit(&self) -> Duration {
        self.min_age.saturating_sub(self.margin)
    }

    /// Checks every managed identity (keys matching the managed grammar; external URIs and other
    /// keys are never GC candidates and pass) against `now` (the writer's clock).
    ///
    /// # Errors
    /// [`GuardError::TooOld`] naming the first (in identity order) object that is too old.
    pub fn check<'a>(
        &self,
        identities: impl IntoIterator<Item = &'a ObjectIdentity>,
        now: DateTime<Utc>,
    ) -> Result<(), GuardError> {
        let limit = self.limit();
        for identity in identities {
            let Some(key) = parse_managed_key(&identity.uri) else { continue };
            let age = (now - key.minted_at()).to_std().unwrap_or(Duration::ZERO);
            if age >= limit {
                return Err(GuardError::TooOld {
                    uri: identity.uri.clone(),
                    age,
                    limit,
                    min_age: self.min_age,
                    margin: self.margin,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::mint_key;

    #[test]
    fn old_managed_objects_are_refused_and_others_pass() {
        let guard = PublicationGuard::new(Duration::from_secs(400));
        assert_eq!((guard.margin(), guard.limit()), (Duration::from_secs(100), Duration::from_secs(300)));
        let (key, _) = mint_key("x");
        let fresh = ObjectIdentity::new(key, [0; 32], 1);
        let external = ObjectIdentity::new("s3://elsewhere/x", [0; 32], 1);
        let unmanaged = ObjectIdentity::new("tables/x", [0; 32], 1);
        let now = Utc::now();
        assert!(guard.check([&fresh, &external, &unmanaged], now).is_ok());
        let later = now + chrono::Duration::seconds(301);
        match guard.check([&external, &fresh], later) {
            Err(GuardError::TooOld { uri, age, .. }) => {
                assert_eq!(uri, fresh.uri);
                assert!(age >= Duration::from_secs(300));
            }
            other => panic!("{other:?}"),
        }
    }
}
