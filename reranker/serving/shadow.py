"""Shadow scoring: a sampled fraction of live requests is also ranked by the full-context model, off the
request path, and the top-K overlap of the two rankings is counted.

For each compared request and K ∈ {1, 5, 10}: overlap = |top-K(gist) ∩ top-K(full)| and
reference = min(K, n) over the n candidates both models scored. Both are summed into counters, so
recall@K against the full-context oracle (DESIGN §5) over any window is a ratio of rates:
rate(gistrank_shadow_topk_overlap_total{k="K"}) / rate(gistrank_shadow_topk_reference_total{k="K"}).
Summing before dividing weights every request by its candidate count, as a pooled recall should.

A request that brought first-stage scores is served a fused ranking (reranker/core/fusion.py); for it
the same counts are also taken between the served fused ranking and the full-context scores fused with
the same first-stage scores by the same rule (`gistrank_shadow_fused_topk_*`): the recall of what users
see, against what the full-context reranker would have shown them in the same cascade.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from monitoring.serving_metrics import (
    SHADOW_FUSED_OVERLAP,
    SHADOW_FUSED_REFERENCE,
    SHADOW_KS,
    SHADOW_OVERLAP,
    SHADOW_REFERENCE,
    SHADOW_REQUESTS,
    SHADOW_SAMPLED,
)
from reranker.core.fusion import Fusion
from reranker.ranking_metrics import top_k_overlap
from reranker.serving.worker import BackgroundWorker

logger = logging.getLogger(__name__)

# (query, item ids) → one full-context score per id; NaN for a candidate the full model could not score
ScoreFull = Callable[[str, Sequence[str]], Sequence[float]]


def overlap_at_k(
    gist: Sequence[float], full: Sequence[float], ks: Sequence[int] = SHADOW_KS
) -> dict[int, tuple[int, int]]:
    """{K: (|top-K(gist) ∩ top-K(full)|, min(K, n))} for two finite score lists over the same n
    candidates, ranked by the evaluation's rule (ties go to the earlier candidate)."""
    return {k: top_k_overlap(gist, full, k) for k in ks}


@dataclass(frozen=True)
class ShadowJob:
    query: str
    item_ids: tuple[str, ...]
    gist_scores: tuple[float, ...]  # the reranker's, unfused
    first_stage: tuple[float, ...] | None  # the request's, one per id, when it brought them


class ShadowSampler:
    def __init__(
        self,
        rate: float,
        score_full: ScoreFull,
        maxsize: int = 16,
        rng: random.Random | None = None,
        fusion: Fusion | None = None,
    ) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"shadow rate must be within [0, 1], got {rate}")
        self.rate = rate
        self.fusion = fusion or Fusion("none")  # the served model's: both sides are fused alike
        self._score_full = score_full
        self._rng = rng or random.Random()
        self._worker: BackgroundWorker[ShadowJob] = BackgroundWorker("shadow", self._compare, maxsize)

    def offer(
        self,
        query: str,
        item_ids: Sequence[str],
        gist_scores: Sequence[float],
        first_stage: Sequence[float] | None = None,
    ) -> bool:
        """Sample this request with probability `rate`; True when it was queued for comparison.
        `gist_scores` are the reranker's own, `first_stage` the request's (served fused with them)."""
        if not item_ids or self._rng.random() >= self.rate:
            return False
        SHADOW_SAMPLED.inc()
        job = ShadowJob(
            query,
            tuple(item_ids),
            tuple(map(float, gist_scores)),
            None if first_stage is None else tuple(map(float, first_stage)),
        )
        if not self._worker.submit(job):
            SHADOW_REQUESTS.labels(outcome="dropped").inc()
            return False
        return True

    def drain(self, timeout: float) -> bool:
        return self._worker.drain(timeout)

    def close(self, timeout: float = 10.0) -> None:
        # Pending comparisons are dropped: at shutdown Triton refuses the shadow model's requests anyway.
        self._worker.close(timeout, discard_pending=True)

    def _compare(self, job: ShadowJob) -> None:
        try:
            full = list(self._score_full(job.query, job.item_ids))
            if len(full) != len(job.item_ids):
                raise ValueError(f"shadow model returned {len(full)} scores for {len(job.item_ids)} ids")
        except Exception:
            # Whatever breaks in the shadow (model error, transport, a bug) must not touch serving: count it.
            logger.exception("shadow scoring failed")
            SHADOW_REQUESTS.labels(outcome="failed").inc()
            return
        # Only candidates both models scored take part (e.g. an item deleted in between drops out).
        first_stage = job.first_stage or (0.0,) * len(full)
        scored = zip(job.gist_scores, full, first_stage, strict=True)
        kept = [(g, f, s) for g, f, s in scored if math.isfinite(g) and math.isfinite(f)]
        if not kept:
            SHADOW_REQUESTS.labels(outcome="failed").inc()
            return
        gist, ref, stage = (list(column) for column in zip(*kept, strict=True))
        for k, (overlap, reference) in overlap_at_k(gist, ref).items():
            SHADOW_OVERLAP.labels(k=str(k)).inc(overlap)
            SHADOW_REFERENCE.labels(k=str(k)).inc(reference)
        if job.first_stage is not None:
            fused = overlap_at_k(self.fusion.fuse(gist, stage), self.fusion.fuse(ref, stage))
            for k, (overlap, reference) in fused.items():
                SHADOW_FUSED_OVERLAP.labels(k=str(k)).inc(overlap)
                SHADOW_FUSED_REFERENCE.labels(k=str(k)).inc(reference)
        SHADOW_REQUESTS.labels(outcome="compared").inc()
