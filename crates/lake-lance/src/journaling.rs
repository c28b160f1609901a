//! [`JournalingReader`]: counts references per batch as Lance consumes the stream.
//!
//! Lance pulls one batch at a time from a `RecordBatchReader` (lance-14 facts), so this wrapper
//! sees each batch exactly when Lance takes it, adds its references to a shared count map and
//! hands the batch on without keeping it: memory is O(distinct identities), never O(rows).
//! A batch with an invalid reference becomes an `Err`, which aborts Lance's write (Lance deletes
//! the files written so far), and the typed error is kept for the caller.

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use lake_common::{LakeRootUri, LocationError, ReferenceColumns, ReferenceCounts};
use std::sync::{Arc, Mutex};

/// What the reader collected, shared with the caller.
#[derive(Debug, Default)]
pub struct JournalState {
    /// References seen so far.
    pub counts: ReferenceCounts,
    /// Rows seen so far.
    pub rows: u64,
    /// The first invalid reference, if any.
    pub failure: Option<LocationError>,
}

/// A `RecordBatchReader` that journals the references of every batch it yields.
pub struct JournalingReader {
    inner: Box<dyn RecordBatchReader + Send>,
    columns: ReferenceColumns,
    root: LakeRootUri,
    state: Arc<Mutex<JournalState>>,
}

impl JournalingReader {
    /// Wraps `inner`; the reference columns are validated from its schema first.
    ///
    /// # Errors
    /// [`LocationError::BadLayout`] when a marked column has the wrong layout.
    pub fn new(
        inner: Box<dyn RecordBatchReader + Send>,
        root: LakeRootUri,
    ) -> Result<(Self, Arc<Mutex<JournalState>>), LocationError> {
        let columns = ReferenceColumns::from_schema(&inner.schema())?;
        let state = Arc::new(Mutex::new(JournalState::default()));
        Ok((Self { inner, columns, root, state: state.clone() }, state))
    }
}

impl Iterator for JournalingReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let batch = match self.inner.next()? {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let JournalState { counts, rows, failure } = &mut *state;
        match self.columns.visit(&batch, &self.root, |id| counts.add(id, 1)) {
            Ok(()) => {
                *rows += batch.num_rows() as u64;
                Some(Ok(batch))
            }
            Err(e) => {
                let message = e.to_string();
                *failure = Some(e);
                Some(Err(ArrowError::InvalidArgumentError(message)))
            }
        }
    }
}

impl RecordBatchReader for JournalingReader {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}
