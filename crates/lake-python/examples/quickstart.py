"""Write files as objects, append rows referencing them, read them back with pylance, delete
some, and collect the orphans: a GC dry run, then an apply."""

import sys
import tempfile
import time

import pyarrow as pa

import lake

work = tempfile.mkdtemp()
root = sys.argv[1] if len(sys.argv) > 1 else f"{work}/lake"

# A lake whose GC policy floor is 1 s (production lakes keep the default, 7 days).
lk = lake.init(root, min_age="1s")

# Upload objects; each put returns its location {"uri", "sha256", "size"}.
objects = lk.objects()
logs = [objects.put(f"sensor log {i}".encode(), name=f"run-{i}.log") for i in range(4)]

# Append rows that reference them: a DataLocation column from lake.locations.
episodes = lk.table("episodes")
episodes.append(pa.table({"episode": [f"run-{i}" for i in range(4)], "log": lake.locations(logs)}))

# Read back with pylance.
print(episodes.to_lance().to_table(columns=["episode"]).column("episode").to_pylist())

# Delete two rows, and drop the versions that still reference their objects.
episodes.delete("episode IN ('run-0', 'run-1')")
episodes.cleanup(older_than="0s")

# GC: a dry run names the orphans and deletes nothing; the apply deletes them, recording its
# progress in a checkpoint outside the lake (run it again to resume after an interruption).
time.sleep(2.1)  # the objects must be older than min_age by the store's clock
plan = lk.gc.plan(min_age="1s")
print(plan, plan.candidates.column("uri").to_pylist())
report = lk.gc.apply(plan, checkpoint=f"{work}/gc.ckpt")
print("deleted", report["deleted"])
assert report["deleted"] == 2 and lk.refs.verify()["ok"]
