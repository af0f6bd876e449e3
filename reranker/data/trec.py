"""TREC-format test collections → a relevance set (`gistrank data import-trec`).

Inputs, as IR toolkits write them:
    docs     JSONL, one document per line: `{"docno", "title", "text"}`, or Pyserini's `{"id",
             "contents"}` (contents split like a flat file's `item_text`: first line = title, the rest =
             text). Other fields are ignored. Read as a stream (a collection is hundreds of MB): only the
             documents that become candidates are kept in memory.
    topics   JSONL, one topic per line: `{"qid", "title", "desc", ...}`; the query is its `title`
             (keyword query, the default) or `desc` (a sentence).
    qrels    TREC qrels, `qid iteration docno label` per line, any whitespace between fields; the label
             is a non-negative integer on any scale (0–1, 0–3, 0–4 as judged). A (topic, doc) pair on
             two lines is an error naming both lines, unless `dedupe` (keep the higher label).

Topic ids are compared as written, except that numeric ids lose leading zeros ("051" = "51").

Each document becomes an item rendered by the project's one renderer: title as title, text as
description, no attributes (`render_item`; items are cut to a model's `max_item_tokens` when read, not
here). Each judged topic becomes a query whose candidates are either
    judged   its judged documents (those in the collection),
    judged:N N of them drawn at random per topic (seeded), keeping the pool's share of relevant ones
             (`sample_judged`): deep pools (AP89: ~200 per topic) cut to a CPU-sized list, or
    bm25:N   the top N of a BM25 ranking of the whole collection (`bm25s`, k1 = 0.9, b = 0.4 — Anserini's
             defaults for TREC newswire — over `bm25_terms`; documents without any query term are never
             candidates), judged label where judged, unjudged = 0, as a deployed first stage would
             give them to a reranker.
Sources join with `+` (`judged:20+bm25:20`): each topic's candidates are their union, the first
source's first, a document in both once — lists that hold both the pool's judged documents and the
first stage's hard negatives (training lists; an evaluation reads one source at a time).
Candidates are stored in a seeded shuffled order per topic: the metrics break score ties by candidate
index, so the stored order must carry no label or first-stage information (a constant scorer would
otherwise inherit BM25's ranking).

Splits by topic number: `train=1-50,dev=51-100` by default (AP89 with TREC topics 1–100: train on
1–50, tune on 51–100, the project's convention); a topic outside every range is an error (name a
`test=` range for it), so that no topic lands in a split by accident.

The set also carries `CollectionStats` of the whole collection (collection.json in the set directory):
`gistrank eval`'s BM25 baseline reads collection-wide IDF from it without re-reading the documents.
"""

from __future__ import annotations

import json
import random
import re
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from tqdm.auto import tqdm

from reranker.core.file_formats import not_jsonl_hint
from reranker.data.relevance_data import (
    SPLITS,
    CollectionStats,
    Item,
    Judgment,
    Query,
    RelevanceDataError,
    RelevanceSet,
    Split,
    TermCounter,
    bm25_terms,
    parse_label,
)

QueryField = Literal["title", "desc"]
DEFAULT_SPLITS = "train=1-50,dev=51-100"
BM25_K1, BM25_B = 0.9, 0.4  # the first stage; the evaluation's BM25 baseline uses the same
_SHUFFLE_SEED = "gistrank-trec-candidates"
_RANGE = re.compile(r"^\s*(\w+)\s*=\s*(\d+)\s*(?:-\s*(\d+))?\s*$")


