//! The marker every staged transaction the write protocol commits carries: who wrote the version
//! (this lake's engine), for which lake root, as which operation and write id. Set in one place,
//! `crate::commit` (the protocol's `CommitBuilder`). Lance's own calls (an update, a merge, a
//! branch, an index) build their transactions inside themselves and are not marked: their
//! intents claim their versions instead (`crate::commit::recover`).
//!
//! Lance stores a transaction's `transaction_properties` (a string map) in the version's
//! transaction file and reads them back with `Dataset::read_transaction_by_version` (lance 14
//! `Transaction::transaction_properties`; `dataset_transactions::test_read_transaction_properties`
//! and this crate's `recovery::*` tests prove that they survive a commit and a rebase).
//!
//! The marker is what lets a version whose journal entry is missing, and whose write intent is
//! gone too, be journaled without an operator (`crate::commit::recover`). It is not a
//! signature: another Lance client can write the same properties. So it only decides whose
//! versions an operator must look at; the entry is always computed from the version's
//! manifests, and the guard's rule is checked again (docs/protocol.md, "Recovery").

use lance::dataset::transaction::Transaction;
use std::collections::HashMap;
use std::sync::Arc;

/// Property naming the writer: always [`WRITER`].
pub const WRITER_PROPERTY: &str = "lake.writer";
/// The value of [`WRITER_PROPERTY`].
pub const WRITER: &str = "lake";
/// Property naming the lake root the engine wrote for (its canonical URI).
pub const ROOT_PROPERTY: &str = "lake.root";
/// Property naming the operation (`append`, `overwrite`, `create`, `upsert`, `delete`, ...).
pub const OPERATION_PROPERTY: &str = "lake.operation";
/// Property naming the write id (a ULID: a streamed write's log id, else minted for the commit).
pub const WRITE_PROPERTY: &str = "lake.write";

/// What a lake commit's transaction says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitMarker {
    /// The lake root the engine wrote for (canonical URI, as `LakeRootUri` spells it).
    pub root: String,
    /// The operation (`append`, `delete`, ...).
    pub operation: String,
    /// The write id.
    pub write_id: String,
}

impl CommitMarker {
    /// The marker of a commit by the engine of `root`.
    pub fn new(root: &str, operation: &str, write_id: &str) -> Self {
        Self { root: root.into(), operation: operation.into(), write_id: write_id.into() }
    }

    /// Sets the marker's properties on `transaction`, keeping any other property it has.
    pub fn set_on(&self, transaction: &mut Transaction) {
        let mut properties: HashMap<String, String> =
            transaction.transaction_properties.as_deref().cloned().unwrap_or_default();
        properties.insert(WRITER_PROPERTY.into(), WRITER.into());
        properties.insert(ROOT_PROPERTY.into(), self.root.clone());
        properties.insert(OPERATION_PROPERTY.into(), self.operation.clone());
        properties.insert(WRITE_PROPERTY.into(), self.write_id.clone());
        transaction.transaction_properties = Some(Arc::new(properties));
    }

    /// The marker `transaction` carries; `None` when it has none (another client's commit, or
    /// a build before markers) or an incomplete one.
    pub fn of(transaction: &Transaction) -> Option<Self> {
        let properties = transaction.transaction_properties.as_deref()?;
        if properties.get(WRITER_PROPERTY).map(String::as_str) != Some(WRITER) {
            return None;
        }
        Some(Self {
            root: properties.get(ROOT_PROPERTY)?.clone(),
            operation: properties.get(OPERATION_PROPERTY)?.clone(),
            write_id: properties.get(WRITE_PROPERTY)?.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lance::dataset::transaction::Operation;

    fn transaction() -> Transaction {
        Transaction::new(3, Operation::Append { fragments: vec![] }, None)
    }

    #[test]
    fn a_marker_reads_back_and_keeps_other_properties() {
        let mut tx = transaction();
        tx.transaction_properties = Some(Arc::new(HashMap::from([("user".to_string(), "x".to_string())])));
        let marker = CommitMarker::new("file:///lake", "append", "01J");
        marker.set_on(&mut tx);
        assert_eq!(CommitMarker::of(&tx), Some(marker));
        assert_eq!(tx.transaction_properties.as_deref().and_then(|p| p.get("user")).map(String::as_str), Some("x"));
    }

    #[test]
    fn a_transaction_without_a_complete_marker_has_none() {
        let mut tx = transaction();
        assert_eq!(CommitMarker::of(&tx), None);
        tx.transaction_properties = Some(Arc::new(HashMap::from([
            (WRITER_PROPERTY.to_string(), WRITER.to_string()),
            (ROOT_PROPERTY.to_string(), "file:///lake".to_string()),
        ])));
        assert_eq!(CommitMarker::of(&tx), None);
        tx.transaction_properties = Some(Arc::new(HashMap::from([
            (WRITER_PROPERTY.to_string(), "other".to_string()),
            (ROOT_PROPERTY.to_string(), "file:///lake".to_string()),
            (OPERATION_PROPERTY.to_string(), "append".to_string()),
            (WRITE_PROPERTY.to_string(), "01J".to_string()),
        ])));
        assert_eq!(CommitMarker::of(&tx), None);
    }
}
