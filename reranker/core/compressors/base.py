"""`Compressor`: what an item's stored K/V holds, and everything that depends on it.

A stored unit is the per-layer K/V of a fixed budget of positions per item: the first p = min(t, j)
item tokens (t = `keep_item_prefix`, the hybrid prefix) followed by s ≤ k more columns (k =
`num_gist`, the budget). What the s columns are is the compressor's: learned gist tokens after the
item (`gist.py`), the item columns attention selects (`select.py`), or simply the next item tokens
(`prefix.py`). Each compressor owns, for its kind:

    compress            item token ids → per item and layout, the stored K/V (L, 2, H_kv, p + s, h)
                        (and each head's share, when heads keep different numbers: `kv.Kept`);
                        one pass serves every layout that differs only in the `sweepable` settings
    tail_slots          s, the columns after the prefix that a valid unit of budget k holds
    query_start         the position id of the query's first token (RoPE distances as at compression)
    online_mask         what the query may read among the injected columns
    reference_scores    the full-sequence forward that `score(query, compress(items))` must equal
    recompute_tokens    positions a cache miss's compression forward runs (capacity planning)

`Reranker` is one reader (body + score rule + compressor) and asks its compressor; nothing else
branches on the compressor's name. A compressor sees the model through `Reader`, the part of it a
compressor calls, so this package sits below the model and never imports it. Adding a compressor is
one module here, one line in the registry (`__init__.py`) and one row in the parametrised equivalence
test.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from reranker.core import layout
from reranker.core.config import COMPRESSOR_SETTINGS, RerankerConfig
from reranker.core.kv import Kept
from reranker.core.layout import QueryTail


class Reader(Protocol):
    """What a compressor uses of the model it compresses for (`Reranker` is the one there is): its
    settings and body, and the forwards the compressions and their references run."""

    gist: RerankerConfig
    lm: nn.Module
    tokenizer: PreTrainedTokenizerBase
    num_layers: int
    num_kv_heads: int
    gist_embeddings: nn.Parameter  # (k, D)

    @property
    def device(self) -> torch.device: ...
    @property
    def dtype(self) -> torch.dtype: ...
    @property
    def kv_dtype(self) -> torch.dtype: ...
    def base_lm(self) -> nn.Module: ...
    def attention_modules(self) -> list[nn.Module]: ...
    def embed(self, ids: list[int]) -> torch.Tensor: ...
    def item_ids(self, items: Sequence[str]) -> tuple[list[list[int]], list[bool]]: ...
    def causal_kv(
        self, rows: list[torch.Tensor], slots: list[torch.Tensor], gist_rows: int = 0
    ) -> list[torch.Tensor]: ...
    def left_padded_forward(
        self,
        rows: list[torch.Tensor],
        tail_rows: int = 0,
        tail_mode: Callable[[], AbstractContextManager] = ...,
        gist_tail: bool = False,
    ) -> tuple[Any, list[int]]: ...
    def forward_rows(
        self, rows: list[torch.Tensor], item_lens: torch.Tensor | None, tail_len: int = 0, **outputs: bool
    ) -> tuple[Any, torch.Tensor]: ...
    def layer_masks(self, masks: Sequence[torch.Tensor]) -> AbstractContextManager[None]: ...
    def tail_rows(
        self, query: str, items: Sequence[str], full: bool
    ) -> tuple[list[torch.Tensor], list[list[int]], QueryTail]: ...
    @staticmethod
    def tails(hidden: torch.Tensor, seq_lens: torch.Tensor, tail_len: int) -> torch.Tensor: ...
    def tail_scores(
        self, tail: torch.Tensor, targets: torch.Tensor, lens: torch.Tensor | None = None
    ) -> torch.Tensor: ...
    def score_masked(self, query: str, items: Sequence[str]) -> torch.Tensor: ...
    def score_full_ids(self, query: str, item_ids: list[list[int]]) -> torch.Tensor: ...


class Compressor(ABC):
    name: ClassVar[str]
    # the stored columns are trained parameters' outputs: a model has one budget, no training-free sweep
    learned: ClassVar[bool] = False

    # the settings whose values one compression pass can serve several of (a training-free sweep over
    # budgets, hybrid prefixes, per-head shares): the item's forward does not depend on them
    sweepable: ClassVar[tuple[str, ...]] = ()

    @property
    def settings(self) -> tuple[str, ...]:
        """The RerankerConfig settings only this compressor reads (`config.COMPRESSOR_SETTINGS`)."""
        return COMPRESSOR_SETTINGS[self.name]

    @abstractmethod
    def compress(
        self, model: Reader, item_ids: Sequence[list[int]], layouts: Sequence[RerankerConfig]
    ) -> list[dict[RerankerConfig, Kept]]:
        """Per item, per layout (the model's settings, or the same with other `sweepable` values): the
        stored K/V (L, 2, H_kv, p + s, h) in the model's K/V dtype, with each head's share of the
        columns where heads keep different numbers (`Kept`). Every layout comes out of one pass."""

    @abstractmethod
    def tail_slots(self, budget: int, item_tokens: int, prefix_tokens: int) -> int:
        """s: columns after the prefix a valid unit of budget k for an item of j tokens holds."""

    def verbatim_tokens(self, gist: RerankerConfig) -> int:
        """Item tokens (BOS included) a unit keeps as they are, from the item's start: the hybrid prefix t."""
        return gist.keep_item_prefix

    @abstractmethod
    def query_start(self, budget: int, item_tokens: int, prefix_tokens: int) -> int:
        """Position id of the query's first token: where it sat in the forward the unit was cut from."""

    @abstractmethod
    def reference_scores(self, model: Reader, query: str, items: Sequence[str]) -> torch.Tensor:
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

    def check_layouts(self, model: Reader, layouts: Sequence[RerankerConfig]) -> list[RerankerConfig]:
        """`layouts` deduplicated; refused when empty, or when one differs from the model's settings in
        anything but this compressor's `sweepable` ones (trained slots: in anything) and `kv_storage`
        (how the store keeps the columns, never what they are: every compressor's pass serves any)."""
        out = list(dict.fromkeys(layouts))
        if not out:
            raise ValueError("no layout to compress")
        own = model.gist.model_dump()
        for asked in out:
            for name, value in asked.model_dump().items():
                if value != own[name] and name not in (*self.sweepable, "kv_storage"):
                    lead = (
                        "trained gists have one layout"
                        if self.learned
                        else f"one {self.name} pass varies only {', '.join(self.sweepable)}"
                    )
                    raise ValueError(f"{lead}: asked {name}={value!r}, the model has {own[name]!r}")
        return out
