"""GistStore against real Feast online stores: SQLite, a real redis-server (marked `redis`), and a real
Redis Cluster of three masters with a SQL registry, configured by a Feast feature_store.yaml as written
(marked `redis` and `scale`)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from services import feast_cluster_config, redis_cluster, redis_server

from reranker.store import (
    CONFIG_ENV,
    FEATURE_REPO,
    FeatureStoreUnavailableError,
    GistRow,
    GistStore,
    WriteResult,
)
from streaming.redis_server import RedisCluster

BLOB_BYTES = 150_000  # about one SmolLM2 item at k=8 in bf16


def blob(seed: int, size: int = BLOB_BYTES) -> bytes:
    # Include the bytes most likely to be mangled by a text path (NUL, high bytes) at the ends.
    return b"\x00\xff" + random.Random(seed).randbytes(size - 4) + b"\xff\x00"


def row(item_id: str, version: int = 1, fingerprint: str = "fp-a", seed: int = 0, **kw: object) -> GistRow:
    fields: dict = {"num_gist": 8, "item_tokens": 321, "content_hash": f"ch-{item_id}-{version}"} | kw
    return GistRow(item_id, blob(seed), fingerprint, version=version, **fields)


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    with redis_cluster(tmp_path_factory.mktemp("cluster"), masters=3) as running:
        yield running


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("redis_cluster", marks=[pytest.mark.redis, pytest.mark.scale]),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GistStore:
    if request.param == "redis_cluster":
        cluster = request.getfixturevalue("cluster")
        for server in cluster.servers:  # every master starts empty
            with redis.Redis(host="127.0.0.1", port=server.port) as client:
                client.flushall()
        monkeypatch.setenv("GISTRANK_TEST_CLUSTER", cluster.nodes)  # expanded by the config, as Feast does
        monkeypatch.setenv(
            CONFIG_ENV, str(feast_cluster_config(tmp_path / "repo", "${GISTRANK_TEST_CLUSTER}"))
        )
        gist_store = GistStore.from_env()
    elif request.param == "redis":
        url = request.getfixturevalue("redis_url")
        # Feast keys Redis rows by project and entity only, so tests sharing the server must start empty.
        with redis.Redis.from_url(url) as client:
            client.flushdb()
        gist_store = GistStore(tmp_path / "feast", online="redis", redis_url=url)
    else:
        gist_store = GistStore(tmp_path / "feast")
    gist_store.apply()
    return gist_store


def test_round_trip_is_byte_exact(store: GistStore) -> None:
    rows = [row("a", seed=1), row("b", version=7, fingerprint="fp-b", seed=2, num_gist=4, item_tokens=9)]
    assert store.write(rows) == WriteResult(written=("a", "b"), skipped=())
    assert store.read(["a", "b"]) == {"a": rows[0], "b": rows[1]}


def test_batch_read_of_50_with_missing(store: GistStore) -> None:
    ids = [f"item-{i:03d}" for i in range(50)]
    present = ids[::3]
    store.write([row(i, seed=n) for n, i in enumerate(present)])
    got = store.read([*ids, ids[0]])  # a repeated id collapses
    assert list(got) == ids
    for n, i in enumerate(present):
        assert got[i] == row(i, seed=n)
    assert all(got[i] is None for i in ids if i not in present)
    assert store.read([]) == {}


def test_older_version_never_overwrites_newer(store: GistStore) -> None:
    v2 = row("a", version=2, seed=2)
    store.write([v2])
    assert store.write([row("a", version=1, seed=1)]) == WriteResult(written=(), skipped=("a",))
    assert store.read(["a"])["a"] == v2


def test_rewrites_within_one_second_all_land(store: GistStore) -> None:
    # Redis keeps whole-second timestamps and drops a same-second write: the store must step past it.
    for version in range(1, 5):
        assert store.write([row("a", version=version, seed=version)]).written == ("a",)
        assert store.read(["a"])["a"] == row("a", version=version, seed=version)


def test_batch_resolves_duplicates_by_version(store: GistStore) -> None:
    result = store.write([row("a", version=3, seed=3), row("a", version=2, seed=2), row("b", seed=4)])
    assert result == WriteResult(written=("a", "b"), skipped=("a",))
    assert store.read(["a"])["a"] == row("a", version=3, seed=3)


def test_same_version_new_fingerprint_wins_and_duplicates_skip(store: GistStore) -> None:
    store.write([row("a", version=5, fingerprint="fp-old", seed=1)])
    upgraded = row("a", version=5, fingerprint="fp-new", seed=2)
    assert store.write([upgraded]).written == ("a",)
    assert store.read(["a"])["a"] == upgraded
    # At-least-once redelivery of the identical row is a no-op.
    assert store.write([upgraded]) == WriteResult(written=(), skipped=("a",))
    assert store.stored_fingerprints(["a", "zz"]) == {"a": "fp-new", "zz": None}


def test_delete_then_read_is_none(store: GistStore) -> None:
    store.write([row("a", version=1), row("b", version=1)])
    assert store.delete(["a"], [2]) == WriteResult(written=("a",), skipped=())
    assert store.read(["a", "b"]) == {"a": None, "b": row("b", version=1)}
    assert store.stored_fingerprints(["a"]) == {"a": None}
    # The tombstone keeps its version: a stale upsert arriving late stays deleted, a newer one revives.
    assert store.write([row("a", version=2)]).skipped == ("a",)
    assert store.write([row("a", version=1)]).skipped == ("a",)
    assert store.read(["a"]) == {"a": None}
    assert store.write([row("a", version=3)]).written == ("a",)
    assert store.read(["a"]) == {"a": row("a", version=3)}


def test_delete_of_unknown_item_blocks_older_upserts(store: GistStore) -> None:
    assert store.delete(["a"], [4]).written == ("a",)
    assert store.delete(["a"], [4]).skipped == ("a",)
    assert store.write([row("a", version=3)]).skipped == ("a",)
    assert store.read(["a"]) == {"a": None}


def test_delete_with_older_version_is_ignored(store: GistStore) -> None:
    v3 = row("a", version=3)
    store.write([v3])
    assert store.delete(["a"], [2]) == WriteResult(written=(), skipped=("a",))
    assert store.read(["a"]) == {"a": v3}


def test_apply_is_idempotent_from_a_fresh_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh" / "feast"  # parents do not exist yet either
    first = GistStore(data_dir)
    first.apply()
    registry = data_dir / "registry.db"
    before = registry.read_bytes()
    first.apply()
    first.write([row("a")])
    # A second process on the same dir: its apply must leave the registry untouched and see the data.
    second = GistStore(data_dir)
    second.apply()
    assert registry.read_bytes() == before
    assert second.read(["a"]) == {"a": row("a")}


def test_unapplied_store_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(FeatureStoreUnavailableError, match=r"apply\(\)"):
        GistStore(tmp_path / "feast").read(["a"])


def test_unusable_data_dir_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "not-a-dir").write_text("")
    with pytest.raises(FeatureStoreUnavailableError, match="data dir"):
        GistStore(tmp_path / "not-a-dir" / "feast")


@pytest.mark.redis
def test_redis_down_raises_unavailable(tmp_path: Path) -> None:
    with redis_server(tmp_path) as url:
        gist_store = GistStore(tmp_path / "feast", online="redis", redis_url=url)
        gist_store.apply()
        gist_store.write([row("a")])
        assert gist_store.read(["a"]) == {"a": row("a")}
    with pytest.raises(FeatureStoreUnavailableError, match="redis"):
        gist_store.read(["a"])
    with pytest.raises(FeatureStoreUnavailableError):
        gist_store.write([row("a", version=2)])
    with pytest.raises(FeatureStoreUnavailableError):
        gist_store.stored_fingerprints(["a"])


@pytest.mark.redis
@pytest.mark.scale
def test_a_cluster_down_raises_unavailable(tmp_path: Path) -> None:
    """A Redis Cluster that stops answering is "unavailable" (serving recomputes, the consumer retries),
    not an unexpected error."""
    with redis_cluster(tmp_path / "cluster", masters=3) as running:
        gist_store = GistStore(config=feast_cluster_config(tmp_path / "repo", running.nodes))
        gist_store.apply()
        gist_store.write([row("a")])
        assert gist_store.read(["a"]) == {"a": row("a")}
    with pytest.raises(FeatureStoreUnavailableError, match="redis_cluster online store"):
        gist_store.read(["a"])
    with pytest.raises(FeatureStoreUnavailableError):
        gist_store.write([row("a", version=2)])


def test_row_validation() -> None:
    with pytest.raises(ValueError, match="required"):
        GistRow("a", b"", "fp", 8, 1, "ch", 1)
    with pytest.raises(ValueError, match=">= 0"):
        GistRow("a", b"x", "fp", 8, 1, "ch", -1)


def test_feature_repo_has_only_the_definitions_module() -> None:
    # `feast apply` executes every .py file in the repo folder.
    assert sorted(p.name for p in FEATURE_REPO.rglob("*.py")) == ["definitions.py"]


def test_feature_store_yaml_loads_with_feasts_own_loader() -> None:
    from feast.repo_config import load_repo_config

    config = load_repo_config(FEATURE_REPO, FEATURE_REPO / "feature_store.yaml")
    assert config.project == "gistrank"
    assert config.online_store.type == "sqlite"
    registry = (FEATURE_REPO / config.registry.path).resolve()
    assert registry == FEATURE_REPO.parent / "var" / "feast" / "registry.db"


@pytest.mark.redis
@pytest.mark.scale
def test_a_cluster_config_spreads_rows_over_every_master(cluster: RedisCluster, tmp_path: Path) -> None:
    """The store built from a Feast config as written reaches all three masters of the cluster (rows
    land by hash slot), and reads them back through any node."""
    for server in cluster.servers:
        with redis.Redis(host="127.0.0.1", port=server.port) as client:
            client.flushall()
    config = feast_cluster_config(tmp_path / "repo", cluster.nodes)
    gist_store = GistStore(config=config)
    gist_store.apply()
    rows = [row(f"item-{i:03d}", seed=i) for i in range(60)]
    assert gist_store.write(rows).written == tuple(r.item_id for r in rows)
    per_master = []
    for server in cluster.servers:
        with redis.Redis(host="127.0.0.1", port=server.port) as client:
            per_master.append(client.dbsize())
    assert sum(per_master) == 60 and min(per_master) > 0, per_master
    assert GistStore(config=config).read([r.item_id for r in rows]) == {r.item_id: r for r in rows}


def test_a_feast_config_is_used_as_written_or_not_at_all(tmp_path: Path) -> None:
    config = tmp_path / "feature_store.yaml"
    config.write_text((FEATURE_REPO / "feature_store.yaml").read_text())
    with pytest.raises(ValueError, match="leave data_dir, online and redis_url unset"):
        GistStore(tmp_path / "feast", config=config)
    with pytest.raises(ValueError, match="leave data_dir, online and redis_url unset"):
        GistStore(online="redis", config=config)
