"""Write files as objects, append rows referencing them, read them back with pylance, delete
some, and collect the orphans: a GC dry run, then an apply."""

import pathlib
import sys
import tempfile
import time

import pyarrow as pa

import lake

work = pathlib.Path(tempfile.mkdtemp())
root = sys.argv[1] if len(sys.argv) > 1 else str(work / "lake")

# A lake with the default GC policy floor: GC never collects an object younger than 7 days. For
# S3, pass root="s3://bucket/prefix" and storage_options={"aws_region": ..., ...} (pylance's names).
lk = lake.init(root)

# Some recordings on disk, uploaded as objects: put_many of a folder returns
# {relative path: {"uri", "sha256", "size"}} (put uploads one file, bytes or file object).
recordings = work / "recordings"
recordings.mkdir()
for i in range(4):
    (recordings / f"run-{i}.log").write_text(f"sensor log {i}\n")
logs = lk.objects().put_many(recordings)

# Append rows that reference them: a DataLocation column from lake.locations (a plain
# pa.struct column of the same layout is accepted too).
episodes = lk.table("episodes")
episodes.append(pa.table({"episode": [p[:-4] for p in logs], "log": lake.locations(logs.values())}))

# Read back with pylance.
print(episodes.to_lance().to_table(columns=["episode"]).column("episode").to_pylist())

# Delete two rows, and drop the versions that still reference their objects.
episodes.delete("episode IN ('run-0', 'run-1')")
episodes.cleanup(older_than="0s")

# GC: a dry run names the orphans and deletes nothing; the apply deletes them, recording its
# progress in a checkpoint outside the lake (Ctrl-C stops it; run it again to resume). This tour
# collects objects orphaned a moment ago: a horizon below the lake's floor takes an explicit
# override, which a production run never needs.
time.sleep(2.1)  # the objects must be older than min_age by the store's clock
plan = lk.gc.plan(min_age="1s", allow_below_policy=True)
print(plan, plan.candidates.column("uri").to_pylist())
report = lk.gc.apply(plan, checkpoint=str(work / "gc.ckpt"), allow_below_policy=True)
print("deleted", report["deleted"])
assert report["deleted"] == 2 and lk.refs.verify()["ok"]
