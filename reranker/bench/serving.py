"""`gistrank bench-serving`: end-to-end latency of the Triton reranker on loopback (a benchmark, not a test).

Everything runs on this machine, bound to 127.0.0.1, and is stopped at the end:

* a catalog (SQLite) of synthetic items (`reranker.data.data_synth`, deterministic for a seed);
* a fresh Feast SQLite store holding the gist K/V of the *hit* set, materialized by `streaming.materialize`
  with the same checkpoint the server loads (one fingerprint);
* `tritonserver` (gist_reranker + full_reranker, shadow off) on free ports.

Three request paths, each `candidates` ids per request, over HTTP and over gRPC, at bounded concurrency:

* **hit**: the same `candidates` items every request; after the warm-up they are in L1 (the steady state
  of hot items);
* **feast**: every request a fresh set of items that Feast holds and L1 never saw, so each one is an L2 hit
  (a batched Feast read plus decode). Their rows are copies of the hit set's rows under new ids, and the
  catalog holds the same content under those ids, so they are exactly what a backfill would have written;
* **recompute**: every request a fresh set of catalog items that were never materialized, so each one is
  read from the catalog and compressed on the request path.

Per path and protocol: client-side latency p50/p99 and the server's own split, read from the gist_reranker
process's `gistrank_rerank_request_duration_seconds{stage=fetch|model|total}` histograms (delta of one
scrape before and one after the phase; quantiles from buckets, means exact from `_sum`/`_count`). Overhead =
client − server total: Triton's queue (one model instance serves one request at a time, so at concurrency
c a request waits for up to c − 1 others; Triton's own `nv_inference_queue_duration_us` gives its mean),
transport, (de)serialisation and the Python backend's IPC. Means add up (client = fetch + model + overhead);
p50s do not, and bucket quantiles are only as fine as the buckets.

Next to it: in-process `Reranker.score` on the same queries and the same K/V decoded from the store,
timed the same way but sequentially, and the ratio end-to-end p50 / in-process p50.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table
from tqdm.auto import tqdm

from monitoring.scrape import histogram_quantile, sample_sum, scrape
from reranker.catalog.sample import sample_queries
from reranker.core.errors import GistRankError
from reranker.core.model import Reranker
from reranker.serving.local_run import Steps, serving_checkpoint

if TYPE_CHECKING:
    from reranker.catalog.database import Catalog
    from reranker.serving.server import TritonServer
    from reranker.store import GistStore

PATHS = ("hit", "feast", "recompute")
PROTOCOLS = ("http", "grpc")
STAGES = ("fetch", "model", "total")
EXPECTED_STATUS = {"hit": "l1", "feast": "feast", "recompute": "recompute"}
REQUEST_HISTOGRAM = "gistrank_rerank_request_duration_seconds"
SIBLINGS = 3  # data_synth: items per product = 1 + SIBLINGS

Plan = list[tuple[str, list[str]]]  # the requests of one phase: (query, item ids)


class BenchError(RuntimeError):
    """The benchmark could not measure a phase (no request of it succeeded)."""


# --------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class LatencyStats:
    """n, p50, p99, mean, min, max of a list of durations (seconds; None when empty)."""

    n: int
    p50_s: float | None
    p99_s: float | None
    mean_s: float | None
    min_s: float | None
    max_s: float | None

    @classmethod
    def of(cls, seconds: Sequence[float]) -> LatencyStats:
        if not seconds:
            return cls(0, None, None, None, None, None)
        a = np.asarray(seconds, dtype=np.float64)
        p50, p99 = (float(x) for x in np.percentile(a, [50, 99]))
        return cls(len(a), p50, p99, float(a.mean()), float(a.min()), float(a.max()))


@dataclass(frozen=True)
class StageStats:
    """One server stage over a phase: requests observed, bucket p50/p99, exact mean from _sum/_count."""

    count: int
    p50_s: float | None
    p99_s: float | None
    mean_s: float | None


@dataclass(frozen=True)
class Overhead:
    """Client round trip − server total: Triton's queue, transport, (de)serialisation, backend IPC."""

    p50_s: float | None  # from the server's bucket p50: an estimate
    mean_s: float | None  # exact


