"""`GistKV`: the per-item unit of the cache — what `compress` produces and `score` consumes.

Layout of `kv`: `(L, 2, H_kv, p + k, h)` — for every layer, K (index 0) and V (index 1) of the item's
first `p = prefix_tokens` tokens (hybrid `keep_item_prefix`; 0 for pure gisting) followed by the `k`
gist positions, keys already rotated by RoPE at their training positions `0 … p-1` and
`item_tokens … item_tokens+k-1`. Bytes per item = `2·L·(p + k)·H_kv·h·b` (DESIGN §4).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GistKV:
    kv: torch.Tensor  # (L, 2, H_kv, p + k, h)
    fingerprint: str  # model that produced it; any other model must refuse it
    item_tokens: int  # j, after truncation; the gists were at positions j … j+k-1
    truncated: bool = False  # the item text was longer than max_item_tokens
    prefix_tokens: int = 0  # p raw item tokens kept in front of the gists (positions 0 … p-1)

    @property
    def num_layers(self) -> int:
        return self.kv.shape[0]

    @property
    def num_gist(self) -> int:
        return self.kv.shape[3] - self.prefix_tokens

    @property
    def gist_start(self) -> int:
        """Position id of the first gist; the query starts at `gist_start + num_gist`."""
        return self.item_tokens

    @property
    def dtype(self) -> torch.dtype:
        return self.kv.dtype

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()
