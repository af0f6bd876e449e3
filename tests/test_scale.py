"""The scale-out data path on real processes: a Redis Cluster of three masters behind Feast, configured
by a Feast feature_store.yaml as a deployment writes it (redis_cluster online store, SQL registry), read
and written by a real tritonserver (`gistrank serve --feast-config`) and by the consumer's store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis
import typer
from helpers import catalog_row
from services import RedisCluster, Serve, feast_cluster_config, redis_cluster

from reranker import GistConfig, GistReranker
from reranker.core.render import render_item
from reranker.serving.client import RerankClient
from reranker.serving.server import free_port, tritonserver_binary
from reranker.store import GistStore
from streaming.catalog import Catalog
from streaming.cli import OnlineStore, _open_store

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


@pytest.mark.triton
def test_triton_reads_and_writes_back_through_the_cluster(
    tmp_path: Path, cluster: RedisCluster, config: Path, checkpoint: Path, catalog: Catalog
) -> None:
    """Rows the consumer's store wrote to the cluster are Feast hits in a tritonserver configured only by
    the Feast config; an item missing from the cluster is recomputed, and its write-back lands in the
    cluster, where a fresh reader finds it."""
    if not tritonserver_binary().is_file():
        pytest.fail("tritonserver (nvidia-pytriton) is not installed: run make setup")
    model = GistReranker.from_pretrained(checkpoint, device="cpu")
    store = GistStore(config=config)
    store.apply()
    stored, missing = IDS[:8], IDS[8:]
    items = catalog.get(stored)
    kvs = model.compress(
        [render_item(items[i].title, items[i].attributes, items[i].description) for i in stored]
    )
    store.write([catalog_row(catalog, i, kv) for i, kv in zip(stored, kvs, strict=True)])
    ports = [free_port() for _ in range(4)]
    args = [
        "--model", str(checkpoint),
        "--catalog-url", str(catalog.engine.url),
        "--feast-config", str(config),
        "--shadow-rate", "0",
        "--num-threads", "1",
        "--http-port", str(ports[0]),
        "--grpc-port", str(ports[1]),
        "--metrics-port", str(ports[2]),
        "--model-metrics-port", str(ports[3]),
        "--workdir", str(tmp_path / "run"),
    ]  # fmt: skip
    serve = Serve(args)
    try:
        serve.wait_for("ready in", timeout_s=600)
        with RerankClient(f"127.0.0.1:{ports[1]}", "grpc") as client:
            hits = client.rerank(QUERY, stored)
            assert {x.status for x in hits} == {"feast"}
            np.testing.assert_allclose(
                [x.score for x in hits], model.score(QUERY, kvs).numpy(), rtol=1e-4, atol=1e-5
            )
            assert {x.status for x in client.rerank(QUERY, missing)} == {"recompute"}
        fresh = GistStore(config=config)  # write-back runs off the request path: wait for it
        deadline = time.monotonic() + 60
        while any(row is None for row in fresh.read(missing).values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert {row.fingerprint for row in fresh.read(missing).values()} == {model.fingerprint}
    finally:
        assert serve.stop() == 0, serve.output
    keys = []
    for server in cluster.servers:
        with redis.Redis(host="127.0.0.1", port=server.port) as client:
            keys.append(client.dbsize())
    assert sum(keys) == len(IDS) and min(keys) > 0, keys  # every item, on every master
