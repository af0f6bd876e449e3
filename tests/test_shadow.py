"""reranker/serving/shadow.py: top-k overlap math and the shadow sampler's counters."""

from __future__ import annotations

import threading

import pytest
from helpers import metric
from hypothesis import given, settings
from hypothesis import strategies as st

from reranker.ranking_metrics import recall_at_k_vs_reference
from reranker.serving.shadow import ShadowSampler, overlap_at_k


def test_overlap_at_k_counts_shared_top_k() -> None:
    gist = [0.9, 0.8, 0.1, 0.7, 0.2, 0.3]
    full = [0.8, 0.1, 0.9, 0.7, 0.2, 0.3]
    # top-1: {0} vs {2}; top-5: {0,1,3,5,4} vs {2,0,3,5,4}; top-10: all 6 each
    overlaps = overlap_at_k(gist, full, (1, 5, 10))
    assert overlaps == {1: (0, 1), 5: (4, 5), 10: (6, 6)}
    # the evaluation's recall@K of the same lists: one definition of top-K for both
    assert {k: o / r for k, (o, r) in overlaps.items()} == {
        k: recall_at_k_vs_reference(gist, full, k) for k in (1, 5, 10)
    }
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
    sampler.offer("q", ["a", "b", "d"], [1.0, float("nan"), 0.0])  # b has no gist score: left out
    assert sampler.drain(10)
    assert metric("gistrank_shadow_requests_total", outcome="compared") == compared + 2
    # first: gist top-1 {b} vs full {a}: 0/1; top-5 and top-10: all 3 scored by both
    # second: gist top-1 {a} vs full {a}: 1/1; top-5 and top-10: both of a, d
    for k, (overlap, reference) in {1: (0 + 1, 1 + 1), 5: (3 + 2, 3 + 2), 10: (3 + 2, 3 + 2)}.items():
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
