"""`gistrank demo` (core part): compress the sample catalog, rank the sample queries both ways."""

from __future__ import annotations

import time

import torch
from rich.console import Console
from rich.table import Table

from reranker.catalog.sample import sample_catalog, sample_queries
from reranker.core.checkpoints import is_checkpoint
from reranker.core.model import Reranker
from reranker.core.render import render_item


def _ranking(ids: list[str], scores: torch.Tensor, top: int) -> list[str]:
    order = torch.argsort(scores, descending=True)[:top].tolist()
    return [f"{ids[i]} ({scores[i]:+.2f})" for i in order]


def run_core_demo(
    base: str,
    num_gist: int | None = None,
    dtype: str | None = None,
    top: int = 5,
    compressor: str | None = None,
    max_item_tokens: int | None = None,
) -> None:
    """`base` read as the pipeline demo reads it (`Reranker.read`)."""
    console = Console()
    start = time.perf_counter()
    model = Reranker.read(base, dtype, compressor, num_gist, max_item_tokens)
    trained = is_checkpoint(base)
    g = model.gist
    console.print(
        f"loaded [bold]{base}[/] on {model.device} in {time.perf_counter() - start:.1f}s — "
        f"{model.num_layers} layers, {model.num_kv_heads} KV heads × {model.head_dim}, k={g.num_gist}, "
        f"t={g.keep_item_prefix}, {g.compressor}, K/V stored as {g.storage}, fingerprint {model.fingerprint}"
    )
    catalog = sample_catalog()
    ids = [item["item_id"] for item in catalog]
    texts = [render_item(item["title"], item["attributes"], item["description"]) for item in catalog]

    start = time.perf_counter()
    kvs = model.compress(texts, progress=True)
    compress_s = time.perf_counter() - start
    item_tokens = [kv.item_tokens for kv in kvs]
    per_position = kvs[0].stored_nbytes / kvs[0].positions
    console.print(
        f"compressed {len(kvs)} items ({min(item_tokens)}–{max(item_tokens)} tokens) in {compress_s:.1f}s → "
        f"{kvs[0].stored_nbytes / 1024:.0f} KiB of cached K/V per item instead of "
        f"{sum(item_tokens) / len(kvs) * per_position / 1024:.0f} KiB for the item's own K/V"
    )
    gist_total = full_total = 0.0
    for query in sample_queries():
        start = time.perf_counter()
        gist_scores = model.score(query, kvs)
        gist_s = time.perf_counter() - start
        start = time.perf_counter()
        with torch.inference_mode():
            full_scores = model.score_full(query, texts)
        full_s = time.perf_counter() - start
        gist_total, full_total = gist_total + gist_s, full_total + full_s
        table = Table(title=f"query: {query!r}", title_justify="left")
        table.add_column(f"stored K/V ({g.compressor}) score() — {gist_s * 1000:.0f} ms")
        table.add_column(f"full-context score_full() — {full_s * 1000:.0f} ms")
        for stored_row, full_row in zip(
            _ranking(ids, gist_scores, top), _ranking(ids, full_scores, top), strict=True
        ):
            table.add_row(stored_row, full_row)
        console.print(table)
    console.print(
        f"online time for {len(ids)} candidates × {len(sample_queries())} queries: "
        f"stored K/V {gist_total:.2f}s, full {full_total:.2f}s ({full_total / gist_total:.1f}× faster)."
    )
    if trained or not model.compressor.learned:
        return
    console.print(
        "[yellow]The head and gists of a freshly wrapped base are untrained: rankings above show the "
        "mechanics and timings, not relevance. Pass a trained checkpoint with --base for that.[/]"
    )
