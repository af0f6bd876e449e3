"""Relevance sets: items, queries and graded judgments, for training and for the evaluation protocol.

One in-memory form (`RelevanceSet`) serves the synthetic generator (`reranker.data.data_synth`) and real
data that users bring (WANDS, ESCI, TREC collections via `reranker.data.trec`, click logs). Labels are
non-negative integers on any graded scale (0–1, 0–3, 0–4 as judged); the metrics use the gain
2^label − 1. The synthetic set and WANDS use 0 (irrelevant), 1 (partial, a near miss or substitute) and
2 (exact) (`LABELS`); ESCI's E/S/C/I map to 3/2/1/0 (`ESCI_LABELS`, `load_relevance_file(label_map=...)`).
Item text always comes from `render_item`, the one renderer, so items reach the model in the same layout
whether they were generated, loaded or served.

Storage is plain JSONL, never pickle: readable, diffable and safe to load from anywhere.
`save_jsonl`/`load_jsonl` write and read a directory of three files (items, queries, judgments), plus
`collection.json` when the set carries the term statistics of a larger collection its items were drawn
from (`CollectionStats`: what BM25 needs for collection-wide IDF without re-reading the collection).
`load_relevance_file` reads the flat one-row-per-judgment format users export (JSONL or CSV) and
validates it row by row, so a bad row is reported with its line number and the problem.
"""

from __future__ import annotations

import csv
import functools
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TextIO, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from reranker.core.errors import GistRankError
from reranker.core.file_formats import not_jsonl_hint
from reranker.core.render import content_hash, render_item

Split = Literal["train", "dev", "test"]
SPLITS: tuple[Split, ...] = ("train", "dev", "test")
LABELS = {0: "irrelevant", 1: "partial", 2: "exact"}  # the synthetic set's (and WANDS') 0/1/2 scale
# Amazon ESCI (Exact, Substitute, Complement, Irrelevant) on a 0–3 scale: an exact match is worth more
# than a substitute, a complement is still better than nothing (Reddy et al., 2022, use E=1.0, S=0.1,
# C=0.01 as gains; 2^l − 1 with E=3, S=2, C=1 keeps the same order).
ESCI_LABELS = {"E": 3, "S": 2, "C": 1, "I": 0}

_ITEMS_FILE, _QUERIES_FILE, _JUDGMENTS_FILE = "items.jsonl", "queries.jsonl", "judgments.jsonl"
_COLLECTION_FILE = "collection.json"
SET_FILES = (_ITEMS_FILE, _QUERIES_FILE, _JUDGMENTS_FILE, _COLLECTION_FILE)  # what save_jsonl writes
_REQUIRED_COLUMNS = ("query_id", "query", "item_id", "label")
_TRUE, _FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no", ""})

Record = TypeVar("Record", bound=BaseModel)


class RelevanceDataError(GistRankError):
    """Invalid relevance data; `line` is the 1-based line of the offending row when one is to blame."""

    def __init__(self, problem: str, *, path: str | Path | None = None, line: int | None = None) -> None:
        where = ":".join(str(part) for part in (path, line) if part is not None)
        super().__init__(f"{where}: {problem}" if where else problem)
        self.problem = problem
        self.path = None if path is None else Path(path)
        self.line = line


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty or whitespace only")
    return text


NonBlank = Annotated[str, AfterValidator(_not_blank)]
Label = Annotated[int, Field(strict=True, ge=0)]  # any graded scale; gain 2^label − 1


class Item(BaseModel):
    """A catalog item as the renderer sees it; `text` is what the model reads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    item_id: NonBlank
    title: str
    attributes: dict[str, JsonValue] = Field(default_factory=dict)
    description: str = ""

    @property
    def text(self) -> str:
        return render_item(self.title, self.attributes, self.description)

    @property
    def content_hash(self) -> str:
        return content_hash(self.title, self.attributes, self.description)


class Query(BaseModel):
    """A query; `hard` marks queries whose candidates include near-duplicates of an exact item.

    `fields` holds the structured constraints the query states (the synthetic generator fills it so the
    labels can be recomputed and audited; user data leaves it empty).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    query_id: NonBlank
    text: NonBlank
    split: Split = "test"
    hard: bool = False
    fields: dict[str, JsonValue] = Field(default_factory=dict)


