"""`gistrank bench*` and `soak`: the benchmarks, each printing measured ratios side by side, and the
chaos soak of the data path (reranker/bench/)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from reranker.catalog.preflight import check_model
from reranker.cli.options import HOME, RUNS, DType, Model, NumGist
from reranker.core.base_models import DEFAULT_BASE
from streaming.cli import BlobDType


def bench(
    model: Model = DEFAULT_BASE,
    candidates: Annotated[int, typer.Option(help="N candidates per query")] = 50,
    query_tokens: Annotated[int, typer.Option(help="ℓ online tokens per candidate (query + score)")] = 32,
    item_tokens: Annotated[list[int] | None, typer.Option(help="j values to sweep (repeatable)")] = None,
    num_gist: NumGist = 8,
    dtype: DType = "auto",
    repeats: Annotated[int, typer.Option(help="timed runs of the gist path after a warm-up")] = 5,
    out: Annotated[Path, typer.Option(help="where the JSON result goes")] = RUNS / "bench_score.json",
    compressor: Annotated[
        str,
        typer.Option(
            help="gist | select | prefix: what the k stored positions are (online cost is the same)"
        ),
    ] = "gist",
    kv_storage: Annotated[
        list[BlobDType] | None,
        typer.Option(help="storages whose store hit (decode + score) is timed; repeatable"),
    ] = None,
) -> None:
    """Candidates/s of online `score` vs full-context `score_full`, next to the ideal (j + ℓ)/ℓ, the
    offline compression time per item, and ms per candidate of a store hit at each storage precision
    (default bfloat16, int8, int4, int2)."""
    check_model(model)
    from reranker.bench.score import run_score_bench

    js = item_tokens or [256, 512, 1024]
    storages = [s.value for s in kv_storage] if kv_storage else ["bfloat16", "int8", "int4", "int2"]
    run_score_bench(model, candidates, query_tokens, js, num_gist, dtype, repeats, out, compressor, storages)


def bench_packing(
    model: Model = DEFAULT_BASE,
    items: Annotated[int, typer.Option(help="synthetic items, one row each")] = 8,
    queries_per_item: Annotated[list[int] | None, typer.Option(help="m values to sweep (repeatable)")] = None,
    num_gist: NumGist = 8,
    max_item_tokens: int = 256,
    lora_rank: Annotated[int, typer.Option(help="LoRA adapters as in the quality recipe (0: full body)")] = 8,
    dtype: DType = "auto",
    repeats: Annotated[int, typer.Option(min=1, help="timed forward + backward runs per setting")] = 1,
    out: Annotated[Path, typer.Option(help="where the JSON result goes")] = RUNS / "bench_packing.json",
) -> None:
    """Training pairs/s with queries packed m per item row vs one row per pair, next to the ideal."""
    check_model(model)
    from reranker.bench.packing import run_packing_bench

    ms = queries_per_item or [1, 2, 4, 8]
    run_packing_bench(model, items, ms, num_gist, max_item_tokens, lora_rank, dtype, repeats, out)


def bench_store(
    model: Model = DEFAULT_BASE,
    num_gist: NumGist = 8,
    dtype: DType = "auto",
    consumer_items: Annotated[int, typer.Option(help="items through Kafka → consumer → Feast")] = 64,
    read_ids: Annotated[int, typer.Option(help="ids per online read")] = 50,
    read_repeats: Annotated[int, typer.Option(help="timed reads per store")] = 30,
    workdir: Annotated[Path, typer.Option(help="broker, stores, catalog")] = HOME / "bench-store",
    out: Annotated[Path, typer.Option(help="where the JSON result goes")] = RUNS / "bench_store.json",
) -> None:
    """Consumer items/s vs raw compress; Feast read latency (SQLite, Redis) vs raw Redis; blob bytes."""
    check_model(model)
    from reranker.bench.store import run_store_bench

    run_store_bench(
        model, out, workdir, num_gist, dtype, consumer_items, read_ids=read_ids, read_repeats=read_repeats
    )


def bench_training(
    model: Model = DEFAULT_BASE,
    num_gist: NumGist = 16,
    item_tokens: Annotated[int, typer.Option(help="j: tokens per synthetic item")] = 1024,
    lists: Annotated[int, typer.Option(help="candidate lists per step")] = 2,
    candidates: Annotated[int, typer.Option(help="candidates per list")] = 4,
    queries_per_list: Annotated[
        int, typer.Option(help="queries the frozen recipe asks of each list (its own + pseudo-queries)")
    ] = 4,
    lora_rank: Annotated[int, typer.Option(help="LoRA rank of the every-position recipe")] = 8,
    adapter_rank: Annotated[int, typer.Option(help="gist adapter rank of the frozen-reader recipe")] = 8,
    dtype: DType = "auto",
    steps: Annotated[int, typer.Option(min=1, help="timed steps per recipe, after one warm-up step")] = 2,
    workdir: Annotated[Path, typer.Option(help="the two runs' folders")] = HOME / "bench-training",
    out: Annotated[Path, typer.Option(help="where the JSON result goes")] = RUNS / "bench_training.json",
) -> None:
    """Training pairs per CPU-second: back-propagating through every item position (LoRA body) vs gists
    over a frozen reader's cached item K/V vs a reader adapter over stored units, same lists, side by side."""
    check_model(model)
    from reranker.bench.training import run_training_bench

    run_training_bench(
        model,
        num_gist,
        item_tokens,
        lists,
        candidates,
        queries_per_list,
        lora_rank,
        adapter_rank,
        dtype,
        steps,
        out,
        workdir,
    )


