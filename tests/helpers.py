"""Shared test helpers (constants, fakes, builders); fixtures live in conftest.py.

Import as `from helpers import ...` (pytest puts tests/ on sys.path, as for tiny.py and services.py).
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from prometheus_client import REGISTRY

from reranker import Reranker
from reranker.catalog.database import Catalog
from reranker.catalog.events import ChangeEvent
from reranker.core.kv import StoredUnit
from reranker.core.layout import QueryTail
from reranker.core.render import render_item
from reranker.data.relevance_data import Item, Judgment, Query, RelevanceSet
from reranker.serving.lookup import ByteLRU, KVLookup, RefreshRequests
from reranker.store import LAST_USE_ID, GistRow, GistStore

# ------------------------------------------------------------------------------------ model inputs
ITEMS = [
    "Acme UltraPhone 15 Pro 256GB titanium blue, 2023 model, part number AP-15P-256-BL.",
    "kettle",
    "Stainless steel kettle 1.7 L, 2200 W, auto shut-off, BPA free. Warranty: 2 years. " * 4,
    "Wireless noise cancelling headphones, over-ear, 2021, black.",
]
QUERY = "256GB phone 2023"


def forward_scores(
    model: Reranker, rows: list[torch.Tensor], item_lens: torch.Tensor | None, tail: QueryTail
) -> torch.Tensor:
    """Scores of hand-built rows of embeddings that end in `tail`, through the model's own forward
    (gist mask when `item_lens`, else plain causal) and score rule."""
    with torch.no_grad():
        out, seq_lens = model.forward_rows(rows, item_lens)
        tails = model.tails(out.last_hidden_state, seq_lens, len(tail.targets))
        return model.tail_scores(tails, tail.targets)


# --------------------------------------------------------------------------------- catalog and store
# The `catalog` fixture's items: item id → (title, attributes, description).
CATALOG_ITEMS = {
    f"item-{n}": (f"{name} model {n}", {"year": 2020 + n % 4, "storage": f"{64 * (n % 3 + 1)}GB"}, desc)
    for n, (name, desc) in enumerate(
        [
            ("Acme phone", "A phone with a titanium frame."),
            ("Stainless kettle", "Boils 1.7 L quickly, auto shut-off."),
            ("Noise cancelling headphones", "Over-ear, black, 30 h battery."),
            ("Acme tablet", "11 inch screen, pen support."),
            ("USB-C cable", "Braided, 2 m, 100 W."),
            ("Phone case", "Blue silicone case for the Acme phone."),
        ]
    )
}


def text_of(catalog: Catalog, item_id: str) -> str:
    """The rendered text of catalog item `item_id` (what the model compresses)."""
    item = catalog.get([item_id])[item_id]
    return render_item(item.title, item.attributes, item.description)


def catalog_row(catalog: Catalog, item_id: str, kv: StoredUnit, blob: bytes | None = None) -> GistRow:
    """`item_id`'s row holding `kv`, under the item's current content hash and version.

    `blob` is stored in place of the encoded `kv`: a damaged or foreign blob behind truthful columns.
    """
    item = catalog.get([item_id])[item_id]
    row = GistRow.encode(item_id, kv, item.content_hash, item.version)
    return row if blob is None else dataclasses.replace(row, kv=blob)


class CountingStore(GistStore):
    """A real GistStore (real Feast online store) that counts its reads and writes: which lookups reach
    Feast, that serving never writes gist rows, and how often it notes its use of the view."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads = 0
        self.writes = 0
        self.uses = 0

    def read(self, item_ids: Sequence[str]) -> dict[str, GistRow | None]:
        self.reads += 1
        return super().read(item_ids)

    def write(self, rows: Sequence[GistRow]) -> Any:
        self.writes += any(r.item_id != LAST_USE_ID for r in rows)  # gist rows, not a note of use
        self.uses += any(r.item_id == LAST_USE_ID for r in rows)
        return super().write(rows)


