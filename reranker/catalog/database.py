"""The catalog: source of truth for item content, behind a small facade that emits change events.

Versions are a catalog-wide change sequence: every write takes the next number of a one-row counter
that each writing transaction locks first. So an item's versions only grow, writers are serialised
(SQLite by its write lock, PostgreSQL by the row lock), versions are handed out in commit order, and
`events(since_version=v)` is a resumable cursor for `gistrank publish`.

A write that changes nothing (same title, attributes and description, item not deleted; deleting a
deleted item) keeps the version and returns the item's current event: re-publishing it is a harmless
duplicate, while bumping would churn the topic and the consumer for nothing. A change that renders to
the same text (extra spaces, attribute order) does bump the version but keeps the content hash, so
the consumer skips recompression.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Engine,
    String,
    Text,
    create_engine,
    event,
    inspect,
    select,
    update,
)
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
from sqlalchemy.types import TypeDecorator

from reranker.catalog.events import (
    MAX_ITEM_ID_CHARS,
    ChangeEvent,
    ItemFields,
    ItemId,
    strict_json_loads,
    validation_reason,
)
from reranker.core.file_formats import BOM, not_jsonl_hint
from reranker.core.home import default_catalog_url, home
from reranker.core.render import content_hash, render_item

DEFAULT_URL = default_catalog_url()  # $GISTRANK_HOME/catalog.db, read when this module is imported
SQLITE_BUSY_TIMEOUT_MS = 30_000
# Rows per query: below SQLite's bound-parameter limit, and one load_jsonl batch.
BATCH = 500

_item_id_adapter: TypeAdapter[str] = TypeAdapter(ItemId)


class CatalogError(ValueError):
    """Bad catalog input: an invalid item, or a bad line of a JSONL file (the message names the line)."""


class ItemNotFoundError(CatalogError):
    """The item id is not in the catalog."""


class _UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in and out; SQLite stores no zone, so naive values read back are UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime: the catalog stores timezone-aware times only")
        return None if value is None else value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@dataclass(frozen=True)
class CatalogState:
    version: int
    deleted: bool
    content_hash: str


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "items"

    item_id: Mapped[str] = mapped_column(String(MAX_ITEM_ID_CHARS), primary_key=True)
    title: Mapped[str] = mapped_column(Text)
    attributes: Mapped[dict[str, Any]] = mapped_column(JSON)
    description: Mapped[str] = mapped_column(Text)
    version: Mapped[int] = mapped_column(BigInteger, index=True)
    updated_at: Mapped[datetime] = mapped_column(_UTCDateTime())
    content_hash: Mapped[str] = mapped_column(String(64))
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)

    def fields(self) -> ItemFields:
        return ItemFields(title=self.title, attributes=self.attributes, description=self.description)

    def text(self) -> str:
        """The item as every model reads it (`render_item`): compressed, recomputed, or read in full."""
        return render_item(self.title, self.attributes, self.description)

    def event(self) -> ChangeEvent:
        """The change event describing this row's current state."""
        return ChangeEvent(
            op="delete" if self.deleted else "upsert",
            item_id=self.item_id,
            version=self.version,
            timestamp=self.updated_at,
            fields=None if self.deleted else self.fields(),
        )


class _Sequence(Base):
    __tablename__ = "catalog_sequence"

    id: Mapped[int] = mapped_column(primary_key=True)
    last_version: Mapped[int] = mapped_column(BigInteger)


