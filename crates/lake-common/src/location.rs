//! The `DataLocation` Arrow type: how a column marks object references.
//!
//! A DataLocation is `Struct{uri: Utf8, sha256: FixedSizeBinary(32), size: UInt64}` (all three
//! children non-nullable), marked by `ARROW:extension:name` = [`DATA_LOCATION_EXTENSION_NAME`]
//! in the field's metadata. The field's type may also be `List<DataLocation>` (an episode with
//! several files). A null struct or a null list element is no reference.
//!
//! The layout, not the marker, makes a reference column: a second Lance client can drop the
//! marker (`replace_field_metadata`, a `merge` of a column built without it) while the rows
//! still reference objects. So a top-level column of exactly the DataLocation layout is a
//! reference column whether or not it is marked. Refused, never skipped (a skipped reference
//! column would make its objects look unreferenced), each with a [`LocationError`]:
//! - a marked field of another layout ([`LocationError::BadLayout`]);
//! - an unmarked struct with two of the children `uri`, `sha256`, `size` that is not exactly the
//!   layout (a child renamed by `alter_columns`, say) (what a round trip through Python objects makes: `binary` and `int64`; or the layout
//!   with extra children), alone or in a list ([`LocationError::LocationLike`]): lake cannot
//!   tell whether it references objects;
//! - a DataLocation, marked or not, or a look-alike, anywhere below the top level (inside a
//!   struct, a large or fixed-size list, a map, a list of lists) ([`LocationError::Nested`]);
//! - a Lance blob v2 column (extension `lance.blob.v2`), whose values can name objects by URI
//!   outside any DataLocation ([`LocationError::Unsupported`]).
//!
//! (Longer than most modules: the layout rules and the batch readers they guard belong
//! together, and its unit tests are a third of it.)

use crate::counts::ReferenceCounts;
use crate::error::LocationError;
use crate::identity::ObjectIdentity;
use crate::managed::{all_managed_keys, check_new_reference};
use crate::uri::{all_plain_keys, is_plain_key, normalize_reference, LakeRootUri};
use arrow_array::{
    Array, ArrayRef, FixedSizeBinaryArray, ListArray, RecordBatch, StringArray, StructArray, UInt64Array,
};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field, Fields, Schema};
use std::collections::HashMap;
use std::sync::Arc;

/// The Arrow extension name that marks a DataLocation field.
pub const DATA_LOCATION_EXTENSION_NAME: &str = "lake.data_location";
/// The Arrow metadata key that carries an extension name (Arrow's canonical key).
pub const EXTENSION_NAME_KEY: &str = "ARROW:extension:name";
/// The extension name of a Lance blob v2 column (Lance 14 `lance-core` `BLOB_V2_EXT_NAME`),
/// whose descriptors can reference external URIs.
pub const LANCE_BLOB_V2_EXTENSION_NAME: &str = "lance.blob.v2";
/// The field metadata key of Lance blob columns (Lance 14 `lance-arrow` `BLOB_META_KEY`).
const LANCE_BLOB_KEY: &str = "lance-encoding:blob";

fn struct_fields() -> Fields {
    Fields::from(vec![
        Field::new("uri", DataType::Utf8, false),
        Field::new("sha256", DataType::FixedSizeBinary(32), false),
        Field::new("size", DataType::UInt64, false),
    ])
}

/// The struct type of one DataLocation.
pub fn data_location_type() -> DataType {
    DataType::Struct(struct_fields())
}

fn marker() -> HashMap<String, String> {
    HashMap::from([(EXTENSION_NAME_KEY.to_string(), DATA_LOCATION_EXTENSION_NAME.to_string())])
}

/// A DataLocation field named `name`.
pub fn data_location_field(name: &str, nullable: bool) -> Field {
    Field::new(name, data_location_type(), nullable).with_metadata(marker())
}

