"""Budget sweeps: several stored-unit layouts of one training-free body compressed in one pass.

Selection and prefix caching need no trained parameter per layout, and their expensive part (the
item's forward, and selection's attention scores) does not depend on the budget k, on how much of it is
a raw prefix t, or on how selection shares columns among heads: a sweep pays for it once. The body's
compressor returns every layout from one forward (`Compressor.compress(model, ids, layouts)`: the
layouts differ from the body's settings only in the compressor's `sweepable` ones), and each layout's
reader — the same body under that layout, with the fingerprint serving would stamp — turns its columns
into stored units. A research harness, so it lives here and not in the serving model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from reranker.core.config import RerankerConfig
from reranker.core.kv import StoredUnit
from reranker.core.model import Reranker


def layout_reader(body: Reranker, layout: RerankerConfig) -> Reranker:
    """`body` set up to read `layout`: itself under its own settings, else the same weights (shared)."""
    return body if layout == body.gist else body.with_gist_config(layout)


def sweep_body(model: Reranker) -> Reranker:
    """`model` with the settings its compressor sweeps at their defaults: readers that give the same
    one (the same fingerprint) can share one compression pass."""
    defaults = {name: RerankerConfig.model_fields[name].default for name in model.compressor.sweepable}
    return layout_reader(model, RerankerConfig(**(model.gist.model_dump() | defaults)))


class BudgetSweep:
    """Layouts `layouts` of `body` (a select or prefix reader), compressed on first use, for every
    layout at once, and kept until `forget`."""

    def __init__(self, body: Reranker, layouts: Sequence[RerankerConfig], batch_size: int = 16) -> None:
        if body.compressor.learned:
            raise ValueError(f"a {body.compressor.name!r} model has one trained layout; nothing to sweep")
        self.body, self.batch_size = body, batch_size
        self.layouts = body.compressor.check_layouts(body, layouts)
        # one reader per layout: a fingerprint hashes every weight, so it is computed once per layout
        self.readers = {c: layout_reader(body, c) for c in self.layouts}
        self.done: dict[RerankerConfig, dict[str, StoredUnit]] = {c: {} for c in self.layouts}
        self.seconds, self.items = 0.0, 0  # the passes' wall time and the items they compressed

    def cost(self) -> tuple[float, int]:
        """(seconds, items) of the passes so far: what compressing an item costs any one layout."""
        return self.seconds, self.items

    def reader(self, layout: RerankerConfig) -> Reranker:
        return self.readers[layout]

    def compress(self, layout: RerankerConfig, texts: list[str]) -> list[StoredUnit]:
        """The stored units of `layout` for `texts` (each what `reader(layout).compress` gives)."""
        todo = [t for t in dict.fromkeys(texts) if t not in self.done[layout]]
        if todo:
            start_s = time.perf_counter()
            item_ids, truncated = self.body.item_ids(todo)
            order = sorted(range(len(todo)), key=lambda i: len(item_ids[i]))  # a batch pads little
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                per_item = self.body.compressor.compress(self.body, [item_ids[i] for i in idx], self.layouts)
                for i, by_layout in zip(idx, per_item, strict=True):
                    for asked, kv in by_layout.items():
                        reader = self.readers[asked]
                        unit = reader.stored_unit(kv, len(item_ids[i]), truncated[i])
                        self.done[asked][todo[i]] = reader.as_stored([unit])[0]
            self.seconds += time.perf_counter() - start_s
            self.items += len(todo)
        return [self.done[layout][t] for t in texts]

    def forget(self, texts: list[str]) -> None:
        for done in self.done.values():
            for text in texts:
                done.pop(text, None)
