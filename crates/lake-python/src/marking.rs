//! Marking plain DataLocation columns: Python users build `pa.struct([("uri", pa.string()),
//! ("sha256", pa.binary(32)), ("size", pa.uint64())])` columns by hand, whose children pyarrow
//! makes nullable, and without the `lake.data_location` extension marker; polars and other
//! Arrow producers give the same columns (a lake table read back, say) with a `string_view` or
//! `large_string` uri and a variable-size binary sha256. The engine treats a column of exactly
//! the layout as a reference column whether or not it is marked (`::lake::common::location`), but
//! refuses one of another layout (a marked one, or a look-alike).
//!
//! [`MarkingReader`] wraps an Arrow stream and, for every top-level column of an *equivalent
//! layout* ([`is_equivalent_layout`]: the children `uri`, `sha256`, `size` in that order, `uri`
//! any Arrow string type, `sha256` any binary type whose values are 32 bytes, `size` a `uint64`,
//! whatever the children's nullability and marker), or a list or large list of one, gives the
//! marked DataLocation field with non-nullable children (`List` for a list). Canonical children
//! are reused (no copy); the others are converted. A null child inside a non-null location, or a
//! sha256 that is not 32 bytes, fails the batch with the column and row named. Any other column
//! passes through untouched (a look-alike with other child types, an `int64` size say, is
//! judged, and refused, by the engine). The Python package's `DataLocationType` reads exactly
//! these layouts back as the DataLocation type (`python/lake/__init__.py`).
//!
//! The reader also ends the stream with an error once its `stop` flag is set (Ctrl-C): the
//! write then fails before its commit, unless Lance had already read every batch.

use ::lake::common::location::{data_location_field, data_location_list_field, data_location_type};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, FixedSizeBinaryArray, LargeListArray, ListArray, RecordBatch, RecordBatchReader, StructArray,
};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Schema, SchemaRef};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How a column is rewritten.
#[derive(Debug, Clone, Copy)]
enum Rewrite {
    Keep,
    Single,
    List,
}

/// Whether `dt` is a DataLocation of an equivalent layout (see the module documentation).
pub(crate) fn is_equivalent_layout(dt: &DataType) -> bool {
    let DataType::Struct(children) = dt else { return false };
    let names: Vec<&str> = children.iter().map(|c| c.name().as_str()).collect();
    names == ["uri", "sha256", "size"]
        && matches!(children[0].data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
        && matches!(
            children[1].data_type(),
            DataType::FixedSizeBinary(32) | DataType::Binary | DataType::LargeBinary | DataType::BinaryView
        )
        && children[2].data_type() == &DataType::UInt64
}

fn rewrite_of(field: &Field) -> Rewrite {
    match field.data_type() {
        dt if is_equivalent_layout(dt) => Rewrite::Single,
        DataType::List(item) | DataType::LargeList(item) if is_equivalent_layout(item.data_type()) => Rewrite::List,
        _ => Rewrite::Keep,
    }
}

/// An Arrow stream whose plain DataLocation columns are marked (see the module documentation).
pub(crate) struct MarkingReader {
    inner: Box<dyn RecordBatchReader + Send>,
    schema: SchemaRef,
    rewrites: Vec<Rewrite>,
    stop: Arc<AtomicBool>,
}

impl MarkingReader {
    /// Wraps `inner`; its schema decides which columns are rewritten. Once `stop` is set, the
    /// next batch is an error.
    pub(crate) fn new(inner: Box<dyn RecordBatchReader + Send>, stop: Arc<AtomicBool>) -> Self {
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
                Rewrite::List => as_location_list(column, field)?,
            });
        }
        RecordBatch::try_new(self.schema.clone(), columns)
    }
}

