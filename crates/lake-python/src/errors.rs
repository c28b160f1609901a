//! Library errors as Python exceptions, in one place.
//!
//! Every library error names its [`ErrorKind`] itself (its `kind()`); a [`Failure`] carries
//! that kind, the error's message and, for a write, what it committed. Failures are made where
//! the work runs (on the I/O runtime, without the GIL) and raised as Python exceptions where
//! the GIL is held ([`Failure::into_py`]). The exception's class is a table over the kind, kept
//! in Python (`lake/_errors.py`, `_CLASS_OF_KIND`, listed in docs/errors.md): this binding
//! never inspects an error's type. The classes' `__module__` is `lake`, so that they pickle by
//! reference (`ProcessPoolExecutor`, Ray); every raised instance has `kind` and `transient`.

use ::lake::collect::GcError;
use ::lake::common::ErrorKind;
use ::lake::lance::LanceEngineError;
use ::lake::store::StoreError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// A library error on its way to Python.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The error's kind: the exception's `kind` (its name), its class and `transient`.
    kind: ErrorKind,
    message: String,
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
    /// A failure of kind `kind` saying `message` (the binding's own checks).
    pub fn new(kind: ErrorKind, message: String) -> Self {
        Self { kind, message, committed: Committed::Nothing }
    }

    /// The failure of a document the caller gave (a plan, a shard, a manifest): its own kind
    /// when reading it failed in the store, else [`ErrorKind::InvalidInput`] (a corrupt or
    /// edited document given as an argument is the caller's input).
    pub fn input(error: GcError) -> Self {
        let failure = Failure::from(error);
        match failure.kind {
            ErrorKind::Storage | ErrorKind::Unavailable => failure,
            _ => Self { kind: ErrorKind::InvalidInput, ..failure },
        }
    }

    /// A failure after `version` was committed (and journaled): the note of an interrupted
    /// write says the version landed.
    pub fn after_commit(version: u64, message: String) -> Self {
        Self { committed: Committed::Version(version), ..Self::new(ErrorKind::Internal, message) }
    }

    /// The task running a call ended without an answer (a panic in the library: a bug).
    pub fn task_failed(e: &tokio::task::JoinError) -> Self {
        Self::new(ErrorKind::Internal, format!("the operation's task failed: {e}; please report this as a bug of lake"))
    }

    /// The failure's kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What the failed write committed, as its error states it.
    pub fn committed(&self) -> Committed {
        self.committed
    }

    /// The Python exception: `lake._errors.error_of_kind(kind, message, transient)`, an
    /// instance of the class the kind maps to.
    pub fn into_py(self, py: Python<'_>) -> PyErr {
        let raised = (|| -> PyResult<PyErr> {
            let make = py.import("lake._errors")?.getattr("error_of_kind")?;
            let value = make.call1((self.kind.as_str(), self.message.as_str(), self.kind.is_transient()))?;
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
        Failure::new(e.kind(), e.to_string())
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::new(e.kind(), e.to_string())
    }
}

impl From<::lake::engine::EngineError> for Failure {
    fn from(e: ::lake::engine::EngineError) -> Self {
        Failure::new(e.kind(), e.to_string())
    }
}

impl From<LanceEngineError> for Failure {
    fn from(e: LanceEngineError) -> Self {
        let committed = match (&e, e.committed_version()) {
            (_, Some(version)) => Committed::Version(version),
            (
                LanceEngineError::CommitUncertain { .. }
                | LanceEngineError::OutcomeLost { .. }
                | LanceEngineError::OutcomeUnknown { .. },
                None,
            ) => Committed::Unknown,
            _ => Committed::Nothing,
        };
        Failure { committed, ..Failure::new(e.kind(), e.to_string()) }
    }
}