@dataclass(frozen=True)
class PhaseResult:
    """One request path over one protocol."""

    requests: int
    errors: int
    error_examples: list[str]
    stopped_by_budget: bool
    statuses: dict[str, int]  # candidates per cache status the server reported
    expected_status: str
    client: LatencyStats
    server: dict[str, StageStats]  # STAGES
    overhead: Overhead
    queue_mean_s: float | None
    wall_s: float
    throughput_rps: float
    # on loopback the client shares the CPU with the server: what it takes of it
    client_cpu_s_per_request: float


@dataclass(frozen=True)
class InProcessResult:
    fetch: LatencyStats  # store.read + decode of the hit set (not part of score())
    score: LatencyStats  # Reranker.score alone


@dataclass(frozen=True)
class ThroughputResult:
    """Saturated throughput of the hit path over gRPC (`concurrency` clients, every instance busy) next
    to in-process `score()` on one thread of this process, in candidates scored per second."""

    instances: int
    concurrency: int
    requests: int
    errors: int
    statuses: dict[str, int]
    wall_s: float
    candidates_per_s: float
    inprocess_candidates_per_s: float
    ratio: float  # Triton / in-process


@dataclass(frozen=True)
class BenchMeta:
    model: str
    checkpoint: str
    fingerprint: str
    dtype: str
    num_gist: int
    device: str
    candidates: int
    requests: int
    feast_requests: int
    recompute_requests: int
    warmup: int
    concurrency: int
    item_tokens_range: list[int]
    mean_item_tokens: float
    seed: int
    queries: int
    torch_threads: int
    num_threads_setting: int
    cpu_count: int | None
    platform: str
    duration_s: float


@dataclass(frozen=True)
class ServingBenchResult:
    meta: BenchMeta
    inprocess: InProcessResult
    paths: dict[str, dict[str, PhaseResult]]  # path → protocol → phase
    ratios: dict[str, dict[str, float]]  # RATIOS key → protocol → ratio
    throughput: ThroughputResult

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------------ statistics
def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _delta(before: dict, after: dict) -> dict:
    """Counter / histogram samples of `after` minus `before` (a series absent before counts from 0)."""
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def _server_stats(delta: dict) -> dict[str, StageStats]:
    """Per stage: requests observed, bucket p50/p99 and the exact mean from _sum/_count."""
    out = {}
    for stage in STAGES:
        count = sample_sum(delta, f"{REQUEST_HISTOGRAM}_count", stage=stage)
        total = sample_sum(delta, f"{REQUEST_HISTOGRAM}_sum", stage=stage)
        out[stage] = StageStats(
            count=round(count),
            p50_s=_finite(histogram_quantile(delta, REQUEST_HISTOGRAM, 0.5, stage=stage)),
            p99_s=_finite(histogram_quantile(delta, REQUEST_HISTOGRAM, 0.99, stage=stage)),
            mean_s=total / count if count else None,
        )
    return out


def _counter(delta: dict, name: str, **labels: str) -> float:
    # prometheus-client's parser names every counter sample `<name>_total`, Triton's included
    return sample_sum(delta, name, **labels) + sample_sum(delta, f"{name}_total", **labels)


def _triton_queue_mean_s(delta: dict, model: str) -> float | None:
    """Mean time a request of `model` waited in Triton's queue (Triton's own cumulative counters)."""
    requests = _counter(delta, "nv_inference_request_success", model=model)
    queued_us = _counter(delta, "nv_inference_queue_duration_us", model=model)
    return queued_us / requests / 1e6 if requests else None


# ------------------------------------------------------------------------------------------ the load
@dataclass
class _Load:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0  # CPU time of this (client) process over the phase, all threads
    stopped_by_budget: bool = False


