"""lake for Python: write Lance tables whose rows reference large immutable objects through the
journaling engine, and run garbage collection of orphan objects with the library's safety rules.

    import lake, pyarrow as pa
    lk = lake.init("/data/lake", min_age="7d")
    loc = lk.objects().put(b"...", name="episode-1.mcap")     # {"uri", "sha256", "size"}
    lk.table("episodes").append(pa.table({"episode": ["e1"], "file": lake.locations([loc])}))
    plan = lk.gc.plan(min_age="7d")                             # a dry run: nothing is deleted
    lk.gc.apply(plan, checkpoint="/var/tmp/gc.ckpt")            # outside the lake

Data goes in as any Arrow stream producer (`__arrow_c_stream__`: pyarrow tables and readers,
polars frames), without copies. Errors are `lake.LakeError` and its subclasses (`GuardError`,
`PolicyError`, `LineageError`, `StorageError`, `InputError`), each with `transient`; they pickle,
so they cross process boundaries (`ProcessPoolExecutor`, Ray) as themselves. Wrong argument types
raise `TypeError`.

A process forked from one that used lake (`multiprocessing` on Linux) may use lake: the child
builds its own I/O runtime and reopens each lake's store on its first call.
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import operator
import os
import threading
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Optional, Union, overload

import pyarrow as pa

from . import _lake
from . import _errors
from ._errors import (
    GuardError,
    InputError,
    LakeError,
    LineageError,
    ObjectMismatchError,
    ObjectMissingError,
    PolicyError,
    StorageError,
)

__all__ = [
    "init",
    "open",
    "locations",
    "is_location_layout",
    "DataLocationType",
    "Location",
    "Lake",
    "Objects",
    "ObjectFile",
    "Table",
    "Gc",
    "Plan",
    "PlanProblem",
    "ShardedPlan",
    "Refs",
    "Commit",
    "Cleanup",
    "Version",
    "ApplyReport",
    "VerifyReport",
    "RecoverReport",
    "Record",
    "Tags",
    *_errors.__all__,
]

class Location(dict):
    """A managed object's location as `Objects.put` returns it: a dict `{"uri": str (the key
    under the lake root, `objects/<ULID>/<name>`), "sha256": bytes (32), "size": int (bytes)}`.
    `scalar` is the same location as an Arrow struct scalar of `DataLocationType`."""

    @property
    def scalar(self) -> pa.ExtensionScalar:
        """This location as a pyarrow scalar of `DataLocationType`."""
        return locations([self])[0]


def init(root: str, min_age: Duration = "7d", storage_options: Optional[dict] = None) -> "Lake":
    """Create a lake at `root` (a local folder, `file:///...` or `s3://bucket/prefix`) whose GC
    policy floor is `min_age` (humantime: `7d`, `12h`; GC never collects objects younger than
    it unless told so explicitly), or open it when it exists with that floor.

    `storage_options` are S3 settings, as pylance takes them: object_store's names
    (`aws_endpoint`, `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`,
    `aws_region`, `allow_http`) or their environment spellings (`AWS_ENDPOINT_URL`, ...); they
    take precedence over the `AWS_*` environment, for this lake only. The environment is read
    once, when the lake is opened: every request of the lake (objects, tables, GC listings and
    deletes, S3 checkpoints) uses the same settings. Ignored for local roots.

    Raises `PolicyError` for a root lake may not use or a lake that exists with another floor;
    `InputError` for a floor that is not a positive duration or an option that is not an S3
    setting; `StorageError` when the store fails;
    `TypeError` for arguments of the wrong type."""
    return Lake(_lake.init(_text("root", root), _duration("min_age", min_age), _options(storage_options)))


def open(root: str, storage_options: Optional[dict] = None) -> "Lake":  # noqa: A001 (the API's name)
    """Open the lake at `root` (`storage_options` as for `init`). Raises `LakeError` when there
    is no lake there."""
    options = _options(storage_options)
    return Lake(_lake.open(_text("root", root), options), options)


_STRINGS = (pa.string(), pa.large_string(), pa.string_view())
_BINARIES = (pa.binary(32), pa.binary(), pa.large_binary(), pa.binary_view())


def is_location_layout(storage: pa.DataType) -> bool:
    """Whether `storage` is a DataLocation layout lake takes: a struct of exactly the children
    `uri`, `sha256`, `size`, in that order, with `uri` a string (`string`, `large_string`,
    `string_view`), `sha256` a binary (`binary(32)`, or `binary`, `large_binary`,
    `binary_view` holding 32 bytes) and `size` a `uint64`, children nullable or not. The
    canonical layout is `DataLocationType().storage_type`; lake's writes convert the others
    (what polars and other Arrow producers give for a lake table read back) and mark them."""
    if not pa.types.is_struct(storage) or storage.num_fields != 3:
        return False
    uri, sha, size = (storage.field(i) for i in range(3))
    return (
        (uri.name, sha.name, size.name) == ("uri", "sha256", "size")
        and any(uri.type.equals(t) for t in _STRINGS)
        and any(sha.type.equals(t) for t in _BINARIES)
        and size.type.equals(pa.uint64())
    )


class DataLocationType(pa.ExtensionType):
    """The DataLocation Arrow type: `struct<uri: string, sha256: fixed_size_binary[32],
    size: uint64>` (children not null; size in bytes) marked by the Arrow extension name
    `lake.data_location`. A column of this type references objects: the engine journals every
    reference it adds or removes, and GC keeps the objects alive while a retained version
    references them.

    `DataLocationType()` is the canonical layout. A marked column read from any Arrow source
    (pylance, polars, a C stream) whose storage is another layout lake takes
    (`is_location_layout`: a `large_string` or `string_view` uri, a variable-size binary
    sha256, nullable children) reads as `DataLocationType(storage)` over that storage
    (`canonical` is False); lake's writes convert it. A marked column of any other storage reads
    as its plain storage type: it is no DataLocation, and lake refuses it."""

    def __init__(self, storage: Optional[pa.DataType] = None) -> None:
        canonical = pa.struct(
            [
                pa.field("uri", pa.string(), nullable=False),
                pa.field("sha256", pa.binary(32), nullable=False),
                pa.field("size", pa.uint64(), nullable=False),
            ]
        )
        if storage is None:
            storage = canonical
        elif not is_location_layout(storage):
            raise InputError(f"{storage} is not a DataLocation layout (see lake.is_location_layout)")
        self.canonical: bool = storage.equals(canonical)
        super().__init__(storage, "lake.data_location")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> Any:
        # The type must describe the data as it is: claiming another storage than the producer's
        # makes pyarrow read the buffers wrongly (or abort the interpreter).
        if is_location_layout(storage_type):
            return cls(storage_type)
        # Not a DataLocation: the plain storage type (pyarrow takes it in place of an extension
        # type, keeping the data readable).
        return storage_type



try:
    pa.register_extension_type(DataLocationType())
except pa.ArrowKeyError:  # registered by an earlier import of this module (importlib.reload)
    pass


def locations(items: Iterable[Location]) -> pa.ExtensionArray:
    """A pyarrow array of `DataLocationType` (the marked DataLocation type) from locations as
    `Objects.put` returns them (`{"uri", "sha256", "size"}`), one element per item, none null.

    A plain `pa.struct` column of the same child names and types (`uri: string`, `sha256:
    binary(32)`, `size: uint64`), as `pa.array(list_of_dicts, type=...)` makes it, is accepted by
    `Table.append` and the other writes too: they mark it (a location whose uri, sha256 or size
    is null is refused; make the whole location null instead). `items` may be a pyarrow array or
    a pandas or polars column of such dicts (a frame stores `size` as int64: rebuild the column
    with `locations` before a write). Raises `InputError` for an item
    without `uri`, `sha256` or `size`, a sha256 that is not 32 bytes or a size that is not a
    count of bytes (0 to 2**64 - 1); `TypeError` for values of the wrong type."""
    if isinstance(items, (pa.Array, pa.ChunkedArray)):
        items = items.to_pylist()
    elif hasattr(items, "to_list"):  # a pandas or polars column
        items = items.to_list()
    rows = []
    for n, item in enumerate(items):
        try:
            uri, sha, size = item["uri"], item["sha256"], item["size"]
        except (KeyError, TypeError, IndexError) as e:
            raise InputError(f"location {n} ({item!r}) has no {e}: a location is {{'uri', 'sha256', 'size'}}") from None
        rows.append((_text(f"location {n} uri", uri), _bytes(f"location {n} sha256", sha), _count(f"location {n} size", size)))
    storage = _lake.locations(rows)
    return pa.ExtensionArray.from_storage(DataLocationType(), storage)


#: A duration: humantime text (`7d`, `12h`, `90s`) or a `datetime.timedelta`.
Duration = Union[str, datetime.timedelta]


def _duration(what: str, value: Any) -> str:
    """A duration as the native module takes it: humantime text as given, or a
    `datetime.timedelta` (as pylance takes them) in whole microseconds. A negative timedelta is
    bad input (`InputError`)."""
    if isinstance(value, datetime.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        if micros < 0:
            raise _errors.error_of_kind("invalid_input", f"{what} {value!r} is negative; give a positive duration", False)
        return f"{micros}us"
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str (humantime, e.g. '7d') or a datetime.timedelta, not {type(value).__name__}")
    return value


def _text(what: str, value: Any) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


def _bytes(what: str, value: Any) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be bytes, not {type(value).__name__}")
    return bytes(value)


def _count(what: str, value: Any, low: int = 0, high: int = 2**64 - 1) -> int:
    """`value` as an int in `low..=high`: `TypeError` for a non-int (a bool too), `InputError`
    out of range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InputError(f"{what} {value} is out of range: give {low} to {high}")
    return value


