"""The scale-out data path on real processes: a Redis Cluster of three masters behind Feast, configured
by a Feast feature_store.yaml as a deployment writes it (redis_cluster online store, SQL registry), read
by a real tritonserver (`gistrank serve --feast-config`) and written only by a consumer process, which a
real broker feeds with the catalog's changes and the server's refresh requests."""

from __future__ import annotations

import signal
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import redis
import typer
from helpers import wait_until
from prometheus_client.parser import text_string_to_metric_families
from services import (
    WAIT_S,
    ConsumerProcess,
    Probe,
    RedisCluster,
    Serve,
    feast_cluster_config,
    free_port,
    kafka_env,
    redis_cluster,
)
from typer.testing import CliRunner

from localservices.kafka_broker import KafkaBroker
from reranker import Reranker, RerankerConfig
from reranker.catalog.database import Catalog
from reranker.catalog.kafka_settings import KafkaSettings, ensure_topics
from reranker.catalog.publisher import publish_events
from reranker.cli import app
from reranker.core.render import render_item
from reranker.serving.client import RerankClient
from reranker.serving.server import tritonserver_binary
from reranker.store import GistStore
from streaming.cli.options import OnlineStore, open_store

pytestmark = [pytest.mark.scale, pytest.mark.redis]

IDS = [f"sku-{n:03d}" for n in range(12)]
QUERY = "blue phone 2023"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    with redis_cluster(tmp_path_factory.mktemp("cluster"), masters=3) as running:
        yield running


@pytest.fixture(scope="module")
def config(cluster: RedisCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return feast_cluster_config(tmp_path_factory.mktemp("feast-repo"), cluster.nodes)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_base: Path) -> Path:
    model = Reranker.from_pretrained(
        tiny_base, RerankerConfig(num_gist=4, dtype="float32", max_item_tokens=96), device="cpu"
    )
    return model.save_pretrained(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Catalog]:
    colours = ["blue", "black", "steel"]
    with Catalog(f"sqlite:///{tmp_path_factory.mktemp('catalog') / 'catalog.db'}") as cat:
        for n, item_id in enumerate(IDS):
            cat.upsert(item_id, f"Acme phone {n}", {"year": 2019 + n % 5}, f"A {colours[n % 3]} phone.")
        yield cat


def test_the_consumer_cli_takes_a_feast_config_and_refuses_mixed_settings(config: Path) -> None:
    store = open_store("f" * 32, None, OnlineStore.sqlite, None, config)
    assert store.online == "redis" and store.config_path == config.resolve()
    with pytest.raises(typer.BadParameter, match="--feast-config sets the stores itself"):
        open_store("f" * 32, None, OnlineStore.redis, "redis://127.0.0.1:1/0", config)


def kafka_settings(broker: KafkaBroker, name: str) -> KafkaSettings:
    settings = KafkaSettings(
        bootstrap_servers=broker.bootstrap_servers,
        topic=f"{name}.changes",
        dlq_topic=f"{name}.dlq",
        group_id=f"{name}.writer",
        session_timeout_ms=6000,
    )
    ensure_topics(settings, partitions=2)
    return settings


def serve_args(
    checkpoint: Path, catalog: Catalog, config: Path, workdir: Path, ports: list[int]
) -> list[str]:
    return [
        "--model", str(checkpoint),
        "--catalog-url", str(catalog.engine.url),
        "--feast-config", str(config),
        "--shadow-rate", "0",
        "--num-threads", "1",
        "--http-port", str(ports[0]),
        "--grpc-port", str(ports[1]),
        "--metrics-port", str(ports[2]),
        "--workdir", str(workdir),
    ]  # fmt: skip


