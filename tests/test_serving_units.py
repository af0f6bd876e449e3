"""Unit tests of reranker/serving without Triton: L1 byte bound, the three lookup tiers, request
validation, shadow overlap math, the service end to end in-process, and the server's repository/env."""

from __future__ import annotations

import math
import os
import sys
import sysconfig
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY
from rows import catalog_row
from sqlalchemy.exc import OperationalError

from reranker.core import kv_codec
from reranker.core.checkpoints import DEFAULT_CHECKPOINT, QL_CHECKPOINT, SHADOW_CHECKPOINT, SHIPPED
from reranker.core.errors import EmptyInputError
from reranker.core.kv import GistKV
from reranker.core.render import render_item
from reranker.serving.lookup import ByteLRU, FeastWriteBack, KVLookup, WriteBackJob
from reranker.serving.requests import MAX_QUERY_BYTES, RequestError, RerankRequest, decode_request
from reranker.serving.runtime import FullParams, GistParams
from reranker.serving.server import (
    FULL_MODEL,
    GIST_MODEL,
    PROJECT_ROOT,
    TEMPLATE_REPO,
    ServerError,
    ServerSettings,
    read_parameters,
    server_env,
    set_parameters,
    write_backends,
    write_repository,
)
from reranker.serving.service import FullService, GistService
from reranker.serving.shadow import ShadowSampler, overlap_at_k, top_k
from reranker.serving.status import Status
from reranker.store import FeatureStoreUnavailableError, GistRow, WriteResult
from streaming.catalog import Catalog

QUERY = "256GB phone 2023"


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def bytes_array(values: list[object]) -> np.ndarray:
    out = np.empty(len(values), dtype=np.object_)
    out[:] = values
    return out


# ------------------------------------------------------------------------------------------ fixtures
ITEMS = {
    f"item-{n}": (f"{name} model {n}", {"year": 2020 + n % 4, "storage": f"{64 * (n % 3 + 1)}GB"}, desc)
    for n, (name, desc) in enumerate(
        [
            ("Acme phone", "A phone with a titanium frame."),
            ("Stainless kettle", "Boils 1.7 L quickly, auto shut-off."),
            ("Noise cancelling headphones", "Over-ear, black, 30 h battery."),
            ("Acme tablet", "11 inch screen, pen support."),
            ("USB-C cable", "Braided, 2 m, 100 W."),
            ("Phone case", "Blue silicone case for the Acme phone."),
        ]
    )
}


class FakeStore:
    """GistStore's read/write contract in memory, with a switch that makes it unavailable."""

    def __init__(self) -> None:
        self.rows: dict[str, GistRow] = {}
        self.down = False
        self.reads = 0

    def read(self, item_ids: list[str]) -> dict[str, GistRow | None]:
        self.reads += 1
        if self.down:
            raise FeatureStoreUnavailableError("redis at 127.0.0.1:1: connection refused")
        return {i: self.rows.get(i) for i in dict.fromkeys(item_ids)}

    def write(self, rows: list[GistRow]) -> WriteResult:
        if self.down:
            raise FeatureStoreUnavailableError("redis at 127.0.0.1:1: connection refused")
        self.rows.update((r.item_id, r) for r in rows)
        return WriteResult(tuple(r.item_id for r in rows), ())


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    with Catalog(f"sqlite:///{tmp_path / 'catalog.db'}") as cat:
        for item_id, (title, attributes, description) in ITEMS.items():
            cat.upsert(item_id, title, attributes, description)
        yield cat


def text_of(catalog: Catalog, item_id: str) -> str:
    item = catalog.get([item_id])[item_id]
    return render_item(item.title, item.attributes, item.description)


def row_for(model, catalog: Catalog, item_id: str, kv: GistKV | None = None) -> GistRow:
    """`catalog_row` holding `kv`, by default `model`'s K/V of the item."""
    return catalog_row(catalog, item_id, kv or model.compress([text_of(catalog, item_id)])[0])