class Catalog:
    """Items in any SQLAlchemy database (SQLite file by default); tables are created on open, unless
    `create` is False (a read-only look: a missing database or table is a `CatalogError`)."""

    def __init__(self, url: str = DEFAULT_URL, create: bool = True) -> None:
        where = make_url(url).render_as_string(hide_password=True)
        if not create:
            parsed = make_url(url)
            if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file():
                raise CatalogError(f"no catalog at {where} (the file does not exist)")
        self.engine = _make_engine(url)
        if not create and not inspect(self.engine).has_table(Item.__tablename__):
            self.engine.dispose()
            raise CatalogError(f"no catalog at {where} (the database has no items table)")
        Base.metadata.create_all(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        try:
            with self._sessions.begin() as session:
                if session.get(_Sequence, 1) is None:
                    session.add(_Sequence(id=1, last_version=0))
        except IntegrityError:
            pass  # another process created the counter row first

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def load_jsonl(self, path: str | Path) -> int:
        """Upsert every line ({item_id, title, attributes, description}) in one transaction.

        Returns how many items were created or changed. A bad line raises `CatalogError` naming its
        line number and nothing is applied. Blank lines are skipped; an id twice in one file is an error.
        """
        with self._sessions.begin() as session:
            first = last = _lock_sequence(session)
            batch: list[tuple[str, ItemFields]] = []
            for item_id, fields in _catalog_lines(path):
                batch.append((item_id, fields))
                if len(batch) == BATCH:
                    last = _apply_batch(session, batch, last)
                    batch.clear()
            last = _apply_batch(session, batch, last)
            _save_sequence(session, last)
        return last - first  # one version per created or changed item

    def upsert(
        self,
        item_id: str,
        title: str | None = None,
        attributes: dict[str, Any] | None = None,
        description: str | None = None,
    ) -> ChangeEvent:
        """Create or change an item; None keeps the stored value (attributes are replaced whole).

        A new item needs a title. Upserting a deleted item restores it. Returns the event to publish.
        """
        item_id = _valid_item_id(item_id)
        with self._sessions.begin() as session:
            last = _lock_sequence(session)
            item = session.get(Item, item_id)
            if item is None and title is None:
                raise ItemNotFoundError(f"unknown item {item_id!r} (a new item needs a title)")
            fields = _valid_fields(
                title if title is not None else item.title,
                attributes if attributes is not None else (item.attributes if item else {}),
                description if description is not None else (item.description if item else ""),
            )
            if item is not None and not item.deleted and _same(item.fields(), fields):
                return item.event()
            item = _write(session, item, item_id, fields, last + 1)
            _save_sequence(session, last + 1)
            return item.event()

    def delete(self, item_id: str) -> ChangeEvent:
        """Soft-delete (the row stays, marked deleted, with a new version). Returns the event to publish."""
        with self._sessions.begin() as session:
            last = _lock_sequence(session)
            item = session.get(Item, item_id)
            if item is None:
                raise ItemNotFoundError(f"unknown item {item_id!r}")
            if not item.deleted:
                item.deleted = True
                _stamp(item, last + 1)
                _save_sequence(session, last + 1)
            return item.event()

    def restamp_past(self, stored: dict[str, int]) -> list[ChangeEvent]:
        """After a restore from backup: the store holds rows at versions this catalog never issued (or
        issued to other content), and they would beat every later change of those items. Move the
        version counter past every stored version, then give each of these items (`stored`: item id →
        its stored version) a new version with its current content (or its deletion), returned as the
        events to publish. Unknown ids are skipped."""
        with self._sessions.begin() as session:
            last = max(_lock_sequence(session), *stored.values(), 0)
            items = session.scalars(select(Item).where(Item.item_id.in_(list(stored)))).all()
            for item in sorted(items, key=lambda i: i.item_id):
                last += 1
                _stamp(item, last)
            _save_sequence(session, last)
            return [item.event() for item in sorted(items, key=lambda i: i.version)]

    def get(self, item_ids: Iterable[str]) -> dict[str, Item]:
        """The live (not deleted) items among `item_ids`; unknown or deleted ids are simply absent."""
        if isinstance(item_ids, str):
            raise TypeError("get() takes an iterable of item ids, not a single id string")
        wanted = list(dict.fromkeys(item_ids))
        found: dict[str, Item] = {}
        with self._sessions() as session:
            for start in range(0, len(wanted), BATCH):
                chunk = wanted[start : start + BATCH]
                query = select(Item).where(Item.item_id.in_(chunk), Item.deleted.is_(False))
                found.update((item.item_id, item) for item in session.scalars(query))
        return found

    def states(self, item_ids: Iterable[str]) -> dict[str, CatalogState]:
        """Version, tombstone flag and content hash of each known item among `item_ids`, deleted ones
        included (what the consumer checks events against); unknown ids are absent."""
        wanted = list(dict.fromkeys(item_ids))
        found: dict[str, CatalogState] = {}
        with self._sessions() as session:
            for start in range(0, len(wanted), BATCH):
                query = select(Item.item_id, Item.version, Item.deleted, Item.content_hash).where(
                    Item.item_id.in_(wanted[start : start + BATCH])
                )
                found.update((i, CatalogState(v, d, h)) for i, v, d, h in session.execute(query))
        return found

    def iter_items(self, batch_size: int = BATCH) -> Iterator[Item]:
        """Every live item in item_id order, read `batch_size` rows per short read transaction."""
        after: str | None = None
        while True:
            query = select(Item).where(Item.deleted.is_(False)).order_by(Item.item_id).limit(batch_size)
            if after is not None:
                query = query.where(Item.item_id > after)
            with self._sessions() as session:
                rows = list(session.scalars(query))
            yield from rows
            if len(rows) < batch_size:
                return
            after = rows[-1].item_id

    def events(self, since_version: int | None = None, batch_size: int = BATCH) -> Iterator[ChangeEvent]:
        """Each item's current event (deleted ones as deletes) with version > since_version, by version."""
        after = -1 if since_version is None else since_version
        while True:
            query = select(Item).where(Item.version > after).order_by(Item.version).limit(batch_size)
            with self._sessions() as session:
                rows = list(session.scalars(query))
            yield from (item.event() for item in rows)
            if len(rows) < batch_size:
                return
            after = rows[-1].version


def check_catalog_url(url: str) -> str:
    """`url`, unless it names an SQLite file in a folder that does not exist outside $GISTRANK_HOME (the
    state folder, created on demand): a mistyped folder given on a command line is refused
    (`CatalogError`), where opening the catalog would create it."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
        return url
    folder = Path(database).resolve().parent
    if not folder.is_dir() and not folder.is_relative_to(home()):
        raise CatalogError(f"catalog {url}: the folder {folder} does not exist")
    return url


def _make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    database = parsed.database
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)

    # WAL lets the consumer and the server read while the CLI writes; the busy timeout makes a second
    # writer wait for the lock instead of failing at once with "database is locked".
    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    return engine


def _lock_sequence(session: Session) -> int:
    # Writing the counter row before reading anything takes the write lock first (SQLite's database
    # lock, PostgreSQL's row lock): the rest of the transaction sees the latest data and no other
    # writer can interleave, so versions are handed out in commit order.
    session.execute(update(_Sequence).where(_Sequence.id == 1).values(last_version=_Sequence.last_version))
    last = session.scalar(select(_Sequence.last_version).where(_Sequence.id == 1))
    if last is None:
        raise CatalogError("catalog_sequence row missing: this database was not created by Catalog")
    return last


def _save_sequence(session: Session, last: int) -> None:
    session.execute(update(_Sequence).where(_Sequence.id == 1).values(last_version=last))


def _valid_item_id(item_id: str) -> str:
    try:
        return _item_id_adapter.validate_python(item_id)
    except ValidationError as exc:
        raise CatalogError(f"item_id {str(item_id)[:80]!r}: {validation_reason(exc)}") from None


def _valid_fields(title: str, attributes: dict[str, Any], description: str) -> ItemFields:
    try:
        return ItemFields(title=title, attributes=attributes, description=description)
    except ValidationError as exc:
        raise CatalogError(validation_reason(exc)) from None


def check_catalog_file(path: str | Path) -> int:
    """Every line of a catalog file valid, as `Catalog.load_jsonl` reads them, and at least one item:
    the number of items, else `CatalogError` naming the first bad line. For a check before a catalog is
    opened (and so created): a bad or empty file then writes nothing."""
    count = sum(1 for _ in _catalog_lines(path))
    if not count:
        raise CatalogError("no items: the file is empty (one JSON object per line expected)")
    return count


def _catalog_lines(path: str | Path) -> Iterator[tuple[str, ItemFields]]:
    """(item_id, fields) of each non-blank line; an id twice is an error naming both lines."""
    first_line: dict[str, int] = {}
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            item_id, fields = _parse_line(raw.removeprefix(BOM) if number == 1 else raw, number)
            if item_id in first_line:
                raise CatalogError(
                    f"line {number}: item_id {item_id!r} already on line {first_line[item_id]}"
                )
            first_line[item_id] = number
            yield item_id, fields


def _parse_line(raw: bytes, number: int) -> tuple[str, ItemFields]:
    try:
        record = strict_json_loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CatalogError(f"line {number}: not valid UTF-8 (byte {exc.start})") from None
    except ValueError as exc:
        raise CatalogError(f"line {number}: invalid JSON: {exc}{not_jsonl_hint(raw, number == 1)}") from None
    if not isinstance(record, dict):
        raise CatalogError(f"line {number}: expected a JSON object, got {type(record).__name__}")
    if "item_id" not in record:
        raise CatalogError(f"line {number}: missing field 'item_id'")
    try:
        item_id = _valid_item_id(record["item_id"])
        fields = ItemFields.model_validate(record)
    except CatalogError as exc:
        raise CatalogError(f"line {number}: {exc}") from None
    except ValidationError as exc:
        raise CatalogError(f"line {number}: {validation_reason(exc)}") from None
    return item_id, fields


def _apply_batch(session: Session, batch: list[tuple[str, ItemFields]], last: int) -> int:
    """Write the changed items of one batch, one version each; returns the last version used."""
    if not batch:
        return last
    query = select(Item).where(Item.item_id.in_([item_id for item_id, _ in batch]))
    existing = {item.item_id: item for item in session.scalars(query)}
    for item_id, fields in batch:
        item = existing.get(item_id)
        if item is not None and not item.deleted and _same(item.fields(), fields):
            continue
        last += 1
        _write(session, item, item_id, fields, last)
    session.flush()
    return last


def _same(a: ItemFields, b: ItemFields) -> bool:
    # Python equality would call 1 == 1.0 == True the same value; they render differently.
    return _canonical(a) == _canonical(b)


def _canonical(fields: ItemFields) -> str:
    return json.dumps(fields.model_dump(), sort_keys=True, ensure_ascii=False)


def _write(session: Session, item: Item | None, item_id: str, fields: ItemFields, version: int) -> Item:
    if item is None:
        item = Item(item_id=item_id)
        session.add(item)
    item.title = fields.title
    item.attributes = fields.attributes
    item.description = fields.description
    item.content_hash = content_hash(fields.title, fields.attributes, fields.description)
    item.deleted = False
    _stamp(item, version)
    return item


def _stamp(item: Item, version: int) -> None:
    # Feast skips writes whose event time is not strictly newer, so an item's time must always grow,
    # even for two writes within one clock tick or after the clock stepped back.
    now = datetime.now(UTC)
    if item.updated_at is not None and now <= item.updated_at:
        now = item.updated_at + timedelta(microseconds=1)
    item.version = version
    item.updated_at = now
