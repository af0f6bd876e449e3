"""What every benchmark shares: timing, the facts its numbers depend on, and one way to publish them
(a right-aligned table printed side by side and the same rows as JSON)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from reranker.core.model import GistReranker


def rate(fn: Callable[[], object], n: int, repeats: int, warmup: bool = True) -> float:
    """Candidates per second of fn() over `repeats` timed runs (after one untimed run if `warmup`)."""
    if warmup:
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return n * repeats / (time.perf_counter() - start)


def model_meta(base: str, model: GistReranker, dtype: str) -> dict:
    """What a benchmark's numbers depend on: base, device, CPU threads, dtype."""
    return {"base": base, "device": str(model.device), "threads": torch.get_num_threads(), "dtype": dtype}


def print_table(console: Console, title: str, columns: Sequence[str], cells: list[list[str]]) -> None:
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right")
    for row in cells:
        table.add_row(*row)
    console.print(table)


def publish(
    console: Console,
    title: str,
    columns: Sequence[str],
    cells: list[list[str]],
    meta: dict,
    rows: list[dict],
    out: Path,
) -> None:
    """Print the measured rows side by side (right-aligned table) and write {meta, rows} JSON to `out`."""
    print_table(console, title, columns, cells)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    console.print(f"wrote {out}")