/// The list (or large list) `column` of locations as a `List<DataLocation>` of `field`'s type.
fn as_location_list(column: &ArrayRef, field: &Field) -> Result<ArrayRef, ArrowError> {
    let name = field.name();
    let DataType::List(item) = field.data_type() else {
        return Err(ArrowError::SchemaError(format!("column `{name}` is not a list")));
    };
    let (offsets, values, nulls) = match column.data_type() {
        DataType::List(_) => {
            let list = column.as_list::<i32>();
            (list.offsets().clone(), list.values(), list.nulls())
        }
        DataType::LargeList(_) => {
            let list: &LargeListArray = column.as_list::<i64>();
            let narrow =
                list.offsets().iter().map(|o| i32::try_from(*o)).collect::<Result<Vec<i32>, _>>().map_err(|_| {
                    ArrowError::InvalidArgumentError(format!("column `{name}`: a list of more than 2^31 locations"))
                })?;
            (OffsetBuffer::new(ScalarBuffer::from(narrow)), list.values(), list.nulls())
        }
        other => return Err(ArrowError::SchemaError(format!("column `{name}` is a {other}, not a list"))),
    };
    let values = as_location(values, name)?;
    Ok(Arc::new(ListArray::try_new(item.clone(), offsets, values, nulls.cloned())?))
}

/// The struct `column` of an equivalent layout as the DataLocation type: non-nullable children,
/// a `Utf8` uri and a `FixedSizeBinary(32)` sha256 (canonical children reused as they are).
fn as_location(column: &ArrayRef, name: &str) -> Result<ArrayRef, ArrowError> {
    let given = column
        .as_any()
        .downcast_ref::<StructArray>()
        .ok_or_else(|| ArrowError::SchemaError(format!("column `{name}` is not a struct")))?;
    let DataType::Struct(fields) = data_location_type() else {
        return Err(ArrowError::SchemaError("the DataLocation type is a struct".into()));
    };
    let children = [uris(given.column(0), name)?, shas(given.column(1), given, name)?, given.column(2).clone()];
    StructArray::try_new(fields, children.to_vec(), given.nulls().cloned())
        .map(|a| Arc::new(a) as ArrayRef)
        .map_err(|e| {
            ArrowError::InvalidArgumentError(format!(
                "column `{name}`: a location with a null uri, sha256 or size ({e}); make the whole location null instead"
            ))
        })
}

/// A `uri` child as `Utf8`.
fn uris(child: &ArrayRef, name: &str) -> Result<ArrayRef, ArrowError> {
    match child.data_type() {
        DataType::Utf8 => Ok(child.clone()),
        // Arrow's cast refuses (never truncates) more than 2 GiB of uris in one batch.
        DataType::LargeUtf8 | DataType::Utf8View => arrow::compute::cast(child, &DataType::Utf8)
            .map_err(|e| ArrowError::InvalidArgumentError(format!("column `{name}`: its uris as utf8: {e}"))),
        other => Err(ArrowError::SchemaError(format!("column `{name}`: a uri of type {other}"))),
    }
}

/// A `sha256` child as `FixedSizeBinary(32)`; a value of another length (in a non-null
/// location) is refused with its row.
fn shas(child: &ArrayRef, parent: &StructArray, name: &str) -> Result<ArrayRef, ArrowError> {
    let values: Vec<Option<&[u8]>> = match child.data_type() {
        DataType::FixedSizeBinary(32) => return Ok(child.clone()),
        DataType::Binary => child.as_binary::<i32>().iter().collect(),
        DataType::LargeBinary => child.as_binary::<i64>().iter().collect(),
        DataType::BinaryView => child.as_binary_view().iter().collect(),
        other => return Err(ArrowError::SchemaError(format!("column `{name}`: a sha256 of type {other}"))),
    };
    let mut kept = Vec::with_capacity(values.len());
    for (row, value) in values.into_iter().enumerate() {
        // A null location's children are not data: they become null.
        kept.push(match value {
            Some(v) if parent.is_valid(row) && v.len() != 32 => {
                return Err(ArrowError::InvalidArgumentError(format!(
                    "column `{name}` row {row}: a sha256 of {} bytes; a SHA-256 has 32",
                    v.len()
                )))
            }
            Some(v) if parent.is_valid(row) => Some(v),
            _ => None,
        });
    }
    Ok(Arc::new(FixedSizeBinaryArray::try_from_sparse_iter_with_size(kept.into_iter(), 32)?))
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
