"""Learned gist tokens (Mu et al. 2023): k trained inputs appended after the item; the stored unit is
their per-layer K/V (after the hybrid prefix), the query reads the item only through them.

    compression  item (0 … j-1) | gists (j … j+k-1), causal, left-padded → keep K/V of the first p
                 item slots and the k gist slots
    reference    item + gists + query under the gist mask (`Reranker.score_masked`)
    online       the query numbered from j + k: every query→gist distance is training's
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reranker.core.compressors.base import Compressor, Reader
from reranker.core.config import RerankerConfig
from reranker.core.kv import Kept


class GistCompressor(Compressor):
    name = "gist"
    learned = True

    @torch.inference_mode()
    def compress(
        self, model: Reader, item_ids: Sequence[list[int]], layouts: Sequence[RerankerConfig]
    ) -> list[dict[RerankerConfig, Kept]]:
        (own,) = self.check_layouts(model, layouts)
        k = own.num_gist
        rows = [torch.cat([model.embed(ids), model.gist_embeddings]) for ids in item_ids]
        # the gists run as a second forward on the item's cache: the gist adapter acts on them alone
        kvs = model.causal_kv(rows, [self.slots(model, len(ids)) for ids in item_ids], gist_rows=k)
        return [{own: Kept(kv)} for kv in kvs]

    @staticmethod
    def slots(model: Reader, item_tokens: int) -> torch.Tensor:
        """Positions an item of j tokens keeps: its first min(t, j) tokens, then the gists j … j+k-1."""
        p = min(model.gist.keep_item_prefix, item_tokens)
        gists = torch.arange(item_tokens, item_tokens + model.gist.num_gist)
        return torch.cat([torch.arange(p), gists]).to(model.device)

    def tail_slots(self, budget: int, item_tokens: int, prefix_tokens: int) -> int:
        return budget

    def query_start(self, budget: int, item_tokens: int, prefix_tokens: int) -> int:
        return item_tokens + budget

    def reference_scores(self, model: Reader, query: str, items: Sequence[str]) -> torch.Tensor:
        return model.score_masked(query, items)

    def recompute_tokens(self, item_tokens: int, budget: int, prefix_tokens: int) -> int:
        return item_tokens + budget
