"""`verified_read_vs_pyarrow_fs`: reading `--objects` objects through `Objects.read` (verified
against each reference's size and SHA-256) vs reading the same files with pyarrow's filesystem
(`pyarrow.fs.LocalFileSystem`, or `S3FileSystem` for an `s3://` root; no check), time ratio,
median of alternating pairs.

    python crates/lake-python/bench/read_objects.py --objects 1000 --size 65536 --repeat 3 \\
        [--root s3://bucket/prefix]

Both sides read every object once per round, `--threads` at a time (a thread pool; lake releases
the GIL while it reads and hashes), and check they got the same total of bytes. The objects are
uploaded once, before the measurement. With an `s3://` root, S3 settings come from the
`AWS_*` environment (as `scripts/localstack.sh` exports them) for both sides.
"""

import argparse
import concurrent.futures
import os
import statistics
import tempfile
import time

import pyarrow.fs as pafs

import lake


def pyarrow_fs(root: str):
    """pyarrow's filesystem for `root` and the path prefix of its keys."""
    if root.startswith("s3://"):
        endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
        options = {}
        if endpoint:
            scheme, host = endpoint.split("://", 1)
            options = {"endpoint_override": host, "scheme": scheme}
        fs = pafs.S3FileSystem(
            access_key=os.environ.get("AWS_ACCESS_KEY_ID"),
            secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY"),
            region=os.environ.get("AWS_REGION", "us-east-1"),
            **options,
        )
        return fs, root[len("s3://") :]
    return pafs.LocalFileSystem(), os.path.abspath(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--size", type=int, default=65536, help="bytes per object")
    parser.add_argument("--repeat", type=int, default=3, help="pairs of rounds")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--root", default=None, help="a lake root (default: a fresh local folder)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as work:
        root = args.root or os.path.join(work, "lake")
        lk = lake.init(root, min_age="7d")
        objects = lk.objects()
        locations = objects.put_many((os.urandom(args.size) for _ in range(args.objects)), concurrency=16)
        fs, prefix = pyarrow_fs(root)
        paths = [f"{prefix}/{loc['uri']}" for loc in locations]

        def read_lake() -> int:
            with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
                return sum(len(b) for b in pool.map(objects.read, locations))

        def read_pyarrow() -> int:
            def one(path: str) -> int:
                with fs.open_input_stream(path) as f:
                    return len(f.read())

            with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
                return sum(pool.map(one, paths))

        expected = args.objects * args.size
        assert read_lake() == expected and read_pyarrow() == expected  # warm both
        ratios = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            got = read_lake()
            t1 = time.perf_counter()
            other = read_pyarrow()
            t2 = time.perf_counter()
            assert got == other == expected
            ratios.append((t1 - t0) / (t2 - t1))
            print(f"# round: lake {t1 - t0:.3f} s, pyarrow.fs {t2 - t1:.3f} s")
        print(f"verified_read_vs_pyarrow_fs: {statistics.median(ratios):.2f} (objects {args.objects}, {args.size} bytes each, {args.threads} threads, {'s3' if root.startswith('s3://') else 'local'})")


if __name__ == "__main__":
    main()
