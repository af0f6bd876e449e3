"""`gistrank demo`: the whole pipeline on this machine, every component real and bound to 127.0.0.1.

catalog (SQLite) → change events → Kafka (KRaft broker) → consumer → stored K/V in Feast (SQLite)
→ Triton (gist_reranker: L1 → Feast → recompute; full_reranker: the shadow) → rankings side by side,
each request carrying BM25's scores as a cascade's first stage would (the served ranking is the fused
one; the reranker's own and the shadow's beside it, all written to rankings.json) → one catalog update
flows through again → metrics snapshot. Everything it starts, it stops.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from dataclasses import dataclass
from importlib.resources import as_file
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY
from rich.console import Console
from rich.table import Table

from monitoring.scrape import histogram_quantile, sample_sum, scrape
from reranker.catalog.sample import SAMPLE_CATALOG, sample_queries
from reranker.core.checkpoints import default_shadow
from reranker.core.model import Reranker
from reranker.evaluation.baselines import bm25_scores
from reranker.ranking_metrics import top_k
from reranker.serving.local_run import Steps, serving_checkpoint

if TYPE_CHECKING:
    from localservices.kafka_broker import KafkaBroker
    from reranker.catalog.database import Catalog
    from reranker.catalog.kafka_settings import KafkaSettings
    from reranker.serving.client import RerankClient
    from reranker.serving.server import TritonServer
    from reranker.store import GistStore

UPDATED_ITEM = "phone-acme-15pro-128-blue"
L1_TTL_S = 10.0  # short for the demo (default 300 s), so the update step need not wait long


# ------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class UpdateOutcome:
    """One catalog update, served before and after it flowed through the pipeline."""

    item_id: str
    query: str
    before_version: int
    before_score: float
    before_status: str  # cache tier that served it
    after_version: int
    after_score: float
    after_status: str


@dataclass(frozen=True)
class PipelineDemoResult:
    workdir: Path
    fingerprint: str
    items: int  # in the catalog
    stored: int  # with stored K/V in Feast after the consumer ran
    update: UpdateOutcome
    duration_s: float


# --------------------------------------------------------------------------------------------- steps
def _rankings(console: Console, query: str, bm25: list[float], gist: list, full: list, top: int) -> None:
    """The candidates' top `top` by BM25 (the first stage), by the reranker alone, as served (fused with
    BM25) and by the shadow."""

    table = Table(title=f"query: {query!r}", title_justify="left")
    for title in (
        "first stage: BM25",
        "gist_reranker alone (stored K/V) · tier",
        "served: fused with BM25",
        "full_reranker (shadow, full context)",
    ):
        table.add_column(title, overflow="fold")  # a narrow terminal wraps ids, never cuts them
    columns = [
        [f"{gist[i].item_id} ({bm25[i]:.2f})" for i in top_k(bm25, top)],
        [
            f"{gist[i].item_id} ({gist[i].rerank_score:+.2f} · {gist[i].status})"
            for i in top_k([c.rerank_score for c in gist], top)
        ],
        [f"{gist[i].item_id} ({gist[i].score:.2f})" for i in top_k([c.score for c in gist], top)],
        [f"{full[i].item_id} ({full[i].score:+.2f})" for i in top_k([c.score for c in full], top)],
    ]
    for row in zip(*columns, strict=True):
        table.add_row(*row)
    console.print(table)


def _consume_until(consumer, store, versions: dict[str, int], timeout_s: float = 600.0) -> None:
    """Run the consumer until the store holds every item at (at least) the given version.

    Waiting on the store, not on an idle poll, makes the demo independent of how long the consumer
    group takes to form on a busy machine."""
    stop = threading.Event()
    worker = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
    worker.start()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and worker.is_alive():
            rows = store.read(list(versions))
            if all(rows[i] is not None and rows[i].version >= v for i, v in versions.items()):
                return
            time.sleep(0.5)
        raise TimeoutError(f"the consumer did not store {len(versions)} items within {timeout_s:.0f}s")
    finally:
        stop.set()
        worker.join()


def _wait_for_shadow(url: str, timeout_s: float = 300.0) -> None:
    """The shadow scores off the request path; wait until every sampled request has been compared."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = scrape(url)
        if sample_sum(s, "gistrank_shadow_requests_total") >= sample_sum(s, "gistrank_shadow_sampled_total"):
            return
        time.sleep(0.5)


