"""Every error kind has one Python class, and docs/errors.md lists the same table."""

from pathlib import Path

import lake
from lake import _errors

DOCS = Path(__file__).resolve().parents[3] / "docs" / "errors.md"


def table():
    rows = []
    for line in DOCS.read_text().splitlines():
        if line.startswith("| `"):
            cells = [c.strip().strip("`") for c in line.split("|")]
            rows.append((cells[1], cells[2] == "yes", cells[4]))
    return rows


def test_the_docs_table_is_the_class_table():
    rows = table()
    assert [kind for kind, _, _ in rows] == list(_errors._CLASS_OF_KIND), "same kinds, same order"
    for kind, transient, cls in rows:
        assert _errors._CLASS_OF_KIND[kind].__name__ == cls, kind
        assert getattr(lake, cls) is _errors._CLASS_OF_KIND[kind]
        e = _errors.error_of_kind(kind, "m", transient)
        assert isinstance(e, lake.LakeError) and e.kind == kind and e.transient == transient


def test_a_kind_from_a_newer_native_module_is_a_lake_error():
    e = _errors.error_of_kind("some_new_kind", "m", False)
    assert type(e) is lake.LakeError and e.kind == "some_new_kind"


def test_every_remedy_has_a_python_spelling_and_lands_in_a_note():
    import re

    source = (DOCS.parents[1] / "crates" / "lake-common" / "src" / "remedy.rs").read_text()
    names = re.findall(r'Remedy::\w+ => "([a-z ]+)"', source)
    assert names and set(names) == set(_errors._REMEDIES)
    e = _errors.error_of_kind("lineage_incomplete", "run `refs recover` first", False)
    assert getattr(e, "__notes__", None) == ["in Python: " + _errors._REMEDIES["refs recover"]]
