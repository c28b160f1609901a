"""lake for Python: write Lance tables whose rows reference large immutable objects through the
journaling engine, and run garbage collection of orphan objects with the library's safety rules.

    import lake, pyarrow as pa
    lk = lake.init("/data/lake", min_age="7d")
    loc = lk.objects().put(b"...", name="episode-1.mcap")     # {"uri", "sha256", "size"}
    lk.table("episodes").append(pa.table({"episode": ["e1"], "file": lake.locations([loc])}))
    plan = lk.gc.plan(min_age="7d")                             # a dry run: nothing is deleted
    lk.gc.apply(plan, checkpoint="/var/tmp/gc.ckpt")            # outside the lake

Data goes in as any Arrow stream producer (`__arrow_c_stream__`: pyarrow tables and readers,
polars frames), without copies. Errors are `lake.LakeError` and its subclasses.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Optional, Union

import pyarrow as pa

from . import _lake
from ._lake import GuardError, LakeError, LineageError, PolicyError, StorageError

__all__ = [
    "init",
    "open",
    "locations",
    "DataLocationType",
    "Location",
    "Lake",
    "Objects",
    "Table",
    "Gc",
    "Plan",
    "ShardedPlan",
    "Refs",
    "LakeError",
    "GuardError",
    "PolicyError",
    "LineageError",
    "StorageError",
]

class Location(dict):
    """A managed object's location as `Objects.put` returns it: a dict `{"uri": str (the key
    under the lake root, `objects/<ULID>/<name>`), "sha256": bytes (32), "size": int (bytes)}`.
    `scalar` is the same location as an Arrow struct scalar of `DataLocationType`."""

    @property
    def scalar(self) -> pa.ExtensionScalar:
        """This location as a pyarrow scalar of `DataLocationType`."""
        return locations([self])[0]


def init(root: str, min_age: str = "7d", storage_options: Optional[dict] = None) -> "Lake":
    """Create a lake at `root` (a local folder, `file:///...` or `s3://bucket/prefix`) whose GC
    policy floor is `min_age` (humantime: `7d`, `12h`; GC never collects objects younger than
    it unless told so explicitly), or open it when it exists with that floor.

    `storage_options` are S3 settings, as pylance takes them: object_store's names
    (`aws_endpoint`, `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`,
    `aws_region`, `allow_http`) or their environment spellings (`AWS_ENDPOINT_URL`, ...); they
    take precedence over the `AWS_*` environment, for this lake only. Ignored for local roots.

    Raises `PolicyError` for a bad duration, `LakeError` for a bad root or option, or a lake
    that exists with another floor; `StorageError` when the store fails."""
    return Lake(_lake.init(root, min_age, _options(storage_options)))


def open(root: str, storage_options: Optional[dict] = None) -> "Lake":  # noqa: A001 (the API's name)
    """Open the lake at `root` (`storage_options` as for `init`). Raises `LakeError` when there
    is no lake there."""
    return Lake(_lake.open(root, _options(storage_options)))


class DataLocationType(pa.ExtensionType):
    """The DataLocation Arrow type: `struct<uri: string, sha256: fixed_size_binary[32],
    size: uint64>` (children not null; size in bytes) marked by the Arrow extension name
    `lake.data_location`. A column of this type references objects: the engine journals every
    reference it adds or removes, and GC keeps the objects alive while a retained version
    references them."""

    def __init__(self) -> None:
        storage = pa.struct(
            [
                pa.field("uri", pa.string(), nullable=False),
                pa.field("sha256", pa.binary(32), nullable=False),
                pa.field("size", pa.uint64(), nullable=False),
            ]
        )
        super().__init__(storage, "lake.data_location")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> "DataLocationType":
        return cls()


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
    is null is refused; make the whole location null instead). Raises `LakeError` for a sha256
    that is not 32 bytes."""
    storage = _lake.locations([(i["uri"], bytes(i["sha256"]), int(i["size"])) for i in items])
    return pa.ExtensionArray.from_storage(DataLocationType(), storage)