class Judgment(BaseModel):
    """The graded label of one (query, candidate item) pair: 0 = not relevant, higher = more relevant
    (any non-negative integer scale; the synthetic set's is `LABELS`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    query_id: NonBlank
    item_id: NonBlank
    label: Label


# ---- collection statistics for lexical baselines -------------------------------------------------------

BM25_TOKENIZER = "lowercase-alnum-stop33-porter"
_TERM = re.compile(r"[a-z0-9]+(?:\.[0-9]+)?")
# Lucene's classic English stop set (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET, 33 words).
STOPWORDS = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no"}
    | {"not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this"}
    | {"to", "was", "will", "with"}
)


@functools.cache
def _porter() -> Any:
    import Stemmer  # PyStemmer (Snowball's C stemmers)

    return Stemmer.Stemmer("porter")


def bm25_terms(text: str) -> list[str]:
    """The terms BM25 counts in a text (`BM25_TOKENIZER`): lowercase runs of letters and digits (a
    decimal like 1.7 stays one term), Lucene's 33 English stop words dropped, Porter-stemmed — the
    analysis of Anserini's default BM25 runs on TREC newswire, up to the word tokenizer. The BM25
    baseline, the `bm25:N` first stage of `gistrank data import-trec` and `CollectionStats` all use it,
    so the baseline reranking a BM25 list with the collection's statistics reproduces that list."""
    return _porter().stemWords([term for term in _TERM.findall(text.lower()) if term not in STOPWORDS])


