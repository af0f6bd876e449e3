"""Where a candidate's gist K/V comes from: L1 in-process LRU → Feast online store → recompute.

* L1 holds decoded `StoredUnit`s keyed by item id, bounded in bytes of K/V (`ByteLRU`). Entries expire after
  a TTL: the cache has no invalidation channel, so the TTL bounds how long an item changed in the catalog
  (and re-materialised in Feast by the consumer) can still be served from its old K/V.
* L2 is ONE batched `GistStore.read` for all L1 misses of a request. A row is used only if its
  fingerprint is this model's and its blob decodes and fits the model; anything else is a miss that is
  recomputed and counted by reason (`monitoring.serving_metrics.RECOMPUTES`), never used.
  When the store is unavailable, every miss recomputes and the store is not asked again for
  `feast_retry_s`, so an outage costs one failed call per interval, not one per request.
* L3 reads the items from the catalog, renders them and compresses them in one batched `compress`.
  The result goes into L1 at once; the store is never written from here. Each recomputed item is handed
  to the pipeline as a refresh request on the change topic (`RefreshRequests`), and the consumer that
  owns the item writes its row under the version rules: one writer per item.
* Once a minute the lookup notes in its model's view that this replica serves it (`GistStore.record_use`,
  the one thing serving writes), so `gistrank rollout gc` refuses to drop a view that is in use.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.exc import SQLAlchemyError

from monitoring.serving_metrics import (
    CACHE_HITS,
    CACHE_MISSES,
    ITEMS_TRUNCATED,
    L1_BYTES,
    L1_ENTRIES,
    L1_EVICTIONS,
    RECOMPUTES,
    REFRESH_REQUESTS,
)
from reranker.catalog.events import ChangeEvent
from reranker.core import kv_codec
from reranker.core.errors import GistRankError
from reranker.core.kv import StoredUnit
from reranker.serving.status import Status
from reranker.serving.worker import BackgroundWorker
from reranker.store import FeatureStoreUnavailableError, GistStore

USE_RECORD_EVERY_S = 60.0  # how often a replica notes its use of its view (`GistStore.record_use`)

logger = logging.getLogger(__name__)


class Model(Protocol):
    """What the lookup needs of `Reranker`."""

    @property
    def fingerprint(self) -> str: ...

    @property
    def dtype(self) -> Any: ...

    def compress(self, items: Sequence[str], batch_size: int = ...) -> list[StoredUnit]: ...

    def read_kv(self, blob: bytes) -> StoredUnit: ...


class CatalogItem(Protocol):
    def text(self) -> str: ...

    def event(self) -> ChangeEvent: ...


class ItemSource(Protocol):
    """What the lookup needs of `reranker.catalog.database.Catalog`."""

    def get(self, item_ids: Sequence[str]) -> Mapping[str, CatalogItem]: ...


# ------------------------------------------------------------------------------------------------ L1
@dataclass
class _Entry:
    kv: StoredUnit
    nbytes: int
    expires: float


class ByteLRU:
    """Least-recently-used map item id → StoredUnit holding at most `max_bytes` of K/V tensor data.

    An entry larger than the whole bound is not cached at all (it would evict everything for nothing).
    Entries older than `ttl_s` are treated as absent. Not thread-safe: one Triton model instance runs
    one request at a time, and only the request path touches L1.
    """

    def __init__(self, max_bytes: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if max_bytes < 0 or ttl_s <= 0:
            raise ValueError(f"need max_bytes >= 0 and ttl_s > 0, got {max_bytes}, {ttl_s}")
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> StoredUnit | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= self._clock():
            self._remove(key)
            L1_EVICTIONS.inc()
            self._publish()
            return None
        self._entries.move_to_end(key)
        return entry.kv

    def put(self, key: str, kv: StoredUnit) -> bool:
        """Insert (or replace) `key`; evicts least recently used entries to fit. False if too big to cache."""
        if key in self._entries:
            self._remove(key)
        size = kv.nbytes
        stored = size <= self.max_bytes
        if stored:
            self._entries[key] = _Entry(kv, size, self._clock() + self.ttl_s)
            self.nbytes += size
            while self.nbytes > self.max_bytes:
                self._remove(next(iter(self._entries)))
                L1_EVICTIONS.inc()
        self._publish()
        return stored

    def _remove(self, key: str) -> None:
        self.nbytes -= self._entries.pop(key).nbytes

    def _publish(self) -> None:
        L1_BYTES.set(self.nbytes)
        L1_ENTRIES.set(len(self._entries))


# ----------------------------------------------------------------------------------- refresh requests
class EventSink(Protocol):
    """What `RefreshRequests` needs of `reranker.catalog.publisher.EventPublisher`."""

    def send(self, event: ChangeEvent) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class RefreshRequests:
    """Hands recomputed items to the pipeline: the catalog's state of each, as a change event with
    `refresh=True`, published on a background thread and counted by fate (published, failed, dropped).

    Serving never writes gist rows. The consumer group that owns the item's partition (events are keyed
    by item id) recompresses it under the usual version rules, so a replica that read the catalog before
    a newer change cannot put the older version back: the consumer is the one writer per item.

    `connect` makes the sink on the background thread at the first request, and again after a failure,
    so a broker that is down when the server starts costs failed refresh requests, never the start.
    """

    def __init__(self, connect: Callable[[], EventSink], maxsize: int = 64) -> None:
        self._connect = connect
        self._sink: EventSink | None = None
        self._worker: BackgroundWorker[list[ChangeEvent]] = BackgroundWorker(
            "refresh-requests", self._publish, maxsize
        )

    def submit(self, events: list[ChangeEvent]) -> None:
        if events and not self._worker.submit(events):
            REFRESH_REQUESTS.labels(result="dropped").inc(len(events))

    def drain(self, timeout: float) -> bool:
        return self._worker.drain(timeout)

    def close(self, timeout: float = 10.0) -> None:
        self._worker.close(timeout)
        if self._sink is not None:
            self._sink.close()

    def _publish(self, events: list[ChangeEvent]) -> None:
        try:
            if self._sink is None:
                self._sink = self._connect()
            for event in events:
                self._sink.send(event)
            self._sink.flush()
        except Exception as e:  # no broker, PublishError, a KafkaError: the next miss of the item asks again
            logger.warning("refresh requests for %d items not published: %s", len(events), e)
            REFRESH_REQUESTS.labels(result="failed").inc(len(events))
            return
        REFRESH_REQUESTS.labels(result="published").inc(len(events))


# -------------------------------------------------------------------------------------------- lookup
@dataclass(frozen=True)
class Resolved:
    status: Status
    kv: StoredUnit | None = None  # None exactly when status is an error


class KVLookup:
    def __init__(
        self,
        model: Model,
        l1: ByteLRU,
        catalog: ItemSource,
        store: GistStore | None = None,
        refresh: RefreshRequests | None = None,
        compress_batch: int = 16,
        feast_retry_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model = model
        self.l1 = l1
        self.catalog = catalog
        self.store = store
        self.refresh = refresh
        self.compress_batch = compress_batch
        self.feast_retry_s = feast_retry_s
        self._clock = clock
        self._feast_down_until = float("-inf")
        self._use_recorded_at = float("-inf")
        self.replica = f"{socket.gethostname()}:{os.getpid()}"

    def fetch(self, item_ids: Sequence[str]) -> dict[str, Resolved]:
        """The K/V (or the error) of every distinct id in `item_ids`."""
        out: dict[str, Resolved] = {}
        misses: list[str] = []
        for item_id in dict.fromkeys(item_ids):
            kv = self.l1.get(item_id)
            if kv is None:
                misses.append(item_id)
            else:
                out[item_id] = Resolved(Status.L1, kv)
        CACHE_HITS.labels(tier="l1").inc(len(out))
        CACHE_MISSES.labels(tier="l1").inc(len(misses))
        self._record_use()
        if misses:
            self._recompute(self._from_feast(misses, out), out)
        return out

    def _record_use(self) -> None:
        """At most once a minute, note in the model's view that this replica serves it (answered from L1
        or not): `rollout gc` refuses to drop a view in use. Best effort: a store that is down costs the
        note, never the request."""
        now = self._clock()
        if self.store is None or now - self._use_recorded_at < USE_RECORD_EVERY_S:
            return
        self._use_recorded_at = now
        if now < self._feast_down_until:
            return
        try:
            self.store.record_use(self.replica)
        except FeatureStoreUnavailableError as e:
            logger.warning("could not note this replica's use of its view: %s", e)

    def _from_feast(self, ids: list[str], out: dict[str, Resolved]) -> dict[str, str]:
        """Fill `out` with usable Feast rows; return the rest as {item id: recompute reason}."""
        if self.store is None:
            return dict.fromkeys(ids, "no_feast")
        if self._clock() < self._feast_down_until:
            CACHE_MISSES.labels(tier="feast").inc(len(ids))
            return dict.fromkeys(ids, "feast_unavailable")
        try:
            rows = self.store.read(ids)
        except FeatureStoreUnavailableError as e:
            logger.warning("feast unavailable, recomputing (next try in %.0f s): %s", self.feast_retry_s, e)
            self._feast_down_until = self._clock() + self.feast_retry_s
            CACHE_MISSES.labels(tier="feast").inc(len(ids))
            return dict.fromkeys(ids, "feast_unavailable")

        fingerprint = self.model.fingerprint
        reasons: dict[str, str] = {}
        for item_id in ids:
            row = rows.get(item_id)
            if row is None:
                reasons[item_id] = "feast_miss"
            elif row.fingerprint != fingerprint:
                reasons[item_id] = "foreign_fingerprint"
            else:
                try:
                    kv = self.model.read_kv(row.kv)
                except kv_codec.ForeignFingerprintError:  # the row's column and its blob disagree
                    reasons[item_id] = "foreign_fingerprint"
                except GistRankError as e:  # every KVBlobError, and K/V that does not fit the model
                    logger.warning("unusable K/V blob for %r: %s", item_id, e)
                    reasons[item_id] = "corrupt_blob"
                else:
                    out[item_id] = Resolved(Status.FEAST, kv)
                    self.l1.put(item_id, kv)
        CACHE_HITS.labels(tier="feast").inc(len(ids) - len(reasons))
        CACHE_MISSES.labels(tier="feast").inc(len(reasons))
        return reasons

    def _recompute(self, reasons: dict[str, str], out: dict[str, Resolved]) -> None:
        if not reasons:
            return
        try:
            items = self.catalog.get(list(reasons))
        except SQLAlchemyError as e:
            logger.error("catalog unavailable, %d candidates unanswered: %s", len(reasons), e)
            out.update(dict.fromkeys(reasons, Resolved(Status.CATALOG_UNAVAILABLE)))
            return
        found = [item_id for item_id in reasons if item_id in items]
        out.update({item_id: Resolved(Status.UNKNOWN_ITEM) for item_id in reasons if item_id not in items})
        for item_id in found:
            RECOMPUTES.labels(reason=reasons[item_id]).inc()
        texts = [items[i].text() for i in found]
        refresh = []
        for item_id, kv in zip(found, self._compress(texts), strict=True):
            if kv is None:
                out[item_id] = Resolved(Status.RECOMPUTE_FAILED)
                continue
            out[item_id] = Resolved(Status.RECOMPUTE, kv)
            self.l1.put(item_id, kv)
            refresh.append(items[item_id].event().model_copy(update={"refresh": True}))
        if self.refresh is not None:
            self.refresh.submit(refresh)

    def _compress(self, texts: list[str]) -> list[StoredUnit | None]:
        if not texts:
            return []
        try:
            # through the store's precision: a recomputed item scores as its stored row will
            kvs: list[StoredUnit | None] = list(
                self.model.as_stored(self.model.compress(texts, batch_size=self.compress_batch))
            )
        except GistRankError:
            # One unusable text fails the whole batch: retry one by one so that only it goes unanswered.
            kvs = [self._compress_one(text) for text in texts]
        ITEMS_TRUNCATED.inc(sum(kv is not None and kv.truncated for kv in kvs))
        return kvs

    def _compress_one(self, text: str) -> StoredUnit | None:
        try:
            return self.model.as_stored(self.model.compress([text]))[0]
        except GistRankError as e:
            logger.warning("cannot compress item text: %s", e)
            return None
