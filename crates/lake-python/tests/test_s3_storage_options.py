"""An S3 lake configured by `storage_options` alone: every path to the store
(objects, tables, GC listings and deletes, sharded plans, verification, version cleanup, S3
checkpoints) uses the lake's one resolved configuration, never the `AWS_*` environment of the
moment; and a store that fails raises `StorageError` from every call. LocalStack only."""

import os
import subprocess
import sys
import textwrap
import uuid

import pytest

import lake


@pytest.fixture
def s3_options():
    """LocalStack's endpoint and credentials as storage options (skipped without LocalStack)."""
    if not os.environ.get("LAKE_TEST_S3_BUCKET"):
        pytest.skip("needs LocalStack S3: run scripts/test.sh")
    return {
        "aws_endpoint": os.environ["AWS_ENDPOINT_URL"],
        "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "aws_region": os.environ["AWS_REGION"],
        "allow_http": "true",
    }


def without_aws_environment():
    """This process's environment without any `AWS_*` variable (and no shared AWS config)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_CONFIG_FILE"] = os.devnull  # (an `AWS_*` variable object_store does not read)
    env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    return env


GC_BY_OPTIONS = """
    import json, sys, time, pyarrow as pa, lake
    root, checkpoint, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    lk = lake.init(root, min_age="5s", storage_options=options)
    # The floor is 5 s, not 1 s: the guard takes references to objects younger than the floor
    # minus its margin (3.75 s), and a loaded machine can take more than 750 ms between an upload
    # and the append that references it. Each object is uploaded right before its append.
    t = lk.table("t")
    live = lk.objects().put_many([f"live {i}".encode() for i in range(3)])
    t.append(pa.table({"k": [0, 1, 2], "file": lake.locations(live)}))
    orphans = lk.objects().put_many([f"orphan {i}".encode() for i in range(5)])
    t.append(pa.table({"k": [3], "file": lake.locations(orphans[:1])}))
    t.delete("k = 3")
    assert t.cleanup(older_than="0s")["old_versions"] >= 1
    assert [v["journaled"] for v in t.versions()] == [True]
    time.sleep(5.1)  # every object older than the 5 s floor by the store's clock
    plan = lk.gc.plan(min_age="5s")
    assert plan.lineage_complete and plan.candidate_count == 5, plan
    sharded = lk.gc.plan_sharded(min_age="5s", shards=3)
    assert sharded.candidate_count == 5
    assert lk.refs.verify()["ok"]
    report = lk.gc.apply(plan, checkpoint=checkpoint)
    assert report["complete"] and report["deleted"] == 5 and report["absent"] == 0, report
    again = lk.gc.apply(None, checkpoint=checkpoint)  # resumes the finished checkpoint, on S3
    assert again["deleted"] == 5, again
    assert lk.gc.plan(min_age="5s").candidate_count == 0
    assert t.to_lance().count_rows() == 3
    print("ok")
"""


def test_gc_works_with_storage_options_alone(s3_options):
    """HOLE (fixed), the input: with the endpoint, region and credentials in `storage_options`
    only, `put` and `append` worked but `gc.plan`, `plan_sharded`, `refs.verify`, `versions`
    and `cleanup` failed after about 90 s: the raw S3 requests took their endpoint from the
    environment. The whole cycle runs in a child whose environment has no `AWS_*` variable, with
    its checkpoint on S3 (another prefix of the bucket)."""
    import json

    bucket = os.environ["LAKE_TEST_S3_BUCKET"]
    root = f"s3://{bucket}/py-opts-{uuid.uuid4().hex[:12]}"
    checkpoint = f"s3://{bucket}/py-opts-ckpt-{uuid.uuid4().hex[:12]}/gc.ckpt"
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(GC_BY_OPTIONS), root, checkpoint, json.dumps(s3_options)],
        capture_output=True,
        text=True,
        timeout=600,
        env=without_aws_environment(),
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_the_environment_after_opening_changes_nothing(s3_options, monkeypatch):
    """The `AWS_*` environment is read once, when the lake is opened: pointing it elsewhere
    afterwards (a closed port) does not move any request of the lake."""
    root = f"s3://{os.environ['LAKE_TEST_S3_BUCKET']}/py-env-{uuid.uuid4().hex[:12]}"
    lk = lake.init(root, min_age="1h", storage_options=s3_options)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_REGION", "nowhere-1")
    import pyarrow as pa

    loc = lk.objects().put(b"x", name="x")
    lk.table("t").append(pa.table({"file": lake.locations([loc])}))
    assert lk.gc.plan(min_age="1h").lineage_complete
    assert lk.refs.verify()["ok"] and len(lk.table("t").versions()) == 1


class DenyingProxy:
    """An HTTP proxy on loopback in front of LocalStack that forwards every request until
    `deny` is set, then answers every request 403 AccessDenied (a permanent S3 failure, as a
    bucket policy or revoked credentials give)."""

    def __init__(self, upstream):
        import http.client
        import http.server
        import threading

        host, port = upstream.split("://", 1)[1].rstrip("/").split(":")
        proxy = self
        self.deny = False

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if proxy.deny:
                    answer = b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>'
                    self.send_response(403)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(0 if self.command == "HEAD" else len(answer)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(answer)
                    return
                conn = http.client.HTTPConnection(host, int(port), timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "transfer-encoding")}
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                self.send_response(response.status)
                for k, v in response.getheaders():
                    if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data) if self.command != "HEAD" else response.getheader("Content-Length") or 0))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_failing_store_raises_storage_errors_from_every_call(s3_options):
    """A lake whose store starts refusing every request (403 AccessDenied, through a proxy on
    loopback): each call raises `StorageError` with `transient` False (before the fix, GC's
    listings and several engine calls raised a plain `LakeError`)."""
    import pyarrow as pa

    proxy = DenyingProxy(s3_options["aws_endpoint"])
    try:
        options = {**s3_options, "aws_endpoint": proxy.endpoint}
        root = f"s3://{os.environ['LAKE_TEST_S3_BUCKET']}/py-denied-{uuid.uuid4().hex[:12]}"
        # (A floor of an hour: the proxy's round trips never make the object too old to publish.)
        lk = lake.init(root, min_age="1h", storage_options=options)
        loc = lk.objects().put(b"x", name="x")
        t = lk.table("t")
        t.append(pa.table({"file": lake.locations([loc])}))
        proxy.deny = True
        calls = {
            "gc.plan": lambda: lk.gc.plan(min_age="1h"),
            "plan_sharded": lambda: lk.gc.plan_sharded(min_age="1h", shards=2),
            "refs.verify": lambda: lk.refs.verify(),
            "versions": lambda: t.versions(),
            "cleanup": lambda: t.cleanup(older_than="0s"),
            "put": lambda: lk.objects().put(b"y", name="y"),
            "append": lambda: t.append(pa.table({"file": lake.locations([loc])})),
        }
        for name, call in calls.items():
            with pytest.raises(lake.LakeError) as raised:
                call()
            assert type(raised.value) is lake.StorageError, f"{name}: {type(raised.value).__name__}: {raised.value}"
            assert raised.value.transient is False, name
    finally:
        proxy.close()