def _run_load(
    send: Callable[[Any, str, list[str]], list[Any]],
    connect: Callable[[], Any],
    requests: Plan,
    concurrency: int,
    budget_s: float,
    desc: str,
) -> _Load:
    """Send `requests` from `concurrency` threads (one client each); bounded in count and in time.

    A thread takes the next request until all are taken or `budget_s` has passed since the start; a
    request in flight at the deadline finishes (the client's own timeout bounds it).
    """
    load = _Load()
    lock = threading.Lock()
    taken = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    deadline = time.monotonic() + budget_s

    def worker(bar: tqdm) -> None:
        nonlocal taken
        with connect() as client:
            while True:
                with lock:
                    if taken >= len(requests):
                        return
                    if time.monotonic() >= deadline:
                        load.stopped_by_budget = True
                        return
                    query, ids = requests[taken]
                    taken += 1
                t0 = time.perf_counter()
                try:
                    candidates = send(client, query, ids)
                except Exception as e:  # every failure is recorded and reported
                    with lock:
                        load.errors.append(f"{type(e).__name__}: {e}")
                        bar.update()
                    continue
                elapsed = time.perf_counter() - t0
                with lock:
                    load.latencies.append(elapsed)
                    load.statuses.update(c.status for c in candidates)
                    bar.update()

    with tqdm(total=len(requests), desc=desc, unit="req", leave=False) as bar:
        threads = max(1, min(concurrency, len(requests)))
        with ThreadPoolExecutor(threads, thread_name_prefix="bench-client") as pool:
            for future in [pool.submit(worker, bar) for _ in range(threads)]:
                future.result()
    load.wall_s = time.perf_counter() - start
    load.cpu_s = time.process_time() - cpu_start
    return load


