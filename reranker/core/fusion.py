"""How a reranker's scores are combined with the first stage's (BM25, ANN) that chose the candidates.

A cascade deploys the reranker interpolated with its first stage: it keeps what each is good at, and on
a query the reranker misreads the list never falls far below the first stage's. Two rules, each a
`RerankerConfig.fusion` setting written `RULE:WEIGHT[:K]` (a model reference takes `?fusion=linear:0.4`):

* `linear:w` — per candidate list, both score lists min-max normalised, then w · reranker + (1 − w) ·
  first stage. Scores of different scales (logits, BM25) become comparable per request, so one weight
  serves every query. `gistrank eval` fits w on dev (reranker/evaluation/fusion.py).
* `rrf:w:k` — weighted reciprocal-rank fusion: w / (k + rank_reranker) + (1 − w) / (k + rank_first),
  ranks from 1. Uses only the order of each list, so it is robust to a first stage whose scores are not
  comparable across requests; k = 60 is Cormack et al.'s (2009) constant.
* `none` — the reranker's scores as they are, first-stage scores or not.

Ties in a list are ranked by candidate order (the earlier first), as the evaluation ranks them.
Pure Python: the serving path fuses a request's scores with it, the evaluation a query's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

FusionRule = Literal["none", "linear", "rrf"]
RRF_K = 60
DEFAULT_FUSION = "linear:0.5"  # no weight fitted: both stages alike
FUSION_FILE = "fusion.json"  # `gistrank eval --fit-fusion` writes it; `gistrank serve --fusion` reads it


def minmax(scores: Sequence[float]) -> list[float]:
    """Scores mapped onto [0, 1] over one candidate list (all 0 when they are all equal)."""
    lo, hi = min(scores), max(scores)
    return [0.0] * len(scores) if hi == lo else [(s - lo) / (hi - lo) for s in scores]


def interpolate(reranker: Sequence[float], first_stage: Sequence[float], weight: float) -> list[float]:
    """weight · minmax(reranker) + (1 − weight) · minmax(first_stage), candidate by candidate."""
    pairs = zip(minmax(reranker), minmax(first_stage), strict=True)
    return [weight * r + (1 - weight) * f for r, f in pairs]


def ranks(scores: Sequence[float]) -> list[int]:
    """Each candidate's rank in its list, from 1 (score descending, ties: the earlier candidate first)."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    out = [0] * len(scores)
    for rank, i in enumerate(order, start=1):
        out[i] = rank
    return out


def reciprocal_rank_fusion(
    reranker: Sequence[float], first_stage: Sequence[float], weight: float, k: int = RRF_K
) -> list[float]:
    """weight / (k + rank in the reranker's list) + (1 − weight) / (k + rank in the first stage's)."""
    pairs = zip(ranks(reranker), ranks(first_stage), strict=True)
    return [weight / (k + r) + (1 - weight) / (k + f) for r, f in pairs]


@dataclass(frozen=True)
class Fusion:
    rule: FusionRule
    weight: float = 1.0  # the reranker's share; the first stage has 1 − weight
    k: int = RRF_K  # rrf only

    @classmethod
    def parse(cls, text: str) -> Fusion:
        """`none`, `linear:W` or `rrf:W[:K]` with 0 ≤ W ≤ 1 and K ≥ 1, else a ValueError saying which."""
        rule, *args = text.strip().split(":")
        if rule == "none" and not args:
            return cls("none")
        if rule not in ("linear", "rrf") or not 1 <= len(args) <= (2 if rule == "rrf" else 1):
            raise ValueError(f"fusion {text!r} is not none, linear:WEIGHT or rrf:WEIGHT[:K], e.g. linear:0.4")
        try:
            weight = float(args[0])
            k = int(args[1]) if len(args) == 2 else RRF_K
        except ValueError:
            raise ValueError(f"fusion {text!r}: the weight must be a number and k an integer") from None
        if not 0.0 <= weight <= 1.0:  # also refuses nan
            raise ValueError(f"fusion {text!r}: the weight must be within [0, 1], got {args[0]}")
        if k < 1:
            raise ValueError(f"fusion {text!r}: k must be at least 1, got {k}")
        return cls(rule, weight, k)  # type: ignore[arg-type]  # rule checked above

    def __str__(self) -> str:
        if self.rule == "none":
            return "none"
        weight = f"{self.weight:g}"
        return f"linear:{weight}" if self.rule == "linear" else f"rrf:{weight}:{self.k}"

    def fuse(self, reranker: Sequence[float], first_stage: Sequence[float]) -> list[float]:
        """The served scores of one candidate list: finite reranker and first-stage scores, same order."""
        if len(reranker) != len(first_stage):
            raise ValueError(f"{len(reranker)} reranker scores but {len(first_stage)} first-stage scores")
        if not reranker or self.rule == "none":
            return [float(s) for s in reranker]
        if self.rule == "linear":
            return interpolate(reranker, first_stage, self.weight)
        return reciprocal_rank_fusion(reranker, first_stage, self.weight, self.k)


def canonical_fusion(text: str) -> str:
    """`text` as RerankerConfig stores it (`linear:.40` → `linear:0.4`), else the parse's ValueError."""
    return str(Fusion.parse(text))


def served_fusion(path: Path, model: str) -> str:
    """The fusion setting `gistrank eval --fit-fusion` fitted for `model` (the reference as evaluated),
    read from its `fusion.json`; a ValueError naming the models it holds when `model` is not one."""
    try:
        fitted = json.loads(path.read_text())["models"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path} is not a {FUSION_FILE} written by `gistrank eval --fit-fusion`: {exc}"
        ) from None
    if model not in fitted:
        raise ValueError(f"{path} fitted no fusion for {model!r}; it holds {sorted(fitted)}")
    return canonical_fusion(fitted[model]["fusion"])