class CollectionStats(BaseModel):
    """What BM25 needs of a document collection besides the candidates themselves: the number of
    documents N, their mean length in terms and each term's document frequency — so IDF is the
    collection's, not the candidate list's. Terms found in a single document are left out of `df`
    (about half of any vocabulary): every candidate comes from the collection, so a term of a candidate
    missing from `df` occurs in exactly one document (`doc_freq`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokenizer: str = BM25_TOKENIZER
    documents: int = Field(ge=1)
    avg_length: float = Field(ge=0)
    df: dict[str, int]

    @model_validator(mode="after")
    def _known_tokenizer(self) -> CollectionStats:
        if self.tokenizer != BM25_TOKENIZER:
            raise ValueError(f"tokenizer {self.tokenizer!r} is not this version's {BM25_TOKENIZER!r}")
        return self

    def doc_freq(self, term: str) -> int:
        return self.df.get(term, 1)


class TermCounter:
    """Document frequencies and lengths, one document at a time (a collection streamed from disk)."""

    def __init__(self) -> None:
        self.df: Counter[str] = Counter()
        self.documents = 0
        self.total_length = 0

    def add(self, terms: Iterable[str]) -> None:
        terms = list(terms)
        self.df.update(set(terms))
        self.documents += 1
        self.total_length += len(terms)

    def stats(self) -> CollectionStats:
        if not self.documents:
            raise ValueError("no documents counted")
        df = {term: n for term, n in sorted(self.df.items()) if n > 1}
        return CollectionStats(documents=self.documents, avg_length=self.total_length / self.documents, df=df)


def collection_stats(texts: Iterable[str]) -> CollectionStats:
    """`CollectionStats` of a collection given as its texts."""
    counter = TermCounter()
    for text in texts:
        counter.add(bm25_terms(text))
    return counter.stats()


class RelevanceSet(BaseModel):
    """Items, queries and judgments; a query's candidates are its judgments, in their stored order.

    Candidate order is kept because the metrics break score ties by candidate index. Cross-references
    are checked on construction: every judgment names a known query and item, no pair is judged twice,
    and every query has at least one candidate. Treat instances as immutable (the candidate index is
    built once). `collection`: the term statistics of the whole collection the items were drawn from,
    when it is larger than `items` (a TREC collection of which only the candidates are kept); None means
    the items are the collection.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: dict[str, Item]
    queries: list[Query]
    judgments: list[Judgment]
    collection: CollectionStats | None = None
    _candidates: dict[str, list[tuple[str, int]]] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check_and_index(self) -> RelevanceSet:
        for key, item in self.items.items():
            if key != item.item_id:
                raise ValueError(f"items key {key!r} differs from its item_id {item.item_id!r}")
        candidates: dict[str, list[tuple[str, int]]] = {}
        for query in self.queries:
            if query.query_id in candidates:
                raise ValueError(f"duplicate query_id {query.query_id!r}")
            candidates[query.query_id] = []
        seen: set[tuple[str, str]] = set()
        for judgment in self.judgments:
            _check_judgment(judgment, candidates, self.items, seen)
            candidates[judgment.query_id].append((judgment.item_id, judgment.label))
        empty = [query_id for query_id, pairs in candidates.items() if not pairs]
        if empty:
            raise ValueError(f"queries without judgments: {empty[:5]}")
        self._candidates = candidates
        return self

    def candidates(self, query_id: str) -> list[tuple[str, int]]:
        """(item_id, label) of the query's candidates, in stored order."""
        if query_id not in self._candidates:
            raise KeyError(f"unknown query_id {query_id!r}")
        return list(self._candidates[query_id])

    def split(self, name: Split, max_queries: int | None = None) -> RelevanceSet:
        """The queries of one split (the first `max_queries` of them in file order, when given: a slice
        sized to a CPU budget) with their judgments and only the items those judgments use."""
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}, expected one of {SPLITS}")
        queries = [query for query in self.queries if query.split == name][:max_queries]
        keep = {query.query_id for query in queries}
        judgments = [judgment for judgment in self.judgments if judgment.query_id in keep]
        used = {judgment.item_id for judgment in judgments}
        items = {item_id: item for item_id, item in self.items.items() if item_id in used}
        return RelevanceSet(items=items, queries=queries, judgments=judgments, collection=self.collection)

    def save_jsonl(self, directory: str | Path) -> None:
        """Write items.jsonl, queries.jsonl and judgments.jsonl (one JSON object per line) to `directory`,
        and collection.json when the set carries collection statistics (a stale one is removed)."""
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        for name, records in (
            (_ITEMS_FILE, self.items.values()),
            (_QUERIES_FILE, self.queries),
            (_JUDGMENTS_FILE, self.judgments),
        ):
            lines = (record.model_dump_json() + "\n" for record in records)
            (root / name).write_text("".join(lines), encoding="utf-8")
        if self.collection is not None:
            (root / _COLLECTION_FILE).write_text(self.collection.model_dump_json() + "\n", encoding="utf-8")
        else:
            (root / _COLLECTION_FILE).unlink(missing_ok=True)

    @classmethod
    def load_jsonl(cls, directory: str | Path) -> RelevanceSet:
        """Read a directory written by `save_jsonl`; a bad record raises `RelevanceDataError` at its line."""
        root = Path(directory)
        items = _read_records(root / _ITEMS_FILE, Item)
        queries = _read_records(root / _QUERIES_FILE, Query)
        judgments = _read_records(root / _JUDGMENTS_FILE, Judgment)
        collection = _read_collection(root / _COLLECTION_FILE)
        by_id: dict[str, Item] = {}
        for line, item in items:
            if item.item_id in by_id:
                problem = f"duplicate item_id {item.item_id!r}"
                raise RelevanceDataError(problem, path=root / _ITEMS_FILE, line=line)
            by_id[item.item_id] = item
        try:
            return cls(
                items=by_id,
                queries=[query for _, query in queries],
                judgments=[judgment for _, judgment in judgments],
                collection=collection,
            )
        except ValidationError as error:
            raise RelevanceDataError(_first_error(error), path=root) from error


