//! Normalisation of the `uri` a row carries, against the lake root.
//!
//! One function, [`normalize_reference`], decides whether a reference points inside the lake
//! root (and then which key), outside it, or cannot be told (refused). Every spelling that
//! names an object inside the root normalises to its key or is refused; none is taken for a
//! different object. Rules (each refusal is a [`UriError`]):
//! - a relative reference is a key relative to the root (`objects/01J.../a.mcap`); `%XX`
//!   escapes are decoded;
//! - anything that starts with an RFC 3986 scheme (`letter *( letter / digit / + / - / . ) :`)
//!   is a URL, whether or not `//` follows: `file:/p`, `file:///p`, `file://localhost/p` and
//!   `FILE:///p` are one spelling (RFC 8089, and the WHATWG URL rules the `url` crate follows);
//!   schemes are compared case-insensitively, `s3a://` and `s3n://` are aliases of `s3://` (as
//!   in Hadoop and Iceberg's `equal_schemes`);
//! - a URL whose scheme and authority equal the root's, or one of the root's other spellings
//!   ([`LakeRootUri::with_alias`]: the endpoint URL of an S3-compatible server, the path a local
//!   root was opened by), and whose decoded path lies under the root's path is the same key;
//! - an `http(s)://` URL of an Amazon S3 endpoint (`<bucket>.s3[.-]<region>.amazonaws.com/key`,
//!   `s3[.-]<region>.amazonaws.com/<bucket>/key`, dual-stack, accelerate and website forms, the
//!   forms of the S3 user guide's "Methods for accessing a bucket") names `s3://<bucket>/key`;
//! - for a local root bound to its folder ([`LakeRootUri::bind_local_folder`]), a `file:` URL
//!   that is not textually under the root is resolved on the file system (symbolic links,
//!   bind mounts: see `local_route`): a route that reaches the root's folder is the same key;
//! - everything else with a scheme is external and never a GC candidate;
//! - refused: empty references, `.`/`..` segments (`..` in URLs too, as written: URL parsing
//!   would resolve it textually, the file system after a symbolic link), empty segments (`//`, trailing `/`), bare
//!   absolute paths, query strings and fragments (signed URLs), user info (credentials),
//!   control characters and backslashes, invalid percent-encoding, URLs that are not
//!   hierarchical (`s3:bucket/key`, `urn:x`), a `file:` URL naming another host, a port on an
//!   `s3://` URL, an escaped or differently-cased spelling of the root's bucket or host.
//!
//! A sibling prefix that shares the root's first letters (`s3://b/lake-old/...` for root
//! `s3://b/lake`) is external: containment is decided per path segment, never per character
//! (the delta-rs `_dates_backup` bug).
//!
//! (Longer than most modules because of its unit tests; routes through the file system and
//! Amazon S3 endpoints are their own modules, `local_route` and `s3_url`.)

use crate::error::UriError;
use crate::local_route::{resolve_local_route, LocalFolderId};
use crate::s3_url::{self, S3Url};
use percent_encoding::percent_decode_str;
use url::Url;

/// One spelling of a lake root: `scheme://authority/segments...`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spelling {
    scheme: String,
    authority: String,
    /// Decoded path segments.
    segments: Vec<String>,
}

/// A normalised lake root: `scheme://authority/path` without a trailing slash.
///
/// Built from `file:///abs/path`, an absolute local path, or `s3://bucket/prefix`
/// (`s3a://`, `s3n://` accepted as aliases).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LakeRootUri {
    scheme: String,
    authority: String,
    /// Decoded path segments of the root.
    segments: Vec<String>,
    /// Other spellings that name the same folder or prefix.
    aliases: Vec<Spelling>,
    /// The root folder's identity on the file system, for a local root bound to it.
    local: Option<LocalFolderId>,
}

/// Where a reference points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NormalizedReference {
    /// Inside the lake root: the key relative to the root, segments joined by `/`.
    InRoot(String),
    /// Outside the lake root: the absolute URI (scheme aliases normalised). Never collected.
    External(String),
}

impl NormalizedReference {
    /// The string stored in an [`crate::ObjectIdentity`]: the key, or the external URI.
    pub fn into_identity_uri(self) -> String {
        match self {
            NormalizedReference::InRoot(k) | NormalizedReference::External(k) => k,
        }
    }
}

