"""`GistKV`: the stored unit, one per item — what `compress` produces, the store keeps and `score` reads.

It says what it holds: `kv` is `(L, 2, H_kv, p + s, h)` — for every layer, K (index 0) and V (index 1)
of the item's first `p = prefix_tokens` tokens (the hybrid prefix; 0 without one) followed by `s`
columns that `compressor` produced under budget `budget` (k): learned gists, selected item columns or
the next item tokens (`reranker/core/compressors/`). Keys are rotated by RoPE at the positions they
had when compressed, and `query_start` is where the query's first token sits relative to them, so a
reader never has to guess the layout. Bytes per item = `2·L·(p + s)·H_kv·h·b` (DESIGN §4).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GistKV:
    kv: torch.Tensor  # (L, 2, H_kv, p + s, h)
    fingerprint: str  # model that produced it; any other model must refuse it
    compressor: str  # what the s columns after the prefix are: "gist", "select", "prefix", …
    budget: int  # k the compressor was given (s ≤ k: a short item may leave fewer columns)
    item_tokens: int  # j, after truncation
    query_start: int  # position id of the query's first token
    prefix_tokens: int = 0  # p raw item tokens first (positions 0 … p-1)
    truncated: bool = False  # the item text was longer than max_item_tokens

    @property
    def num_layers(self) -> int:
        return self.kv.shape[0]

    @property
    def positions(self) -> int:
        """Stored positions p + s."""
        return self.kv.shape[3]

    @property
    def tail_slots(self) -> int:
        """s: stored columns after the prefix."""
        return self.positions - self.prefix_tokens

    @property
    def dtype(self) -> torch.dtype:
        return self.kv.dtype

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()
