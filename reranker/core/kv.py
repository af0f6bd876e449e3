"""`StoredUnit`: the stored unit, one per item — what `compress` produces, the store keeps and `score` reads.

It says what it holds: `kv` is `(L, 2, H_kv, p + s, h)` — for every layer, K (index 0) and V (index 1)
of the item's first `p = prefix_tokens` tokens (the hybrid prefix; 0 without one) followed by `s`
columns that `compressor` produced under budget `budget` (k): learned gists, selected item columns or
the next item tokens (`reranker/core/compressors/`). Keys are rotated by RoPE at the positions they
had when compressed, and `query_start` is where the query's first token sits relative to them, so a
reader never has to guess the layout. Bytes per item = `2·L·(p + s)·H_kv·h·b` (DESIGN §4).

Per-head budgets (`head_tails`, selection with `select_head_budget="adaptive"`, Ada-KV): each layer
still keeps H_kv·s tail columns, but its KV heads share them unevenly — head (l, h) keeps
`head_tails[l][h]` of them. In memory `kv` is then `(L, 2, H_kv, p + S, h)` with S = the largest
head's share: each head's real columns first, pad after them, which the online mask hides per layer
and head; the codec stores only the real columns, so the bytes stay `2·L·(p + s)·H_kv·h·b`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

HeadTails = tuple[tuple[int, ...], ...]  # (L, H_kv): tail columns each layer's KV head keeps


def held_columns(prefix_tokens: int, tail_lens: torch.Tensor) -> torch.Tensor:
    """(L, H_kv) tail columns per head → (L, H_kv, p + S) bool, S the widest: which columns of a unit's
    `kv` hold stored K/V (each head's prefix and share first), not per-head pad."""
    return torch.arange(prefix_tokens + int(tail_lens.max()), device=tail_lens.device) < (
        prefix_tokens + tail_lens[..., None]
    )


class Kept(NamedTuple):
    """What a compressor produces for one item and budget, before it is stamped as a `StoredUnit`."""

    kv: torch.Tensor  # (L, 2, H_kv, p + S, h)
    head_tails: HeadTails | None = None  # per-head budgets; None: every head keeps all S columns


@dataclass(frozen=True)
class StoredUnit:
    kv: torch.Tensor  # (L, 2, H_kv, p + S, h); S = s unless head_tails says otherwise
    fingerprint: str  # model that produced it; any other model must refuse it
    compressor: str  # what the s columns after the prefix are: "gist", "select", "prefix", …
    budget: int  # k the compressor was given (s ≤ k: a short item may leave fewer columns)
    item_tokens: int  # j, after truncation
    query_start: int  # position id of the query's first token
    prefix_tokens: int = 0  # p raw item tokens first (positions 0 … p-1)
    truncated: bool = False  # the item text was longer than max_item_tokens
    head_tails: HeadTails | None = None  # per-head budgets (module docstring); None: every head keeps s

    def __post_init__(self) -> None:
        if self.head_tails is None:
            return
        layers, _, heads, slots, _ = self.kv.shape
        shares = self.head_tails
        if len(shares) != layers or any(len(layer) != heads for layer in shares):
            raise ValueError(f"head_tails is not ({layers}, {heads}) like the K/V's layers and heads")
        totals = {sum(layer) for layer in shares}
        widest = max(max(layer) for layer in shares)
        if len(totals) != 1 or totals.pop() % heads or min(min(layer) for layer in shares) < 0:
            raise ValueError("head_tails must give every layer the same H_kv·s columns")
        if self.prefix_tokens + widest != slots:
            tail = slots - self.prefix_tokens
            raise ValueError(f"head_tails' widest head keeps {widest} columns, the K/V has {tail}")

    @property
    def num_layers(self) -> int:
        return self.kv.shape[0]

    @property
    def slots(self) -> int:
        """Columns per head in `kv`: p + s, or p + the widest head's share under per-head budgets."""
        return self.kv.shape[3]

    @property
    def tail_slots(self) -> int:
        """s: stored columns after the prefix (per head on average under per-head budgets)."""
        if self.head_tails is None:
            return self.slots - self.prefix_tokens
        return sum(self.head_tails[0]) // len(self.head_tails[0])

    @property
    def positions(self) -> int:
        """Stored positions p + s per head."""
        return self.prefix_tokens + self.tail_slots

    def tail_lens(self) -> torch.Tensor:
        """(L, H_kv) real tail columns of each layer's KV head."""
        if self.head_tails is None:
            return torch.full((self.num_layers, self.kv.shape[2]), self.tail_slots, dtype=torch.long)
        return torch.tensor(self.head_tails, dtype=torch.long)

    def real_columns(self) -> torch.Tensor:
        """(L, H_kv, p + S) bool: which columns of `kv` hold stored K/V (not per-head pad)."""
        return held_columns(self.prefix_tokens, self.tail_lens())

    @property
    def dtype(self) -> torch.dtype:
        return self.kv.dtype

    @property
    def nbytes(self) -> int:
        """Bytes `kv` holds in memory (per-head pad included: what a cache of units holds)."""
        return self.kv.numel() * self.kv.element_size()

    @property
    def stored_nbytes(self) -> int:
        """Bytes of the stored K/V: 2·L·H_kv·(p + s)·h·b (per-head pad is not stored)."""
        layers, _, heads, _, head_dim = self.kv.shape
        return 2 * layers * heads * self.positions * head_dim * self.kv.element_size()