# ------------------------------------------------------------------------------------------- the data
def _synthetic_items(seed: int, count: int, item_tokens: tuple[int, int]) -> list[dict[str, Any]]:
    """`count` distinct synthetic catalog items (title, attributes, description), deterministic."""
    from reranker.data.data_synth import generate

    products = -(-count // (1 + SIBLINGS))
    rs = generate(seed, products, 0, siblings_per_product=SIBLINGS, length_tokens=item_tokens)
    items = list(rs.items.values())[:count]
    if len(items) < count:
        raise BenchError(f"data_synth produced {len(items)} items, {count} needed")
    return [{"title": i.title, "attributes": i.attributes, "description": i.description} for i in items]


def _write_jsonl(path: Path, rows: list[tuple[str, dict[str, Any]]]) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for item_id, fields in rows:
            f.write(json.dumps({"item_id": item_id, **fields}, ensure_ascii=False) + "\n")
    return path


def _usable_queries(model: Reranker) -> list[str]:
    """The sample queries this model accepts (a tiny test tokenizer may exceed the query token limit)."""
    usable = []
    for query in sample_queries():
        try:
            model.query_ids(query)
        except GistRankError:  # QueryTooLongError, EmptyInputError: skip that query
            continue
        usable.append(query)
    if not usable:
        raise BenchError("the model accepts none of the sample queries")
    return usable


def _clean_workdir(workdir: Path) -> None:
    """Remove what an earlier run left in `workdir` (only the names this benchmark writes)."""
    for name in ("model", "feast", "triton"):
        shutil.rmtree(workdir / name, ignore_errors=True)
    for path in workdir.glob("catalog.db*"):
        path.unlink()
    for path in workdir.glob("bench-*.jsonl"):
        path.unlink()


@dataclass(frozen=True)
class ItemSets:
    """Item ids of the three paths: one hit set; a fresh set per feast and per recompute request, twice
    as many as requests per protocol (even sets go over HTTP, odd ones over gRPC)."""

    hit: list[str]
    feast: list[list[str]]
    recompute: list[list[str]]

    @classmethod
    def make(cls, candidates: int, feast_requests: int, recompute_requests: int) -> ItemSets:
        def sets(path: str, count: int) -> list[list[str]]:
            return [[f"bench-{path}-{r:03d}-{n:04d}" for n in range(candidates)] for r in range(count)]

        hit = [f"bench-hit-{n:04d}" for n in range(candidates)]
        return cls(hit, sets("feast", 2 * feast_requests), sets("recompute", 2 * recompute_requests))

    def plans(self, queries: Sequence[str], requests: int) -> dict[str, list[Plan]]:
        """Per path, one plan per protocol (PROTOCOLS order); queries taken round robin."""

        def plan(sets: Sequence[list[str]]) -> Plan:
            return [(queries[n % len(queries)], ids) for n, ids in enumerate(sets)]

        return {
            "hit": [plan([self.hit] * requests)] * 2,
            "feast": [plan(self.feast[p::2]) for p in range(2)],
            "recompute": [plan(self.recompute[p::2]) for p in range(2)],
        }


def _fill_catalog_and_store(
    catalog: Catalog, store: GistStore, model: Reranker, workdir: Path, items: ItemSets, pool: list[dict]
) -> tuple[int, float]:
    """Catalog rows of every set from `pool` (the feast sets with the hit set's content); the hit set
    materialized into Feast and its rows copied under the feast ids (what a backfill would have
    written). Returns how many rows materialize wrote and the hit items' mean token count."""
    from streaming.materialize import materialize

    size = len(items.hit)
    catalog.load_jsonl(
        _write_jsonl(workdir / "bench-hit.jsonl", list(zip(items.hit, pool[:size], strict=True)))
    )
    store.apply()
    written = materialize(catalog, model, store, batch_size=16).written
    rest = [(i, pool[n]) for ids in items.feast for n, i in enumerate(ids)]
    rest += [
        (i, pool[size * (1 + r) + n]) for r, ids in enumerate(items.recompute) for n, i in enumerate(ids)
    ]
    catalog.load_jsonl(_write_jsonl(workdir / "bench-rest.jsonl", rest))
    hit_rows = store.read(items.hit)
    missing = [i for i, row in hit_rows.items() if row is None]
    if missing:
        raise BenchError(f"materialize left {len(missing)} hit items out of Feast: {missing[:3]}")
    versions = {i: item.version for i, item in catalog.get([i for ids in items.feast for i in ids]).items()}
    copies = [
        replace(hit_rows[items.hit[n]], item_id=i, version=versions[i])
        for ids in items.feast
        for n, i in enumerate(ids)
    ]
    store.write(copies)
    return written, sum(row.item_tokens for row in hit_rows.values()) / len(hit_rows)


# ---------------------------------------------------------------------------------------- measuring
def _measure_inprocess(
    model: Reranker,
    store: GistStore,
    hit_ids: list[str],
    queries: Sequence[str],
    warmup: int,
    requests: int,
) -> InProcessResult:
    """`score()` on the hit set's K/V as decoded from the store, sequentially; the read + decode timed
    apart (it is not part of `score()`)."""
    from reranker.core import kv_codec

    fingerprint, dtype = model.fingerprint, model.kv_dtype
    fetch_s, score_s = [], []
    for n in tqdm(range(warmup + requests), desc="in-process", unit="call", leave=False):
        t0 = time.perf_counter()
        rows = store.read(hit_ids)
        kvs = [kv_codec.decode(rows[i].kv, expected_fingerprint=fingerprint, dtype=dtype).kv for i in hit_ids]
        t1 = time.perf_counter()
        model.score(queries[n % len(queries)], kvs)
        t2 = time.perf_counter()
        if n >= warmup:
            fetch_s.append(t1 - t0)
            score_s.append(t2 - t1)
    return InProcessResult(fetch=LatencyStats.of(fetch_s), score=LatencyStats.of(score_s))


def _connect(server: TritonServer, protocol: str, timeout_s: float) -> Callable[[], Any]:
    from reranker.serving.client import RerankClient

    url = server.http_url if protocol == "http" else server.grpc_url
    return partial(RerankClient, url, protocol, timeout_s=timeout_s)


def _send(client: Any, query: str, ids: list[str]) -> list[Any]:
    return client.rerank(query, ids)


def _scrape(server: TritonServer) -> dict:
    """Triton's metrics endpoint: its own nv_inference_* and the gist_reranker's gistrank_*."""
    return scrape(server.metrics_url)


def _warm_up(server: TritonServer, hit_plan: Plan, timeout_s: float, budget_s: float) -> None:
    """Untimed hit requests over each protocol, one at a time (they also fill L1 with the hit set)."""
    for protocol in PROTOCOLS:
        load = _run_load(
            _send, _connect(server, protocol, timeout_s), hit_plan, 1, budget_s, f"warm-up {protocol}"
        )
        if load.errors:
            raise BenchError(f"warm-up over {protocol} failed: {load.errors[0]}")


def _measure_phase(
    server: TritonServer,
    path: str,
    protocol: str,
    plan: Plan,
    concurrency: int,
    timeout_s: float,
    budget_s: float,
) -> PhaseResult:
    """One path over one protocol: the client's latencies, and the server's split from the delta of
    one metrics scrape before and one after."""
    from reranker.serving.server import GIST_MODEL

    before = _scrape(server)
    load = _run_load(
        _send, _connect(server, protocol, timeout_s), plan, concurrency, budget_s, f"{path} {protocol}"
    )
    after = _scrape(server)
    if not load.latencies:
        detail = load.errors[0] if load.errors else "the time budget ran out"
        raise BenchError(f"no {path} request over {protocol} succeeded: {detail}")
    server_stats = _server_stats(_delta(before, after))
    client = LatencyStats.of(load.latencies)
    total = server_stats["total"]
    return PhaseResult(
        requests=len(plan),
        errors=len(load.errors),
        error_examples=load.errors[:3],
        stopped_by_budget=load.stopped_by_budget,
        statuses=dict(load.statuses),
        expected_status=EXPECTED_STATUS[path],
        client=client,
        server=server_stats,
        overhead=Overhead(
            p50_s=_minus(client.p50_s, total.p50_s), mean_s=_minus(client.mean_s, total.mean_s)
        ),
        queue_mean_s=_triton_queue_mean_s(_delta(before, after), GIST_MODEL),
        wall_s=load.wall_s,
        throughput_rps=len(load.latencies) / load.wall_s,
        client_cpu_s_per_request=load.cpu_s / (len(load.latencies) + len(load.errors)),
    )


def _measure_paths(
    server: TritonServer,
    plans: dict[str, list[Plan]],
    concurrency: int,
    timeout_s: float,
    budget_s: float,
    console: Console,
) -> dict[str, dict[str, PhaseResult]]:
    """Every path over every protocol, in PATHS order; a status other than the path's is reported."""
    paths: dict[str, dict[str, PhaseResult]] = {}
    for path in PATHS:
        paths[path] = {}
        for protocol, plan in zip(PROTOCOLS, plans[path], strict=True):
            phase = _measure_phase(server, path, protocol, plan, concurrency, timeout_s, budget_s)
            paths[path][protocol] = phase
            unexpected = {s: c for s, c in phase.statuses.items() if s != phase.expected_status}
            if unexpected or phase.errors:
                console.print(
                    f"[yellow]{path} over {protocol}: unexpected statuses {unexpected}, "
                    f"{phase.errors} errors {phase.error_examples[:1]}[/]"
                )
    return paths


def _measure_throughput(
    server: TritonServer,
    plan: Plan,
    candidates: int,
    instances: int,
    concurrency: int,
    timeout_s: float,
    duration_s: float,
    inprocess: InProcessResult,
) -> ThroughputResult:
    """As many hit requests as `concurrency` gRPC clients get answered in `duration_s` (`plan` is long
    enough not to run out first)."""
    load = _run_load(
        _send, _connect(server, "grpc", timeout_s), plan, concurrency, duration_s, "saturated grpc"
    )
    if not load.latencies:
        raise BenchError(f"no saturated request succeeded: {load.errors[:1]}")
    served = len(load.latencies) * candidates / load.wall_s
    inprocess_rate = candidates / inprocess.score.mean_s
    return ThroughputResult(
        instances=instances,
        concurrency=concurrency,
        requests=len(load.latencies),
        errors=len(load.errors),
        statuses=dict(load.statuses),
        wall_s=load.wall_s,
        candidates_per_s=served,
        inprocess_candidates_per_s=inprocess_rate,
        ratio=served / inprocess_rate,
    )


# ------------------------------------------------------------------------------------------ reporting
RATIOS = (
    # (key, label). End-to-end ratios include Triton's queue under the load (one model instance: at
    # concurrency c a request waits for up to c − 1 others), and a phase of few requests queues less, so
    # paths are compared on the server's total too.
    ("hit_vs_inprocess", "hit end-to-end p50 / in-process score() p50"),
    ("hit_unqueued_vs_inprocess", "hit (end-to-end − queue) mean / in-process score() mean"),
    ("feast_vs_hit", "feast / hit, end-to-end p50"),
    ("recompute_vs_hit", "recompute / hit, end-to-end p50"),
    ("feast_vs_hit_server", "feast / hit, server total mean (no queue)"),
    ("recompute_vs_hit_server", "recompute / hit, server total mean (no queue)"),
)


def _ratios(
    paths: dict[str, dict[str, PhaseResult]], inprocess: InProcessResult
) -> dict[str, dict[str, float]]:
    """Per protocol: end-to-end vs in-process, and each path vs the hit path (see RATIOS)."""

    def client(path: str, p: str, stat: str) -> float:
        return getattr(paths[path][p].client, stat)

    def server_total(path: str, p: str) -> float:
        return paths[path][p].server["total"].mean_s

    score = inprocess.score
    return {
        "hit_vs_inprocess": {p: client("hit", p, "p50_s") / score.p50_s for p in PROTOCOLS},
        "hit_unqueued_vs_inprocess": {
            p: (client("hit", p, "mean_s") - (paths["hit"][p].queue_mean_s or 0.0)) / score.mean_s
            for p in PROTOCOLS
        },
        **{
            f"{path}_vs_hit": {p: client(path, p, "p50_s") / client("hit", p, "p50_s") for p in PROTOCOLS}
            for path in ("feast", "recompute")
        },
        **{
            f"{path}_vs_hit_server": {p: server_total(path, p) / server_total("hit", p) for p in PROTOCOLS}
            for path in ("feast", "recompute")
        },
    }


def _ms(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x * 1000:.{digits}f}"


def _split(stats: StageStats | LatencyStats | Overhead) -> str:
    """`mean (p50)`: the exact mean, then the p50 (for a server stage the coarser bucket p50)."""
    return f"{_ms(stats.mean_s)} ({_ms(stats.p50_s, 0)})"


def _print_table(console: Console, result: ServingBenchResult) -> None:
    meta = result.meta
    table = Table(
        title=(
            f"serving latency in ms — {meta.model} ({meta.dtype}, {meta.device}), "
            f"{meta.candidates} candidates/request, concurrency {meta.concurrency}, loopback"
        ),
        title_justify="left",
        caption=(
            "p50 / p99 / mean: client round trip (p99 of few requests ≈ their max). fetch, model: the "
            "server's histograms, mean (bucket p50). overhead = client − server total, mean (p50); means add "
            "up: mean = fetch + model + overhead. queue: Triton's mean queue wait, part of the overhead. "
            "cli cpu: CPU time of the client process per request (it shares the cores with the server)."
        ),
        caption_justify="left",
    )
    columns = (
        "path",
        "proto",
        "n",
        "p50",
        "p99",
        "mean",
        "fetch",
        "model",
        "overhead",
        "queue",
        "req/s",
        "cli cpu",
    )
    for name in columns:
        table.add_column(name, justify="left" if name in ("path", "proto") else "right")
    for path in PATHS:
        for protocol in PROTOCOLS:
            r = result.paths[path][protocol]
            table.add_row(
                path,
                protocol,
                str(r.client.n) + (f" ({r.errors} err)" if r.errors else ""),
                _ms(r.client.p50_s),
                _ms(r.client.p99_s),
                _ms(r.client.mean_s),
                _split(r.server["fetch"]),
                _split(r.server["model"]),
                _split(r.overhead),
                _ms(r.queue_mean_s),
                f"{r.throughput_rps:.2f}",
                _ms(r.client_cpu_s_per_request),
            )
        table.add_section()
    fetch, score = result.inprocess.fetch, result.inprocess.score
    table.add_row(
        "in-process",
        "score()",
        str(score.n),
        _ms(score.p50_s),
        _ms(score.p99_s),
        _ms(score.mean_s),
        _split(fetch),
        _split(score),
        "–",
        "–",
        f"{1.0 / score.mean_s:.2f}",
        "–",
    )
    console.print(table)
    console.print(
        "[dim]in-process: sequential; p50/p99/mean/model = score() alone; fetch = store.read + decode "
        "(not part of score())[/]"
    )
    summary = Table(title="ratios", title_justify="left")
    summary.add_column("")
    for protocol in PROTOCOLS:
        summary.add_column(protocol, justify="right")
    ratios = result.ratios
    for key, name in RATIOS:
        summary.add_row(name, *(f"{ratios[key][p]:.2f}x" for p in PROTOCOLS))
    console.print(summary)
    t = result.throughput
    saturated = Table(title="saturated throughput, hit path over gRPC", title_justify="left")
    for column in ("instances", "clients", "requests", "Triton cand/s", "in-process score() cand/s", "ratio"):
        saturated.add_column(column, justify="right")
    saturated.add_row(
        str(t.instances),
        str(t.concurrency),
        f"{t.requests} ({t.errors} errors)",
        f"{t.candidates_per_s:.0f}",
        f"{t.inprocess_candidates_per_s:.0f}",
        f"{t.ratio:.2f}x",
    )
    console.print(saturated)
    console.print(f"[dim]statuses under saturation: {t.statuses}[/]")


# ---------------------------------------------------------------------------------------- the bench
def run_serving_bench(
    model: str,
    out: Path,
    candidates: int = 50,
    requests: int = 40,
    concurrency: int = 4,
    dtype: str = "auto",
    workdir: Path | None = None,
    *,
    feast_requests: int = 8,
    recompute_requests: int = 4,
    warmup: int = 2,
    num_gist: int | None = None,
    item_tokens: tuple[int, int] = (64, 192),
    seed: int = 0,
    num_threads: int = 0,
    instances: int = 1,
    saturate_s: float = 60.0,
    request_timeout_s: float = 600.0,
    phase_budget_s: float = 900.0,
    startup_timeout_s: float = 600.0,
) -> ServingBenchResult:
    """Run the serving benchmark (module docstring), print its tables, write `out` (JSON), return it.

    `model`: read as `demo` reads it (`Reranker.read`): a GistRank checkpoint as is (`dtype` is then
    its own), a preset or base (alias, HF folder, `REF?settings`) wrapped in `dtype` and saved as a
    checkpoint in `workdir`; `num_gist`, when given, over the model's own k.
    `requests`: hit-path requests per protocol (also the in-process repetitions); `feast_requests` and
    `recompute_requests`: per protocol, each with its own fresh `candidates` items; `warmup`: untimed
    hit requests per protocol (and in-process calls) first. Each phase (one path over one protocol) stops
    taking new requests after `phase_budget_s`; each request gives up after `request_timeout_s`.
    `num_threads`: torch threads of the server's model processes and of the in-process model (set for this
    call, restored after); 0 = torch's default. On a small or shared machine 1 can be much faster: torch's
    threads then wait on cores that the client, the other model process or other work hold.
    `instances`: gist_reranker model instances; after the paths, the hit path is driven for `saturate_s`
    by max(`concurrency`, 2 × `instances`) gRPC clients for the saturated throughput (candidates/s) next
    to in-process `score()`'s.
    `workdir`: catalog, Feast store, checkpoint and Triton run directory; default a temporary directory
    (removed at the end); an existing one is reused, its earlier benchmark files replaced.
    """
    from reranker.catalog.database import Catalog
    from reranker.serving.server import ServerSettings, TritonServer
    from reranker.store import GistStore

    if candidates < 1 or requests < 1 or feast_requests < 1 or recompute_requests < 1 or concurrency < 1:
        raise ValueError("candidates, requests, feast_requests, recompute_requests, concurrency must be >= 1")
    if warmup < 0:
        raise ValueError("warmup must be >= 0")
    console = Console()
    steps = Steps(console)
    threads_before = torch.get_num_threads()
    if num_threads > 0:
        torch.set_num_threads(num_threads)
    torch_threads = torch.get_num_threads()
    tmp = tempfile.TemporaryDirectory(prefix="gistrank-bench-serving-") if workdir is None else None
    workdir = Path(tmp.name) if tmp is not None else Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    _clean_workdir(workdir)
    server: TritonServer | None = None
    catalog: Catalog | None = None
    try:
        steps("1. model: one checkpoint for the materializer, the server and the in-process score()")
        served = serving_checkpoint(model, workdir, dtype, num_gist=num_gist)
        gist_model = served.model
        queries = _usable_queries(gist_model)
        console.print(
            f"{model}: k={gist_model.gist.num_gist}, {gist_model.gist.dtype}, {gist_model.device}, "
            f"fingerprint {gist_model.fingerprint}"
        )

        steps("2. catalog and Feast: hit set materialized; feast set copied; recompute set never stored")
        items = ItemSets.make(candidates, feast_requests, recompute_requests)
        catalog_url = f"sqlite:///{workdir / 'catalog.db'}"
        catalog = Catalog(catalog_url)
        store = GistStore(workdir / "feast", fingerprint=gist_model.fingerprint)
        pool = _synthetic_items(seed, candidates * (1 + 2 * recompute_requests), item_tokens)
        written, mean_tokens = _fill_catalog_and_store(catalog, store, gist_model, workdir, items, pool)
        console.print(
            f"catalog {catalog_url}: {len(items.hit)} hit items (materialized {written}, mean "
            f"{mean_tokens:.0f} tokens), {sum(map(len, items.feast))} feast copies, "
            f"{sum(map(len, items.recompute))} recompute items"
        )

        steps("3. in-process score(): the hit set's K/V as decoded from the store, sequential")
        inprocess = _measure_inprocess(gist_model, store, items.hit, queries, warmup, requests)
        console.print(
            f"score() p50 {_ms(inprocess.score.p50_s)} ms; "
            f"store.read + decode p50 {_ms(inprocess.fetch.p50_s)} ms"
        )

        steps("4. tritonserver on free 127.0.0.1 ports, shadow off")
        settings = ServerSettings.local(
            str(served.checkpoint),
            workdir,
            catalog_url=catalog_url,
            shadow_rate=0.0,
            max_candidates=max(200, candidates),
            num_threads=num_threads,
            instances=instances,
        )
        server = TritonServer(settings).start(startup_timeout_s)
        console.print(f"ready: HTTP {server.http_url}, gRPC {server.grpc_url}, log {server.log_path}")

        steps("5. load: hit (L1) → feast (L2) → recompute, each over HTTP then gRPC")
        _warm_up(server, items.plans(queries, warmup)["hit"][0], request_timeout_s, phase_budget_s)
        plans = items.plans(queries, requests)
        paths = _measure_paths(server, plans, concurrency, request_timeout_s, phase_budget_s, console)

        saturating = max(concurrency, 2 * instances)
        steps(f"6. saturated throughput: hit path, {saturating} gRPC clients for {saturate_s:.0f} s")
        long_plan = items.plans(queries, 100_000)["hit"][1]
        throughput = _measure_throughput(
            server, long_plan, candidates, instances, saturating, request_timeout_s, saturate_s, inprocess
        )
    finally:
        steps("7. stopping tritonserver")
        if server is not None:
            server.stop()
        if catalog is not None:
            catalog.close()
        if tmp is not None:
            tmp.cleanup()
        torch.set_num_threads(threads_before)

    meta = BenchMeta(
        model=model,
        checkpoint=str(served.checkpoint)
        if served.trained or tmp is None
        else "(saved in a temporary dir, removed)",
        fingerprint=gist_model.fingerprint,
        dtype=gist_model.gist.dtype,
        num_gist=gist_model.gist.num_gist,
        device=str(gist_model.device),
        candidates=candidates,
        requests=requests,
        feast_requests=feast_requests,
        recompute_requests=recompute_requests,
        warmup=warmup,
        concurrency=concurrency,
        item_tokens_range=list(item_tokens),
        mean_item_tokens=mean_tokens,
        seed=seed,
        queries=len(queries),
        torch_threads=torch_threads,
        num_threads_setting=num_threads,
        cpu_count=os.cpu_count(),
        platform=platform.platform(),
        duration_s=steps.elapsed(),
    )
    result = ServingBenchResult(meta, inprocess, paths, _ratios(paths, inprocess), throughput)
    _print_table(console, result)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    console.print(f"wrote {out} in {meta.duration_s:.0f}s")
    return result