def _options(options: Optional[dict]) -> Optional[dict]:
    if options is None:
        return None
    if not hasattr(options, "items"):
        raise TypeError(f"storage_options must be a dict of str to str, not {type(options).__name__}")
    out = {}
    for k, v in options.items():
        if not isinstance(k, str) or not isinstance(v, (str, bool, int)):
            raise TypeError(f"storage_options must map str to str, not {type(k).__name__} to {type(v).__name__} ({k!r})")
        out[k] = str(v).lower() if isinstance(v, bool) else str(v)
    return out


class Lake:
    """An opened lake. It pickles as its root and storage options (a Ray task or a process pool
    worker opens the same lake again)."""

    def __init__(self, native: Any, storage_options: Optional[dict] = None) -> None:
        self._native = native
        self._storage_options = dict(storage_options or {})
        self.gc = Gc(native)
        self.refs = Refs(native)

    def __reduce__(self) -> Any:
        return (open, (self.root, self._storage_options or None))

    @property
    def root(self) -> str:
        """The root as lake spells it."""
        return self._native.root

    def objects(self) -> "Objects":
        """The managed object writer."""
        return Objects(self._native)

    def table(self, name: str) -> "Table":
        """Table `name` (`table@branch` for a branch). It is created by its first append. An
        invalid name is refused by the first call that uses it (`InputError`)."""
        return Table(self._native, _text("the table name", name))

    def tables(self) -> list[Table]:
        """The lake's tables, sorted by name (a branch as its own `Table`, `table@branch`)."""
        return [Table(self._native, name) for name in self._native.tables()]

    def __repr__(self) -> str:
        return f"lake.Lake({self.root!r})"


class Objects:
    """Uploads immutable objects under `objects/<ULID>/<name>` (the ULID records when it was
    minted: GC judges an object's age by it and by the store's `last_modified`)."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def __repr__(self) -> str:
        return f"lake.Objects(root={self._native.root!r})"

    def put(self, data: Union[bytes, bytearray, memoryview, str, os.PathLike, Any], name: Optional[str] = None) -> Location:
        """Upload `data` and return its `Location` (`{"uri", "sha256", "size"}`, size in bytes;
        `.scalar` gives it as an Arrow struct scalar).

        `data` is bytes, a path (`name` defaults to its file name), or a binary file object
        (`read(n)` returning bytes; `name` defaults to its `name`). Paths and file objects are
        streamed: memory holds a few parts of 8 MiB, whatever the size. The name is sanitised
        into the key's last segment. Raises `InputError` for a path that is not a regular file,
        `StorageError` when reading or the upload fails (nothing is referenced until a row names
        the location), `TypeError` for other kinds of `data` or a file object opened in text
        mode.

        Publish rows that reference the object soon: a reference to an object older than the
        lake's GC policy floor is refused (`GuardError`), since GC may be collecting it."""
        if name is not None:
            name = _text("name", name)
        if isinstance(data, (bytes, bytearray, memoryview)):
            uri, sha, size = self._native.put_bytes(name or "object", bytes(data))
        elif isinstance(data, (str, os.PathLike)):
            path = os.fspath(data)
            if not os.path.isfile(path):
                raise InputError(f"{path} is not a regular file (put takes bytes, a file's path or a binary file object)")
            uri, sha, size = self._native.put_file(path, name)
        elif hasattr(data, "read"):
            uri, sha, size = self._native.put_reader(name or _file_name(data), data)
        else:
            raise TypeError(f"put takes bytes, a path or a binary file, not {type(data).__name__}")
        return Location(uri=uri, sha256=bytes(sha), size=size)

    @overload
    def put_many(  # a str is a folder's path here, not an iterable of items
        self, items: Union[str, os.PathLike], progress: bool = False, concurrency: int = 8
    ) -> dict[str, Location]: ...

    @overload
    def put_many(self, items: Iterable[Any], progress: bool = False, concurrency: int = 8) -> list[Location]: ...

    def put_many(
        self, items: Union[str, os.PathLike, Iterable[Any]], progress: bool = False, concurrency: int = 8
    ) -> Union[list[Location], dict[str, Location]]:
        """Upload many objects, `concurrency` at a time (the GIL is released while each
        uploads).

        - `items` a folder (a path to a directory): every regular file below it, symbolic links
          not followed. Returns `{relative path: Location}` in sorted path order.
        - `items` an iterable of what `put` takes (paths, bytes, binary files): returns their
          `Location`s in the same order. An iterator is consumed as uploads finish, holding at
          most `2 * concurrency` items.

        `progress=True` shows a progress bar on stderr (tqdm: `pip install lake[progress]`).
        The first failure is raised once the uploads in flight end; objects uploaded before it
        stay unreferenced (GC collects them after the policy floor). `concurrency` is 1 to
        1024 (`InputError` otherwise)."""
        import concurrent.futures
        import itertools

        concurrency = _count("concurrency", concurrency, 1, 1024)
        folder = None
        if isinstance(items, (str, os.PathLike)) and os.path.isdir(items):
            folder = os.fspath(items)
            paths = sorted(_files_below(folder))
            work: Iterable[Any] = [os.path.join(folder, p) for p in paths]
            total: Optional[int] = len(paths)
        else:
            work = items  # type: ignore[assignment]  # not a folder: an iterable of what `put` takes
            total = len(items) if hasattr(items, "__len__") else None  # type: ignore[arg-type]
        bar = _progress_bar(total) if progress else None
        results: list = []
        pending: list = []
        window = max(1, concurrency) * 2
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
                iterator = iter(work)
                while True:
                    for item in itertools.islice(iterator, window - len(pending)):
                        pending.append(pool.submit(self.put, item))
                    if not pending:
                        break
                    results.append(pending.pop(0).result())
                    if bar is not None:
                        bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        if folder is not None:
            return dict(zip(paths, results))
        return results

    def copy_fresh(self, location: Any) -> Location:
        """A copy of the managed object `location` names (a `Location`, a dict or a DataLocation
        scalar, as for `read`) under a fresh key (a new ULID, the same name; a server-side copy
        on S3, a file copy locally), and its `Location`. Rows may reference the copy for another
        `min_age`, where the publication guard refuses a reference to the old object
        (`GuardError`: GC may be collecting it). The copy's size is checked against the store;
        its bytes are not hashed (the copy holds the source's bytes, and its `Location` carries
        the `sha256` given: a wrong one makes verified reads of the copy fail, as of the source).
        Raises `StorageError` when the object is not a managed key, is missing, or its size
        differs from the location's."""
        uri, sha, size = _reference(location)
        new_uri, new_sha, new_size = self._native.copy_fresh(uri, sha, size)
        return Location(uri=new_uri, sha256=bytes(new_sha), size=new_size)

    def read(self, location: Any) -> bytes:
        """The whole object `location` names, verified: its bytes are checked against the
        location's size and SHA-256 as they stream, and `ObjectMismatchError` is raised instead
        of returning bytes that differ (an object rewritten, truncated or corrupted outside
        lake). `location` is a `Location`, a dict with `uri`, `sha256` (32 bytes or 64 hex
        characters) and `size`, or a DataLocation scalar; its `uri` a key under the lake root or
        a URI the lake's store reaches (read with the lake's own settings). Raises
        `ObjectMissingError` when there is no object, `InputError` for a location lake cannot
        read, `StorageError` when the store fails."""
        uri, sha, size = _reference(location)
        return self._native.object_read(uri, sha, size)

    def read_many(self, locations: Iterable[Any], read_ahead_bytes: int = 256 << 20) -> list[bytes]:
        """The whole objects `locations` name (each as for `read`: a `Location`, a dict or a
        DataLocation scalar; a DataLocation array or column works too), verified as `read`
        verifies one, read concurrently: their `bytes` in the order given. One call reads
        many objects at once (the lake's bound on requests in flight; the objects hash on
        several cores, with the GIL released) and at most `read_ahead_bytes` bytes of objects
        ahead of the one the list waits for (an object larger than that is read alone).
        The returned list holds every object: for more than fits in memory, call it in slices.

        The first failure in the order given is raised (as `read` raises it: `ObjectMismatchError`
        for bytes that differ from their location's, `ObjectMissingError`, `InputError`,
        `StorageError`), the reads still in flight are stopped, and no bytes are returned: a
        list is either every object, verified, or an exception, as pylance's `take_blobs` raises.
        Ctrl-C stops the reads within 100 ms."""
        if isinstance(locations, (pa.Array, pa.ChunkedArray)):
            locations = locations.to_pylist()
        references = [_reference(location) for location in locations]
        read_ahead_bytes = _count("read_ahead_bytes", read_ahead_bytes, 0, 2**63 - 1)
        return self._native.object_read_many(references, read_ahead_bytes)

    def open(self, location: Any, buffer_size: int = 1 << 20) -> "ObjectFile":
        """The object `location` names (as for `read`) as a binary file object: `read`,
        `readinto`, `seek`, `tell`, and a context manager. Bytes come in ranged reads of at
        least `buffer_size` bytes (1 to 256 MiB; one GET each on S3). Read from the start to
        the end without seeking, the object is verified (`ObjectMismatchError` at its end if its
        SHA-256 differs); after a seek, reads are not verified (`ObjectFile.verified` says which).
        Its size is checked when it is opened: a size other than the location's raises
        `ObjectMismatchError` at once."""
        uri, sha, size = _reference(location)
        buffer_size = _count("buffer_size", buffer_size, 1, 256 << 20)
        opened = ObjectFile(self._native, uri, sha, size, buffer_size)
        opened._check_size()
        return opened



