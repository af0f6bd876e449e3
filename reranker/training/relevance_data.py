"""Relevance sets: items, queries and graded judgments, for training and for the evaluation protocol.

One in-memory form (`RelevanceSet`) serves the synthetic generator (`reranker.training.data_synth`) and real
data that users bring (WANDS, ESCI, click logs). Labels are graded 0 (irrelevant), 1 (partial,
a near miss or substitute) and 2 (exact), the WANDS convention; map ESCI's E/S/C/I onto it before
loading. Item text always comes from `render_item`, the one renderer, so items reach the model in the
same layout whether they were generated, loaded or served.

Storage is plain JSONL, never pickle: readable, diffable and safe to load from anywhere.
`save_jsonl`/`load_jsonl` write and read a directory of three files (items, queries, judgments);
`load_relevance_file` reads the flat one-row-per-judgment format users export (JSONL or CSV) and
validates it row by row, so a bad row is reported with its line number and the problem.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Literal, TextIO, TypeVar

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
from reranker.core.render import content_hash, render_item

Split = Literal["train", "dev", "test"]
SPLITS: tuple[Split, ...] = ("train", "dev", "test")
LABELS = {0: "irrelevant", 1: "partial", 2: "exact"}

_ITEMS_FILE, _QUERIES_FILE, _JUDGMENTS_FILE = "items.jsonl", "queries.jsonl", "judgments.jsonl"
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
Label = Annotated[int, Field(strict=True, ge=0, le=2)]


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
    """The graded label of one (query, candidate item) pair: 0 irrelevant, 1 partial, 2 exact."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    query_id: NonBlank
    item_id: NonBlank
    label: Label


class RelevanceSet(BaseModel):
    """Items, queries and judgments; a query's candidates are its judgments, in their stored order.

    Candidate order is kept because the metrics break score ties by candidate index. Cross-references
    are checked on construction: every judgment names a known query and item, no pair is judged twice,
    and every query has at least one candidate. Treat instances as immutable (the candidate index is
    built once).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: dict[str, Item]
    queries: list[Query]
    judgments: list[Judgment]
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

    def split(self, name: Split) -> RelevanceSet:
        """The queries of one split with their judgments and only the items those judgments use."""
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}, expected one of {SPLITS}")
        queries = [query for query in self.queries if query.split == name]
        keep = {query.query_id for query in queries}
        judgments = [judgment for judgment in self.judgments if judgment.query_id in keep]
        used = {judgment.item_id for judgment in judgments}
        items = {item_id: item for item_id, item in self.items.items() if item_id in used}
        return RelevanceSet(items=items, queries=queries, judgments=judgments)

    def save_jsonl(self, directory: str | Path) -> None:
        """Write items.jsonl, queries.jsonl and judgments.jsonl (one JSON object per line) to `directory`."""
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        for name, records in (
            (_ITEMS_FILE, self.items.values()),
            (_QUERIES_FILE, self.queries),
            (_JUDGMENTS_FILE, self.judgments),
        ):
            lines = (record.model_dump_json() + "\n" for record in records)
            (root / name).write_text("".join(lines), encoding="utf-8")

    @classmethod
    def load_jsonl(cls, directory: str | Path) -> RelevanceSet:
        """Read a directory written by `save_jsonl`; a bad record raises `RelevanceDataError` at its line."""
        root = Path(directory)
        items = _read_records(root / _ITEMS_FILE, Item)
        queries = _read_records(root / _QUERIES_FILE, Query)
        judgments = _read_records(root / _JUDGMENTS_FILE, Judgment)
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
            )
        except ValidationError as error:
            raise RelevanceDataError(_first_error(error), path=root) from error


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


def load_relevance_file(path: str | Path, *, default_split: Split = "test") -> RelevanceSet:
    """Load a user relevance file, one row per (query, item) judgment, as JSONL (.jsonl/.ndjson) or CSV.

    Columns: `query_id`, `query`, `item_id`, `label` (0, 1 or 2), and the item as either `item_text`
    or `title` with optional `attributes` (a JSON object; in CSV a JSON string) and `description`.
    Optional: `split` (train/dev/test, else `default_split`) and `hard` (true/false). Ids may be strings
    or integers; other columns are ignored. The same query_id must carry the same text, split and hard
    flag on every row, and the same item_id the same item fields. `item_text` is taken as a title (its
    first line) and a description (the rest) and so gets re-rendered like every other item.

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
    builder = _Builder(source, default_split)
    for line, row in rows:
        builder.add(line, row)
    return builder.build()


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    for line, raw in _jsonl_lines(path):
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as error:
            raise RelevanceDataError(f"invalid JSON: {error.msg}", path=path, line=line) from error
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

    def __init__(self, path: Path, default_split: Split) -> None:
        self.path = path
        self.default_split = default_split
        self.queries: dict[str, tuple[Query, int]] = {}
        self.items: dict[str, tuple[Item, int]] = {}
        self.pairs: dict[tuple[str, str], int] = {}
        self.judgments: list[Judgment] = []

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
        if pair in self.pairs:
            first = self.pairs[pair]
            problem = f"duplicate judgment for query {pair[0]!r}, item {pair[1]!r} (first on line {first})"
            raise RelevanceDataError(problem, path=self.path, line=line)
        self.pairs[pair] = line
        self.judgments.append(Judgment(query_id=query.query_id, item_id=item.item_id, label=label))

    def build(self) -> RelevanceSet:
        if not self.judgments:
            raise RelevanceDataError("no judgments in the file", path=self.path)
        return RelevanceSet(
            items={item_id: item for item_id, (item, _) in self.items.items()},
            queries=[query for query, _ in self.queries.values()],
            judgments=self.judgments,
        )

    def _parse(self, row: Mapping[str, object]) -> tuple[Query, Item, int]:
        query = Query(
            query_id=_identifier(row, "query_id"),
            text=_text(row, "query", required=True),
            split=_split(row.get("split"), self.default_split),
            hard=_flag(row.get("hard")),
        )
        return query, _item(row), _label(row["label"])

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


def _label(value: object) -> int:
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, str) and text in ("0", "1", "2"):
        return int(text)
    if isinstance(text, int) and not isinstance(text, bool) and text in LABELS:
        return text
    raise ValueError(f"label must be 0 (irrelevant), 1 (partial) or 2 (exact), got {value!r}")


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
