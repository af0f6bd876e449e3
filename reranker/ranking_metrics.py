"""IR metrics of the evaluation protocol (DESIGN.md §5), pure Python/numpy, one query at a time.

Numpy is the only dependency: serving's shadow scoring imports this module inside the Triton Python
backend (numpy < 2 there). It imports nothing of the project and sits below every stage that ranks:
training's objectives, serving's shadow sampling and the evaluation.

* `recall_at_k_vs_reference` (and its two counts, `top_k_overlap`): how much of the reference model's
  top-K a system keeps. The reference is the full-context teacher on the same candidates; in a cascade
  a candidate pushed out of the top-K is lost for every later stage, so this is the number that says
  whether compression is safe to deploy.
* `ndcg_at_k` and `accuracy_at_1`: quality against the graded labels (non-negative integers on any
  scale: 0–2 for the synthetic set, 0–1 to 0–4 for TREC collections; gain 2^label − 1).
* `mean_by_slice` and `length_quartiles`: a global mean hides the long items that carry the loss, so
  every metric is also reported per item-length quartile and per query kind (hard-negative or not).

Ranking rule, shared by every function: candidates are ordered by score descending, ties broken by
candidate index ascending. A fixed rule makes every metric a deterministic function of its inputs
(no dependence on sort stability or on numpy's choice of algorithm). The tie rule favours earlier
candidates, so candidate lists must not be ordered by label (the synthetic generator shuffles them).
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence

import numpy as np


def ranking(scores: Sequence[float]) -> list[int]:
    """Candidate indices, best first: score descending, then index ascending."""
    values = _finite_scores(scores)
    return sorted(range(len(values)), key=lambda i: (-values[i], i))


def top_k(scores: Sequence[float], k: int) -> list[int]:
    """The first `k` indices of `ranking` (all of them when there are fewer than `k` candidates)."""
    _check_k(k)
    return ranking(scores)[:k]


def top_k_overlap(
    system_scores: Sequence[float], reference_scores: Sequence[float], k: int
) -> tuple[int, int]:
    """(|top-k(system) ∩ top-k(reference)|, min(k, N)) over the same N candidates: the two counts of
    recall@k, kept apart so that a caller can sum them over many queries before dividing (shadow
    scoring pools them over live requests)."""
    _check_same_length(system_scores, reference_scores, "system_scores", "reference_scores")
    system, reference = top_k(system_scores, k), top_k(reference_scores, k)
    return len(set(system) & set(reference)), min(k, len(reference))


def recall_at_k_vs_reference(
    system_scores: Sequence[float], reference_scores: Sequence[float], k: int
) -> float:
    """|top-k(system) ∩ top-k(reference)| / min(k, N) over the same N candidates.

    With fewer than `k` candidates both top-k sets are the whole list and recall is 1: nothing was
    pushed out. Identical score vectors always give 1 because both sides use the same tie rule.
    """
    overlap, reference = top_k_overlap(system_scores, reference_scores, k)
    return overlap / reference


def ndcg_at_k(scores: Sequence[float], labels: Sequence[int], k: int) -> float:
    """NDCG@k with exponential gain 2^label − 1 and discount 1/log2(rank + 1), rank starting at 1.

    The ideal DCG sorts the labels themselves (descending), over all N candidates, cut at k (trec_eval
    sorts the qrels of the topic instead: the same when the qrels are the list's labels). A query
    with no label above 0 has ideal DCG 0 and returns 0.0 (the trec_eval convention): it cannot tell
    systems apart, so callers should drop such queries before averaging rather than count them.
    """
    _check_same_length(scores, labels, "scores", "labels")
    _check_k(k)
    gains = _gains(labels)
    ideal = _dcg(sorted(gains, reverse=True)[:k])
    if ideal == 0.0:
        return 0.0
    return _dcg([gains[i] for i in top_k(scores, k)]) / ideal


def accuracy_at_1(scores: Sequence[float], labels: Sequence[int]) -> float:
    """1.0 when the top-ranked candidate carries the best label of the list (and it is above 0), else 0.0.

    "Best label present" rather than "label 2": a list whose best candidate is a partial match is still
    answered right by putting that candidate first. A list with no relevant candidate scores 0.0, like
    `ndcg_at_k`.
    """
    _check_same_length(scores, labels, "scores", "labels")
    best = max(labels)
    return 1.0 if best > 0 and labels[top_k(scores, 1)[0]] == best else 0.0


def mean_by_slice(values: Sequence[float], slice_keys: Sequence[Hashable]) -> dict[Hashable, float]:
    """Mean of `values` per slice key, keys in sorted order (so reports print in a stable order)."""
    _check_same_length(values, slice_keys, "values", "slice_keys")
    groups: dict[Hashable, list[float]] = {}
    for value, key in zip(values, slice_keys, strict=True):
        groups.setdefault(key, []).append(float(value))
    return {key: math.fsum(group) / len(group) for key, group in sorted(groups.items())}


def length_quartiles(lengths: Sequence[float]) -> list[int]:
    """Quartile index 0..3 of each length: the number of quartile cut points strictly below it.

    Cut points are numpy's linear-interpolation 25th/50th/75th percentiles of `lengths`. Equal lengths
    always share a quartile (no split by position), at the price of unequal group sizes when many
    lengths tie; [1, 2, 3, 4] gives [0, 1, 2, 3] and a constant list gives all 0.
    """
    if len(lengths) == 0:
        raise ValueError("length_quartiles needs at least one length")
    cuts = np.percentile(np.asarray(lengths, dtype=np.float64), [25, 50, 75])
    return [int(np.count_nonzero(cuts < length)) for length in lengths]


def _dcg(gains: Sequence[float]) -> float:
    return math.fsum(gain / math.log2(rank + 2) for rank, gain in enumerate(gains))


def _gains(labels: Sequence[int]) -> list[float]:
    if any(label < 0 for label in labels):
        raise ValueError(f"labels must be >= 0, got {list(labels)}")
    return [2.0**label - 1.0 for label in labels]


def _finite_scores(scores: Sequence[float]) -> list[float]:
    # NaN compares false with everything, which would make the ranking depend on where it sits.
    values = [float(score) for score in scores]
    if not values:
        raise ValueError("no candidates: scores is empty")
    if not all(math.isfinite(value) for value in values):
        raise ValueError(f"scores must be finite, got {values}")
    return values


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


def _check_same_length(first: Sequence[object], second: Sequence[object], name1: str, name2: str) -> None:
    if len(first) != len(second):
        raise ValueError(f"{name1} has {len(first)} entries but {name2} has {len(second)}")
    if len(first) == 0:
        raise ValueError(f"{name1} is empty")


def bootstrap_ci(
    values: Sequence[float], level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-query values (queries resampled with
    replacement; seeded, so a report is reproducible). Small test sets get honest, wide intervals."""
    if not values:
        raise ValueError("no values to bootstrap")
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    tail = (1 - level) / 2
    return means[int(tail * (resamples - 1))], means[int((1 - tail) * (resamples - 1))]
