//! `lake cat`, `lake get`: objects read back through the lake's store, verified against the
//! size and SHA-256 of their reference (`lake::store::ObjectReader`).

use crate::cli::{CatArgs, GetArgs};
use crate::commands::{open_lake, print_json};
use crate::error::{check_range, CliError};
use futures::StreamExt;
use lake::collect::output::parse_local;
use lake::common::{LakeRootUri, ObjectIdentity, ReferenceColumns};
use lake::lance::{LanceEngineError, RowSelection};
use lake::store::outside::{check_outside, Destination, DocumentFolder, Entry};
use lake::store::ObjectReader;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;

/// The default of `lake get --concurrency`: objects read and written at once.
pub(crate) const DEFAULT_GET_CONCURRENCY: usize = 8;
/// The largest `lake get --concurrency`.
const MAX_GET_CONCURRENCY: u64 = 64;
/// Bytes a verified `lake cat` holds before it writes any (an object up to this size is written
/// only once verified).
const CAT_HOLD_BYTES: usize = 64 << 20;
/// Bytes of one ranged read of an unverified `lake cat`.
const CAT_RANGE_BYTES: u64 = 8 << 20;
/// The largest object `lake get` reads whole (verified, in one buffer) before it writes it in one
/// write; larger ones stream to their file. At most `--concurrency` such buffers are held.
const GET_WHOLE_BYTES: u64 = 8 << 20;
/// The folder of `lake get`'s DIR that receives objects outside the lake root, by SHA-256.
const EXTERNAL_FOLDER: &str = "external";

/// Runs `lake cat`: the object's bytes to standard output (see its `--help`).
///
/// # Errors
/// [`CliError::Usage`] for --sha256 without --size (or the reverse) or a bad SHA-256;
/// [`lake::store::StoreError::ObjectMissing`], [`lake::store::StoreError::ObjectMismatch`],
/// [`lake::store::StoreError::ObjectUnreachable`] and storage errors (as [`CliError::Gc`]).
pub(crate) async fn cat(args: &CatArgs) -> Result<(), CliError> {
    let expected = match (&args.sha256, args.size) {
        (Some(sha256), Some(size)) => Some((parse_sha256(sha256)?, size)),
        (None, None) => None,
        _ => {
            return Err(CliError::Usage(
                "--sha256 and --size go together: give both to verify the object against its reference, or neither for an unverified read; nothing was read".into(),
            ))
        }
    };
    let (store, _, _) = open_lake(&args.root).await?;
    let reader = ObjectReader::with_concurrency(store, 1);
    let uri = args.key_or_uri.as_str();
    let key = reader.key_of(uri)?;
    let written = match expected {
        Some((sha256, size)) => cat_verified(&reader, &ObjectIdentity::new(uri, sha256, size), args.json).await?,
        None => cat_unverified(&reader, uri).await?,
    };
    // `None`: standard output stopped taking bytes (main reports it, or a reader went away).
    let Some((size, sha256)) = written else { return Ok(()) };
    let verified = expected.is_some();
    if args.json {
        let report = json!({"uri": uri, "key": key, "size": size, "sha256": hex::encode(sha256), "verified": verified});
        eprintln!("{report}");
    } else if !verified {
        eprintln!(
            "lake: `{uri}` was NOT verified (no --sha256 and --size): wrote {size} bytes with SHA-256 {}, as the store holds them now",
            hex::encode(sha256)
        );
    }
    Ok(())
}

/// Parses a SHA-256 flag: 64 hex characters.
fn parse_sha256(text: &str) -> Result<[u8; 32], CliError> {
    let mut sha = [0u8; 32];
    hex::decode_to_slice(text.trim(), &mut sha).map_err(|e| {
        CliError::Usage(format!("--sha256 `{text}` is not a SHA-256 ({e}): give 64 hex characters; nothing was read"))
    })?;
    Ok(sha)
}