/// True when the `uri` of a normalised [`crate::ObjectIdentity`] is external (an absolute URI
/// outside the lake root, `scheme://...`), false when it is a key relative to the root. The one
/// test of "is this reference outside the lake": normalisation writes external references, and
/// only them, as `scheme://authority/path`, and refuses a key with an empty segment, so a key
/// never contains `://`.
pub fn is_external_identity(uri: &str) -> bool {
    uri.contains("://")
}

impl LakeRootUri {
    /// Parses a root. A plain path must be absolute (callers make relative paths absolute first).
    pub fn parse(root: &str) -> Result<Self, UriError> {
        let bad = |reason: &str| UriError::BadRoot { root: root.to_string(), reason: reason.to_string() };
        let url = if root.starts_with('/') {
            Url::from_file_path(root).map_err(|_| bad("not an absolute local path"))?
        } else {
            Url::parse(root).map_err(|e| bad(&e.to_string()))?
        };
        let scheme = canonical_scheme(url.scheme());
        if scheme != "file" && scheme != "s3" {
            return Err(bad("only file:// (or a local path) and s3:// roots are supported"));
        }
        if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
            return Err(bad("a root carries no query, fragment or credentials"));
        }
        let authority = url.host_str().unwrap_or("").to_string();
        if scheme == "s3" && authority.is_empty() {
            return Err(bad("an s3:// root names a bucket: s3://bucket/prefix"));
        }
        if scheme == "file" && !authority.is_empty() {
            return Err(bad("a file:// root is a folder on this machine: file:///abs/path"));
        }
        let mut segments = Vec::new();
        for seg in url.path().split('/').filter(|s| !s.is_empty()) {
            let decoded =
                percent_decode_str(seg).decode_utf8().map_err(|_| bad("invalid percent-encoding"))?.to_string();
            if decoded == "." || decoded == ".." {
                return Err(bad("`.` and `..` segments are not allowed"));
            }
            segments.push(decoded);
        }
        Ok(Self { scheme, authority, segments, aliases: Vec::new(), local: None })
    }

    /// The same root, also reached by `alias`: a URL prefix that names the same folder or prefix,
    /// such as the path-style URL of an S3-compatible server
    /// (`http://127.0.0.1:4566/bucket/prefix`) or the unresolved path a local root was opened by.
    /// References under an alias normalise to the same keys as under the root.
    ///
    /// # Errors
    /// [`UriError::BadRoot`] when `alias` is not an absolute hierarchical URL or path.
    pub fn with_alias(mut self, alias: &str) -> Result<Self, UriError> {
        let bad = |reason: &str| UriError::BadRoot { root: alias.to_string(), reason: reason.to_string() };
        let url = if alias.starts_with('/') {
            Url::from_file_path(alias).map_err(|_| bad("not an absolute local path"))?
        } else {
            Url::parse(alias).map_err(|e| bad(&e.to_string()))?
        };
        if url.cannot_be_a_base() || url.query().is_some() || url.fragment().is_some() {
            return Err(bad("an alias is a hierarchical URL without query or fragment"));
        }
        let raw = url.path().strip_prefix('/').unwrap_or(url.path());
        let segments = if raw.is_empty() { Vec::new() } else { decode_segments(alias, raw.trim_end_matches('/'))? };
        let spelling = Spelling { scheme: canonical_scheme(url.scheme()), authority: authority_of(&url), segments };
        if !self.aliases.contains(&spelling) {
            self.aliases.push(spelling);
        }
        Ok(self)
    }

    /// Binds a local root to its folder `path` (the folder the root names, resolved): a `file:`
    /// reference that is not textually under the root is then resolved on the file system, and
    /// is the same key when its route reaches this folder (see the module documentation).
    ///
    /// # Errors
    /// [`UriError::BadRoot`] when `path` cannot be read.
    pub fn bind_local_folder(mut self, path: &std::path::Path) -> Result<Self, UriError> {
        let id = LocalFolderId::of(path).map_err(|e| UriError::BadRoot {
            root: path.display().to_string(),
            reason: format!("cannot read the folder: {e}"),
        })?;
        self.local = Some(id);
        Ok(self)
    }

    /// `file` or `s3`.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The bucket of an `s3://` root; empty for `file://`.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The root's path below the authority, without leading or trailing slash
    /// (for `file://` roots the absolute path without its leading `/`).
    pub fn path(&self) -> String {
        self.segments.join("/")
    }

    /// The URI of a key inside the root, e.g. `s3://bucket/prefix/tables/t.lance`.
    pub fn join(&self, key: &str) -> String {
        let base = self.to_string();
        format!("{base}/{key}")
    }

    fn spellings(&self) -> impl Iterator<Item = (&str, &str, &[String])> {
        std::iter::once((self.scheme.as_str(), self.authority.as_str(), self.segments.as_slice()))
            .chain(self.aliases.iter().map(|a| (a.scheme.as_str(), a.authority.as_str(), a.segments.as_slice())))
    }
}

