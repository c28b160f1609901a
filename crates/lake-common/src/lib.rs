//! Domain types of lake, shared by every other crate.
//!
//! - [`identity`]: [`ObjectIdentity`], the normalised reference to one immutable object.
//! - [`uri`]: normalisation of a row's `uri` against the lake root ([`normalize_reference`]).
//! - [`location`]: the `DataLocation` Arrow extension type, its exact-layout validation and
//!   per-batch identity extraction.
//! - [`managed`]: the managed key grammar (`objects/<ULID>/<name>`) and the rule every write
//!   applies to the references it adds ([`check_new_reference`]).
//! - [`delta`]: [`ObjectReferenceDelta`], the per-version reference journal ("sidecar"),
//!   with canonical encoding and fail-closed decoding.
//! - [`binding`]: [`VersionBinding`], what a journal entry records of the Lance version it
//!   describes (its transaction's UUID, its manifest's size and e-tag).
//! - [`counts`]: [`ReferenceCounts`], a count map that builds canonical deltas.
//! - [`intent`]: [`intent::WriteIntent`], the record of a commit that may still land (GC keeps
//!   its references).
//!
//! This crate knows nothing of Lance or of storage; it is pure data and rules.

/// The folder of managed objects under a lake root (no trailing slash): `objects/<ULID>/<name>`.
/// The one spelling of it; `lake_store::layout::OBJECTS_PREFIX` is this constant.
pub const MANAGED_PREFIX: &str = "objects";

pub mod binding;
pub mod counts;
pub mod delta;
pub mod error;
pub mod error_kind;
pub mod head;
pub mod identity;
pub mod intent;
mod local_route;
pub mod location;
pub mod managed;
pub mod reflog;
pub mod remedy;
mod s3_url;
pub mod uri;

pub use binding::{BindingCheck, ManifestIdentity, VersionBinding};
pub use counts::ReferenceCounts;
pub use delta::{
    DeltaKind, EntryList, ObjectReferenceDelta, ReferenceCount, SIDECAR_FORMAT_VERSION, UNBOUND_FORMAT_VERSION,
    UNSEALED_FORMAT_VERSIONS,
};
pub use error::{DecodeError, LocationError, UriError};
pub use error_kind::ErrorKind;
pub use head::{LogHead, LogRef, SidecarDocument};
pub use identity::ObjectIdentity;
pub use location::{
    data_location_field, data_location_list_field, data_location_type, DataLocationBuilder, ReferenceColumns,
    DATA_LOCATION_EXTENSION_NAME,
};
pub use managed::{check_new_reference, is_managed_key};
pub use reflog::{
    decode_reference_log, visit_reference_log, LogBlock, LogDecoder, LogIndex, LogTotals, ReferenceLogEncoder,
    SortedLogEncoder,
};
pub use remedy::Remedy;
pub use uri::{
    all_plain_keys, is_external_identity, is_plain_key, normalize_reference, LakeRootUri, NormalizedReference,
};