def make_lookup(model, catalog, store=None, clock=None, l1_bytes=1 << 24):
    clock = clock or FakeClock()
    writeback = FeastWriteBack(store) if store is not None else None
    lookup = KVLookup(model, ByteLRU(l1_bytes, 60.0, clock), catalog, store, writeback, clock=clock)
    return lookup, writeback


# ------------------------------------------------------------------------------------------------ L1
def fake_kv(nbytes: int, tag: str = "x") -> GistKV:
    assert nbytes % 8 == 0  # K and V of fp32 channels: 8 bytes per channel
    return GistKV(kv=torch.zeros(1, 2, 1, 1, nbytes // 8), fingerprint=tag, item_tokens=1)


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
def test_feast_miss_recomputes_writes_back_and_then_hits_l1(tiny_model, catalog) -> None:
    store = FakeStore()
    lookup, writeback = make_lookup(tiny_model, catalog, store)
    ids = ["item-0", "item-1", "item-2"]
    before = {
        "miss": metric("gistrank_recompute_fallbacks_total", reason="feast_miss"),
        "l1_miss": metric("gistrank_cache_misses_total", tier="l1"),
        "l1_hit": metric("gistrank_cache_hits_total", tier="l1"),
        "written": metric("gistrank_feast_writebacks_total", result="written"),
    }
    first = lookup.fetch(ids)
    assert [first[i].status for i in ids] == [Status.RECOMPUTE] * 3
    expected = tiny_model.compress([text_of(catalog, i) for i in ids])
    for i, kv in zip(ids, expected, strict=True):
        torch.testing.assert_close(first[i].kv.kv, kv.kv, rtol=1e-5, atol=1e-6)
    assert metric("gistrank_recompute_fallbacks_total", reason="feast_miss") == before["miss"] + 3
    assert metric("gistrank_cache_misses_total", tier="l1") == before["l1_miss"] + 3

    assert writeback.drain(10)
    assert metric("gistrank_feast_writebacks_total", result="written") == before["written"] + 3
    for i in ids:
        row = store.rows[i]
        decoded = kv_codec.decode(row.kv, expected_fingerprint=tiny_model.fingerprint)
        assert row.fingerprint == tiny_model.fingerprint
        assert row.content_hash == catalog.get([i])[i].content_hash == decoded.content_hash
        assert row.version == catalog.get([i])[i].version

    reads = store.reads
    second = lookup.fetch(ids + ids)  # duplicates collapse
    assert set(second) == set(ids) and all(r.status is Status.L1 for r in second.values())
    assert store.reads == reads  # L1 hits never reach Feast
    assert metric("gistrank_cache_hits_total", tier="l1") == before["l1_hit"] + 3
    writeback.close()


def test_feast_hit_is_decoded_and_cached_in_l1(tiny_model, catalog) -> None:
    store = FakeStore()
    store.rows["item-3"] = row_for(tiny_model, catalog, "item-3")
    lookup, writeback = make_lookup(tiny_model, catalog, store)
    hits = metric("gistrank_cache_hits_total", tier="feast")
    assert lookup.fetch(["item-3"])["item-3"].status is Status.FEAST
    assert metric("gistrank_cache_hits_total", tier="feast") == hits + 1
    assert lookup.fetch(["item-3"])["item-3"].status is Status.L1
    writeback.close()


def _foreign_kv(kv: GistKV) -> GistKV:
    return GistKV(kv=kv.kv, fingerprint="0" * 32, item_tokens=kv.item_tokens)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("foreign_row", "foreign_fingerprint"),
        ("foreign_blob", "foreign_fingerprint"),
        ("flipped_byte", "corrupt_blob"),
        ("truncated", "corrupt_blob"),
        ("not_a_blob", "corrupt_blob"),
        ("wrong_shape", "corrupt_blob"),
    ],
)
def test_unusable_feast_rows_are_recomputed_and_counted(
    tiny_model, catalog, damage: str, reason: str
) -> None:
    good = row_for(tiny_model, catalog, "item-4")
    kv = tiny_model.compress([text_of(catalog, "item-4")])[0]
    if damage == "foreign_row":  # another model's row: its column already says so
        row = row_for(tiny_model, catalog, "item-4", kv=_foreign_kv(kv))
    elif damage == "foreign_blob":  # the column claims this model, the blob inside does not
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
    else:  # intact blob of this fingerprint whose K/V does not fit the model (k differs)
        cut = GistKV(
            kv=kv.kv[:, :, :, :2].contiguous(), fingerprint=kv.fingerprint, item_tokens=kv.item_tokens
        )
        row = GistRow(**{**good.__dict__, "kv": kv_codec.encode(cut, good.content_hash)})
    store = FakeStore()
    store.rows["item-4"] = row
    lookup, writeback = make_lookup(tiny_model, catalog, store)
    before = metric("gistrank_recompute_fallbacks_total", reason=reason)
    got = lookup.fetch(["item-4"])["item-4"]
    assert got.status is Status.RECOMPUTE
    torch.testing.assert_close(got.kv.kv, kv.kv, rtol=1e-5, atol=1e-6)  # the recomputed K/V, not the row's
    assert got.kv.fingerprint == tiny_model.fingerprint
    assert metric("gistrank_recompute_fallbacks_total", reason=reason) == before + 1
    assert writeback.drain(10)
    # the write-back replaced the unusable row with a good one
    rewritten = kv_codec.decode(store.rows["item-4"].kv, expected_fingerprint=tiny_model.fingerprint)
    torch.testing.assert_close(rewritten.kv.kv, kv.kv, rtol=1e-5, atol=1e-6)
    writeback.close()


