"""`Compressor`: what an item's stored K/V holds, and everything that depends on it.

A stored unit is the per-layer K/V of a fixed budget of positions per item: the first p = min(t, j)
item tokens (t = `keep_item_prefix`, the hybrid prefix) followed by s ≤ k more columns (k =
`num_gist`, the budget). What the s columns are is the compressor's: learned gist tokens after the
item (`gist.py`), the item columns attention selects (`select.py`), or simply the next item tokens
(`prefix.py`). Each compressor owns, for its kind:

    compress            item token ids → per item and budget, the stored K/V (L, 2, H_kv, p + s, h)
                        (and each head's share, when heads keep different numbers: `kv.Kept`)
    tail_slots          s, the columns after the prefix that a valid unit of budget k holds
    query_start         the position id of the query's first token (RoPE distances as at compression)
    online_mask         what the query may read among the injected columns
    reference_scores    the full-sequence forward that `score(query, compress(items))` must equal
    recompute_tokens    positions a cache miss's compression forward runs (capacity planning)

`GistReranker` is one reader (body + score rule + compressor) and asks its compressor; nothing else
branches on the compressor's name. Adding a compressor is one module here, one line in the registry
(`__init__.py`) and one row in the parametrised equivalence test.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import torch

from reranker.core import layout
from reranker.core.kv import Kept

if TYPE_CHECKING:
    from reranker.core.model import GistReranker


class Compressor(ABC):
    name: ClassVar[str]
    # the stored columns are trained parameters' outputs: a model has one budget, no training-free sweep
    learned: ClassVar[bool] = False
    # GistConfig settings that only this compressor reads (a model reference naming another one refuses them)
    settings: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def compress(
        self, model: GistReranker, item_ids: Sequence[list[int]], budgets: Sequence[int]
    ) -> list[dict[int, Kept]]:
        """Per item, per budget k: the stored K/V (L, 2, H_kv, p + s, h) in the model's K/V dtype, with
        each head's share of the columns where heads keep different numbers (`Kept`). Every budget
        comes out of one pass over the items where the compressor allows it."""

    @abstractmethod
    def tail_slots(self, budget: int, item_tokens: int, prefix_tokens: int) -> int:
        """s: columns after the prefix a valid unit of budget k for an item of j tokens holds."""

    @abstractmethod
    def query_start(self, budget: int, item_tokens: int, prefix_tokens: int) -> int:
        """Position id of the query's first token: where it sat in the forward the unit was cut from."""

    @abstractmethod
    def reference_scores(self, model: GistReranker, query: str, items: Sequence[str]) -> torch.Tensor:
        """The full-sequence forward (items present) the online path must equal → (N,) scores."""

    @abstractmethod
    def recompute_tokens(self, item_tokens: int, budget: int, prefix_tokens: int) -> int:
        """Positions the compression forward of one item runs (what a cache miss costs)."""

    def online_mask(
        self,
        prefix_lens: torch.Tensor,
        prefix_slots: int,
        tail_lens: torch.Tensor,
        tail_slots: int,
        query_len: int,
    ) -> torch.Tensor:
        """The query against injected columns → bool (N, ℓ, P + K + ℓ): every real stored column
        visible, pad slots never, causal over the query (`layout.online_mask`)."""
        return layout.online_mask(prefix_lens, prefix_slots, tail_lens, tail_slots, query_len)

    def check_budgets(self, model: GistReranker, budgets: Sequence[int]) -> list[int]:
        """`budgets` sorted and deduplicated; refused when not positive, or (learned slots) not the
        model's own k."""
        ks = sorted(set(budgets))
        if not ks or min(ks) < 1:
            raise ValueError(f"budgets must be positive integers, got {list(budgets)}")
        if self.learned and ks != [model.gist.num_gist]:
            raise ValueError(f"trained gists have k={model.gist.num_gist}; cannot compress to k={ks}")
        return ks
