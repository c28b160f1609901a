"""`ray_write_vs_one_process`: writing `--rows` rows that reference `--objects` objects as one
journaled version through Ray Data (`lake.ray.LakeDatasink`: `--blocks` tasks prepare pieces,
the driver commits once) vs one process appending the same rows (`Table.append`), time ratio,
median of alternating pairs.

    python crates/lake-python/bench/ray_write.py --rows 200000 --objects 2000 --repeat 3

The objects are uploaded once and the rows built once (a pyarrow table: `episode` string, `file`
DataLocation, row `i` referencing object `i % objects`), neither timed. Ray starts before the
measurement (`ray.init(num_cpus=2)`) and one small write warms its workers. Each side appends to
a table of its own (created by a one-row append first); each round checks that its table grew
by exactly `--rows` rows in one version and that `refs.verify()` is clean at the end.
"""

import argparse
import os
import statistics
import tempfile
import time

import pyarrow as pa

import lake
import lake.ray


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--objects", type=int, default=2_000)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as work:
        root = os.path.join(work, "lake")
        lk = lake.init(root, min_age="7d")
        locations = lk.objects().put_many((f"object {i}".encode() for i in range(args.objects)), concurrency=16)
        refs = lake.locations(locations[i % args.objects] for i in range(args.rows))
        rows = pa.table({"episode": [f"e{i}" for i in range(args.rows)], "file": refs})
        for name in ("one", "ray", "warm"):
            lk.table(name).append(rows.slice(0, 1))
        ray.data.from_arrow(rows.slice(0, 1000)).repartition(args.blocks).write_datasink(lake.ray.LakeDatasink(root, "warm"))

        def one_process() -> None:
            lk.table("one").append(rows)

        def with_ray() -> None:
            ray.data.from_arrow(rows).repartition(args.blocks).write_datasink(lake.ray.LakeDatasink(root, "ray"))

        ratios = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            with_ray()
            t1 = time.perf_counter()
            one_process()
            t2 = time.perf_counter()
            ratios.append((t1 - t0) / (t2 - t1))
            print(f"# round: ray {t1 - t0:.2f} s, one process {t2 - t1:.2f} s")
        versions = {name: len(lk.table(name).versions()) for name in ("one", "ray")}
        assert versions == {"one": 1 + args.repeat, "ray": 1 + args.repeat}, versions
        assert lk.refs.verify()["ok"]
        print(f"ray_write_vs_one_process: {statistics.median(ratios):.2f} (rows {args.rows}, objects {args.objects}, blocks {args.blocks}, local, 2 cores)")
    ray.shutdown()


if __name__ == "__main__":
    main()