class ObjectFile(io.RawIOBase):
    """An object opened for reading (`Objects.open`, `Table.take_objects`): a binary, seekable
    file object over ranged reads of the store. `readinto` fills the buffer it is given unless
    the object ends first (so parsers such as `zipfile` and `tarfile` read it as a file).

    `verified` is True once the object was read from the start to its end without a seek and its
    size (one HEAD, before the first read) and SHA-256 matched its reference; a seek to another
    position makes it False for good (later bytes come from new ranged reads). A mismatch raises
    `ObjectMismatchError` from the read that finds it, and from every read after it: the file
    never hands out the bytes that failed.

    One `ObjectFile` may be shared by threads: each `read`, `readinto`, `seek` and `tell` runs
    whole under the file's lock, so threads reading from one position get consecutive, disjoint
    pieces of the object (as from one Python file object), and the hash sees every byte once.
    For parallel reads of one object, open it once per thread."""

    def __init__(self, native: Any, uri: str, sha256: bytes, size: int, buffer_size: int) -> None:
        super().__init__()
        self._native = native
        self.uri = uri
        self.size = size
        self._sha256 = sha256
        self._buffer_size = buffer_size
        self._pos = 0
        self._buffer = b""
        self._buffer_at = 0
        self._hash: Any = hashlib.sha256()
        self._hashed = 0
        self._size_checked = False
        self._error: Optional[LakeError] = None
        self._lock = threading.RLock()
        self.verified = False

    def _mismatch(self, message: str) -> None:
        """Raises `ObjectMismatchError(message)`, and keeps it for every later read."""
        self._error = ObjectMismatchError(f"object `{self.uri}` does not match its reference: {message}", False, "object_mismatch")
        raise self._error

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")

    def _check_size(self) -> None:
        """Compares the size the store reports (one HEAD) with the reference's, once: ranged
        reads up to the reference's size would not see an object that grew."""
        if self._size_checked:
            return
        found = self._native.object_size(self.uri)
        self._size_checked = True
        if found != self.size:
            self._mismatch(f"expected {self.size} bytes, the store holds {found} bytes")
        if self.size == 0:
            self._verify(b"")

    def readable(self) -> bool:
        self._check_open()
        return True

    def seekable(self) -> bool:
        self._check_open()
        return True

    def tell(self) -> int:
        with self._lock:
            self._check_open()
            return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        with self._lock:
            return self._seek(offset, whence)

    def _seek(self, offset: int, whence: int) -> int:
        self._check_open()
        offset = operator.index(offset)
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence ({whence})")
        target = base + offset
        if target < 0:
            raise ValueError(f"negative seek position {target}")
        if target != self._pos:
            self._hash, self.verified = None, False
        self._pos = target
        return target

    def read(self, size: Optional[int] = -1) -> bytes:
        """Up to `size` bytes from the position (all the rest when `size` is -1 or None); fewer
        only at the object's end. Verified as the class says."""
        with self._lock:
            return super().read(-1 if size is None else size) or b""

    def readinto(self, b: Any) -> int:
        """Fills the writable buffer `b` from the position (fewer bytes only at the object's
        end); returns how many bytes it wrote."""
        with self._lock:
            return self._readinto(b)

    def _readinto(self, b: Any) -> int:
        self._check_open()
        if self._error is not None:
            raise self._error
        self._check_size()
        view = memoryview(b).cast("B")
        want = min(len(view), max(0, self.size - self._pos))
        done = 0
        while done < want:
            start = self._pos - self._buffer_at
            if not (0 <= start < len(self._buffer)):
                end = min(self.size, self._pos + max(want - done, self._buffer_size))
                self._buffer, self._buffer_at, start = b"", self._pos, 0
                fetched = self._native.object_read_range(self.uri, self._pos, end)
                if len(fetched) < end - self._pos:
                    self._mismatch(f"it ended at byte {self._pos + len(fetched)} of {self.size}")
                self._buffer = fetched
            chunk = self._buffer[start : start + want - done]
            self._verify(chunk)
            view[done : done + len(chunk)] = chunk
            done += len(chunk)
            self._pos += len(chunk)
        return done

    def _verify(self, chunk: bytes) -> None:
        """Hashes `chunk` when it continues the bytes hashed so far; checks the digest at the end
        (before the chunk is handed out)."""
        if self._hash is None or self._pos != self._hashed:
            self._hash = None
            return
        self._hash.update(chunk)
        self._hashed += len(chunk)
        if self._hashed == self.size:
            digest, self._hash = self._hash.digest(), None
            if digest != self._sha256:
                self._mismatch(f"expected SHA-256 {self._sha256.hex()}, found {digest.hex()} ({self.size} bytes)")
            self.verified = True

    def readall(self) -> bytes:
        """The rest of the object. From the start, one verified read holding the object once in
        memory (`Objects.read`); after a seek, the rest in ranged reads (not verified)."""
        with self._lock:
            self._check_open()
            if self._error is not None:
                raise self._error
            self._check_size()
            if self._pos == 0 and self._hashed == 0 and self._hash is not None:
                try:
                    whole = self._native.object_read(self.uri, self._sha256, self.size)
                except ObjectMismatchError as e:
                    self._error = e  # raised again by every later read
                    raise
                self._pos = self._hashed = self.size
                self._hash, self.verified = None, True
                return whole
            parts: list[bytes] = []
            while True:
                part = self.read(max(self._buffer_size, 1))
                if not part:
                    return b"".join(parts)
                parts.append(part)

    def close(self) -> None:
        self._buffer = b""
        super().close()

    def __repr__(self) -> str:
        return f"lake.ObjectFile({self.uri!r}, size={self.size}, position={self._pos})"


def _reference(location: Any) -> tuple:
    """`(uri, sha256 bytes, size)` of a Location, a dict with those keys, or a DataLocation scalar."""
    if isinstance(location, pa.Scalar):
        location = location.as_py()
    if not isinstance(location, dict):
        raise TypeError(f"a location is a lake.Location, a dict or a DataLocation scalar, not {type(location).__name__}")
    missing = [k for k in ("uri", "sha256", "size") if location.get(k) is None]
    if missing:
        raise InputError(f"the location has no {', '.join(missing)}: {location!r}")
    uri, sha = _text("the location's uri", location["uri"]), location["sha256"]
    if isinstance(sha, str):
        try:
            sha = bytes.fromhex(sha)
        except ValueError as e:
            raise InputError(f"the sha256 of `{uri}` is not hex: {sha!r}") from e
    sha = _bytes(f"the sha256 of `{uri}`", sha)
    if len(sha) != 32:
        raise InputError(f"the sha256 of `{uri}` has {len(sha)} bytes, not 32")
    return uri, sha, _count(f"the size of `{uri}`", location["size"])


