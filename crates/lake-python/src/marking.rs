//! Marking plain DataLocation columns: Python users build `pa.struct([("uri", pa.string()),
//! ("sha256", pa.binary(32)), ("size", pa.uint64())])` columns by hand, whose children pyarrow
//! makes nullable, and without the `lake.data_location` extension marker. The engine treats a
//! column of exactly the layout as a reference column whether or not it is marked
//! (`lake_common::location`), but refuses one whose children are nullable as a look-alike.
//!
//! [`MarkingReader`] wraps an Arrow stream and, for every top-level column whose type is the
//! DataLocation struct (or a list of it) by child names and types, whatever the children's
//! nullability and marker, gives the marked DataLocation field with non-nullable children. The
//! arrays are reused (no copy); a null child inside a non-null location fails the batch with the
//! row's column named. Any other column passes through untouched (a look-alike with other
//! child types is judged, and refused, by the engine).
//!
//! The reader also ends the stream with an error once its `stop` flag is set (Ctrl-C): the
//! write then fails before its commit, unless Lance had already read every batch.

use arrow_array::{Array, ArrayRef, ListArray, RecordBatch, RecordBatchReader, StructArray};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Schema, SchemaRef};
use lake_common::location::{data_location_field, data_location_list_field, data_location_type};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How a column is rewritten.
#[derive(Debug, Clone, Copy)]
enum Rewrite {
    Keep,
    Single,
    List,
}

fn same_layout(dt: &DataType) -> bool {
    match (dt, data_location_type()) {
        (DataType::Struct(given), DataType::Struct(wanted)) => {
            given.len() == wanted.len()
                && given.iter().zip(wanted.iter()).all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type())
        }
        _ => false,
    }
}

fn rewrite_of(field: &Field) -> Rewrite {
    match field.data_type() {
        dt if same_layout(dt) => Rewrite::Single,
        DataType::List(item) if same_layout(item.data_type()) => Rewrite::List,
        _ => Rewrite::Keep,
    }
}

/// An Arrow stream whose plain DataLocation columns are marked (see the module documentation).
pub struct MarkingReader {
    inner: Box<dyn RecordBatchReader + Send>,
    schema: SchemaRef,
    rewrites: Vec<Rewrite>,
    stop: Arc<AtomicBool>,
}

impl MarkingReader {
    /// Wraps `inner`; its schema decides which columns are rewritten. Once `stop` is set, the
    /// next batch is an error.
    pub fn new(inner: Box<dyn RecordBatchReader + Send>, stop: Arc<AtomicBool>) -> Self {
        let given = inner.schema();
        let rewrites: Vec<Rewrite> = given.fields().iter().map(|f| rewrite_of(f)).collect();
        let fields: Vec<FieldRef> = given
            .fields()
            .iter()
            .zip(&rewrites)
            .map(|(f, r)| match r {
                Rewrite::Keep => f.clone(),
                Rewrite::Single => Arc::new(data_location_field(f.name(), f.is_nullable())),
                Rewrite::List => Arc::new(data_location_list_field(f.name(), f.is_nullable())),
            })
            .collect();
        let schema = Arc::new(Schema::new_with_metadata(fields, given.metadata().clone()));
        Self { inner, schema, rewrites, stop }
    }

    fn mark(&self, batch: RecordBatch) -> Result<RecordBatch, ArrowError> {
        let mut columns = Vec::with_capacity(batch.num_columns());
        for ((column, rewrite), field) in batch.columns().iter().zip(&self.rewrites).zip(self.schema.fields()) {
            columns.push(match rewrite {
                Rewrite::Keep => column.clone(),
                Rewrite::Single => as_location(column, field.name())?,
                Rewrite::List => {
                    let list = column
                        .as_any()
                        .downcast_ref::<ListArray>()
                        .ok_or_else(|| ArrowError::SchemaError(format!("column `{}` is not a list", field.name())))?;
                    let item = match field.data_type() {
                        DataType::List(item) => item.clone(),
                        _ => return Err(ArrowError::SchemaError(format!("column `{}` is not a list", field.name()))),
                    };
                    let values = as_location(list.values(), field.name())?;
                    Arc::new(ListArray::try_new(item, list.offsets().clone(), values, list.nulls().cloned())?)
                }
            });
        }
        RecordBatch::try_new(self.schema.clone(), columns)
    }
}

/// The struct `column` with non-nullable children (the same buffers).
fn as_location(column: &ArrayRef, name: &str) -> Result<ArrayRef, ArrowError> {
    let given = column
        .as_any()
        .downcast_ref::<StructArray>()
        .ok_or_else(|| ArrowError::SchemaError(format!("column `{name}` is not a struct")))?;
    let DataType::Struct(fields) = data_location_type() else {
        return Err(ArrowError::SchemaError("the DataLocation type is a struct".into()));
    };
    StructArray::try_new(fields, given.columns().to_vec(), given.nulls().cloned())
        .map(|a| Arc::new(a) as ArrayRef)
        .map_err(|e| {
            ArrowError::InvalidArgumentError(format!(
                "column `{name}`: a location with a null uri, sha256 or size ({e}); make the whole location null instead"
            ))
        })
}

impl Iterator for MarkingReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.stop.load(Ordering::SeqCst) {
            return Some(Err(ArrowError::ExternalError("interrupted (Ctrl-C): the write was stopped".into())));
        }
        Some(self.inner.next()?.and_then(|b| self.mark(b)))
    }
}

impl RecordBatchReader for MarkingReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}
