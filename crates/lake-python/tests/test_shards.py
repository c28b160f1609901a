"""Sharded GC from Python: in one process (`Gc.plan_sharded`) and as Ray tasks (`lake.ray`),
on local and LocalStack S3 roots; the shards' plans equal the unsharded plan, edits are refused,
and a task killed mid-shard loses nothing."""

import json
import os
import pathlib
import signal
import threading
import time

import pyarrow as pa
import pytest

import lake

ray = pytest.importorskip("ray")


def lake_with_orphans(root, orphans, live, storage_options=None):
    """A lake (policy floor 1 s) whose table references `live` objects, with `orphans`
    unreferenced ones, all old enough to collect once this returns."""
    lk = lake.init(root, min_age="1s", storage_options=storage_options)
    lk.objects().put_many([f"orphan {i}".encode() for i in range(orphans)])
    kept = lk.objects().put_many([f"live {i}".encode() for i in range(live)])
    lk.table("t").append(pa.table({"episode": [f"e{i}" for i in range(live)], "file": lake.locations(kept)}))
    time.sleep(2.2)
    return lk, kept


def uris(table):
    return table.column("uri").to_pylist()


def test_shards_in_one_process_equal_the_unsharded_plan(local_root, tmp_path):
    lk, _ = lake_with_orphans(local_root, orphans=40, live=5)
    whole = lk.gc.plan(min_age="1s")
    sharded = lk.gc.plan_sharded(min_age="1s", shards=4)
    assert len(sharded.shards) >= 2 and sharded.lineage_complete
    assert uris(sharded.candidates) == uris(whole.candidates) and len(uris(whole.candidates)) == 40
    assert sharded.cutoff == sharded.shards[0].cutoff
    folder = tmp_path / "sharded"
    sharded.save(folder)
    again = lake.ShardedPlan.load(folder)
    assert again.digest == sharded.digest and uris(again.candidates) == uris(whole.candidates)
    # An edited manifest is refused when read.
    manifest = folder / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["manifest"]["shards"][0]["candidates"] += 1
    manifest.write_text(json.dumps(doc))
    with pytest.raises(lake.LakeError, match="manifest"):
        lake.ShardedPlan.load(folder)
    # Shards apply one by one, each with its own checkpoint.
    total = 0
    for i in reversed(range(len(sharded.shards))):
        report = lk.gc.apply_shard(sharded, i, checkpoint=str(tmp_path / f"shard-{i}.ckpt"))
        assert report["complete"]
        total += report["deleted"]
    assert total == 40 and lk.refs.verify()["ok"]


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_ray_plans_and_applies_shards(backend, ray_local, local_root, tmp_path, request):
    import lake.ray

    root = local_root if backend == "local" else request.getfixturevalue("s3_root")
    lk, kept = lake_with_orphans(root, orphans=30, live=4)
    whole = lk.gc.plan(min_age="1s")
    sharded = lake.ray.plan(root, min_age="1s", shards=4)
    assert uris(sharded.candidates) == uris(whole.candidates) and len(uris(whole.candidates)) == 30
    folder = tmp_path / "plan"
    sharded.save(folder)
    reports = lake.ray.apply(folder, checkpoint_dir=str(tmp_path / "ckpt"))
    assert all(r["complete"] for r in reports)
    assert sum(r["deleted"] + r["absent"] for r in reports) == 30
    assert lk.refs.verify()["ok"]
    assert lk.gc.plan(min_age="1s").candidate_count == 0
    assert lk.table("t").to_lance().count_rows() == 4
    # Applying again resumes the finished checkpoints: nothing more.
    again = lake.ray.apply(sharded, checkpoint_dir=str(tmp_path / "ckpt"))
    assert [r["deleted"] for r in again] == [r["deleted"] for r in reports]


def test_a_sharded_plan_after_a_complete_apply_is_one_incremental_shard(ray_local, local_root, tmp_path):
    """Issue 40: with a GC state recorded, `Gc.plan_sharded` and `lake.ray.plan` make one
    incremental shard over every key (`ShardedPlan.mode`) proposing what the incremental plan
    proposes; its apply records the next GC state; `full=True` makes the shards asked for."""
    import lake.ray

    lk, kept = lake_with_orphans(local_root, orphans=6, live=3)
    assert lk.gc.apply(lk.gc.plan(min_age="1s"), checkpoint=str(tmp_path / "a.ckpt")).complete
    states = pathlib.Path(local_root) / "_lake" / "gc" / "state"
    recorded = len(list(states.iterdir()))
    late = lk.objects().put_many([b"late 1", b"late 2"])
    time.sleep(1.1)
    whole = lk.gc.plan(min_age="1s")
    assert whole.mode == "incremental", whole.mode_reason
    local = lk.gc.plan_sharded(min_age="1s", shards=4)
    assert (len(local.shards), local.mode) == (1, "incremental")
    assert sorted(uris(local.candidates)) == sorted(uris(whole.candidates)) == sorted(o["uri"] for o in late)
    full = lk.gc.plan_sharded(min_age="1s", shards=4, full=True)
    assert full.mode == "full" and len(full.shards) >= 2
    assert sorted(uris(full.candidates)) == sorted(uris(whole.candidates))
    sharded = lake.ray.plan(local_root, min_age="1s", shards=4)
    assert (len(sharded.shards), sharded.mode) == (1, "incremental")
    reports = lake.ray.apply(sharded, checkpoint_dir=str(tmp_path / "ckpt"))
    assert [r["deleted"] for r in reports] == [2] and all(r["complete"] for r in reports)
    assert len(list(states.iterdir())) == recorded + 1
    assert lk.refs.verify()["ok"] and lk.table("t").to_lance().count_rows() == 3