impl std::fmt::Display for LakeRootUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}/{}", self.scheme, self.authority, self.segments.join("/"))
    }
}

fn canonical_scheme(scheme: &str) -> String {
    match scheme.to_ascii_lowercase().as_str() {
        "s3a" | "s3n" => "s3".to_string(),
        other => other.to_string(),
    }
}

/// The host of `url` (as the `url` crate normalises it, without the trailing dot of a fully
/// qualified DNS name) with a non-default port.
fn authority_of(url: &Url) -> String {
    let host = url.host_str().unwrap_or("");
    let host = host.strip_suffix('.').filter(|h| !h.is_empty()).unwrap_or(host);
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// True when `uri` starts with an RFC 3986 scheme followed by `:` (`file:`, `s3:`, `HTTPS:`).
fn has_scheme(uri: &str) -> bool {
    let Some(colon) = uri.find(':') else { return false };
    let scheme = &uri[..colon];
    scheme.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
        && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'-' || b == b'.')
}

/// The first `..` segment of a URL as written (escaped or not, before any query or fragment),
/// which URL parsing would resolve textually (WHATWG URL rules, also for `%2e%2e`). A `.`
/// segment names the same folder either way and is left to the parser.
fn written_parent_segment(uri: &str) -> Option<String> {
    let before_query = uri.split(['?', '#']).next().unwrap_or(uri);
    before_query.split('/').skip(1).find_map(|raw| {
        let decoded = percent_decode_str(raw).decode_utf8_lossy();
        (decoded == "..").then(|| decoded.into_owned())
    })
}

/// Decodes and validates `/`-separated segments of a key.
fn decode_segments(original: &str, path: &str) -> Result<Vec<String>, UriError> {
    let mut out = Vec::new();
    for raw in path.split('/') {
        if raw.is_empty() {
            return Err(UriError::EmptySegment { uri: original.to_string() });
        }
        let decoded = percent_decode_str(raw)
            .decode_utf8()
            .map_err(|_| UriError::BadPercentEncoding { uri: original.to_string() })?;
        if raw.contains('%') && !valid_escapes(raw) {
            return Err(UriError::BadPercentEncoding { uri: original.to_string() });
        }
        if decoded == "." || decoded == ".." {
            return Err(UriError::DotSegment { uri: original.to_string(), segment: decoded.to_string() });
        }
        if decoded.contains('/') || decoded.chars().any(|c| c.is_control() || c == '\\') {
            return Err(UriError::BadCharacter { uri: original.to_string() });
        }
        out.push(decoded.to_string());
    }
    Ok(out)
}

fn valid_escapes(raw: &str) -> bool {
    let b = raw.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            if i + 2 >= b.len() || !b[i + 1].is_ascii_hexdigit() || !b[i + 2].is_ascii_hexdigit() {
                return false;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    true
}

/// The fast path for the common case (one pass, one allocation): a relative key of
/// `[A-Za-z0-9._-]` segments separated by single `/`, with no `.` or `..` segment, is already
/// normal. Anything else takes the general path.
fn plain_key(uri: &str) -> Option<String> {
    is_plain_key(uri).then(|| uri.to_string())
}

/// True when `uri` is already a canonical key relative to the root: segments of ASCII letters,
/// digits, `.`, `_` and `-`, none empty, `.` or `..`. [`normalize_reference`] returns such a
/// key unchanged, so callers on a hot path can use the borrowed string as is. One pass over the
/// bytes, no allocation.
pub fn is_plain_key(uri: &str) -> bool {
    /// 1: a key character; 2: `/`; 0: anything else (a table lookup keeps the loop branch-light).
    const CLASS: [u8; 256] = {
        let mut class = [0u8; 256];
        let mut b = 0;
        while b < 256 {
            let c = b as u8;
            if c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || c == b'-' {
                class[b] = 1;
            }
            b += 1;
        }
        class[b'/' as usize] = 2;
        class
    };
    fn segment_ok(s: &[u8]) -> bool {
        !s.is_empty() && s != b"." && s != b".."
    }
    let bytes = uri.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        match CLASS[b as usize] {
            1 => {}
            2 => {
                if !segment_ok(&bytes[start..i]) {
                    return false;
                }
                start = i + 1;
            }
            _ => return false,
        }
    }
    segment_ok(&bytes[start..])
}

