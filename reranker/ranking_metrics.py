"""IR metrics of the evaluation protocol (DESIGN.md §5), pure Python/numpy, one query at a time.

Numpy is the only dependency: serving's shadow scoring imports this module inside the Triton Python
backend (numpy < 2 there). It imports nothing of the project and sits below every stage that ranks:
training's objectives, serving's shadow sampling and the evaluation.

* `recall_at_k_vs_reference` (and its two counts, `top_k_overlap`): how much of the reference model's
  top-K a system keeps. The reference is the full-context teacher on the same candidates; in a cascade
  a candidate pushed out of the top-K is lost for every later stage, so this is the number that says
  whether compression is safe to deploy.
* `ndcg_at_k`, `recall_at_k`, `reciprocal_rank` and `accuracy_at_1`: quality against the graded labels
  (non-negative integers on any scale: 0–2 for the synthetic set, 0–1 to 0–4 for TREC collections).
  nDCG's gain is the label itself by default, as trec_eval's; `gain="exponential"` gives 2^label − 1.
* `mean_by_slice` and `length_quartiles`: a global mean hides the long items that carry the loss, so
  every metric is also reported per item-length quartile and per query kind (hard-negative or not).

Ranking rule, shared by every function: candidates are ordered by score descending; ties are broken
as trec_eval breaks them — by document id, descending — when the caller gives `doc_ids`, else by
candidate index ascending. A fixed rule makes every metric a deterministic function of its inputs (no
dependence on sort stability), and with ids every metric is trec_eval's on the same run. Without ids
the rule favours earlier candidates, so candidate lists must then not be ordered by label.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np

Gain = Literal["linear", "exponential"]
GAIN_FORMULA: dict[str, str] = {"linear": "label", "exponential": "2^label − 1"}


def ranking(scores: Sequence[float], doc_ids: Sequence[str] | None = None) -> list[int]:
    """Candidate indices, best first: score descending, then doc id descending (trec_eval), or index
    ascending without ids."""
    values = _finite_scores(scores)
    if doc_ids is None:
        return sorted(range(len(values)), key=lambda i: (-values[i], i))
    _check_same_length(scores, doc_ids, "scores", "doc_ids")
    return sorted(range(len(values)), key=lambda i: (values[i], doc_ids[i]), reverse=True)


def top_k(scores: Sequence[float], k: int, doc_ids: Sequence[str] | None = None) -> list[int]:
    """The first `k` indices of `ranking` (all of them when there are fewer than `k` candidates)."""
    _check_k(k)
    return ranking(scores, doc_ids)[:k]


def top_k_overlap(
    system_scores: Sequence[float],
    reference_scores: Sequence[float],
    k: int,
    doc_ids: Sequence[str] | None = None,
) -> tuple[int, int]:
    """(|top-k(system) ∩ top-k(reference)|, min(k, N)) over the same N candidates: the two counts of
    recall@k, kept apart so that a caller can sum them over many queries before dividing (shadow
    scoring pools them over live requests)."""
    _check_same_length(system_scores, reference_scores, "system_scores", "reference_scores")
    system, reference = top_k(system_scores, k, doc_ids), top_k(reference_scores, k, doc_ids)
    return len(set(system) & set(reference)), min(k, len(reference))


def recall_at_k_vs_reference(
    system_scores: Sequence[float],
    reference_scores: Sequence[float],
    k: int,
    doc_ids: Sequence[str] | None = None,
) -> float:
    """The share of the reference's top k that the system keeps in its own top k (reported as
    "overlap@k": not the IR recall of relevant documents, which is `recall_at_k`):
    |top-k(system) ∩ top-k(reference)| / min(k, N) over the same N candidates.

    With fewer than `k` candidates both top-k sets are the whole list and recall is 1: nothing was
    pushed out. Identical score vectors always give 1 because both sides use the same tie rule.
    """
    overlap, reference = top_k_overlap(system_scores, reference_scores, k, doc_ids)
    return overlap / reference


def ndcg_at_k(
    scores: Sequence[float],
    labels: Sequence[int],
    k: int,
    doc_ids: Sequence[str] | None = None,
    gain: Gain = "linear",
) -> float:
    """NDCG@k, discount 1/log2(rank + 1) (rank from 1), gain the label (trec_eval's `ndcg_cut`) or
    2^label − 1 (`gain="exponential"`, which weighs a perfect match more on graded scales).

    The ideal DCG sorts the labels themselves (descending), over all N candidates, cut at k (trec_eval
    sorts the qrels of the topic instead: the same when the qrels are the list's labels). A query
    with no label above 0 has ideal DCG 0 and returns 0.0 (the trec_eval convention): it cannot tell
    systems apart, so callers should drop such queries before averaging rather than count them.
    """
    _check_same_length(scores, labels, "scores", "labels")
    _check_k(k)
    gains = _gains(labels, gain)
    ideal = _dcg(sorted(gains, reverse=True)[:k])
    if ideal == 0.0:
        return 0.0
    return _dcg([gains[i] for i in top_k(scores, k, doc_ids)]) / ideal


def recall_at_k(
    scores: Sequence[float], labels: Sequence[int], k: int, doc_ids: Sequence[str] | None = None
) -> float:
    """IR recall: the share of the list's relevant candidates (label > 0) in the top k; 0.0 without any
    (trec_eval's `recall_k` with the list's labels as the qrels)."""
    _check_same_length(scores, labels, "scores", "labels")
    relevant = sum(label > 0 for label in labels)
    if relevant == 0:
        return 0.0
    return sum(labels[i] > 0 for i in top_k(scores, k, doc_ids)) / relevant


def reciprocal_rank(
    scores: Sequence[float], labels: Sequence[int], doc_ids: Sequence[str] | None = None
) -> float:
    """1 / the rank of the first relevant candidate (label > 0); 0.0 without any (trec_eval's
    `recip_rank`; its mean over queries is MRR)."""
    _check_same_length(scores, labels, "scores", "labels")
    for rank, i in enumerate(ranking(scores, doc_ids), start=1):
        if labels[i] > 0:
            return 1.0 / rank
    return 0.0


def accuracy_at_1(
    scores: Sequence[float], labels: Sequence[int], doc_ids: Sequence[str] | None = None
) -> float:
    """1.0 when the top-ranked candidate carries the best label of the list (and it is above 0), else 0.0.

    "Best label present" rather than "label 2": a list whose best candidate is a partial match is still
    answered right by putting that candidate first. A list with no relevant candidate scores 0.0, like
    `ndcg_at_k`.
    """
    _check_same_length(scores, labels, "scores", "labels")
    best = max(labels)
    return 1.0 if best > 0 and labels[top_k(scores, 1, doc_ids)[0]] == best else 0.0


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


def _gains(labels: Sequence[int], gain: Gain) -> list[float]:
    if any(label < 0 for label in labels):
        raise ValueError(f"labels must be >= 0, got {list(labels)}")
    if gain == "linear":
        return [float(label) for label in labels]
    if gain == "exponential":
        return [2.0**label - 1.0 for label in labels]
    raise ValueError(f"gain must be 'linear' or 'exponential', got {gain!r}")


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
