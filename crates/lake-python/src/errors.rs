//! Library errors as Python exceptions, in one place.
//!
//! Every error of the libraries becomes a [`Failure`] (its Python class, message and whether
//! retrying can help) through [`Failure::of`], which walks the error's source chain to the first
//! error whose type decides the class ([`kind_of`]). Failures are made where the work runs (on
//! the I/O runtime, without the GIL) and raised as Python exceptions where the GIL is held
//! ([`Failure::into_py`]). The classes are plain Python classes in `lake/_errors.py`, whose
//! `__module__` is `lake` so that they pickle by reference (`ProcessPoolExecutor`, Ray); every
//! raised instance has `transient` set.

use lake_gc::GcError;
use lake_lance::LanceEngineError;
use lake_store::StoreError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::error::Error as StdError;

/// The Python class of a failure (`lake.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `LakeError`: none of the others (a missing table or lake, a corrupt document of the lake,
    /// a checkpoint of another plan).
    Lake,
    /// `GuardError`: the publication guard refused a reference.
    Guard,
    /// `PolicyError`: a GC safety rule (policy floor, clock skew, plan binding, a checkpoint
    /// inside the lake) or a duration that is not one.
    Policy,
    /// `LineageError`: the journal cannot account for a table's versions.
    Lineage,
    /// `StorageError`: the store (or a local file) failed.
    Storage,
    /// `InputError` (also a `ValueError`): a value the caller gave is unusable.
    Input,
    /// `ObjectMissingError`: an object a reference names does not exist.
    ObjectMissing,
    /// `ObjectMismatchError`: an object's bytes differ from its reference's size or SHA-256.
    ObjectMismatch,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Lake => "LakeError",
            Kind::Guard => "GuardError",
            Kind::Policy => "PolicyError",
            Kind::Lineage => "LineageError",
            Kind::Storage => "StorageError",
            Kind::Input => "InputError",
            Kind::ObjectMissing => "ObjectMissingError",
            Kind::ObjectMismatch => "ObjectMismatchError",
        }
    }
}

/// A library error on its way to Python.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    kind: Kind,
    /// The error's stable name (`policy_floor`, `storage`, ...: the libraries' `kind()`), the
    /// exception's `kind`; `None` for a failure the binding made itself.
    name: Option<&'static str>,
    message: String,
    transient: bool,
    /// What a failed write committed, when the error says ([`Committed`]).
    committed: Committed,
}

/// What a failed write left in its table, as its error states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// Nothing: the error is one a write returns before its commit (or no write's error).
    Nothing,
    /// This version landed before the write failed
    /// ([`LanceEngineError::committed_version`]).
    Version(u64),
    /// The commit's outcome is not known yet ([`LanceEngineError::CommitUncertain`]).
    Unknown,
}

impl Failure {
    /// A permanent failure of class `kind`.
    pub fn new(kind: Kind, message: String) -> Self {
        Self { kind, name: None, message, transient: false, committed: Committed::Nothing }
    }

