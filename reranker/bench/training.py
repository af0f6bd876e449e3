"""Training-throughput benchmark of the gist recipes and the reader, same machine, same run, same lists:
(item, query) pairs trained per CPU-second.

    every position   `Trainer` (student, LoRA on the body): each step runs item + gists + query for every
                     pair, forward and backward through all j + k + ℓ positions
    frozen reader    `FrozenGistTrainer`: the reader's item K/V computed once per item (timed apart, and
                     amortised over the epochs a run makes), each step back-propagates through the k gist
                     rows and the ℓ query rows only
    reader           `ReaderTrainer`: the store's units (prefix k) computed once per item, each step runs
                     and back-propagates through the ℓ query rows only (reader adapter + head)

CPU seconds are process time (all threads), so the ratio does not depend on how busy the machine is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from reranker.bench.harness import model_meta
from reranker.core.config import RerankerConfig, resolve_dtype
from reranker.data.data_synth import generate
from reranker.evaluation.tables import publish
from reranker.training.frozen_reader import FrozenGistConfig, FrozenGistTrainer
from reranker.training.reader_training import ReaderTrainConfig, ReaderTrainer
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
    queries_per_list: int,
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
    gist = RerankerConfig(num_gist=num_gist, dtype=dtype, max_item_tokens=item_tokens)
    train_cfg = TrainConfig(
        base=base,
        gist=gist,
        steps=steps + 1,
        queries_per_step=lists,
        candidates_per_query=candidates,
        lora_rank=lora_rank,
        lora_alpha=2.0 * lora_rank,
    )
    every = Trainer(train_cfg, data, workdir / "every-position")
    every.train_step()  # warm-up: first-call allocations
    every_cpu, every_wall = _cpu_seconds(every.train_step, steps)
    every_pairs = steps * lists * candidates  # a step: `lists` queries × `candidates` each
    rows = [
        _row(
            "every position (LoRA body), 1 query/list",
            item_tokens + num_gist,
            every_pairs,
            every_cpu,
            every_wall,
        )
    ]
    once = 0.0
    for q in sorted({1, queries_per_list}):
        frozen = FrozenGistTrainer(
            FrozenGistConfig(
                reader=base,  # the frozen reader: the untouched base
                num_gist=num_gist,
                adapter_rank=adapter_rank,
                max_item_tokens=item_tokens,
                steps=steps + 1,
                lists_per_step=lists,
                candidates_per_list=candidates,
                queries_per_list=q,
                dtype=dtype,
                seed=q,
            ),
            data,
            workdir / f"frozen-reader-q{q}",
        )
        texts = sorted({t for texts in frozen.lists for t in texts})
        row, fill_cpu = _timed(
            f"frozen reader (gists + adapter), {q} queries/list",
            num_gist,
            frozen,
            lambda f=frozen, t=texts: f.items.get(t),  # every item's K/V, once
            steps,
        )
        rows.append(row)
        once = fill_cpu / len(texts)
    reader = ReaderTrainer(
        ReaderTrainConfig(
            model=f"{base}?compressor=prefix&num_gist={num_gist}",  # a store of the same k positions
            rank=adapter_rank,
            objective="labels",
            max_item_tokens=item_tokens,
            dtype=dtype,
            steps=steps + 1,
            lists_per_step=lists,
            candidates_per_list=candidates,
            holdout_queries=1,
        ),
        data,
        workdir / "reader",
    )
    texts = sorted({t for x in reader.lists for t in x.texts})
    recipe = f"reader (query-row adapter) over stored prefix {num_gist}"
    row, units_cpu = _timed(recipe, 0, reader, lambda: reader.units.get(texts), steps)  # every unit, once
    rows.append(row)
    for row in rows:
        row["speedup"] = row["pairs_per_cpu_s"] / rows[0]["pairs_per_cpu_s"]
    title = (
        f"training pairs per CPU-second — j={item_tokens}, k={num_gist}, {lists} lists × {candidates} "
        f"candidates, {steps} steps, LoRA r={lora_rank} vs adapter r={adapter_rank}, {dtype}, "
        f"{frozen.model.device}"
    )
    columns = ("recipe", "back-prop positions/pair", "pairs/CPU-s", "pairs/s", "speed-up")
    cells = [
        [
            r["recipe"],
            f"{r['backprop_positions_per_pair']}",
            f"{r['pairs_per_cpu_s']:.3f}",
            f"{r['pairs_per_s']:.3f}",
            f"{r['speedup']:.1f}x",
        ]
        for r in rows
    ]
    meta = model_meta(base, frozen.model, dtype) | {
        "item_kv_once_cpu_s_per_item": once,
        "stored_unit_once_cpu_s_per_item": units_cpu / len(texts),
    }
    publish(console, title, columns, cells, meta, rows, out)
    console.print(
        f"item K/V once: {once:.2f} CPU-s per item; stored unit once: {units_cpu / len(texts):.2f} CPU-s "
        "per item — paid once a run, not a step"
    )
    return rows


def _timed(
    recipe: str,
    positions: int,
    trainer: FrozenGistTrainer | ReaderTrainer,
    fill: Callable[[], object],
    steps: int,
) -> tuple[dict, float]:
    """`trainer`'s row — its once-per-item work (`fill`) timed apart, one warm-up step, then `steps`
    timed — and the CPU seconds of `fill`."""
    fill_cpu, _ = _cpu_seconds(fill, 1)
    trainer.train_step()
    before = trainer.pairs
    cpu, wall = _cpu_seconds(trainer.train_step, steps)
    return _row(recipe, positions, trainer.pairs - before, cpu, wall), fill_cpu


def _row(recipe: str, positions: int, pairs: int, cpu: float, wall: float) -> dict:
    """`positions`: item-side positions a pair back-propagates through besides its query's ℓ."""
    return {
        "recipe": recipe,
        "backprop_positions_per_pair": f"{positions} + ℓ",
        "pairs": pairs,
        "pairs_per_cpu_s": pairs / cpu,
        "pairs_per_s": pairs / wall,
    }