def _read_collection(path: Path) -> CollectionStats | None:
    if not path.is_file():
        return None
    try:
        return CollectionStats.model_validate_json(path.read_bytes())
    except ValidationError as error:
        raise RelevanceDataError(_first_error(error), path=path) from error


def _check_judgment(
    judgment: Judgment,
    candidates: Mapping[str, object],
    items: Mapping[str, Item],
    seen: set[tuple[str, str]],
) -> None:
    pair = (judgment.query_id, judgment.item_id)
    if judgment.query_id not in candidates:
        raise ValueError(f"judgment for unknown query_id {judgment.query_id!r}")
    if judgment.item_id not in items:
        raise ValueError(f"judgment for unknown item_id {judgment.item_id!r}")
    if pair in seen:
        raise ValueError(f"duplicate judgment for query {pair[0]!r}, item {pair[1]!r}")
    seen.add(pair)


def _read_records(path: Path, model: type[Record]) -> list[tuple[int, Record]]:
    records = []
    for line, raw in _jsonl_lines(path):
        try:
            records.append((line, model.model_validate_json(raw)))
        except ValidationError as error:
            raise RelevanceDataError(_first_error(error), path=path, line=line) from error
    return records


def _jsonl_lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError as error:
        raise RelevanceDataError("file not found", path=path) from error
    except UnicodeDecodeError as error:
        raise RelevanceDataError(f"not UTF-8 text ({error.reason})", path=path) from error
    for line, raw in enumerate(text.splitlines(), start=1):
        if raw.strip():
            yield line, raw


def _first_error(error: ValidationError) -> str:
    first = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]


# ---- user files: one row per judgment -------------------------------------------------------------


def load_relevance_file(
    path: str | Path,
    *,
    default_split: Split = "test",
    label_map: Mapping[str, int] | None = None,
    dedupe: bool = False,
) -> RelevanceSet:
    """Load a user relevance file, one row per (query, item) judgment, as JSONL (.jsonl/.ndjson) or CSV.

    Columns: `query_id`, `query`, `item_id`, `label` (a non-negative integer: any graded scale), and the
    item as either `item_text`
    or `title` with optional `attributes` (a JSON object; in CSV a JSON string) and `description`.
    Optional: `split` (train/dev/test, else `default_split`) and `hard` (true/false). Ids may be strings
    or integers; other columns are ignored. The same query_id must carry the same text, split and hard
    flag on every row, and the same item_id the same item fields. `item_text` is taken as a title (its
    first line) and a description (the rest) and so gets re-rendered like every other item.

    `label_map` reads the label column as names instead (case-insensitive), e.g. `ESCI_LABELS` for
    Amazon ESCI's E/S/C/I → 3/2/1/0. A (query, item) pair on two rows is an error naming both lines,
    unless `dedupe`: then the rows merge into one judgment with the higher label (the pair keeps its
    first row's position among the query's candidates).

    Any problem raises `RelevanceDataError` naming the file and the 1-based line where the row starts
    (in CSV the header is line 1; a quoted field may span lines).
    """
    source = Path(path)
    suffix = source.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        rows = _jsonl_rows(source)
    elif suffix == ".csv":
        rows = _csv_rows(source)
    else:
        raise RelevanceDataError(f"unknown format {suffix!r}: expected .jsonl, .ndjson or .csv", path=source)
    builder = _Builder(source, default_split, label_map, dedupe)
    for line, row in rows:
        builder.add(line, row)
    return builder.build()


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    for line, raw in _jsonl_lines(path):
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as error:
            problem = f"invalid JSON: {error.msg}{not_jsonl_hint(raw, line == 1)}"
            raise RelevanceDataError(problem, path=path, line=line) from error
        if not isinstance(row, dict):
            problem = f"a row must be a JSON object, got {type(row).__name__}"
            raise RelevanceDataError(problem, path=path, line=line)
        missing = [column for column in _REQUIRED_COLUMNS if column not in row]
        if missing:
            raise RelevanceDataError(f"missing column(s) {', '.join(missing)}", path=path, line=line)
        yield line, row


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            yield from _csv_records(path, handle)
    except FileNotFoundError as error:
        raise RelevanceDataError("file not found", path=path) from error
    except UnicodeDecodeError as error:
        raise RelevanceDataError(f"not UTF-8 text ({error.reason})", path=path) from error