def test_feast_unavailable_recomputes_and_backs_off(tiny_model, catalog) -> None:
    store = FakeStore()
    store.down = True
    clock = FakeClock()
    lookup, writeback = make_lookup(tiny_model, catalog, store, clock)
    before = metric("gistrank_recompute_fallbacks_total", reason="feast_unavailable")
    failed = metric("gistrank_feast_writebacks_total", result="failed")
    got = lookup.fetch(["item-0", "item-1"])
    assert all(r.status is Status.RECOMPUTE for r in got.values())
    assert metric("gistrank_recompute_fallbacks_total", reason="feast_unavailable") == before + 2
    assert writeback.drain(10)
    assert metric("gistrank_feast_writebacks_total", result="failed") == failed + 2

    reads = store.reads
    assert lookup.fetch(["item-2"])["item-2"].status is Status.RECOMPUTE
    assert store.reads == reads  # within feast_retry_s the store is not asked again
    store.down = False
    clock.now += lookup.feast_retry_s
    store.rows["item-3"] = row_for(tiny_model, catalog, "item-3")
    assert lookup.fetch(["item-3"])["item-3"].status is Status.FEAST
    writeback.close()


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
        check_kv = tiny_model.check_kv

        def compress(self, items, batch_size=16):
            if any("kettle" in text for text in items):
                raise EmptyInputError("refused")
            return tiny_model.compress(items, batch_size)

    lookup, _ = make_lookup(Flaky(), catalog)
    got = lookup.fetch(["item-0", "item-1", "item-2"])
    assert got["item-1"].status is Status.RECOMPUTE_FAILED
    assert got["item-0"].status is Status.RECOMPUTE and got["item-2"].status is Status.RECOMPUTE


def test_writeback_queue_full_drops_and_counts(tiny_model) -> None:
    gate = threading.Event()

    class SlowStore(FakeStore):
        def write(self, rows):
            gate.wait(10)
            return super().write(rows)

    writeback = FeastWriteBack(SlowStore(), maxsize=1)
    job = [WriteBackJob("item-0", fake_kv(64, tiny_model.fingerprint), "h", 1)]
    dropped = metric("gistrank_feast_writebacks_total", result="dropped")
    for _ in range(4):  # one being written, one queued, the rest refused
        writeback.submit(job)
    assert metric("gistrank_feast_writebacks_total", result="dropped") >= dropped + 1
    gate.set()
    assert writeback.drain(10)
    writeback.close()


# ---------------------------------------------------------------------------------- request decoding
GOOD_IDS = bytes_array([b"item-0", b"item-1"])