@pytest.mark.triton
@pytest.mark.kafka
def test_triton_reads_the_cluster_and_its_recomputes_reach_it_only_through_the_consumer(
    tmp_path: Path,
    cluster: RedisCluster,
    config: Path,
    checkpoint: Path,
    catalog: Catalog,
    broker: KafkaBroker,
) -> None:
    """Rows the consumer process wrote to the cluster are Feast hits in a tritonserver configured only by
    the Feast config. An item missing from the cluster is recomputed on the request path and handed to the
    pipeline as a refresh request; the consumer (the one writer) stores it, where a fresh reader finds it."""
    if not tritonserver_binary().is_file():
        pytest.fail("tritonserver (nvidia-pytriton) is not installed: run make setup")
    model = Reranker.from_pretrained(checkpoint, device="cpu")
    settings = kafka_settings(broker, "single-writer")
    probe = Probe(settings)
    GistStore(
        config=config, fingerprint=model.fingerprint
    ).apply()  # before two processes race to register the view
    writer = ConsumerProcess(settings, checkpoint, None, free_port(), feast_config=config)
    stored, missing = IDS[:8], IDS[8:]
    ports = [free_port() for _ in range(3)]
    args = [*serve_args(checkpoint, catalog, config, tmp_path / "run", ports)]
    serve = Serve([*args, "--kafka-bootstrap-servers", settings.bootstrap_servers], env=kafka_env(settings))
    try:
        assert publish_events(settings, [item.event() for item in catalog.get(stored).values()]) == 8
        wait_until(probe.caught_up, WAIT_S, "the consumer to store the catalog's first items")
        serve.wait_for("ready in", timeout_s=600)
        items = catalog.get(stored)
        kvs = model.compress(
            [render_item(items[i].title, items[i].attributes, items[i].description) for i in stored]
        )
        with RerankClient(f"127.0.0.1:{ports[1]}", "grpc") as client:
            hits = client.rerank(QUERY, stored)
            assert {x.status for x in hits} == {"feast"}
            np.testing.assert_allclose(
                [x.score for x in hits], model.score(QUERY, kvs).numpy(), rtol=1e-4, atol=1e-5
            )
            assert {x.status for x in client.rerank(QUERY, missing)} == {"recompute"}
        # the refresh requests reach the topic off the request path, then the consumer writes them
        wait_until(lambda: sum(probe.end_offsets().values()) == len(IDS), WAIT_S, "the refresh requests")
        wait_until(probe.caught_up, WAIT_S, "the consumer to store the recomputed items")
        fresh = GistStore(config=config, fingerprint=model.fingerprint)
        rows = fresh.read(missing)
        assert {row.fingerprint for row in rows.values() if row} == {model.fingerprint}
        assert all(rows[i].version == catalog.get([i])[i].version for i in missing)
    finally:
        assert serve.stop() == 0, serve.output
        writer.finish(signal.SIGTERM)
        probe.close()
    keys = []
    for server in cluster.servers:
        with redis.Redis(host="127.0.0.1", port=server.port) as client:
            keys.append(client.dbsize())
    # every item, on every master, and the server's note that it serves the view (`record_use`)
    assert sum(keys) == len(IDS) + 1 and min(keys) > 0, keys