/// A `List<DataLocation>` field named `name` (list elements nullable: a null element is no reference).
pub fn data_location_list_field(name: &str, nullable: bool) -> Field {
    let item = Field::new("item", data_location_type(), true);
    Field::new(name, DataType::List(Arc::new(item)), nullable).with_metadata(marker())
}

fn is_marked(field: &Field) -> bool {
    field.metadata().get(EXTENSION_NAME_KEY).map(String::as_str) == Some(DATA_LOCATION_EXTENSION_NAME)
}

/// Names and types of the three children match; with `strict`, children are also non-nullable.
/// Arrays read back from storage are checked without `strict` (a reader may widen child
/// nullability); a null child inside a non-null DataLocation is refused row by row.
fn struct_matches(dt: &DataType, strict: bool) -> bool {
    match dt {
        DataType::Struct(fields) => {
            fields.len() == 3
                && fields.iter().zip(struct_fields().iter()).all(|(a, b)| {
                    a.name() == b.name() && a.data_type() == b.data_type() && (!strict || !a.is_nullable())
                })
        }
        _ => false,
    }
}

/// Shape of one reference column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnShape {
    /// One DataLocation per row.
    Single,
    /// A list of DataLocations per row.
    List,
}

/// The validated reference columns of a schema, in schema order.
///
/// Made for reading by default: every reference a row holds is visited as it normalises. A
/// write of new rows uses [`ReferenceColumns::for_new_references`], which also refuses every
/// reference that names a key inside the lake root that is not a managed key
/// ([`crate::managed::check_new_reference`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceColumns {
    columns: Vec<(String, ColumnShape)>,
    /// The references are new (a write adds them): the rule of [`crate::managed`] applies.
    new_references: bool,
}

impl ReferenceColumns {
    /// Finds and validates every DataLocation column of `schema`.
    ///
    /// # Errors
    /// [`LocationError::BadLayout`] for a marked field with another layout or a marked field
    /// nested below the top level.
    pub fn from_schema(schema: &Schema) -> Result<Self, LocationError> {
        Self::from_schema_with(schema, true)
    }

    /// As [`ReferenceColumns::from_schema`] for a schema read back from storage, which may
    /// report the struct's children as nullable.
    ///
    /// # Errors
    /// [`LocationError::BadLayout`].
    pub fn from_stored_schema(schema: &Schema) -> Result<Self, LocationError> {
        Self::from_schema_with(schema, false)
    }

    fn from_schema_with(schema: &Schema, strict: bool) -> Result<Self, LocationError> {
        let mut columns = Vec::new();
        for field in schema.fields() {
            let name = field.name();
            if is_blob_v2(field) {
                return Err(LocationError::Unsupported {
                    column: name.clone(),
                    reason: "a Lance blob v2 column can reference objects by URI outside any DataLocation".into(),
                });
            }
            // A marked field must match strictly when asked; an unmarked one is judged by its
            // layout alone (a second client's schema may report the children as nullable).
            let marked = is_marked(field);
            match shape_of(field.data_type(), strict && marked) {
                Shape::Exact(shape) => columns.push((name.clone(), shape)),
                Shape::LocationLike if marked => {
                    return Err(LocationError::BadLayout {
                        column: name.clone(),
                        found: format!("{}", field.data_type()),
                    })
                }
                Shape::LocationLike => {
                    return Err(LocationError::LocationLike {
                        column: name.clone(),
                        found: format!("{}", field.data_type()),
                    })
                }
                Shape::Other if marked => {
                    return Err(LocationError::BadLayout {
                        column: name.clone(),
                        found: format!("{}", field.data_type()),
                    })
                }
                Shape::Other => check_no_nested_location(name, field.data_type())?,
            }
        }
        Ok(Self { columns, new_references: false })
    }

    /// The same columns for the rows a write adds: [`ReferenceColumns::visit`] (and every
    /// visit) then refuses a reference that names a key inside the lake root that is not a
    /// managed key ([`LocationError::BadUri`] with [`crate::UriError::NotManaged`]), and
    /// [`ReferenceColumns::canonical_arrays`] hands out only arrays of managed keys.
    pub fn for_new_references(mut self) -> Self {
        self.new_references = true;
        self
    }

