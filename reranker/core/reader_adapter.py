"""Where reader parameters act: low-rank adapters on every attention and MLP projection, at query rows only.

The item comes first and never attends to the query, so the K/V of every item position depends only on
the weights that act on item rows. Parameters that act only at the query's rows (these adapters, and the
score head) therefore leave every stored unit exactly what the untouched body's compressor wrote:

    a retrained reader reads the same store         (the store's fingerprint excludes them: weights.py)
    a training step runs ℓ query rows               (over item K/V computed once, no gradient into it)
    the reader learns to read what is stored        (k positions, not the whole item it never sees online)

Per decoder layer l and projection W ∈ {q, k, v, o, gate, up, down}, at query rows only:

    W x ← W x + B_{l,W} A_{l,W} x        A (r, in), B (out, r); B starts at 0: a fresh adapter is the body

LoRA's update, restricted by rows (RRK, arXiv 2505.15394, trains a reader over a frozen compressor the
same way). Which rows are the query's is the caller's: every row of the online forward (only the query
runs there), the last ℓ real rows of each sequence in a reference forward that has the item in front
(`Reranker.forward_rows`). Compression forwards never enter `on_rows`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

_INIT_SEED = 3  # A is seeded: two fresh wraps of one base share a fingerprint
_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
TARGETS = (*_ATTENTION, "gate_proj", "up_proj", "down_proj")


def projections(layer: nn.Module) -> dict[str, nn.Module]:
    """A decoder layer's adapted projections by name (Llama, Qwen2, Gemma: self_attn.* and mlp.*)."""
    return {name: getattr(layer.self_attn if name in _ATTENTION else layer.mlp, name) for name in TARGETS}


class ReaderAdapter(nn.Module):
    def __init__(self, layers: nn.ModuleList, rank: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(_INIT_SEED)
        shapes = {name: (m.in_features, m.out_features) for name, m in projections(layers[0]).items()}
        n = len(layers)
        self.down = nn.ParameterDict(
            {
                name: nn.Parameter((torch.randn(n, rank, d_in, generator=g) / d_in**0.5).to(device, dtype))
                for name, (d_in, _) in shapes.items()
            }
        )  # (L, r, in) each
        self.up = nn.ParameterDict(
            {
                name: nn.Parameter(torch.zeros(n, d_out, rank, device=device, dtype=dtype))
                for name, (_, d_out) in shapes.items()
            }
        )  # (L, out, r) each

    def delta(self, layer: int, name: str, x: torch.Tensor) -> torch.Tensor:
        """B A x for a projection's inputs (…, in) → (…, out)."""
        return x @ self.down[name][layer].T @ self.up[name][layer].T

    @contextmanager
    def on_rows(self, layers: nn.ModuleList, rows: torch.Tensor | None) -> Iterator[None]:
        """Within the block, the projections of decoder `layers` add the adapter at `rows` — bool (N, S)
        of the forward's batch — or at every row (None)."""

        def hook(index: int, name: str) -> Callable[[nn.Module, tuple, torch.Tensor], torch.Tensor]:
            def add(_module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
                delta = self.delta(index, name, inputs[0])
                return output + (delta if rows is None else delta * rows[..., None].to(delta.dtype))

            return add

        handles = [
            module.register_forward_hook(hook(i, name))
            for i, layer in enumerate(layers)
            for name, module in projections(layer).items()
        ]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