/// Writes the object `reference` names to standard output, verified: held until verified up to
/// [`CAT_HOLD_BYTES`], streamed past it. Returns its size and SHA-256, or `None` when standard
/// output stopped taking bytes.
async fn cat_verified(
    reader: &ObjectReader,
    reference: &ObjectIdentity,
    json: bool,
) -> Result<Option<(u64, [u8; 32])>, CliError> {
    let mut stream = reader.open_verified(reference).await?;
    let mut held = Vec::new();
    let mut held_bytes = 0usize;
    let mut streaming = false;
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(e) => {
                if streaming && !json {
                    eprintln!(
                        "lake: {} bytes of `{}` were written to standard output before the object was found not to match its reference: discard them",
                        stream.received(),
                        stream.key()
                    );
                }
                return Err(e.into());
            }
        };
        if streaming {
            if !crate::stdio::out_bytes(&chunk) {
                return Ok(None);
            }
            continue;
        }
        held_bytes += chunk.len();
        held.push(chunk);
        if held_bytes > CAT_HOLD_BYTES {
            streaming = true;
            if !held.drain(..).all(|c| crate::stdio::out_bytes(&c)) {
                return Ok(None);
            }
        }
    }
    // The stream ended without an error: every byte matched the reference.
    if !held.iter().all(|c| crate::stdio::out_bytes(c)) {
        return Ok(None);
    }
    Ok(Some((reference.size, reference.sha256)))
}

/// Writes the object `uri` names to standard output as the store holds it now, in ranged
/// reads of [`CAT_RANGE_BYTES`], NOT verified. Returns the bytes written and their SHA-256, or
/// `None` when standard output stopped taking bytes.
async fn cat_unverified(reader: &ObjectReader, uri: &str) -> Result<Option<(u64, [u8; 32])>, CliError> {
    let size = reader.size(uri).await?;
    let mut hasher = Sha256::new();
    let mut offset = 0u64;
    while offset < size {
        let chunk = reader.read_range(uri, offset..offset.saturating_add(CAT_RANGE_BYTES).min(size)).await?;
        if chunk.is_empty() {
            // The object shrank since its size was read: what there is was written.
            break;
        }
        hasher.update(&chunk);
        offset += chunk.len() as u64;
        if !crate::stdio::out_bytes(&chunk) {
            return Ok(None);
        }
    }
    Ok(Some((offset, hasher.finalize().into())))
}

/// One object of `lake get` and its file.
struct Fetched {
    /// The reference's normalised `uri` (a key relative to the lake root, or an external URI).
    uri: String,
    /// The file it was written to (or found in).
    path: PathBuf,
    /// Its size in bytes.
    size: u64,
    /// Whether this run wrote the file (else an identical one was there).
    written: bool,
}

/// Runs `lake get`: the objects of the chosen rows' references, verified, into DIR (see its
/// `--help`).
///
/// # Errors
/// [`CliError::Usage`] for a --concurrency out of range or a --column that is not a reference
/// column; [`lake::store::StoreError::Root`] for a DIR inside the lake (as [`CliError::Gc`]); engine errors
/// (no such table or column, a bad predicate); [`lake::store::StoreError::ObjectMissing`],
/// [`lake::store::StoreError::ObjectMismatch`], [`lake::store::StoreError::ObjectUnreachable`] and storage errors;
/// [`CliError::Refused`] for an existing file that differs from its object or a key that is no
/// safe relative path; [`CliError::Io`] for DIR's files.
pub(crate) async fn get(args: &GetArgs) -> Result<(), CliError> {
    check_range("--concurrency", args.concurrency as u64, 1..=MAX_GET_CONCURRENCY, "objects read at once")?;
    let table = args.table.table.as_str();
    let dir = parse_local("DIR", &args.dir)?;
    let (store, _, engine) = open_lake(&args.table.root).await?;
    let root = store.root().clone();
    let shown = dir.display().to_string();
    // The folder itself, and a file in it (DIR may be the root's parent: not its own files).
    check_outside(&shown, Destination::Local(&dir), &root)?;
    check_outside(&shown, Destination::Local(&dir.join(lake::store::layout::OBJECTS_PREFIX)), &root)?;

    let selection = match &args.predicate {
        Some(predicate) => RowSelection::Filter(predicate.clone()),
        None => RowSelection::All,
    };
    let projection = [args.column.clone()];
    let columns = reference_column(&engine, table, &args.column).await?;
    let mut batches = engine.read_rows_stream(table, &selection, Some(&projection)).await?;
    // DIR held open from here on: every file is written relative to it, never through a link.
    let held = prepare_dir(&dir, &root)?;

    let reader = ObjectReader::with_concurrency(store, args.concurrency);
    let mut seen: HashSet<ObjectIdentity> = HashSet::new();
    let mut tasks: JoinSet<Result<Fetched, CliError>> = JoinSet::new();
    let mut fetched = Vec::new();
    let mut rows = 0u64;
    while let Some(batch) = batches.next().await {
        let batch = batch?;
        rows += batch.num_rows() as u64;
        let mut references = Vec::new();
        columns
            .visit(&batch, &root, |id| references.push(id))
            .map_err(|source| LanceEngineError::Unreadable { table: table.to_string(), source })?;
        for id in references {
            if !seen.insert(id.clone()) {
                continue;
            }
            let at = file_for(&reader, &id)?;
            while tasks.len() >= args.concurrency {
                if let Some(done) = tasks.join_next().await {
                    fetched.push(joined(done)?);
                }
            }
            tasks.spawn(fetch(reader.clone(), id, held.clone(), at));
        }
    }
    while let Some(done) = tasks.join_next().await {
        fetched.push(joined(done)?);
    }

    fetched.sort_by(|a, b| a.path.cmp(&b.path));
    let bytes: u64 = fetched.iter().map(|f| f.size).sum();
    let written = fetched.iter().filter(|f| f.written).count();
    let skipped = fetched.len() - written;
    if args.table.json {
        let files: Vec<_> = fetched
            .iter()
            .map(|f| json!({"uri": f.uri, "path": f.path.display().to_string(), "size": f.size}))
            .collect();
        print_json(&json!({
            "rows": rows,
            "objects": fetched.len(),
            "bytes": bytes,
            "written": written,
            "skipped_existing": skipped,
            "files": files,
        }));
    } else {
        println!(
            "{rows} rows of `{table}`: {} objects of `{}` ({bytes} bytes) verified into {shown}: {written} written, {skipped} already there",
            fetched.len(),
            args.column
        );
    }
    Ok(())
}

