//! Helpers every engine shares to answer the [`crate::Engine`] questions from a table's
//! decoded sidecars, so the in-memory double and the Lance engine apply the same rules.

use crate::error::EngineError;
use crate::lineage::{LineageProblem, TableLineage};
use crate::replay::Replay;
use lake_common::{DecodeError, DeltaKind, ObjectIdentity, ObjectReferenceDelta};
use std::collections::{BTreeMap, BTreeSet};

/// Decoded sidecars of one table by version.
pub type Sidecars = BTreeMap<u64, Result<ObjectReferenceDelta, DecodeError>>;

/// The live set of a table whose lineage is complete: replays from `lineage.replay_base` to
/// the latest version.
///
/// # Errors
/// [`EngineError::Lineage`] when the lineage has problems or the replay is inconsistent.
pub fn live_set_of(
    lineage: &TableLineage,
    sidecars: &Sidecars,
    retained: &[u64],
) -> Result<BTreeSet<ObjectIdentity>, EngineError> {
    let table = lineage.table.clone();
    let base = lineage.complete_base()?;
    let mut replay = Replay::new(retained);
    for v in base..=lineage.latest_version {
        let delta = match sidecars.get(&v) {
            Some(Ok(d)) => d,
            _ => {
                return Err(EngineError::Lineage {
                    table: table.clone(),
                    problems: vec![LineageProblem::ParentGap {
                        table: table.clone(),
                        version: v,
                        needed_by: lineage.latest_version,
                    }],
                })
            }
        };
        replay.apply(delta).map_err(|e| EngineError::Lineage {
            table: table.clone(),
            problems: vec![LineageProblem::Inconsistent {
                table: table.clone(),
                version: e.version(),
                reason: e.to_string(),
            }],
        })?;
    }
    replay.into_live_set().map_err(|e| EngineError::Lineage {
        table: table.clone(),
        problems: vec![LineageProblem::Inconsistent { table, version: e.version(), reason: e.to_string() }],
    })
}

/// Identities added by versions in `(after, upto]` (all references of a snapshot).
///
/// # Errors
/// [`EngineError::Lineage`] naming the first version in the range whose sidecar is missing or
/// undecodable.
pub fn added_between(
    table: &str,
    after: u64,
    upto: u64,
    sidecars: &Sidecars,
) -> Result<Vec<ObjectIdentity>, EngineError> {
    let mut out = BTreeSet::new();
    for v in after.saturating_add(1)..=upto {
        match sidecars.get(&v) {
            Some(Ok(d)) => {
                for e in &d.added {
                    out.insert(e.identity.clone());
                }
                debug_assert!(d.kind == DeltaKind::Delta || d.removed.is_empty());
            }
            Some(Err(e)) => {
                return Err(EngineError::Lineage {
                    table: table.into(),
                    problems: vec![LineageProblem::UndecodableSidecar {
                        table: table.into(),
                        version: v,
                        reason: e.to_string(),
                    }],
                })
            }
            None => {
                return Err(EngineError::Lineage {
                    table: table.into(),
                    problems: vec![LineageProblem::MissingSidecar { table: table.into(), version: v }],
                })
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// [`crate::Engine::references_removed_between`] over decoded sidecars: hands `visit` every
/// identity the entries of `(after, upto]` remove (`after` `None`: after the first entry, which
/// must be version 1 or a snapshot), skipping those `range` does not concern.
///
/// # Errors
/// Whatever `visit` returns.
pub fn removed_between(
    after: Option<u64>,
    upto: u64,
    sidecars: &Sidecars,
    range: &crate::UriRange,
    visit: &mut (dyn FnMut(ObjectIdentity) -> Result<(), EngineError> + Send),
) -> Result<crate::Removals, EngineError> {
    let after = match after {
        Some(after) => after,
        None => match sidecars.iter().next() {
            None => return Ok(crate::Removals::Read { after: 0, snapshots: Vec::new() }),
            Some((v, Ok(d))) if *v == 1 || d.kind == DeltaKind::Snapshot => *v,
            Some((v, Ok(_))) => {
                return Ok(crate::Removals::Unreadable {
                    version: *v,
                    reason: "the lineage's first journal entry is neither version 1 nor a snapshot".into(),
                })
            }
            Some((v, Err(e))) => {
                return Ok(crate::Removals::Unreadable {
                    version: *v,
                    reason: format!("its entry cannot be decoded ({e})"),
                })
            }
        },
    };
    let mut snapshots = Vec::new();
    for v in after.saturating_add(1)..=upto {
        match sidecars.get(&v) {
            Some(Ok(d)) if d.kind == DeltaKind::Snapshot => snapshots.push(v),
            Some(Ok(d)) => {
                for e in d.removed.iter().filter(|e| range.is_all() || range.concerns(&e.identity.uri)) {
                    visit(e.identity.clone())?;
                }
            }
            Some(Err(e)) => {
                return Ok(crate::Removals::Unreadable {
                    version: v,
                    reason: format!("its entry cannot be decoded ({e})"),
                })
            }
            None => return Ok(crate::Removals::Unreadable { version: v, reason: "it has no journal entry".into() }),
        }
    }
    Ok(crate::Removals::Read { after, snapshots })
}