# ------------------------------------------------------------------------------------------- inputs
def topic_id(value: object) -> str:
    """A topic id as compared across topics and qrels: the string, numeric ones without leading zeros."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"topic id must be a string or an integer, got {value!r}")
    text = str(value).strip()
    if not text:
        raise ValueError("empty topic id")
    return str(int(text)) if text.isascii() and text.isdigit() else text


def read_qrels(path: str | Path, dedupe: bool = False) -> dict[str, dict[str, int]]:
    """topic id → docno → label, in file order. Malformed lines, negative labels and (unless `dedupe`)
    repeated (topic, doc) pairs raise `RelevanceDataError` naming the file and line."""
    source = Path(path)
    qrels: dict[str, dict[str, int]] = {}
    first_line: dict[tuple[str, str], int] = {}
    for line, raw in _text_lines(source):
        fields = raw.split()
        if not fields:
            continue
        if len(fields) != 4:
            problem = f"expected 4 fields 'qid iteration docno label', got {len(fields)}"
            raise RelevanceDataError(problem, path=source, line=line)
        qid, _, docno, label_text = fields
        try:
            label = parse_label(label_text)
        except ValueError as error:
            raise RelevanceDataError(str(error), path=source, line=line) from error
        try:
            qid = topic_id(qid)
        except ValueError as error:
            raise RelevanceDataError(str(error), path=source, line=line) from error
        judged = qrels.setdefault(qid, {})
        if docno in judged:
            if not dedupe:
                first = first_line[qid, docno]
                problem = f"duplicate judgment for topic {qid!r}, doc {docno!r} (first on line {first})"
                raise RelevanceDataError(problem, path=source, line=line)
            judged[docno] = max(judged[docno], label)
        else:
            judged[docno], first_line[qid, docno] = label, line
    if not qrels:
        raise RelevanceDataError("no judgments in the file", path=source)
    return qrels


def read_topics(path: str | Path, query_field: QueryField = "title") -> dict[str, str]:
    """topic id → query text (its `query_field`), in file order."""
    if query_field not in ("title", "desc"):
        raise ValueError(f"query field must be 'title' or 'desc', got {query_field!r}")
    source = Path(path)
    topics: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for line, row in _json_rows(source):
        try:
            qid = topic_id(row.get("qid"))
        except ValueError as error:
            raise RelevanceDataError(f"qid: {error}", path=source, line=line) from error
        text = row.get(query_field)
        if not isinstance(text, str) or not text.strip():
            problem = f"{query_field} must be a non-empty string, got {text!r}"
            raise RelevanceDataError(problem, path=source, line=line)
        if qid in topics:
            problem = f"duplicate topic {qid!r} (first on line {first_line[qid]})"
            raise RelevanceDataError(problem, path=source, line=line)
        topics[qid], first_line[qid] = " ".join(text.split()), line
    if not topics:
        raise RelevanceDataError("no topics in the file", path=source)
    return topics


def iter_docs(path: str | Path, progress: bool = False, desc: str = "docs") -> Iterator[tuple[int, Item]]:
    """(line, item) per document, streamed; a progress bar over the file's bytes when `progress`.
    Repeated docnos, rows of neither format and bad JSON raise `RelevanceDataError` at their line."""
    source = Path(path)
    seen: dict[str, int] = {}
    for line, row in _json_rows(source, progress, desc):
        item = _doc_item(source, line, row)
        if item.item_id in seen:
            problem = f"duplicate docno {item.item_id!r} (first on line {seen[item.item_id]})"
            raise RelevanceDataError(problem, path=source, line=line)
        seen[item.item_id] = line
        yield line, item


def _doc_item(source: Path, line: int, row: Mapping[str, object]) -> Item:
    if "docno" in row:
        docno, title, text = row.get("docno"), row.get("title"), row.get("text")
    elif "id" in row and "contents" in row:  # Pyserini JsonCollection
        contents = row.get("contents")
        if not isinstance(contents, str):
            raise RelevanceDataError("contents must be a string", path=source, line=line)
        docno, (title, _, text) = row.get("id"), contents.strip().partition("\n")
    else:
        problem = "a document needs 'docno' (with 'title', 'text') or 'id' and 'contents' (Pyserini)"
        raise RelevanceDataError(problem, path=source, line=line)
    if isinstance(docno, int) and not isinstance(docno, bool):
        docno = str(docno)
    if not isinstance(docno, str) or not docno.strip():
        raise RelevanceDataError(f"docno must be a non-empty string, got {docno!r}", path=source, line=line)
    title, text = ("" if title is None else title), ("" if text is None else text)
    for name, value in (("title", title), ("text", text)):
        if not isinstance(value, str):
            problem = f"{name} must be a string, got {type(value).__name__}"
            raise RelevanceDataError(problem, path=source, line=line)
    return Item(item_id=docno.strip(), title=title, description=text)  # type: ignore[arg-type]


def parse_splits(spec: str) -> list[tuple[Split, int, int]]:
    """`"train=1-50,dev=51-100"` → [(split, first, last)]: inclusive topic-number ranges, a split may
    take several; a single number is a range of one. Ranges must not overlap."""
    ranges: list[tuple[Split, int, int]] = []
    for part in spec.split(","):
        match = _RANGE.match(part)
        if not match or match.group(1) not in SPLITS:
            expected = f"expected SPLIT=FIRST-LAST, SPLIT one of {', '.join(SPLITS)}"
            raise ValueError(f"bad split range {part.strip()!r}: {expected}")
        name, first = match.group(1), int(match.group(2))
        last = int(match.group(3) or first)
        if last < first:
            raise ValueError(f"bad split range {part.strip()!r}: {last} < {first}")
        for other, lo, hi in ranges:
            if first <= hi and lo <= last:
                raise ValueError(f"split ranges overlap: {name}={first}-{last} and {other}={lo}-{hi}")
        ranges.append((name, first, last))  # type: ignore[arg-type]
    return ranges


def split_of(qid: str, ranges: list[tuple[Split, int, int]]) -> Split:
    if not qid.isdigit():
        raise ValueError(f"topic {qid!r} is not a number: split ranges need numeric topic ids")
    number = int(qid)
    for name, first, last in ranges:
        if first <= number <= last:
            return name
    spec = ",".join(f"{n}={a}-{b}" for n, a, b in ranges)
    raise ValueError(f"topic {qid} is outside every split range ({spec}): add one, e.g. test={qid}-{qid}")


# ------------------------------------------------------------------------------------------- import
@dataclass
class TrecImport:
    """A built relevance set and what the import saw (printed by the CLI)."""

    relevance: RelevanceSet
    candidates: str
    documents: int
    topics_by_split: dict[str, int]
    candidates_per_topic: list[int]
    judged_candidates: int  # candidates with a qrels entry
    relevant_candidates: int  # candidates with label > 0
    topics_without_relevant: int  # topics with no relevant candidate (nDCG is 0 for every system)
    skipped: dict[str, int] = field(default_factory=dict)  # why → how many (topics, qrels, docs)

    def summary(self) -> str:
        n = sum(self.candidates_per_topic)
        per = self.candidates_per_topic
        lines = [
            f"{self.documents} documents in the collection; candidates: {self.candidates}",
            "topics per split: " + ", ".join(f"{k} {v}" for k, v in self.topics_by_split.items()),
            f"candidates per topic: min {min(per)}, mean {n / len(per):.1f}, max {max(per)} ({n} in all, "
            f"{len(self.relevance.items)} distinct documents)",
            f"judged candidates: {self.judged_candidates} of {n} ({self.judged_candidates / n:.1%}); "
            f"relevant (label > 0): {self.relevant_candidates} ({self.relevant_candidates / n:.1%})",
            f"topics without a relevant candidate: {self.topics_without_relevant}",
        ]
        lines += [f"skipped: {count} {why}" for why, count in self.skipped.items() if count]
        return "\n".join(lines)


def parse_candidates(spec: str) -> list[tuple[str, int | None]]:
    """The candidate sources of `spec`, in order: `judged` → [("judged", None)]; `judged:N` →
    [("judged", N)]; `bm25:N` → [("bm25", N)]; `judged:20+bm25:20` → both (each kind once)."""
    sources: list[tuple[str, int | None]] = []
    for part in spec.split("+"):
        name, _, depth = part.strip().partition(":")
        if part.strip() == "judged":
            sources.append(("judged", None))
        elif name in ("judged", "bm25") and depth.isdigit() and int(depth) > 0:
            sources.append((name, int(depth)))
        else:
            raise ValueError(
                "candidates must be 'judged', 'judged:N' or 'bm25:N' (N > 0), or sources joined by '+' "
                f"(judged:20+bm25:20), got {spec!r}"
            )
    kinds = [name for name, _ in sources]
    if len(set(kinds)) < len(kinds):
        raise ValueError(f"candidates name a source twice: {spec!r}")
    return sources


def sample_judged(qid: str, labels: dict[str, int], n: int) -> list[str]:
    """At most n of a topic's judged docnos, drawn at random (seeded by the topic) with the judged
    pool's share of relevant documents kept (rounded, at least one when the pool has one): a
    CPU-sized slice of a deep judged pool whose label mix matches the pool's."""
    if len(labels) <= n:
        return list(labels)
    rng = random.Random(f"{_SHUFFLE_SEED}:sample:{qid}")
    relevant = sorted(d for d, label in labels.items() if label > 0)
    other = sorted(d for d, label in labels.items() if label <= 0)
    take = min(len(relevant), max(1 if relevant else 0, round(n * len(relevant) / len(labels))))
    take = max(take, n - len(other))
    return rng.sample(relevant, take) + rng.sample(other, n - take)


