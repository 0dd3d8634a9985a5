"""The entry-point table in docs/architecture.md ("Every entry point") is the code's
(pjrt_ref/capi/entry_point_table.py)."""
from __future__ import annotations

from pjrt_ref.capi import entry_point_table
from pjrt_ref.capi_shim import entry_points
from tests.support.repo_paths import REPO


def test_every_entry_point_has_an_implementation_with_a_docstring():
    found = entry_point_table.implementations()
    names = entry_points.SLOTS + entry_points.EXTENSION_FUNCTIONS
    assert [n for n in names if n not in found] == []
    assert [n for n in names if not (found[n].__doc__ or "").strip()] == []


def test_the_architecture_doc_holds_the_generated_table():
    doc = (REPO / "docs" / "architecture.md").read_text()
    start = doc.index(entry_point_table.BEGIN)
    end = doc.index(entry_point_table.END) + len(entry_point_table.END)
    assert doc[start:end] == entry_point_table.markdown(), \
        "docs/architecture.md's entry-point table is stale: paste `python -m pjrt_ref.capi.entry_point_table`"


def test_the_table_names_the_declared_api_version_and_every_extension():
    table = entry_point_table.markdown()
    assert f"PJRT C API {entry_points.API_MAJOR}.{entry_points.API_MINOR}" in table
    for where in ("Layouts extension", "Shardings extension", "Custom Partitioner extension", "FFI extension"):
        assert f"| {where} |" in table
