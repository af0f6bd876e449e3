"""Shared fixtures: tiny random bases (Llama, Qwen2) saved once per session, and wrapped rerankers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny import build_tiny_base

from reranker import GistConfig, GistReranker
from reranker.core.model import QueryTail

torch.set_num_threads(2)

ITEMS = [
    "Acme UltraPhone 15 Pro 256GB titanium blue, 2023 model, part number AP-15P-256-BL.",
    "kettle",
    "Stainless steel kettle 1.7 L, 2200 W, auto shut-off, BPA free. Warranty: 2 years. " * 4,
    "Wireless noise cancelling headphones, over-ear, 2021, black.",
]
QUERY = "256GB phone 2023"


def forward_scores(
    model: GistReranker, rows: list[torch.Tensor], item_lens: torch.Tensor | None, tail: QueryTail
) -> torch.Tensor:
    """Scores of hand-built rows of embeddings that end in `tail`, through the model's own forward
    (gist mask when `item_lens`, else plain causal) and score rule."""
    with torch.no_grad():
        out, seq_lens = model._forward_rows(rows, item_lens)
        tails = model._tails(out.last_hidden_state, seq_lens, len(tail.targets))
        return model.tail_scores(tails, tail.targets)


@pytest.fixture(scope="session")
def tiny_bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny_bases")
    return {arch: build_tiny_base(root / arch, arch) for arch in ("llama", "qwen2")}


@pytest.fixture(scope="session")
def tiny_base(tiny_bases: dict[str, Path]) -> Path:
    return tiny_bases["llama"]


@pytest.fixture(scope="session")
def tiny_model(tiny_base: Path) -> GistReranker:
    """A tiny fp32 Llama GistReranker with k=4 (read-only: do not train or modify it in a test)."""
    return GistReranker.from_pretrained(tiny_base, GistConfig(num_gist=4, dtype="float32"), device="cpu")