def _csv_records(path: Path, handle: TextIO) -> Iterator[tuple[int, dict[str, object]]]:
    reader = csv.reader(handle)
    header: list[str] | None = None
    start = 1
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise RelevanceDataError(f"malformed CSV: {error}", path=path, line=start) from error
        line, start = start, reader.line_num + 1
        if not any(field.strip() for field in fields):
            continue
        if header is None:
            header = [name.strip() for name in fields]
            _check_header(path, line, header)
            continue
        if len(fields) != len(header):
            problem = f"row has {len(fields)} fields but the header has {len(header)}"
            raise RelevanceDataError(problem, path=path, line=line)
        yield line, dict(zip(header, fields, strict=True))


def _check_header(path: Path, line: int, header: list[str]) -> None:
    missing = [column for column in _REQUIRED_COLUMNS if column not in header]
    if missing:
        raise RelevanceDataError(f"missing column(s) {', '.join(missing)}", path=path, line=line)
    if "item_text" not in header and "title" not in header:
        raise RelevanceDataError("missing column item_text or title", path=path, line=line)
    duplicated = sorted({name for name in header if header.count(name) > 1})
    if duplicated:
        raise RelevanceDataError(f"duplicate column(s) {', '.join(duplicated)}", path=path, line=line)


class _Builder:
    """Turns validated rows into a RelevanceSet, remembering where each query and item was first seen."""

    def __init__(
        self, path: Path, default_split: Split, label_map: Mapping[str, int] | None, dedupe: bool
    ) -> None:
        self.path = path
        self.default_split = default_split
        self.label_map = None if label_map is None else {name.upper(): v for name, v in label_map.items()}
        self.dedupe = dedupe
        self.queries: dict[str, tuple[Query, int]] = {}
        self.items: dict[str, tuple[Item, int]] = {}
        self.pairs: dict[tuple[str, str], int] = {}  # → line of its first row
        self.labels: dict[tuple[str, str], int] = {}  # → label (the highest, when deduplicating)

    def add(self, line: int, row: Mapping[str, object]) -> None:
        try:
            query, item, label = self._parse(row)
        except ValidationError as error:
            raise RelevanceDataError(_first_error(error), path=self.path, line=line) from error
        except ValueError as error:
            raise RelevanceDataError(str(error), path=self.path, line=line) from error
        self._remember_query(line, query)
        self._remember_item(line, item)
        pair = (query.query_id, item.item_id)
        if pair in self.pairs and not self.dedupe:
            first = self.pairs[pair]
            problem = f"duplicate judgment for query {pair[0]!r}, item {pair[1]!r} (first on line {first})"
            raise RelevanceDataError(problem, path=self.path, line=line)
        self.pairs.setdefault(pair, line)
        self.labels[pair] = max(label, self.labels.get(pair, label))

    def build(self) -> RelevanceSet:
        if not self.labels:
            raise RelevanceDataError("no judgments in the file", path=self.path)
        return RelevanceSet(
            items={item_id: item for item_id, (item, _) in self.items.items()},
            queries=[query for query, _ in self.queries.values()],
            judgments=[Judgment(query_id=q, item_id=i, label=label) for (q, i), label in self.labels.items()],
        )

    def _parse(self, row: Mapping[str, object]) -> tuple[Query, Item, int]:
        query = Query(
            query_id=_identifier(row, "query_id"),
            text=_text(row, "query", required=True),
            split=_split(row.get("split"), self.default_split),
            hard=_flag(row.get("hard")),
        )
        return query, _item(row), parse_label(row["label"], self.label_map)

    def _remember_query(self, line: int, query: Query) -> None:
        first = self.queries.setdefault(query.query_id, (query, line))
        if first[0] != query:
            field = next(
                name for name in ("text", "split", "hard") if getattr(first[0], name) != getattr(query, name)
            )
            problem = f"query_id {query.query_id!r} has a different {field} than on line {first[1]}"
            raise RelevanceDataError(problem, path=self.path, line=line)

    def _remember_item(self, line: int, item: Item) -> None:
        first = self.items.setdefault(item.item_id, (item, line))
        if first[0] != item:
            problem = f"item_id {item.item_id!r} has different item text than on line {first[1]}"
            raise RelevanceDataError(problem, path=self.path, line=line)