# ----------------------------------------------------------------------------------------- serving
class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class RecordingSink:
    """Where a lookup's refresh requests go in unit tests: kept in order (`events`), or refused with
    `fail`. The path through a real broker to the consumer is tested in test_streaming / test_triton."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.events: list[ChangeEvent] = []
        self.fail = fail
        self.closed = False

    def send(self, event: ChangeEvent) -> None:
        if self.fail is not None:
            raise self.fail
        self.events.append(event)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def make_lookup(model, catalog, store=None, clock=None, l1_bytes=1 << 24):
    """A `KVLookup` over `model` and `catalog` (L1 TTL 60 s on `clock`) whose refresh requests are
    recorded: → (lookup, sink). `lookup.refresh.drain(t)` waits for them, `.close()` stops the thread."""
    clock = clock or FakeClock()
    sink = RecordingSink()
    refresh = RefreshRequests(lambda: sink)
    lookup = KVLookup(model, ByteLRU(l1_bytes, 60.0, clock), catalog, store, refresh, clock=clock)
    return lookup, sink


def wait_until(
    predicate: Callable[[], object], timeout_s: float = 60.0, what: str = "condition", every_s: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(every_s)


def alive(pid: int) -> bool:
    """Running: not gone and not a zombie waiting to be reaped (a container's init may never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def processes_naming(text: str) -> list[str]:
    """Command lines of the running processes that name `text` (a run folder, say)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError, PermissionError):
            continue
        if proc.name.isdigit() and text in cmdline and alive(int(proc.name)):
            found.append(cmdline)
    return found


def metric(name: str, **labels: str) -> float:
    """The in-process Prometheus sample `name{labels}`, 0 before its first use."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def bytes_array(values: list[object]) -> np.ndarray:
    """A 1-D object array of `values` as they are (Triton's BYTES tensor as the backend receives it)."""
    out = np.empty(len(values), dtype=np.object_)
    out[:] = values
    return out


def unboxed(output: str) -> str:
    """A usage error's message without the box rich draws around it (and without spaces)."""
    return "".join(c for c in output if c not in "│ \n")


def toy_set() -> RelevanceSet:
    """16 items of distinct words, 8 train and 4 test queries with 6 candidates each."""
    rng = random.Random(0)
    words = [
        "kettle",
        "phone",
        "laptop",
        "camera",
        "drill",
        "blender",
        "jacket",
        "tent",
        "lamp",
        "chair",
        "watch",
        "guitar",
        "bike",
        "helmet",
        "scarf",
        "mixer",
    ]
    colours = ["red", "blue", "green", "black"]
    items = {
        f"i{n}": Item(
            item_id=f"i{n}",
            title=f"{colours[n % 4]} {w}",
            description=f"A {colours[n % 4]} {w} made of steel. It ships in {n + 2} days. Sold by Acme.",
        )
        for n, w in enumerate(words)
    }
    queries, judgments = [], []
    for q in range(12):
        target = rng.randrange(16)
        cands = [target, *rng.sample([i for i in range(16) if i != target], 5)]
        queries.append(
            Query(
                query_id=f"q{q}",
                text=f"{colours[target % 4]} {words[target]}",
                split="train" if q < 8 else "test",
            )
        )
        judgments += [Judgment(query_id=f"q{q}", item_id=f"i{i}", label=int(i == target)) for i in cands]
    return RelevanceSet(items=items, queries=queries, judgments=judgments)


def mean_test_kl(model: Reranker, shadow: Reranker, data: RelevanceSet) -> float:
    """Mean list-wise KL to `shadow`'s full-context scores over the test split's lists, `model` read
    through the online path (its own compression, then `score`)."""
    from reranker.training.objectives import distill_loss

    test, kls = data.split("test"), []
    for q in test.queries:
        texts = [test.items[i].text for i, _ in test.candidates(q.query_id)]
        online = model.score(q.text, model.compress(texts))
        kls.append(float(distill_loss(online, shadow.score_full(q.text, texts), 1.0)))
    return sum(kls) / len(kls)
