"""Appending rows from a pyarrow table through the Python package vs the same append through the
Rust engine (`lake-bench --child append-engine`): time ratio (median of alternating pairs) and
peak RSS of both, each side in its own child process.

    python crates/lake-python/bench/append_vs_rust.py --rows 1000000 --repeat 5 \
        --lake-bench target/release/lake-bench

Both sides append `--rows` rows `(episode: string, file: DataLocation)`, one fresh managed key
per row, into a fresh lake. The Python side builds its pyarrow table first (not timed) and
times `Table.append`; the Rust side generates its batches while Lance consumes them.
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def child(rows: int) -> None:
    import pyarrow as pa

    import lake

    with tempfile.TemporaryDirectory() as d:
        lk = lake.init(f"{d}/lake", min_age="7d")
        prefix = lk.objects().put(b"x", name="seed")["uri"].rsplit("/", 1)[0]
        # The rows of lake-bench's generator (`lakes::Rows`): one fresh key per row, batches of
        # 8192 rows; built with pyarrow's own arrays (not Python dicts) and not timed.
        storage = pa.StructArray.from_arrays(
            [
                pa.array([f"{prefix}/r{i}" for i in range(rows)], pa.string()),
                pa.array([b"\x07" * 32] * rows, pa.binary(32)),
                pa.array([1] * rows, pa.uint64()),
            ],
            fields=list(lake.DataLocationType().storage_type),
        )
        files = pa.ExtensionArray.from_storage(lake.DataLocationType(), storage)
        table = pa.table({"episode": pa.array(["e"] * rows), "file": files})
        table = pa.Table.from_batches(table.to_batches(max_chunksize=8192))
        started = time.perf_counter()
        lk.table("journaled").append(table)
        print(f"append_seconds: {time.perf_counter() - started:.6f}")


def measure(cmd: list) -> tuple:
    """Runs `cmd`; its `append_seconds` and its own peak RSS (KiB, from wait4)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed with {proc.returncode}")
    seconds = float(next(line for line in out.splitlines() if line.startswith("append_seconds:")).split()[1])
    return seconds, usage.ru_maxrss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--lake-bench", default="target/release/lake-bench")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.rows)
        return
    python_cmd = [sys.executable, os.path.abspath(__file__), "--child", "--rows", str(args.rows)]
    rust_cmd = [args.lake_bench, "--child", "append-engine", "--rows", str(args.rows)]
    py, rs, ratios, py_rss, rs_rss = [], [], [], [], []
    for i in range(args.repeat):
        pair = [python_cmd, rust_cmd] if i % 2 == 0 else [rust_cmd, python_cmd]
        results = {}
        for cmd in pair:
            results[cmd is python_cmd] = measure(cmd)
        (p, p_rss), (r, r_rss) = results[True], results[False]
        py.append(p)
        rs.append(r)
        py_rss.append(p_rss)
        rs_rss.append(r_rss)
        ratios.append(r / p)
    print(f"# append samples (s): python [{' '.join(f'{s:.3f}' for s in py)}], rust [{' '.join(f'{s:.3f}' for s in rs)}]")
    print(f"# medians: python {statistics.median(py):.3f} s, rust {statistics.median(rs):.3f} s, rows {args.rows}")
    print(f"# peak RSS (median, KiB): python child {statistics.median(py_rss)}, rust child {statistics.median(rs_rss)}")
    print(f"python_append_throughput_ratio: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
