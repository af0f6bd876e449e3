"""The gist writer: where a Kafka change event becomes a Feast row.

One batch, in order (`GistConsumer.process_batch`):

1. validate every record with the event schema, and (given the catalog) against the catalog, the source
   of truth; a bad one becomes a dead-letter record with its reason
2. coalesce per item: the newest version in the batch wins, older ones are skipped as superseded
3. compare with the store (one batched read): a version the store already has or has passed is stale
   (for a serving replica's refresh request only if the stored row is also usable, see
   `reranker.catalog.events`); same content hash + fingerprint as stored is unchanged (rewritten under the
   new version with the stored bytes, no compression); everything else is rendered (`render_item`) and
   compressed in batches
4. push the rows and tombstones to Feast (`GistStore.write` / `delete`, version-guarded and idempotent)
5. wait until the broker acknowledged every dead-letter record
6. commit the batch's offsets, with the model's fingerprint as commit metadata

Each model's writers form their own consumer group (`gistrank-gist-writer-<fingerprint>` unless
GISTRANK_KAFKA_GROUP_ID says otherwise), and a consumer refuses, at start and before every commit, a group
whose offsets another model committed (`ForeignGroupError`): two models sharing a group would split the
partitions, each silently missing the other's half of the changes.

Offsets are committed only after 4 and 5 succeeded, so a crash anywhere before the commit redelivers the
whole batch (at-least-once) and the redelivery is harmless: the store skips what it already holds. If 4, 5
or 6 fails (store down, broker gone), `run` rewinds to the batch's first offsets and retries it after a
back-off, so nothing is lost or skipped. An event that cannot be turned into a row never stops the
consumer: it goes to the dead-letter topic, and the events around it proceed.

Dead-letter record (Kafka key = the original key; value = JSON object):

    {"reason": "invalid JSON: Expecting value: line 1 column 1 (char 0)",   # one line, human-readable
     "reason_code": "invalid_json",                     # one of monitoring.metrics.DEAD_LETTER_REASONS
     "source": {"topic": "...", "partition": 0, "offset": 17, "timestamp_ms": 1714557600000},
     "consumer_group": "gistrank-gist-writer-<fingerprint>",
     "dead_lettered_at": "2024-05-01T12:00:00.000000Z",
     "key": <payload> | null, "value": <payload> | null, "headers": [[name, <payload>], ...]}

    <payload> = {"encoding": "utf-8", "data": <text>, "size": n}     when the bytes are valid UTF-8, else
                {"encoding": "base64", "data": <base64>, "size": n, "utf8_error": "invalid start byte at 5"}

so the original bytes are always recoverable exactly. Only a value too large for the dead-letter topic even
then (DLQ_MAX_MESSAGE_BYTES) keeps a prefix, flagged with "truncated": true and the sha256 of all bytes.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import torch
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError
from kafka.structs import MemberState, OffsetAndMetadata, TopicPartition
from sqlalchemy.exc import SQLAlchemyError

from monitoring.metrics import (
    CONSUMER_BATCH_RETRIES,
    CONSUMER_BATCH_SECONDS,
    CONSUMER_COMPRESSED,
    CONSUMER_DEAD_LETTERED,
    CONSUMER_DELETED,
    CONSUMER_EVENTS,
    CONSUMER_LAG,
    CONSUMER_REJOINS,
    CONSUMER_SKIPPED,
)
from reranker.catalog.database import Catalog, CatalogState
from reranker.catalog.events import ChangeEvent, InvalidEventError, decode_event, format_timestamp
from reranker.catalog.kafka_settings import DEFAULT_GROUP_PREFIX, DLQ_MAX_MESSAGE_BYTES, KafkaSettings
from reranker.core.render import content_hash
from reranker.store import FeatureStoreUnavailableError, GistRow, GistStore
from streaming.materialize import compress_rows

if TYPE_CHECKING:
    from kafka.consumer.fetcher import ConsumerRecord
    from kafka.future import Future

    from reranker.core.model import Reranker

log = logging.getLogger(__name__)
OWNER_PREFIX = "gistrank-model="  # commit metadata: "gistrank-model=<fingerprint>"

# Room for the JSON envelope around a dead-lettered payload within the topic's record size limit.
_DLQ_ENVELOPE_BYTES = 64 * 1024
_DLQ_MAX_KEY_BYTES = 4 * 1024


@dataclass(frozen=True)
class DeadLetter:
    record: ConsumerRecord
    reason: str
    code: str


@dataclass
class BatchResult:
    """What one batch did; `offsets` is what was committed (next offset to read, per partition)."""

    consumed: int = 0
    compressed: int = 0
    deleted: int = 0
    dead_lettered: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=lambda: {"superseded": 0, "stale": 0, "unchanged": 0})
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Pending:
    """A valid event and the record that carried it (for dead-lettering if it cannot be compressed)."""

    event: ChangeEvent
    record: ConsumerRecord


def _payload(data: bytes | None, limit: int | None = None) -> dict[str, Any] | None:
    """Lossless JSON form of record bytes: UTF-8 text when valid, else base64 (with the UTF-8 error)."""
    if data is None:
        return None
    data = bytes(data)
    out: dict[str, Any] = {"size": len(data)}
    if limit is not None and len(data) > limit:
        out |= {"truncated": True, "sha256": hashlib.sha256(data).hexdigest()}
        data = data[:limit]
    try:
        out |= {"encoding": "utf-8", "data": data.decode("utf-8")}
    except UnicodeDecodeError as exc:
        out |= {"encoding": "base64", "data": base64.b64encode(data).decode("ascii")}
        out["utf8_error"] = f"{exc.reason} at {exc.start}"
    return out


def payload_bytes(payload: dict[str, Any] | None) -> bytes | None:
    """The record bytes of a `_payload` (of a truncated one, its kept prefix)."""
    if payload is None:
        return None
    if payload["encoding"] == "base64":
        return base64.b64decode(payload["data"])
    return payload["data"].encode("utf-8")


def dead_letter_value(letter: DeadLetter, group_id: str) -> bytes:
    """The dead-letter record's JSON value (module docstring), within the dead-letter topic's size limit."""
    record = letter.record

    def build(limit: int | None) -> bytes:
        body = {
            "reason": letter.reason,
            "reason_code": letter.code,
            "source": {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "timestamp_ms": record.timestamp,
            },
            "consumer_group": group_id,
            "dead_lettered_at": format_timestamp(datetime.now(UTC)),
            "key": _payload(record.key, limit),
            "value": _payload(record.value, limit),
            "headers": [[name, _payload(value, limit)] for name, value in (record.headers or [])],
        }
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    encoded = build(None)
    if len(encoded) <= DLQ_MAX_MESSAGE_BYTES - _DLQ_ENVELOPE_BYTES:
        return encoded
    # Base64 grows by 4/3 and escaped text by up to 6×: keep prefixes of key, value and headers that fit
    # whatever their encoding (a record has few headers; the key is normally an item id).
    return build((DLQ_MAX_MESSAGE_BYTES - 2 * _DLQ_ENVELOPE_BYTES) // 6 // (2 + len(record.headers or [])))


class GistConsumer:
    """Consume change events, write gist K/V rows to the store, dead-letter bad events.

    `batch_size` records are polled per batch; `compress_batch_size` items go through one forward.
    Blobs are encoded at the model's storage (`RerankerConfig.storage`).
    """

    def __init__(
        self,
        settings: KafkaSettings,
        model: Reranker,
        store: GistStore,
        batch_size: int = 64,
        compress_batch_size: int = 16,
        catalog: Catalog | None = None,
        poll_timeout_s: float = 1.0,
        ack_timeout_s: float = 60.0,
        max_backoff_s: float = 30.0,
        rejoin_after_s: float = 60.0,
    ) -> None:
        if batch_size < 1 or compress_batch_size < 1:
            raise ValueError("batch_size and compress_batch_size must be ≥ 1")
        self.settings = settings
        self.model = model
        self.store = store
        self.batch_size = batch_size
        self.compress_batch_size = compress_batch_size
        self.catalog = catalog
        self.poll_timeout_s = poll_timeout_s
        self.ack_timeout_s = ack_timeout_s
        self.max_backoff_s = max_backoff_s
        self.rejoin_after_s = rejoin_after_s
        self.fingerprint = model.fingerprint
        self.group_id = settings.group_for(model.fingerprint)
        self._consumer = KafkaConsumer(**settings.consumer_kwargs(self.group_id))
        # Knowing the topic's partitions before the first join spares the group a second rebalance right
        # after startup (assignment without metadata, then again with it): see _check_membership.
        if not self._consumer.partitions_for_topic(settings.topic):
            log.warning("topic %s does not exist (yet); waiting for it", settings.topic)
        self._consumer.subscribe([settings.topic])
        self._check_group_owner()  # a misconfigured group fails at start, not after its first batch
        self._dlq = KafkaProducer(**settings.producer_kwargs(DLQ_MAX_MESSAGE_BYTES))
        self._lag_partitions: set[TopicPartition] = set()
        self._rebalancing_since: float | None = None
        self._backlog_checked = 0.0  # monotonic time of the last stalled-partition check

    # ------------------------------------------------------------------------------------ the loop
    def run(
        self,
        stop_event: threading.Event,
        max_batches: int | None = None,
        idle_exit_s: float | None = None,
    ) -> int:
        """Poll and process batches until `stop_event` is set; returns the number of batches committed.

        A stop request lets the batch in hand finish and commit. `max_batches` / `idle_exit_s` (no records
        for that long) end the loop early, for tests and demos. The clients are closed on return.
        """
        done = 0
        failures = 0
        idle_since = time.monotonic()
        try:
            while not stop_event.is_set() and (max_batches is None or done < max_batches):
                try:
                    polled = self._consumer.poll(
                        timeout_ms=int(self.poll_timeout_s * 1000), max_records=self.batch_size
                    )
                except KafkaError as exc:
                    if not exc.retriable:
                        raise
                    log.warning("poll failed (%s); polling again", exc)
                    stop_event.wait(self.poll_timeout_s)
                    continue
                records = [record for batch in polled.values() for record in batch]
                if not records:
                    self._check_membership(idle_s=time.monotonic() - idle_since)
                    self._update_lag()
                    if idle_exit_s is not None and time.monotonic() - idle_since >= idle_exit_s:
                        log.info("no records for %.1f s; exiting", idle_exit_s)
                        break
                    continue
                try:
                    self.process_batch(records)
                except _RETRYABLE as exc:
                    failures += 1
                    CONSUMER_BATCH_RETRIES.inc()
                    backoff = min(self.max_backoff_s, 0.5 * 2 ** min(failures, 10))
                    log.warning(
                        "batch of %d records failed (%s); retry in %.1f s", len(records), exc, backoff
                    )
                    self._rewind(records)
                    self._update_lag()  # the backlog grows while the batch keeps failing: show it
                    stop_event.wait(backoff)
                    continue
                failures = 0
                done += 1
                idle_since = time.monotonic()
        finally:
            self.close()
        return done

    def close(self) -> None:
        # autocommit=False: offsets are committed by process_batch only, never for unprocessed records.
        self._consumer.close(autocommit=False)
        self._dlq.close(timeout=self.ack_timeout_s)

    def _check_membership(self, idle_s: float) -> None:
        """Work around kafka-python 3.0.12 losing track of its partitions (called after an empty poll).

        Two states are known in which the client stops consuming what the broker counts as its own:
        - a lost rebalance: when a rebalance that the group leader starts itself (the topic's metadata
          changed) completes just as poll()'s timeout expires, the client drops the result and stays
          "rebalancing" with no partitions;
        - a stalled partition (dpkp/kafka-python#3131): an assigned partition is never fetched again, so
          polls come back empty while its end offset is past the group's committed offset.
        Either lasting `rejoin_after_s` is repaired by leaving and rejoining the group. A genuine rebalance
        finishes, and an idle consumer has committed up to its partitions' ends, long before that; the
        offsets are asked of the broker at most once per `rejoin_after_s` of idleness. (A topic written by
        transactional producers would end in a marker no record commits past; the publisher is not one.)
        """
        assigned = self._consumer.assignment()
        now = time.monotonic()
        reason = None
        if assigned or self._consumer.group_metadata().state != MemberState.REBALANCING:
            self._rebalancing_since = None
        elif self._rebalancing_since is None:
            self._rebalancing_since = now
        elif now - self._rebalancing_since >= self.rejoin_after_s:
            reason = "lost_rebalance"
            log.warning("rebalancing without partitions for %.0f s; rejoining the group", self.rejoin_after_s)
        if assigned and idle_s >= self.rejoin_after_s and now - self._backlog_checked >= self.rejoin_after_s:
            self._backlog_checked = now
            behind = self._behind(assigned)
            if behind:
                reason = "stalled_partition"
                log.warning(
                    "no records for %.0f s while behind on %s; rejoining the group",
                    idle_s,
                    ", ".join(f"{tp.topic}[{tp.partition}] by {n}" for tp, n in sorted(behind.items())),
                )
        if reason is not None:
            CONSUMER_REJOINS.labels(reason).inc()
            self._consumer.unsubscribe()
            self._consumer.subscribe([self.settings.topic])
            self._rebalancing_since = None

    def _behind(self, assigned: set[TopicPartition]) -> dict[TopicPartition, int]:
        """{partition: records between the group's committed offset and the end} for each assigned
        partition with records still to process. The committed offset, not the client's position: the
        client may have fetched records it never hands out. A partition never committed counts from its
        log start. Empty when the broker cannot tell now (a broker outage is not a stalled client)."""
        try:
            ends = self._consumer.end_offsets(list(assigned))
            done = {tp: self._consumer.committed(tp) for tp in assigned}
            never = [tp for tp, offset in done.items() if offset is None]
            if never:
                done |= self._consumer.beginning_offsets(never)
        except KafkaError as exc:
            log.debug("could not check for stalled partitions (%s)", exc)
            return {}
        return {tp: ends[tp] - done[tp] for tp in assigned if ends.get(tp, 0) > done[tp]}

    def _rewind(self, records: Sequence[ConsumerRecord]) -> None:
        """Seek back to the batch's first offset per partition, so the next poll redelivers all of it."""
        first: dict[TopicPartition, int] = {}
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            first[tp] = min(first.get(tp, record.offset), record.offset)
        assigned = self._consumer.assignment()
        for tp, offset in first.items():
            # A partition lost in a rebalance is redelivered to its new owner from the last commit.
            if tp in assigned:
                self._consumer.seek(tp, offset)

    # ------------------------------------------------------------------------------- one batch
    def process_batch(self, records: Sequence[ConsumerRecord]) -> BatchResult:
        """Validate → coalesce → compress → write → dead-letter acks → commit (module docstring)."""
        started = time.perf_counter()
        result = BatchResult(consumed=len(records))
        if log.isEnabledFor(logging.DEBUG):
            spans: dict[str, list[int]] = {}
            for record in records:
                span = spans.setdefault(f"{record.topic}[{record.partition}]", [record.offset, record.offset])
                span[0], span[1] = min(span[0], record.offset), max(span[1], record.offset)
            log.debug("processing %d records: offsets %s", len(records), json.dumps(spans))

        valid, dead = self._validate(records)
        valid, disowned = self._check_catalog(valid)
        dead += disowned
        latest = self._coalesce(valid, result)
        upserts = [p for p in latest if p.event.op == "upsert"]
        deletes = [p.event for p in latest if p.event.op == "delete"]
        reused, to_compress = self._plan(upserts, result)
        compressed, failed = self._compress(to_compress)
        dead += failed
        result.compressed = len(compressed)

        dlq_acks = self._dead_letter(dead)  # in flight while Feast writes
        written = self.store.write(reused + compressed)
        removed = self.store.delete([e.item_id for e in deletes], [e.version for e in deletes])
        self._await_acks(dlq_acks)
        result.offsets = self._commit(records)

        # The store refuses what it already has newer (e.g. an upsert older than a tombstone).
        result.skipped["stale"] += len(written.skipped) + len(removed.skipped)
        result.deleted = len(removed.written)
        for letter in dead:
            result.dead_lettered[letter.code] = result.dead_lettered.get(letter.code, 0) + 1
        self._observe(result, time.perf_counter() - started)
        return result

    def _observe(self, result: BatchResult, seconds: float) -> None:
        """Metrics and a log line, for committed batches only: a failed batch is counted once, on retry."""
        CONSUMER_EVENTS.inc(result.consumed)
        CONSUMER_COMPRESSED.inc(result.compressed)
        CONSUMER_DELETED.inc(result.deleted)
        for code, count in result.dead_lettered.items():
            CONSUMER_DEAD_LETTERED.labels(reason=code).inc(count)
        for reason, count in result.skipped.items():
            CONSUMER_SKIPPED.labels(reason=reason).inc(count)
        CONSUMER_BATCH_SECONDS.observe(seconds)
        self._update_lag()
        committed = {f"{tp.topic}[{tp.partition}]": offset for tp, offset in result.offsets.items()}
        log.info(
            "batch of %d records in %.2f s: %d compressed, %d deleted, dead-lettered %s, skipped %s; "
            "committed %s",
            result.consumed,
            seconds,
            result.compressed,
            result.deleted,
            result.dead_lettered,
            result.skipped,
            committed,
        )

    def _validate(self, records: Sequence[ConsumerRecord]) -> tuple[list[_Pending], list[DeadLetter]]:
        valid: list[_Pending] = []
        dead: list[DeadLetter] = []
        for record in records:
            try:
                valid.append(_Pending(decode_event(record.key, record.value), record))
            except InvalidEventError as exc:
                dead.append(DeadLetter(record, exc.reason, exc.code))
        return valid, dead

    def _check_catalog(self, valid: list[_Pending]) -> tuple[list[_Pending], list[DeadLetter]]:
        """Events are claims about the catalog, the source of truth: one the catalog does not back (an
        unknown item, a version ahead of the catalog's, other content or another op at the catalog's
        version) is dead-lettered, so nothing that can produce to the topic can pin an item with a huge
        version or any text. Older versions pass: the version rules make them harmless."""
        if self.catalog is None or not valid:
            return valid, []
        states = self.catalog.states(p.event.item_id for p in valid)
        kept: list[_Pending] = []
        dead: list[DeadLetter] = []
        for pending in valid:
            disagreement = _disagreement(pending.event, states.get(pending.event.item_id))
            if disagreement is None:
                kept.append(pending)
            else:
                dead.append(DeadLetter(pending.record, *disagreement))
        return kept, dead

    @staticmethod
    def _coalesce(valid: list[_Pending], result: BatchResult) -> list[_Pending]:
        """Newest version per item (at equal versions the later record: the same state, redelivered)."""
        latest: dict[str, _Pending] = {}
        for pending in valid:
            current = latest.get(pending.event.item_id)
            if current is None or pending.event.version >= current.event.version:
                latest[pending.event.item_id] = pending
        result.skipped["superseded"] += len(valid) - len(latest)
        return list(latest.values())

    def _plan(self, upserts: list[_Pending], result: BatchResult) -> tuple[list[GistRow], list[_Pending]]:
        """Split upserts into rows that reuse the stored blob and events that need compression."""
        stored = self.store.read([p.event.item_id for p in upserts]) if upserts else {}
        reuse: list[GistRow] = []
        compress: list[_Pending] = []
        for pending in upserts:
            event, row = pending.event, stored.get(pending.event.item_id)
            if row is not None and row.version > event.version:  # a newer event won
                result.skipped["stale"] += 1
                continue
            # The stored blob may be kept only if it is this model's, and, for a refresh request (sent by a
            # replica that could not use it), only once it decodes.
            ours = (
                row is not None
                and row.fingerprint == self.fingerprint
                and (not event.refresh or self._usable(row))
            )
            # Same version and model: already written (a redelivery). A tombstone reads as None, so an
            # upsert older than a delete is compressed, then refused by the store.
            if ours and row.version == event.version:
                result.skipped["stale"] += 1
                continue
            fields = event.fields
            assert fields is not None  # the schema requires fields on upserts
            digest = content_hash(fields.title, fields.attributes, fields.description)
            if ours and row.content_hash == digest:
                # Same text, same model → same K/V. Still written, so the store's version moves on and a
                # stale event arriving later cannot replace it.
                reuse.append(dataclasses.replace(row, version=event.version))
                result.skipped["unchanged"] += 1
            else:
                compress.append(pending)
        return reuse, compress

    def _usable(self, row: GistRow) -> bool:
        """Whether a stored row decodes and fits the model. Asked only for refresh requests: the replica
        that sent one may have found this very row unusable (a corrupt blob) at the version it holds."""
        from reranker.core.errors import GistRankError

        try:
            self.model.read_kv(row.kv)
        except GistRankError as exc:
            log.warning("stored row of %r is unusable, recompressing: %s", row.item_id, exc)
            return False
        return True

    def _compress(self, pending: list[_Pending]) -> tuple[list[GistRow], list[DeadLetter]]:
        """Render and compress the whole batch in `compress_batch_size` forwards; encode each K/V.

        One `compress` call over all items lets the model sort them by length before cutting forwards,
        so a forward pads little (chunking in event order first measured ~30% slower). If it fails, the
        items are retried one by one so that one bad item is dead-lettered (reason "compress_failed")
        instead of blocking its partition forever. Running out of memory says nothing about the item: the
        batch is retried with back-off instead (`TransientCompressError`).
        """
        if not pending:
            return [], []
        try:
            return self._compress_rows(pending), []
        except Exception:
            log.warning("compressing %d items failed; retrying them one by one", len(pending), exc_info=True)
        rows: list[GistRow] = []
        dead: list[DeadLetter] = []
        for one in pending:
            try:
                rows.extend(self._compress_rows([one]))
            except _TRANSIENT as exc:  # the machine, not the item: retry the batch later, lose nothing
                raise TransientCompressError(f"compressing {one.event.item_id!r}: {exc}") from exc
            except Exception as exc:
                reason = f"compression failed: {type(exc).__name__}: {exc}"[:500]
                dead.append(DeadLetter(one.record, reason, "compress_failed"))
        return rows, dead

    def _compress_rows(self, chunk: list[_Pending]) -> list[GistRow]:
        items = []
        for pending in chunk:
            assert pending.event.fields is not None  # the schema requires fields on an upsert
            items.append((pending.event.item_id, pending.event.fields, pending.event.version))
        return compress_rows(self.model, items, self.compress_batch_size)

    def _dead_letter(self, dead: list[DeadLetter]) -> list[Future]:
        acks = []
        for letter in dead:
            log.warning(
                "dead-lettering %s[%d]@%d: %s",
                letter.record.topic,
                letter.record.partition,
                letter.record.offset,
                letter.reason,
            )
            value = dead_letter_value(letter, self.group_id)
            key = letter.record.key
            # The key only partitions the dead-letter topic (the value holds it in full): drop a huge one
            # rather than exceed the record size limit.
            key = key if key is None or len(key) <= _DLQ_MAX_KEY_BYTES else None
            acks.append(self._dlq.send(self.settings.dlq_topic, key=key, value=value))
        return acks

    def _await_acks(self, acks: list[Future]) -> None:
        if not acks:
            return
        self._dlq.flush(timeout=self.ack_timeout_s)
        for ack in acks:
            if not ack.succeeded():
                raise _DeadLetterError(f"dead-letter record not acknowledged: {ack.exception!r}")

    def _commit(self, records: Sequence[ConsumerRecord]) -> dict[TopicPartition, int]:
        offsets: dict[TopicPartition, int] = {}
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            offsets[tp] = max(offsets.get(tp, 0), record.offset + 1)
        self._check_group_owner()
        self._consumer.commit(
            {tp: OffsetAndMetadata(offset, self._owner, -1) for tp, offset in offsets.items()},
            timeout_ms=int(self.ack_timeout_s * 1000),
        )
        return offsets

    @property
    def _owner(self) -> str:
        """Commit metadata: the model whose view this group's offsets describe."""
        return f"{OWNER_PREFIX}{self.fingerprint}"

    def _check_group_owner(self) -> None:
        """Refuse a group whose offsets, on any partition of the topic, were committed by another model's
        consumer: sharing a group splits the partitions, and each model would silently miss the changes
        (deletes too) committed by the other. Offsets committed without an owner (older versions) pass."""
        for partition in sorted(self._consumer.partitions_for_topic(self.settings.topic) or ()):
            committed = self._consumer.committed(
                TopicPartition(self.settings.topic, partition),
                metadata=True,
                timeout_ms=int(self.ack_timeout_s * 1000),
            )
            owner = committed.metadata if committed is not None else ""
            if owner.startswith(OWNER_PREFIX) and owner != self._owner:
                raise ForeignGroupError(
                    f"consumer group {self.group_id!r} holds offsets of {self.settings.topic}[{partition}] "
                    f"committed for model {owner.removeprefix(OWNER_PREFIX)}; this consumer writes model "
                    f"{self.fingerprint}: give each model its own group (unset GISTRANK_KAFKA_GROUP_ID: "
                    f"each model then uses {DEFAULT_GROUP_PREFIX}<its fingerprint>)"
                )

    def _update_lag(self) -> None:
        """Lag = high watermark − position, from the last fetch responses (no extra broker request)."""
        assigned = self._consumer.assignment()
        for tp in self._lag_partitions - assigned:
            CONSUMER_LAG.remove(tp.topic, str(tp.partition))
        self._lag_partitions &= assigned
        for tp in assigned:
            highwater = self._consumer.highwater(tp)
            if highwater is None:
                continue
            try:
                position = self._consumer.position(tp, timeout_ms=0)
            except KafkaError:  # no position yet (e.g. right after a rebalance): try again next time
                continue
            if position is not None:
                CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(max(0, highwater - position))
                self._lag_partitions.add(tp)


def _disagreement(event: ChangeEvent, state: CatalogState | None) -> tuple[str, str] | None:
    """(reason, code) when the catalog does not back `event`, else None."""
    if state is None:
        return f"item {event.item_id!r} is not in the catalog", "not_in_catalog"
    if event.version > state.version:
        return f"version {event.version} is ahead of the catalog's {state.version}", "ahead_of_catalog"
    if event.version < state.version:
        return None
    if event.op == "delete" or state.deleted:
        if event.op == "delete" and state.deleted:
            return None
        held = "deleted" if state.deleted else "live"
        return f"{event.op} at version {event.version}, where the catalog holds the item {held}", (
            "catalog_mismatch"
        )
    fields = event.fields
    assert fields is not None  # the schema requires fields on an upsert
    if content_hash(fields.title, fields.attributes, fields.description) != state.content_hash:
        return f"content at version {event.version} differs from the catalog's", "catalog_mismatch"
    return None


class ForeignGroupError(RuntimeError):
    """The consumer group's committed offsets belong to another model's writers (`_check_group_owner`)."""


class TransientCompressError(RuntimeError):
    """Compression ran out of memory: the machine's condition, so the batch is retried, not dead-lettered."""


_TRANSIENT = (MemoryError, torch.OutOfMemoryError)


class _DeadLetterError(RuntimeError):
    """A dead-letter record was not acknowledged; the batch must not be committed."""


# Failures of the store, the catalog, the broker or the machine, not of the batch's content: rewind and
# retry the batch.
_RETRYABLE = (
    FeatureStoreUnavailableError,
    _DeadLetterError,
    KafkaError,
    SQLAlchemyError,
    TransientCompressError,
)
