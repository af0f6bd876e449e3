"""TREC-format data: import (docs in both formats, topics, qrels on any label scale, duplicates, BM25
candidates over the whole collection), run files, and the project's metrics against trec_eval's
(ir_measures → pytrec_eval) on the same runs. Small made-up collections only (no AP89 in CI)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import ir_measures
import pytest
from ir_measures import RR, R, nDCG
from typer.testing import CliRunner

from reranker.cli import app
from reranker.core.config import RerankerConfig
from reranker.core.model import Reranker
from reranker.core.render import render_item
from reranker.data.relevance_data import (
    Item,
    Judgment,
    Query,
    RelevanceDataError,
    RelevanceSet,
    bm25_terms,
    collection_stats,
)
from reranker.data.trec import (
    _Bm25Index,
    import_trec,
    iter_docs,
    parse_splits,
    read_qrels,
    sample_judged,
    split_of,
)
from reranker.evaluation.baselines import bm25_scores
from reranker.evaluation.run_files import run_tag, write_runs
from reranker.evaluation.runner import evaluate
from reranker.ranking_metrics import (
    ndcg_at_k,
    ranking,
    recall_at_k,
    recall_at_k_vs_reference,
    reciprocal_rank,
)

pytestmark = pytest.mark.trec

DOCS = {  # docno → (title, text)
    "AP-001": ("Zebra migration begins", "Herds of zebra cross the river on their yearly migration."),
    "AP-002": ("Stock markets", "Shares fell on Monday as investors sold bank stocks."),
    "AP-003": ("Zoo news", "A zebra was born at the city zoo; keepers named the foal."),
    "AP-004": ("Weather", "Rain is expected across the region on Monday and Tuesday."),
    "AP-005": ("River crossing", "Wildebeest and zebra migration across the Mara river drew tourists."),
    "AP-006": ("Elections", "Voters went to the polls in the river city on Tuesday."),
    "AP-007": ("Bank shares rise", "Bank shares rose sharply after two banks agreed to merge."),
    "AP-008": ("", ""),  # an empty document: never a candidate
}
TOPICS = [
    {"qid": 1, "title": "zebra migration", "desc": "Documents on the migration of zebra herds.", "narr": "."},
    {"qid": "2", "title": "bank shares", "desc": "Stock prices of banks.", "narr": "."},
    {"qid": "051", "title": "monday rain", "desc": "Weather forecasts.", "narr": "."},
    {"qid": 3, "title": "unjudged topic", "desc": "No qrels.", "narr": "."},
]
QRELS = """1 0 AP-001 2
1 0 AP-003 0
1  0\tAP-005 1
1 0 AP-099 1
2 0 AP-002 1
2 0 AP-007 2
2 0 AP-006 0
51 0 AP-004 1
51 0 AP-002 0
"""


def write_collection(root: Path, pyserini: bool = False, qrels: str = QRELS) -> tuple[Path, Path, Path]:
    root.mkdir(parents=True, exist_ok=True)
    docs = root / "docs.jsonl"
    rows = [
        {"id": docno, "contents": f"{title}\n{text}"}
        if pyserini
        else {"docno": docno, "title": title, "text": text}
        for docno, (title, text) in DOCS.items()
    ]
    docs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    topics = root / "topics.jsonl"
    topics.write_text("".join(json.dumps(t) + "\n" for t in TOPICS))
    (root / "qrels.txt").write_text(qrels)
    return docs, topics, root / "qrels.txt"


def labels_of(data: RelevanceSet, qid: str) -> dict[str, int]:
    return dict(data.candidates(qid))


# --------------------------------------------------------------------------------------------- import
@pytest.mark.parametrize("pyserini", [False, True])
def test_import_judged(tmp_path: Path, pyserini: bool) -> None:
    files = write_collection(tmp_path, pyserini)
    result = import_trec(*files, splits="train=1-50,dev=51-100", progress=False)
    data = result.relevance
    assert [(q.query_id, q.text, q.split) for q in data.queries] == [
        ("1", "zebra migration", "train"),
        ("2", "bank shares", "train"),
        ("51", "monday rain", "dev"),  # "051" in the topics file, 51 in the qrels
    ]
    assert labels_of(data, "1") == {"AP-001": 2, "AP-003": 0, "AP-005": 1}  # AP-099: not in the collection
    assert labels_of(data, "2") == {"AP-002": 1, "AP-007": 2, "AP-006": 0}
    title, text = DOCS["AP-001"]
    assert data.items["AP-001"].text == render_item(title, {}, text)
    assert set(data.items) == {"AP-001", "AP-002", "AP-003", "AP-004", "AP-005", "AP-006", "AP-007"}
    assert result.topics_by_split == {"train": 2, "dev": 1}
    assert result.candidates_per_topic == [3, 3, 2] and result.judged_candidates == 8
    assert result.skipped["topics without judgments"] == 1  # topic 3
    assert result.skipped["qrels lines naming a document not in the collection (or empty)"] == 1
    # the whole collection's statistics travel with the set (8 documents, the empty one included)
    assert data.collection == collection_stats(render_item(t, {}, x) for t, x in DOCS.values())
    data.save_jsonl(tmp_path / "set")
    assert RelevanceSet.load_jsonl(tmp_path / "set") == data


def test_both_doc_formats_and_query_fields(tmp_path: Path) -> None:
    plain = import_trec(*write_collection(tmp_path / "a"), progress=False).relevance
    pyserini = import_trec(*write_collection(tmp_path / "b", pyserini=True), progress=False).relevance
    assert plain == pyserini
    desc = import_trec(*write_collection(tmp_path / "a"), query_field="desc", progress=False).relevance
    assert desc.queries[0].text == "Documents on the migration of zebra herds."


def test_candidates_are_shuffled_the_same_way_every_time(tmp_path: Path) -> None:
    qrels = "".join(f"1 0 {docno} {n % 2}\n" for n, docno in enumerate(sorted(DOCS)[:7]))
    files = write_collection(tmp_path, qrels=qrels)
    first = [d for d, _ in import_trec(*files, progress=False).relevance.candidates("1")]
    again = [d for d, _ in import_trec(*files, progress=False).relevance.candidates("1")]
    assert first == again and sorted(first) == sorted(DOCS)[:7] and first != sorted(DOCS)[:7]


def test_judged_n_samples_each_pool_with_its_relevant_share() -> None:
    """judged:N draws N of a deep pool, seeded by topic, with the pool's share of relevant documents;
    a pool with few relevant documents keeps at least one; a pool no larger than N is kept whole."""
    pool = {f"D{i:03d}": int(i < 60) + int(i < 10) for i in range(200)}  # 30% relevant, labels 0-2
    drawn = sample_judged("51", pool, 20)
    assert len(set(drawn)) == 20 and set(drawn) <= set(pool)
    assert sum(pool[d] > 0 for d in drawn) == 6  # 30% of 20
    assert drawn == sample_judged("51", pool, 20) and drawn != sample_judged("52", pool, 20)
    rare = {f"D{i:03d}": int(i == 7) for i in range(200)}
    assert "D007" in sample_judged("51", rare, 20)
    assert sorted(sample_judged("51", dict(list(pool.items())[:5]), 20)) == sorted(list(pool)[:5])
    mostly = {f"D{i}": int(i > 0) for i in range(30)}  # 1 non-relevant: the rest of N must be relevant
    assert len(sample_judged("51", mostly, 20)) == 20


def test_judged_n_through_the_import(tmp_path: Path) -> None:
    qrels = "".join(f"1 0 {docno} {n % 2}\n" for n, docno in enumerate(sorted(DOCS)[:7]))
    files = write_collection(tmp_path, qrels=qrels)
    result = import_trec(*files, candidates="judged:4", progress=False)
    assert result.candidates_per_topic[0] == 4 and result.judged_candidates == sum(
        result.candidates_per_topic
    )
    assert set(labels_of(result.relevance, "1")) <= set(sorted(DOCS)[:7])
    with pytest.raises(ValueError, match="judged:N"):
        import_trec(*files, candidates="judged:x", progress=False)


@pytest.mark.parametrize("scale", [(0, 1), (0, 1, 2, 3, 4)])
def test_label_scales(tmp_path: Path, scale: tuple[int, ...]) -> None:
    docnos = sorted(DOCS)[: len(scale)]
    qrels = "".join(f"1 0 {d} {label}\n" for d, label in zip(docnos, scale, strict=True))
    data = import_trec(*write_collection(tmp_path, qrels=qrels), progress=False).relevance
    assert labels_of(data, "1") == dict(zip(docnos, scale, strict=True))


def test_duplicate_qrels_are_rejected_or_merged(tmp_path: Path) -> None:
    files = write_collection(tmp_path, qrels=QRELS + "1 0 AP-003 2\n1 0 AP-001 0\n")
    with pytest.raises(RelevanceDataError) as caught:
        import_trec(*files, progress=False)
    assert (
        str(caught.value)
        == f"{files[2]}:10: duplicate judgment for topic '1', doc 'AP-003' (first on line 2)"
    )
    merged = import_trec(*files, dedupe=True, progress=False).relevance
    assert labels_of(merged, "1") == {"AP-001": 2, "AP-003": 2, "AP-005": 1}  # the higher label of each pair


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("1 0 AP-002", "expected 4 fields"),
        ("1 0 AP-002 -1", "label must be a non-negative integer"),
        ("1 0 AP-002 high", "label must be a non-negative integer"),
        ("1 0 AP-002 1000000", "label 1000000 is above 100"),
    ],
)
def test_bad_qrels_line_names_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "qrels.txt"
    path.write_text("1 0 AP-001 1\n\n" + line + "\n")
    with pytest.raises(RelevanceDataError, match=problem) as caught:
        read_qrels(path)
    assert caught.value.line == 3


def test_bad_docs_and_topics_name_file_and_line(tmp_path: Path) -> None:
    docs, topics, qrels = write_collection(tmp_path)
    docs.write_text(docs.read_text() + json.dumps({"docno": "AP-001", "title": "again", "text": "x"}) + "\n")
    with pytest.raises(RelevanceDataError, match="duplicate docno 'AP-001' \\(first on line 1\\)") as caught:
        import_trec(docs, topics, qrels, progress=False)
    assert caught.value.line == len(DOCS) + 1
    docs.write_text('{"docno": "AP-001", "title": "t", "text": "x"}\n{"name": "AP-002"}\n')
    with pytest.raises(RelevanceDataError, match="needs 'docno'") as caught:
        import_trec(docs, topics, qrels, progress=False)
    assert caught.value.line == 2
    topics.write_text('{"qid": 1, "title": "  "}\n')
    with pytest.raises(RelevanceDataError, match="title must be a non-empty string") as caught:
        import_trec(docs, topics, qrels, progress=False)
    assert caught.value.line == 1


def test_split_ranges(tmp_path: Path) -> None:
    ranges = parse_splits("train=1-50, dev=51-100,test=101")
    assert [split_of(q, ranges) for q in ("1", "50", "51", "101")] == ["train", "train", "dev", "test"]
    with pytest.raises(ValueError, match="outside every split range"):
        split_of("102", ranges)
    with pytest.raises(ValueError, match="overlap"):
        parse_splits("train=1-50,dev=50-100")
    with pytest.raises(ValueError, match="bad split range"):
        parse_splits("holdout=1-5")
    with pytest.raises(RelevanceDataError, match="topic 51 is outside every split range"):
        import_trec(*write_collection(tmp_path), splits="train=1-50", progress=False)


def test_bm25_candidates_over_the_whole_collection(tmp_path: Path) -> None:
    files = write_collection(tmp_path)
    result = import_trec(*files, candidates="bm25:3", progress=False)
    data = result.relevance
    # the three zebra documents; AP-099 is judged but not in the collection
    assert labels_of(data, "1") == {"AP-001": 2, "AP-005": 1, "AP-003": 0}
    # "bank shares": AP-006 (judged 0) has neither term, so it is not retrieved
    assert labels_of(data, "2") == {"AP-007": 2, "AP-002": 1}
    # "monday rain": AP-004 has both, AP-002 (judged 0) only monday, no other document either
    assert labels_of(data, "51") == {"AP-004": 1, "AP-002": 0}
    assert result.judged_candidates == 7 and result.relevant_candidates == 5
    # the right document first: BM25 with the collection's statistics, as the evaluation's baseline
    # reads them from the saved set, ranks the stored candidates exactly as the first stage did
    index = _Bm25Index()
    for _, item in iter_docs(files[0]):
        index.add(item.item_id, bm25_terms(item.text))
    first_stage = index.top({q.query_id: q.text for q in data.queries}, 3, progress=False)
    for query in data.queries:
        ids = [d for d, _ in data.candidates(query.query_id)]
        scores = bm25_scores(query.text, [data.items[d].text for d in ids], collection=data.collection)
        assert [ids[i] for i in ranking(scores)] == first_stage[query.query_id]
    assert first_stage == {
        "1": ["AP-001", "AP-005", "AP-003"],
        "2": ["AP-007", "AP-002"],
        "51": ["AP-004", "AP-002"],
    }
    # an unjudged document among the top N is a candidate with label 0
    files = write_collection(tmp_path / "u", qrels="1 0 AP-005 1\n")
    unjudged = import_trec(*files, candidates="bm25:2", progress=False)
    assert labels_of(unjudged.relevance, "1") == {"AP-001": 0, "AP-005": 1}
    assert unjudged.judged_candidates == 1
    with pytest.raises(ValueError, match="bm25:N"):
        import_trec(*files, candidates="bm25:0", progress=False)


def test_candidate_sources_joined_by_plus_give_each_topic_their_union(tmp_path: Path) -> None:
    """judged+bm25:N: every judged document and the first stage's top N, each once, judged labels where
    judged (topic 2's AP-006 has no query term, so only its judgment brings it in; BM25 brings in
    unjudged AP-007 and AP-002)."""
    files = write_collection(tmp_path, qrels="1 0 AP-005 1\n2 0 AP-006 0\n")
    union = import_trec(*files, candidates="judged+bm25:3", progress=False)
    judged = import_trec(*files, candidates="judged", progress=False).relevance
    bm25 = import_trec(*files, candidates="bm25:3", progress=False).relevance
    for qid in ("1", "2"):
        assert labels_of(union.relevance, qid) == labels_of(judged, qid) | labels_of(bm25, qid)
    assert labels_of(union.relevance, "2") == {"AP-006": 0, "AP-007": 0, "AP-002": 0}
    assert union.candidates_per_topic == [3, 3] and union.judged_candidates == 2
    assert {d: union.relevance.items[d].text for d in union.relevance.items} == {
        d: render_item(DOCS[d][0], {}, DOCS[d][1])
        for d in ("AP-001", "AP-002", "AP-003", "AP-005", "AP-006", "AP-007")
    }
    with pytest.raises(ValueError, match="a source twice"):
        import_trec(*files, candidates="judged+judged:3", progress=False)
    with pytest.raises(ValueError, match="joined by"):
        import_trec(*files, candidates="judged:2+", progress=False)


def test_import_trec_command(tmp_path: Path) -> None:
    docs, topics, qrels = write_collection(tmp_path)
    runner = CliRunner()
    args = ["data", "import-trec", "--docs", str(docs), "--topics", str(topics), "--qrels", str(qrels)]
    result = runner.invoke(app, [*args, "--candidates", "bm25:3", "--out", str(tmp_path / "set")])
    assert result.exit_code == 0, result.output
    assert "topics per split: train 2, dev 1" in result.output
    assert "judged candidates: 7 of 7 (100.0%)" in result.output
    data = RelevanceSet.load_jsonl(tmp_path / "set")
    assert len(data.queries) == 3 and data.collection is not None
    assert json.loads((tmp_path / "set" / "import.json").read_text())["candidates_per_topic"] == [3, 2, 2]
    qrels.write_text(QRELS + "2 0 AP-002 0\n")
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "dup")])
    assert result.exit_code == 2
    assert "duplicate judgment for topic '2', doc 'AP-002' (first on line 5)" in " ".join(
        result.output.split()
    )
    result = runner.invoke(app, [*args, "--dedupe", "--out", str(tmp_path / "dedupe")])
    assert result.exit_code == 0, result.output


def test_import_file_command_maps_esci_labels(tmp_path: Path) -> None:
    rows = [
        {"query_id": "q", "query": "usb charger", "item_id": f"i{n}", "label": esci, "title": f"Item {n}"}
        for n, esci in enumerate("ESCI")
    ]
    path = tmp_path / "esci.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*rows, rows[0] | {"label": "S"}]))
    runner = CliRunner()
    result = runner.invoke(app, ["data", "import-file", str(path), "--esci", "--out", str(tmp_path / "a")])
    assert result.exit_code == 2 and "duplicate judgment" in result.output
    args = ["data", "import-file", str(path), "--esci", "--dedupe", "--out", str(tmp_path / "set")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert RelevanceSet.load_jsonl(tmp_path / "set").candidates("q") == [
        ("i0", 3),
        ("i1", 2),
        ("i2", 1),
        ("i3", 0),
    ]


# ------------------------------------------------------------------------- run files, metric check
def check_against_trec_eval(run_dir: Path, relevance: RelevanceSet, reference: str) -> int:
    """Every run in `run_dir` scored by ir_measures (pytrec_eval) against the project's metrics on the
    same candidates and scores, query by query, ties included; returns how many runs were checked.

    nDCG@10 with the label as the gain (trec_eval's) and with 2^l − 1 (as ir_measures' gain map); IR
    recall@10 and reciprocal rank (relevant: label > 0); overlap@K with the reference as R@K of the
    system's run with the reference run's top K as the qrels. trec_eval's ideal DCG sorts the topic's
    qrels, ours the list's labels: the same here, as the qrels beside the runs are exactly the lists."""
    qrels = {}
    for q in ir_measures.read_trec_qrels(str(run_dir / "qrels.txt")):
        qrels.setdefault(q.query_id, {})[q.doc_id] = q.relevance
    labels = {q.query_id: dict(relevance.candidates(q.query_id)) for q in relevance.queries}
    assert qrels == labels
    runs = {
        system: {
            qid: dict(pairs)
            for qid, pairs in _by_query(ir_measures.read_trec_run(str(run_dir / name))).items()
        }
        for system, name in json.loads((run_dir / "runs.json").read_text()).items()
    }
    top = max(label for per in labels.values() for label in per.values())
    exp_ndcg = nDCG(gains={label: 2**label - 1 for label in range(top + 1)}) @ 10
    for system, run in runs.items():
        theirs = {  # the gain map in its own call: beside plain nDCG, pytrec_eval would mix the two up
            (m.query_id, str(m.measure)): m.value
            for measures in ([nDCG @ 10, R @ 10, RR], [exp_ndcg])
            for m in ir_measures.iter_calc(measures, qrels, run)
        }
        for qid, docs in run.items():
            ids = [d for d, _ in relevance.candidates(qid)]
            scores, truth = [docs[d] for d in ids], [runs[reference][qid][d] for d in ids]
            graded = [labels[qid][d] for d in ids]
            ours = {
                str(nDCG @ 10): ndcg_at_k(scores, graded, 10, ids),
                str(exp_ndcg): ndcg_at_k(scores, graded, 10, ids, gain="exponential"),
                str(R @ 10): recall_at_k(scores, graded, 10, ids),
                str(RR): reciprocal_rank(scores, graded, ids),
            }
            for measure, value in ours.items():
                assert theirs[qid, measure] == pytest.approx(value), (system, qid, measure)
            for k in (1, 5, 10):
                ref_top = {ids[i]: 1 for i in ranking(truth, ids)[:k]}
                [recall] = ir_measures.iter_calc([R @ k], {qid: ref_top}, {qid: docs})
                assert recall.value == pytest.approx(recall_at_k_vs_reference(scores, truth, k, ids)), (
                    system,
                    qid,
                    k,
                )
    return len(runs)


