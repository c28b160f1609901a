"""The Python package end to end on real lakes: objects in, rows appended from pyarrow,
read back with pylance, deleted, GC dry run and apply; the safety rules as exceptions."""

import time

import pyarrow as pa
import pytest

import lake


def episodes(lk, n, prefix="e"):
    objects = lk.objects()
    locs = [objects.put(f"{prefix}{i} payload".encode(), name=f"{prefix}{i}.bin") for i in range(n)]
    return locs, pa.table({"episode": [f"{prefix}{i}" for i in range(n)], "file": lake.locations(locs)})


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_write_read_delete_and_collect(backend, local_root, request):
    root = local_root if backend == "local" else request.getfixturevalue("s3_root")
    lk = lake.init(root, min_age="1h")
    t = lk.table("episodes")
    locs, rows = episodes(lk, 5)
    out = t.append(rows)
    assert (out["version"], out["rows"], out["references_added"]) == (1, 5, 5)
    assert locs[0]["size"] == len(b"e0 payload") and len(locs[0]["sha256"]) == 32

    # Read back with pylance.
    ds = t.to_lance()
    assert ds.count_rows() == 5
    assert sorted(ds.to_table(columns=["episode"]).column("episode").to_pylist()) == [f"e{i}" for i in range(5)]

    assert t.delete("episode = 'e0' OR episode = 'e1'")["references_removed"] == 2
    nothing = t.delete("episode = 'nobody'")
    assert nothing is None or (nothing["rows"], nothing["references_removed"]) == (0, 0)
    t.cleanup("0s")
    assert len(t.versions()) == 1
    assert lk.refs.verify()["ok"]

    time.sleep(2.2)
    plan = lk.gc.plan(min_age="1s", allow_below_policy=True)
    assert plan.lineage_complete, plan.problems
    assert sorted(plan.candidates.column("uri").to_pylist()) == sorted([locs[0]["uri"], locs[1]["uri"]])
    assert plan.candidate_bytes == 2 * len(b"e0 payload")


def test_gc_apply_checkpoints_and_resumes(local_root, tmp_path):
    lk = lake.init(local_root, min_age="1h")
    locs, rows = episodes(lk, 3)
    lk.table("t").append(rows)
    lk.table("t").delete("episode = 'e2'")
    lk.table("t").cleanup("0s")
    time.sleep(2.2)
    plan = lk.gc.plan(min_age="1s", allow_below_policy=True)
    path = str(tmp_path / "plan.json")
    plan.save(path)
    checkpoint = str(tmp_path / "gc.ckpt")
    report = lk.gc.apply(path, checkpoint=checkpoint, allow_below_policy=True)
    assert report["complete"] and report["deleted"] == 1
    # Applying again resumes the finished checkpoint: nothing more.
    again = lk.gc.apply(plan, checkpoint=checkpoint, allow_below_policy=True)
    assert again["deleted"] == 1
    assert lk.refs.verify()["ok"]


def test_the_safety_rules_are_exceptions(local_root, tmp_path):
    lk = lake.init(local_root, min_age="1h")
    with pytest.raises(lake.PolicyError, match="policy"):
        lk.gc.plan(min_age="1s")
    with pytest.raises(lake.InputError, match="not a duration"):
        lk.gc.plan(min_age="soon")
    plan = lk.gc.plan(min_age="1h")
    with pytest.raises(lake.PolicyError, match="inside the lake root"):
        lk.gc.apply(plan, checkpoint=local_root + "/gc.ckpt")
    # The guard: a row may not reference an object minted long ago (GC may be deleting it).
    old = {"uri": "objects/01ARZ3NDEKTSV4RRFFQ69G5FAV/old.bin", "sha256": bytes(32), "size": 1}
    with pytest.raises(lake.GuardError) as raised:
        lk.table("t").append(pa.table({"episode": ["x"], "file": lake.locations([old])}))
    assert raised.value.transient is False
    assert issubclass(lake.GuardError, lake.LakeError)
    with pytest.raises(lake.LakeError, match="no lake"):
        lake.open(str(tmp_path / "nothing"))


def test_refusals_name_their_kind(local_root, tmp_path):
    """Every refusal a Python caller can meet carries its stable `kind` (the names of
    `lake --json`'s errors), so code acts on the kind, not the message. Two kinds cannot arise
    from Python: `bound_to_min_age` (Python applies a plan with the plan's own min_age) and
    `clock_skew` (the extension reads the real clocks; the CLI's tests cover both)."""
    import json

    lk = lake.init(local_root, min_age="1h")
    locs, rows = episodes(lk, 2)
    lk.table("t").append(rows)

    def kind_of(call):
        with pytest.raises(lake.PolicyError) as raised:
            call()
        assert raised.value.transient is False
        return raised.value.kind

    assert kind_of(lambda: lk.gc.plan(min_age="500ms", allow_below_policy=True)) == "horizon"
    assert kind_of(lambda: lk.gc.plan(min_age="1s")) == "policy_floor"
    plan = lk.gc.plan(min_age="1h")
    other = lake.init(str(tmp_path / "other"), min_age="1h")
    assert kind_of(lambda: other.gc.apply(plan, checkpoint=str(tmp_path / "a.ckpt"))) == "bound_to_root"
    sharded = lk.gc.plan_sharded(min_age="1h", shards=2)
    assert kind_of(lambda: lk.gc.apply(sharded.shards[0], checkpoint=str(tmp_path / "b.ckpt"))) == "bound_to_manifest"
    spec = lk.gc._shard_spec("1h", 2, False)
    assert kind_of(lambda: lk.gc._plan_shard(spec, 7, False)) == "shard_mismatch"
    later = json.loads(spec)
    later["cutoff"] = "2999-01-01T00:00:00.000Z"
    assert kind_of(lambda: lk.gc._plan_shard(json.dumps(later), 0, False)) == "cutoff_too_late"
    # Not a refusal: a value that is not a duration is bad input, of kind `invalid_input`.
    with pytest.raises(lake.InputError) as raised:
        lk.gc.plan(min_age="soon")
    assert raised.value.kind == "invalid_input"