/// The reference columns of `table`'s column `column` alone.
///
/// # Errors
/// Engine errors (no such table or column); [`LanceEngineError::Unreadable`] for a column lake
/// cannot read references from with certainty; [`CliError::Usage`] for a column that is not a
/// reference column.
async fn reference_column(
    engine: &lake::lance::LanceEngine,
    table: &str,
    column: &str,
) -> Result<ReferenceColumns, CliError> {
    // No row: the projected schema alone.
    let projection = [column.to_string()];
    let empty = engine.read_rows(table, &RowSelection::Indices(Vec::new()), Some(&projection)).await?;
    let schema = empty.first().map(|b| b.schema()).ok_or_else(|| {
        CliError::Usage(format!("--column `{column}` of `{table}` could not be read; nothing was written"))
    })?;
    let columns = ReferenceColumns::from_stored_schema(&schema)
        .map_err(|source| LanceEngineError::Unreadable { table: table.to_string(), source })?;
    if columns.names() != projection {
        let found = schema.fields().first().map(|f| f.data_type().to_string()).unwrap_or_default();
        return Err(CliError::Usage(format!(
            "--column `{column}` of `{table}` is not a reference column (a DataLocation struct, or a list of them): it is {found}; nothing was written"
        )));
    }
    Ok(columns)
}

