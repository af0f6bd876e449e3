"""Training-throughput benchmark of query packing: student pairs/s, forward + backward, of one row per
(query, item) pair (`score_masked` per query, the unpacked trainer) against one row per item holding m
queries (`score_packed`, `TrainConfig.pack_queries`), on the same synthetic items and queries. The
unpacked side backpropagates query by query (gradient accumulation), so it never holds more than one
query's activations.

Per pair the unpacked row runs j + k + ℓ positions, the packed row (j + k + mℓ)/m, so the ideal
speed-up (linear cost, attention's quadratic term ignored) is m(j + k + ℓ)/(j + k + mℓ).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch
from rich.console import Console
from tqdm.auto import tqdm

from reranker.bench.harness import model_meta
from reranker.core.config import RerankerConfig, resolve_dtype
from reranker.core.model import Reranker
from reranker.data.data_synth import generate
from reranker.evaluation.tables import publish
from reranker.training.forwards import score_packed


def _seconds(step: Callable[[], None], repeats: int) -> float:
    """Mean seconds of `step` (forwards and backwards) over `repeats` runs."""
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - start) / repeats


def run_packing_bench(
    base: str,
    items: int,
    queries_per_item: list[int],
    num_gist: int,
    max_item_tokens: int,
    lora_rank: int,
    dtype: str,
    repeats: int,
    out: Path,
) -> list[dict]:
    console = Console()
    dtype = resolve_dtype(dtype)
    gist = RerankerConfig(num_gist=num_gist, dtype=dtype, max_item_tokens=max_item_tokens)
    model = Reranker.from_pretrained(base, gist)
    if lora_rank:
        model.add_lora(lora_rank, alpha=2.0 * lora_rank)
    model.train()
    data = generate(0, max(10, items), queries_per_product=4, length_tokens=(100, max(120, max_item_tokens)))
    texts = [item.text for item in list(data.items.values())[:items]]
    queries = [q.text for q in data.queries[: max(queries_per_item)]]
    item_ids, _ = model.item_ids(texts)
    mean_j = sum(len(ids) for ids in item_ids) / len(item_ids)
    model.score_masked(queries[0], texts).sum().backward()  # warm-up: first-call allocations
    rows = []
    for m in tqdm(queries_per_item, desc="queries per item", unit="m"):
        qs = queries[:m]
        mean_ell = sum(model.tail_length(q) for q in qs) / m

        def unpacked(qs: list[str] = qs) -> None:
            for q in qs:  # backward per query (gradient accumulation): one query's activations at a time
                model.score_masked(q, texts).sum().backward()

        def packed(qs: list[str] = qs) -> None:
            torch.stack([s.sum() for s in score_packed(model, texts, [qs] * len(texts))]).sum().backward()

        pairs = m * len(texts)
        plain_rate = pairs / _seconds(unpacked, repeats)
        packed_rate = pairs / _seconds(packed, repeats)
        span = mean_j + num_gist
        ideal = m * (span + mean_ell) / (span + m * mean_ell)
        rows.append(
            {
                "queries_per_item": m,
                "items": len(texts),
                "mean_item_tokens": mean_j,
                "mean_online_tokens": mean_ell,
                "unpacked_pairs_per_s": plain_rate,
                "packed_pairs_per_s": packed_rate,
                "speedup": packed_rate / plain_rate,
                "ideal_speedup": ideal,
            }
        )
    title = (
        f"training pairs/s, forward + backward — {len(texts)} items, j̄={mean_j:.0f}, k={num_gist}, "
        f"LoRA r={lora_rank}, {dtype}, {model.device}"
    )
    columns = ("queries/item", "unpacked pairs/s", "packed pairs/s", "speed-up", "ideal")
    cells = [
        [
            str(r["queries_per_item"]),
            f"{r['unpacked_pairs_per_s']:.2f}",
            f"{r['packed_pairs_per_s']:.2f}",
            f"{r['speedup']:.2f}x",
            f"{r['ideal_speedup']:.2f}x",
        ]
        for r in rows
    ]
    publish(console, title, columns, cells, model_meta(base, model, dtype), rows, out)
    return rows
