"""Training-throughput benchmark of the two gist recipes, same machine, same run, same lists: (item,
query) pairs trained per CPU-second.

    every position   `Trainer` (student, LoRA on the body): each step runs item + gists + query for every
                     pair, forward and backward through all j + k + ℓ positions
    frozen reader    `FrozenGistTrainer`: the reader's item K/V computed once per item (timed apart, and
                     amortised over the epochs a run makes), each step back-propagates through the k gist
                     rows and the ℓ query rows only

CPU seconds are process time (all threads), so the ratio does not depend on how busy the machine is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from reranker.bench.harness import model_meta, publish
from reranker.core.config import GistConfig, resolve_dtype
from reranker.training.data_synth import generate
from reranker.training.frozen_reader import FrozenGistConfig, FrozenGistTrainer
from reranker.training.trainer import TrainConfig, Trainer


def _cpu_seconds(step: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of `repeats` calls of `step`."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(repeats):
        step()
    return time.process_time() - cpu, time.perf_counter() - wall


def run_training_bench(
    base: str,
    num_gist: int,
    item_tokens: int,
    lists: int,
    candidates: int,
    lora_rank: int,
    adapter_rank: int,
    dtype: str,
    steps: int,
    out: Path,
    workdir: Path,
) -> list[dict]:
    console = Console()
    dtype = resolve_dtype(dtype)
    data = generate(
        0, 4, queries_per_product=2, n_candidates=candidates, length_tokens=(item_tokens, item_tokens + 1)
    )
    gist = GistConfig(num_gist=num_gist, dtype=dtype, max_item_tokens=item_tokens)
    old = Trainer(
        TrainConfig(
            base=base,
            gist=gist,
            steps=steps + 1,
            queries_per_step=lists,
            candidates_per_query=candidates,
            lora_rank=lora_rank,
            lora_alpha=2.0 * lora_rank,
        ),
        data,
        workdir / "every-position",
    )
    old.train_step()  # warm-up: first-call allocations
    old_cpu, old_wall = _cpu_seconds(old.train_step, steps)
    new = FrozenGistTrainer(
        FrozenGistConfig(
            reader=base,  # the frozen reader: the untouched base
            num_gist=num_gist,
            adapter_rank=adapter_rank,
            max_item_tokens=item_tokens,
            steps=steps + 1,
            lists_per_step=lists,
            candidates_per_list=candidates,
            pseudo_fraction=0.0,
        ),
        data,
        workdir / "frozen-reader",
    )
    train_texts = sorted({t for texts in new.lists for t in texts})
    fill_cpu, _ = _cpu_seconds(lambda: new.items.get(train_texts), 1)  # every train item's K/V, once
    new.train_step()
    new_cpu, new_wall = _cpu_seconds(new.train_step, steps)
    pairs = steps * lists * min(candidates, min(len(t) for t in new.lists))
    ell = sum(new.model.tail_length(q) for q in new.queries) / len(new.queries)
    rows = [
        {
            "recipe": "every position (LoRA body)",
            "backprop_positions_per_pair": item_tokens + num_gist + ell,
            "pairs_per_cpu_s": pairs / old_cpu,
            "pairs_per_s": pairs / old_wall,
        },
        {
            "recipe": "frozen reader (gists + adapter)",
            "backprop_positions_per_pair": num_gist + ell,
            "pairs_per_cpu_s": pairs / new_cpu,
            "pairs_per_s": pairs / new_wall,
            "item_kv_once_cpu_s_per_item": fill_cpu / len(train_texts),
        },
    ]
    for row in rows:
        row["speedup"] = row["pairs_per_cpu_s"] / rows[0]["pairs_per_cpu_s"]
    title = (
        f"gist training pairs per CPU-second — j={item_tokens}, k={num_gist}, {lists} lists × {candidates}, "
        f"{steps} steps, LoRA r={lora_rank} vs adapter r={adapter_rank}, {dtype}, {new.model.device}"
    )
    columns = ("recipe", "back-prop positions/pair", "pairs/CPU-s", "pairs/s", "speed-up")
    cells = [
        [
            r["recipe"],
            f"{r['backprop_positions_per_pair']:.0f}",
            f"{r['pairs_per_cpu_s']:.2f}",
            f"{r['pairs_per_s']:.2f}",
            f"{r['speedup']:.1f}x",
        ]
        for r in rows
    ]
    publish(console, title, columns, cells, model_meta(base, new.model, dtype), rows, out)
    once = rows[1]["item_kv_once_cpu_s_per_item"]
    console.print(
        f"item K/V once: {once:.2f} CPU-s per item ({len(train_texts)} items), paid once a run, not a step"
    )
    return rows