def _options(options: Optional[dict]) -> Optional[dict]:
    return None if options is None else {str(k): str(v) for k, v in options.items()}


class Lake:
    """An opened lake."""

    def __init__(self, native: Any) -> None:
        self._native = native
        self.gc = Gc(native)
        self.refs = Refs(native)

    @property
    def root(self) -> str:
        """The root as lake spells it."""
        return self._native.root

    def objects(self) -> "Objects":
        """The managed object writer."""
        return Objects(self._native)

    def table(self, name: str) -> "Table":
        """Table `name` (`table@branch` for a branch). It is created by its first append."""
        return Table(self._native, name)

    def __repr__(self) -> str:
        return f"lake.Lake({self.root!r})"


class Objects:
    """Uploads immutable objects under `objects/<ULID>/<name>` (the ULID records when it was
    minted: GC judges an object's age by it and by the store's `last_modified`)."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def put(self, data: Union[bytes, bytearray, memoryview, str, os.PathLike, Any], name: Optional[str] = None) -> Location:
        """Upload `data` and return its `Location` (`{"uri", "sha256", "size"}`, size in bytes;
        `.scalar` gives it as an Arrow struct scalar).

        `data` is bytes, a path (streamed from disk; `name` defaults to its file name), or a
        binary file object (read whole; `name` defaults to its `name`). The name is sanitised
        into the key's last segment. Raises `StorageError` when the upload fails (nothing is
        referenced until a row names the location), `TypeError` for other kinds of `data`.

        Publish rows that reference the object soon: a reference to an object older than the
        lake's GC policy floor is refused (`GuardError`), since GC may be collecting it."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            uri, sha, size = self._native.put_bytes(name or "object", bytes(data))
        elif isinstance(data, (str, os.PathLike)) and name is None:
            uri, sha, size = self._native.put_file(os.fspath(data))
        elif isinstance(data, (str, os.PathLike)):
            with _builtin_open(data, "rb") as f:
                uri, sha, size = self._native.put_bytes(name, f.read())
        elif hasattr(data, "read"):
            uri, sha, size = self._native.put_bytes(name or os.path.basename(str(getattr(data, "name", "object"))), data.read())
        else:
            raise TypeError(f"put takes bytes, a path or a binary file, not {type(data).__name__}")
        return Location(uri=uri, sha256=bytes(sha), size=size)

    def put_many(
        self, items: Union[str, os.PathLike, Iterable[Any]], progress: bool = False, concurrency: int = 8
    ) -> Union[list, dict]:
        """Upload many objects, `concurrency` at a time (the GIL is released while each
        uploads).

        - `items` a folder (a path to a directory): every regular file below it, symbolic links
          not followed. Returns `{relative path: Location}` in sorted path order.
        - `items` an iterable of what `put` takes (paths, bytes, binary files): returns their
          `Location`s in the same order. An iterator is consumed as uploads finish, holding at
          most `2 * concurrency` items.

        `progress=True` shows a progress bar on stderr (tqdm: `pip install lake[progress]`).
        The first failure is raised once the uploads in flight end; objects uploaded before it
        stay unreferenced (GC collects them after the policy floor)."""
        import concurrent.futures
        import itertools

        folder = None
        if isinstance(items, (str, os.PathLike)) and os.path.isdir(items):
            folder = os.fspath(items)
            paths = sorted(_files_below(folder))
            work: Iterable[Any] = [os.path.join(folder, p) for p in paths]
            total: Optional[int] = len(paths)
        else:
            work = items
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
                        if hasattr(item, "read"):  # a file object is read here, uploaded there
                            name = os.path.basename(str(getattr(item, "name", "object")))
                            pending.append(pool.submit(self.put, item.read(), name))
                        else:
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


def _files_below(folder: str) -> Iterable[str]:
    """Relative paths (with `/`) of the regular files below `folder`; links are not followed."""
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames.sort()
        for f in filenames:
            full = os.path.join(dirpath, f)
            if os.path.isfile(full) and not os.path.islink(full):
                yield os.path.relpath(full, folder).replace(os.sep, "/")


