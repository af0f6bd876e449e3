"""Where gist-only parameters act: a low-rank residual adapter applied to gist rows and nothing else.

A frozen reader (the untouched base, or the LoRA teacher) reads the item and the query; the k gist
positions alone run with extra parameters, so the item's K/V never depends on them (it can be
computed once and cached, and training back-propagates through k + ℓ positions, not j) and the query
is read exactly as the reader reads it (Activation Beacon's split: the LLM stays frozen, only what
acts at the compression tokens is trained).

Per decoder layer l < L-1, on the residual stream of gist rows only:

    h_l ← h_l + B_l A_l h_l        A_l (r, D), B_l (D, r); B starts at 0, so a fresh adapter is the reader

The last layer's output feeds no K/V (the stored unit is each layer's K/V, computed from that layer's
input), so it has no adapter. Which rows are gists is the caller's: every row of a forward that runs
gists alone (compression's second stage, training), the slots j … j+k-1 of a forward that runs item +
gists + query (the reference, `Reranker.score_masked`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

_INIT_SEED = 2  # A is seeded: two fresh wraps of one base share a fingerprint


class GistAdapter(nn.Module):
    def __init__(
        self, num_layers: int, hidden: int, rank: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(_INIT_SEED)
        adapted = num_layers - 1  # the last layer's output feeds no stored K/V
        down = torch.randn(adapted, rank, hidden, generator=g) / hidden**0.5
        self.down = nn.Parameter(down.to(device, dtype))
        self.up = nn.Parameter(torch.zeros(adapted, hidden, rank, device=device, dtype=dtype))

    def delta(self, layer: int, hidden: torch.Tensor) -> torch.Tensor:
        """B_l A_l h for hidden states (…, D) → (…, D)."""
        return hidden @ self.down[layer].T @ self.up[layer].T

    @contextmanager
    def on_rows(self, layers: nn.ModuleList, rows: torch.Tensor | None) -> Iterator[None]:
        """Within the block, decoder `layers` add the adapter at `rows` — bool (N, S) of the forward's
        batch — or at every row (None)."""

        def hook(index: int) -> Callable[[nn.Module, tuple, torch.Tensor], torch.Tensor]:
            def add(_module: nn.Module, _inputs: tuple, output: torch.Tensor) -> torch.Tensor:
                delta = self.delta(index, output)
                return output + (delta if rows is None else delta * rows[..., None].to(delta.dtype))

            return add

        handles = [layer.register_forward_hook(hook(i)) for i, layer in enumerate(layers[:-1])]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