@pytest.mark.parametrize(
    ("query", "ids", "message"),
    [
        (None, GOOD_IDS, "missing input QUERY"),
        (bytes_array([b"q"]), None, "missing input ITEM_IDS"),
        (bytes_array([b""]), GOOD_IDS, "QUERY is empty"),
        (bytes_array([b" \t\n"]), GOOD_IDS, "QUERY is empty"),
        (bytes_array([b"q", b"r"]), GOOD_IDS, "QUERY must hold exactly one string"),
        (bytes_array([]), GOOD_IDS, "QUERY is empty"),
        (bytes_array([b"q"]).reshape(1, 1), GOOD_IDS, "QUERY must have shape [n]"),
        (np.array([1.0], dtype=np.float32), GOOD_IDS, "QUERY must be BYTES"),
        (bytes_array([b"\xff\xfe"]), GOOD_IDS, "QUERY is not valid UTF-8 (byte 0)"),
        (bytes_array(["\ud800"]), GOOD_IDS, "QUERY is not valid UTF-8 text"),
        (bytes_array([b"x" * (MAX_QUERY_BYTES + 1)]), GOOD_IDS, f"over the limit of {MAX_QUERY_BYTES}"),
        (bytes_array([7]), GOOD_IDS, "QUERY must be BYTES (UTF-8 text), got int"),
        (bytes_array([b"q"]), bytes_array([]), "ITEM_IDS is empty"),
        (bytes_array([b"q"]), bytes_array([b"a"] * 6), "ITEM_IDS has 6 elements, more than the limit of 5"),
        (bytes_array([b"q"]), GOOD_IDS.reshape(2, 1), "ITEM_IDS must have shape [n] (1-D), got shape [2, 1]"),
        (bytes_array([b"q"]), bytes_array([b"ok", b"\xc3"]), "ITEM_IDS[1] is not valid UTF-8 (byte 0)"),
        (bytes_array([b"q"]), bytes_array([b"ok", b""]), "ITEM_IDS[1]"),
        (bytes_array([b"q"]), bytes_array([b"a\x00b"]), "ITEM_IDS[0]: contains control"),
        (bytes_array([b"q"]), bytes_array([b"x" * 257]), "ITEM_IDS[0]"),
        (bytes_array([b"q"]), np.array([1, 2]), "ITEM_IDS must be BYTES, got int64"),
        (bytes_array([b"q"]), [b"a"], "ITEM_IDS must be a tensor, got list"),
    ],
)
def test_malformed_requests_get_precise_errors(query, ids, message: str) -> None:
    with pytest.raises(RequestError) as err:
        decode_request(query, ids, max_candidates=5)
    assert message in str(err.value)


def test_valid_request_decodes() -> None:
    got = decode_request(
        bytes_array(["téléphone 256GB".encode()]), bytes_array([b"item-1", "item-1", b"x"]), 5
    )
    assert got == RerankRequest("téléphone 256GB", ("item-1", "item-1", "x"))
    # numpy's fixed-width bytes / str arrays are accepted as well
    got = decode_request(np.array([b"q"]), np.array(["a", "b"]), 5)
    assert got == RerankRequest("q", ("a", "b"))


_element = st.one_of(
    st.binary(max_size=12),
    st.text(max_size=12),
    st.sampled_from([b"item-0", b" ", b"\xff", "\ud800", b"a\nb"]),
    st.integers(),
    st.none(),
    st.floats(),
)


@st.composite
def _tensor(draw: st.DrawFn) -> object:
    kind = draw(st.sampled_from(["objects", "objects2d", "numeric", "fixed", "none", "list"]))
    values = draw(st.lists(_element, max_size=7))
    if kind == "objects":
        return bytes_array(values)
    if kind == "objects2d":
        return bytes_array(values + values).reshape(2, -1)
    if kind == "numeric":
        return np.zeros(len(values), dtype=draw(st.sampled_from([np.float32, np.int64, np.bool_])))
    if kind == "fixed":
        return np.array([v for v in values if isinstance(v, bytes)] or [b""])
    return None if kind == "none" else values