def _progress_bar(total: Optional[int]) -> Any:
    try:
        from tqdm import tqdm
    except ImportError as e:
        raise ImportError("put_many(progress=True) draws its bar with tqdm: pip install tqdm (or lake[progress])") from e
    return tqdm(total=total, unit="object", desc="put")


def _builtin_open(path: Any, mode: str) -> Any:
    import builtins

    return builtins.open(path, mode)


class Table:
    """One table (or branch) of a lake, written through the journaling engine.

    Ctrl-C during a write (append, overwrite, merge_insert, delete, update, compact, cleanup,
    tag, restore) never leaves a version committed without its journal entry (GC would refuse
    it until `lake refs repair`): a write that streams its input stops reading it and commits
    nothing; once Lance has read it all, or for the other writes, the write finishes. Then
    `KeyboardInterrupt` is raised with a note (`__notes__`, Python 3.11+) saying whether the
    write committed."""

    def __init__(self, native: Any, name: str) -> None:
        self._native = native
        self.name = name

    def append(self, data: Any) -> dict:
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
        return json.loads(self._native.write(self.name, _stream(data), False))

    def overwrite(self, data: Any) -> dict:
        """Replace the table's content with `data` (as for `append`) as one new version; the
        old rows' references are journaled as removed (their objects stay alive while an older
        retained version references them). Returns and raises as `append`."""
        return json.loads(self._native.write(self.name, _stream(data), True))

    def merge_insert(self, data: Any, on: Union[str, list]) -> dict:
        """Upsert `data` (as for `append`) keyed on `on` (a column name or a list of them): rows
        whose key matches are replaced, the others inserted, as one new version. The journal
        entry is computed from the two versions' manifests, so it is exact under duplicate keys
        and concurrent writers. Returns and raises as `append`."""
        keys = [on] if isinstance(on, str) else list(on)
        return json.loads(self._native.merge_insert(self.name, _stream(data), keys))

    def delete(self, where: str) -> Optional[dict]:
        """Delete the rows matching `where` (a Lance SQL predicate, e.g. `"episode = 'e1'"`) as
        one new version; returns the commit (as `append`) or `None` when no row matched.
        Nondeterministic predicates (`random()`) are refused (`LakeError`)."""
        out = self._native.delete(self.name, where)
        return None if out is None else json.loads(out)

    def update(self, values: dict, where: Optional[str] = None) -> Optional[dict]:
        """Set columns to SQL expressions (`{"label": "'cat'"}`, `{"file": "NULL"}`) on the
        rows matching `where` (all rows when `None`) as one new version; returns the commit or
        `None` when no row matched. References the new values add are checked by the guard
        before the commit (`GuardError`)."""
        out = self._native.update(self.name, [f"{k}={v}" for k, v in values.items()], where)
        return None if out is None else json.loads(out)

    def compact(self) -> Optional[dict]:
        """Compact the table's fragments (an empty journal entry)."""
        out = self._native.compact(self.name)
        return None if out is None else json.loads(out)

    def cleanup(self, older_than: str) -> dict:
        """Remove versions older than `older_than` (humantime, e.g. `"7d"`, `"0s"`) through
        Lance's cleanup; never the latest or tagged versions. Objects only removed versions
        referenced become orphans for GC. Returns `{"old_versions": int, "bytes_removed": int}`
        (bytes of Lance files removed)."""
        versions, removed = self._native.cleanup(self.name, older_than)
        return {"old_versions": versions, "bytes_removed": removed}

    def versions(self) -> list:
        """The versions that exist, ascending: `[{"version": int, "timestamp": str (RFC 3339
        UTC), "tags": [str], "journaled": bool}]` (`journaled` is False for a version another
        Lance client wrote, which GC refuses to plan past until `lake refs repair`)."""
        return json.loads(self._native.versions(self.name))

    def tag(self, name: str, version: int) -> None:
        """Tag `version` (kept by cleanup; its objects stay alive)."""
        self._native.tag(self.name, name, version)

    def restore(self, version: int) -> dict:
        """Make `version`'s content the latest version."""
        return json.loads(self._native.restore(self.name, version))

    @property
    def uri(self) -> str:
        """The Lance dataset's URI. Raises `LakeError` for an invalid table name."""
        return self._native.dataset_uri(self.name)

    def to_lance(self) -> Any:
        """The table as a pylance dataset, for reading (`pip install lake[lance]`). Writing to it
        with pylance bypasses the journal: GC then refuses until `lake refs repair`."""
        import lance

        options = self._native.storage_options()
        return lance.dataset(self.uri, storage_options=options or None)


