"""Relevance sets: JSONL round trip, splits, and the user-file loader's row validation."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from reranker.core.render import render_item
from reranker.data.data_synth import generate
from reranker.data.relevance_data import (
    ESCI_LABELS,
    CollectionStats,
    Item,
    Judgment,
    Query,
    RelevanceDataError,
    RelevanceSet,
    bm25_terms,
    collection_stats,
    load_relevance_file,
)

PHONE = {"title": "Acme UltraPhone 15 Pro 256GB", "attributes": {"storage": "256GB", "year": 2023}}
GOOD = {"query_id": "q1", "query": "acme phone 256gb", "item_id": "i1", "label": 2, **PHONE}


def write_jsonl(path: Path, rows: list[object]) -> Path:
    """Rows are dicts (dumped as JSON) or raw strings (written as they are)."""
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def row(**changes: object) -> dict[str, object]:
    return {**GOOD, **changes}


# ---- RelevanceSet -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic() -> RelevanceSet:
    return generate(3, 12, 2, n_candidates=10)


def test_jsonl_round_trip(synthetic: RelevanceSet, tmp_path: Path) -> None:
    synthetic.save_jsonl(tmp_path / "set")
    loaded = RelevanceSet.load_jsonl(tmp_path / "set")
    assert loaded == synthetic
    assert list(loaded.items) == list(synthetic.items)
    first = synthetic.queries[0].query_id
    assert loaded.candidates(first) == synthetic.candidates(first)
    assert all(type(v) is type(synthetic.queries[0].fields[k]) for k, v in loaded.queries[0].fields.items())


def test_split_keeps_its_queries_and_only_their_items(synthetic: RelevanceSet) -> None:
    for name in ("train", "dev", "test"):
        part = synthetic.split(name)
        assert {query.split for query in part.queries} <= {name}
        used = {judgment.item_id for judgment in part.judgments}
        assert set(part.items) == used
        for query in part.queries:
            assert part.candidates(query.query_id) == synthetic.candidates(query.query_id)
    sizes = sum(len(synthetic.split(name).queries) for name in ("train", "dev", "test"))
    assert sizes == len(synthetic.queries)
    with pytest.raises(ValueError, match="unknown split"):
        synthetic.split("validation")  # type: ignore[arg-type]


def test_item_text_is_the_one_renderer() -> None:
    item = Item(item_id="i", title="T", attributes={"b": 1, "a": "x"}, description="d")
    assert item.text == render_item("T", {"a": "x", "b": 1}, "d")


def test_set_rejects_dangling_references() -> None:
    item = Item(item_id="i1", title="t")
    query = Query(query_id="q1", text="x")
    with pytest.raises(ValueError, match="unknown item_id"):
        RelevanceSet(
            items={"i1": item}, queries=[query], judgments=[Judgment(query_id="q1", item_id="i2", label=1)]
        )
    with pytest.raises(ValueError, match="without judgments"):
        RelevanceSet(items={"i1": item}, queries=[query], judgments=[])
    with pytest.raises(ValueError):
        Judgment(query_id="q1", item_id="i1", label=-1)
    assert Judgment(query_id="q1", item_id="i1", label=4).label == 4  # any graded scale
    with pytest.raises(KeyError):
        RelevanceSet(items={}, queries=[], judgments=[]).candidates("q1")


def test_load_jsonl_reports_the_bad_record_line(synthetic: RelevanceSet, tmp_path: Path) -> None:
    synthetic.save_jsonl(tmp_path)
    path = tmp_path / "judgments.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[4] = json.dumps({**json.loads(lines[4]), "label": -1})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(RelevanceDataError) as caught:
        RelevanceSet.load_jsonl(tmp_path)
    assert caught.value.line == 5
    assert caught.value.path == path
    assert caught.value.problem.startswith("label:")


# ---- load_relevance_file: good files -----------------------------------------------------------------


def test_jsonl_file_with_both_item_forms(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "set.jsonl",
        [
            row(split="train", hard=True),
            "",  # blank lines are skipped
            row(item_id="i2", label=0, title="Acme UltraPhone 15 Pro 128GB", split="train", hard=True),
            {
                "query_id": 7,
                "query": "kettle",
                "item_id": 3,
                "label": "1",
                "item_text": "Kettle 1.7 L\nSteel.",
            },
        ],
    )
    loaded = load_relevance_file(path)
    assert loaded.candidates("q1") == [("i1", 2), ("i2", 0)]
    assert loaded.candidates("7") == [("3", 1)]
    assert [(q.split, q.hard) for q in loaded.queries] == [("train", True), ("test", False)]
    assert loaded.items["i1"].text == render_item(PHONE["title"], PHONE["attributes"], "")
    assert loaded.items["3"].text == "Kettle 1.7 L\n\nSteel."


def test_csv_file_with_multiline_field(tmp_path: Path) -> None:
    header = ["query_id", "query", "item_id", "label", "title", "attributes", "description", "split"]
    path = write_csv(
        tmp_path / "set.csv",
        header,
        [
            ["q1", "phone 256gb", "i1", "2", "Phone", '{"storage": "256GB"}', "line one\nline two", "dev"],
            ["q1", "phone 256gb", "i2", "0", "Kettle", "", "", "dev"],
        ],
    )
    loaded = load_relevance_file(path, default_split="train")
    assert loaded.candidates("q1") == [("i1", 2), ("i2", 0)]
    assert loaded.items["i1"].attributes == {"storage": "256GB"}
    assert loaded.items["i1"].description == "line one\nline two"
    assert loaded.queries[0].split == "dev"


# ---- load_relevance_file: each kind of bad row ----------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ({k: v for k, v in GOOD.items() if k != "label"}, "missing column(s) label"),
        (row(label=-1), "label must be a non-negative integer"),
        (row(label="exact"), "label must be a non-negative integer"),
        (row(label=True), "label must be a non-negative integer"),
        (row(label=1.5), "label must be a non-negative integer"),
        (row(label=10**6), "label 1000000 is above 100"),
        (row(label="101"), "label 101 is above 100"),
        (row(query="   "), "empty query"),
        (row(query_id=""), "query_id must be"),
        (row(query="other text"), "different text than on line 1"),
        (row(split="train", item_id="i2"), "different split than on line 1"),
        (row(title="Acme UltraPhone 15 Pro 512GB"), "different item text than on line 1"),
        (row(attributes="{not json"), "attributes is not valid JSON"),
        (row(attributes=["storage"]), "attributes must be a JSON object"),
        (row(item_id="i2", split="holdout"), "split must be one of"),
        (row(item_id="i2", hard="maybe"), "hard must be true or false"),
        (row(item_id="i2", item_text="text"), "not both"),
        (row(item_id="i2", title=""), "empty item"),
        ({**row(item_id="i2", item_text=" \n "), "title": None}, "empty item"),
        (row(item_id="i2", title=5), "title must be a string"),
        (GOOD, "duplicate judgment for query 'q1', item 'i1' (first on line 1)"),
        ("{broken", "invalid JSON"),
        ("[1, 2]", "a row must be a JSON object"),
    ],
)
def test_jsonl_bad_row_names_its_line(tmp_path: Path, bad: object, problem: str) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, "", bad])
    with pytest.raises(RelevanceDataError) as caught:
        load_relevance_file(path)
    assert caught.value.line == 3
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f"{path}:3: ")


CSV_HEADER = ["query_id", "query", "item_id", "label", "title", "attributes", "description"]
CSV_GOOD = ["q1", "acme phone", "i1", "2", "Acme phone", '{"year": 2023}', "first\nsecond\nthird"]


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (["q1", "acme phone", "i2", "two", "Other", "", ""], "label must be a non-negative integer"),
        (["q1", "acme phone", "i2", "-1", "Other", "", ""], "label must be a non-negative integer"),
        (["q1", "", "i2", "1", "Other", "", ""], "empty query"),
        (["q1", "acme phone", "i2", "1", "Other", "{'year': 2023}", ""], "attributes is not valid JSON"),
        (["q1", "acme phone", "i1", "1", "Acme phone", '{"year": 2022}', "x"], "different item text"),
        (["q1", "acme phone", "i2", "1", "Other"], "row has 5 fields but the header has 7"),
    ],
)
def test_csv_bad_row_names_its_line(tmp_path: Path, bad: list[object], problem: str) -> None:
    # header on line 1, the good row spans lines 2-4 (quoted newlines), the bad row starts on line 5
    path = write_csv(tmp_path / "bad.csv", CSV_HEADER, [CSV_GOOD, bad])
    with pytest.raises(RelevanceDataError) as caught:
        load_relevance_file(path)
    assert caught.value.line == 5
    assert problem in caught.value.problem


def test_csv_missing_column_is_reported_on_the_header(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "bad.csv", ["query_id", "query", "item_id", "title"], [["q", "x", "i", "t"]])
    with pytest.raises(RelevanceDataError, match="missing column") as caught:
        load_relevance_file(path)
    assert caught.value.line == 1
    path = write_csv(tmp_path / "bad.csv", ["query_id", "query", "item_id", "label"], [["q", "x", "i", "1"]])
    with pytest.raises(RelevanceDataError, match="item_text or title"):
        load_relevance_file(path)


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(RelevanceDataError, match="no judgments"):
        load_relevance_file(write_jsonl(tmp_path / "empty.jsonl", [""]))
    with pytest.raises(RelevanceDataError, match="unknown format"):
        load_relevance_file(tmp_path / "set.parquet")
    with pytest.raises(RelevanceDataError, match="file not found"):
        load_relevance_file(tmp_path / "missing.csv")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"query": "caf\xe9"}\n')
    with pytest.raises(RelevanceDataError, match="not UTF-8"):
        load_relevance_file(tmp_path / "latin1.jsonl")


# ---- label scales, ESCI, duplicates, collection statistics ------------------------------------------


@pytest.mark.parametrize("scale", [(0, 1), (0, 1, 2, 3, 4)])
def test_any_non_negative_label_scale(tmp_path: Path, scale: tuple[int, ...]) -> None:
    rows = [row(item_id=f"i{label}", label=label, title=f"Item {label}") for label in scale]
    rows[-1]["label"] = str(scale[-1])  # CSV-style digits too
    data = load_relevance_file(write_jsonl(tmp_path / "scale.jsonl", rows))
    assert [label for _, label in data.candidates("q1")] == list(scale)


def test_esci_labels_map_to_a_0_to_3_scale(tmp_path: Path) -> None:
    rows = [row(item_id=f"i{n}", label=esci, title=f"Item {n}") for n, esci in enumerate("ESCIe")]
    data = load_relevance_file(write_jsonl(tmp_path / "esci.jsonl", rows), label_map=ESCI_LABELS)
    assert [label for _, label in data.candidates("q1")] == [3, 2, 1, 0, 3]
    bad = write_jsonl(tmp_path / "bad.jsonl", [row(label="E"), row(item_id="i2", label=2, title="x")])
    with pytest.raises(RelevanceDataError, match="label must be one of E, S, C, I") as caught:
        load_relevance_file(bad, label_map=ESCI_LABELS)
    assert caught.value.line == 2


def test_duplicate_rows_are_rejected_or_merged_keeping_the_higher_label(tmp_path: Path) -> None:
    other = row(item_id="i2", label=0, title="Other")
    path = write_jsonl(tmp_path / "dup.jsonl", [row(label=1), other, row(label=2), row(label=0)])
    with pytest.raises(RelevanceDataError, match="first on line 1") as caught:
        load_relevance_file(path)
    assert caught.value.line == 3 and str(caught.value).startswith(f"{path}:3: duplicate judgment")
    merged = load_relevance_file(path, dedupe=True)
    assert merged.candidates("q1") == [("i1", 2), ("i2", 0)]  # first position, highest label


def test_collection_stats_round_trip_and_split(synthetic: RelevanceSet, tmp_path: Path) -> None:
    stats = collection_stats(["the zebra and the zebra", "zebra crossing", "a lone crossing"])
    assert stats.documents == 3 and stats.avg_length == pytest.approx((2 + 2 + 2) / 3)  # stop words out
    assert stats.df == {"cross": 2, "zebra": 2}  # single-document terms are left out …
    assert stats.doc_freq("lone") == 1 and stats.doc_freq("zebra") == 2  # … and read as 1
    assert bm25_terms("The Kettles is 1.7 L, and BPA-free") == ["kettl", "1.7", "l", "bpa", "free"]
    with_stats = RelevanceSet(
        items=synthetic.items, queries=synthetic.queries, judgments=synthetic.judgments, collection=stats
    )
    with_stats.save_jsonl(tmp_path / "set")
    assert (tmp_path / "set" / "collection.json").is_file()
    loaded = RelevanceSet.load_jsonl(tmp_path / "set")
    assert loaded == with_stats and loaded.split("train").collection == stats
    synthetic.save_jsonl(tmp_path / "set")  # no statistics: a stale collection.json goes
    assert not (tmp_path / "set" / "collection.json").exists()
    (tmp_path / "set" / "collection.json").write_text('{"documents": 0, "avg_length": 1, "df": {}}')
    with pytest.raises(RelevanceDataError, match="documents"):
        RelevanceSet.load_jsonl(tmp_path / "set")
    with pytest.raises(ValueError, match="tokenizer"):
        CollectionStats(tokenizer="whitespace", documents=1, avg_length=1.0, df={})
