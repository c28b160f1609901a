"""Sharded garbage collection on Ray (`pip install lake[ray]`).

    import lake.ray
    sharded = lake.ray.plan("s3://bucket/lake", min_age="7d", shards=16)   # a dry run
    sharded.save("/shared/gc-2026-12-01")                                 # manifest + shards
    reports = lake.ray.apply(sharded, checkpoint_dir="/shared/gc-2026-12-01-ckpt")

The driver fixes the cutoff (the store's clock minus `min_age`, after the lake's policy checks)
and splits the managed keys into `shards` ranges by mint time; each shard is planned by a Ray
task (reading the whole journal, listing only its range), and the driver binds the shards' plans
under one manifest whose digest covers theirs. Each shard is applied by a Ray task with its own
checkpoint, `<checkpoint_dir>/shard-00003.ckpt`: a task that fails or is killed is retried by
Ray (`max_retries`) and resumes its shard's checkpoint, so nothing is deleted twice and nothing
is lost. Every safety rule is the library's (`lake.Gc`): the policy floor, the store's clock,
plans bound to their lake, horizon and manifest, and revalidation before every group of
deletes.

Tasks open the lake themselves: the lake root and `storage_options` travel to them, so workers
need the `lake` package, network access to the store and the same credentials (or options that
carry them). The checkpoint folder must be reachable by every worker: an `s3://bucket/prefix`
folder (opened with the lake's S3 settings), a shared file system, or a local folder when Ray
runs on one node.

Distributed writes from Ray Data: `LakeDatasink` writes a dataset as ONE journaled version of an
existing table (each write task prepares a piece, the driver commits every piece at once):

    ds = ray.data.read_parquet("s3://bucket/episodes/")             # rows referencing objects
    ds.write_datasink(lake.ray.LakeDatasink("s3://bucket/lake", "episodes"))

A task's lake exception reaches the caller as itself (`except lake.PolicyError` works), not as
Ray's `RayTaskError` wrapper; the wrapper is its `__cause__`.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

from . import InputError, LakeError, ShardedPlan, StorageError, _count, _text
from . import open as _open_lake

__all__ = ["plan", "apply", "LakeDatasink"]


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ImportError("lake.ray needs Ray: pip install 'lake[ray]'") from e
    if not ray.is_initialized():
        ray.init()
    return ray


def _gather(ray: Any, refs: list) -> list:
    """The results of `refs`, in order, once every task has ended. A task that raised a lake
    exception re-raises it as itself (the first by shard order; Ray wraps it in a
    `RayTaskError`, kept as the `__cause__`); other failures are raised as Ray raises them."""
    pending = list(refs)
    while pending:
        _, pending = ray.wait(pending, num_returns=len(pending))
    results, first = [], None
    for ref in refs:
        try:
            results.append(ray.get(ref))
        except Exception as e:  # noqa: BLE001 (re-raised below, the first by shard order)
            if first is None:
                first = e
    if first is None:
        return results
    cause = getattr(first, "cause", None)
    if isinstance(cause, LakeError):
        raise cause from first
    raise first


def _plan_shard(root: str, storage_options: Optional[dict], spec: str, index: int, allow_below_policy: bool) -> str:
    import lake

    return lake.open(root, storage_options=storage_options).gc._plan_shard(spec, index, allow_below_policy)


def _apply_shard(
    root: str,
    storage_options: Optional[dict],
    manifest: str,
    shard: str,
    checkpoint: str,
    allow_below_policy: bool,
    page_size: int,
) -> Any:
    import lake

    lk = lake.open(root, storage_options=storage_options)
    return lk.gc._apply_shard(manifest, shard, checkpoint, allow_below_policy, page_size)


def plan(
    root: str,
    min_age: str,
    shards: int,
    storage_options: Optional[dict] = None,
    allow_below_policy: bool = False,
    max_retries: int = 3,
    full: bool = False,
) -> ShardedPlan:
    """A sharded dry run of the lake at `root`: `shards` (1 to 256) Ray tasks, one per key range,
    each returning its shard's plan; the driver binds them under a manifest. Nothing is deleted.
    When the lake's GC state allows an incremental plan (unless `full`), the plan is one
    incremental shard over every key, planned by one task (`ShardedPlan.mode`): it lists only
    the keys minted since the state, the work that shards split.

    `min_age` is the horizon (humantime, at least the lake's policy floor unless
    `allow_below_policy`). A task that fails is retried up to `max_retries` times (planning
    changes nothing). Returns a `lake.ShardedPlan` (`digest`, `cutoff`, `shards`, `candidates`,
    `save(folder)`). Raises `PolicyError` for a horizon the lake refuses, or the error of a shard
    whose retries are exhausted."""
    ray = _ray()
    lake = _open_lake(root, storage_options=storage_options)
    spec = lake.gc._shard_spec(min_age, shards, allow_below_policy, full)
    # Worker deaths are retried by Ray; of the exceptions, only storage failures.
    task = ray.remote(max_retries=max_retries, retry_exceptions=[StorageError])(_plan_shard)
    count = lake.gc._spec_count(spec)
    documents = _gather(ray, [task.remote(root, storage_options, spec, i, allow_below_policy) for i in range(count)])
    return lake.gc._assemble(documents)


def apply(
    sharded: Union[ShardedPlan, str, os.PathLike],
    checkpoint_dir: str,
    storage_options: Optional[dict] = None,
    allow_below_policy: bool = False,
    page_size: int = 1000,
    max_retries: int = 3,
) -> list:
    """Apply every shard of `sharded` (a `ShardedPlan`, or the folder `ShardedPlan.save` wrote)
    as Ray tasks, shard `i` checkpointed at `<checkpoint_dir>/shard-0000i.ckpt`: `checkpoint_dir`
    is an `s3://bucket/prefix` folder (opened with the lake's S3 settings) or a local folder
    (created if missing), outside the lake and reachable by every worker.

    A task that fails (a storage error, or its worker killed) is retried up to `max_retries` times
    and resumes its shard's checkpoint; calling `apply` again after a failure resumes every
    unfinished shard. Returns the shards' checkpoints in shard order (as `Gc.apply` returns
    one). Raises the error of a shard whose retries are exhausted (`PolicyError`,
    `LineageError`, `StorageError`, as itself), after the other shards' tasks end."""
    ray = _ray()
    if not isinstance(sharded, ShardedPlan):
        sharded = ShardedPlan.load(sharded)
    checkpoint_dir = _text("checkpoint_dir", checkpoint_dir)
    page_size = _count("page_size", page_size, 1, 1000)
    if checkpoint_dir.startswith(("s3://", "s3a://")):
        folder = checkpoint_dir.rstrip("/")
        checkpoints = [f"{folder}/{sharded.checkpoint_name(i)}" for i in range(len(sharded.shards))]
    elif "://" in checkpoint_dir:
        raise InputError(f"checkpoint_dir {checkpoint_dir}: give a local folder or s3://bucket/prefix")
    else:
        os.makedirs(checkpoint_dir, exist_ok=True)
        folder = os.path.abspath(checkpoint_dir)
        checkpoints = [os.path.join(folder, sharded.checkpoint_name(i)) for i in range(len(sharded.shards))]
    task = ray.remote(max_retries=max_retries, retry_exceptions=[StorageError])(_apply_shard)
    refs = [
        task.remote(
            sharded.root,
            storage_options,
            sharded._manifest,
            shard._document,
            checkpoints[i],
            allow_below_policy,
            page_size,
        )
        for i, shard in enumerate(sharded.shards)
    ]
    return _gather(ray, refs)