def _file_name(f: Any) -> str:
    """The key name of a file object: the base name of its `name`, or `object`."""
    name = getattr(f, "name", None)
    return os.path.basename(name) if isinstance(name, str) and name else "object"


def _files_below(folder: str) -> Iterable[str]:
    """Relative paths (with `/`) of the regular files below `folder`; links are not followed."""
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames.sort()
        for f in filenames:
            full = os.path.join(dirpath, f)
            if os.path.isfile(full) and not os.path.islink(full):
                yield os.path.relpath(full, folder).replace(os.sep, "/")


def _progress_bar(total: Optional[int], desc: str = "put", unit: str = "object") -> Any:
    try:
        from tqdm import tqdm  # type: ignore[import-untyped]
    except ImportError as e:
        raise ImportError("progress=True draws its bar with tqdm: pip install tqdm (or lake[progress])") from e
    return tqdm(total=total, unit=unit, desc=desc)


class _spinner:
    """With `on`, a tqdm spinner on stderr showing the time a call in progress has taken
    (redrawn by a thread while the native call runs with the GIL released)."""

    def __init__(self, on: bool, desc: str) -> None:
        self._bar = _progress_bar(None, desc, "s") if on else None
        self._done = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "_spinner":
        if self._bar is not None:
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()
        return self

    def _tick(self) -> None:
        while not self._done.wait(0.2):
            if self._bar is not None:
                self._bar.refresh()

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            self._bar.close()


#: Pages of deletes per step of an apply that shows progress.
_APPLY_STEP_PAGES = 4


def _builtin_open(path: Any, mode: str) -> Any:
    import builtins

    return builtins.open(path, mode)


class _Record(Mapping):
    """A report of lake with attribute access (`r.version`) that still reads as the dict it
    was (`r["version"]`, `dict(r)`, `r == {...}`, iteration over its keys). Immutable; pickles
    (a Ray task may return one)."""

    __slots__ = ("_fields",)

    def __init__(self, fields: Mapping) -> None:
        object.__setattr__(self, "_fields", dict(fields))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field {name!r} (it has {', '.join(self._fields)})") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"lake.{type(self).__name__} is read-only")

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __reduce__(self) -> Any:
        return (type(self), (self._fields,))

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self._fields.items() if not isinstance(v, (list, dict)) or len(v) < 4)
        return f"lake.{type(self).__name__}({shown})"


class Commit(_Record):
    """A committed, journaled version (what `Table.append`, `overwrite`, `merge_insert`,
    `delete`, `update`, `compact`, `restore` and `commit_pieces` return): `table`, `version`
    (Lance's version number), `rows` (rows written, or deleted/updated), `references_added`,
    `references_removed` (object references the version added and removed, as its journal entry
    records them), `rebased` (True when Lance rebased the write onto a version another writer
    committed meanwhile)."""

    table: str
    version: int
    rows: int
    references_added: int
    references_removed: int
    rebased: bool


class Cleanup(_Record):
    """What `Table.cleanup` removed: `old_versions` (versions) and `bytes_removed` (bytes of
    Lance files)."""

    old_versions: int
    bytes_removed: int


class Version(_Record):
    """One version of a table (`Table.versions()`): `version`, `timestamp` (when it was
    committed, a timezone-aware `datetime` in UTC, as pylance's `versions()` gives it), `tags`
    (the names tagging it), `journaled` (False for a version another Lance client wrote, which
    GC refuses to plan past until it is repaired: `Refs.repair`)."""

    version: int
    timestamp: datetime.datetime
    tags: list
    journaled: bool


class ApplyReport(_Record):
    """What a GC apply did (`Gc.apply`, `Gc.apply_shard`; the checkpoint's record): `complete`
    (every candidate handled), `deleted` (removed by this apply), `already_gone` (known absent
    before its delete), `absent` (S3: confirmed gone by a request that may repeat an earlier
    one), `skipped` (keys no longer a regular file or an empty folder), `failed` (keys the store
    did not delete), `revived` (candidates a newer version references), `candidates` and
    `next_index` (the candidates handled so far), and the plan's digest and cutoff (docs/gc.md,
    "What apply reports")."""

    complete: bool
    candidates: int
    next_index: int
    deleted: int
    already_gone: int
    absent: int
    skipped: list
    failed: list
    revived: list


class VerifyReport(_Record):
    """`Refs.verify`: the journal compared with full scans of every retained version. `ok` is
    the verdict (no problem, no count mismatch, no missing object, no size mismatch);
    `versions_scanned`, `references_scanned`, `problems` (sentences), `mismatch_count` and
    `mismatches`, `objects_checked`, `missing_object_count` and `missing_objects` (keys),
    `size_mismatch_count`."""

    ok: bool
    versions_scanned: int
    references_scanned: int
    problems: list
    mismatch_count: int
    missing_object_count: int
    size_mismatch_count: int


class RecoverReport(_Record):
    """`Refs.recover`: `intents` (each `{"key", "table", "operation", "written",
    "resolution"}`), `stray_markers_removed`, `versions` (each `{"table", "version", "state"}`),
    `pending` (intents not yet past their deadline) and `left` (versions left for
    `Refs.repair`)."""

    intents: list
    stray_markers_removed: int
    versions: list
    pending: int
    left: int


class Record(_Record):
    """A report whose fields its method's docstring names (`r.field` or `r["field"]`)."""


def _commit(out: Optional[str]) -> Optional[Commit]:
    return None if out is None else Commit(json.loads(out))


def _write(method: Any) -> Any:
    """Marks a method that may commit a table version: a `KeyboardInterrupt` that reaches the
    caller from inside it carries a note (`__notes__`) saying what the write did, also when the
    signal arrived before the write began or after it committed, while its result was on the way
    back (the native call leaves a receipt on its thread: `_lake.write_receipt`)."""
    import functools

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before = None
        try:
            before = _lake.write_receipt()[0]
            return method(*args, **kwargs)
        except KeyboardInterrupt as e:
            count, note = _lake.write_receipt()
            if before is None or count == before or note is None:
                note = "lake: interrupted before the write began; nothing was committed"
            _errors._add_note(e, note)
            raise

    return wrapper


