"""`gistrank plan`: capacity from the model's own config (reranker/serving/capacity.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated

import typer

from reranker.catalog.preflight import check_model
from reranker.core.checkpoints import DEFAULT_MODEL
from streaming.cli import KVStorageOpt


def _finite(low: float, high: float = math.inf) -> Callable[[str], float]:
    """A float option's parser: a finite number in [low, high]. inf and nan are refused as what they are
    (`plan --qps inf` would print inf GB/s and nan TFLOP/s; nan compares false with any bound)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise typer.BadParameter(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise typer.BadParameter(f"{text} must be a finite number")
        if not low <= value <= high:
            bound = f"≥ {low:g}" if value < low else f"≤ {high:g}"
            raise typer.BadParameter(f"{text} must be {bound}")
        return value

    return parse


def plan(
    items: Annotated[int, typer.Option(min=1, help="catalog size")],
    qps: Annotated[float, typer.Option(parser=_finite(0), help="queries per second")],
    candidates: Annotated[int, typer.Option(min=1, help="candidates reranked per query")],
    model: Annotated[
        str,
        typer.Option(help="model reference (alias, folder, REF?settings; ?kib=N: a budget in KiB per item)"),
    ] = DEFAULT_MODEL,
    kv_storage: KVStorageOpt = None,
    hit_ratio: Annotated[
        float, typer.Option(parser=_finite(0, 1), help="share of lookups served from the store")
    ] = 1.0,
    shard_gib: Annotated[
        float, typer.Option(parser=_finite(0.001), help="memory per Redis Cluster master, GiB")
    ] = 64.0,
    shard_fill: Annotated[
        float, typer.Option(parser=_finite(0.001, 1), help="share of that memory given to K/V")
    ] = 0.75,
    query_tokens: Annotated[int, typer.Option(min=1, help="ℓ online tokens per candidate")] = 32,
    item_tokens: Annotated[
        int | None, typer.Option(min=1, help="mean item tokens (default the model's cap)")
    ] = None,
    consumer_items_per_s: Annotated[
        float | None,
        typer.Option(
            parser=_finite(0.001), help="one consumer's items/s (default: measured here on made-up items)"
        ),
    ] = None,
    consumers: Annotated[int, typer.Option(min=1, help="consumer processes for the backfill")] = 1,
    window_hours: Annotated[
        float, typer.Option(parser=_finite(0.001), help="backfill window to size consumers for")
    ] = 24.0,
) -> None:
    """Capacity: K/V bytes per item (the codec's real blob), store size and Redis shards, fetch
    bytes/s, online FLOPs/s, backfill hours and consumers — from the model's own config."""
    from reranker.core.checkpoints import model_spec

    spec = model_spec(model, kv_storage=kv_storage and kv_storage.value)
    check_model(spec)
    from rich.console import Console
    from rich.table import Table

    from reranker.core.errors import one_line
    from reranker.core.model import Reranker
    from reranker.serving.capacity import measure_items_per_s
    from reranker.serving.capacity import plan as make_plan

    try:
        reader = Reranker.from_pretrained(spec)
    except ValueError as exc:  # a budget in KiB that holds no position
        raise typer.BadParameter(one_line(exc), param_hint="--model") from None
    if consumer_items_per_s is None:
        consumer_items_per_s = measure_items_per_s(reader, item_tokens or reader.gist.max_item_tokens)
    result = make_plan(
        reader,
        items,
        qps,
        candidates,
        hit_ratio,
        shard_gib,
        shard_fill,
        query_tokens,
        item_tokens,
        consumer_items_per_s,
        consumers,
        window_hours,
    )
    g = reader.gist
    table = Table(
        title=f"{model}: {g.compressor}, t={g.keep_item_prefix}, k={g.num_gist}, K/V stored as {g.storage}"
    )
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for name, value in result.rows():
        table.add_row(name, value)
    Console().print(table)