def bench_serving(
    model: Model = DEFAULT_BASE,
    candidates: Annotated[int, typer.Option(help="item ids per request")] = 50,
    requests: Annotated[int, typer.Option(help="hit-path requests per protocol")] = 8,
    feast_requests: Annotated[int, typer.Option(help="Feast-path requests per protocol")] = 4,
    recompute_requests: Annotated[int, typer.Option(help="recompute-path requests per protocol")] = 2,
    concurrency: Annotated[int, typer.Option(help="concurrent clients")] = 4,
    num_threads: Annotated[int, typer.Option(help="torch threads per model process; 0 = default")] = 1,
    instances: Annotated[int, typer.Option(min=1, help="gist_reranker model instances")] = 1,
    saturate_s: Annotated[float, typer.Option(help="seconds of the saturated-throughput phase")] = 60.0,
    dtype: DType = "auto",
    out: Annotated[Path, typer.Option(help="where the JSON result goes")] = RUNS / "bench_serving.json",
) -> None:
    """End-to-end latency over HTTP and gRPC (hit / Feast / recompute paths) vs in-process score(), and
    saturated throughput (candidates/s) through Triton vs in-process score()."""
    check_model(model)
    from reranker.bench.serving import run_serving_bench

    run_serving_bench(
        model,
        out,
        candidates,
        requests,
        concurrency,
        dtype,
        feast_requests=feast_requests,
        recompute_requests=recompute_requests,
        num_threads=num_threads,
        instances=instances,
        saturate_s=saturate_s,
    )


def soak(
    events: Annotated[int, typer.Option(min=1, help="catalog changes written and published")] = 10_000,
    items: Annotated[int, typer.Option(min=1, help="distinct items they touch")] = 300,
    consumers: Annotated[int, typer.Option(min=1, help="consumer processes at the start")] = 3,
    consumer_kills: Annotated[int, typer.Option(min=0, help="consumers killed with SIGKILL")] = 6,
    broker_kills: Annotated[int, typer.Option(min=0, help="broker crashes (SIGKILL, then restart)")] = 2,
    produce_s: Annotated[float, typer.Option(min=0, help="seconds the changes are spread over")] = 180.0,
    seed: Annotated[int, typer.Option(help="seeds the changes and which consumer dies")] = 0,
    workdir: Annotated[Path, typer.Option(help="emptied, then holds broker, stores and logs")] = HOME
    / "soak",
) -> None:
    """Chaos soak of the data path (reranker/bench/soak.py): a real broker, N consumer processes, the stores,
    ≥ 10,000 catalog changes with consumer and broker kills, a consumer joining and a live gc attempt;
    then every store row against the catalog. Exit 0 only with nothing lost, stale or resurrected."""
    from rich.console import Console
    from rich.table import Table

    from reranker.bench.soak import SoakConfig, run_soak

    console = Console()
    config = SoakConfig(
        events, items, consumers, consumers + 3, consumer_kills, broker_kills, produce_s, seed=seed
    )
    report = run_soak(config, workdir.resolve(), console.print)
    table = Table(title=f"soak: {report.seconds:.0f} s")
    for name in ("result", "value"):
        table.add_column(name)
    rows = {
        "events (upserts / deletes)": f"{report.events} ({report.upserts} / {report.deletes})",
        "consumer kills / broker kills / consumers joined": (
            f"{report.consumer_kills} / {report.broker_kills} / {report.consumers_joined}"
        ),
        "live gc attempt refused": str(report.gc_refused),
        "serving reads during the soak": str(report.served_reads),
        "catalog items (live)": f"{report.items} ({report.live})",
        "lost": str(len(report.lost)),
        "stale": str(len(report.stale)),
        "resurrected": str(len(report.resurrected)),
        "dead letters": str(report.dead_letters),
    }
    for name, value in rows.items():
        table.add_row(name, value)
    console.print(table)
    for name in ("lost", "stale", "resurrected"):
        if getattr(report, name):
            console.print(f"{name}: {', '.join(getattr(report, name)[:20])}")
    if not report.ok:
        raise typer.Exit(1)
