"""`lake_get_vs_cp_sha256sum`: `lake get` of `--objects` objects (every row of a table, each
object read, verified against its reference's size and SHA-256, and written to a file) vs `cp`
of the same files plus `sha256sum` of the copies; time ratio, median of per-pair ratios over
`--repeat` pairs that alternate which side runs first.

    python crates/lake-python/bench/lake_get.py --lake target/release/lake --objects 1000 \\
        --size 65536 --repeat 5

The lake (a fresh local root) and its table `t` (`file`: one object per row) are written once
through the Python package. Each side writes into a fresh folder, deleted after it: `lake get
ROOT --table t --column file DIR` against `cp -r ROOT/objects DIR && sha256sum DIR/*/*` (one
`sha256sum` over every copy, output discarded). Both run as child processes; their page cache
is warm (one run of each before the measurement).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

import pyarrow as pa

import lake


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lake", required=True, help="the `lake` binary (a release build)")
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--size", type=int, default=64 << 10, help="bytes per object")
    parser.add_argument("--repeat", type=int, default=5, help="pairs")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as work:
        root = os.path.join(work, "lake")
        lk = lake.init(root, min_age="7d")
        locations = lk.objects().put_many((os.urandom(args.size) for _ in range(args.objects)), concurrency=4)
        lk.table("t").append(pa.table({"file": lake.locations(locations)}))

        def get(out: str) -> None:
            subprocess.run([args.lake, "get", root, "--table", "t", "--column", "file", out], check=True, stdout=subprocess.DEVNULL)

        def cp_sha256sum(out: str) -> None:
            subprocess.run(["cp", "-r", os.path.join(root, "objects"), out], check=True)
            subprocess.run(f"sha256sum {out}/*/* > /dev/null", shell=True, check=True)

        def timed(side) -> float:
            out = os.path.join(work, "out")
            t0 = time.perf_counter()
            side(out)
            took = time.perf_counter() - t0
            written = sum(len(files) for _, _, files in os.walk(out))
            assert written == args.objects, written
            shutil.rmtree(out)
            return took

        timed(get), timed(cp_sha256sum)  # warm both
        ratios = []
        for i in range(args.repeat):
            if i % 2:
                other = timed(cp_sha256sum)
                mine = timed(get)
            else:
                mine = timed(get)
                other = timed(cp_sha256sum)
            ratios.append(mine / other)
            print(f"# pair {i + 1}: lake get {mine:.3f} s, cp + sha256sum {other:.3f} s")
        print(f"lake_get_vs_cp_sha256sum: {statistics.median(ratios):.2f} ({args.objects} objects of {args.size} bytes, local)")


if __name__ == "__main__":
    main()
