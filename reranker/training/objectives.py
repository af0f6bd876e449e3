"""Training objectives: each turns a step's batch into one weighted loss (a scalar tensor).

    Listwise     cross-entropy between softmax(scores) and the label-gain distribution (2^label − 1)
    Pointwise    binary cross-entropy of each score against its label scaled to [0, 1]
    Distill      KL(teacher ‖ student) over each query's candidates, the teacher reading whole items
    Autoencode   regenerate each item's first tokens from its gists alone (label-free)

Ranking objectives average over the step's queries, so the logged value of each is per query.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from reranker.ranking_metrics import accuracy_at_1
from reranker.training.forwards import autoencode_control, autoencode_loss

if TYPE_CHECKING:
    from reranker.core.model import Reranker
    from reranker.data.relevance_data import RelevanceSet


@dataclass
class Batch:
    """One step's data. Per drawn query: (query text, candidate texts), labels (C_q,), the model's
    scores (C_q,) with gradients; `items`: the item ids the autoencoder regenerates; `logs`: what
    objectives measure beside their loss."""

    texts: list[tuple[str, list[str]]]
    labels: list[torch.Tensor]
    scores: list[torch.Tensor]
    items: list[str]
    logs: dict[str, float] = field(default_factory=dict)

    def signs_of_life(self) -> dict[str, float]:
        """Does the top score land on the best label; do the scores differ at all (a student that has
        not started keeps a spread near 0)."""
        if not self.scores:
            return self.logs
        n = len(self.scores)
        hits = sum(
            accuracy_at_1(s.tolist(), y.tolist()) for s, y in zip(self.scores, self.labels, strict=True)
        )
        spread = sum(float(s.detach().std()) for s in self.scores)
        return {"batch_acc@1": hits / n, "score_spread": spread / n} | self.logs


class Loop(Protocol):
    """What an objective reads of the loop that runs it (the Trainer), so that objectives need not
    import the trainer that imports them."""

    model: Reranker
    data: RelevanceSet

    def scores(
        self, model: Reranker, picks: list[tuple[str, list[str]]], full: bool
    ) -> list[torch.Tensor]: ...


class Objective(Protocol):
    name: str

    def loss(self, trainer: Loop, batch: Batch) -> torch.Tensor: ...


def listwise_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy between softmax(scores) and the label-gain distribution (2^label − 1)."""
    gains = 2.0**labels - 1.0
    return -(gains / gains.sum() * torch.log_softmax(scores, dim=0)).sum()


def distill_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(teacher ‖ student) over one query's candidates, × T² so gradients keep their scale."""
    t = torch.log_softmax(teacher / temperature, dim=0)
    s = torch.log_softmax(student / temperature, dim=0)
    return (t.exp() * (t - s)).sum() * temperature**2


@dataclass
class Listwise:
    weight: float
    name: str = "listwise"

    def loss(self, trainer: Loop, batch: Batch) -> torch.Tensor:
        pairs = zip(batch.scores, batch.labels, strict=True)
        return self.weight * torch.stack([listwise_loss(s, y) for s, y in pairs]).mean()


@dataclass
class Pointwise:
    weight: float
    name: str = "pointwise"

    def loss(self, trainer: Loop, batch: Batch) -> torch.Tensor:
        bce = torch.nn.functional.binary_cross_entropy_with_logits
        return (
            self.weight
            * torch.stack(
                [bce(s, y / y.max()) for s, y in zip(batch.scores, batch.labels, strict=True)]
            ).mean()
        )


@dataclass
class Distill:
    weight: float
    temperature: float
    teacher: Reranker
    name: str = "distill"

    def loss(self, trainer: Loop, batch: Batch) -> torch.Tensor:
        with torch.no_grad():
            reference = trainer.scores(self.teacher, batch.texts, full=True)
        pairs = zip(batch.scores, reference, strict=True)
        return self.weight * torch.stack([distill_loss(s, t, self.temperature) for s, t in pairs]).mean()


@dataclass
class Autoencode:
    weight: float
    tokens: int
    max_items: int
    name: str = "autoencode"

    def loss(self, trainer: Loop, batch: Batch) -> torch.Tensor:
        """Also logs `autoencode_gap`: how much better the gists regenerate their own item than another's
        (nats/token), ~0 until they carry the item."""
        texts = [trainer.data.items[i].text for i in batch.items[: self.max_items]]
        own = autoencode_loss(trainer.model, texts, self.tokens)
        if len(texts) > 1:
            with torch.no_grad():
                other = autoencode_control(trainer.model, texts, self.tokens)
            batch.logs["autoencode_gap"] = float(other - own.detach())
        return self.weight * own