class Table:
    """One table (or branch) of a lake, written through the journaling engine.

    Ctrl-C during a write (append, overwrite, merge_insert, delete, update, compact, cleanup,
    tag, restore) never leaves a version committed without its journal entry (GC would refuse
    it until `lake refs repair`): a write that streams its input stops reading it and commits
    nothing; once Lance has read it all, or for the other writes, the write finishes. Then
    `KeyboardInterrupt` is raised with a note (`__notes__`, Python 3.11+) saying whether the
    write committed."""

    def __repr__(self) -> str:
        return f"lake.Table({self.name!r}, root={self._native.root!r})"

    def __init__(self, native: Any, name: str) -> None:
        self._native = native
        self.name = name

    @_write
    def append(self, data: Any) -> Commit:
        """Append the rows of `data` as one new version, journaling every object reference they
        add. `data` is any Arrow stream producer (`__arrow_c_stream__`: a pyarrow Table,
        RecordBatch or RecordBatchReader, a polars DataFrame), streamed without copies; its
        DataLocation columns (`DataLocationType`, or a plain struct of that layout, or a list of
        either) are the references. Creates the table on its first append.

        Returns the commit: `{"table", "version", "rows", "references_added",
        "references_removed", "rebased"}`. Raises `GuardError` when a row references an object
        too old to publish (GC may be collecting it; nothing is committed), `LakeError` for a
        column that looks like a location but is not exactly the layout, `StorageError` when
        the store fails."""
        return Commit(json.loads(self._native.write(self.name, _stream(data), False)))

    @_write
    def overwrite(self, data: Any) -> Commit:
        """Replace the table's content with `data` (as for `append`) as one new version; the
        old rows' references are journaled as removed (their objects stay alive while an older
        retained version references them). Returns and raises as `append`."""
        return Commit(json.loads(self._native.write(self.name, _stream(data), True)))

    @_write
    def prepare(self, data: Any) -> str:
        """Phase 1 of a distributed write (`docs/distributed-writes.md`): write the rows of
        `data` (as for `append`) as data files of this table WITHOUT committing them, and return
        the prepared piece, an opaque JSON `str` that a worker hands back to the one process
        that commits every piece with `commit_pieces`. Any number of workers (threads,
        processes, Ray tasks: `lake.ray.LakeDatasink`) may prepare pieces of one table at once.

        The table must exist (create it with a first `append`) and the rows must have its
        schema. The objects the rows reference must be uploaded already (`Objects.put`): the
        piece holds their references, which are checked as an append checks them. Nothing is
        committed and nothing else is written; a piece never committed leaves data files that
        Lance's cleanup removes after 7 days. Commit pieces soon (within `min_age`, the guard
        judges the oldest referenced object at the commit).

        Raises `LakeError` (kind `no_such_table`) for a table that does not exist, `InputError`
        for rows of another schema or a reference column of another layout, `StorageError` when
        the store fails."""
        return self._native.prepare_append(self.name, _stream(data))

    @_write
    def commit_pieces(self, pieces: Iterable[str], mode: str = "append") -> Commit:
        """Phase 2 of a distributed write: commit `pieces` (the `str`s `prepare` returned, from
        any processes, each at most once) as ONE new version of this table, with one journal
        entry computed from the pieces' data files. `mode` is `"append"` (add their rows) or
        `"overwrite"` (replace the table's content with them, keeping its schema).

        Returns the commit as `append` does: `{"table", "version", "rows", "references_added",
        "references_removed", "rebased"}` (`rows` and `references_added` summed over the pieces).
        Raises `TypeError` for a `str` instead of a list; `InputError` for a mode other than
        those two or a piece that is not a prepared piece's JSON (the message names its index);
        `InputError` with kind `piece_refused` (the message names the piece's index and why) for
        no piece, a piece of another lake, table or schema (a column added, dropped or renamed
        since it was prepared), a piece given twice, a piece committed already (a data file of
        it is in the table's latest version: a retry after a commit that landed), or one whose
        counts differ from its data files; `GuardError` when the oldest object of the pieces is
        too old to publish (upload it again, prepare again). Nothing is committed by a call
        that raised these; the same pieces (those not refused) can be committed again."""
        if isinstance(pieces, (str, bytes)):
            raise TypeError("commit_pieces takes a list of pieces (the str each prepare returned), not one str")
        pieces = [_text(f"piece {i}", p) for i, p in enumerate(pieces)]
        if mode not in ("append", "overwrite"):
            raise InputError(f"commit_pieces mode {mode!r}: give 'append' or 'overwrite'")
        return Commit(json.loads(self._native.commit_pieces(self.name, pieces, mode == "overwrite")))

    @_write
    def merge_insert(self, data: Any, on: Union[str, list]) -> Commit:
        """Upsert `data` (as for `append`) keyed on `on` (a column name or a list of them): rows
        whose key matches are replaced, the others inserted, as one new version. The journal
        entry is computed from the two versions' manifests, so it is exact under duplicate keys
        and concurrent writers. Returns and raises as `append`."""
        keys = [on] if isinstance(on, str) else [_text("a key column", k) for k in on]
        if not keys:
            raise InputError("merge_insert needs at least one key column in `on`")
        return Commit(json.loads(self._native.merge_insert(self.name, _stream(data), keys)))

    @_write
    def delete(self, where: Optional[str] = None, *, predicate: Optional[str] = None) -> Optional[Commit]:
        """Delete the rows matching `where` (a Lance SQL predicate, e.g. `"episode = 'e1'"`;
        pylance's name `predicate` works too) as one new version; returns the commit (as
        `append`) or `None` when no row matched. Nondeterministic predicates (`random()`) are
        refused (`LakeError`)."""
        if (where is None) == (predicate is None):
            raise TypeError("delete takes one predicate: `where` or `predicate` (pylance's name)")
        out = self._native.delete(self.name, _text("where", where if predicate is None else predicate))
        return _commit(out)

    @_write
    def update(
        self, values: Optional[dict] = None, where: Optional[str] = None, *, updates: Optional[dict] = None
    ) -> Optional[Commit]:
        """Set columns to SQL expressions (`{"label": "'cat'"}`, `{"file": "NULL"}`; pylance's
        name `updates` works too) on the rows matching `where` (all rows when `None`) as one new
        version; returns the commit or `None` when no row matched. References the new values add
        are checked by the guard before the commit (`GuardError`)."""
        if (values is None) == (updates is None):
            raise TypeError("update takes one dict of column to SQL expression: `values` or `updates` (pylance's name)")
        values = values if updates is None else updates
        if not isinstance(values, dict):
            raise TypeError(f"update takes a dict of column to SQL expression, not {type(values).__name__}")
        if not values:
            raise InputError("update needs at least one column to set")
        assignments = [f"{_text('a column name', k)}={_text(f'the expression of {k}', v)}" for k, v in values.items()]
        out = self._native.update(self.name, assignments, where)
        return _commit(out)

    @_write
    def compact(self) -> Optional[Commit]:
        """Compact the table's fragments (an empty journal entry)."""
        out = self._native.compact(self.name)
        return _commit(out)

    @_write
    def cleanup(self, older_than: Duration) -> Cleanup:
        """Remove versions older than `older_than` (humantime, e.g. `"7d"`, `"0s"`) through
        Lance's cleanup; never the latest or tagged versions. Objects only removed versions
        referenced become orphans for GC. Returns `{"old_versions": int, "bytes_removed": int}`
        (bytes of Lance files removed)."""
        versions, removed = self._native.cleanup(self.name, _duration("older_than", older_than))
        return Cleanup({"old_versions": versions, "bytes_removed": removed})

    def versions(self) -> list[Version]:
        """The versions that exist, ascending: `[{"version": int, "timestamp": str (RFC 3339
        UTC), "tags": [str], "journaled": bool}]` (`journaled` is False for a version another
        Lance client wrote, which GC refuses to plan past until `lake refs repair`).

        `journaled` is proven by reading every version's journal entry whole, reference logs
        included: the call costs about what its versions journaled (0.15 s a version of 1,000,000
        references here). For the latest version's number alone, `version` opens one manifest."""
        return [
            Version({**v, "timestamp": datetime.datetime.fromisoformat(v["timestamp"].replace("Z", "+00:00"))})
            for v in json.loads(self._native.versions(self.name))
        ]

    @_write
    def tag(self, name: str, version: int) -> None:
        """Tag `version` (kept by cleanup; its objects stay alive). `InputError` for a version
        below 1 or one that does not exist."""
        self._native.tag(self.name, _text("the tag name", name), _count("version", version, 1))

    @_write
    def restore(self, version: int) -> Commit:
        """Make `version`'s content the latest version. `InputError` for a version below 1 or
        one that does not exist."""
        return Commit(json.loads(self._native.restore(self.name, _count("version", version, 1))))

    @property
    def tags(self) -> "Tags":
        """The table's tags, as pylance's `LanceDataset.tags`: `create(name, version)`,
        `delete(name)`, `list()`."""
        return Tags(self)

    def branches(self) -> list[str]:
        """The names of this table's branches (each is `lk.table(f"{name}@{branch}")`)."""
        return list(self._native.branches(self.name))

    @_write
    def create_branch(self, branch: str, version: Union[int, str]) -> "Table":
        """Create branch `branch` of this table from `version` of its main line (a version number,
        or the name of a tag), and return it as a `Table` (`table@branch`), whose first version is
        journaled. The branch's versions are retained like the table's (their objects stay live)
        until `delete_branch`. Raises `InputError` for a name in use (now or before: a name is
        used once), a version that does not exist, or a version whose journal is incomplete."""
        branch = _text("the branch name", branch)
        if isinstance(version, str):
            self._native.create_branch(self.name, branch, None, version)
        else:
            self._native.create_branch(self.name, branch, _count("version", version, 1), None)
        return Table(self._native, f"{self.name}@{branch}")

    @_write
    def delete_branch(self, branch: str) -> None:
        """Delete branch `branch` of this table with its versions (objects only they referenced
        become orphans for GC)."""
        self._native.delete_branch(self.name, _text("the branch name", branch))

    @_write
    def unset_config(self, keys: Union[str, Iterable[str]]) -> Optional[Commit]:
        """Remove the Lance config `keys` of this table (one version of its own, journaled), as
        pylance's `delete_config_keys`; `None` when none was set."""
        keys = [keys] if isinstance(keys, str) else [_text("a config key", k) for k in keys]
        return _commit(self._native.unset_config(self.name, keys))

    @property
    def uri(self) -> str:
        """The Lance dataset's URI. Raises `LakeError` for an invalid table name."""
        return self._native.dataset_uri(self.name)

    def to_lance(self, version: Optional[int] = None) -> Any:
        """The table as a pylance dataset, for reading (`pip install lake[lance]`), at its latest
        version or at `version`. Writing to it with pylance bypasses the journal: GC then refuses
        until the version is repaired (`lake refs repair`)."""
        import lance

        options = self._native.storage_options()
        if version is not None:
            version = _count("version", version, 1)
        return lance.dataset(self.uri, version=version, storage_options=options or None)

    def checkout(self, version: int) -> Any:
        """The table at `version`, as a pylance dataset (as pylance's `checkout_version`)."""
        return self.to_lance(version)

    @property
    def version(self) -> int:
        """The latest version's number: one open of the latest manifest, no journal read.
        `LakeError` (kind `no_such_table`) when the table does not exist."""
        return self._native.latest_version(self.name)

    @property
    def schema(self) -> pa.Schema:
        """The latest version's schema (reference columns as `lake.DataLocationType`)."""
        return self.to_lance().schema

    def count_rows(self, filter: Optional[str] = None) -> int:  # noqa: A002 (pylance's name)
        """Rows of the latest version, or those matching `filter` (a Lance SQL predicate)."""
        return self.to_lance().count_rows(filter)

    def to_table(self, **kwargs: Any) -> pa.Table:
        """The latest version read into a `pyarrow.Table` (pylance's `to_table` arguments:
        `columns`, `filter`, `limit`, ...)."""
        return self.to_lance().to_table(**kwargs)

    def take_objects(
        self,
        column: str,
        indices: Optional[Iterable[int]] = None,
        filter: Optional[str] = None,  # noqa: A002 (pylance's name)
        columns: Optional[Iterable[str]] = None,
        buffer_size: int = 1 << 20,
        progress: bool = False,
        read: bool = False,
    ) -> tuple:
        """The rows chosen by `indices` (row offsets in the latest version, in the order given)
        or by `filter` (a Lance SQL predicate; every row when neither is given), with the objects
        their reference column `column` names, as pylance's `take_blobs` gives a blob column's:
        `(rows, objects)`, `rows` a pyarrow Table (the columns `columns`, all by default, and
        `column`), `objects[i]` row i's object as an `ObjectFile` (`None` for a null reference;
        for a list column, a list of them). Objects are opened when first read (ranged reads of
        `buffer_size` bytes) and verified when read from start to end, as `Objects.open`'s.
        Raises `InputError` for an index out of range, an unknown column, both `indices` and
        `filter`, or a `column` that holds no references. `progress=True` shows a spinner with the
        time spent reading the rows on stderr (tqdm).

        `read=True` reads every object at once instead, verified and concurrently
        (`Objects.read_many`): `objects[i]` is row i's object as `bytes` (`None` for a null
        reference; lists for a list column), and the first object that fails raises its error
        (`ObjectMismatchError` for one whose bytes differ from its reference's), no bytes
        returned."""
        if indices is not None and filter is not None:
            raise InputError("take_objects takes indices or a filter, not both")
        picked = None if indices is None else [_count("index", i, 0, 2**63 - 1) for i in indices]
        wanted = None if columns is None else list(dict.fromkeys([*(_text("column", c) for c in columns), column]))
        buffer_size = _count("buffer_size", buffer_size, 1, 256 << 20)
        read = _flag(read, "read")
        with _spinner(_flag(progress, "progress"), f"take_objects: reading the rows of `{self.name}`"):
            arrays = self._native.table_rows(self.name, picked, filter, wanted)
        rows = pa.Table.from_batches([pa.RecordBatch.from_struct_array(a) for a in arrays])
        if column not in rows.column_names:
            raise InputError(f"table `{self.name}` has no column `{column}`")
        field = rows.schema.field(column).type
        storage = field.storage_type if isinstance(field, pa.ExtensionType) else field
        is_list = pa.types.is_list(storage) or pa.types.is_large_list(storage)
        inner = storage.value_type if is_list else storage
        inner = inner.storage_type if isinstance(inner, pa.ExtensionType) else inner
        if not is_location_layout(inner):
            raise InputError(f"column `{column}` of table `{self.name}` holds no DataLocation references ({field})")

        def opened(value: Any) -> Optional[ObjectFile]:
            if value is None:
                return None
            uri, sha, size = _reference(value)
            return ObjectFile(self._native, uri, sha, size, buffer_size)

        values = rows.column(column).to_pylist()
        objects: list[Any]
        if read:
            flat = [x for v in values if v is not None for x in (v if is_list else [v]) if x is not None]
            read_back = iter(Objects(self._native).read_many(flat))

            def next_object(value: Any) -> Optional[bytes]:
                return None if value is None else next(read_back)

            if is_list:
                objects = [None if v is None else [next_object(x) for x in v] for v in values]
            else:
                objects = [next_object(v) for v in values]
            return rows, objects
        if is_list:
            objects = [None if v is None else [opened(x) for x in v] for v in values]
        else:
            objects = [opened(v) for v in values]
        return rows, objects


