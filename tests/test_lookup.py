"""reranker/serving/lookup.py: the L1 byte bound, the three lookup tiers (L1, Feast, recompute) and
the refresh requests that replace a write-back, against real Feast stores (SQLite; a real redis-server for
the outage) and a real SQLite catalog. Serving never writes the store: every test checks it."""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch
from helpers import CountingStore, FakeClock, RecordingSink, catalog_row, make_lookup, metric, text_of
from services import RedisServer
from sqlalchemy.exc import OperationalError

from reranker.catalog.database import Catalog
from reranker.core import kv_codec
from reranker.core.errors import EmptyInputError
from reranker.core.kv import StoredUnit
from reranker.serving.lookup import ByteLRU, KVLookup, RefreshRequests
from reranker.serving.status import Status
from reranker.store import GistRow
from streaming.materialize import compress_rows


def row_for(model, catalog: Catalog, item_id: str, kv: StoredUnit | None = None) -> GistRow:
    """`catalog_row` holding `kv`, by default `model`'s K/V of the item."""
    return catalog_row(catalog, item_id, kv or model.compress([text_of(catalog, item_id)])[0])


# ------------------------------------------------------------------------------------------------ L1
def fake_kv(nbytes: int, tag: str = "x") -> StoredUnit:
    assert nbytes % 8 == 0  # K and V of fp32 channels: 8 bytes per channel
    kv = torch.zeros(1, 2, 1, 1, nbytes // 8)
    return StoredUnit(kv, fingerprint=tag, compressor="prefix", budget=1, item_tokens=1, query_start=1)


def test_l1_is_bounded_in_bytes_and_evicts_least_recently_used() -> None:
    l1 = ByteLRU(max_bytes=288, ttl_s=60)
    for key in "abc":
        assert l1.put(key, fake_kv(96))
    assert l1.nbytes == 288 and len(l1) == 3
    assert l1.get("a") is not None  # a is now the most recently used
    evicted = metric("gistrank_l1_cache_evictions_total")
    l1.put("d", fake_kv(96))
    assert l1.get("b") is None and l1.get("a") is not None and l1.get("d") is not None
    assert l1.nbytes == 288
    assert metric("gistrank_l1_cache_evictions_total") == evicted + 1
    assert metric("gistrank_l1_cache_bytes") == 288


def test_l1_refuses_entries_over_the_bound_and_replaces_in_place() -> None:
    l1 = ByteLRU(max_bytes=200, ttl_s=60)
    assert not l1.put("huge", fake_kv(400))
    assert l1.get("huge") is None and l1.nbytes == 0
    l1.put("a", fake_kv(96, "v1"))
    l1.put("a", fake_kv(160, "v2"))
    assert l1.nbytes == 160 and len(l1) == 1 and l1.get("a").fingerprint == "v2"


def test_l1_entries_expire_after_ttl() -> None:
    clock = FakeClock()
    l1 = ByteLRU(max_bytes=1000, ttl_s=10, clock=clock)
    l1.put("a", fake_kv(96))
    clock.now += 9.9
    assert l1.get("a") is not None
    clock.now += 0.2
    assert l1.get("a") is None and l1.nbytes == 0


def test_l1_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        ByteLRU(max_bytes=-1, ttl_s=1)
    with pytest.raises(ValueError):
        ByteLRU(max_bytes=1, ttl_s=0)


# -------------------------------------------------------------------------------------- lookup tiers
def assert_refresh_requests(sink: RecordingSink, catalog: Catalog, ids: list[str]) -> None:
    """`sink` got exactly one refresh request per id: the catalog's current state of the item."""
    assert [e.item_id for e in sink.events] == ids
    for event in sink.events:
        assert event.refresh and event.op == "upsert"
        assert (
            event.model_copy(update={"refresh": False}) == catalog.get([event.item_id])[event.item_id].event()
        )


def test_feast_miss_recomputes_asks_for_a_refresh_and_then_hits_l1(tiny_model, catalog, feast_store) -> None:
    store = feast_store
    lookup, sink = make_lookup(tiny_model, catalog, store)
    ids = ["item-0", "item-1", "item-2"]
    before = {
        "miss": metric("gistrank_recompute_fallbacks_total", reason="feast_miss"),
        "l1_miss": metric("gistrank_cache_misses_total", tier="l1"),
        "l1_hit": metric("gistrank_cache_hits_total", tier="l1"),
        "published": metric("gistrank_refresh_requests_total", result="published"),
    }
    first = lookup.fetch(ids)
    assert [first[i].status for i in ids] == [Status.RECOMPUTE] * 3
    expected = tiny_model.compress([text_of(catalog, i) for i in ids])
    for i, kv in zip(ids, expected, strict=True):
        torch.testing.assert_close(first[i].kv.kv, kv.kv, rtol=1e-5, atol=1e-6)
    assert metric("gistrank_recompute_fallbacks_total", reason="feast_miss") == before["miss"] + 3
    assert metric("gistrank_cache_misses_total", tier="l1") == before["l1_miss"] + 3

    assert lookup.refresh.drain(10)
    assert metric("gistrank_refresh_requests_total", result="published") == before["published"] + 3
    assert_refresh_requests(sink, catalog, ids)
    assert store.writes == 0 and store.read(ids) == dict.fromkeys(ids)  # the consumer writes, not serving

    reads = store.reads
    second = lookup.fetch(ids + ids)  # duplicates collapse
    assert set(second) == set(ids) and all(r.status is Status.L1 for r in second.values())
    assert store.reads == reads  # L1 hits never reach Feast
    assert metric("gistrank_cache_hits_total", tier="l1") == before["l1_hit"] + 3
    assert len(sink.events) == 3  # and ask for nothing
    lookup.refresh.close()
    assert sink.closed


def test_the_lookup_notes_its_use_of_the_view_once_a_minute(tiny_model, catalog, feast_store) -> None:
    """What `rollout gc` checks before dropping a view: every replica notes that it serves its model's
    view, answered from L1 or not, at most once a minute (one small write, off no request's answer)."""
    clock = FakeClock()
    lookup = KVLookup(tiny_model, ByteLRU(1 << 30, ttl_s=1e9), catalog, feast_store, clock=clock)
    assert feast_store.last_use() is None
    lookup.fetch(["item-0"])
    assert feast_store.uses == 1 and feast_store.last_use()[1] == lookup.replica
    lookup.fetch(["item-0"])  # an L1 hit, 59 s later: no second note
    clock.now += 59
    lookup.fetch(["item-0"])
    assert feast_store.uses == 1
    clock.now += 2
    lookup.fetch(["item-0"])
    assert feast_store.uses == 2 and feast_store.writes == 0


def test_feast_hit_is_decoded_and_cached_in_l1(tiny_model, catalog, feast_store) -> None:
    feast_store.write([row_for(tiny_model, catalog, "item-3")])
    lookup, sink = make_lookup(tiny_model, catalog, feast_store)
    hits = metric("gistrank_cache_hits_total", tier="feast")
    assert lookup.fetch(["item-3"])["item-3"].status is Status.FEAST
    assert metric("gistrank_cache_hits_total", tier="feast") == hits + 1
    assert lookup.fetch(["item-3"])["item-3"].status is Status.L1
    assert lookup.refresh.drain(10) and sink.events == []  # a hit asks for no refresh
    lookup.refresh.close()


@pytest.mark.lowbit
@pytest.mark.parametrize("storage", ["int4", "int2"])
def test_a_low_bit_feast_row_is_served_as_its_decoded_kv(
    tiny_model, catalog, feast_store, storage: str
) -> None:
    """A row the consumer wrote at 4 or 2 bits is a Feast hit, scored from its dequantised K/V."""
    kv = tiny_model.compress([text_of(catalog, "item-3")])[0]
    item = catalog.get(["item-3"])["item-3"]
    row = GistRow.encode("item-3", kv, item.content_hash, item.version, storage_dtype=storage)
    feast_store.write([row])
    lookup, _ = make_lookup(tiny_model, catalog, feast_store)
    served = lookup.fetch(["item-3"])["item-3"]
    assert served.status is Status.FEAST
    assert torch.equal(served.kv.kv, kv_codec.decode(row.kv).kv.kv) and not torch.equal(served.kv.kv, kv.kv)
    lookup.refresh.close()


@pytest.mark.lowbit
def test_a_miss_serves_what_its_row_will_hold(tiny_model, catalog, tmp_path) -> None:
    """A model stored at 4 bits: an item recomputed on a miss is scored from the same dequantized K/V
    that the consumer's row for it decodes to, so a hit and a miss rank it alike."""
    int4 = tiny_model.with_gist_config(tiny_model.gist.model_copy(update={"kv_storage": "int4"}))
    store = CountingStore(tmp_path / "feast", fingerprint=int4.fingerprint)
    store.apply()
    lookup, _ = make_lookup(int4, catalog, store)
    missed = lookup.fetch(["item-3"])["item-3"]
    assert missed.status is Status.RECOMPUTE
    item = catalog.get(["item-3"])["item-3"]
    [row] = compress_rows(int4, [("item-3", item.fields(), item.version)])
    assert torch.equal(missed.kv.kv, kv_codec.decode(row.kv).kv.kv)
    lookup.refresh.close()


def _foreign_kv(kv: StoredUnit) -> StoredUnit:
    return dataclasses.replace(kv, fingerprint="0" * 32)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("foreign_blob", "foreign_fingerprint"),
        ("flipped_byte", "corrupt_blob"),
        ("truncated", "corrupt_blob"),
        ("not_a_blob", "corrupt_blob"),
        ("wrong_shape", "corrupt_blob"),
    ],
)
def test_unusable_feast_rows_are_recomputed_and_counted(
    tiny_model, catalog, feast_store, damage: str, reason: str
) -> None:
    good = row_for(tiny_model, catalog, "item-4")
    kv = tiny_model.compress([text_of(catalog, "item-4")])[0]
    if damage == "foreign_blob":  # the column claims this model, the blob inside does not
        blob = kv_codec.encode(_foreign_kv(kv), good.content_hash)
        row = GistRow(**{**good.__dict__, "kv": blob})
    elif damage == "flipped_byte":
        blob = bytearray(good.kv)
        blob[len(blob) // 2] ^= 0xFF
        row = GistRow(**{**good.__dict__, "kv": bytes(blob)})
    elif damage == "truncated":
        row = GistRow(**{**good.__dict__, "kv": good.kv[:-10]})
    elif damage == "not_a_blob":
        row = GistRow(**{**good.__dict__, "kv": b"\x80\x04pickle?"})
    else:  # intact, self-consistent blob of this fingerprint whose K/V does not fit the model (k differs)
        cut = dataclasses.replace(
            kv, kv=kv.kv[:, :, :, :2].contiguous(), budget=2, query_start=kv.item_tokens + 2
        )
        row = GistRow(**{**good.__dict__, "kv": kv_codec.encode(cut, good.content_hash)})
    # the damaged row has the catalog's version: the refresh request at that version too must make the
    # consumer replace it (test_streaming: a refresh over an unusable row), so serving leaves it alone
    store = feast_store
    assert store.write([row]).written == ("item-4",)
    writes = store.writes
    lookup, sink = make_lookup(tiny_model, catalog, store)
    before = metric("gistrank_recompute_fallbacks_total", reason=reason)
    got = lookup.fetch(["item-4"])["item-4"]
    assert got.status is Status.RECOMPUTE
    torch.testing.assert_close(got.kv.kv, kv.kv, rtol=1e-5, atol=1e-6)  # the recomputed K/V, not the row's
    assert got.kv.fingerprint == tiny_model.fingerprint
    assert metric("gistrank_recompute_fallbacks_total", reason=reason) == before + 1
    assert lookup.refresh.drain(10)
    assert_refresh_requests(sink, catalog, ["item-4"])
    assert store.writes == writes and store.read(["item-4"])["item-4"] == row
    lookup.refresh.close()


@pytest.mark.redis
def test_feast_unavailable_recomputes_and_backs_off(tiny_model, catalog, tmp_path) -> None:
    """A real Redis online store, stopped: reads fail and are counted, the store is not asked again within
    feast_retry_s, and once Redis is back (and the back-off over) rows are hits."""
    redis_proc = RedisServer(tmp_path / "redis").start()
    try:
        store = CountingStore(
            tmp_path / "feast", online="redis", redis_url=redis_proc.url, fingerprint=tiny_model.fingerprint
        )
        store.apply()
        redis_proc.stop()
        clock = FakeClock()
        lookup, sink = make_lookup(tiny_model, catalog, store, clock)
        before = metric("gistrank_recompute_fallbacks_total", reason="feast_unavailable")
        got = lookup.fetch(["item-0", "item-1"])
        assert all(r.status is Status.RECOMPUTE for r in got.values())
        assert metric("gistrank_recompute_fallbacks_total", reason="feast_unavailable") == before + 2
        assert lookup.refresh.drain(10)
        assert_refresh_requests(sink, catalog, ["item-0", "item-1"])  # the consumer retries its write

        reads = store.reads
        assert lookup.fetch(["item-2"])["item-2"].status is Status.RECOMPUTE
        assert store.reads == reads  # within feast_retry_s the store is not asked again
        redis_proc.start()  # same port, empty
        clock.now += lookup.feast_retry_s
        store.write([row_for(tiny_model, catalog, "item-3")])
        assert lookup.fetch(["item-3"])["item-3"].status is Status.FEAST
        lookup.refresh.close()
    finally:
        redis_proc.stop()


def test_unknown_items_and_catalog_outage_are_per_candidate_errors(tiny_model, catalog) -> None:
    lookup, _ = make_lookup(tiny_model, catalog)
    got = lookup.fetch(["item-0", "no-such-item"])
    assert got["item-0"].status is Status.RECOMPUTE
    assert got["no-such-item"] == type(got["no-such-item"])(Status.UNKNOWN_ITEM)
    assert got["no-such-item"].kv is None

    catalog.delete("item-5")
    assert lookup.fetch(["item-5"])["item-5"].status is Status.UNKNOWN_ITEM

    class DownCatalog:
        def get(self, item_ids):
            raise OperationalError("SELECT", {}, Exception("database is locked"))

    lookup, _ = make_lookup(tiny_model, DownCatalog())
    assert lookup.fetch(["item-1"])["item-1"].status is Status.CATALOG_UNAVAILABLE


def test_one_uncompressible_item_does_not_fail_the_others(tiny_model, catalog) -> None:
    class Flaky:
        """The tiny model, except that any batch containing "kettle" is refused."""

        fingerprint = tiny_model.fingerprint
        dtype = tiny_model.dtype
        read_kv = tiny_model.read_kv
        as_stored = tiny_model.as_stored

        def compress(self, items, batch_size=16):
            if any("kettle" in text for text in items):
                raise EmptyInputError("refused")
            return tiny_model.compress(items, batch_size)

    lookup, _ = make_lookup(Flaky(), catalog)
    got = lookup.fetch(["item-0", "item-1", "item-2"])
    assert got["item-1"].status is Status.RECOMPUTE_FAILED
    assert got["item-0"].status is Status.RECOMPUTE and got["item-2"].status is Status.RECOMPUTE


def test_refresh_queue_full_drops_and_failed_publishes_are_counted(catalog) -> None:
    gate = threading.Event()

    class SlowSink(RecordingSink):
        def send(self, event):
            gate.wait(10)
            super().send(event)

    sink = SlowSink()
    refresh = RefreshRequests(lambda: sink, maxsize=1)
    events = [catalog.get(["item-0"])["item-0"].event().model_copy(update={"refresh": True})]
    dropped = metric("gistrank_refresh_requests_total", result="dropped")
    for _ in range(4):  # one being published, one queued, the rest refused
        refresh.submit(events)
    refused = metric("gistrank_refresh_requests_total", result="dropped") - dropped
    assert refused >= 2  # submit never waits for the slow sink
    gate.set()
    assert refresh.drain(10)
    assert len(sink.events) + refused == 4  # every request either published or counted as dropped
    refresh.close()

    failing = RefreshRequests(lambda: RecordingSink(fail=RuntimeError("broker gone")))
    failed = metric("gistrank_refresh_requests_total", result="failed")
    failing.submit(events * 2)
    assert failing.drain(10)
    assert metric("gistrank_refresh_requests_total", result="failed") == failed + 2
    failing.close()

    # no broker when serving starts: requests fail (counted) until a connection succeeds
    attempts: list[int] = []
    late = RecordingSink()

    def connect() -> RecordingSink:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("NoBrokersAvailable")
        return late

    recovering = RefreshRequests(connect)
    failed = metric("gistrank_refresh_requests_total", result="failed")
    recovering.submit(events)
    recovering.submit(events)
    assert recovering.drain(10)
    assert metric("gistrank_refresh_requests_total", result="failed") == failed + 1
    assert late.events == events and len(attempts) == 2  # connected once, then kept
    recovering.close()
    assert late.closed