def import_trec(
    docs: str | Path,
    topics: str | Path,
    qrels: str | Path,
    query_field: QueryField = "title",
    candidates: str = "judged",
    splits: str = DEFAULT_SPLITS,
    dedupe: bool = False,
    progress: bool = True,
) -> TrecImport:
    """Build a relevance set from a TREC collection (module docstring). Bad input raises
    `RelevanceDataError` (naming file and line) or ValueError (options, split ranges)."""
    sources = parse_candidates(candidates)
    ranges = parse_splits(splits)
    judged = read_qrels(qrels, dedupe)
    texts = read_topics(topics, query_field)
    skipped = {
        "topics without judgments": sum(qid not in judged for qid in texts),
        "judged topics missing from the topics file": sum(qid not in texts for qid in judged),
    }
    topic_ids = [qid for qid in texts if qid in judged]
    if not topic_ids:
        raise RelevanceDataError("no topic of the topics file has judgments in the qrels", path=qrels)
    query_split = {}
    for qid in topic_ids:
        try:
            query_split[qid] = split_of(qid, ranges)
        except ValueError as error:
            raise RelevanceDataError(str(error), path=topics) from error

    kinds = {kind for kind, _ in sources}
    index = _Bm25Index() if "bm25" in kinds else None
    wanted = {docno for qid in topic_ids for docno in judged[qid]} if "judged" in kinds else set()
    items, stats = _read_collection(docs, wanted, progress, index)
    ranked: dict[str, list[str]] = {qid: [] for qid in topic_ids}
    for kind, depth in sources:
        if kind == "judged":
            found = {qid: [d for d in judged[qid] if d in items] for qid in topic_ids}
            skipped["qrels lines naming a document not in the collection (or empty)"] = sum(
                len(judged[qid]) - len(found[qid]) for qid in topic_ids
            )
            if depth is not None:
                found = {q: sample_judged(q, {d: judged[q][d] for d in found[q]}, depth) for q in found}
        else:
            assert index is not None and depth is not None
            found = index.top({qid: texts[qid] for qid in topic_ids}, depth, progress)  # best first
            unread = {docno for docnos in found.values() for docno in docnos} - items.keys()
            if unread:
                for _, item in iter_docs(docs, progress, "candidates"):  # a second pass: their text
                    if item.item_id in unread:
                        items[item.item_id] = item
        ranked = {qid: list(dict.fromkeys([*ranked[qid], *found[qid]])) for qid in topic_ids}

    queries, judgments, per_topic = [], [], []
    judged_n = relevant_n = without = 0
    for qid in topic_ids:
        docnos = ranked[qid]
        if not docnos:
            skipped["topics without candidates"] = skipped.get("topics without candidates", 0) + 1
            continue
        order = list(docnos)
        random.Random(f"{_SHUFFLE_SEED}:{qid}").shuffle(order)
        labels = [judged[qid].get(docno, 0) for docno in order]
        queries.append(Query(query_id=qid, text=texts[qid], split=query_split[qid]))
        pairs = zip(order, labels, strict=True)
        judgments += [Judgment(query_id=qid, item_id=docno, label=label) for docno, label in pairs]
        per_topic.append(len(order))
        judged_n += sum(docno in judged[qid] for docno in order)
        relevant_n += sum(label > 0 for label in labels)
        without += not any(labels)
    if not queries:
        raise RelevanceDataError("no topic has a candidate document in the collection", path=docs)
    used = {j.item_id for j in judgments}
    relevance = RelevanceSet(
        items={docno: item for docno, item in items.items() if docno in used},
        queries=queries,
        judgments=judgments,
        collection=stats,
    )
    by_split = {name: sum(q.split == name for q in queries) for name in SPLITS}
    return TrecImport(
        relevance=relevance,
        candidates=candidates,
        documents=stats.documents,
        topics_by_split={name: n for name, n in by_split.items() if n},
        candidates_per_topic=per_topic,
        judged_candidates=judged_n,
        relevant_candidates=relevant_n,
        topics_without_relevant=without,
        skipped=skipped,
    )


