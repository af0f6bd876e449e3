"""GistStore against real Feast online stores: SQLite, a real redis-server (marked `redis`), and a real
Redis Cluster of three masters with a SQL registry, configured by a Feast feature_store.yaml as written
(marked `redis` and `scale`)."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from services import feast_cluster_config, redis_cluster, redis_server

from localservices.redis_server import RedisCluster
from reranker.store import (
    CONFIG_ENV,
    FEATURE_REPO,
    FeatureStoreUnavailableError,
    GistRow,
    GistStore,
    WriteResult,
)

BLOB_BYTES = 150_000  # about one SmolLM2 item at k=8 in bf16


def blob(seed: int, size: int = BLOB_BYTES) -> bytes:
    # Include the bytes most likely to be mangled by a text path (NUL, high bytes) at the ends.
    return b"\x00\xff" + random.Random(seed).randbytes(size - 4) + b"\xff\x00"


FP_A, FP_B = "a" * 32, "b" * 32  # two models; the stores below are model A's


def row(item_id: str, version: int = 1, fingerprint: str = FP_A, seed: int = 0, **kw: object) -> GistRow:
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
        gist_store = GistStore.from_env(FP_A)
    elif request.param == "redis":
        url = request.getfixturevalue("redis_url")
        # Feast keys Redis rows by project and entity only, so tests sharing the server must start empty.
        with redis.Redis.from_url(url) as client:
            client.flushdb()
        gist_store = GistStore(tmp_path / "feast", online="redis", redis_url=url, fingerprint=FP_A)
    else:
        gist_store = GistStore(tmp_path / "feast", fingerprint=FP_A)
    gist_store.apply()
    return gist_store


def test_round_trip_is_byte_exact(store: GistStore) -> None:
    rows = [row("a", seed=1), row("b", version=7, seed=2, num_gist=4, item_tokens=9)]
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


def test_same_version_new_bytes_win_and_duplicates_skip(store: GistStore) -> None:
    store.write([row("a", version=5, seed=1)])
    repaired = row("a", version=5, seed=2)  # e.g. a corrupt blob recompressed on a refresh request
    assert store.write([repaired]).written == ("a",)
    assert store.read(["a"])["a"] == repaired
    # At-least-once redelivery of the identical row is a no-op.
    assert store.write([repaired]) == WriteResult(written=(), skipped=("a",))
    assert store.stored_fingerprints(["a", "zz"]) == {"a": FP_A, "zz": None}


def test_each_model_has_its_own_view_and_a_dropped_view_takes_its_rows(store: GistStore) -> None:
    """A rollout on the store: model B's rows go to B's view beside A's, neither sees the other's, each
    view's coverage of the catalog is its own, and dropping B's view removes its rows and leaves A's."""
    with pytest.raises(ValueError, match="written to the view of model"):
        store.write([row("a", fingerprint=FP_B)])
    a_rows = [row(i, seed=n) for n, i in enumerate(("x", "y", "z"))]
    store.write(a_rows)
    b_store = store.for_model(FP_B)
    b_store.apply()
    assert b_store.read(["x", "y", "z"]) == {"x": None, "y": None, "z": None}
    b_rows = [row("x", fingerprint=FP_B, seed=7), row("y", version=2, fingerprint=FP_B, seed=8)]
    b_store.write(b_rows)
    assert store.read(["x", "y", "z"]) == {r.item_id: r for r in a_rows}
    assert b_store.read(["x", "y"]) == {r.item_id: r for r in b_rows}
    assert store.views() == [FP_A, FP_B] == b_store.views()

    catalog = [("x", 1), ("y", 2), ("z", 1)]  # y changed to version 2 since A stored it
    a, b = store.coverage(catalog), b_store.coverage(catalog, batch=2)
    assert (a.current, a.behind, a.items) == (2, 1, 3)
    assert (b.current, b.behind, b.items) == (2, 0, 3) and b.ratio == pytest.approx(2 / 3)

    b_store.drop()
    assert store.views() == [FP_A]
    assert store.read(["x", "y", "z"]) == {r.item_id: r for r in a_rows}
    with pytest.raises(FeatureStoreUnavailableError, match="apply"):
        b_store.read(["x"])
    b_store.apply()  # a new view of the same name starts empty: the old rows went with the view
    assert b_store.read(["x", "y"]) == {"x": None, "y": None}