class Tags:
    """The tags of one table (`Table.tags`), as pylance's `LanceDataset.tags`. A tagged version
    is retained: cleanup skips it and GC keeps what it references, until the tag is deleted."""

    def __init__(self, table: Table) -> None:
        self._table = table

    def __repr__(self) -> str:
        return f"lake.Tags({self._table.name!r}, {self.list()!r})"

    def create(self, tag: str, version: int) -> None:
        """Tag `version` as `tag`. `InputError` for a tag that exists or a missing version."""
        self._table.tag(tag, version)

    @_write
    def delete(self, tag: str) -> None:
        """Delete tag `tag` (its version is then kept only while retention keeps it)."""
        self._table._native.delete_tag(self._table.name, _text("the tag name", tag))

    def list(self) -> dict[str, int]:
        """`{tag: version}` of every tag of the table."""
        return {tag: v.version for v in self._table.versions() for tag in v.tags}


def _flag(value: Any, name: str = "allow_below_policy") -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def _apply_arguments(checkpoint: Any, allow_below_policy: Any, page_size: Any, max_pages: Any) -> tuple:
    """An apply's arguments, checked: `(checkpoint, allow_below_policy, page_size, max_pages)`."""
    return (
        _text("checkpoint", checkpoint),
        _flag(allow_below_policy),
        _count("page_size", page_size, 1, 1000),
        None if max_pages is None else _count("max_pages", max_pages, 1),
    )


def _stream(data: Any) -> Any:
    if hasattr(data, "__arrow_c_stream__"):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    raise TypeError(f"expected an Arrow stream producer (a pyarrow Table or RecordBatchReader, a polars DataFrame), not {type(data).__name__}")


class PlanProblem(NamedTuple):
    """Why a plan is incomplete: `kind`, a stable snake_case name (a lineage problem's, such as
    `missing_sidecar` or `branch`, or `unmanaged_reference`, `write_intent`,
    `linked_reference`, `incomplete_shard`), and `message`, one sentence naming what is wrong
    and what to do. `str()` gives the message."""

    kind: str
    message: str

    def __str__(self) -> str:
        return self.message

    def __contains__(self, text: object) -> bool:
        """`"bad.lance" in problem` searches the message (as when problems were strings)."""
        return isinstance(text, str) and text in self.message