    /// Whether the rule of [`ReferenceColumns::for_new_references`] applies.
    pub fn checks_new_references(&self) -> bool {
        self.new_references
    }

    /// Column names and shapes.
    pub fn columns(&self) -> &[(String, ColumnShape)] {
        &self.columns
    }

    /// Column names, for projecting a scan.
    pub fn names(&self) -> Vec<String> {
        self.columns.iter().map(|(n, _)| n.clone()).collect()
    }

    /// True when the schema has no reference column.
    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }

    /// Calls `visit` with the normalised identity of every non-null reference in `batch`.
    ///
    /// # Errors
    /// [`LocationError::MissingColumn`] when `batch` lacks a column, [`LocationError::BadLayout`]
    /// when its array is not the declared shape, [`LocationError::BadUri`] for a `uri` that
    /// cannot be normalised against `root` (or, for new references, that names an unmanaged
    /// key inside the root).
    pub fn visit(
        &self,
        batch: &RecordBatch,
        root: &LakeRootUri,
        mut visit: impl FnMut(ObjectIdentity),
    ) -> Result<(), LocationError> {
        self.visit_borrowed(batch, root, |uri, sha256, size| visit(ObjectIdentity::new(uri, *sha256, size)))
    }

    /// As [`ReferenceColumns::visit`], with the parts of each identity borrowed: the normalised
    /// `uri`, the SHA-256 and the size in bytes. A `uri` that is already canonical is passed
    /// straight from the batch, so a hot path allocates nothing per reference.
    ///
    /// # Errors
    /// As [`ReferenceColumns::visit`].
    pub fn visit_borrowed(
        &self,
        batch: &RecordBatch,
        root: &LakeRootUri,
        mut visit: impl FnMut(&str, &[u8; 32], u64),
    ) -> Result<(), LocationError> {
        for (name, shape) in &self.columns {
            let array =
                batch.column_by_name(name).ok_or_else(|| LocationError::MissingColumn { column: name.clone() })?;
            match shape {
                ColumnShape::Single => visit_struct(name, array, None, root, self.new_references, &mut visit)?,
                ColumnShape::List => {
                    let list = array.as_any().downcast_ref::<ListArray>().ok_or_else(|| bad_array(name, array))?;
                    let offsets = list.value_offsets();
                    for row in 0..list.len() {
                        if list.is_null(row) {
                            continue;
                        }
                        // Offsets of a valid ListArray are in bounds and non-decreasing.
                        let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
                        if end > start {
                            let values = list.values().slice(start, end - start);
                            visit_struct(name, &values, Some(row), root, self.new_references, &mut visit)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The `(uri, sha256, size)` child arrays of every reference column of `batch` when they can
    /// be journaled as they are: every column is a single DataLocation (not a list), no value is
    /// null, and every `uri` is already a canonical key ([`is_plain_key`]; for new references,
    /// a managed key). `None` otherwise (use [`ReferenceColumns::visit_borrowed`], which names
    /// the row at fault). Lets a writer copy whole arrays instead of visiting references one by
    /// one.
    pub fn canonical_arrays(&self, batch: &RecordBatch) -> Option<Vec<[ArrayRef; 3]>> {
        let mut out = Vec::with_capacity(self.columns.len());
        for (name, shape) in &self.columns {
            let array = batch.column_by_name(name)?;
            if *shape != ColumnShape::Single || array.null_count() > 0 || !struct_matches(array.data_type(), false) {
                return None;
            }
            let strukt = array.as_any().downcast_ref::<StructArray>()?;
            let children = [strukt.column(0).clone(), strukt.column(1).clone(), strukt.column(2).clone()];
            if children.iter().any(|c| c.null_count() > 0) {
                return None;
            }
            let uris = children[0].as_any().downcast_ref::<StringArray>()?;
            if !all_plain_keys(uris.value_data(), uris.value_offsets()) {
                return None;
            }
            // A plain key is inside the root: a new one must be managed.
            if self.new_references && !all_managed_keys(uris.value_data(), uris.value_offsets()) {
                return None;
            }
            out.push(children);
        }
        Some(out)
    }

    /// The reference counts of `batch` (a convenience over [`ReferenceColumns::visit`]).
    pub fn count(&self, batch: &RecordBatch, root: &LakeRootUri) -> Result<ReferenceCounts, LocationError> {
        let mut counts = ReferenceCounts::new();
        self.visit(batch, root, |id| counts.add(id, 1))?;
        Ok(counts)
    }
}

/// How a field's type relates to the DataLocation layout.
enum Shape {
    /// The layout itself, or a list of it.
    Exact(ColumnShape),
    /// A struct with the DataLocation's child names but other types (or a list of one).
    LocationLike,
    /// Anything else.
    Other,
}

fn shape_of(dt: &DataType, strict: bool) -> Shape {
    if struct_matches(dt, strict) {
        return Shape::Exact(ColumnShape::Single);
    }
    if let DataType::List(item) = dt {
        if struct_matches(item.data_type(), strict) {
            return Shape::Exact(ColumnShape::List);
        }
        if looks_like_location(item.data_type()) {
            return Shape::LocationLike;
        }
    }
    if looks_like_location(dt) {
        return Shape::LocationLike;
    }
    Shape::Other
}

/// A struct with two of the DataLocation's children (`uri`, `sha256`, `size`; in any letter case
/// (`URI`, `Size`: what a SQL engine or a pandas frame may spell), in any order, of any types,
/// with or without more children, or with the third renamed): it may hold references lake
/// cannot read with certainty.
fn looks_like_location(dt: &DataType) -> bool {
    match dt {
        DataType::Struct(fields) => {
            let has = |name: &str| fields.iter().any(|f| f.name().eq_ignore_ascii_case(name));
            [has("uri"), has("sha256"), has("size")].iter().filter(|h| **h).count() >= 2
        }
        _ => false,
    }
}

/// A Lance blob v2 field: marked `lance.blob.v2`, or shown as Lance shows such a column unloaded
/// (a struct of blob descriptors with the `lance-encoding:blob` key). A legacy blob column
/// (`LargeBinary` with that key) keeps its bytes in the data file and references nothing.
fn is_blob_v2(field: &Field) -> bool {
    field.metadata().get(EXTENSION_NAME_KEY).map(String::as_str) == Some(LANCE_BLOB_V2_EXTENSION_NAME)
        || (field.metadata().contains_key(LANCE_BLOB_KEY) && matches!(field.data_type(), DataType::Struct(_)))
}

/// Refuses a DataLocation (marked or not, or a look-alike) or a blob v2 column below the top
/// level of a field of type `dt`.
fn check_no_nested_location(path: &str, dt: &DataType) -> Result<(), LocationError> {
    let children: Vec<&Field> = match dt {
        DataType::Struct(fields) => fields.iter().map(|f| f.as_ref()).collect(),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => vec![f.as_ref()],
        DataType::Dictionary(_, value) => return check_no_nested_location(path, value),
        DataType::RunEndEncoded(_, values) => vec![values.as_ref()],
        DataType::Union(fields, _) => fields.iter().map(|(_, f)| f.as_ref()).collect(),
        _ => vec![],
    };
    for child in children {
        let child_path = format!("{path}.{}", child.name());
        let nested =
            is_marked(child) || is_blob_v2(child) || !matches!(shape_of(child.data_type(), false), Shape::Other);
        if nested {
            return Err(LocationError::Nested { column: child_path, found: format!("{}", child.data_type()) });
        }
        check_no_nested_location(&child_path, child.data_type())?;
    }
    Ok(())
}

fn bad_array(name: &str, array: &ArrayRef) -> LocationError {
    LocationError::BadLayout { column: name.to_string(), found: format!("{}", array.data_type()) }
}

fn visit_struct(
    name: &str,
    array: &ArrayRef,
    list_row: Option<usize>,
    root: &LakeRootUri,
    new_references: bool,
    visit: &mut impl FnMut(&str, &[u8; 32], u64),
) -> Result<(), LocationError> {
    let refuse = |row: usize, source| LocationError::BadUri { column: name.to_string(), row, source };
    if !struct_matches(array.data_type(), false) {
        return Err(bad_array(name, array));
    }
    let strukt = array.as_any().downcast_ref::<StructArray>().ok_or_else(|| bad_array(name, array))?;
    let uris = strukt.column(0).as_any().downcast_ref::<StringArray>().ok_or_else(|| bad_array(name, array))?;
    let shas =
        strukt.column(1).as_any().downcast_ref::<FixedSizeBinaryArray>().ok_or_else(|| bad_array(name, array))?;
    let sizes = strukt.column(2).as_any().downcast_ref::<UInt64Array>().ok_or_else(|| bad_array(name, array))?;
    for i in 0..strukt.len() {
        if strukt.is_null(i) {
            continue;
        }
        let row = list_row.unwrap_or(i);
        if uris.is_null(i) || shas.is_null(i) || sizes.is_null(i) {
            return Err(LocationError::BadLayout {
                column: name.to_string(),
                found: format!("a non-null DataLocation with a null child at row {row}"),
            });
        }
        // `struct_matches` checked FixedSizeBinary(32), so every value is 32 bytes.
        let sha: &[u8; 32] = shas.value(i).try_into().map_err(|_| bad_array(name, array))?;
        let raw = uris.value(i);
        if is_plain_key(raw) {
            if new_references {
                check_new_reference(raw, raw).map_err(|source| refuse(row, source))?;
            }
            visit(raw, sha, sizes.value(i));
        } else {
            let uri = normalize_reference(root, raw).map_err(|source| refuse(row, source))?.into_identity_uri();
            if new_references {
                check_new_reference(raw, &uri).map_err(|source| refuse(row, source))?;
            }
            visit(&uri, sha, sizes.value(i));
        }
    }
    Ok(())
}

/// Builds a DataLocation struct array row by row.
#[derive(Debug, Default)]
pub struct DataLocationBuilder {
    uris: Vec<String>,
    shas: Vec<[u8; 32]>,
    sizes: Vec<u64>,
    valid: Vec<bool>,
}

impl DataLocationBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one reference; `uri` as it should be stored in the row (a key relative to the
    /// lake root for managed objects).
    pub fn append(&mut self, uri: &str, sha256: [u8; 32], size: u64) {
        self.uris.push(uri.to_string());
        self.shas.push(sha256);
        self.sizes.push(size);
        self.valid.push(true);
    }

    /// Appends a null (no reference).
    pub fn append_null(&mut self) {
        self.uris.push(String::new());
        self.shas.push([0u8; 32]);
        self.sizes.push(0);
        self.valid.push(false);
    }

    /// Number of rows appended.
    pub fn len(&self) -> usize {
        self.valid.len()
    }

    /// True when nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.valid.is_empty()
    }

    /// The struct array (type [`data_location_type`]).
    pub fn finish(self) -> StructArray {
        let uris: ArrayRef = Arc::new(StringArray::from(self.uris));
        // Every element is exactly 32 bytes, so building the array cannot fail.
        let shas: ArrayRef = Arc::new(
            FixedSizeBinaryArray::try_from_iter(self.shas.iter().map(|s| s.as_slice()))
                .unwrap_or_else(|_| FixedSizeBinaryArray::new_null(32, 0)),
        );
        let sizes: ArrayRef = Arc::new(UInt64Array::from(self.sizes));
        let nulls = if self.valid.iter().all(|v| *v) { None } else { Some(NullBuffer::from(self.valid)) };
        StructArray::new(struct_fields(), vec![uris, shas, sizes], nulls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int32Array;
    use arrow_buffer::OffsetBuffer;

    fn root() -> LakeRootUri {
        LakeRootUri::parse("/lake").unwrap()
    }

    #[test]
    fn single_and_list_columns_yield_identities_and_skip_nulls() {
        let mut b = DataLocationBuilder::new();
        b.append("objects/A/x", [1; 32], 10);
        b.append_null();
        b.append("file:///lake/objects/A/x", [1; 32], 10);
        let single = b.finish();
        let mut items = DataLocationBuilder::new();
        items.append("objects/B/y", [2; 32], 20);
        items.append_null();
        items.append("https://ext/z", [3; 32], 30);
        let item_field = Arc::new(Field::new("item", data_location_type(), true));
        let list = ListArray::new(
            item_field,
            OffsetBuffer::from_lengths([2, 0, 1]),
            Arc::new(items.finish()),
            Some(NullBuffer::from(vec![true, false, true])),
        );
        let schema =
            Arc::new(Schema::new(vec![data_location_field("file", true), data_location_list_field("files", true)]));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(single), Arc::new(list)]).unwrap();
        let cols = ReferenceColumns::from_schema(&schema).unwrap();
        let counts = cols.count(&batch, &root()).unwrap();
        assert_eq!(counts.get(&ObjectIdentity::new("objects/A/x", [1; 32], 10)), 2);
        assert_eq!(counts.get(&ObjectIdentity::new("objects/B/y", [2; 32], 20)), 1);
        assert_eq!(counts.get(&ObjectIdentity::new("https://ext/z", [3; 32], 30)), 1);
        assert_eq!(counts.len(), 3);
    }

    #[test]
    fn marked_fields_with_another_layout_are_refused() {
        let wrong = [
            DataType::Utf8,
            DataType::Struct(Fields::from(vec![
                Field::new("uri", DataType::Utf8, false),
                Field::new("sha256", DataType::Binary, false),
                Field::new("size", DataType::UInt64, false),
            ])),
            DataType::Struct(Fields::from(vec![
                Field::new("uri", DataType::Utf8, true),
                Field::new("sha256", DataType::FixedSizeBinary(32), false),
                Field::new("size", DataType::UInt64, false),
            ])),
            DataType::Struct(Fields::from(vec![
                Field::new("uri", DataType::Utf8, false),
                Field::new("sha256", DataType::FixedSizeBinary(32), false),
                Field::new("size", DataType::Int64, false),
            ])),
            DataType::LargeList(Arc::new(Field::new("item", data_location_type(), true))),
        ];
        for dt in wrong {
            let schema = Schema::new(vec![Field::new("file", dt.clone(), true).with_metadata(marker())]);
            assert!(
                matches!(ReferenceColumns::from_schema(&schema), Err(LocationError::BadLayout { .. })),
                "{dt} must be refused"
            );
        }
        let nested = Schema::new(vec![Field::new(
            "meta",
            DataType::Struct(Fields::from(vec![data_location_field("f", true)])),
            true,
        )]);
        assert!(matches!(ReferenceColumns::from_schema(&nested), Err(LocationError::Nested { .. })));
    }

    fn struct_of(uri: DataType, sha: DataType, size: DataType, nullable: bool) -> DataType {
        DataType::Struct(Fields::from(vec![
            Field::new("uri", uri, nullable),
            Field::new("sha256", sha, nullable),
            Field::new("size", size, nullable),
        ]))
    }

    /// A second client drops the marker (`replace_field_metadata`, a `merge` of a plain struct):
    /// the layout alone still makes a reference column, single or list, with nullable children.
    #[test]
    fn unmarked_columns_of_the_layout_are_reference_columns() {
        let exact = struct_of(DataType::Utf8, DataType::FixedSizeBinary(32), DataType::UInt64, true);
        let list = DataType::List(Arc::new(Field::new("item", exact.clone(), true)));
        let schema = Schema::new(vec![
            Field::new("n", DataType::Int32, false),
            Field::new("file", exact, true),
            Field::new("files", list, true),
        ]);
        for cols in
            [ReferenceColumns::from_schema(&schema).unwrap(), ReferenceColumns::from_stored_schema(&schema).unwrap()]
        {
            assert_eq!(
                cols.columns(),
                &[("file".to_string(), ColumnShape::Single), ("files".to_string(), ColumnShape::List)]
            );
        }
    }

    /// Look-alikes (what a round trip through Python objects gives), nested DataLocations and
    /// Lance blob v2 columns are refused, marked or not: never skipped.
    #[test]
    fn look_alikes_nested_locations_and_blob_columns_are_refused() {
        let exact = struct_of(DataType::Utf8, DataType::FixedSizeBinary(32), DataType::UInt64, false);
        let python = struct_of(DataType::Utf8, DataType::Binary, DataType::Int64, true);
        let reordered = DataType::Struct(Fields::from(vec![
            Field::new("sha256", DataType::FixedSizeBinary(32), false),
            Field::new("uri", DataType::Utf8, false),
            Field::new("size", DataType::UInt64, false),
        ]));
        let item = |dt: DataType| Arc::new(Field::new("item", dt, true));
        let refused = [
            (python.clone(), "LocationLike"),
            (reordered, "LocationLike"),
            (struct_of(DataType::LargeUtf8, DataType::FixedSizeBinary(32), DataType::UInt64, false), "LocationLike"),
            (struct_of(DataType::Utf8View, DataType::FixedSizeBinary(32), DataType::UInt64, false), "LocationLike"),
            (
                DataType::Struct(Fields::from(vec![
                    Field::new("uri", DataType::Utf8, false),
                    Field::new("sha256", DataType::FixedSizeBinary(32), false),
                    Field::new("size", DataType::UInt64, false),
                    Field::new("mime", DataType::Utf8, true),
                ])),
                "LocationLike",
            ),
            (
                DataType::Struct(Fields::from(vec![
                    Field::new("uri", DataType::Utf8, false),
                    Field::new("size", DataType::UInt64, false),
                ])),
                "LocationLike",
            ),
            (
                DataType::Struct(Fields::from(vec![
                    Field::new("url", DataType::Utf8, false),
                    Field::new("sha256", DataType::FixedSizeBinary(32), false),
                    Field::new("size", DataType::UInt64, false),
                ])),
                "LocationLike",
            ),
            (
                DataType::Struct(Fields::from(vec![
                    Field::new("URI", DataType::Utf8, false),
                    Field::new("SHA256", DataType::FixedSizeBinary(32), false),
                    Field::new("Size", DataType::UInt64, false),
                ])),
                "LocationLike",
            ),
            (DataType::List(item(python)), "LocationLike"),
            (DataType::LargeList(item(exact.clone())), "Nested"),
            (DataType::FixedSizeList(item(exact.clone()), 2), "Nested"),
            (DataType::List(item(DataType::List(item(exact.clone())))), "Nested"),
            (DataType::Struct(Fields::from(vec![Field::new("inner", exact.clone(), true)])), "Nested"),
        ];
        for (dt, kind) in refused {
            let schema = Schema::new(vec![Field::new("file", dt.clone(), true)]);
            let err = ReferenceColumns::from_stored_schema(&schema).unwrap_err();
            let got = match err {
                LocationError::LocationLike { .. } => "LocationLike",
                LocationError::Nested { .. } => "Nested",
                other => panic!("{dt}: {other}"),
            };
            assert_eq!(got, kind, "{dt}");
        }
        let blob = Field::new("video", DataType::LargeBinary, true)
            .with_metadata(HashMap::from([(EXTENSION_NAME_KEY.to_string(), LANCE_BLOB_V2_EXTENSION_NAME.to_string())]));
        assert!(matches!(
            ReferenceColumns::from_stored_schema(&Schema::new(vec![blob])),
            Err(LocationError::Unsupported { .. })
        ));
        let legacy_blob = Field::new("video", DataType::LargeBinary, true)
            .with_metadata(HashMap::from([(LANCE_BLOB_KEY.to_string(), "true".to_string())]));
        assert!(ReferenceColumns::from_stored_schema(&Schema::new(vec![legacy_blob])).unwrap().is_empty());
    }

    #[test]
    fn unmarked_columns_are_not_references_and_bad_uris_are_refused() {
        let schema =
            Arc::new(Schema::new(vec![Field::new("n", DataType::Int32, false), data_location_field("file", false)]));
        let mut b = DataLocationBuilder::new();
        b.append("objects/../escape", [0; 32], 1);
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int32Array::from(vec![1])), Arc::new(b.finish())])
                .unwrap();
        let cols = ReferenceColumns::from_schema(&schema).unwrap();
        assert_eq!(cols.names(), vec!["file".to_string()]);
        assert!(matches!(cols.count(&batch, &root()), Err(LocationError::BadUri { row: 0, .. })));
    }
    /// A write's new references must be external or managed keys; reading a version accepts
    /// what it holds (it describes what another writer wrote). The fast path hands out only
    /// arrays of managed keys, so a bad key always reaches the check that names its row.
    #[test]
    fn new_references_inside_the_root_must_be_managed_keys() {
        let ulid = "01J9ZJ4G6W8X1Y2Z3A4B5C6D7E";
        let managed = format!("objects/{ulid}/x.bin");
        let schema = Arc::new(Schema::new(vec![data_location_field("file", true)]));
        let batch_of = |uris: &[&str]| {
            let mut b = DataLocationBuilder::new();
            for u in uris {
                b.append(u, [1; 32], 1);
            }
            RecordBatch::try_new(schema.clone(), vec![Arc::new(b.finish())]).unwrap()
        };
        let read = ReferenceColumns::from_schema(&schema).unwrap();
        let write = read.clone().for_new_references();
        assert!(write.checks_new_references() && !read.checks_new_references());
        let good = batch_of(&[&managed, "s3://elsewhere/objects/x", "https://example.com/a"]);
        assert_eq!(write.count(&good, &root()).unwrap(), read.count(&good, &root()).unwrap());
        assert!(write.canonical_arrays(&batch_of(&[&managed, &managed])).is_some());

        let spaced = format!("{managed} ");
        let file_url = format!("file:///lake/objects/{ulid}");
        for bad in [
            spaced.as_str(),
            &format!("objects/{ulid}"),
            "objects/x",
            "tables/t.lance/data/f.lance",
            "_lake/lake.json",
            file_url.as_str(),
            "file:///lake/tables/t.lance/data/f.lance",
        ] {
            let batch = batch_of(&[&managed, bad]);
            assert!(read.count(&batch, &root()).is_ok(), "reading accepts {bad:?}");
            assert!(write.canonical_arrays(&batch).is_none(), "{bad:?}");
            let err = write.count(&batch, &root()).unwrap_err();
            assert!(
                matches!(&err, LocationError::BadUri { row: 1, source: crate::UriError::NotManaged { uri, .. }, .. } if uri == bad),
                "{bad:?}: {err}"
            );
        }
        // The same in a list column.
        let list_schema = Arc::new(Schema::new(vec![data_location_list_field("files", true)]));
        let mut items = DataLocationBuilder::new();
        items.append(&managed, [1; 32], 1);
        items.append("objects/x", [1; 32], 1);
        let item_field = Arc::new(Field::new("item", data_location_type(), true));
        let list = ListArray::new(item_field, OffsetBuffer::from_lengths([1, 1]), Arc::new(items.finish()), None);
        let batch = RecordBatch::try_new(list_schema.clone(), vec![Arc::new(list)]).unwrap();
        let columns = ReferenceColumns::from_schema(&list_schema).unwrap();
        assert!(columns.count(&batch, &root()).is_ok());
        assert!(matches!(
            columns.for_new_references().count(&batch, &root()),
            Err(LocationError::BadUri { row: 1, .. })
        ));
    }
}