def test_update_upsert_and_other_producers(local_root):
    lk = lake.init(local_root, min_age="1h")
    t = lk.table("t")
    locs, rows = episodes(lk, 3)
    t.append(rows)
    assert t.update({"file": "NULL"}, where="episode = 'e0'")["references_removed"] == 1
    more, replacement = episodes(lk, 2, prefix="n")
    replacement = replacement.set_column(0, "episode", pa.array(["e1", "e9"]))
    out = t.merge_insert(replacement, on="episode")
    assert (out["references_added"], out["references_removed"]) == (2, 1)
    # A RecordBatchReader is a stream producer too.
    _, extra = episodes(lk, 2, prefix="r")
    t.append(pa.RecordBatchReader.from_batches(extra.schema, extra.to_batches()))
    assert lk.refs.verify()["ok"]
    assert t.to_lance().count_rows() == 6


def test_ctrl_c_during_apply_leaves_a_resumable_checkpoint(local_root, tmp_path):
    import json
    import signal
    import subprocess
    import sys

    lk = lake.init(local_root, min_age="1h")
    n = 3000
    lk.objects().put_many([f"o{i}".encode() for i in range(n - 5)])
    kept = lk.objects().put_many([f"k{i}".encode() for i in range(5)])  # referenced while young
    lk.table("t").append(pa.table({"episode": [f"k{i}" for i in range(5)], "file": lake.locations(kept)}))
    time.sleep(2.2)
    plan = lk.gc.plan(min_age="1s", allow_below_policy=True)
    assert plan.candidate_count == n - 5
    plan_path, checkpoint = str(tmp_path / "plan.json"), str(tmp_path / "gc.ckpt")
    plan.save(plan_path)
    # A child applies one key per delete page (slow enough to interrupt); Ctrl-C arrives once
    # its checkpoint shows progress. The child sets Python's Ctrl-C handler: it may inherit
    # SIGINT ignored (a job started in the background by a non-interactive shell).
    script = (
        "import lake, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "lk = lake.open(sys.argv[1]); "
        "lk.gc.apply(sys.argv[2], checkpoint=sys.argv[3], page_size=1, allow_below_policy=True)"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, local_root, plan_path, checkpoint], stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    progress = 0
    while progress == 0 and time.monotonic() < deadline and child.poll() is None:
        try:
            with open(checkpoint) as f:
                progress = json.load(f)["next_index"]
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.01)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=120)
    assert child.returncode != 0 and "KeyboardInterrupt" in err, err
    with open(checkpoint) as f:
        stopped = json.load(f)
    assert not stopped["complete"] and 0 < stopped["next_index"] < n - 5, stopped
    # The same call resumes from the checkpoint (no plan needed) and finishes.
    report = lk.gc.apply(None, checkpoint=checkpoint, allow_below_policy=True)
    assert report["complete"]
    assert report["deleted"] + report["already_gone"] + report["absent"] == n - 5
    assert lk.refs.verify()["ok"]
    import pathlib

    assert all((pathlib.Path(local_root) / k["uri"]).exists() for k in kept)
    assert lk.gc.plan(min_age="1s", allow_below_policy=True).candidate_count == 0


def test_a_plan_after_a_complete_apply_is_incremental_and_a_subset_of_the_full_plan(local_root, tmp_path):
    """Issue 40 from Python: the first plan is full ("no GC state"), a complete apply records a
    GC state, the next plan is incremental (`Plan.mode`, `Plan.state`) and proposes exactly what
    a full plan at the same moment proposes; `full=True` and `full_every` force a full plan."""
    lk = lake.init(local_root, min_age="1h")
    t = lk.table("t")
    locs = lk.objects().put_many([f"o{i}".encode() for i in range(6)])
    t.append(pa.table({"k": list(range(6)), "file": lake.locations(locs)}))
    t.delete("k < 2")
    t.cleanup(older_than="0s")
    time.sleep(1.1)
    first = lk.gc.plan(min_age="1s", allow_below_policy=True)
    assert (first.mode, first.mode_reason is not None, first.state) == ("full", True, None)
    assert first.candidate_count == 2
    assert lk.gc.apply(first, checkpoint=str(tmp_path / "a.ckpt"), allow_below_policy=True).complete
    orphans = lk.objects().put_many([b"late 1", b"late 2"])
    time.sleep(1.1)
    second = lk.gc.plan(min_age="1s", allow_below_policy=True)
    full = lk.gc.plan(min_age="1s", allow_below_policy=True, full=True)
    assert second.mode == "incremental" and second.state and second.mode_reason is None, second.mode_reason
    assert full.mode == "full" and "asked" in (full.mode_reason or "")
    uris = sorted(second.candidates.column("uri").to_pylist())
    assert uris == sorted(full.candidates.column("uri").to_pylist()) == sorted(o["uri"] for o in orphans)
    assert "mode='incremental'" in repr(second)
    assert lk.gc.plan(min_age="1s", allow_below_policy=True, full_every="1s").mode == "full"