def _by_query(rows) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {}
    for row in rows:
        out.setdefault(row.query_id, []).append((row.doc_id, row.score))
    return out


@pytest.mark.parametrize("top_label", [1, 4])
def test_run_files_agree_with_trec_eval(tmp_path: Path, top_label: int) -> None:
    """Made-up lists of 15 candidates on a 0–1 and a 0–4 scale; four systems, two with ties (a constant
    scorer and one with scores rounded to two values): every metric equals trec_eval's, query by query."""
    rng = random.Random(top_label)
    items = {}
    queries, judgments = [], []
    for q in range(6):
        queries.append(Query(query_id=str(q + 1), text=f"query {q}"))
        for d in rng.sample(range(40), 15):
            items[f"D{d}"] = Item(item_id=f"D{d}", title=f"doc {d}")
            judgments.append(Judgment(query_id=str(q + 1), item_id=f"D{d}", label=rng.randint(0, top_label)))
    relevance = RelevanceSet(items=items, queries=queries, judgments=judgments)
    scores = {
        system: {q.query_id: [rng.gauss(0, 1) for _ in relevance.candidates(q.query_id)] for q in queries}
        for system in ("teacher", "gist t=32 k=8", "bm25")
    }
    scores["no item"] = {q.query_id: [0.5] * 15 for q in queries}  # every candidate tied
    scores["coarse"] = {q: [float(v > 0) for v in values] for q, values in scores["bm25"].items()}
    files = write_runs(tmp_path, relevance, scores)
    assert {p.name for p in files.values()} == {
        "teacher.run",
        "gist_t=32_k=8.run",
        "bm25.run",
        "no_item.run",
        "coarse.run",
    }
    first = (tmp_path / "bm25.run").read_text().splitlines()[0].split()
    assert len(first) == 6 and first[1] == "Q0" and first[3] == "1" and first[5] == "bm25"
    assert check_against_trec_eval(tmp_path, relevance, "teacher") == 5
    assert run_tag("prefix 40 · gist t=32 k=8 · untouched base") == "prefix_40_gist_t=32_k=8_untouched_base"


