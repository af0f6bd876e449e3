"""Measured rows, published two ways: a right-aligned table printed side by side, and the same rows as
JSON. The probe and the benchmarks publish through it; it lives here, below the benchmarks (entry
points), so that the probe need not import one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table


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