class Plan:
    """A GC plan (a dry run's result): nothing is deleted until `Gc.apply`."""

    def __init__(self, document: str, digest: str) -> None:
        self._document = document
        # The document is `{"digest", "plan": {...}}` (what `lake gc --out` writes).
        self._parsed = json.loads(document)["plan"]
        self.digest = digest

    @property
    def cutoff(self) -> str:
        """Objects older than this (RFC 3339 UTC, by the store's clock) may be candidates."""
        return self._parsed["cutoff"]

    @property
    def lineage_complete(self) -> bool:
        """False when a table's journal cannot account for its versions: nothing is proposed."""
        return self._parsed["lineage_complete"]

    @property
    def problems(self) -> list[PlanProblem]:
        """What keeps the lineage incomplete: each a `PlanProblem` with a stable `kind`
        (`missing_sidecar`, `unregistered_dataset`, `branch`, ...) and a `message` saying
        what to do."""
        return [PlanProblem(p["kind"], p["message"]) for p in self._parsed["problems"]]

    @property
    def candidates(self) -> pa.Table:
        """The candidates: `uri` (string), `size` (uint64, bytes), `last_modified` (string, UTC)."""
        rows = self._parsed["candidates"]
        return pa.table(
            {
                "uri": pa.array([c["uri"] for c in rows], pa.string()),
                "size": pa.array([c["size"] for c in rows], pa.uint64()),
                "last_modified": pa.array([c["last_modified"] for c in rows], pa.string()),
            }
        )

    @property
    def mode(self) -> str:
        """`"incremental"` or `"full"` (a shard of a sharded plan of several shards, or a plan of an
        earlier build: `"full"`)."""
        record = self._parsed.get("mode")
        return "full" if not record else str(record["mode"])

    @property
    def mode_reason(self) -> Optional[str]:
        """Why the plan is full (`"no GC state"`, `"a full plan was asked for"`, a state that
        was not trusted and why, ...); `None` for an incremental plan."""
        record = self._parsed.get("mode")
        return None if not record else record.get("reason")

    @property
    def state(self) -> Optional[str]:
        """The digest of the GC state an incremental plan started from; `None` otherwise."""
        record = self._parsed.get("mode")
        return None if not record else record.get("state")

    @property
    def candidate_count(self) -> int:
        """How many keys the plan proposes to delete."""
        return len(self._parsed["candidates"])

    @property
    def candidate_bytes(self) -> int:
        """The candidates' total size in bytes (as the store listed them)."""
        return sum(c["size"] for c in self._parsed["candidates"])

    @property
    def min_age_seconds(self) -> int:
        """The plan's horizon in seconds (an apply checks the cutoff against it)."""
        return self._parsed["min_age_seconds"]

    def save(self, path: Union[str, os.PathLike], force: bool = False) -> None:
        """Write the plan document (what `lake gc --out` writes), atomically, outside the plan's
        lake (`PolicyError` for a path inside it, by any route). An existing file is replaced only
        if it is empty or a plan document, unless `force` (any regular file)."""
        _lake.plan_save(os.fspath(path), self._document, _flag(force, "force"))

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "Plan":
        """Read a plan document (what `Plan.save` or `lake gc --out` wrote), checked against its
        digest. Raises `InputError` for a file that is not a sealed plan document (not JSON,
        fields missing, edited), `StorageError` when it cannot be read."""
        path = os.fspath(path)
        try:
            with _builtin_open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise StorageError(f"cannot read the plan document {path}: {e}") from e
        try:
            document = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"{path} is not a plan document: not UTF-8 ({e})") from None
        return cls(document, _lake.plan_digest(document, path))

    def __repr__(self) -> str:
        return f"lake.Plan(candidates={self.candidate_count}, bytes={self.candidate_bytes}, complete={self.lineage_complete}, mode={self.mode!r})"


class ShardedPlan:
    """A GC plan made as shards over disjoint key ranges (`Gc.plan_sharded`, `lake.ray.plan`):
    each shard is a `Plan` of its range with its own digest, bound by a manifest whose digest
    covers theirs. Apply shard by shard (`Gc.apply_shard`, `lake.ray.apply`), in any order and
    any process, each with its own checkpoint."""

    def __init__(self, manifest: str, shards: list) -> None:
        self._manifest = manifest
        # The document is `{"digest", "manifest": {...}}` (what `lake gc --shards N --out DIR`
        # writes as DIR/manifest.json).
        parsed = json.loads(manifest)
        self.digest: str = parsed["digest"]
        self._parsed = parsed["manifest"]
        self.shards: list = [Plan(doc, _lake.plan_digest(doc, f"shard document {i}")) for i, doc in enumerate(shards)]

    @property
    def root(self) -> str:
        """The lake the plan is for (normalised URI)."""
        return self._parsed["root"]

    @property
    def cutoff(self) -> str:
        """The one cutoff of every shard (RFC 3339 UTC, by the store's clock)."""
        return self._parsed["cutoff"]

    @property
    def min_age_seconds(self) -> int:
        """The plan's horizon in seconds (an apply checks the cutoff against it)."""
        return self._parsed["min_age_seconds"]

    @property
    def lineage_complete(self) -> bool:
        """False when any shard was planned on incomplete lineage: no shard may be applied."""
        return all(shard.lineage_complete for shard in self.shards)

    @property
    def mode(self) -> str:
        """`"incremental"` for the one shard of an incremental sharded plan (see `Plan.mode`),
        else `"full"` (a plan of several shards lists every managed key)."""
        return self.shards[0].mode if len(self.shards) == 1 else "full"

    @property
    def candidates(self) -> pa.Table:
        """Every shard's candidates, in key order (shards are ordered ranges)."""
        return pa.concat_tables([shard.candidates for shard in self.shards])

    @property
    def candidate_count(self) -> int:
        """How many keys the shards propose to delete, together."""
        return sum(shard.candidate_count for shard in self.shards)

    def checkpoint_name(self, index: int) -> str:
        """The file name of shard `index`'s checkpoint in a checkpoint folder."""
        return f"shard-{index:05d}.ckpt"

    def save(self, folder: Union[str, os.PathLike], force: bool = False) -> None:
        """Write `folder/manifest.json` and `folder/shard-00000.json`, ... (the manifest last),
        as `lake gc --shards N --out DIR` does: outside the plan's lake (`PolicyError` inside
        it), into a new folder (its parent must exist), an empty one or one holding a sharded
        plan (anything when `force`)."""
        _lake.sharded_save(os.fspath(folder), self._manifest, [shard._document for shard in self.shards], _flag(force, "force"))

    @classmethod
    def load(cls, folder: Union[str, os.PathLike]) -> "ShardedPlan":
        """Read a sharded plan's folder; every digest is checked (an edited manifest or shard
        is refused with `LakeError`)."""
        manifest, shards = _lake.sharded_load(os.fspath(folder))
        return cls(manifest, shards)

    def __repr__(self) -> str:
        return f"lake.ShardedPlan(shards={len(self.shards)}, candidates={self.candidate_count}, complete={self.lineage_complete})"