def _stream(data: Any) -> Any:
    if hasattr(data, "__arrow_c_stream__"):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    raise TypeError(f"expected an Arrow stream producer (a pyarrow Table or RecordBatchReader, a polars DataFrame), not {type(data).__name__}")


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
    def problems(self) -> list:
        """What keeps the lineage incomplete, one sentence each."""
        return self._parsed["problems"]

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
    def candidate_count(self) -> int:
        return len(self._parsed["candidates"])

    @property
    def candidate_bytes(self) -> int:
        return sum(c["size"] for c in self._parsed["candidates"])

    @property
    def min_age_seconds(self) -> int:
        return self._parsed["min_age_seconds"]

    def save(self, path: str, force: bool = False) -> None:
        """Write the plan document (what `lake gc --out` writes), atomically, outside the plan's
        lake (`PolicyError` for a path inside it, by any route). An existing file is replaced only
        if it is empty or a plan document, unless `force` (any regular file)."""
        _lake.plan_save(os.fspath(path), self._document, force)

    @classmethod
    def load(cls, path: str) -> "Plan":
        """Read a plan document; its digest is recomputed when applied."""
        with _builtin_open(path, "r") as f:
            document = f.read()
        return cls(document, json.loads(document)["digest"])

    def __repr__(self) -> str:
        return f"lake.Plan(candidates={self.candidate_count}, bytes={self.candidate_bytes}, complete={self.lineage_complete})"


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
        self.shards: list = [Plan(doc, json.loads(doc)["digest"]) for doc in shards]

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
        return self._parsed["min_age_seconds"]

    @property
    def lineage_complete(self) -> bool:
        """False when any shard was planned on incomplete lineage: no shard may be applied."""
        return all(shard.lineage_complete for shard in self.shards)

    @property
    def candidates(self) -> pa.Table:
        """Every shard's candidates, in key order (shards are ordered ranges)."""
        return pa.concat_tables([shard.candidates for shard in self.shards])

    @property
    def candidate_count(self) -> int:
        return sum(shard.candidate_count for shard in self.shards)

    def checkpoint_name(self, index: int) -> str:
        """The file name of shard `index`'s checkpoint in a checkpoint folder."""
        return f"shard-{index:05d}.ckpt"

    def save(self, folder: str, force: bool = False) -> None:
        """Write `folder/manifest.json` and `folder/shard-00000.json`, ... (the manifest last),
        as `lake gc --shards N --out DIR` does: outside the plan's lake (`PolicyError` inside
        it), into a new folder (its parent must exist), an empty one or one holding a sharded
        plan (anything when `force`)."""
        _lake.sharded_save(os.fspath(folder), self._manifest, [shard._document for shard in self.shards], force)

    @classmethod
    def load(cls, folder: str) -> "ShardedPlan":
        """Read a sharded plan's folder; every digest is checked (an edited manifest or shard
        is refused with `PolicyError`)."""
        manifest, shards = _lake.sharded_load(os.fspath(folder))
        return cls(manifest, shards)

    def __repr__(self) -> str:
        return f"lake.ShardedPlan(shards={len(self.shards)}, candidates={self.candidate_count}, complete={self.lineage_complete})"