/// True when every value of a Utf8 array's `values` buffer, cut at `offsets`, is a plain key
/// ([`is_plain_key`]): the same answer for every array, computed in bulk. One branch-free pass
/// checks the character set of the whole buffer; the segment rules then need only the values
/// that start or end with `.` or `/`, or that contain `//` or `/.` (found with SIMD substring
/// search over the whole buffer), and those few are checked one by one.
pub fn all_plain_keys(values: &[u8], offsets: &[i32]) -> bool {
    const fn key_byte(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-' || b == b'/'
    }
    let Some((&first, &last)) = offsets.first().zip(offsets.last()) else { return true };
    let (Ok(start), Ok(end)) = (usize::try_from(first), usize::try_from(last)) else { return false };
    let Some(used) = values.get(start..end) else { return false };
    // Branch-free over chunks so the compiler vectorises it.
    if !used.chunks(256).all(|chunk| chunk.iter().fold(true, |ok, &b| ok & key_byte(b))) {
        return false;
    }
    let value = |i: usize| -> Option<&str> {
        let (a, b) = (usize::try_from(offsets[i]).ok()?, usize::try_from(offsets[i + 1]).ok()?);
        std::str::from_utf8(values.get(a..b)?).ok()
    };
    let checked = |i: usize| value(i).is_some_and(is_plain_key);
    for i in 0..offsets.len() - 1 {
        let (a, b) = (offsets[i], offsets[i + 1]);
        let ends = usize::try_from(a).ok().zip(usize::try_from(b).ok()).filter(|(a, b)| b > a);
        let Some((Some(&head), Some(&tail))) = ends.map(|(a, b)| (values.get(a), values.get(b - 1))) else {
            return false;
        };
        if (head == b'.' || head == b'/' || tail == b'.' || tail == b'/') && !checked(i) {
            return false;
        }
    }
    // `//` and `/.` anywhere: check the value holding each hit (a hit across two values is a
    // false alarm that the check clears).
    for pattern in [&b"//"[..], &b"/."[..]] {
        for hit in memchr::memmem::find_iter(used, pattern) {
            let at = (first as usize + hit) as i32;
            let i = offsets.partition_point(|o| *o <= at).saturating_sub(1);
            if i + 1 < offsets.len() && !checked(i) {
                return false;
            }
        }
    }
    true
}