def _metrics_snapshot(console: Console, url: str) -> None:
    s = scrape(url)
    hits = {t: sample_sum(s, "gistrank_cache_hits_total", tier=t) for t in ("l1", "feast")}
    misses = {t: sample_sum(s, "gistrank_cache_misses_total", tier=t) for t in ("l1", "feast")}
    lookups = hits["l1"] + misses["l1"]
    table = Table(title="metrics snapshot (Triton metrics endpoint)", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("cache hit ratio (L1 or Feast)", f"{(hits['l1'] + hits['feast']) / max(lookups, 1):.2f}")
    table.add_row("  L1 hits / misses", f"{hits['l1']:.0f} / {misses['l1']:.0f}")
    table.add_row("  Feast hits / misses", f"{hits['feast']:.0f} / {misses['feast']:.0f}")
    reasons = sorted({dict(lab)["reason"] for (n, lab) in s if n == "gistrank_recompute_fallbacks_total"})
    for reason in reasons:
        table.add_row(
            f"recompute fallbacks: {reason}",
            f"{sample_sum(s, 'gistrank_recompute_fallbacks_total', reason=reason):.0f}",
        )
    for ranking, name in (("", "shadow recall"), ("fused_", "  fused with BM25")):
        recalls = []
        for k in ("1", "5", "10"):
            overlap = sample_sum(s, f"gistrank_shadow_{ranking}topk_overlap_total", k=k)
            reference = sample_sum(s, f"gistrank_shadow_{ranking}topk_reference_total", k=k)
            recalls.append(f"{overlap / reference:.2f}" if reference else "–")
        table.add_row(f"{name} @1 / @5 / @10", " / ".join(recalls))
    given = sample_sum(s, "gistrank_rerank_first_stage_requests_total", first_stage="given")
    absent = sample_sum(s, "gistrank_rerank_first_stage_requests_total", first_stage="absent")
    table.add_row("requests with / without first-stage scores", f"{given:.0f} / {absent:.0f}")
    for stage in ("fetch", "model", "total"):
        p50 = histogram_quantile(s, "gistrank_rerank_request_duration_seconds", 0.5, stage=stage)
        p99 = histogram_quantile(s, "gistrank_rerank_request_duration_seconds", 0.99, stage=stage)
        table.add_row(f"latency {stage} p50 / p99", f"{p50 * 1000:.0f} / {p99 * 1000:.0f} ms")
    events = REGISTRY.get_sample_value("gistrank_consumer_events_total") or 0.0
    compressed = REGISTRY.get_sample_value("gistrank_consumer_items_compressed_total") or 0.0
    table.add_row("consumer events consumed / items compressed", f"{events:.0f} / {compressed:.0f}")
    console.print(table)


def _start_kafka(broker: KafkaBroker, console: Console) -> KafkaSettings:
    from reranker.catalog.kafka_settings import KafkaSettings, ensure_topics

    settings = KafkaSettings.from_env(bootstrap_servers=broker.start(), group_id="gistrank-demo")
    ensure_topics(settings, partitions=3)
    console.print(f"broker at {settings.bootstrap_servers}, topics {settings.topic} + {settings.dlq_topic}")
    return settings


def _publish_catalog(settings: KafkaSettings, catalog_url: str, console: Console) -> Catalog:
    """The bundled sample catalog into SQLite, and one change event per item onto the topic."""
    from reranker.catalog.database import Catalog
    from reranker.catalog.publisher import publish_catalog

    catalog = Catalog(catalog_url)
    with as_file(SAMPLE_CATALOG) as sample:
        loaded = catalog.load_jsonl(sample)
    published = publish_catalog(settings, catalog)
    console.print(f"loaded {loaded} items into {catalog_url}; published {published} events")
    return catalog


def _consume_catalog(
    settings: KafkaSettings, model: Reranker, catalog: Catalog, workdir: Path, console: Console
) -> tuple[GistStore, list[str], int]:
    """Run the consumer until Feast holds every catalog item → (store, item ids, items stored)."""
    from reranker.store import GistStore
    from streaming.consumer import GistConsumer

    store = GistStore(workdir / "feast", fingerprint=model.fingerprint)
    store.apply()
    consumer = GistConsumer(settings, model, store, batch_size=64, compress_batch_size=8, catalog=catalog)
    versions = {item.item_id: item.version for item in catalog.iter_items()}
    ids = list(versions)
    _consume_until(consumer, store, versions)
    stored = sum(row is not None for row in store.read(ids).values())
    console.print(f"{stored}/{len(ids)} items have stored K/V in Feast")
    return store, ids, stored


def _start_triton(
    checkpoint: str, workdir: Path, catalog_url: str, shadow_model: str | None, console: Console
) -> TritonServer:
    """gist_reranker + full_reranker, every request shadowed, a short L1 TTL."""
    from reranker.serving.server import ServerSettings, TritonServer

    # the resolved checkpoint, so an untrained wrap's shadow is the very model saved above (same
    # item cap), not a new wrap of the base
    serving = ServerSettings.local(
        checkpoint,
        workdir,
        full_model_path=shadow_model,
        catalog_url=catalog_url,
        shadow_rate=1.0,
        l1_ttl_s=L1_TTL_S,
    )
    console.print(f"shadow (full_reranker, reads every item in full): {serving.shadow_path}")
    server = TritonServer(serving).start()
    console.print(f"ready: HTTP {server.http_url}, gRPC {server.grpc_url}, metrics {server.metrics_url}")
    return server


def _rank_side_by_side(
    console: Console,
    gist_client: RerankClient,
    full_client: RerankClient,
    catalog: Catalog,
    ids: list[str],
    queries: int,
    out: Path,
) -> None:
    """Each sample query over the whole catalog, with BM25 over the catalog as its first stage; every
    ranking is written to `out` (JSON)."""
    items = catalog.get(ids)
    texts = [items[i].text() for i in ids]
    rows = []
    for query in sample_queries()[:queries]:
        bm25 = bm25_scores(query, texts)
        gist_client.rerank(query, ids)  # first touch: K/V from Feast (or recompute) into L1
        gist = gist_client.rerank(query, ids, bm25)  # served from L1, fused with the first stage's scores
        full = full_client.rerank(query, ids)
        _rankings(console, query, bm25, gist, full, top=5)
        rows.append(
            {
                "query": query,
                "item_ids": ids,
                "first_stage_bm25": bm25,
                "rerank_scores": [c.rerank_score for c in gist],
                "served_scores": [c.score for c in gist],
                "full_context_scores": [c.score for c in full],
            }
        )
    out.write_text(json.dumps(rows, indent=1) + "\n")


def _update_flows_through(
    console: Console,
    settings: KafkaSettings,
    model: Reranker,
    catalog: Catalog,
    store: GistStore,
    gist_client: RerankClient,
    ids: list[str],
) -> UpdateOutcome:
    """Change UPDATED_ITEM in the catalog, publish the event, consume it, and rank again once the old
    L1 entry has expired (L1 is not invalidated by catalog events: it serves until its TTL runs out)."""
    from reranker.catalog.publisher import publish_events
    from streaming.consumer import GistConsumer

    query = sample_queries()[0]
    before = {c.item_id: c for c in gist_client.rerank(query, ids)}[UPDATED_ITEM]
    answered = time.monotonic()  # the L1 entry behind this answer was written by now: it expires by + TTL
    item = catalog.get([UPDATED_ITEM])[UPDATED_ITEM]
    event = catalog.upsert(
        UPDATED_ITEM,
        title=item.title.replace("128GB", "256GB"),
        attributes={**item.attributes, "storage": "256GB"},
    )
    publish_events(settings, [event])
    consumer = GistConsumer(settings, model, store, batch_size=64, compress_batch_size=8, catalog=catalog)
    _consume_until(consumer, store, {UPDATED_ITEM: event.version})
    time.sleep(max(0.0, answered + L1_TTL_S + 0.5 - time.monotonic()))  # what consuming did not wait
    after = {c.item_id: c for c in gist_client.rerank(query, ids)}[UPDATED_ITEM]
    console.print(
        f"{query!r} → {UPDATED_ITEM}: version {item.version} score {before.score:+.3f} ({before.status})"
        f" → version {event.version} score {after.score:+.3f} ({after.status})"
    )
    return UpdateOutcome(
        UPDATED_ITEM,
        query,
        item.version,
        before.score,
        before.status,
        event.version,
        after.score,
        after.status,
    )


# ---------------------------------------------------------------------------------------- the demo
def run_pipeline_demo(
    model: str,
    workdir: Path,
    num_gist: int | None = None,
    dtype: str | None = None,
    queries: int = 3,
    max_item_tokens: int | None = None,
    shadow_model: str | None = None,
    compressor: str | None = None,
) -> PipelineDemoResult:
    """The whole pipeline (module docstring) in `workdir` (emptied first); prints each step."""
    from localservices.kafka_broker import KafkaBroker
    from reranker.serving.client import RerankClient

    console = Console()
    steps = Steps(console)
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    steps("1. model: one checkpoint shared by the consumer and the server (same fingerprint)")
    served = serving_checkpoint(model, workdir, dtype, compressor, num_gist, max_item_tokens)
    g, fingerprint = served.model.gist, served.model.fingerprint
    layout = f"{g.compressor}, k={g.num_gist}, t={g.keep_item_prefix}, K/V stored as {g.storage}"
    console.print(
        f"{model}: {layout}, fingerprint {fingerprint}, fused with first-stage scores by {g.fusion}"
    )
    if shadow_model is None and served.trained:
        # a shipped student's teacher (also when read by selection), reading items as far as it does
        shadow_model = default_shadow(served.checkpoint)
    if not served.trained and served.model.compressor.learned:
        console.print("[yellow]untrained gists and head: rankings show the mechanics, not relevance[/]")

    catalog_url = f"sqlite:///{workdir / 'catalog.db'}"
    broker = KafkaBroker(workdir / "kafka")
    server: TritonServer | None = None
    try:
        steps("2. Kafka broker (KRaft, 127.0.0.1)")
        settings = _start_kafka(broker, console)
        steps("3. catalog → change events")
        catalog = _publish_catalog(settings, catalog_url, console)
        steps("4. consumer: events → compress → Feast (SQLite online store)")
        store, ids, stored = _consume_catalog(settings, served.model, catalog, workdir, console)
        steps("5. Triton: gist_reranker + full_reranker (shadow at rate 1.0)")
        server = _start_triton(served.checkpoint, workdir, catalog_url, shadow_model, console)
        steps("6. rerank after BM25: its ranking, the reranker's alone, the served (fused), the shadow's")
        # long timeouts: on CPU the full-context model reads every item in full, beside the shadow
        with (
            RerankClient(server.http_url, "http", timeout_s=600) as gist_client,
            RerankClient(server.grpc_url, "grpc", model="full_reranker", timeout_s=900) as full_client,
        ):
            rankings = workdir / "rankings.json"
            _rank_side_by_side(console, gist_client, full_client, catalog, ids, queries, rankings)
            console.print(f"rankings with their scores: {rankings}")
            steps(f"7. update {UPDATED_ITEM} in the catalog → event → consumer → served")
            update = _update_flows_through(console, settings, served.model, catalog, store, gist_client, ids)
            _wait_for_shadow(server.metrics_url)
        steps("8. metrics")
        _metrics_snapshot(console, server.metrics_url)
    finally:
        steps("9. stopping everything this demo started")
        if server is not None:
            server.stop()
        broker.stop()
    console.print(f"done in {steps.elapsed():.0f}s; files in {workdir}")
    return PipelineDemoResult(workdir, fingerprint, len(ids), stored, update, steps.elapsed())