class Gc:
    """Garbage collection with the library's rules: the store's clock, the policy floor, the
    skew bound, plans bound to their lake and `min_age`, checkpoints outside the lake."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def plan(self, min_age: str, allow_below_policy: bool = False) -> Plan:
        """A dry run at horizon `min_age` (humantime). Raises `PolicyError` for a horizon below
        the lake's policy floor (unless `allow_below_policy`) or a clock skew past the bound."""
        document, digest = self._native.gc_plan(min_age, allow_below_policy)
        return Plan(document, digest)

    def apply(
        self,
        plan: Union[Plan, str, None],
        checkpoint: str,
        allow_below_policy: bool = False,
        page_size: int = 1000,
        max_pages: Optional[int] = None,
    ) -> dict:
        """Delete `plan`'s candidates (a `Plan`, or the path of a saved plan document; `None` to
        resume `checkpoint`), revalidated against the journal before every group of deletes, in
        pages of `page_size` keys (1 to 1000: one S3 DeleteObjects request each), recording
        progress in `checkpoint` (a local path or `s3://` URL outside the lake; the plan is saved
        beside it as `<checkpoint>.plan.json`).

        Resumes the apply `checkpoint` records when there is one of the same plan; a finished
        apply of another plan there is replaced by this one, an unfinished one refuses it
        (`LakeError` naming both plans: resume it first, or choose a new checkpoint path). Stops after
        `max_pages` pages when given; Ctrl-C (`KeyboardInterrupt`) stops it at the next group
        boundary with the groups already done recorded. Either way, call again to resume.

        Returns the checkpoint: `{"candidates", "next_index", "deleted", "already_gone",
        "absent", "skipped", "failed", "revived", "complete", ...}` (counts of objects; `revived`
        lists candidates a newer version references, left alone). Raises `PolicyError` for a
        plan of another lake or `min_age`, a cutoff the store's clock no longer allows, or a
        checkpoint inside the lake; `LineageError` when the journal cannot account for a table;
        `StorageError` when the store fails (`transient` says whether a retry may help)."""
        if isinstance(plan, (str, os.PathLike)):
            plan = Plan.load(os.fspath(plan))
        document = None if plan is None else plan._document
        return json.loads(self._native.gc_apply(document, checkpoint, allow_below_policy, page_size, max_pages))


    def plan_sharded(self, min_age: str, shards: int, allow_below_policy: bool = False) -> ShardedPlan:
        """A dry run made as `shards` (1 to 256) shards over disjoint key ranges, in this
        process, from one read of the journal and one listing. Each shard's candidates are the
        unsharded plan's within its range. Raises as `plan`."""
        manifest, documents = self._native.gc_plan_sharded(min_age, shards, allow_below_policy)
        return ShardedPlan(manifest, documents)

    def apply_shard(
        self,
        sharded: ShardedPlan,
        index: int,
        checkpoint: str,
        allow_below_policy: bool = False,
        page_size: int = 1000,
        max_pages: Optional[int] = None,
    ) -> dict:
        """Apply shard `index` of `sharded` (or resume its apply at `checkpoint`), as `apply`
        does a whole plan: revalidated, deleting only keys of its range, checkpointed. The shard
        must be bound to the manifest and every shard planned on complete lineage
        (`PolicyError`, `LineageError` otherwise)."""
        return self._apply_shard(
            sharded._manifest, sharded.shards[index]._document, checkpoint, allow_below_policy, page_size, max_pages
        )

    # The steps `lake.ray` runs in its driver and tasks (documents travel as JSON text).
    def _shard_spec(self, min_age: str, shards: int, allow_below_policy: bool) -> str:
        return self._native.gc_shard_spec(min_age, shards, allow_below_policy)

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
    ) -> dict:
        out = self._native.gc_apply_shard(manifest, shard, checkpoint, allow_below_policy, page_size, max_pages)
        return json.loads(out)


class Refs:
    """The reference journal."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def verify(self) -> dict:
        """Compare the journal with full scans of every retained version (`ok` is the verdict)."""
        report = json.loads(self._native.refs_verify())
        counts = ("mismatch_count", "missing_object_count", "size_mismatch_count")
        report["ok"] = not report.get("problems") and not any(report.get(k) for k in counts)
        return report
