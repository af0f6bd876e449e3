"""A reranker interpolated with BM25, as search teams deploy one: per query, both score lists min-max
normalised over the candidates, then α · model + (1 − α) · bm25.

α comes from the grid {0, 0.1, …, 1}, chosen to maximise mean nDCG@10. The weight to deploy is fitted
on all evaluated queries; the quality reported for the interpolation uses, for each query, the weight
fitted on the *other* queries (leave-one-query-out), so the slice that picks α does not also grade it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reranker.ranking_metrics import Gain, ndcg_at_k

WEIGHTS = tuple(i / 10 for i in range(11))


def minmax(scores: Sequence[float]) -> list[float]:
    """Scores mapped onto [0, 1] over one candidate list (all 0 when they are all equal)."""
    lo, hi = min(scores), max(scores)
    return [0.0] * len(scores) if hi == lo else [(s - lo) / (hi - lo) for s in scores]


def interpolate(model: Sequence[float], bm25: Sequence[float], weight: float) -> list[float]:
    """weight · minmax(model) + (1 − weight) · minmax(bm25), candidate by candidate."""
    return [weight * m + (1 - weight) * b for m, b in zip(minmax(model), minmax(bm25), strict=True)]


@dataclass(frozen=True)
class Fitted:
    weight: float  # fitted on every query: the one to deploy
    held_out: dict[str, float]  # query id → the weight fitted on the other queries


def fit_weight(
    model: Mapping[str, Sequence[float]],
    bm25: Mapping[str, Sequence[float]],
    labels: Mapping[str, Sequence[int]],
    doc_ids: Mapping[str, Sequence[str]] | None = None,
    gain: Gain = "linear",
) -> Fitted:
    """The nDCG@10-best grid weight over all queries, and per query over all the others (ties: the
    smaller weight, i.e. more BM25); nDCG with `gain`, ties in a list broken by `doc_ids` where given."""
    queries = list(model)
    ids = doc_ids or {}
    gains = {
        w: {q: ndcg_at_k(interpolate(model[q], bm25[q], w), labels[q], 10, ids.get(q), gain) for q in queries}
        for w in WEIGHTS
    }
    totals = {w: sum(by_query.values()) for w, by_query in gains.items()}

    def best(leave_out: str | None) -> float:
        held = {w: totals[w] - (gains[w][leave_out] if leave_out else 0.0) for w in WEIGHTS}
        return max(WEIGHTS, key=lambda w: (round(held[w], 12), -w))

    return Fitted(best(None), {q: best(q) for q in queries})
