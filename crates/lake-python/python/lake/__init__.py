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
    "Lake",
    "Objects",
    "Table",
    "Gc",
    "Plan",
    "Refs",
    "LakeError",
    "GuardError",
    "PolicyError",
    "LineageError",
    "StorageError",
]

Location = dict  # {"uri": str, "sha256": bytes (32), "size": int (bytes)}


def init(root: str, min_age: str = "7d", storage_options: Optional[dict] = None) -> "Lake":
    """Create a lake at `root` (a local folder, `file:///...` or `s3://bucket/prefix`) whose GC
    policy floor is `min_age` (humantime: `7d`, `12h`), or open it when it exists with that floor.

    `storage_options` are S3 settings as environment variables (`AWS_ENDPOINT_URL`, ...), set for
    this process. Raises `PolicyError` for a bad duration, `LakeError` otherwise."""
    _apply_storage_options(storage_options)
    return Lake(_lake.init(root, min_age))


def open(root: str, storage_options: Optional[dict] = None) -> "Lake":  # noqa: A001 (the API's name)
    """Open the lake at `root`. Raises `LakeError` when there is none."""
    _apply_storage_options(storage_options)
    return Lake(_lake.open(root))


def locations(items: Iterable[Location]) -> pa.Array:
    """A pyarrow array of the DataLocation type (`struct<uri: string, sha256: fixed_size_binary[32],
    size: uint64>`, none null) from locations as `put` returns them."""
    return _lake.locations([(i["uri"], bytes(i["sha256"]), int(i["size"])) for i in items])


def _apply_storage_options(options: Optional[dict]) -> None:
    for key, value in (options or {}).items():
        os.environ[str(key).upper()] = str(value)


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
    """Uploads immutable objects under `objects/<ULID>/<name>`."""

    def __init__(self, native: Any) -> None:
        self._native = native

    def put(self, data: Union[bytes, bytearray, memoryview, str, os.PathLike, Any], name: Optional[str] = None) -> Location:
        """Upload `data` (bytes, a path, or a binary file object) and return its location
        `{"uri", "sha256", "size"}` (size in bytes). A path is streamed; `name` defaults to its
        file name."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            uri, sha, size = self._native.put_bytes(name or "object", bytes(data))
        elif isinstance(data, (str, os.PathLike)) and name is None:
            uri, sha, size = self._native.put_file(os.fspath(data))
        elif isinstance(data, (str, os.PathLike)):
            with _builtin_open(data, "rb") as f:
                uri, sha, size = self._native.put_bytes(name, f.read())
        elif hasattr(data, "read"):
            uri, sha, size = self._native.put_bytes(name or getattr(data, "name", "object").rsplit("/", 1)[-1], data.read())
        else:
            raise TypeError(f"put takes bytes, a path or a binary file, not {type(data).__name__}")
        return {"uri": uri, "sha256": bytes(sha), "size": size}

    def put_many(self, items: Iterable[Any]) -> list:
        """`put` of every item (paths, bytes or files), in order."""
        return [self.put(item) for item in items]


def _builtin_open(path: Any, mode: str) -> Any:
    import builtins

    return builtins.open(path, mode)


class Table:
    """One table (or branch) of a lake, written through the journaling engine."""

    def __init__(self, native: Any, name: str) -> None:
        self._native = native
        self.name = name

    def append(self, data: Any) -> dict:
        """Append the rows of `data` (any `__arrow_c_stream__` producer) as one version.
        Raises `GuardError` when a row references an object too old to publish."""
        return json.loads(self._native.write(self.name, _stream(data), False))

    def overwrite(self, data: Any) -> dict:
        """Replace the table's content with `data` as one version."""
        return json.loads(self._native.write(self.name, _stream(data), True))

    def merge_insert(self, data: Any, on: Union[str, list]) -> dict:
        """Upsert `data` keyed on `on` (a column or columns): matching rows are replaced."""
        keys = [on] if isinstance(on, str) else list(on)
        return json.loads(self._native.merge_insert(self.name, _stream(data), keys))

    def delete(self, where: str) -> Optional[dict]:
        """Delete the rows matching `where` (Lance SQL); `None` when none matched."""
        out = self._native.delete(self.name, where)
        return None if out is None else json.loads(out)

    def update(self, values: dict, where: Optional[str] = None) -> Optional[dict]:
        """Set columns to SQL expressions (`{"label": "'cat'"}`) on the rows matching `where`."""
        out = self._native.update(self.name, [f"{k}={v}" for k, v in values.items()], where)
        return None if out is None else json.loads(out)

    def compact(self) -> Optional[dict]:
        """Compact the table's fragments (an empty journal entry)."""
        out = self._native.compact(self.name)
        return None if out is None else json.loads(out)

    def cleanup(self, older_than: str) -> dict:
        """Remove versions older than `older_than` (humantime); never the latest or tagged ones."""
        versions, removed = self._native.cleanup(self.name, older_than)
        return {"old_versions": versions, "bytes_removed": removed}

    def versions(self) -> list:
        """The versions that exist: `[{"version", "timestamp", "tags", "journaled"}]`."""
        return json.loads(self._native.versions(self.name))

    def tag(self, name: str, version: int) -> None:
        """Tag `version` (kept by cleanup; its objects stay alive)."""
        self._native.tag(self.name, name, version)

    def restore(self, version: int) -> dict:
        """Make `version`'s content the latest version."""
        return json.loads(self._native.restore(self.name, version))

    @property
    def uri(self) -> str:
        """The Lance dataset's URI."""
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

    def save(self, path: str) -> None:
        """Write the plan document (what `lake gc --out` writes)."""
        with _builtin_open(path, "w") as f:
            f.write(self._document)

    @classmethod
    def load(cls, path: str) -> "Plan":
        """Read a plan document; its digest is recomputed when applied."""
        with _builtin_open(path, "r") as f:
            document = f.read()
        return cls(document, json.loads(document)["digest"])

    def __repr__(self) -> str:
        return f"lake.Plan(candidates={self.candidate_count}, bytes={self.candidate_bytes}, complete={self.lineage_complete})"


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

    def apply(self, plan: Union[Plan, str, None], checkpoint: str, allow_below_policy: bool = False) -> dict:
        """Delete `plan`'s candidates (a Plan, or a plan document's path), revalidated against
        the journal, group by group, recording progress in `checkpoint` (a path outside the
        lake). Resumes the apply `checkpoint` records when there is one. Ctrl-C stops it with
        the last finished group recorded: call again to resume. Returns the checkpoint."""
        if isinstance(plan, str):
            plan = Plan.load(plan)
        document = None if plan is None else plan._document
        min_age = f"{plan.min_age_seconds}s" if plan is not None else _checkpoint_min_age(checkpoint)
        return json.loads(self._native.gc_apply(document, checkpoint, min_age, allow_below_policy))


def _checkpoint_min_age(checkpoint: str) -> str:
    with _builtin_open(checkpoint + ".plan.json", "r") as f:
        return f"{json.load(f)['plan']['min_age_seconds']}s"


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