def samples(metrics_port: int, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample `name` on a tritonserver's metrics endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    ]


def recomputes(metrics_port: int) -> float:
    """All recompute fallbacks the gist_reranker instances have counted, whatever the reason."""
    return sum(v for _, v in samples(metrics_port, "gistrank_recompute_fallbacks_total"))


@pytest.mark.triton
@pytest.mark.kafka
@pytest.mark.chaos
def test_a_rollout_backfills_beside_the_live_model_then_switches_and_collects_the_old_view(
    tmp_path: Path,
    config: Path,
    checkpoint: Path,
    tiny_base: Path,
    catalog: Catalog,
    broker: KafkaBroker,
) -> None:
    """Model A serves from its view while model B's consumer group backfills B's own view from the same
    topic: every answer of A's server stays a cache hit and it recomputes nothing. `rollout status` says
    when B covers the catalog; `rollout gc` refuses A's view while A's server reads it; a server on B then
    serves from the store, and `rollout gc --force` drops A's view and leaves B's."""
    if not tritonserver_binary().is_file():
        pytest.fail("tritonserver (nvidia-pytriton) is not installed: run make setup")
    model_a = Reranker.from_pretrained(checkpoint, device="cpu")
    model_b = Reranker.from_pretrained(
        tiny_base, RerankerConfig(num_gist=2, dtype="float32", max_item_tokens=96), device="cpu"
    )
    checkpoint_b = model_b.save_pretrained(tmp_path / "model-b")
    assert model_a.fingerprint != model_b.fingerprint
    topic = kafka_settings(broker, "rollout")
    group_a = topic.model_copy(update={"group_id": "rollout.writer-a"})
    group_b = topic.model_copy(update={"group_id": "rollout.writer-b"})  # one group per model
    probe_a, probe_b = Probe(group_a), Probe(group_b)
    store_a = GistStore(config=config, fingerprint=model_a.fingerprint)
    store_a.apply()
    rollout = [*("--catalog-url", str(catalog.engine.url)), "--feast-config", str(config)]

    def status(model: Reranker) -> tuple[int, str]:
        result = CliRunner().invoke(app, ["rollout", "status", "--fingerprint", model.fingerprint, *rollout])
        return result.exit_code, result.output

    writers = [ConsumerProcess(group_a, checkpoint, None, free_port(), feast_config=config)]
    servers: list[Serve] = []
    try:
        assert publish_events(topic, [item.event() for item in catalog.get(IDS).values()]) == len(IDS)
        wait_until(probe_a.caught_up, WAIT_S, "model A's consumer to store the catalog")
        assert status(model_a)[0] == 0
        ports_a = [free_port() for _ in range(3)]
        servers.append(Serve(serve_args(checkpoint, catalog, config, tmp_path / "run-a", ports_a)))
        servers[0].wait_for("ready in", timeout_s=600)
        with RerankClient(f"127.0.0.1:{ports_a[1]}", "grpc") as client:
            assert {x.status for x in client.rerank(QUERY, IDS)} == {"feast"}
            code, out = status(model_b)
            assert code == 3 and "the store has no view of it" in out, out  # B's consumers not started
            writers.append(ConsumerProcess(group_b, checkpoint_b, None, free_port(), feast_config=config))
            during = 0
            while not probe_b.caught_up():  # B backfills from the topic; A keeps answering from its view
                assert {x.status for x in client.rerank(QUERY, IDS)} <= {"feast", "l1"}
                during += 1
            assert during > 0  # requests were answered while B's view was still filling
            assert {x.status for x in client.rerank(QUERY, IDS)} <= {"feast", "l1"}
        assert recomputes(ports_a[2]) == 0
        code, out = status(model_b)
        assert code == 0 and f"model {model_b.fingerprint} covers the catalog" in out, out
        gc_args = ["rollout", "gc", "--fingerprint", model_b.fingerprint, *rollout]
        refused = CliRunner().invoke(app, gc_args)  # too early: A's replica still serves A's view
        assert refused.exit_code == 1, refused.output
        assert f"refuse {model_a.fingerprint}: serving read it" in refused.output, refused.output
        with RerankClient(f"127.0.0.1:{ports_a[1]}", "grpc") as client:
            assert {x.status for x in client.rerank(QUERY, IDS)} <= {"feast", "l1"}
        assert recomputes(ports_a[2]) == 0
        assert servers[0].stop() == 0

        ports_b = [free_port() for _ in range(3)]  # the switch: replicas on model B
        servers.append(Serve(serve_args(checkpoint_b, catalog, config, tmp_path / "run-b", ports_b)))
        servers[1].wait_for("ready in", timeout_s=600)
        # A's replica stopped a moment ago, so its note is recent: the operator knows, and forces
        gc = CliRunner().invoke(app, [*gc_args, "--force"])
        assert gc.exit_code == 0 and f"dropped {model_a.fingerprint}" in gc.output, gc.output
        assert GistStore(config=config, fingerprint=model_b.fingerprint).views() == [model_b.fingerprint]
        with RerankClient(f"127.0.0.1:{ports_b[1]}", "grpc") as client:
            got = client.rerank(QUERY, IDS)
        assert {x.status for x in got} == {"feast"}
        items = catalog.get(IDS)
        kvs = model_b.compress(
            [render_item(items[i].title, items[i].attributes, items[i].description) for i in IDS]
        )
        np.testing.assert_allclose(
            [x.score for x in got], model_b.score(QUERY, kvs).numpy(), rtol=1e-4, atol=1e-5
        )
        assert recomputes(ports_b[2]) == 0
    finally:
        for server in servers:
            server.stop()
        for writer in writers:
            writer.finish(signal.SIGTERM)
        probe_a.close()
        probe_b.close()


@pytest.mark.triton
def test_several_model_instances_share_the_load_and_report_through_triton(
    tmp_path: Path, config: Path, checkpoint: Path, catalog: Catalog
) -> None:
    """`gistrank serve --instances 2`: two gist_reranker processes answer concurrent requests; their
    gistrank_* series reach Triton's one metrics endpoint labelled by instance, and the per-instance counts
    add up to the requests sent (and to Triton's own count)."""
    if not tritonserver_binary().is_file():
        pytest.fail("tritonserver (nvidia-pytriton) is not installed: run make setup")
    model = Reranker.from_pretrained(checkpoint, device="cpu")
    GistStore(config=config, fingerprint=model.fingerprint).apply()
    ports = [free_port() for _ in range(3)]
    serve = Serve([*serve_args(checkpoint, catalog, config, tmp_path / "run", ports), "--instances", "2"])
    requests, threads = 24, 4
    try:
        serve.wait_for("ready in", timeout_s=600)

        def send(n: int) -> set[str]:
            with RerankClient(f"127.0.0.1:{ports[0]}", "http") as client:
                return {x.status for i in range(n) for x in client.rerank(QUERY, IDS[i % 4 : i % 4 + 6])}

        with ThreadPoolExecutor(threads) as pool:
            statuses = set().union(*pool.map(send, [requests // threads] * threads))
        assert statuses <= {"feast", "l1", "recompute"}
        ok = {
            labels["model_instance"]: v
            for labels, v in samples(ports[2], "gistrank_rerank_requests_total")
            if labels["outcome"] == "ok"
        }
        assert set(ok) == {"gist_reranker_0_0", "gist_reranker_0_1"}, ok
        assert all(v > 0 for v in ok.values()) and sum(ok.values()) == requests, ok
        gauges = {labels["model_instance"] for labels, _ in samples(ports[2], "gistrank_l1_cache_bytes")}
        assert gauges == set(ok)  # each instance its own L1
        triton = [
            v
            for labels, v in samples(ports[2], "nv_inference_request_success_total")
            if labels["model"] == "gist_reranker"
        ]
        assert sum(triton) == requests
    finally:
        assert serve.stop() == 0, serve.output
