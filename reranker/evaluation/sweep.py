"""Budget sweeps: several budgets k of one training-free body compressed in one pass.

Selection and prefix caching need no trained parameter per budget, and their expensive part (the
item's forward) does not depend on k, so a sweep over k pays for it once: the body's compressor
returns every budget from one forward (`Compressor.compress(model, ids, budgets)`), and each budget's
reader — the same body set up for that k, with the fingerprint serving would stamp — turns its columns
into stored units. A research harness, so it lives here and not in the serving model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from reranker.core.config import GistConfig
from reranker.core.kv import GistKV
from reranker.core.model import GistReranker


def budget_reader(body: GistReranker, k: int) -> GistReranker:
    """`body` set up to read budget k: itself at its own k, else the same weights (shared) under
    num_gist = k."""
    if k == body.gist.num_gist:
        return body
    return body.with_gist_config(GistConfig(**(body.gist.model_dump() | {"num_gist": k})))


class BudgetSweep:
    """Budgets `budgets` of `body` (a select or prefix reader), compressed on first use, for every
    budget at once, and kept until `forget`."""

    def __init__(self, body: GistReranker, budgets: Sequence[int], batch_size: int = 16) -> None:
        if body.compressor.learned:
            raise ValueError(f"a {body.compressor.name!r} model has one trained budget; nothing to sweep")
        self.body, self.budgets, self.batch_size = body, sorted(set(budgets)), batch_size
        # one reader per k: a fingerprint hashes every weight, so it is computed once per budget
        self.readers = {k: budget_reader(body, k) for k in self.budgets}
        self.done: dict[int, dict[str, GistKV]] = {k: {} for k in self.budgets}
        self.seconds, self.items = 0.0, 0  # the passes' wall time and the items they compressed

    def cost(self) -> tuple[float, int]:
        """(seconds, items) of the passes so far: what compressing an item costs any one budget."""
        return self.seconds, self.items

    def reader(self, k: int) -> GistReranker:
        return self.readers[k]

    def compress(self, k: int, texts: list[str]) -> list[GistKV]:
        """The stored units of budget k for `texts` (each what `reader(k).compress` gives)."""
        todo = [t for t in dict.fromkeys(texts) if t not in self.done[k]]
        if todo:
            start_s = time.perf_counter()
            item_ids, truncated = self.body.item_ids(todo)
            order = sorted(range(len(todo)), key=lambda i: len(item_ids[i]))  # a batch pads little
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                per_item = self.body.compressor.compress(self.body, [item_ids[i] for i in idx], self.budgets)
                for i, by_budget in zip(idx, per_item, strict=True):
                    for budget, kv in by_budget.items():
                        unit = self.readers[budget].stored_unit(kv, len(item_ids[i]), truncated[i])
                        self.done[budget][todo[i]] = unit
            self.seconds += time.perf_counter() - start_s
            self.items += len(todo)
        return [self.done[k][t] for t in texts]

    def forget(self, texts: list[str]) -> None:
        for done in self.done.values():
            for text in texts:
                done.pop(text, None)