/// Normalises a row's `uri` against `root`. See the module documentation for the rules.
///
/// # Errors
/// [`UriError`] naming the reference and the rule it broke; the caller refuses the batch.
pub fn normalize_reference(root: &LakeRootUri, uri: &str) -> Result<NormalizedReference, UriError> {
    if uri.is_empty() {
        return Err(UriError::Empty);
    }
    if uri.chars().any(|c| c.is_control() || c == '\\') {
        return Err(UriError::BadCharacter { uri: uri.to_string() });
    }
    if let Some(key) = plain_key(uri) {
        return Ok(NormalizedReference::InRoot(key));
    }
    if !has_scheme(uri) {
        if uri.starts_with('/') {
            return Err(UriError::BareAbsolutePath { uri: uri.to_string() });
        }
        if uri.contains('?') || uri.contains('#') {
            return Err(UriError::QueryOrFragment { uri: uri.to_string() });
        }
        let segments = decode_segments(uri, uri)?;
        return Ok(NormalizedReference::InRoot(segments.join("/")));
    }
    // Before parsing: `Url::parse` resolves `..` textually, while the file system resolves it
    // after following a symbolic link, so the two can name different files.
    if let Some(segment) = written_parent_segment(uri) {
        return Err(UriError::DotSegment { uri: uri.to_string(), segment });
    }
    let url = Url::parse(uri).map_err(|e| UriError::Invalid { uri: uri.to_string(), reason: e.to_string() })?;
    if url.query().is_some() || url.fragment().is_some() {
        return Err(UriError::QueryOrFragment { uri: uri.to_string() });
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UriError::Credentials { uri: uri.to_string() });
    }
    let refuse = |reason: &str| UriError::Ambiguous { uri: uri.to_string(), reason: reason.to_string() };
    if url.cannot_be_a_base() {
        return Err(refuse("it is not a hierarchical URL (`scheme://authority/path`)"));
    }
    let scheme = canonical_scheme(url.scheme());
    let authority = authority_of(&url);
    if authority.contains('%') {
        return Err(refuse("its host is percent-encoded"));
    }
    if scheme == "file" && !authority.is_empty() {
        return Err(refuse("a file: URL naming another host cannot be told apart from a path on this machine"));
    }
    if scheme == "s3" && url.port().is_some() {
        return Err(refuse("an s3:// URL names a bucket, not a host and port"));
    }
    // The raw path as written (url::Url keeps escapes); strip the single leading slash.
    let raw_path = url.path().strip_prefix('/').unwrap_or(url.path());
    let segments = decode_segments(uri, raw_path)?;
    // An HTTP(S) URL of an Amazon S3 endpoint names an `s3://bucket/key`.
    let (scheme, authority, segments) = match s3_url::classify(&scheme, &authority, segments) {
        S3Url::Other(segments) => (scheme, authority, segments),
        S3Url::Bucket(bucket, key) => ("s3".to_string(), bucket, key),
        S3Url::Unknowable => {
            return Err(refuse("it is an S3 access point or similar endpoint, whose bucket cannot be told"))
        }
    };
    for (root_scheme, root_authority, root_segments) in root.spellings() {
        if scheme != root_scheme {
            continue;
        }
        if authority != root_authority && authority.eq_ignore_ascii_case(root_authority) {
            return Err(refuse("its bucket or host differs from the lake root's only in letter case"));
        }
        // A path-style bucket (or any leading folder of the root) differing only in case.
        let folded = |a: &[String], b: &[String]| a.iter().zip(b).all(|(x, y)| x.eq_ignore_ascii_case(y));
        if authority == root_authority
            && segments.len() > root_segments.len()
            && segments[..root_segments.len()] != root_segments[..]
            && folded(&segments[..root_segments.len()], root_segments)
            && scheme != "file"
        {
            return Err(refuse("its path to the lake root differs from the root's only in letter case"));
        }
        if authority == root_authority
            && segments.len() > root_segments.len()
            && segments[..root_segments.len()] == root_segments[..]
        {
            return Ok(NormalizedReference::InRoot(segments[root_segments.len()..].join("/")));
        }
    }
    if scheme == "file" {
        if let Some(folder) = &root.local {
            let resolved = resolve_local_route(folder, &segments)
                .map_err(|e| refuse(&format!("its path cannot be resolved on this machine ({e})")))?;
            if let Some(key) = resolved {
                return Ok(NormalizedReference::InRoot(key));
            }
        }
    }
    Ok(NormalizedReference::External(format!("{scheme}://{authority}/{}", segments.join("/"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> LakeRootUri {
        LakeRootUri::parse("/data/lake").unwrap()
    }

    #[test]
    fn relative_keys_stay_keys() {
        assert_eq!(
            normalize_reference(&root(), "objects/01ABC/a.bin").unwrap(),
            NormalizedReference::InRoot("objects/01ABC/a.bin".into())
        );
        assert_eq!(
            normalize_reference(&root(), "objects/01ABC/a%20b.bin").unwrap(),
            NormalizedReference::InRoot("objects/01ABC/a b.bin".into())
        );
    }

    #[test]
    fn absolute_uris_inside_the_root_become_keys() {
        assert_eq!(
            normalize_reference(&root(), "file:///data/lake/objects/01ABC/a.bin").unwrap(),
            NormalizedReference::InRoot("objects/01ABC/a.bin".into())
        );
        let s3 = LakeRootUri::parse("s3://bucket/lake").unwrap();
        assert_eq!(
            normalize_reference(&s3, "s3a://bucket/lake/objects/x").unwrap(),
            NormalizedReference::InRoot("objects/x".into())
        );
        assert_eq!(
            normalize_reference(&s3, "s3n://bucket/lake/objects/x").unwrap(),
            NormalizedReference::InRoot("objects/x".into())
        );
    }

    #[test]
    fn sibling_prefixes_and_other_buckets_are_external() {
        let s3 = LakeRootUri::parse("s3://bucket/lake").unwrap();
        assert_eq!(
            normalize_reference(&s3, "s3://bucket/lake-old/objects/x").unwrap(),
            NormalizedReference::External("s3://bucket/lake-old/objects/x".into())
        );
        assert_eq!(
            normalize_reference(&s3, "s3://other/lake/objects/x").unwrap(),
            NormalizedReference::External("s3://other/lake/objects/x".into())
        );
        assert_eq!(
            normalize_reference(&root(), "https://example.com/a.bin").unwrap(),
            NormalizedReference::External("https://example.com/a.bin".into())
        );
    }

    #[test]
    fn ambiguous_references_are_refused() {
        for bad in [
            "",
            "/data/lake/objects/x",
            "objects//x",
            "objects/x/",
            "./objects/x",
            "objects/../x",
            "objects/%2e%2e/x",
            "objects/a%zzb",
            "objects/x?X-Amz-Signature=1",
            "s3://key:secret@bucket/lake/x",
            "objects\\x",
            "objects/%2Fx",
            "file:///data/lake/objects/x#frag",
            "objects/a%",
            // Dot segments in URLs, which URL parsing would drop textually.
            "file:///data/other/link/../objects/01ABC/a.bin",
            "file:///data/lake/x/../objects/01ABC/a.bin",
            "file:///data/lake/objects/01ABC/%2e%2E/01ABD/a.bin",
            "file:/data/lake/objects/.%2e/a.bin",
            "s3://bucket/lake/x/../objects/a.bin",
            "https://example.com/a/../b.bin",
        ] {
            assert!(normalize_reference(&root(), bad).is_err(), "{bad:?} must be refused");
        }
    }

    /// Every RFC 8089 spelling of a file inside a local root is its key (the `file:/` short form
    /// that Java and Hadoop print was once journaled as a relative key beginning with `file:`).
    #[test]
    fn the_rfc_8089_family_names_one_key() {
        for spelling in [
            "file:/data/lake/objects/01ABC/a.bin",
            "file:///data/lake/objects/01ABC/a.bin",
            "file://localhost/data/lake/objects/01ABC/a.bin",
            "FILE:///data/lake/objects/01ABC/a.bin",
            "File:/data/lake/objects/01ABC/a.bin",
            "file://LOCALHOST/data/lake/objects/01ABC/a.bin",
            "file:/data/lake/objects/01ABC/a%2Ebin",
        ] {
            assert_eq!(
                normalize_reference(&root(), spelling).unwrap(),
                NormalizedReference::InRoot("objects/01ABC/a.bin".into()),
                "{spelling}"
            );
        }
        // Scheme-like prefixes are never keys.
        for refused in
            ["file://otherhost/data/lake/objects/01ABC/a.bin", "s3:bucket/lake/x", "urn:lake:x", "objects:x/y"]
        {
            assert!(matches!(normalize_reference(&root(), refused), Err(UriError::Ambiguous { .. })), "{refused}");
        }
    }

    #[test]
    fn s3_spellings_of_the_root_are_its_keys_or_refused() {
        let s3 =
            LakeRootUri::parse("s3://bucket/lake").unwrap().with_alias("http://127.0.0.1:4566/bucket/lake").unwrap();
        for spelling in [
            "S3://bucket/lake/objects/x",
            "s3a://bucket/lake/objects/x",
            "https://bucket.s3.amazonaws.com/lake/objects/x",
            "https://bucket.s3.eu-west-1.amazonaws.com/lake/objects/x",
            "https://s3.eu-west-1.amazonaws.com/bucket/lake/objects/x",
            "HTTP://127.0.0.1:4566/bucket/lake/objects/x",
        ] {
            assert_eq!(
                normalize_reference(&s3, spelling).unwrap(),
                NormalizedReference::InRoot("objects/x".into()),
                "{spelling}"
            );
        }
        for refused in [
            "s3://Bucket/lake/objects/x",
            "s3://buck%65t/lake/objects/x",
            "s3://bucket:443/lake/objects/x",
            "https://ap-1.s3-accesspoint.eu-west-1.amazonaws.com/lake/objects/x",
        ] {
            assert!(normalize_reference(&s3, refused).is_err(), "{refused}");
        }
        assert_eq!(
            normalize_reference(&s3, "https://other.s3.amazonaws.com/lake/objects/x").unwrap(),
            NormalizedReference::External("s3://other/lake/objects/x".into())
        );
    }

    #[test]
    fn roots_parse_and_display() {
        assert_eq!(LakeRootUri::parse("/data/lake/").unwrap().to_string(), "file:///data/lake");
        assert_eq!(LakeRootUri::parse("s3a://b/p/q").unwrap().to_string(), "s3://b/p/q");
        assert!(LakeRootUri::parse("s3:///p").is_err());
        assert!(LakeRootUri::parse("gs://b/p").is_err());
    }
}