# A writer that read the stored rows, then stalled (a consumer dropped from its group mid-batch, a GC
# pause) before its push: the push happens only once the test creates `go`.
_ZOMBIE = """
import json, sys, time
from pathlib import Path
from reranker.store import GistRow, GistStore
config, data_dir, online, redis_url, fp, ready, go = sys.argv[1:]
store = (GistStore(config=config, fingerprint=fp) if config else
         GistStore(Path(data_dir), online, redis_url or None, fingerprint=fp))
push = store._store.push
def stalled_push(*args, **kwargs):
    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.02)
    return push(*args, **kwargs)
store._store.push = stalled_push
result = store.write([GistRow("a", b"zombie", fp, 8, 5, "ch-zombie", version=2)])
print(json.dumps({"written": result.written, "skipped": result.skipped}))
"""


@pytest.mark.chaos
def test_a_stalled_writer_cannot_put_an_older_version_over_a_newer_one(
    store: GistStore, tmp_path: Path
) -> None:
    store.write([row("a", version=1, seed=1)])
    ready, go = tmp_path / "ready", tmp_path / "go"
    args = [str(store.config_path or ""), str(store.data_dir), store.online, store.redis_url or ""]
    zombie = subprocess.Popen(
        [sys.executable, "-c", _ZOMBIE, *args, FP_A, str(ready), str(go)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():  # the zombie read version 1, and decided its version 2 wins
            assert zombie.poll() is None and time.monotonic() < deadline, "the zombie never reached its push"
            time.sleep(0.05)
        newer = row("a", version=3, seed=3)
        assert store.write([newer]).written == ("a",)  # the new owner, in this process
        go.touch()
        out, _ = zombie.communicate(timeout=120)
    finally:
        zombie.kill()
    assert zombie.returncode == 0
    assert json.loads(out) == {"written": [], "skipped": ["a"]}  # it learns that it lost
    assert store.read(["a"])["a"] == newer


def test_serving_use_is_noted_per_view_and_is_no_item(store: GistStore) -> None:
    other = store.for_model(FP_B)
    other.apply()
    assert store.last_use() is None
    before = int(time.time())
    store.record_use("host-1:42")
    when, replica = store.last_use()
    assert before <= when <= time.time() and replica == "host-1:42"
    store.record_use("host-2:7")  # the latest note wins, even within the same second
    assert store.last_use()[1] == "host-2:7"
    assert other.last_use() is None  # per view: model B's replicas have not read B's
    assert store.coverage([("a", 1)]).current == 0


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
    first = GistStore(data_dir, fingerprint=FP_A)
    first.apply()
    registry = data_dir / "registry.db"
    before = registry.read_bytes()
    first.apply()
    first.write([row("a")])
    # A second process on the same dir: its apply must leave the registry untouched and see the data.
    second = GistStore(data_dir, fingerprint=FP_A)
    second.apply()
    assert registry.read_bytes() == before
    assert second.read(["a"]) == {"a": row("a")}


def test_unapplied_store_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(FeatureStoreUnavailableError, match=r"apply\(\)"):
        GistStore(tmp_path / "feast", fingerprint=FP_A).read(["a"])


def test_unusable_data_dir_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "not-a-dir").write_text("")
    with pytest.raises(FeatureStoreUnavailableError, match="data dir"):
        GistStore(tmp_path / "not-a-dir" / "feast", fingerprint=FP_A)


@pytest.mark.redis
def test_redis_down_raises_unavailable(tmp_path: Path) -> None:
    with redis_server(tmp_path) as url:
        gist_store = GistStore(tmp_path / "feast", online="redis", redis_url=url, fingerprint=FP_A)
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
        gist_store = GistStore(
            config=feast_cluster_config(tmp_path / "repo", running.nodes), fingerprint=FP_A
        )
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
    gist_store = GistStore(config=config, fingerprint=FP_A)
    gist_store.apply()
    rows = [row(f"item-{i:03d}", seed=i) for i in range(60)]
    assert gist_store.write(rows).written == tuple(r.item_id for r in rows)
    per_master = []
    for server in cluster.servers:
        with redis.Redis(host="127.0.0.1", port=server.port) as client:
            per_master.append(client.dbsize())
    assert sum(per_master) == 60 and min(per_master) > 0, per_master
    assert GistStore(config=config, fingerprint=FP_A).read([r.item_id for r in rows]) == {
        r.item_id: r for r in rows
    }


def test_a_feast_config_is_used_as_written_or_not_at_all(tmp_path: Path) -> None:
    config = tmp_path / "feature_store.yaml"
    config.write_text((FEATURE_REPO / "feature_store.yaml").read_text())
    with pytest.raises(ValueError, match="leave data_dir, online and redis_url unset"):
        GistStore(tmp_path / "feast", config=config, fingerprint=FP_A)
    with pytest.raises(ValueError, match="leave data_dir, online and redis_url unset"):
        GistStore(online="redis", config=config, fingerprint=FP_A)


def test_rollout_status_and_gc_commands(two_views: TwoViews, tmp_path: Path) -> None:
    """`gistrank rollout status` reports each model's view against the live catalog and exits 0 only once
    the asked model covers every item at its catalog version; `rollout gc` drops the other views."""
    from typer.testing import CliRunner

    from reranker.cli import app

    store_a, store_b, versions = two_views.a, two_views.b, two_views.versions
    catalog_url, feast = two_views.options[1], two_views.options[2:]

    def rollout(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(app, ["rollout", *args, *feast])
        return result.exit_code, result.output

    # cannot tell (exit 3), writing nothing: no catalog there, a model without a view, no store there
    missing_catalog = tmp_path / "missing.db"
    code, out = rollout("status", "--fingerprint", FP_B, "--catalog-url", f"sqlite:///{missing_catalog}")
    assert code == 3 and "no catalog at" in out and not missing_catalog.exists(), out
    nowhere = tmp_path / "nowhere" / "catalog.db"  # a folder that is not there: a usage error, nothing made
    code, out = rollout("status", "--fingerprint", FP_B, "--catalog-url", f"sqlite:///{nowhere}")
    assert code == 2 and "does not exist" in out and not nowhere.parent.exists(), out
    code, out = rollout("status", "--fingerprint", "c" * 32, "--catalog-url", catalog_url)
    assert code == 3 and "the store has no view of it" in out and store_a.views() == [FP_A, FP_B], out
    result = CliRunner().invoke(
        app, ["rollout", "status", "--fingerprint", FP_B, "--catalog-url", catalog_url, "--feast-dir", "nope"]
    )
    assert result.exit_code == 3 and "no Feast store (no registry at" in result.output, result.output
    assert not Path("nope").exists()
    code, out = rollout("status", "--fingerprint", FP_B, "--catalog-url", catalog_url)
    assert code == 1 and f"model {FP_B} is not ready: 1 items not current yet" in out, out
    assert re.search(rf"{FP_A}\s+3\s+0\s+0\s+100\.0%\n", out), out  # current, behind, missing
    assert re.search(rf"{FP_B}\s+2\s+0\s+1\s+66\.7%\s+<- --model", out), out
    store_b.write([row("z", version=versions["z"], fingerprint=FP_B)])
    code, out = rollout("status", "--fingerprint", FP_B, "--catalog-url", catalog_url)
    assert code == 0 and f"model {FP_B} covers the catalog" in out, out

    code, out = rollout("gc", "--fingerprint", FP_B, "--dry-run", "--catalog-url", catalog_url)
    assert code == 0 and f"would drop {FP_A}" in out and store_a.views() == [FP_A, FP_B], out
    store_a.record_use("replica-a:1")  # a replica still serves model A
    code, out = rollout("gc", "--fingerprint", FP_B, "--catalog-url", catalog_url)
    assert code == 1 and f"refuse {FP_A}: serving read it" in out and "replica-a:1" in out, out
    assert store_a.views() == [FP_A, FP_B] and store_a.read(["x"])["x"] is not None
    code, out = rollout("gc", "--fingerprint", FP_B, "--force", "--catalog-url", catalog_url)
    assert code == 0 and f"dropped {FP_A}" in out and f"keep {FP_B}" in out, out
    assert store_b.views() == [FP_B]
    assert store_b.read(["z"])["z"] == row("z", version=versions["z"], fingerprint=FP_B)


# ------------------------------------------------------------- rollout gc keeps what serves (issue 51)
@dataclass
class TwoViews:
    """Model A's view covers a three-item catalog, model B's (a rollout half done) holds x and y."""

    a: GistStore
    b: GistStore
    versions: dict[str, int]  # each item's catalog version
    options: list[str]  # `rollout gc` options naming this catalog and store


@pytest.fixture
def two_views(tmp_path: Path) -> TwoViews:
    from reranker.catalog.database import Catalog

    catalog_url = f"sqlite:///{tmp_path / 'catalog.db'}"
    with Catalog(catalog_url) as catalog:
        versions = {i: catalog.upsert(i, f"item {i}", {}, "text").version for i in ("x", "y", "z")}
    store_a = GistStore(tmp_path / "feast", fingerprint=FP_A)
    store_a.apply()
    store_a.write([row(i, version=v) for i, v in versions.items()])
    store_b = store_a.for_model(FP_B)
    store_b.apply()
    store_b.write([row(i, version=versions[i], fingerprint=FP_B) for i in ("x", "y")])
    return TwoViews(
        store_a, store_b, versions, ["--catalog-url", catalog_url, "--feast-dir", str(tmp_path / "feast")]
    )


def gc(*args: str) -> tuple[int, str, list[str]]:
    """`gistrank rollout gc ARGS` → exit code, stdout, the error lines of stderr."""
    from typer.testing import CliRunner

    from reranker.cli import app

    result = CliRunner().invoke(app, ["rollout", "gc", *args])
    assert not isinstance(result.exception, Exception), result.output  # no traceback: a usage error or exit
    errors = [line for line in result.stderr.splitlines() if line.lower().startswith("error")]
    return result.exit_code, result.stdout, errors


def files(folder: Path) -> dict[Path, tuple[int, int]]:
    """Every file and folder under `folder` → (size, mtime): what changed if anything was written."""
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["for real", "dry run"])
def test_gc_refuses_a_mistyped_fingerprint_and_drops_nothing(
    two_views: TwoViews, tmp_path: Path, dry_run: list[str]
) -> None:
    """The live fingerprint with its last character cut names no view: one line listing the views with
    their coverage, exit 2, every view and row kept, no view registered for the typo, nothing written."""
    before = files(tmp_path)
    code, out, errors = gc("--fingerprint", FP_A[:-1], *dry_run, *two_views.options)
    assert code == 2 and len(errors) == 1 and f"no view of {FP_A[:-1]}" in errors[0], (out, errors)
    assert f"{FP_A} 100.0% (3/3 current, 0 behind)" in errors[0] and f"{FP_B} 66.7% (2/3" in errors[0]
    assert out == "" and files(tmp_path) == before
    assert two_views.a.views() == [FP_A, FP_B] and two_views.a.read(["z"])["z"] is not None


def test_gc_keeps_the_last_view_covering_the_catalog_unless_forced(two_views: TwoViews) -> None:
    """Keeping B (two of three items) would drop A, the one view that covers the catalog: refused, exit 2,
    dry run or not; --force drops A and keeps B."""
    for dry_run in ([], ["--dry-run"]):
        code, out, errors = gc("--fingerprint", FP_B, *dry_run, *two_views.options)
        assert code == 2 and len(errors) == 1, (out, errors)
        assert f"{FP_B}'s view does not cover the catalog" in errors[0] and f"{FP_A} 100.0%" in errors[0]
        assert "--force" in errors[0] and out == ""
        assert two_views.a.views() == [FP_A, FP_B] and two_views.a.read(["x"])["x"] is not None
    code, out, errors = gc("--fingerprint", FP_B, "--force", *two_views.options)
    assert code == 0 and not errors and f"dropped {FP_A}" in out and f"keep {FP_B}" in out, (out, errors)
    assert two_views.b.views() == [FP_B] and two_views.b.read(["x"])["x"] is not None


def test_gc_dry_run_writes_nothing(two_views: TwoViews, tmp_path: Path) -> None:
    """A dry run that may drop (B covers the catalog too now) names what it would drop and changes no
    file: not the registry, not the online store, not the catalog."""
    two_views.b.write([row("z", version=two_views.versions["z"], fingerprint=FP_B)])
    before = files(tmp_path)
    code, out, errors = gc("--fingerprint", FP_B, "--dry-run", *two_views.options)
    assert code == 0 and not errors and f"would drop {FP_A}" in out and f"keep {FP_B}" in out, (out, errors)
    assert files(tmp_path) == before and two_views.a.views() == [FP_A, FP_B]
