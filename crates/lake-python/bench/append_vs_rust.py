"""Appending rows from a pyarrow table through the Python package vs the same append through the
Rust engine (`lake-bench --child append-engine-built`): time ratio (median of alternating pairs) and
peak RSS of both, each side in its own child process.

    python crates/lake-python/bench/append_vs_rust.py --rows 1000000 --repeat 5 \
        --lake-bench target/release/lake-bench

Both sides append `--rows` rows `(episode: string, file: DataLocation)`, one fresh managed key
per row, into a fresh lake. The Python side builds its pyarrow table first (not timed) and
times `Table.append`; the Rust side builds the same rows as Arrow batches in memory first (not
timed) and times `LanceEngine::append` of them. Peak RSS thus includes each side's rows.
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time


def child(rows: int, append: bool = True) -> None:
    import pyarrow as pa

    import lake

    with tempfile.TemporaryDirectory() as d:
        lk = lake.init(f"{d}/lake", min_age="7d")
        prefix = lk.objects().put(b"x", name="seed")["uri"].rsplit("/", 1)[0]
        # The rows of lake-bench's generator (`lakes::Rows`): one fresh key per row, batches of
        # 8192 rows, each with arrays of its own as Rust's are; built with pyarrow, not timed.
        # (Slices of one big table, `to_batches(max_chunksize=8192)`, would be slower to write
        # on both sides: Lance itself writes such slices about 2.5x slower, pylance's
        # `write_dataset` included, since every slice carries the whole table's buffers.)
        kind = lake.DataLocationType()
        batches = []
        for lo in range(0, rows, 8192):
            n = min(8192, rows - lo)
            storage = pa.StructArray.from_arrays(
                [
                    pa.array([f"{prefix}/r{i}" for i in range(lo, lo + n)], pa.string()),
                    pa.array([b"\x07" * 32] * n, pa.binary(32)),
                    pa.array([1] * n, pa.uint64()),
                ],
                fields=list(kind.storage_type),
            )
            files = pa.ExtensionArray.from_storage(kind, storage)
            batches.append(pa.RecordBatch.from_arrays([pa.array(["e"] * n), files], names=["episode", "file"]))
        table = pa.Table.from_batches(batches)
        started = time.perf_counter()
        if append:
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
    parser.add_argument("--no-append", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.rows, append=not args.no_append)
        return
    python_cmd = [sys.executable, os.path.abspath(__file__), "--child", "--rows", str(args.rows)]
    rust_cmd = [args.lake_bench, "--child", "append-engine-built", "--rows", str(args.rows)]
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
    _, baseline = measure(python_cmd + ["--no-append"])
    print(f"# peak RSS (median, KiB): python child {statistics.median(py_rss)}, rust child {statistics.median(rs_rss)}")
    print(f"# peak RSS of the python child that builds the same table without appending it: {baseline} KiB")
    print(f"python_append_throughput_ratio: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
