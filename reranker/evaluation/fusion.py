"""The weight of a reranker interpolated with BM25 (`linear:α` of reranker/core/fusion.py, the rule
serving applies): per query, both score lists min-max normalised, then α · model + (1 − α) · bm25.

α comes from the grid {0, 0.1, …, 1}, chosen to maximise mean nDCG@10. The weight to deploy is fitted
on all evaluated queries; the quality reported for the interpolation uses, for each query, the weight
fitted on the *other* queries (leave-one-query-out), so the slice that picks α does not also grade it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reranker.core.fusion import interpolate
from reranker.evaluation.results import EvalResult
from reranker.ranking_metrics import Gain, ndcg_at_k

WEIGHTS = tuple(i / 10 for i in range(11))


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


def served_fusions(result: EvalResult) -> dict[str, Any]:
    """The `fusion.json` of an evaluation (`gistrank eval --fit-fusion`): for each evaluated model that
    serving can load (a student's own online path), the fusion setting fitted on this split and the
    quality it was fitted at — `gistrank serve --model REF --fusion <out>/fusion.json` serves it."""
    models = {}
    for fused, fit in result.interpolation.items():
        if "model" not in fit:
            continue
        system = fused.removesuffix(" + bm25")
        ndcg = {
            name: result.summary[name].all["ndcg@10"]
            for name in (fused, system, "bm25")
            if name in result.summary
        }
        models[fit["model"]] = {
            "fusion": f"linear:{fit['weight']:g}",
            "system": system,
            "held_out_weights": fit["held_out_range"],
            # the fused row's queries each read at the weight fitted on the others (leave-one-query-out)
            "ndcg@10": {
                "fused (held-out weight)": ndcg.get(fused),
                "reranker": ndcg.get(system),
                "bm25": ndcg.get("bm25"),
            },
        }
    return {"split": result.split, "queries": result.queries, "gain": result.gain, "models": models}
