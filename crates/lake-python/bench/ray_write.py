"""`ray_write_vs_lance_ray` and `ray_write_vs_one_process`: writing `--rows` rows that reference
`--objects` objects as one journaled version through Ray Data (`lake.ray.LakeDatasink`:
`--blocks` tasks prepare pieces, the driver commits once), against

- Lance's own Ray write of the same rows, no journal (target <= 1.2): the anchor a Ray user would
  pick instead of lake. It is built here as Ray Data's and lance-ray's Lance sinks are built (each
  task writes its blocks as fragments with pylance's `lance.fragment.write_fragments`, the driver
  commits one `LanceOperation.Append` of them), because Ray 2.60's own `Dataset.write_lance` calls
  `write_fragments` with an argument pylance 14 does not take;
- one process appending the same rows (`Table.append`; no target: it shows Ray's own cost).

Time ratios, the median of rounds that alternate which side goes first.

    python crates/lake-python/bench/ray_write.py --rows 1000000 --objects 10000 --repeat 5

The objects are uploaded once and the rows built once (a pyarrow table: `episode` string, `file`
DataLocation, row `i` referencing object `i % objects`), neither timed. Ray starts before the
measurement (`ray.init(num_cpus=2)`) and one small write of each Ray side warms its workers. Each
side appends to a table of its own (created by a one-row write first); each round checks that every
table grew by exactly `--rows` rows in one version, and `refs.verify()` is clean at the end. Run it
with a release build of the package (docs/benchmarks.md).
"""

import argparse
import os
import statistics
import tempfile
import time

import lance
import lance.fragment
import pyarrow as pa

import lake
import lake.ray


def lance_datasink(uri: str):
    """Lance's own Ray write: a Ray Data sink whose tasks write fragments of the dataset at `uri`
    and whose driver commits them as one append."""
    from ray.data.block import BlockAccessor
    from ray.data.datasource.datasink import Datasink

    class LanceAppend(Datasink):
        def write(self, blocks, ctx) -> list:
            tables = [BlockAccessor.for_block(b).to_arrow() for b in blocks]
            tables = [t for t in tables if t.num_rows]
            if not tables:
                return []
            reader = pa.RecordBatchReader.from_batches(tables[0].schema, (b for t in tables for b in t.to_batches()))
            return lance.fragment.write_fragments(reader, uri, schema=tables[0].schema)

        def on_write_complete(self, write_result) -> None:
            fragments = [f for returned in write_result.write_returns for f in (returned or [])]
            read_version = lance.dataset(uri).version
            lance.LanceDataset.commit(uri, lance.LanceOperation.Append(fragments), read_version=read_version)

    return LanceAppend()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as work:
        root = os.path.join(work, "lake")
        plain = os.path.join(work, "plain.lance")
        lk = lake.init(root, min_age="7d")
        locations = lk.objects().put_many((f"object {i}".encode() for i in range(args.objects)), concurrency=16)
        refs = lake.locations(locations[i % args.objects] for i in range(args.rows))
        rows = pa.table({"episode": [f"e{i}" for i in range(args.rows)], "file": refs})
        for name in ("one", "ray", "warm"):
            lk.table(name).append(rows.slice(0, 1))
        lance.write_dataset(rows.slice(0, 1), plain)
        warm = ray.data.from_arrow(rows.slice(0, 1000)).repartition(args.blocks)
        warm.write_datasink(lake.ray.LakeDatasink(root, "warm"))
        lance.write_dataset(rows.slice(0, 1), os.path.join(work, "warm.lance"))
        warm.write_datasink(lance_datasink(os.path.join(work, "warm.lance")))

        def lake_ray() -> None:
            ray.data.from_arrow(rows).repartition(args.blocks).write_datasink(lake.ray.LakeDatasink(root, "ray"))

        def lance_ray() -> None:
            ray.data.from_arrow(rows).repartition(args.blocks).write_datasink(lance_datasink(plain))

        def one_process() -> None:
            lk.table("one").append(rows)

        sides = {"lake_ray": lake_ray, "lance_ray": lance_ray, "one_process": one_process}
        took: dict = {name: [] for name in sides}
        for i in range(args.repeat):
            order = list(sides) if i % 2 == 0 else list(reversed(sides))
            for name in order:
                t0 = time.perf_counter()
                sides[name]()
                took[name].append(time.perf_counter() - t0)
            print("# round: " + ", ".join(f"{name} {took[name][-1]:.2f} s" for name in sides))
            expected = 1 + (i + 1) * args.rows
            counts = {"ray": lk.table("ray").count_rows(), "one": lk.table("one").count_rows()}
            counts["lance"] = lance.dataset(plain).count_rows()
            assert counts == {"ray": expected, "one": expected, "lance": expected}, counts
        versions = {name: len(lk.table(name).versions()) for name in ("one", "ray")}
        versions["lance"] = len(lance.dataset(plain).versions())
        assert versions == {"one": 1 + args.repeat, "ray": 1 + args.repeat, "lance": 1 + args.repeat}, versions
        assert lk.refs.verify()["ok"]
        ratio = lambda other: statistics.median(a / b for a, b in zip(took["lake_ray"], took[other]))  # noqa: E731
        medians = {name: statistics.median(t) for name, t in took.items()}
        print("# medians (s): " + ", ".join(f"{name} {t:.2f}" for name, t in medians.items()))
        shape = f"rows {args.rows}, objects {args.objects}, blocks {args.blocks}, local, 2 cores"
        print(f"ray_write_vs_lance_ray: {ratio('lance_ray'):.2f} ({shape})")
        print(f"ray_write_vs_one_process: {ratio('one_process'):.2f} ({shape})")
    ray.shutdown()


if __name__ == "__main__":
    main()
