//! Index creation and removal through the engine: content-preserving versions (a Lance
//! `CreateIndex` transaction changes index metadata, never fragments or schema), journaled as
//! empty deltas like compaction (`crate::foreign::CONTENT_PRESERVING`).

use crate::commit::change::{Change, Journal, Made};
use crate::engine::{CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::scan::writable_columns;
use lance::index::DatasetIndexExt;
use lance_index::scalar::{InvertedIndexParams, ScalarIndexParams};
use lance_index::{IndexParams, IndexType};

/// The kinds of index the engine builds, all with Lance's default parameters.
///
/// Scalar kinds speed up filters (`--where`) on one column; `Inverted` is a full-text index of a
/// string column. Vector indexes are not offered yet (they need training parameters); one built
/// by another Lance client is still content-preserving and needs no repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    /// A B-tree: range and equality filters on a sortable column.
    Btree,
    /// A bitmap: equality filters on a column with few distinct values.
    Bitmap,
    /// A label list: `array_has_any` / `array_has_all` filters on a list column.
    LabelList,
    /// An n-gram index: `contains` filters on a string column.
    Ngram,
    /// A zone map: min/max per zone of rows, for range filters on large tables.
    Zonemap,
    /// A bloom filter: equality filters on a high-cardinality column.
    Bloomfilter,
    /// An inverted (full-text search) index on a string column.
    Inverted,
}

impl IndexKind {
    /// Every kind, as [`IndexKind::name`] spells it.
    pub const ALL: [IndexKind; 7] = [
        IndexKind::Btree,
        IndexKind::Bitmap,
        IndexKind::LabelList,
        IndexKind::Ngram,
        IndexKind::Zonemap,
        IndexKind::Bloomfilter,
        IndexKind::Inverted,
    ];

    /// The kind's name on the command line: `btree`, `bitmap`, `label_list`, `ngram`, `zonemap`,
    /// `bloomfilter`, `inverted`.
    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Btree => "btree",
            IndexKind::Bitmap => "bitmap",
            IndexKind::LabelList => "label_list",
            IndexKind::Ngram => "ngram",
            IndexKind::Zonemap => "zonemap",
            IndexKind::Bloomfilter => "bloomfilter",
            IndexKind::Inverted => "inverted",
        }
    }

    fn lance_type(self) -> IndexType {
        match self {
            IndexKind::Btree => IndexType::BTree,
            IndexKind::Bitmap => IndexType::Bitmap,
            IndexKind::LabelList => IndexType::LabelList,
            IndexKind::Ngram => IndexType::NGram,
            IndexKind::Zonemap => IndexType::ZoneMap,
            IndexKind::Bloomfilter => IndexType::BloomFilter,
            IndexKind::Inverted => IndexType::Inverted,
        }
    }

    fn params(self) -> Box<dyn IndexParams> {
        match self {
            IndexKind::Inverted => Box::new(InvertedIndexParams::default()),
            kind => Box::new(ScalarIndexParams::new(kind.lance_type().to_string())),
        }
    }
}

impl std::str::FromStr for IndexKind {
    type Err = LanceEngineError;

    /// Parses [`IndexKind::name`], ignoring case.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] naming the kinds there are.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IndexKind::ALL.into_iter().find(|k| k.name().eq_ignore_ascii_case(s)).ok_or_else(|| {
            let names: Vec<&str> = IndexKind::ALL.iter().map(|k| k.name()).collect();
            LanceEngineError::InvalidInput(format!("unknown index kind `{s}`; one of: {}", names.join(", ")))
        })
    }
}

/// One index of a table, as Lance lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IndexInfo {
    /// The index's name.
    pub name: String,
    /// The columns it covers.
    pub columns: Vec<String>,
    /// Lance's name of its type (`BTree`, `Inverted`, ...).
    pub kind: String,
}

impl LanceEngine {
    /// Builds an index of `kind` on `column` of `table`, named `name` (Lance's default
    /// `<column>_idx` when `None`), replacing an index of that name when `replace`. One new
    /// version, journaled as an empty delta.
    ///
    /// # Errors
    /// [`LanceEngineError::UnreadableTable`] (nothing committed); Lance errors (an unknown
    /// column, a type the index does not support, an existing index without `replace`); sidecar
    /// and registry errors.
    pub async fn create_index(
        &self,
        table: &str,
        column: &str,
        kind: IndexKind,
        name: Option<&str>,
        replace: bool,
    ) -> Result<CommitOutcome, LanceEngineError> {
        writable_columns(&self.open(table).await?, table)?;
        let (table_name, column, name) = (table.to_string(), column.to_string(), name.map(str::to_string));
        let run: crate::commit::change::InLanceCall = Box::new(move |mut ds| {
            Box::pin(async move {
                let params = kind.params();
                let columns = [column.as_str()];
                let mut builder =
                    ds.create_index_builder(&columns, kind.lance_type(), params.as_ref()).replace(replace);
                if let Some(name) = name {
                    builder = builder.name(name);
                }
                builder.await.map_err(|source| LanceEngineError::Lance {
                    table: table_name,
                    action: "create index",
                    source,
                })?;
                Ok(Made { dataset: ds, rows: 0 })
            })
        });
        self.commit_content_preserving(table, "create_index", run).await
    }

    /// Removes the index `name` of `table`: one new version, journaled as an empty delta.
    ///
    /// # Errors
    /// [`LanceEngineError::UnreadableTable`] (nothing committed); Lance errors (no index of that
    /// name); sidecar and registry errors.
    pub async fn drop_index(&self, table: &str, name: &str) -> Result<CommitOutcome, LanceEngineError> {
        writable_columns(&self.open(table).await?, table)?;
        let (table_name, name) = (table.to_string(), name.to_string());
        let run: crate::commit::change::InLanceCall = Box::new(move |mut ds| {
            Box::pin(async move {
                ds.drop_index(&name).await.map_err(|source| LanceEngineError::Lance {
                    table: table_name,
                    action: "drop index",
                    source,
                })?;
                Ok(Made { dataset: ds, rows: 0 })
            })
        });
        self.commit_content_preserving(table, "drop_index", run).await
    }

    /// Commits Lance's own content-preserving call `run` on `table` through the write protocol
    /// (journaled as empty entries).
    ///
    /// # Errors
    /// As [`LanceEngine::create_index`].
    pub(crate) async fn commit_content_preserving(
        &self,
        table: &str,
        operation: &'static str,
        run: crate::commit::change::InLanceCall,
    ) -> Result<CommitOutcome, LanceEngineError> {
        let change = Change::in_lance(table, operation, table, None, Journal::ContentPreserving, run);
        Ok(self.commit(change).await?.outcome(table, 0))
    }

    /// The indexes of `table` at its latest version.
    ///
    /// # Errors
    /// Lance errors.
    pub async fn indexes(&self, table: &str) -> Result<Vec<IndexInfo>, LanceEngineError> {
        let ds = self.open(table).await?;
        let descriptions = ds.describe_indices(None).await.map_err(|source| LanceEngineError::Lance {
            table: table.into(),
            action: "list indexes",
            source,
        })?;
        let schema = ds.schema();
        Ok(descriptions
            .iter()
            .map(|d| IndexInfo {
                name: d.name().to_string(),
                columns: d
                    .field_ids()
                    .iter()
                    .map(|id| {
                        let field = i32::try_from(*id).ok().and_then(|id| schema.field_by_id(id));
                        field.map_or_else(|| format!("<field {id}>"), |f| f.name.clone())
                    })
                    .collect(),
                kind: d.index_type().to_string(),
            })
            .collect())
    }
}