@settings(max_examples=300, deadline=None)
@given(query=_tensor(), ids=_tensor())
def test_decoding_arbitrary_tensors_gives_a_clear_error_or_a_valid_request(query, ids) -> None:
    try:
        got = decode_request(query, ids, max_candidates=5)
    except RequestError as e:
        assert str(e)
        return
    assert isinstance(got.query, str) and got.query.strip()
    assert 1 <= len(got.item_ids) <= 5
    assert all(isinstance(i, str) and i for i in got.item_ids)


# -------------------------------------------------------------------------------------------- shadow
def test_top_k_breaks_ties_by_position() -> None:
    assert top_k([0.5, 0.9, 0.5, 0.1], 2) == {1, 0}
    assert top_k([1.0, 1.0, 1.0], 2) == {0, 1}
    assert top_k([3.0], 5) == {0}


def test_overlap_at_k_counts_shared_top_k() -> None:
    gist = [0.9, 0.8, 0.1, 0.7, 0.2, 0.3]
    full = [0.8, 0.1, 0.9, 0.7, 0.2, 0.3]
    # top-1: {0} vs {2}; top-5: {0,1,3,5,4} vs {2,0,3,5,4}; top-10: all 6 each
    assert overlap_at_k(gist, full, (1, 5, 10)) == {1: (0, 1), 5: (4, 5), 10: (6, 6)}
    with pytest.raises(ValueError):
        overlap_at_k([1.0], [1.0, 2.0])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-5, 5), st.floats(-5, 5)), min_size=1, max_size=30), st.integers(1, 12))
def test_overlap_at_k_matches_a_brute_force_recall(pairs, k) -> None:
    gist, full = zip(*pairs, strict=True)
    overlap, reference = overlap_at_k(gist, full, (k,))[k]
    order = lambda xs: sorted(range(len(xs)), key=lambda i: (-xs[i], i))  # noqa: E731
    assert overlap == len(set(order(gist)[:k]) & set(order(full)[:k]))
    assert reference == min(k, len(gist)) and 0 <= overlap <= reference


def test_sampler_rate_zero_never_and_one_always() -> None:
    calls = []
    never = ShadowSampler(0.0, lambda q, ids: calls.append(q) or [0.0] * len(ids))
    assert not any(never.offer("q", ["a"], [1.0]) for _ in range(50))
    always = ShadowSampler(1.0, lambda q, ids: calls.append(q) or [0.0] * len(ids))
    assert all(always.offer("q", ["a"], [1.0]) for _ in range(5))
    assert always.drain(10) and len(calls) == 5
    assert not always.offer("q", [], [])  # nothing scored: nothing to compare
    with pytest.raises(ValueError):
        ShadowSampler(1.5, lambda q, ids: [])
    never.close()
    always.close()


def test_sampler_counts_overlap_failures_and_drops() -> None:
    full_scores = {"a": 3.0, "b": 2.0, "c": float("nan"), "d": 1.0}
    sampler = ShadowSampler(1.0, lambda q, ids: [full_scores[i] for i in ids])
    before = {
        k: (
            metric("gistrank_shadow_topk_overlap_total", k=str(k)),
            metric("gistrank_shadow_topk_reference_total", k=str(k)),
        )
        for k in (1, 5, 10)
    }
    compared = metric("gistrank_shadow_requests_total", outcome="compared")
    sampler.offer("q", ["a", "b", "c", "d"], [1.0, 5.0, 9.0, 0.0])  # c has no full score: left out
    assert sampler.drain(10)
    assert metric("gistrank_shadow_requests_total", outcome="compared") == compared + 1
    # gist top-1 {b} vs full {a}: 0/1; top-5 and top-10: all 3 scored by both
    for k, (overlap, reference) in {1: (0, 1), 5: (3, 3), 10: (3, 3)}.items():
        assert metric("gistrank_shadow_topk_overlap_total", k=str(k)) == before[k][0] + overlap
        assert metric("gistrank_shadow_topk_reference_total", k=str(k)) == before[k][1] + reference
    sampler.close()

    def broken(query, ids):
        raise RuntimeError("full_reranker: Server not ready")

    failed = metric("gistrank_shadow_requests_total", outcome="failed")
    sampler = ShadowSampler(1.0, broken)
    sampler.offer("q", ["a"], [1.0])
    assert sampler.drain(10)
    assert metric("gistrank_shadow_requests_total", outcome="failed") == failed + 1
    sampler.close()

    gate = threading.Event()
    slow = ShadowSampler(1.0, lambda q, ids: gate.wait(10) and [0.0] * len(ids), maxsize=1)
    dropped = metric("gistrank_shadow_requests_total", outcome="dropped")
    accepted = [slow.offer("q", ["a"], [1.0]) for _ in range(4)]
    assert not all(accepted)
    assert metric("gistrank_shadow_requests_total", outcome="dropped") == dropped + accepted.count(False)
    gate.set()
    slow.close()