/// Opens DIR, held, judged outside the lake root through its handle; creates it when it does
/// not exist and its parent does (only the last folder, so that a typo cannot create a tree).
fn prepare_dir(dir: &Path, root: &LakeRootUri) -> Result<DocumentFolder, CliError> {
    let io = |source| CliError::Io { path: dir.display().to_string(), source };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(DocumentFolder::open(dir, root)?),
        Ok(_) => Err(CliError::Usage(format!("DIR {} is not a folder; nothing was written", dir.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = match dir.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            let name = dir.file_name().and_then(|n| n.to_str()).filter(|_| parent.is_dir()).ok_or_else(|| {
                CliError::Usage(format!(
                    "DIR {}: its parent folder {} does not exist; create it first (lake creates only the last folder, so that a typo cannot create a tree); nothing was written",
                    dir.display(),
                    parent.display()
                ))
            })?;
            Ok(DocumentFolder::open(parent, root)?.subfolder(name, true)?)
        }
        Err(e) => Err(io(e)),
    }
}

/// Where the object `id` goes in DIR: the folder below DIR and the file's name (DIR/<key> for a
/// key of the lake, DIR/external/<sha256 hex> for an object outside its root).
struct FileAt {
    folder: String,
    name: String,
}

/// The file of the object `id` in DIR ([`FileAt`]).
///
/// # Errors
/// [`lake::store::StoreError::ObjectUnreachable`] when the lake's store cannot read `id.uri`;
/// [`CliError::Refused`] for a key that is no safe relative path.
fn file_for(reader: &ObjectReader, id: &ObjectIdentity) -> Result<FileAt, CliError> {
    let Some(key) = reader.key_of(&id.uri)? else {
        return Ok(FileAt { folder: EXTERNAL_FOLDER.to_string(), name: id.sha256_hex() });
    };
    let safe = !key.starts_with('/')
        && !key.contains('\0')
        && key.split('/').all(|part| !part.is_empty() && part != "." && part != "..");
    let split = key.rsplit_once('/').filter(|_| safe);
    let Some((folder, name)) = split else {
        return Err(CliError::Refused(format!(
            "the reference `{}` names the key `{key}`, which is not a safe relative path (an empty, `.` or `..` part, or a leading `/`); nothing more was written",
            id.uri
        )));
    };
    Ok(FileAt { folder: folder.to_string(), name: name.to_string() })
}

/// A finished task's result; a task that panicked or was cancelled is an error.
fn joined(done: Result<Result<Fetched, CliError>, tokio::task::JoinError>) -> Result<Fetched, CliError> {
    done.map_err(|e| CliError::Io { path: "lake get".into(), source: std::io::Error::other(e) })?
}

/// Reads the object `id` verified into its file in the held DIR (a temporary file beside it,
/// renamed once every byte is verified; never over an existing file), or finds it there
/// already. Every folder below DIR is reached without following a link or crossing a mount.
async fn fetch(reader: ObjectReader, id: ObjectIdentity, dir: DocumentFolder, at: FileAt) -> Result<Fetched, CliError> {
    let folder = dir.subfolder(&at.folder, true)?;
    let name = std::ffi::OsString::from(&at.name);
    let path = folder.shown(&name);
    let shown = path.display().to_string();
    let io = |source| CliError::Io { path: shown.clone(), source };
    let done = |written| Fetched { uri: id.uri.clone(), path: path.clone(), size: id.size, written };
    if existing(&folder, &name, &id).await? {
        return Ok(done(false));
    }
    let mut tmp = folder.temporary()?;
    if id.size <= GET_WHOLE_BYTES {
        // One verified read (a local object straight into the buffer), then one write.
        let bytes = reader.read_verified(&id).await?;
        let mut file = tmp.file()?.try_clone().map_err(io)?;
        let wrote = tokio::task::spawn_blocking(move || std::io::Write::write_all(&mut file, &bytes)).await;
        wrote.map_err(|e| io(std::io::Error::other(e)))?.map_err(io)?;
    } else {
        let mut file = tokio::fs::File::from_std(tmp.file()?.try_clone().map_err(io)?);
        let mut stream = reader.open_verified(&id).await?;
        while let Some(chunk) = stream.next().await {
            file.write_all(&chunk?).await.map_err(io)?;
        }
        // The stream ended without an error: the file holds exactly the verified bytes.
        file.flush().await.map_err(io)?;
    }
    if tmp.persist(&name, true)? {
        return Ok(done(true));
    }
    // Another reference to the same file (or another process) wrote it meanwhile.
    if existing(&folder, &name, &id).await? {
        Ok(done(false))
    } else {
        Err(differs(&path, &id))
    }
}

/// Whether `name` in `folder` already holds the object `id` (same size and SHA-256): `false`
/// when there is nothing there.
///
/// # Errors
/// [`CliError::Refused`] when something else is there (another file, a folder, a link);
/// [`CliError::Io`] when it cannot be read.
async fn existing(folder: &DocumentFolder, name: &std::ffi::OsStr, id: &ObjectIdentity) -> Result<bool, CliError> {
    let path = folder.shown(name);
    let io = |source| CliError::Io { path: path.display().to_string(), source };
    match folder.entry(name)? {
        Entry::Missing => return Ok(false),
        Entry::File { len } if len == id.size => {}
        _ => return Err(differs(&path, id)),
    }
    let Some(file) = folder.open_file(name)? else { return Ok(false) };
    let sha256 = tokio::task::spawn_blocking(move || sha256_of(file))
        .await
        .map_err(|e| io(std::io::Error::other(e)))?
        .map_err(io)?;
    if sha256 == id.sha256 {
        Ok(true)
    } else {
        Err(differs(&path, id))
    }
}

/// The SHA-256 of the open local `file`.
fn sha256_of(mut file: std::fs::File) -> std::io::Result<[u8; 32]> {
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hasher.finalize().into())
}

/// The refusal to replace `path`, which is not the object `id`.
fn differs(path: &Path, id: &ObjectIdentity) -> CliError {
    CliError::Refused(format!(
        "{} already exists and is not the object `{}` ({} bytes with SHA-256 {}); lake get never replaces a file. Remove it or choose another DIR",
        path.display(),
        id.uri,
        id.size,
        id.sha256_hex()
    ))
}
