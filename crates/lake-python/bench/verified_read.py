"""`verified_read_vs_pyarrow_hashlib` and `sha256_vs_hardware`: lake's verified reads against
pyarrow's filesystem read plus `hashlib.sha256` of the same files, and lake's SHA-256 against
`hashlib.sha256` (OpenSSL) over the same bytes; time ratios, median of per-pair ratios over
`--repeat` rounds that alternate the order of the sides.

    python crates/lake-python/bench/verified_read.py --repeat 5

Two sets of objects on a fresh local root (or `--root`): `--small-objects` of `--small-size`
bytes (1,000 of 64 KiB) and `--large-objects` of `--large-size` (20 of 64 MiB). Per set, each
round times three sides:

- `batch`: one `Objects.read_many` of every object (its own concurrency: the lake's bound on
  requests in flight; each object hashed as it is read, the first mismatch raised);
- `one`: `Objects.read` of each object, `--threads` at a time (a thread pool; lake releases the
  GIL while it reads and hashes);
- `pyarrow+hashlib`: for each file, `pyarrow.fs`'s `open_input_stream(path).read()` and
  `hashlib.sha256` of the bytes compared with the location's digest, `--threads` at a time
  (hashlib releases the GIL for large inputs too).

`verified_read_vs_pyarrow_hashlib` prints `batch / pyarrow+hashlib` and `one / pyarrow+hashlib`
(targets 1.2 and 1.5). `sha256_vs_hardware` is `hashlib.sha256` time / `_lake.sha256` time over
the same `--hash-size` bytes in memory, one thread each (lake's throughput relative to
OpenSSL's; target >= 0.9). Every sample is printed on a `#` line. Build the extension in release
(`maturin build --release`) for these figures.
"""

import argparse
import concurrent.futures
import hashlib
import os
import statistics
import sys
import tempfile
import time

import lake
from lake import _lake

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_objects import pyarrow_fs  # noqa: E402 (the sibling benchmark's filesystem choice)


def sha256_vs_hardware(size: int, repeat: int) -> None:
    data = os.urandom(size)
    assert _lake.sha256(data) == hashlib.sha256(data).digest()
    ratios = []
    for i in range(repeat):
        sides = [("lake", _lake.sha256), ("hashlib", lambda b: hashlib.sha256(b).digest())]
        if i % 2:
            sides.reverse()
        took = {}
        for name, fn in sides:
            t0 = time.perf_counter()
            fn(data)
            took[name] = time.perf_counter() - t0
        ratios.append(took["hashlib"] / took["lake"])
        print(f"# sha256 of {size} bytes: lake {size / took['lake'] / 1e9:.2f} GB/s, hashlib {size / took['hashlib'] / 1e9:.2f} GB/s")
    print(f"sha256_vs_hardware: {statistics.median(ratios):.3f} ({size} bytes, {repeat} pairs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small-objects", type=int, default=1000)
    parser.add_argument("--small-size", type=int, default=64 << 10, help="bytes per small object")
    parser.add_argument("--large-objects", type=int, default=20)
    parser.add_argument("--large-size", type=int, default=64 << 20, help="bytes per large object")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (each times every side once)")
    parser.add_argument("--threads", type=int, default=8, help="threads of the one-at-a-time sides")
    parser.add_argument("--hash-size", type=int, default=256 << 20, help="bytes hashed for sha256_vs_hardware")
    parser.add_argument("--root", default=None, help="a lake root (default: a fresh local folder)")
    args = parser.parse_args()

    sha256_vs_hardware(args.hash_size, args.repeat)
    with tempfile.TemporaryDirectory() as work:
        root = args.root or os.path.join(work, "lake")
        lk = lake.init(root, min_age="7d")
        objects = lk.objects()
        fs, prefix = pyarrow_fs(root)
        for label, count, size in (("small", args.small_objects, args.small_size), ("large", args.large_objects, args.large_size)):
            locations = objects.put_many((os.urandom(size) for _ in range(count)), concurrency=4)
            paths = [(f"{prefix}/{loc['uri']}", loc["sha256"]) for loc in locations]
            expected = count * size

            def batch() -> int:
                return sum(len(b) for b in objects.read_many(locations))

            def one() -> int:
                with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
                    return sum(len(b) for b in pool.map(objects.read, locations))

            def pyarrow_hashlib() -> int:
                def read(item: tuple) -> int:
                    path, digest = item
                    with fs.open_input_stream(path) as f:
                        data = f.read()
                    if hashlib.sha256(data).digest() != digest:
                        raise RuntimeError(f"{path} does not match its location")
                    return len(data)

                with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
                    return sum(pool.map(read, paths))

            sides = [("batch", batch), ("one", one), ("pyarrow+hashlib", pyarrow_hashlib)]
            for _, fn in sides:
                assert fn() == expected  # warm the page cache and every path
            ratios: dict = {"batch": [], "one": []}
            for i in range(args.repeat):
                order = sides[i % 3 :] + sides[: i % 3]
                if i % 2:
                    order.reverse()
                took = {}
                for name, fn in order:
                    t0 = time.perf_counter()
                    assert fn() == expected
                    took[name] = time.perf_counter() - t0
                for name in ratios:
                    ratios[name].append(took[name] / took["pyarrow+hashlib"])
                shown = ", ".join(f"{name} {took[name]:.3f} s" for name, _ in sides)
                print(f"# {label} round {i + 1} ({' > '.join(n for n, _ in order)}): {shown}")
            where = "s3" if root.startswith("s3://") else "local"
            for name in ratios:
                print(
                    f"verified_read_vs_pyarrow_hashlib ({name}, {label}): {statistics.median(ratios[name]):.2f} "
                    f"({count} objects of {size} bytes, {where}, {args.threads} threads for one-at-a-time sides)"
                )
            if not root.startswith("s3://"):
                for loc in locations:  # free the disk before the next set
                    os.remove(os.path.join(root, loc["uri"]))


if __name__ == "__main__":
    main()
