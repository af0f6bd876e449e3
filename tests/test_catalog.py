"""Catalog facade: load, update, delete, versions, content hashes, line-numbered load errors, rendering."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

import reranker.catalog.database as catalog_module
from reranker.catalog.database import Catalog, CatalogError, ItemNotFoundError
from reranker.catalog.events import decode_event, encode_event
from reranker.core.render import content_hash, render_item

SAMPLE = Path(__file__).resolve().parents[1] / "reranker" / "catalog" / "data" / "sample_catalog.jsonl"
SAMPLE_QUERIES = SAMPLE.with_name("sample_queries.txt")
PHONE = {
    "title": "Acme UltraPhone 15 Pro",
    "attributes": {"storage": "256GB", "year": 2023},
    "description": "Long.",
}


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    # A directory that does not exist yet: the catalog creates it, as it does for var/ by default.
    with Catalog(f"sqlite:///{tmp_path}/db/catalog.db") as cat:
        yield cat


def write_jsonl(path: Path, lines: list[object]) -> Path:
    path.write_text(
        "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8"
    )
    return path


def test_sample_catalog_loads_and_reload_changes_nothing(catalog: Catalog) -> None:
    assert catalog.load_jsonl(SAMPLE) == 16
    items = {item.item_id: item for item in catalog.iter_items()}
    assert len(items) == 16
    assert {item.attributes["category"] for item in items.values()} == {
        "phones",
        "headphones",
        "kettles",
        "laptops",
    }
    assert all(100 <= len(item.description.split()) <= 400 for item in items.values())
    versions = {item_id: item.version for item_id, item in items.items()}
    assert sorted(versions.values()) == list(range(1, 17))

    assert catalog.load_jsonl(SAMPLE) == 0
    assert {item.item_id: item.version for item in catalog.iter_items()} == versions
    assert len(SAMPLE_QUERIES.read_text(encoding="utf-8").strip().splitlines()) == 6


def test_sample_near_duplicates_differ_in_one_attribute(catalog: Catalog) -> None:
    catalog.load_jsonl(SAMPLE)
    pairs = [
        ("phone-acme-15pro-256-blue", "phone-acme-15pro-128-blue", {"storage", "part_number"}),
        ("hp-sonora-qc900-2023-black", "hp-sonora-qc900-2021-black", {"year"}),
        ("kettle-brewmaster-17-steel", "kettle-brewmaster-12-steel", {"capacity_l"}),
        ("laptop-corvid-book14-16gb", "laptop-corvid-book14-32gb", {"ram"}),
    ]
    got = catalog.get(item_id for pair in pairs for item_id in pair[:2])
    for a, b, differing in pairs:
        attrs_a, attrs_b = got[a].attributes, got[b].attributes
        assert {k for k in attrs_a if attrs_a[k] != attrs_b.get(k)} == differing
        assert got[a].content_hash != got[b].content_hash


def test_upsert_creates_with_hash_and_event(catalog: Catalog) -> None:
    event = catalog.upsert("p-1", **PHONE)
    assert (event.op, event.item_id, event.version) == ("upsert", "p-1", 1)
    assert event.fields is not None and event.fields.model_dump() == PHONE
    item = catalog.get(["p-1"])["p-1"]
    assert item.content_hash == content_hash(PHONE["title"], PHONE["attributes"], PHONE["description"])
    assert item.updated_at == event.timestamp and item.updated_at.utcoffset() == timedelta(0)
    assert decode_event(*encode_event(event)) == event


def test_noop_update_keeps_version(catalog: Catalog) -> None:
    first = catalog.upsert("p-1", **PHONE)
    assert catalog.upsert("p-1", **PHONE) == first
    assert catalog.upsert("p-1", title=PHONE["title"]) == first
    assert catalog.get(["p-1"])["p-1"].version == 1


def test_rendering_neutral_change_bumps_version_but_keeps_hash(catalog: Catalog) -> None:
    catalog.upsert("p-1", **PHONE)
    before = catalog.get(["p-1"])["p-1"]
    event = catalog.upsert("p-1", title="  Acme   UltraPhone 15 Pro ")
    after = catalog.get(["p-1"])["p-1"]
    assert event.version == 2 and after.title == "  Acme   UltraPhone 15 Pro "
    assert after.content_hash == before.content_hash


def test_content_change_bumps_version_and_hash(catalog: Catalog) -> None:
    catalog.upsert("p-1", **PHONE)
    before = catalog.get(["p-1"])["p-1"]
    event = catalog.upsert("p-1", attributes={"storage": "128GB"})
    after = catalog.get(["p-1"])["p-1"]
    assert event.version == 2 and after.attributes == {"storage": "128GB"}  # replaced whole, not merged
    assert after.description == PHONE["description"]
    assert after.content_hash != before.content_hash
    assert after.updated_at > before.updated_at


def test_type_change_of_equal_value_counts_as_change(catalog: Catalog) -> None:
    catalog.upsert("p-1", title="t", attributes={"a": 1}, description="")
    assert catalog.upsert("p-1", attributes={"a": True}).version == 2
    assert catalog.upsert("p-1", attributes={"a": 1.0}).version == 3


def test_versions_are_a_catalog_wide_cursor(catalog: Catalog) -> None:
    catalog.upsert("a", title="A")
    catalog.upsert("b", title="B")
    catalog.upsert("a", title="A2")
    assert [(e.item_id, e.version) for e in catalog.events()] == [("b", 2), ("a", 3)]
    assert [(e.item_id, e.version) for e in catalog.events(since_version=2)] == [("a", 3)]
    assert list(catalog.events(since_version=3)) == []


def test_two_catalog_handles_share_one_sequence(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/shared.db"
    with Catalog(url) as one, Catalog(url) as two:
        assert one.upsert("a", title="A").version == 1
        assert two.upsert("b", title="B").version == 2
        assert one.upsert("a", title="A2").version == 3
        assert two.get(["a"])["a"].title == "A2"


def test_delete_is_soft_and_bumps_version(catalog: Catalog) -> None:
    catalog.upsert("p-1", **PHONE)
    catalog.upsert("p-2", title="Other")
    event = catalog.delete("p-1")
    assert (event.op, event.version, event.fields) == ("delete", 3, None)
    assert catalog.get(["p-1", "p-2"]).keys() == {"p-2"}
    assert [item.item_id for item in catalog.iter_items()] == ["p-2"]
    assert [(e.op, e.item_id) for e in catalog.events(since_version=2)] == [("delete", "p-1")]
    assert catalog.delete("p-1") == event  # deleting again changes nothing

    restored = catalog.upsert("p-1", description="Back.")
    assert (restored.op, restored.version) == ("upsert", 4)
    assert restored.fields is not None and restored.fields.title == PHONE["title"]
    assert restored.timestamp > event.timestamp


def test_unknown_and_invalid_items(catalog: Catalog) -> None:
    with pytest.raises(ItemNotFoundError, match="needs a title"):
        catalog.upsert("nope", description="no title")
    with pytest.raises(ItemNotFoundError):
        catalog.delete("nope")
    with pytest.raises(CatalogError, match="title: is blank"):
        catalog.upsert("p-1", title="   ")
    with pytest.raises(CatalogError, match="not null"):
        catalog.upsert("p-1", title="t", attributes={"a": None})
    with pytest.raises(CatalogError, match="item_id"):
        catalog.upsert("bad\nid", title="t")
    assert list(catalog.events()) == []


def test_get_and_iteration_are_batched(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog.load_jsonl(SAMPLE)
    monkeypatch.setattr(catalog_module, "BATCH", 3)
    wanted = [item.item_id for item in catalog.iter_items()]
    assert catalog.get([*wanted, "unknown", wanted[0]]).keys() == set(wanted)
    assert [item.item_id for item in catalog.iter_items(batch_size=3)] == sorted(wanted)
    assert [e.version for e in catalog.events(batch_size=3)] == list(range(1, 17))
    assert [e.version for e in catalog.events(since_version=14, batch_size=3)] == [15, 16]


def test_sqlite_uses_wal(catalog: Catalog) -> None:
    with catalog.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == catalog_module.SQLITE_BUSY_TIMEOUT_MS


GOOD = {"item_id": "ok", "title": "Fine", "attributes": {}, "description": ""}
BAD_FILES = [
    ("invalid json", [GOOD, '{"item_id": "x", "title": '], "line 2: invalid JSON"),
    ("not an object", [GOOD, "", "[1, 2]"], "line 3: expected a JSON object"),
    (
        "missing item_id",
        [{"title": "t", "attributes": {}, "description": ""}],
        "line 1: missing field 'item_id'",
    ),
    (
        "missing title",
        [GOOD, {"item_id": "x", "attributes": {}, "description": ""}],
        "line 2: missing field 'title'",
    ),
    (
        "bad attribute",
        [GOOD, {**GOOD, "item_id": "x", "attributes": {"a": {}}}],
        "line 2: attributes: attribute 'a'",
    ),
    ("bad item_id", [GOOD, {**GOOD, "item_id": ""}], "line 2: item_id"),
    ("duplicate id", [GOOD, {**GOOD, "item_id": "x"}, GOOD], "line 3: item_id 'ok' already on line 1"),
]


@pytest.mark.parametrize(("lines", "expected"), [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES])
def test_bad_jsonl_names_the_line_and_applies_nothing(
    catalog: Catalog, tmp_path: Path, lines: list[object], expected: str
) -> None:
    catalog.upsert("ok", title="Before")
    with pytest.raises(CatalogError) as info:
        catalog.load_jsonl(write_jsonl(tmp_path / "bad.jsonl", lines))
    assert str(info.value).startswith(expected)
    assert catalog.get(["ok"])["ok"].title == "Before"
    assert [e.item_id for e in catalog.events()] == ["ok"]
    assert catalog.upsert("later", title="L").version == 2  # the failed load used no versions


def test_invalid_utf8_line_is_named(catalog: Catalog, tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + '{"item_id": "caf\xe9"}'.encode("latin-1") + b"\n")
    with pytest.raises(CatalogError, match="line 2: not valid UTF-8"):
        catalog.load_jsonl(path)
    assert list(catalog.events()) == []


def test_get_refuses_a_bare_string(catalog: Catalog) -> None:
    with pytest.raises(TypeError):
        catalog.get("p-1")


def test_error_in_a_later_batch_rolls_back_earlier_batches(
    catalog: Catalog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog_module, "BATCH", 2)
    lines: list[object] = [{**GOOD, "item_id": f"i{n}"} for n in range(5)] + ["{"]
    with pytest.raises(CatalogError, match="line 6"):
        catalog.load_jsonl(write_jsonl(tmp_path / "late.jsonl", lines))
    assert list(catalog.events()) == []


def test_render_layout_and_determinism() -> None:
    text = render_item(
        " Acme  UltraPhone\n15 Pro ",
        {"year": 2023, "storage": " 256GB ", "colors": ["blue", "black"], "5g": True, "note": None, "w": 6.1},
        "\n  Long description.\n\nSecond paragraph.  ",
    )
    assert text == (
        "Acme UltraPhone 15 Pro\n5g: true\ncolors: blue, black\nstorage: 256GB\nw: 6.1\nyear: 2023\n\n"
        "Long description.\n\nSecond paragraph."
    )
    assert render_item("T", {}, "") == "T"


def test_render_and_hash_ignore_attribute_order_only() -> None:
    a = {"storage": "256GB", "year": 2023}
    b = {"year": 2023, "storage": "256GB"}
    assert render_item("T", a, "d") == render_item("T", b, "d")
    assert content_hash("T", a, "d") == content_hash("T", b, "d")
    assert content_hash("T", a, "d") != content_hash("T", {**a, "storage": "128GB"}, "d")
    assert content_hash("T", {"a": 1}, "") != content_hash("T", {"a": True}, "")
    assert len(content_hash("T", a, "d")) == 64