def _item(row: Mapping[str, object]) -> Item:
    item_id = _identifier(row, "item_id")
    item_text = _text(row, "item_text").strip()
    title = _text(row, "title")
    if item_text and (title or _text(row, "description") or _attributes(row.get("attributes"))):
        raise ValueError("give either item_text or title/attributes/description, not both")
    if item_text:
        first_line, *rest = item_text.splitlines()
        return Item(item_id=item_id, title=first_line, description="\n".join(rest))
    if not title.strip():
        raise ValueError("empty item: item_text and title are both missing or empty")
    return Item(
        item_id=item_id,
        title=title,
        attributes=_attributes(row.get("attributes")),
        description=_text(row, "description"),
    )


def _identifier(row: Mapping[str, object], column: str) -> str:
    value = row.get(column)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{column} must be a non-empty string or integer, got {value!r}")
    return value.strip()


def _text(row: Mapping[str, object], column: str, *, required: bool = False) -> str:
    value = row.get(column)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{column} must be a string, got {type(value).__name__}")
    if required and not value.strip():
        raise ValueError(f"empty {column}")
    return value


# Graded scales in use run 0–4 (TREC, MS MARCO); the listwise objective and exponential nDCG weigh a
# label by 2^label, which must stay finite in float32 (2^128 is not).
MAX_LABEL = 100


def parse_label(value: object, label_map: Mapping[str, int] | None = None) -> int:
    """A relevance grade from a file's label field (a digit string or an int; `label_map`: names → grades);
    ValueError saying what was expected otherwise."""
    text = value.strip() if isinstance(value, str) else value
    if label_map is not None:
        if isinstance(text, str) and text.upper() in label_map:
            return label_map[text.upper()]
        names = ", ".join(label_map)
        raise ValueError(f"label must be one of {names} (the label mapping), got {value!r}")
    label = None
    if isinstance(text, str) and text.isascii() and text.isdigit():
        label = int(text)
    elif isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        label = text
    if label is None:
        raise ValueError(f"label must be a non-negative integer (0 = not relevant), got {value!r}")
    if label > MAX_LABEL:
        raise ValueError(
            f"label {label} is above {MAX_LABEL}: labels are relevance grades (0 = not relevant, TREC "
            "uses 0–4), not scores or ranks; map them to a small graded scale"
        )
    return label


def _attributes(value: object) -> dict[str, JsonValue]:
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"attributes is not valid JSON: {error.msg}") from error
    if not isinstance(value, dict):
        raise ValueError(f"attributes must be a JSON object, got {type(value).__name__}")
    return value


def _split(value: object, default: Split) -> Split:
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    name = value.strip().lower() if isinstance(value, str) else value
    for split in SPLITS:
        if name == split:
            return split
    raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {value!r}")


def _flag(value: object) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"hard must be true or false, got {value!r}")
