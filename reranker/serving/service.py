"""One rerank request end to end, without Triton: decode → validate query → fetch K/V → score → fuse
→ shadow.

`GistService` is what the `gist_reranker` Triton model runs; `FullService` is the `full_reranker`
(the full-context model, the shadow's reference). Both take the raw input arrays and return one score
and one status per candidate, in request order; a candidate that cannot be scored gets NaN and an
error status while the others are scored normally. A malformed request raises `RequestError`.

A gist request may bring the first stage's scores: the served scores are then the reranker's fused
with them by the model's `fusion` setting (reranker/core/fusion.py), over the candidates it scored,
and the reranker's own scores are returned beside them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from sqlalchemy.exc import SQLAlchemyError

from monitoring.serving_metrics import (
    CANDIDATE_ERROR_COUNT,
    FIRST_STAGE_REQUESTS,
    REQUEST_CANDIDATES,
    REQUEST_SECONDS,
    REQUESTS,
)
from reranker.core.errors import GistRankError
from reranker.core.fusion import Fusion
from reranker.core.kv import StoredUnit
from reranker.serving.lookup import ItemSource, KVLookup
from reranker.serving.requests import (
    DEFAULT_MAX_CANDIDATES,
    FIRST_STAGE_SCORES,
    RequestError,
    RerankRequest,
    decode_request,
)
from reranker.serving.shadow import ShadowSampler
from reranker.serving.status import Status


class ScoringModel(Protocol):
    @property
    def fusion(self) -> Fusion: ...

    def query_ids(self, query: str) -> list[int]: ...

    def score(self, query: str, kvs: Sequence[StoredUnit]) -> torch.Tensor: ...

    def score_full(self, query: str, items: Sequence[str]) -> torch.Tensor: ...


@dataclass(frozen=True)
class RerankResult:
    scores: np.ndarray  # float32 (n,), NaN where the status is an error; fused when first-stage came
    statuses: tuple[Status, ...]
    rerank_scores: np.ndarray | None = None  # float32 (n,): the reranker's own (gist_reranker only)


def _validated(
    model: ScoringModel, query: Any, item_ids: Any, max_candidates: int, first_stage: Any = None
) -> RerankRequest:
    request = decode_request(query, item_ids, max_candidates, first_stage)
    try:
        model.query_ids(request.query)  # token limit: fail before any fetch or recompute work is done
    except GistRankError as e:
        raise RequestError(f"QUERY: {e}") from None
    return request


class GistService:
    def __init__(
        self,
        model: ScoringModel,
        lookup: KVLookup,
        shadow: ShadowSampler | None = None,
        max_candidates: int = DEFAULT_MAX_CANDIDATES,
    ) -> None:
        self.model = model
        self.lookup = lookup
        self.shadow = shadow
        self.max_candidates = max_candidates

    def handle(self, query: Any, item_ids: Any, first_stage: Any = None) -> RerankResult:
        start = time.perf_counter()
        try:
            request = _validated(self.model, query, item_ids, self.max_candidates, first_stage)
        except RequestError:
            REQUESTS.labels(outcome="invalid").inc()
            raise
        FIRST_STAGE_REQUESTS.labels(first_stage="absent" if request.first_stage is None else "given").inc()
        try:
            result = self._rerank(request, start)
        except Exception:
            REQUESTS.labels(outcome="error").inc()
            raise
        REQUESTS.labels(outcome="ok").inc()
        return result

    def _rerank(self, request: RerankRequest, start: float) -> RerankResult:
        ids = request.item_ids
        REQUEST_CANDIDATES.observe(len(ids))
        resolved = self.lookup.fetch(ids)
        fetched = time.perf_counter()

        statuses = tuple(resolved[i].status for i in ids)
        scored = [n for n, status in enumerate(statuses) if status.scored]
        rerank = np.full(len(ids), np.nan, dtype=np.float32)
        if scored:
            kvs = [resolved[ids[n]].kv for n in scored]
            rerank[scored] = self.model.score(request.query, kvs).cpu().numpy()
        served, first_stage = rerank, None
        if request.first_stage is not None:
            first_stage = [request.first_stage[n] for n in scored]
            served = np.full(len(ids), np.nan, dtype=np.float32)
            if scored:
                served[scored] = self.model.fusion.fuse(rerank[scored].tolist(), first_stage)
        done = time.perf_counter()

        REQUEST_SECONDS.labels(stage="fetch").observe(fetched - start)
        REQUEST_SECONDS.labels(stage="model").observe(done - fetched)
        REQUEST_SECONDS.labels(stage="total").observe(done - start)
        for status in statuses:
            if not status.scored:
                CANDIDATE_ERROR_COUNT.labels(code=status.value).inc()
        if self.shadow is not None and scored:
            self.shadow.offer(request.query, [ids[n] for n in scored], rerank[scored].tolist(), first_stage)
        return RerankResult(served, statuses, rerank)


class FullService:
    """Full-context scoring (item text + query, no gists) of catalog items: the shadow's reference."""

    def __init__(
        self,
        model: ScoringModel,
        catalog: ItemSource,
        batch_size: int = 16,
        max_candidates: int = DEFAULT_MAX_CANDIDATES,
    ) -> None:
        self.model = model
        self.catalog = catalog
        self.batch_size = batch_size
        self.max_candidates = max_candidates

    def handle(self, query: Any, item_ids: Any, first_stage: Any = None) -> RerankResult:
        if first_stage is not None:
            raise RequestError(
                f"the full-context model takes no {FIRST_STAGE_SCORES}: it is the shadow's reference"
            )
        request = _validated(self.model, query, item_ids, self.max_candidates)
        ids = request.item_ids
        scores = np.full(len(ids), np.nan, dtype=np.float32)
        try:
            items = self.catalog.get(ids)
        except SQLAlchemyError:
            return RerankResult(scores, (Status.CATALOG_UNAVAILABLE,) * len(ids))
        statuses = tuple(Status.FULL if i in items else Status.UNKNOWN_ITEM for i in ids)
        known = [n for n, status in enumerate(statuses) if status.scored]
        texts = [items[ids[n]].text() for n in known]
        # Full-context rows are item-length: batches bound the memory of one forward.
        for start in range(0, len(known), self.batch_size):
            chunk = known[start : start + self.batch_size]
            scores[chunk] = (
                self.model.score_full(request.query, texts[start : start + self.batch_size]).cpu().numpy()
            )
        return RerankResult(scores, statuses)
