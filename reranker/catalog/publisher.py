"""Publish catalog change events to the change topic (key = item id, value = `events.encode_event`).

Sources: the catalog database (each item's current state, optionally only versions after a cursor) or a
JSONL file with one change event per line. Sends are acks=all and idempotent (`KafkaSettings`), and a
publish counts only events the broker acknowledged; any failed send raises `PublishError` after the flush,
so a caller never reports success for an event that was not stored. Publishing again is harmless: the
consumer skips versions it already has.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from monitoring.metrics import EVENTS_PUBLISHED
from reranker.catalog.database import Catalog
from reranker.catalog.events import (
    ChangeEvent,
    InvalidEventError,
    decode_event,
    encode_event,
    strict_json_loads,
)
from reranker.catalog.kafka_settings import KafkaSettings
from reranker.core.file_formats import BOM, not_jsonl_hint

if TYPE_CHECKING:
    from kafka import KafkaProducer
    from kafka.future import Future

# Unacknowledged sends held before waiting for them: bounds memory on a large backfill.
FLUSH_EVERY = 1000


class PublishError(RuntimeError):
    """The broker did not acknowledge some events (the message names the first failure)."""


class EventFileError(ValueError):
    """A line of an events file is not a valid change event (the message names the line)."""


class EventPublisher:
    """A producer for change events; `flush()` waits for the acknowledgements of everything sent so far."""

    def __init__(self, settings: KafkaSettings, flush_timeout_s: float = 120.0) -> None:
        from kafka import KafkaProducer

        self.topic = settings.topic
        self.flush_timeout_s = flush_timeout_s
        self.acknowledged = 0
        self._producer: KafkaProducer = KafkaProducer(**settings.producer_kwargs())
        self._pending: list[tuple[ChangeEvent, Future]] = []

    def send(self, event: ChangeEvent) -> None:
        key, value = encode_event(event)
        self._pending.append((event, self._producer.send(self.topic, key=key, value=value)))
        if len(self._pending) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Wait until every pending send is acknowledged or failed; raises `PublishError` on any failure."""
        pending, self._pending = self._pending, []
        self._producer.flush(timeout=self.flush_timeout_s)
        failures = [(event, future) for event, future in pending if not future.succeeded()]
        for event, future in pending:
            if future.succeeded():
                EVENTS_PUBLISHED.labels(op=event.op).inc()
        self.acknowledged += len(pending) - len(failures)
        if failures:
            event, future = failures[0]
            raise PublishError(
                f"{len(failures)} of {len(pending)} events not acknowledged; first: item {event.item_id!r} "
                f"version {event.version}: {future.exception!r}"
            )

    def close(self) -> None:
        self._producer.close(timeout=self.flush_timeout_s)

    def __enter__(self) -> EventPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def publish_events(settings: KafkaSettings, events: Iterable[ChangeEvent]) -> int:
    """Send every event and wait for all acknowledgements; returns how many were acknowledged."""
    with EventPublisher(settings) as publisher:
        for event in events:
            publisher.send(event)
        publisher.flush()
        return publisher.acknowledged


def publish_catalog(settings: KafkaSettings, catalog: Catalog, since_version: int | None = None) -> int:
    """Each item's current state (deleted items as deletes) with version > `since_version`, by version."""
    return publish_events(settings, catalog.events(since_version=since_version))


def read_event_file(path: str | Path) -> Iterator[ChangeEvent]:
    """Change events from a JSONL file, validated exactly as the consumer validates them.

    Raises `EventFileError` naming the first bad line; blank lines are skipped.
    """
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, start=1):
            line = raw.rstrip(b"\r\n").removeprefix(BOM if number == 1 else b"")
            if not line.strip():
                continue
            try:
                # The publisher sets the key to the event's item_id, so that is the key to validate with.
                yield decode_event(_peek_item_id(line), line)
            except InvalidEventError as exc:
                hint = not_jsonl_hint(line, number == 1) if exc.code == "invalid_json" else ""
                raise EventFileError(f"{path}: line {number}: {exc.reason}{hint}") from None


def _peek_item_id(line: bytes) -> bytes | None:
    """The line's item_id as key bytes, or None when there is none to find (decode_event then says why)."""
    try:
        data = strict_json_loads(line.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError is a ValueError too
        return None
    item_id = data.get("item_id") if isinstance(data, dict) else None
    return item_id.encode("utf-8", "surrogatepass") if isinstance(item_id, str) else None


def check_event_file(path: str | Path) -> None:
    """Every line of the file valid, else `EventFileError` naming the first bad one."""
    for _ in read_event_file(path):
        pass
