"""Tiny models and data for the tests: the random bases (`reranker.core.tiny_base`), the default tiny
gisting, a four-item relevance set and a training config sized for it."""

from __future__ import annotations

from pathlib import Path

from reranker.core.config import RerankerConfig
from reranker.data.relevance_data import Item, Judgment, Query, RelevanceSet
from reranker.training.trainer import TrainConfig

GIST = RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32")  # tiny models' default gisting


def tiny_relevance_set() -> RelevanceSet:
    """Four items, two train and two test queries, each with one exact, one partial, two irrelevant."""
    specs = [
        ("Acme phone", {"storage": "256GB", "year": 2023}),
        ("Acme phone", {"storage": "128GB", "year": 2023}),
        ("Steel kettle", {"capacity": "1.7 L"}),
        ("Headphones", {"colour": "black"}),
    ]
    items = {
        f"i{n}": Item(item_id=f"i{n}", title=title, attributes=attrs, description="Warranty: 2 years. " * 3)
        for n, (title, attrs) in enumerate(specs)
    }
    queries = [
        Query(query_id="q0", text="phone 256GB", split="train"),
        Query(query_id="q1", text="kettle 1.7 L", split="train"),
        Query(query_id="q2", text="Acme phone 128GB", split="test", hard=True),
        Query(query_id="q3", text="black headphones", split="test"),
    ]
    labels = {"q0": [2, 1, 0, 0], "q1": [0, 0, 2, 1], "q2": [1, 2, 0, 0], "q3": [0, 0, 0, 2]}
    judgments = [
        Judgment(query_id=q, item_id=f"i{n}", label=label)
        for q, row in labels.items()
        for n, label in enumerate(row)
    ]
    return RelevanceSet(items=items, queries=queries, judgments=judgments)


def train_config(tiny_base: Path, **overrides: object) -> TrainConfig:
    """A short training run on a tiny base (GIST, 2 queries × 4 candidates, lr big enough to move)."""
    defaults = dict(
        base=str(tiny_base),
        gist=GIST,
        steps=30,
        queries_per_step=2,
        candidates_per_query=4,
        lr_body=1e-3,
        lr_gist=1e-2,
        checkpoint_every=1000,
    )
    return TrainConfig(**(defaults | overrides))