# ------------------------------------------------------------------------------ the service in-process
def test_gist_service_scores_like_the_model_and_reports_per_candidate_errors(tiny_model, catalog) -> None:
    store = FakeStore()
    lookup, writeback = make_lookup(tiny_model, catalog, store)

    def score_full(query, ids):
        return tiny_model.score_full(query, [text_of(catalog, i) for i in ids]).tolist()

    shadow = ShadowSampler(1.0, score_full)
    service = GistService(tiny_model, lookup, shadow, max_candidates=10)
    ids = ["item-2", "nope", "item-0", "item-1", "item-3"]
    ok = metric("gistrank_rerank_requests_total", outcome="ok")
    unknown = metric("gistrank_candidate_errors_total", code="unknown_item")
    ref5 = metric("gistrank_shadow_topk_reference_total", k="5")
    result = service.handle(bytes_array([QUERY.encode()]), bytes_array([i.encode() for i in ids]))
    assert result.statuses == (
        Status.RECOMPUTE,
        Status.UNKNOWN_ITEM,
        Status.RECOMPUTE,
        Status.RECOMPUTE,
        Status.RECOMPUTE,
    )
    assert result.scores.dtype == np.float32 and math.isnan(result.scores[1])
    known = [i for i in ids if i != "nope"]
    expected = tiny_model.score(QUERY, tiny_model.compress([text_of(catalog, i) for i in known])).numpy()
    np.testing.assert_allclose(np.delete(result.scores, 1), expected, rtol=1e-4, atol=1e-5)
    assert metric("gistrank_rerank_requests_total", outcome="ok") == ok + 1
    assert metric("gistrank_candidate_errors_total", code="unknown_item") == unknown + 1
    assert shadow.drain(30)
    assert metric("gistrank_shadow_topk_reference_total", k="5") == ref5 + 4

    invalid = metric("gistrank_rerank_requests_total", outcome="invalid")
    with pytest.raises(RequestError, match=r"QUERY: query has \d+ tokens, over the limit"):
        service.handle(bytes_array([("word " * 200).encode()]), bytes_array([b"item-0"]))
    assert metric("gistrank_rerank_requests_total", outcome="invalid") == invalid + 1
    shadow.close()
    writeback.close()


