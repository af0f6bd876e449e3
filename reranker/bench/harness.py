"""What every benchmark shares: timing and the facts its numbers depend on. They publish them as the
probe does (`reranker.evaluation.tables.publish`: a right-aligned table and the same rows as JSON)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from reranker.core.model import Reranker


def rate(fn: Callable[[], object], n: int, repeats: int, warmup: bool = True) -> float:
    """Candidates per second of fn() over `repeats` timed runs (after one untimed run if `warmup`)."""
    if warmup:
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return n * repeats / (time.perf_counter() - start)


def model_meta(base: str, model: Reranker, dtype: str) -> dict:
    """What a benchmark's numbers depend on: base, device, CPU threads, dtype."""
    return {"base": base, "device": str(model.device), "threads": torch.get_num_threads(), "dtype": dtype}