def test_tied_scores_rank_by_docno_descending_as_trec_eval_does() -> None:
    # the example: a constant scorer is not a perfect ranker
    ids, labels = ["d1", "d2", "d3"], [2, 0, 1]
    assert ranking([0.0, 0.0, 0.0], ids) == [2, 1, 0]  # d3, d2, d1
    assert ranking([0.0, 0.0, 0.0]) == [0, 1, 2]  # without ids: candidate order
    assert ndcg_at_k([0.0] * 3, labels, 10, ids) < ndcg_at_k([0.0] * 3, labels, 10) < 1.0
    assert ndcg_at_k([3.0, 1.0, 2.0], labels, 10, gain="linear") == 1.0
    # gain: 2 vs 1 on graded labels: linear 2 / (2 + 1/log2 3) ... checked against trec_eval above
    assert ndcg_at_k([1.0, 2.0, 0.0], [2, 1, 0], 10) != ndcg_at_k(
        [1.0, 2.0, 0.0], [2, 1, 0], 10, gain="exponential"
    )
    assert (
        reciprocal_rank([1.0, 2.0, 0.0], [2, 0, 0]) == 0.5
        and recall_at_k([1.0, 2.0, 0.0], [1, 0, 1], 2) == 0.5
    )


def test_eval_run_dir_end_to_end(tiny_base: Path, tmp_path: Path) -> None:
    """`evaluate(run_dir=...)` on an imported TREC set: one run per system, the split's qrels, and the
    report's per-query metrics are trec_eval's on those runs."""
    files = write_collection(tmp_path / "trec")
    data = import_trec(*files, candidates="bm25:3", splits="train=1-2,dev=3-100", progress=False).relevance
    gist = RerankerConfig(num_gist=2, max_item_tokens=64, dtype="float32")
    model = Reranker.from_pretrained(tiny_base, gist).save_pretrained(tmp_path / "model")
    runs = tmp_path / "runs"
    result = evaluate(
        data, model, [model], tmp_path / "eval", split="train", device="cpu", prefix_ks=(1,), run_dir=runs
    )
    index = json.loads((runs / "runs.json").read_text())
    assert set(index) == set(result.summary) and not result.errors
    assert result.bm25 == {
        "k1": 0.9,
        "b": 0.4,
        "idf_documents": 8,
        "idf_over": "the collection (collection.json)",
    }
    report = (tmp_path / "eval" / "report.md").read_text()
    assert "ndcg@10 (gain = label)" in report and "k1 = 0.9, b = 0.4" in report
    assert check_against_trec_eval(runs, data.split("train"), "teacher") >= 3
    for record in result.records:  # the report's numbers are the runs' numbers
        run = _by_query(ir_measures.read_trec_run(str(runs / index[record.system])))[record.query_id]
        ids = [d for d, _ in data.candidates(record.query_id)]
        scores = dict(run)
        labels = [label for _, label in data.candidates(record.query_id)]
        assert record.metrics["ndcg@10"] == ndcg_at_k([scores[d] for d in ids], labels, 10, ids)