def test_full_service_scores_catalog_text_with_the_full_context_model(tiny_model, catalog) -> None:
    service = FullService(tiny_model, catalog, batch_size=2)
    ids = ["item-0", "gone", "item-1", "item-2"]
    result = service.handle(bytes_array([QUERY.encode()]), bytes_array([i.encode() for i in ids]))
    assert result.statuses == (Status.FULL, Status.UNKNOWN_ITEM, Status.FULL, Status.FULL)
    expected = tiny_model.score_full(QUERY, [text_of(catalog, i) for i in ("item-0", "item-1", "item-2")])
    np.testing.assert_allclose(np.delete(result.scores, 1), expected.numpy(), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------- repository and environment
def test_config_parameters_are_exactly_the_runtime_parameters() -> None:
    gist = read_parameters((TEMPLATE_REPO / GIST_MODEL / "config.pbtxt").read_text())
    full = read_parameters((TEMPLATE_REPO / FULL_MODEL / "config.pbtxt").read_text())
    params = GistParams.parse(gist)
    assert params.metrics_address == "127.0.0.1" and 0 < params.shadow_rate < 0.1
    FullParams.parse(full)
    with pytest.raises(ValueError, match=r"unknown \['typo'\], missing \['metrics_port'\]"):
        GistParams.parse({**{k: v for k, v in gist.items() if k != "metrics_port"}, "typo": "1"})
    with pytest.raises(ValueError, match="l1_bytes='lots' is not a valid int"):
        GistParams.parse({**gist, "l1_bytes": "lots"})


def test_set_parameters_escapes_values_and_refuses_unknown_keys(tmp_path: Path) -> None:
    text = (TEMPLATE_REPO / GIST_MODEL / "config.pbtxt").read_text()
    odd = 'C:\\dir "quoted"\nnext'
    assert read_parameters(set_parameters(text, {"catalog_url": odd}))["catalog_url"] == odd
    with pytest.raises(ServerError, match="not listed"):
        set_parameters(text, {"nope": "1"})
    settings_ = ServerSettings(model_path="/m", shadow_rate=1.0, model_metrics_port=9999)
    repo = write_repository(tmp_path / "models", settings_.parameters())
    written = read_parameters((repo / GIST_MODEL / "config.pbtxt").read_text())
    assert written["shadow_rate"] == "1.0" and written["metrics_port"] == "9999"
    assert read_parameters((repo / FULL_MODEL / "config.pbtxt").read_text())["model_path"] == "/m"
    assert (repo / GIST_MODEL / "1" / "model.py").is_file()


def test_local_settings_pick_free_ports_and_keep_files_in_the_workdir(tmp_path: Path) -> None:
    local = ServerSettings.local("/m", tmp_path, shadow_rate=1.0, grpc_port=9001)
    assert (local.http_port, local.metrics_port, local.model_metrics_port) == (0, 0, 0)  # 0: free at start
    assert local.grpc_port == 9001 and local.shadow_rate == 1.0 and local.model_path == "/m"
    assert (local.feast_dir, local.workdir) == (str(tmp_path / "feast"), str(tmp_path / "triton"))


def test_shadow_defaults_to_the_shipped_teacher_only_for_a_shipped_student() -> None:
    def shadow(**kwargs: str) -> str:
        return ServerSettings(**kwargs).parameters()[FULL_MODEL]["model_path"]

    assert shadow(model_path="/m") == "/m"  # any other model: its own full-context forward
    assert shadow(model_path=DEFAULT_CHECKPOINT) == SHADOW_CHECKPOINT
    assert shadow(model_path=str(SHIPPED[DEFAULT_CHECKPOINT])) == SHADOW_CHECKPOINT  # by folder too
    assert shadow(model_path=DEFAULT_CHECKPOINT, full_model_path="/t") == "/t"
    assert shadow(model_path=QL_CHECKPOINT) == SHADOW_CHECKPOINT  # the other shipped student
    assert shadow(model_path=SHADOW_CHECKPOINT) == SHADOW_CHECKPOINT  # the teacher checks itself


def test_server_env_puts_this_interpreter_first(tmp_path: Path) -> None:
    env = server_env({"LD_LIBRARY_PATH": "/usr/lib/x86_64-linux-gnu", "PATH": "/usr/bin"})
    libdir = sysconfig.get_config_var("LIBDIR")
    ld = env["LD_LIBRARY_PATH"].split(os.pathsep)
    assert ld[0] == libdir and ld[-1] == "/usr/lib/x86_64-linux-gnu"
    assert (Path(libdir) / f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0").is_file()
    pythonpath = env["PYTHONPATH"].split(os.pathsep)
    assert pythonpath[:2] == [str(PROJECT_ROOT), sysconfig.get_paths()["purelib"]]
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    backends = write_backends(tmp_path / "backends")
    stub = backends / "python" / "triton_python_backend_stub"
    assert stub.is_file() and os.access(stub, os.X_OK)
    assert (backends / "python" / "libtriton_python.so").is_file()
