//! [`DeferredReport`]: an S3 Inventory report read only when a plan first lists from it.
//!
//! Reading a report downloads and sorts every row of it (N rows for N keys), which only a full
//! plan needs: an incremental plan lists the few keys minted since its GC state itself
//! (`crate::collector::Listing::Own`). So `lake gc --inventory URL` checks at once only what is
//! cheap (an S3 lake, a manifest URL) and reads and checks the report (its checksums, its age by
//! the store's clock, its lake: [`ReportInventory::open`]) when a full plan first lists or asks
//! for GC's own garbage. A report that fails a check then fails that plan with the same error,
//! before anything is planned or deleted; an incremental run never reads it, so a report older
//! than the state does not stop it.

use super::{parse_url, ReportInventory, ReportOptions, ReportSummary};
use crate::error::GcError;
use crate::inventory::{InventoryEntry, InventoryPage, ObjectInventory};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::stream::{BoxStream, StreamExt};
use lake_store::store::LakeStore;
use lake_store::StoreError;
use std::sync::Arc;

/// An S3 Inventory report read and checked on first use (see the module documentation).
/// Cheap to clone: clones share the report once read.
#[derive(Debug, Clone)]
pub struct DeferredReport {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: LakeStore,
    url: String,
    options: ReportOptions,
    opened: tokio::sync::OnceCell<ReportInventory>,
}

impl DeferredReport {
    /// The report whose manifest is at `manifest_url` (`s3://bucket/.../manifest.json`) for the
    /// lake in `store`, read when first needed with `options`.
    ///
    /// # Errors
    /// [`StoreError::Root`] for a local lake or a URL that names no manifest (checked now).
    pub fn new(store: &LakeStore, manifest_url: &str, options: &ReportOptions) -> Result<Self, GcError> {
        if store.s3_requests().is_none() {
            return Err(GcError::from(StoreError::Root {
                root: store.display_root(),
                message: "an S3 Inventory report describes an S3 bucket, and this lake is a local folder; plan from its own listing, without the report".into(),
            }));
        }
        parse_url(manifest_url)?;
        let inner = Inner {
            store: store.clone(),
            url: manifest_url.to_string(),
            options: options.clone(),
            opened: tokio::sync::OnceCell::new(),
        };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// The report, read and checked on the first call ([`ReportInventory::open`]); a call after
    /// a failed one tries again.
    ///
    /// # Errors
    /// As [`ReportInventory::open`].
    pub async fn open(&self) -> Result<&ReportInventory, GcError> {
        let i = &self.inner;
        i.opened.get_or_try_init(|| ReportInventory::open(&i.store, &i.url, &i.options)).await
    }

    /// The report's summary once it was read (`None`: no plan needed it).
    pub fn summary(&self) -> Option<ReportSummary> {
        self.inner.opened.get().map(ReportInventory::summary)
    }
}

impl ObjectInventory for DeferredReport {
    /// The report's listing ([`ReportInventory`]'s), after reading the report; its error as the
    /// only item when it cannot be read or fails a check.
    fn list_from(&self, after: Option<String>, page_size: usize) -> BoxStream<'_, Result<InventoryPage, GcError>> {
        let mut after = Some(after);
        futures::stream::once(self.open())
            .flat_map(move |opened| match opened {
                Ok(report) => report.list_from(after.take().flatten(), page_size),
                Err(e) => futures::stream::once(futures::future::ready(Err(e))).boxed(),
            })
            .boxed()
    }

    /// The report's own garbage (its live listing's), after reading the report.
    fn own_garbage(&self, cutoff: DateTime<Utc>) -> BoxFuture<'_, Result<Vec<InventoryEntry>, GcError>> {
        Box::pin(async move { self.open().await?.own_garbage(cutoff).await })
    }
}