class Gc:
    """Garbage collection with the library's rules: the store's clock, the policy floor, the
    skew bound, plans bound to their lake and `min_age`, checkpoints outside the lake."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def __repr__(self) -> str:
        return f"lake.Gc(root={self._native.root!r})"

    def plan(
        self,
        min_age: Duration,
        allow_below_policy: bool = False,
        progress: bool = False,
        full: bool = False,
        full_every: Optional[Duration] = None,
    ) -> Plan:
        """A dry run at horizon `min_age` (humantime). Raises `PolicyError` for a horizon below
        the lake's policy floor (unless `allow_below_policy`) or a clock skew past the bound,
        `StorageError` when the store fails. A plan made on incomplete lineage is returned
        (`lineage_complete` False, `problems` naming why): it proposes nothing.
        `progress=True` shows a spinner with the time spent on stderr (tqdm), as the CLI does
        (a plan's length is not known before its listing ends).

        The plan is incremental when the lake's GC state allows (recorded by the last complete
        apply; docs/gc.md, "Incremental plans"): it examines only keys minted since that run and
        keys released since, and proposes a subset of what a full plan would. `full=True` forces a
        full plan, as does a last full plan older than `full_every` (default 7 days) or a state
        that cannot be trusted; `Plan.mode` and `Plan.mode_reason` say which and why."""
        arguments = (
            _duration("min_age", min_age),
            _flag(allow_below_policy),
            _flag(full, "full"),
            None if full_every is None else _duration("full_every", full_every),
        )
        with _spinner(_flag(progress, "progress"), "gc plan: reading lineage and listing objects"):
            document, digest = self._native.gc_plan(*arguments)
        return Plan(document, digest)

    def apply(
        self,
        plan: Union[Plan, str, None],
        checkpoint: str,
        allow_below_policy: bool = False,
        page_size: int = 1000,
        max_pages: Optional[int] = None,
        progress: bool = False,
    ) -> ApplyReport:
        """Delete `plan`'s candidates (a `Plan`, or the path of a saved plan document; `None` to
        resume `checkpoint`), revalidated against the journal before every group of deletes, in
        pages of `page_size` keys (1 to 1000: one S3 DeleteObjects request each), recording
        progress in `checkpoint` (a local path or `s3://` URL outside the lake; the plan is saved
        beside it as `<checkpoint>.plan.json`).

        Resumes the apply `checkpoint` records when there is one of the same plan; a finished
        apply of another plan there is replaced by this one, an unfinished one refuses it
        (`LakeError` naming both plans: resume it first, or choose a new checkpoint path). Stops
        after `max_pages` pages (at least 1) when given; Ctrl-C (`KeyboardInterrupt`) stops it at
        the next group boundary with the groups already done recorded. Either way, call again to
        resume.

        Returns the checkpoint: `{"candidates", "next_index", "deleted", "already_gone",
        "absent", "skipped", "failed", "revived", "complete", ...}`. `deleted` counts objects
        this apply removed: locally a removal; on S3 a key DeleteObjects confirmed deleted on its
        first request (the plan listed it, so it existed when planned; S3 cannot say whether
        another client removed it in between). `already_gone` counts objects known absent before
        their delete (locally). `absent` (S3) counts keys confirmed gone on a request that may
        repeat an earlier one of this apply (a retry of a failed key, or the first group after a
        resume), so which request removed them is unknown. `failed` lists keys the store did not
        delete (on S3 only those DeleteObjects answered with an error); they are retried first by
        the next call. `skipped` lists keys left alone, `revived` candidates a newer version
        references. Raises `PolicyError` for a plan of another lake or `min_age`, a cutoff the
        store's clock no longer allows, or a checkpoint inside the lake; `LineageError` when the
        journal cannot account for a table (a version another client wrote since the plan);
        `InputError` for a plan file that is not a sealed plan or a `page_size` out of range;
        `StorageError` when the store fails (`transient` says whether a retry may help).

        `progress=True` shows a bar of the candidates handled on stderr (tqdm: `pip install
        lake[progress]`); the apply then runs in steps of a few pages, each resuming the
        checkpoint (the same deletes and checks)."""
        if isinstance(plan, (str, os.PathLike)):
            plan = Plan.load(plan)
        elif plan is not None and not isinstance(plan, Plan):
            raise TypeError(f"plan must be a lake.Plan, a plan file's path or None, not {type(plan).__name__}")
        document = None if plan is None else plan._document
        arguments = _apply_arguments(checkpoint, allow_below_policy, page_size, max_pages)
        if not _flag(progress, "progress"):
            return ApplyReport(json.loads(self._native.gc_apply(document, *arguments)))
        # With a bar: the same apply in steps of a few pages, each resuming the checkpoint the
        # one before left (every step revalidates before its deletes, as one call does).
        checkpoint, allow, size, pages_left = arguments
        bar = _progress_bar(None if plan is None else plan.candidate_count, "gc apply", "key")
        try:
            while True:
                step = _APPLY_STEP_PAGES if pages_left is None else min(_APPLY_STEP_PAGES, pages_left)
                report = ApplyReport(json.loads(self._native.gc_apply(document, checkpoint, allow, size, step)))
                document = None
                bar.total = report.candidates
                bar.update(report.next_index - bar.n)
                if pages_left is not None:
                    pages_left -= step
                if report.complete or pages_left == 0:
                    return report
        finally:
            bar.close()

    def plan_sharded(
        self,
        min_age: Duration,
        shards: int,
        allow_below_policy: bool = False,
        full: bool = False,
        full_every: Optional[Duration] = None,
    ) -> ShardedPlan:
        """A dry run made as `shards` (1 to 256) shards over disjoint key ranges, in this
        process, from one read of the journal and one listing. Each shard's candidates are the
        unsharded plan's within its range. When the lake's GC state allows an incremental plan
        (as for `plan`; `full` forces a full one), the plan is one incremental shard over every
        key (`ShardedPlan.mode`): it lists only the keys minted since the state, the work that
        shards split. Raises as `plan`."""
        shards = _count("shards", shards, 1, 256)
        manifest, documents = self._native.gc_plan_sharded(
            _duration("min_age", min_age),
            shards,
            _flag(allow_below_policy),
            _flag(full, "full"),
            None if full_every is None else _duration("full_every", full_every),
        )
        return ShardedPlan(manifest, documents)

    def apply_shard(
        self,
        sharded: ShardedPlan,
        index: int,
        checkpoint: str,
        allow_below_policy: bool = False,
        page_size: int = 1000,
        max_pages: Optional[int] = None,
    ) -> ApplyReport:
        """Apply shard `index` of `sharded` (or resume its apply at `checkpoint`), as `apply`
        does a whole plan: revalidated, deleting only keys of its range, checkpointed. The shard
        must be bound to the manifest and every shard planned on complete lineage
        (`PolicyError`, `LineageError` otherwise); `index` is 0 to `len(sharded.shards) - 1`
        (`InputError` otherwise)."""
        if not isinstance(sharded, ShardedPlan):
            raise TypeError(f"sharded must be a lake.ShardedPlan, not {type(sharded).__name__}")
        index = _count("index", index, 0, len(sharded.shards) - 1)
        return self._apply_shard(
            sharded._manifest, sharded.shards[index]._document, checkpoint, allow_below_policy, page_size, max_pages
        )

    # The steps `lake.ray` runs in its driver and tasks (documents travel as JSON text).
    def _shard_spec(self, min_age: Duration, shards: int, allow_below_policy: bool, full: bool = False) -> str:
        shards = _count("shards", shards, 1, 256)
        return self._native.gc_shard_spec(_duration("min_age", min_age), shards, _flag(allow_below_policy), _flag(full, "full"))

    @staticmethod
    def _spec_count(spec: str) -> int:
        return len(json.loads(spec)["ranges"])

    def _plan_shard(self, spec: str, index: int, allow_below_policy: bool) -> str:
        return self._native.gc_plan_shard(spec, index, allow_below_policy)

    def _assemble(self, documents: list) -> ShardedPlan:
        return ShardedPlan(self._native.gc_assemble(documents), documents)

    def _apply_shard(
        self,
        manifest: str,
        shard: str,
        checkpoint: str,
        allow_below_policy: bool,
        page_size: int,
        max_pages: Optional[int] = None,
    ) -> ApplyReport:
        arguments = _apply_arguments(checkpoint, allow_below_policy, page_size, max_pages)
        return ApplyReport(json.loads(self._native.gc_apply_shard(manifest, shard, *arguments)))


class Refs:
    """The reference journal."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def __repr__(self) -> str:
        return f"lake.Refs(root={self._native.root!r})"

    def verify(self, progress: bool = False) -> VerifyReport:
        """Compare the journal with full scans of every retained version of every table (`ok` is
        the verdict). `progress=True` shows a spinner with the time spent on stderr (tqdm)."""
        with _spinner(_flag(progress, "progress"), "refs verify: scanning every retained version"):
            report = json.loads(self._native.refs_verify())
        counts = ("mismatch_count", "missing_object_count", "size_mismatch_count")
        report["ok"] = not report.get("problems") and not any(report.get(k) for k in counts)
        return VerifyReport(report)

    @_write
    def repair(self, table: str, version: int) -> Record:
        """Journal `version` of `table` from a full scan of it: for a version another Lance client
        wrote (pylance's own writes, `Table.to_lance()` written to), which GC refuses to plan
        past. Run it only once no writer of that table is running (a writer between its commit
        and its journal entry would race it; `recover` concludes those). Returns the entry
        written: `table`, `version`, `references`, `objects`, `spilled_runs`."""
        return Record(json.loads(self._native.refs_repair(_text("table", table), _count("version", version, 1))))

    @_write
    def bind(self, table: str) -> Record:
        """Bind every journal entry of `table` to its version's manifest (entries written by
        builds before binding existed). Idempotent. Returns what it did, per the report's
        fields."""
        return Record(json.loads(self._native.refs_bind(_text("table", table))))

    @_write
    def recover(self, table: Optional[str] = None, wait: bool = True) -> RecoverReport:
        """Resolve the write intents left by writers that stopped (killed, suspended, or a
        commit whose outcome was not known), as `lake refs recover` does, for `table` or every
        table. Each intent past its deadline (by the store's clock; with `wait=True` one not yet
        past it is waited for, at most its deadline: 5 min by default; with `wait=False` it is
        reported pending with the time it becomes due) is revoked (its writer publishes nothing
        from then on), fenced by a version of its own, and concluded: a commit that landed is
        journaled from its manifests (GC can plan again without `lake refs repair`), one that
        can never land is abandoned (its uploads become ordinary orphans). Then journals, from
        its two manifests, every version without a journal entry that this lake committed (its
        marker, or an intent naming it) when its new references pass the publication guard at
        the time its manifest was written or an intent protects them; any other such version is
        left for `lake refs repair`. Returns `{"intents": [{"key", "table", "operation",
        "written", "resolution": {"state": "committed" (with "version") | "abandoned" (with
        "proof") | "cleaned_up" (with "proof", "versions") | "pending" (with "reason")}}],
        "stray_markers_removed": int, "versions": [{"table", "version", "state": "journaled"
        (with "operation", "added", "removed") | "left" (with "reason")}], "pending": int,
        "left": int}`."""
        if not isinstance(wait, bool):
            raise TypeError(f"wait must be a bool, not {type(wait).__name__}")
        report = json.loads(self._native.refs_recover(None if table is None else _text("table", table), wait))
        report["pending"] = sum(1 for i in report["intents"] if i["resolution"]["state"] == "pending")
        report["left"] = sum(1 for v in report["versions"] if v["state"] == "left")
        return RecoverReport(report)
