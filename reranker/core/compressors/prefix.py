"""Prefix caching cut to the budget: the stored unit is the K/V of the item's first t + k tokens, read
as if the item ended there. No training, no extra parameter; exact title and key fields (rendered
first) survive, everything after the budget is gone.

    compression  the item's first min(t + k, j) tokens, causal → keep every slot
    reference    the full-context forward of (the item cut to t + k tokens) + query
    online       the query numbered right after the stored tokens
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reranker.core.compressors.base import Compressor, Reader
from reranker.core.config import RerankerConfig
from reranker.core.kv import Kept


class PrefixCompressor(Compressor):
    name = "prefix"
    sweepable = ("num_gist", "keep_item_prefix")

    @torch.inference_mode()
    def compress(
        self, model: Reader, item_ids: Sequence[list[int]], layouts: Sequence[RerankerConfig]
    ) -> list[dict[RerankerConfig, Kept]]:
        layouts = self.check_layouts(model, layouts)
        widest = max(c.keep_item_prefix + c.num_gist for c in layouts)
        kept = [ids[:widest] for ids in item_ids]
        slots = [torch.arange(len(ids), device=model.device) for ids in kept]
        kvs = model.causal_kv([model.embed(ids) for ids in kept], slots)  # the widest layout's columns
        # causal: the first t + k columns of the widest layout's forward are a narrower layout's own
        return [{c: Kept(kv[:, :, :, : c.keep_item_prefix + c.num_gist]) for c in layouts} for kv in kvs]

    def tail_slots(self, budget: int, item_tokens: int, prefix_tokens: int) -> int:
        return min(budget, item_tokens - prefix_tokens)

    def query_start(self, budget: int, item_tokens: int, prefix_tokens: int) -> int:
        return prefix_tokens + self.tail_slots(budget, item_tokens, prefix_tokens)

    def verbatim_tokens(self, gist: RerankerConfig) -> int:
        return gist.keep_item_prefix + gist.num_gist  # the first t + k tokens are the whole unit

    def reference_scores(self, model: Reader, query: str, items: Sequence[str]) -> torch.Tensor:
        n = self.verbatim_tokens(model.gist)
        item_ids, _ = model.item_ids(items)
        return model.score_full_ids(query, [ids[:n] for ids in item_ids])

    def recompute_tokens(self, item_tokens: int, budget: int, prefix_tokens: int) -> int:
        return min(item_tokens, prefix_tokens + budget)
