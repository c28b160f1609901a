"""What the package takes in: storage options, locations as dicts, scalars and plain structs,
other Arrow producers (polars, a bare `__arrow_c_stream__` object), and many objects at once."""

import io
import os

import pyarrow as pa
import pytest

import lake


def test_locations_are_dicts_scalars_and_marked_arrays(local_root):
    lk = lake.init(local_root, min_age="1h")
    loc = lk.objects().put(b"payload", name="a b.bin")
    assert isinstance(loc, dict) and set(loc) == {"uri", "sha256", "size"}
    assert loc["uri"].startswith("objects/") and loc["uri"].endswith("/a_b.bin") and loc["size"] == 7
    scalar = loc.scalar
    assert isinstance(scalar.type, lake.DataLocationType)
    assert scalar.value.as_py() == {"uri": loc["uri"], "sha256": loc["sha256"], "size": 7}
    arr = lake.locations([loc])
    assert arr.type.extension_name == "lake.data_location"
    lk.table("t").append(pa.table({"episode": ["e"], "file": arr}))
    # The stored field carries the marker; pylance reads it back as the extension type.
    field = lk.table("t").to_lance().schema.field("file")
    assert isinstance(field.type, lake.DataLocationType), field
    with pytest.raises(lake.LakeError, match="32"):
        lake.locations([{"uri": loc["uri"], "sha256": b"short", "size": 1}])


PLAIN = pa.struct([("uri", pa.string()), ("sha256", pa.binary(32)), ("size", pa.uint64())])


def test_a_plain_struct_of_the_layout_is_marked_and_journaled(local_root):
    lk = lake.init(local_root, min_age="1h")
    locs = [lk.objects().put(f"p{i}".encode(), name=f"p{i}") for i in range(3)]
    plain = pa.array([dict(l) for l in locs] + [None], type=PLAIN)
    assert plain.type.field("uri").nullable  # what pyarrow makes by default
    out = lk.table("t").append(pa.table({"episode": ["a", "b", "c", "d"], "file": plain}))
    assert out["references_added"] == 3
    assert isinstance(lk.table("t").to_lance().schema.field("file").type, lake.DataLocationType)
    # A list of plain locations too.
    listed = pa.array([[dict(locs[0]), dict(locs[1])], []], type=pa.list_(PLAIN))
    out = lk.table("l").append(pa.table({"episode": ["x", "y"], "files": listed}))
    assert out["references_added"] == 2
    assert lk.refs.verify()["ok"]
    # A location with a null child is refused, naming the column; nothing is written.
    holey = pa.array([{"uri": None, "sha256": locs[0]["sha256"], "size": 1}], type=PLAIN)
    with pytest.raises(lake.LakeError, match="file"):
        lk.table("t").append(pa.table({"episode": ["z"], "file": holey}))
    assert lk.table("t").to_lance().count_rows() == 4


def test_any_arrow_stream_producer(local_root):
    polars = pytest.importorskip("polars")
    lk = lake.init(local_root, min_age="1h")
    # A polars frame (no reference column: polars has no fixed-size binary) appends through the
    # engine and reads back with pylance.
    metrics = polars.DataFrame({"episode": ["e1", "e2"], "frames": [120, 340]})
    assert lk.table("metrics").append(metrics)["rows"] == 2
    assert lk.table("metrics").to_lance().to_table().column("frames").to_pylist() == [120, 340]
    # A polars struct of the layout's names with a variable-size sha256 is a look-alike: refused,
    # not silently taken for plain data (its objects would look unreferenced).
    loc = lk.objects().put(b"x", name="x")
    lookalike = polars.DataFrame({"episode": ["e"], "file": [{"uri": loc["uri"], "sha256": loc["sha256"], "size": 1}]})
    with pytest.raises(lake.LakeError, match="file"):
        lk.table("t").append(lookalike)

    # Any object with `__arrow_c_stream__` alone.
    class Producer:
        def __init__(self, table):
            self._table = table

        def __arrow_c_stream__(self, requested_schema=None):
            return self._table.__arrow_c_stream__(requested_schema)

    rows = pa.table({"episode": ["p"], "file": lake.locations([loc])})
    assert lk.table("t").append(Producer(rows))["references_added"] == 1
    with pytest.raises(TypeError, match="Arrow stream producer"):
        lk.table("t").append([{"episode": "no"}])


def test_put_many_from_a_folder_and_an_iterator(local_root, tmp_path, capsys):
    lk = lake.init(local_root, min_age="1h")
    src = tmp_path / "src"
    (src / "day1").mkdir(parents=True)
    for name, body in [("day1/a.mcap", b"aa"), ("day1/b.mcap", b"bbb"), ("c.jpg", b"c")]:
        (src / name).write_bytes(body)
    os.symlink(src / "c.jpg", src / "link.jpg")  # links are not followed
    by_path = lk.objects().put_many(src, progress=True)
    assert list(by_path) == ["c.jpg", "day1/a.mcap", "day1/b.mcap"]
    assert by_path["day1/b.mcap"]["size"] == 3 and by_path["day1/b.mcap"]["uri"].endswith("/b.mcap")
    assert "object" in capsys.readouterr().err  # tqdm's bar
    items = (x for x in [b"one", io.BytesIO(b"two"), str(src / "c.jpg")])
    locs = lk.objects().put_many(items, concurrency=2)
    assert [l["size"] for l in locs] == [3, 3, 1]
    assert len({l["uri"] for l in locs}) == 3
    table = pa.table({"path": list(by_path), "file": lake.locations(by_path.values())})
    assert lk.table("files").append(table)["references_added"] == 3


def test_storage_options_are_explicit(monkeypatch, request):
    bucket = os.environ.get("LAKE_TEST_S3_BUCKET")
    if not bucket:
        pytest.skip("needs LocalStack S3: run scripts/test.sh")
    root = request.getfixturevalue("s3_root")
    options = {
        "aws_endpoint": os.environ["AWS_ENDPOINT_URL"],
        "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "aws_region": os.environ["AWS_REGION"],
        "allow_http": "true",
    }
    for name in ["AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_ALLOW_HTTP"]:
        monkeypatch.delenv(name, raising=False)
    lk = lake.init(root, min_age="1h", storage_options=options)
    loc = lk.objects().put(b"over s3", name="s.bin")
    lk.table("t").append(pa.table({"episode": ["s"], "file": lake.locations([loc])}))
    assert lake.open(root, storage_options=options).table("t").to_lance().count_rows() == 1
    assert "AWS_ENDPOINT_URL" not in os.environ  # nothing leaked into the process
    with pytest.raises(lake.LakeError, match="not an S3 storage option"):
        lake.open(root, storage_options={**options, "aws_endpoint_typo": "x"})
    with pytest.raises(lake.LakeError, match="another bucket"):
        lake.open(root, storage_options={**options, "bucket": "other"})
