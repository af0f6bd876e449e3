"""Feature-store and streaming benchmark (`gistrank bench-store`), measured side by side in one run.

1. Consumer end to end (catalog → Kafka → GistConsumer → Feast) items/s against raw batched
   `compress` items/s of the same texts: the pipeline's overhead (target ≤ 10%); then the same backfill
   by 1 and by 2 `gistrank consume` processes of one group (two partitions), side by side.
2. Feast `get_online_features` latency for 50 ids on SQLite and on Redis, next to a raw pipelined
   Redis GET of the same blobs (the floor any Redis-backed store can reach).
3. Stored blob bytes against the formula 2·L·k·H_kv·h·b for every storage dtype.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis
from prometheus_client import REGISTRY
from rich.console import Console
from rich.table import Table
from tqdm.auto import tqdm

from localservices.kafka_broker import KafkaBroker
from localservices.redis_server import RedisServer
from reranker.catalog.database import Catalog
from reranker.catalog.kafka_settings import KafkaSettings, ensure_topics, group_progress
from reranker.catalog.publisher import publish_events
from reranker.core.config import RerankerConfig, resolve_dtype
from reranker.core.kv_codec import STORAGE_DTYPES, encode, kv_nbytes_formula
from reranker.core.model import Reranker
from reranker.data.data_synth import generate
from reranker.store import GistRow, GistStore
from streaming.consumer import GistConsumer


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": 1000 * statistics.median(ordered),
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))],
    }


def _compressed_so_far() -> float:
    return REGISTRY.get_sample_value("gistrank_consumer_items_compressed_total") or 0.0


def _consumer_vs_compress(model: Reranker, workdir: Path, servers: str, n_items: int, batch: int) -> dict:
    """Steady-state pipeline throughput: the group is joined and the model warm (one warm-up item)
    before the clock starts; progress comes from the consumer's own counter, so watching costs nothing."""
    relevance = generate(0, max(1, n_items // 4) + 1, 1, length_tokens=(150, 400))
    warmup, *items = list(relevance.items.values())[: n_items + 1]
    texts = [item.text for item in items]
    model.compress([warmup.text])  # warm, as the consumer is when its clock starts
    start = time.perf_counter()
    model.compress(texts, batch_size=batch, progress=True)
    raw_s = time.perf_counter() - start

    catalog = Catalog(f"sqlite:///{workdir / 'catalog.db'}")
    store = GistStore(workdir / "feast", fingerprint=model.fingerprint)
    store.apply()
    stop = threading.Event()
    worker: threading.Thread | None = None
    try:
        settings = KafkaSettings.from_env(
            bootstrap_servers=servers, topic="bench", dlq_topic="bench.dlq", group_id="gistrank-bench"
        )
        ensure_topics(settings, partitions=3)
        consumer = GistConsumer(settings, model, store, batch_size=n_items, compress_batch_size=batch)
        worker = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
        worker.start()
        baseline = _compressed_so_far()
        publish_events(
            settings,
            [catalog.upsert(warmup.item_id, warmup.title, dict(warmup.attributes), warmup.description)],
        )
        _wait_for(lambda: _compressed_so_far() >= baseline + 1, worker)
        events = [catalog.upsert(i.item_id, i.title, dict(i.attributes), i.description) for i in items]
        # the clock covers poll, validate, coalesce, store read, compress, encode, Feast write, commit
        start = time.perf_counter()
        publish_events(settings, events)
        with tqdm(total=n_items, desc="consumer", unit="item") as bar:

            def all_compressed() -> bool:
                bar.n = int(_compressed_so_far() - baseline - 1)
                bar.refresh()
                return bar.n >= n_items

            _wait_for(all_compressed, worker)
        pipeline_s = time.perf_counter() - start
    finally:
        stop.set()
        if worker is not None:
            worker.join(timeout=60)  # the consumer leaves its group before the next bench shares the broker
    raw, pipeline = n_items / raw_s, n_items / pipeline_s
    stored = store.read([item.item_id for item in items])
    if any(row is None for row in stored.values()):
        raise RuntimeError("the consumer reported items compressed that are not in the store")
    return {
        "items": n_items,
        "raw_compress_items_per_s": raw,
        "consumer_items_per_s": pipeline,
        "overhead": 1 - pipeline / raw,
    }


def _consumer_scaling(
    model: Reranker,
    workdir: Path,
    servers: str,
    n_items: int,
    batch: int,
    processes: tuple[int, ...] = (1, 2),
) -> dict:
    """A backfill of `n_items` events drained by N `gistrank consume` processes of one group, for each N in
    `processes`, on a topic of max(processes) partitions. The clock starts once every process has loaded
    the model and committed a warm-up event of each partition it owns."""
    checkpoint = model.save_pretrained(workdir / "checkpoint")
    relevance = generate(1, max(1, n_items // 4) + 4, 1, length_tokens=(150, 400))
    items = list(relevance.items.values())
    warmups, items = items[:8], items[8 : 8 + n_items]
    catalog = Catalog(f"sqlite:///{workdir / 'catalog.db'}")
    GistStore(workdir / "feast", fingerprint=model.fingerprint).apply()
    rates: dict[str, float] = {}
    try:
        for count in processes:
            settings = KafkaSettings.from_env(
                bootstrap_servers=servers, topic=f"scale-{count}", dlq_topic=f"scale-{count}.dlq",
                group_id=f"scale-{count}",
            )  # fmt: skip
            ensure_topics(settings, partitions=max(processes))
            env = os.environ | {
                "GISTRANK_KAFKA_TOPIC": settings.topic,
                "GISTRANK_KAFKA_DLQ_TOPIC": settings.dlq_topic,
                "GISTRANK_KAFKA_GROUP_ID": settings.group_id,
            }
            args = [sys.executable, "-m", "streaming.cli", "consume", "--model", str(checkpoint)]
            args += [
                "--feast-dir",
                str(workdir / "feast"),
                "--bootstrap-servers",
                servers,
                "--no-create-topics",
            ]
            args += ["--batch-size", str(batch), "--compress-batch-size", str(batch)]
            procs = [
                subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                for _ in range(count)
            ]
            try:
                warm = [
                    catalog.upsert(f"{i.item_id}-{count}", i.title, dict(i.attributes), i.description)
                    for i in warmups
                ]
                publish_events(settings, warm)
                _wait_for(lambda s=settings: group_progress(s, s.group_id)[0] >= len(warmups), procs)
                events = [
                    catalog.upsert(f"{i.item_id}-{count}", i.title, dict(i.attributes), i.description)
                    for i in items
                ]
                start = time.perf_counter()
                publish_events(settings, events)
                with tqdm(total=n_items, desc=f"{count} consumer process(es)", unit="item") as bar:

                    def drained(s: KafkaSettings = settings) -> bool:
                        done, end = group_progress(s, s.group_id)
                        bar.n = max(0, done - len(warmups))
                        bar.refresh()
                        return done >= end

                    _wait_for(drained, procs)
                rates[str(count)] = n_items / (time.perf_counter() - start)
            finally:
                for proc in procs:
                    proc.send_signal(signal.SIGTERM)
                for proc in procs:
                    proc.wait(timeout=120)
    finally:
        catalog.close()
    return {
        "items": n_items,
        "partitions": max(processes),
        "items_per_s": rates,
        "speedup": {n: rate / rates[str(processes[0])] for n, rate in rates.items()},
    }


def _wait_for(done, worker: threading.Thread | list[subprocess.Popen], timeout_s: float = 1800.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        alive = (
            worker.is_alive()
            if isinstance(worker, threading.Thread)
            else all(p.poll() is None for p in worker)
        )
        if not alive or time.monotonic() > deadline:
            raise RuntimeError("the consumer stopped or timed out before finishing")
        time.sleep(0.1)


def _read_latency(model: Reranker, workdir: Path, n_ids: int, repeats: int) -> dict:
    texts = [
        f"Item {i}. " + "Stainless steel kettle, 1.7 L, 2200 W, model KT-1700. " * 12 for i in range(n_ids)
    ]
    kvs = model.compress(texts)
    rows = [
        GistRow(
            f"item-{i}",
            encode(kv, f"hash-{i}"),
            kv.fingerprint,
            kv.tail_slots,
            kv.item_tokens,
            f"hash-{i}",
            1,
        )
        for i, kv in enumerate(kvs)
    ]
    ids = [row.item_id for row in rows]
    results = {"ids": n_ids, "blob_bytes": len(rows[0].kv)}
    redis_server = RedisServer(workdir / "redis").start()
    try:
        stores = {
            "feast_sqlite": GistStore(workdir / "feast-sqlite", fingerprint=model.fingerprint),
            "feast_redis": GistStore(
                workdir / "feast-redis",
                online="redis",
                redis_url=redis_server.url,
                fingerprint=model.fingerprint,
            ),
        }
        for name, store in stores.items():
            store.apply()
            store.write(rows)
            store.read(ids)  # warm-up
            results[name] = _percentiles([_timed(lambda s=store: s.read(ids)) for _ in range(repeats)])
        raw = redis.Redis.from_url(redis_server.url)
        raw.mset({f"raw:{row.item_id}": row.kv for row in rows})
        keys = [f"raw:{i}" for i in ids]

        def pipelined_get() -> None:
            pipe = raw.pipeline(transaction=False)
            for key in keys:
                pipe.get(key)
            pipe.execute()

        pipelined_get()
        results["raw_redis_pipeline"] = _percentiles([_timed(pipelined_get) for _ in range(repeats)])
        raw.close()
    finally:
        redis_server.stop()
    return results


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _blob_sizes(model: Reranker) -> list[dict]:
    kv = model.compress(["Acme UltraPhone 15 Pro 256GB, 2023."])[0]
    cfg = model.lm.config
    out = []
    for dtype in STORAGE_DTYPES:
        width = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "int4": 0.5, "int2": 0.25}[dtype]
        formula = kv_nbytes_formula(
            cfg.num_hidden_layers, kv.positions, model.num_kv_heads, model.head_dim, width
        )
        blob = len(encode(kv, "0" * 64, storage_dtype=dtype))
        out.append(
            {
                "storage_dtype": dtype,
                "formula_bytes": formula,
                "blob_bytes": blob,
                "overhead_bytes": blob - formula,
            }
        )
    return out


def run_store_bench(
    base: str,
    out: Path,
    workdir: Path,
    num_gist: int = 8,
    dtype: str = "auto",
    consumer_items: int = 64,
    compress_batch: int = 16,
    read_ids: int = 50,
    read_repeats: int = 30,
) -> dict:
    console = Console()
    workdir.mkdir(parents=True, exist_ok=True)
    model = Reranker.from_pretrained(base, RerankerConfig(num_gist=num_gist, dtype=resolve_dtype(dtype)))
    broker = KafkaBroker(workdir / "kafka")  # one broker for both consumer benches, a topic each
    try:
        servers = broker.start()
        consumer = _consumer_vs_compress(model, workdir / "consumer", servers, consumer_items, compress_batch)
        scaling = _consumer_scaling(model, workdir / "scaling", servers, consumer_items, compress_batch)
    finally:
        broker.stop()
    result = {
        "meta": {"base": base, "num_gist": num_gist, "dtype": model.gist.dtype, "device": str(model.device)},
        "consumer": consumer,
        "consumer_scaling": scaling,
        "read": _read_latency(model, workdir / "read", read_ids, read_repeats),
        "blobs": _blob_sizes(model),
    }
    c = result["consumer"]
    table = Table(title=f"consumer vs raw compress — {c['items']} items, {base}, {model.gist.dtype}")
    for col in ("raw compress items/s", "consumer items/s", "pipeline overhead"):
        table.add_column(col, justify="right")
    table.add_row(
        f"{c['raw_compress_items_per_s']:.2f}", f"{c['consumer_items_per_s']:.2f}", f"{c['overhead']:.1%}"
    )
    console.print(table)
    s = result["consumer_scaling"]
    title = (
        f"backfill of {s['items']} items by consumer processes of one group ({s['partitions']} partitions)"
    )
    table = Table(title=title)
    for col in ("processes", "items/s", "speed-up"):
        table.add_column(col, justify="right")
    for n, rate in s["items_per_s"].items():
        table.add_row(n, f"{rate:.2f}", f"{s['speedup'][n]:.2f}x")
    console.print(table)
    r = result["read"]
    table = Table(title=f"online read of {r['ids']} ids ({r['blob_bytes'] / 1024:.0f} KiB blobs)")
    for col in ("path", "p50 ms", "p99 ms"):
        table.add_column(col, justify="right")
    for name in ("feast_sqlite", "feast_redis", "raw_redis_pipeline"):
        table.add_row(name, f"{r[name]['p50_ms']:.1f}", f"{r[name]['p99_ms']:.1f}")
    console.print(table)
    table = Table(title="blob bytes vs 2·L·k·H_kv·h·b")
    for col in ("storage dtype", "formula", "blob", "overhead"):
        table.add_column(col, justify="right")
    for b in result["blobs"]:
        table.add_row(
            b["storage_dtype"], str(b["formula_bytes"]), str(b["blob_bytes"]), str(b["overhead_bytes"])
        )
    console.print(table)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {out}")
    return result