    /// The failure of `error`, whose class its source chain decides ([`kind_of`]).
    pub fn of(error: &(dyn StdError + 'static), transient: bool) -> Self {
        Self {
            kind: kind_of(error),
            name: name_of(error),
            message: error.to_string(),
            transient,
            committed: Committed::Nothing,
        }
    }

    /// The failure of a document the caller gave (a plan, a shard, a manifest): `InputError`,
    /// unless reading it failed in the store.
    pub fn input(error: GcError) -> Self {
        let failure = Failure::from(error);
        match failure.kind {
            Kind::Storage => failure,
            _ => Self { kind: Kind::Input, ..failure },
        }
    }

    /// A failure after `version` was committed (and journaled): `LakeError`, permanent, and the
    /// note of an interrupted write says the version landed.
    pub fn after_commit(version: u64, message: String) -> Self {
        Self { committed: Committed::Version(version), ..Self::new(Kind::Lake, message) }
    }

    /// The task running a call ended without an answer (a panic in the library: a bug).
    pub fn task_failed(e: &tokio::task::JoinError) -> Self {
        Self::new(Kind::Lake, format!("the operation's task failed: {e}; please report this as a bug of lake"))
    }

    /// What the failed write committed, as its error states it.
    pub fn committed(&self) -> Committed {
        self.committed
    }

    /// The Python exception: `lake.<class>(message)` with `transient` set.
    pub fn into_py(self, py: Python<'_>) -> PyErr {
        let raised = (|| -> PyResult<PyErr> {
            let class = py.import("lake._errors")?.getattr(self.kind.class_name())?;
            let value = class.call1((self.message.as_str(), self.transient, self.name))?;
            Ok(PyErr::from_value(value))
        })();
        raised.unwrap_or_else(|e| {
            PyRuntimeError::new_err(format!("{} (and lake's exception classes could not be loaded: {e})", self.message))
        })
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<Failure> for PyErr {
    fn from(failure: Failure) -> PyErr {
        Python::attach(|py| failure.into_py(py))
    }
}

impl From<GcError> for Failure {
    fn from(e: GcError) -> Self {
        Failure::of(&e, e.is_transient())
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::of(&e, e.is_transient())
    }
}

impl From<LanceEngineError> for Failure {
    fn from(e: LanceEngineError) -> Self {
        let committed = match (&e, e.committed_version()) {
            (_, Some(version)) => Committed::Version(version),
            (LanceEngineError::CommitUncertain { .. } | LanceEngineError::OutcomeLost { .. }, None) => {
                Committed::Unknown
            }
            _ => Committed::Nothing,
        };
        Failure { committed, ..Failure::of(&e, e.is_transient()) }
    }
}

/// The stable name of `error`: the `kind()` of the first of lake's error types in its source
/// chain (itself first); `None` when there is none.
pub(crate) fn name_of(error: &(dyn StdError + 'static)) -> Option<&'static str> {
    chain(error).find_map(|e| {
        if let Some(e) = e.downcast_ref::<GcError>() {
            Some(e.kind())
        } else if let Some(e) = e.downcast_ref::<StoreError>() {
            Some(e.kind())
        } else if let Some(e) = e.downcast_ref::<LanceEngineError>() {
            Some(e.kind())
        } else {
            e.downcast_ref::<lake_engine::EngineError>().map(|e| e.kind())
        }
    })
}

/// `error` and its sources, outermost first.
fn chain<'a>(error: &'a (dyn StdError + 'static)) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(error), |&e| e.source())
}

/// The class of `error`: that of the first error in its source chain (itself first) whose type
/// decides ([`own_kind`]); `LakeError` when none does.
pub(crate) fn kind_of(error: &(dyn StdError + 'static)) -> Kind {
    chain(error).find_map(own_kind).unwrap_or(Kind::Lake)
}

/// The class `e` decides by its type and variant, or `None` when its source decides.
fn own_kind(e: &(dyn StdError + 'static)) -> Option<Kind> {
    if let Some(e) = e.downcast_ref::<GcError>() {
        return gc_kind(e);
    }
    if let Some(e) = e.downcast_ref::<StoreError>() {
        return store_kind(e);
    }
    if let Some(e) = e.downcast_ref::<LanceEngineError>() {
        return engine_kind(e);
    }
    if let Some(e) = e.downcast_ref::<lake_engine::EngineError>() {
        return core_engine_kind(e);
    }
    if e.downcast_ref::<lake_store::guard::GuardError>().is_some() {
        return Some(Kind::Guard);
    }
    if e.downcast_ref::<lake_common::LocationError>().is_some() {
        return Some(Kind::Input);
    }
    if let Some(e) = e.downcast_ref::<lance::Error>() {
        return lance_kind(e);
    }
    if let Some(e) = e.downcast_ref::<arrow_schema::ArrowError>() {
        return match e {
            arrow_schema::ArrowError::ExternalError(_) | arrow_schema::ArrowError::IoError(..) => None,
            // An Arrow stream the caller gave that cannot be read or marked.
            _ => Some(Kind::Input),
        };
    }
    if e.downcast_ref::<object_store::Error>().is_some()
        || e.downcast_ref::<object_store::client::HttpError>().is_some()
        || e.downcast_ref::<std::io::Error>().is_some()
    {
        return Some(Kind::Storage);
    }
    None
}

fn gc_kind(e: &GcError) -> Option<Kind> {
    use GcError as E;
    Some(match e {
        // `transparent`: its `source()` skips the store's error, so judge that one here.
        E::Store(inner) => return store_kind(inner),
        // A path over a file of another kind (`Output`): a rule about what GC may write.
        E::Output { .. } => Kind::Policy,
        E::PlanIncomplete { .. } | E::LineageIncomplete { .. } | E::JournalPending { .. } => Kind::Lineage,
        // `transparent`: its `source()` skips the engine's error, so judge that one here.
        E::Engine(inner) => return core_engine_kind(inner),
        E::Checkpoint { .. } | E::InventoryReport { .. } => Kind::Lake,
    })
}

/// The store's kinds: a refusal, or a root GC may not use (a checkpoint inside the lake), is a
/// policy error.
fn store_kind(e: &StoreError) -> Option<Kind> {
    use StoreError as E;
    Some(match e {
        E::Refused { .. } | E::Root { .. } => Kind::Policy,
        E::Storage { .. } | E::Io { .. } | E::Registry { .. } => Kind::Storage,
        E::TableName(_) | E::ObjectUnreachable { .. } => Kind::Input,
        E::NotALake { .. } | E::Corrupt { .. } | E::Injected(_) => Kind::Lake,
        E::ObjectMissing { .. } => Kind::ObjectMissing,
        E::ObjectMismatch { .. } => Kind::ObjectMismatch,
        // `transparent`: its `source()` skips the engine's error, so judge that one here.
        E::Engine(inner) => return core_engine_kind(inner),
    })
}

fn engine_kind(e: &LanceEngineError) -> Option<Kind> {
    use LanceEngineError as E;
    Some(match e {
        E::Guard { .. } => Kind::Guard,
        E::Location { .. } | E::InvalidInput(_) | E::PieceRefused { .. } => Kind::Input,
        E::SidecarConflict { .. } | E::Unjournaled { .. } => Kind::Lineage,
        // A version's columns cannot be read, a table lake cannot journal, a version committed
        // past a check, a commit whose outcome is not known yet (its intent protects it).
        E::Unreadable { .. }
        | E::UnreadableTable { .. }
        | E::CommittedUnchecked { .. }
        | E::CommitUncertain { .. }
        | E::OutcomeLost { .. } => Kind::Lake,
        // Revoked: nothing of the attempt was published; the retry commits once.
        E::Revoked { .. } => Kind::Lake,
        E::JournalLog { .. } => Kind::Storage,
        E::NoSuchTable { .. } | E::ConcurrentCreate { .. } => Kind::Lake,
        // `transparent`: its `source()` skips the wrapped error, so judge that one here.
        E::Objects(inner) => return store_kind(inner),
        // What was wrapped decides (`NotCommitted`: why the commit failed; nothing landed).
        E::Lance { .. } | E::SidecarWrite { .. } | E::NotCommitted { .. } => return None,
    })
}

fn core_engine_kind(e: &lake_engine::EngineError) -> Option<Kind> {
    use lake_engine::EngineError as E;
    match e {
        E::Storage { .. } => Some(Kind::Storage),
        E::Lineage { .. } => Some(Kind::Lineage),
        E::InvalidInput(_) => Some(Kind::Input),
        E::Table { .. } => Some(Kind::Lake),
        // The implementation's error (a `LanceEngineError`) decides.
        E::Backend { .. } => None,
    }
}

fn lance_kind(e: &lance::Error) -> Option<Kind> {
    use lance::Error as L;
    match e {
        L::IO { .. } => Some(Kind::Storage),
        L::InvalidInput { .. }
        | L::SchemaMismatch { .. }
        | L::Schema { .. }
        | L::FieldNotFound { .. }
        | L::VersionNotFound { .. }
        | L::InvalidRef { .. }
        | L::RefNotFound { .. }
        | L::RefConflict { .. }
        | L::Arrow { .. } => Some(Kind::Input),
        // A reader's own error handed to Lance (lake's, or the caller's stream): it decides.
        L::External { .. } | L::Wrapped { .. } => None,
        _ => Some(Kind::Lake),
    }
}