def _read_collection(
    docs: str | Path, wanted: set[str], progress: bool, index: _Bm25Index | None = None
) -> tuple[dict[str, Item], CollectionStats]:
    """One streamed pass: the `wanted` items (non-empty ones), the collection's term statistics, and
    every document's terms into `index` when given."""
    counter = TermCounter()
    items: dict[str, Item] = {}
    for _, item in iter_docs(docs, progress, "documents"):
        text = item.text
        terms = bm25_terms(text)
        counter.add(terms)
        if index is not None:
            index.add(item.item_id, terms)
        if item.item_id in wanted and text.strip():
            items[item.item_id] = item
    if not counter.documents:
        raise RelevanceDataError("no documents in the file", path=docs)
    return items, counter.stats()


class _Bm25Index:
    """The whole collection as term ids, indexed by bm25s. A document's ids are a 32-bit `array` (4
    bytes a term, where a list of ints takes ~36): it iterates as plain ints, which bm25s counts fast
    (numpy scalars would hash ~20× slower there)."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.docnos: list[str] = []
        self.doc_terms: list[array] = []

    def add(self, docno: str, terms: list[str]) -> None:
        vocab = self.vocab
        self.docnos.append(docno)
        self.doc_terms.append(array("i", [vocab.setdefault(term, len(vocab)) for term in terms]))

    def top(self, queries: Mapping[str, str], depth: int, progress: bool) -> dict[str, list[str]]:
        """Per query, the docnos of its `depth` best BM25 scores above 0 (ties: collection order)."""
        import bm25s

        retriever = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene", idf_method="lucene")
        retriever.index((self.doc_terms, self.vocab), create_empty_token=False, show_progress=progress)
        self.doc_terms = []  # indexed: the term ids are no longer needed
        out = {}
        for qid, text in queries.items():
            ids = sorted({self.vocab[t] for t in bm25_terms(text) if t in self.vocab})
            scores = retriever.get_scores(ids) if ids else np.zeros(len(self.docnos), dtype=np.float32)
            out[qid] = _best(scores, depth, self.docnos.__getitem__)
        return out


def bm25_top(
    docs: Mapping[str, str], queries: Mapping[str, str], depth: int, progress: bool = False
) -> dict[str, list[str]]:
    """Per query, the ids of its `depth` best BM25 documents among `docs` (id → text), best first."""
    index = _Bm25Index()
    for doc_id, text in docs.items():
        index.add(doc_id, bm25_terms(text))
    return index.top(queries, depth, progress)


def _best(scores: np.ndarray, depth: int, docno: Callable[[int], str]) -> list[str]:
    order = np.lexsort((np.arange(len(scores)), -scores))[:depth]  # score descending, then position
    return [docno(int(i)) for i in order if scores[i] > 0]


# ------------------------------------------------------------------------------------------- files
def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with path.open(encoding="utf-8-sig") as handle:
            yield from enumerate(handle, start=1)
    except FileNotFoundError as error:
        raise RelevanceDataError("file not found", path=path) from error
    except UnicodeDecodeError as error:
        raise RelevanceDataError(f"not UTF-8 text ({error.reason})", path=path) from error


def _json_rows(path: Path, progress: bool = False, desc: str = "") -> Iterator[tuple[int, dict]]:
    try:
        handle = path.open("rb")
    except FileNotFoundError as error:
        raise RelevanceDataError("file not found", path=path) from error
    total = path.stat().st_size
    with handle, tqdm(total=total, unit="B", unit_scale=True, desc=desc, disable=not progress) as bar:
        for line, raw in enumerate(handle, start=1):
            bar.update(len(raw))
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8-sig" if line == 1 else "utf-8"))
            except UnicodeDecodeError as error:
                raise RelevanceDataError(f"not UTF-8 text ({error.reason})", path=path, line=line) from error
            except json.JSONDecodeError as error:
                problem = f"invalid JSON: {error.msg}{not_jsonl_hint(raw, line == 1)}"
                raise RelevanceDataError(problem, path=path, line=line) from error
            if not isinstance(row, dict):
                problem = f"a row must be a JSON object, got {type(row).__name__}"
                raise RelevanceDataError(problem, path=path, line=line)
            yield line, row


def write_summary(result: TrecImport, out: Path) -> None:
    """The import's counts beside the set (import.json), for the report."""
    payload = {
        "candidates": result.candidates,
        "documents": result.documents,
        "topics_by_split": result.topics_by_split,
        "candidates_per_topic": result.candidates_per_topic,
        "judged_candidates": result.judged_candidates,
        "relevant_candidates": result.relevant_candidates,
        "topics_without_relevant": result.topics_without_relevant,
        "skipped": result.skipped,
    }
    (out / "import.json").write_text(json.dumps(payload, indent=2) + "\n")
