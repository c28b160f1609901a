"""`sharded_plan_overhead`: the same GC dry run as `--shards` Ray tasks (`lake.ray.plan`) vs one
process (`Gc.plan`), time ratio, median of alternating pairs.

    python crates/lake-python/bench/sharded_plan.py --objects 20000 --shards 4 --repeat 5 \\
        [--root s3://bucket/prefix --endpoint http://127.0.0.1:PORT]

The lake: `--objects` managed objects, half referenced by one table (appends of 1000 rows),
half orphans, all older than the horizon. Ray starts before the measurement
(`ray.init(num_cpus=2)`) and one sharded plan warms its workers; neither is timed. Each sharded
plan is timed from the driver's call to the assembled manifest: the spec (one store-clock probe
and one short listing), `--shards` tasks that each read the whole journal and list their range,
and the assembly. Both sides check that their candidates are identical.

With `--endpoint`, S3 requests go to that endpoint (e.g. lake-bench's latency proxy in front of
LocalStack), passed as `storage_options`, which Ray's tasks receive too.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time


def build(lk, objects: int) -> None:
    import pyarrow as pa

    import lake

    orphans = objects // 2
    lk.objects().put_many([f"orphan {i}".encode() for i in range(orphans)], concurrency=16)
    table = lk.table("episodes")
    for lo in range(0, objects - orphans, 1000):
        n = min(1000, objects - orphans - lo)
        locs = lk.objects().put_many([f"live {lo + i}".encode() for i in range(n)], concurrency=16)
        table.append(pa.table({"episode": [f"e{lo + i}" for i in range(n)], "file": lake.locations(locs)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--root", default=None, help="a lake root (default: a new local folder)")
    parser.add_argument("--endpoint", default=None, help="S3 endpoint for an s3:// root")
    args = parser.parse_args()

    import ray

    import lake
    import lake.ray

    options = None
    if args.endpoint:
        options = {"aws_endpoint": args.endpoint, "allow_http": "true"}
    work = tempfile.mkdtemp()
    root = args.root or os.path.join(work, "lake")
    lk = lake.init(root, min_age="1s", storage_options=options)
    started = time.perf_counter()
    build(lk, args.objects)
    print(f"# lake: {args.objects} objects ({args.objects // 2} orphans) at {root}, built in {time.perf_counter() - started:.1f} s")
    time.sleep(2.2)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    expected = lk.gc.plan(min_age="1s").candidates.column("uri").to_pylist()
    lake.ray.plan(root, min_age="1s", shards=args.shards, storage_options=options)  # warm the workers

    def one() -> float:
        t = time.perf_counter()
        plan = lk.gc.plan(min_age="1s")
        took = time.perf_counter() - t
        assert plan.candidates.column("uri").to_pylist() == expected
        return took

    def sharded() -> float:
        t = time.perf_counter()
        plan = lake.ray.plan(root, min_age="1s", shards=args.shards, storage_options=options)
        took = time.perf_counter() - t
        assert plan.candidates.column("uri").to_pylist() == expected, "the shards' candidates differ"
        return took

    singles, shards, ratios = [], [], []
    for i in range(args.repeat):
        pair = (one, sharded) if i % 2 == 0 else (sharded, one)
        times = {f: f() for f in pair}
        singles.append(times[one])
        shards.append(times[sharded])
        ratios.append(times[sharded] / times[one])
    ray.shutdown()
    print(f"# samples (s): one process [{' '.join(f'{s:.3f}' for s in singles)}], {args.shards} Ray tasks [{' '.join(f'{s:.3f}' for s in shards)}]")
    print(f"# medians: one process {statistics.median(singles):.3f} s, {args.shards} Ray tasks {statistics.median(shards):.3f} s, {len(expected)} candidates, 2 CPUs")
    print(f"sharded_plan_overhead: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    sys.exit(main())
