"""reranker/serving/service.py: the gist and full-context services end to end, in-process (no Triton)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import QUERY, bytes_array, make_lookup, metric, text_of

from reranker.serving.requests import RequestError
from reranker.serving.service import FullService, GistService
from reranker.serving.shadow import ShadowSampler
from reranker.serving.status import Status


def test_gist_service_scores_like_the_model_and_reports_per_candidate_errors(
    tiny_model, catalog, feast_store
) -> None:
    lookup, _ = make_lookup(tiny_model, catalog, feast_store)

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
    lookup.refresh.close()


def test_full_service_scores_catalog_text_with_the_full_context_model(tiny_model, catalog) -> None:
    service = FullService(tiny_model, catalog, batch_size=2)
    ids = ["item-0", "gone", "item-1", "item-2"]
    result = service.handle(bytes_array([QUERY.encode()]), bytes_array([i.encode() for i in ids]))
    assert result.statuses == (Status.FULL, Status.UNKNOWN_ITEM, Status.FULL, Status.FULL)
    expected = tiny_model.score_full(QUERY, [text_of(catalog, i) for i in ("item-0", "item-1", "item-2")])
    np.testing.assert_allclose(np.delete(result.scores, 1), expected.numpy(), rtol=1e-4, atol=1e-5)