def __getattr__(name: str) -> Any:
    # `LakeDatasink` subclasses `ray.data.Datasink`: made on first use, so that importing
    # `lake.ray` (for GC) does not import Ray Data. Pickle finds it here too (Ray's workers).
    if name == "LakeDatasink":
        cls = _make_datasink()
        globals()["LakeDatasink"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _make_datasink() -> type:
    try:
        from ray.data import Datasink
    except ImportError as e:
        raise ImportError("lake.ray.LakeDatasink needs Ray Data: pip install 'lake[ray]'") from e

    class LakeDatasink(Datasink):
        """A Ray Data sink (`Dataset.write_datasink`) that writes a dataset as ONE new version of
        the table `table` of the lake at `root`, appended (`mode="append"`) or replacing its content
        (`mode="overwrite"`), with one journal entry, through lake's two-phase write
        (`Table.prepare`, `Table.commit_pieces`; `docs/distributed-writes.md`).

        - Each write task (`write`, on the workers) opens the lake (`root`, `storage_options`: the
          workers need the `lake` package, access to the store and its credentials) and prepares
          ONE piece from all its blocks (pyarrow tables, or anything Ray's `BlockAccessor` turns
          into one), returning the piece's JSON; a task without rows returns none.
        - `on_write_complete` (on the driver, once every task succeeded) commits every piece in
          ONE `commit_pieces` call; its commit (`{"table", "version", "rows",
          "references_added", ...}`) is then `self.result`.
        - `on_write_failed` commits nothing.

        So a task that fails and is retried by Ray cannot duplicate rows (only a successful
        attempt's piece reaches the driver), and a driver that dies before the commit commits
        nothing (the prepared data files are left for Lance's cleanup). A dataset without rows
        commits nothing (`self.result` stays `None`).

        The table must exist (create it with a first `Table.append`) and the dataset's columns must
        be its schema. Rows reference objects already uploaded: upload them in the pipeline before
        the write, e.g. `ds.map_batches(upload)` whose function calls
        `lake.open(root).objects().put(...)` and returns the rows with `lake.locations([...])`
        columns; commit within the lake's `min_age` of those uploads (the publication guard judges
        the oldest object at the commit: `GuardError`).

        Raises (from `write_datasink`) what `Table.prepare` raises in a task whose retries are
        exhausted, or what `Table.commit_pieces` raises at the commit (`InputError` with kind
        `piece_refused`: a column changed since the pieces were prepared, say; nothing
        committed)."""

        def __init__(self, root: str, table: str, mode: str = "append", storage_options: Optional[dict] = None) -> None:
            self.root = _text("root", root)
            self.table = _text("table", table)
            if mode not in ("append", "overwrite"):
                raise InputError(f"LakeDatasink mode {mode!r}: give 'append' or 'overwrite'")
            self.mode = mode
            self.storage_options = None if storage_options is None else dict(storage_options)
            self.result: Optional[Any] = None  # a lake.Commit once committed

        def get_name(self) -> str:
            """The sink's name in Ray Data's progress and stats."""
            return "LakeDatasink"

        def on_write_start(self, schema: Any = None) -> None:
            """Checks, on the driver, that the lake opens and the table exists before any task
            writes (`LakeError` otherwise): one open of the table's latest manifest, not a read of
            its journal (`Table.versions` reads every retained entry whole)."""
            try:
                _open_lake(self.root, storage_options=self.storage_options).table(self.table).version
            except LakeError as e:
                if e.kind != "no_such_table":
                    raise
                raise type(e)(
                    f"LakeDatasink writes into an existing table, and the lake at {self.root} has no table "
                    f"`{self.table}`: create it with a first `lake.open(root).table({self.table!r}).append(rows)` "
                    "(rows of the dataset's schema), then write the dataset",
                    e.transient,
                    e.kind,
                ) from e

        def write(self, blocks: Any, ctx: Any) -> list:
            """Prepares one piece of the task's blocks; returns `[piece JSON]`, or `[]` when the
            blocks hold no row."""
            import pyarrow as pa
            from ray.data.block import BlockAccessor

            tables = (BlockAccessor.for_block(b).to_arrow() for b in blocks)
            first = None
            for t in tables:
                if t.num_rows:
                    first = t
                    break
            if first is None:
                return []
            schema = first.schema

            def batches() -> Any:
                yield from first.to_batches()
                for t in tables:
                    if not t.num_rows:
                        continue
                    if t.schema != schema:
                        t = t.cast(schema)
                    yield from t.to_batches()

            reader = pa.RecordBatchReader.from_batches(schema, batches())
            lk = _open_lake(self.root, storage_options=self.storage_options)
            return [lk.table(self.table).prepare(reader)]

        def on_write_complete(self, write_result: Any) -> None:
            """Commits every task's piece as one version (nothing when no task wrote a row)."""
            pieces = [piece for returned in write_result.write_returns for piece in (returned or [])]
            if not pieces:
                return
            lk = _open_lake(self.root, storage_options=self.storage_options)
            self.result = lk.table(self.table).commit_pieces(pieces, mode=self.mode)

        def on_write_failed(self, error: Exception) -> None:
            """Commits nothing: the pieces prepared so far are left uncommitted (their data files
            are removed by Lance's cleanup after 7 days)."""

    LakeDatasink.__module__ = __name__
    LakeDatasink.__qualname__ = "LakeDatasink"
    return LakeDatasink