def test_a_ray_task_killed_mid_shard_loses_nothing(ray_local, local_root, tmp_path):
    import lake.ray

    orphans = 1600
    lk, kept = lake_with_orphans(local_root, orphans=orphans, live=5)
    sharded = lake.ray.plan(local_root, min_age="1s", shards=2)
    assert sharded.candidate_count == orphans
    checkpoints = tmp_path / "ckpt"
    result = {}

    def drive():
        try:
            # One key per delete page: slow enough to kill a task mid-shard.
            result["reports"] = lake.ray.apply(sharded, checkpoint_dir=str(checkpoints), page_size=1)
        except BaseException as e:  # noqa: BLE001 (reported by the assertion below)
            result["error"] = e

    driver = threading.Thread(target=drive)
    driver.start()
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and driver.is_alive() and time.monotonic() < deadline:
        started = any(_progress(p) for p in checkpoints.glob("shard-*.ckpt"))
        if started:
            killed = _kill_task("ray::_apply_shard")
        time.sleep(0.01)
    driver.join(timeout=300)
    assert killed, "no apply task was found running to kill"
    assert "error" not in result, result.get("error")
    reports = result["reports"]
    assert all(r["complete"] for r in reports)
    assert sum(r["deleted"] + r["already_gone"] + r["absent"] for r in reports) == orphans
    assert all((pathlib.Path(local_root) / k["uri"]).exists() for k in kept)
    assert lk.refs.verify()["ok"] and lk.gc.plan(min_age="1s").candidate_count == 0


def _progress(checkpoint):
    try:
        doc = json.loads(checkpoint.read_text())
    except (OSError, ValueError):
        return False
    return doc.get("next_index", 0) > 0 and not doc.get("complete")


def _kill_task(title):
    """SIGKILLs a Ray worker running a task whose process title is `title`; its pid."""
    import psutil

    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if cmdline and cmdline[0].startswith(title):
            os.kill(proc.info["pid"], signal.SIGKILL)
            return proc.info["pid"]
    return None


def test_a_ray_task_raises_its_own_lake_exception(ray_local, local_root, tmp_path):
    """HOLE (fixed), the input: a shard's `PolicyError` reached `lake.ray.apply`'s caller as
    Ray's `RayTaskError`, which `except lake.PolicyError` does not catch (and the class could
    not even be unpickled). Fix: the exceptions pickle, and `lake.ray` re-raises the task's own
    exception (the `RayTaskError` is its `__cause__`)."""
    import lake.ray

    lk, kept = lake_with_orphans(local_root, orphans=6, live=2)
    sharded = lake.ray.plan(local_root, min_age="1s", shards=2)
    # A checkpoint folder inside the lake: every shard's task refuses it.
    with pytest.raises(lake.PolicyError, match="inside the lake root") as raised:
        lake.ray.apply(sharded, checkpoint_dir=os.path.join(local_root, "ckpt"))
    assert raised.value.transient is False
    assert isinstance(raised.value.__cause__, ray.exceptions.RayTaskError)
    assert lk.gc.plan(min_age="1s").candidate_count == 6, "nothing was deleted"


def test_a_ray_task_raises_a_lineage_error_after_a_foreign_write(ray_local, local_root, tmp_path):
    """A second Lance client writes after the sharded plan: every shard's task stops with
    `LineageError`, caught as such; nothing is deleted."""
    import lake.ray

    lance = pytest.importorskip("lance")
    lk, kept = lake_with_orphans(local_root, orphans=6, live=2)
    sharded = lake.ray.plan(local_root, min_age="1s", shards=2)
    lance.write_dataset(pa.table({"episode": ["z"]}), lk.table("t").uri, mode="overwrite")
    with pytest.raises(lake.LineageError):
        lake.ray.apply(sharded, checkpoint_dir=str(tmp_path / "ckpt"))
    with pytest.raises(lake.InputError):
        lake.ray.apply(sharded, checkpoint_dir="gs://bucket/ckpt")
    assert all((pathlib.Path(local_root) / k["uri"]).exists() for k in kept)


def test_ray_checkpoints_in_an_s3_folder(ray_local, s3_root, tmp_path, monkeypatch):
    """HOLE (fixed), the input: `lake.ray.apply(checkpoint_dir="s3://...")` created local
    `./s3:/...` folders. The shards' checkpoints are S3 objects (opened with the lake's S3
    settings); applying again resumes them from S3."""
    import lake.ray

    monkeypatch.chdir(tmp_path)
    lk, kept = lake_with_orphans(s3_root, orphans=8, live=2)
    sharded = lake.ray.plan(s3_root, min_age="1s", shards=2)
    folder = s3_root.rsplit("/", 1)[0] + "/ckpt-" + s3_root.rsplit("-", 1)[1]
    reports = lake.ray.apply(sharded, checkpoint_dir=folder + "/")
    assert all(r["complete"] for r in reports) and sum(r["deleted"] for r in reports) == 8
    assert not any(tmp_path.iterdir()), f"local folders were made: {list(tmp_path.iterdir())}"
    # The checkpoints are on S3: a resume reads them back, finished.
    for i in range(len(sharded.shards)):
        again = lk.gc.apply_shard(sharded, i, checkpoint=f"{folder}/{sharded.checkpoint_name(i)}")
        assert again["complete"] and again["deleted"] == reports[i]["deleted"]
    assert lk.gc.plan(min_age="1s").candidate_count == 0
