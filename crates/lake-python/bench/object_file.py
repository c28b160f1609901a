"""Memory and requests of reading one large object (issue 39): `objects_read_peak_rss`,
`object_file_peak_rss` and `object_file_get_requests`.

    python crates/lake-python/bench/object_file.py --size 524288000 --repeat 3
    scripts/localstack.sh run -- python crates/lake-python/bench/object_file.py --s3

One object of `--size` bytes (500 MiB) on a fresh local root (or `--root`). Each read runs in a
child process of its own (`subprocess`, a fresh interpreter importing lake), which prints its
peak RSS (`VmHWM`) and its RSS just before the read; a figure is the growth, peak minus before
(`ru_maxrss` of a child would also count the parent's RSS at the fork, which Linux keeps across
`execve`). `--repeat` children per figure; every sample is printed on a `#` line.

- `objects_read_peak_rss`: `Objects.read` of the object (its `bytes`), growth / size; target
  <= 1.1.
- `object_file_peak_rss`: `Objects.open` of the object read to its end in `--piece` reads
  (8 KiB; verified at the end), growth in MiB; target <= 64 MiB, whatever the size.
- `object_file_get_requests` (with `--s3`, on LocalStack: the `AWS_*` environment
  `scripts/localstack.sh` exports): the same `ObjectFile` read on an S3 root, its requests
  counted by a loopback proxy in front of LocalStack (`counting_proxy.py`; the upload goes to
  LocalStack directly): GET requests against `size / buffer_size + 1` (the file reads ahead
  `--buffer-size`, 1 MiB by default, one ranged GET each): the GETs whose path names the
  object's key (the HEAD that checks the size on open, and the lake's own GETs when it is
  opened, are printed apart). `--s3-size` sets the object's size there (default `--size`).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid

import lake

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from counting_proxy import CountingProxy  # noqa: E402 (the sibling module)

CHILD = """
import json, resource, sys
import lake
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()
root, loc, how, piece, buffer_size, options = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), json.loads(sys.argv[6])
loc["sha256"] = bytes.fromhex(loc["sha256"])
lk = lake.open(root, storage_options=options or None)
before = rss()
if how == "read":
    got = len(lk.objects().read(loc))
    verified = True
else:
    got = 0
    with lk.objects().open(loc, buffer_size=buffer_size) as f:
        while True:
            chunk = f.read(piece)
            if not chunk:
                break
            got += len(chunk)
        verified = f.verified
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
print(json.dumps({"before": before, "peak": peak, "grew": peak - before, "size": got, "verified": verified}))
"""


def child(root: str, loc: dict, how: str, piece: int, buffer_size: int, options: dict) -> dict:
    shown = json.dumps({"uri": loc["uri"], "sha256": loc["sha256"].hex(), "size": loc["size"]})
    out = subprocess.run(
        [sys.executable, "-c", CHILD, root, shown, how, str(piece), str(buffer_size), json.dumps(options)],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["size"] == loc["size"] and result["verified"], result
    return result


def put_object(lk: "lake.Lake", size: int, work: str) -> dict:
    """Uploads `size` random bytes (streamed from a file) as one object; its location."""
    source = os.path.join(work, "source.bin")
    with open(source, "wb") as out:
        left = size
        while left:
            n = min(left, 8 << 20)
            out.write(os.urandom(n))
            left -= n
    loc = lk.objects().put(source, name="big.bin")
    os.remove(source)
    return loc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=500 << 20, help="bytes of the object")
    parser.add_argument("--piece", type=int, default=8 << 10, help="bytes per ObjectFile.read")
    parser.add_argument("--buffer-size", type=int, default=1 << 20, help="the ObjectFile's read-ahead (Objects.open)")
    parser.add_argument("--repeat", type=int, default=3, help="children per RSS figure")
    parser.add_argument("--root", default=None, help="a lake root for the RSS figures (default: a fresh local folder)")
    parser.add_argument("--s3", action="store_true", help="also count the ObjectFile's GETs on LocalStack")
    parser.add_argument("--s3-size", type=int, default=None, help="bytes of the S3 object (default --size)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as work:
        root = args.root or os.path.join(work, "lake")
        lk = lake.init(root, min_age="1h")
        loc = put_object(lk, args.size, work)
        mib = 1 << 20
        ratios, growths = [], []
        for i in range(args.repeat):
            read = child(root, loc, "read", args.piece, args.buffer_size, {})
            ratios.append(read["grew"] / args.size)
            print(f"# Objects.read of {args.size} bytes: peak {read['peak'] / mib:.1f} MiB, before {read['before'] / mib:.1f} MiB, grew {read['grew'] / mib:.1f} MiB")
            file = child(root, loc, "file", args.piece, args.buffer_size, {})
            growths.append(file["grew"] / mib)
            print(f"# ObjectFile in {args.piece}-byte reads: peak {file['peak'] / mib:.1f} MiB, before {file['before'] / mib:.1f} MiB, grew {file['grew'] / mib:.1f} MiB")
        print(f"objects_read_peak_rss: {statistics.median(ratios):.3f} (growth / size; {min(ratios):.3f} to {max(ratios):.3f} in {args.repeat} children; target <= 1.1)")
        print(f"object_file_peak_rss: {statistics.median(growths):.1f} MiB ({min(growths):.1f} to {max(growths):.1f} in {args.repeat} children; {args.piece}-byte reads of {args.size} bytes; target <= 64 MiB)")

        if args.s3:
            s3_figure(args, work)


def s3_figure(args: argparse.Namespace, work: str) -> None:
    bucket = os.environ.get("LAKE_TEST_S3_BUCKET")
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if not bucket or not endpoint:
        sys.exit("--s3 needs LocalStack: scripts/localstack.sh run -- python ...")
    options = {
        "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "aws_region": os.environ.get("AWS_REGION", "us-east-1"),
        "allow_http": "true",
    }
    size = args.s3_size if args.s3_size is not None else args.size
    root = f"s3://{bucket}/bench-object-file-{uuid.uuid4().hex[:12]}"
    loc = put_object(lake.init(root, min_age="1h", storage_options={**options, "aws_endpoint": endpoint}), size, work)
    proxy = CountingProxy(endpoint)
    try:
        result = child(root, loc, "file", args.piece, args.buffer_size, {**options, "aws_endpoint": proxy.endpoint})
        bound = size / args.buffer_size + 1
        of_object = proxy.requests_of(loc["uri"])
        gets = of_object.get("GET", 0)
        print(
            f"# requests through the proxy: {dict(proxy.counts)} ({proxy.ranged_gets} ranged GETs), of the object: "
            f"{of_object}; the child's peak RSS grew {result['grew'] / (1 << 20):.1f} MiB"
        )
        print(
            f"object_file_get_requests: {gets} GETs for {size} bytes in {args.piece}-byte reads, read-ahead {args.buffer_size} "
            f"(bound size / read-ahead + 1 = {bound:.1f}; {'met' if gets <= bound else 'NOT met'})"
        )
    finally:
        proxy.close()


if __name__ == "__main__":
    main()
