"""The scale-out data path on real processes: a Redis Cluster of three masters behind Feast, configured
by a Feast feature_store.yaml as a deployment writes it (redis_cluster online store, SQL registry), read
by a real tritonserver (`gistrank serve --feast-config`) and written only by a consumer process, which a
real broker feeds with the catalog's changes and the server's refresh requests."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis
import typer
from helpers import wait_until
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

from reranker import GistConfig, GistReranker
from reranker.core.render import render_item
from reranker.serving.client import RerankClient
from reranker.serving.server import tritonserver_binary
from reranker.store import GistStore
from streaming.broker import KafkaBroker
from streaming.catalog import Catalog
from streaming.cli import OnlineStore, _open_store
from streaming.kafka_settings import KafkaSettings, ensure_topics
from streaming.publisher import publish_events

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
    model = GistReranker.from_pretrained(
        tiny_base, GistConfig(num_gist=4, dtype="float32", max_item_tokens=96), device="cpu"
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
    store = _open_store(None, OnlineStore.sqlite, None, config)
    assert store.online == "redis" and store.config_path == config.resolve()
    with pytest.raises(typer.BadParameter, match="--feast-config sets the stores itself"):
        _open_store(None, OnlineStore.redis, "redis://127.0.0.1:1/0", config)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    kafka = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    kafka.start()
    yield kafka
    kafka.stop()


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
        "--model-metrics-port", str(ports[3]),
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
    model = GistReranker.from_pretrained(checkpoint, device="cpu")
    settings = kafka_settings(broker, "single-writer")
    probe = Probe(settings)
    GistStore(config=config).apply()  # before two processes race to register the view
    writer = ConsumerProcess(settings, checkpoint, None, free_port(), feast_config=config)
    stored, missing = IDS[:8], IDS[8:]
    ports = [free_port() for _ in range(4)]
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
        fresh = GistStore(config=config)
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
    assert sum(keys) == len(IDS) and min(keys) > 0, keys  # every item, on every master
