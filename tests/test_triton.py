"""The Triton reranker end to end: a real tritonserver started once by `gistrank serve` (the CLI function,
in a subprocess), real tritonclient HTTP and gRPC, a real Feast store on a real redis-server, the tiny
fp32 model. The tests share the server (module scope), but none relies on what another did: a test that
asserts a cache tier takes item ids no request has named yet (`fresh_ids`) and puts them in that tier
itself, so every test passes alone, in any order and however long the others take. The outage test
stops Redis and starts it again; the last test stops the server with SIGTERM."""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import typer
from helpers import catalog_row, processes_naming, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from services import RedisServer, Serve
from tritonclient.utils import InferenceServerException
from typer.testing import CliRunner

from reranker import Reranker, RerankerConfig
from reranker.catalog.database import Catalog
from reranker.core import kv_codec
from reranker.core.fusion import Fusion, reciprocal_rank_fusion
from reranker.core.render import render_item
from reranker.serving.cli import rerank
from reranker.serving.client import RerankClient, RerankError
from reranker.serving.server import free_port, tritonserver_binary
from reranker.serving.shadow import overlap_at_k
from reranker.store import GistStore

pytestmark = [pytest.mark.triton, pytest.mark.redis]

QUERY = "256GB phone 2023"
MAX_CANDIDATES = 32
FUSION = "rrf:0.6:10"  # served by this module's server (the pipeline demo's serves the preset's linear)
FEAST_RETRY_S = 1.0
REDIS_PASSWORD = "hunter2-redis-secret"  # the module's Redis requires it
IDS = [f"sku-{n:03d}" for n in range(48)]  # any test may name these: their cache tier is unknown
# Catalog items handed out by `fresh_ids`, each to one test only: a first request for one is a Feast miss
# (recompute) that puts it in L1.
FRESH_IDS = [f"new-{n:03d}" for n in range(400)]
_unused_ids = iter(FRESH_IDS)
OK_STATUSES = {"l1", "feast", "recompute"}
ERROR_STATUSES = {"unknown_item", "catalog_unavailable", "recompute_failed"}

_WORDS = [
    "acme",
    "phone",
    "tablet",
    "kettle",
    "cable",
    "case",
    "blue",
    "black",
    "titanium",
    "steel",
    "wireless",
]


def fresh_ids(n: int) -> list[str]:
    """`n` catalog ids that no request of this module has named yet: in neither L1 nor Feast."""
    ids = list(itertools.islice(_unused_ids, n))
    if len(ids) < n:
        raise RuntimeError(f"all {len(FRESH_IDS)} FRESH_IDS are used: make the list longer")
    return ids


def _item(n: int) -> tuple[str, dict[str, object], str]:
    word = _WORDS[n % len(_WORDS)]
    attributes = {
        "year": 2019 + n % 6,
        "storage": f"{64 << (n % 4)}GB",
        "colour": _WORDS[(n * 7) % len(_WORDS)],
    }
    description = " ".join(_WORDS[(n * k) % len(_WORDS)] for k in range(5 + 3 * (n % 9)))
    return f"Acme {word} {n}", attributes, description


# ------------------------------------------------------------------------------------------- services
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_base: Path) -> Path:
    # max_item_tokens bounds the recompute and full-context cost on 2 CPU cores
    config = RerankerConfig(num_gist=4, dtype="float32", max_item_tokens=160)
    model = Reranker.from_pretrained(tiny_base, config, device="cpu")
    return model.save_pretrained(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="module")
def model(checkpoint: Path) -> Reranker:
    """The served checkpoint, loaded in the test process for the in-process reference scores."""
    return Reranker.from_pretrained(checkpoint, device="cpu")


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Catalog]:
    with Catalog(f"sqlite:///{tmp_path_factory.mktemp('catalog') / 'catalog.db'}") as cat:
        for n, item_id in enumerate(IDS + FRESH_IDS):
            cat.upsert(item_id, *_item(n))
        yield cat


def texts(catalog: Catalog, ids: list[str]) -> list[str]:
    items = catalog.get(ids)
    return [render_item(items[i].title, items[i].attributes, items[i].description) for i in ids]


@pytest.fixture(scope="module")
def redis_proc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """Restartable: the outage test stops it and starts it again on the same port."""
    proc = RedisServer(tmp_path_factory.mktemp("redis"), password=REDIS_PASSWORD).start()
    yield proc
    proc.stop()


class Endpoints:
    def __init__(self, serve: Serve, http: int, grpc: int, metrics: int) -> None:
        self.serve = serve
        self.http = f"127.0.0.1:{http}"
        self.grpc = f"127.0.0.1:{grpc}"
        self.metrics = f"http://127.0.0.1:{metrics}/metrics"  # Triton's: nv_inference_* and gistrank_*
        self.startup_s = 0.0
        self.feast_dir = Path()
        self.run_dir = Path()  # tritonserver.log lives here

    def url(self, protocol: str) -> str:
        return self.http if protocol == "http" else self.grpc


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, checkpoint: Path, catalog: Catalog, redis_proc: RedisServer
) -> Iterator[Endpoints]:
    if not tritonserver_binary().is_file():
        pytest.fail("tritonserver (nvidia-pytriton) is not installed: run make setup")
    root = tmp_path_factory.mktemp("serve")
    ports = [free_port() for _ in range(3)]
    args = [
        "--model", str(checkpoint),
        "--catalog-url", str(catalog.engine.url),
        "--feast-online", "redis",
        "--feast-dir", str(root / "feast"),
        "--redis-url", redis_proc.url,
        "--feast-retry-s", str(FEAST_RETRY_S),
        "--shadow-rate", "1.0",
        "--fusion", FUSION,
        "--max-candidates", str(MAX_CANDIDATES),
        "--num-threads", "1",
        "--http-port", str(ports[0]),
        "--grpc-port", str(ports[1]),
        "--metrics-port", str(ports[2]),
        "--workdir", str(root / "run"),
    ]  # fmt: skip
    serve = Serve(args)
    endpoints = Endpoints(serve, *ports)
    endpoints.feast_dir = root / "feast"
    endpoints.run_dir = root / "run"
    try:
        ready = serve.wait_for("ready in", timeout_s=600)
        endpoints.startup_s = float(ready.split("ready in ")[1].split(" s")[0])
        yield endpoints
    finally:
        serve.stop()


@pytest.fixture(scope="module")
def store(server: Endpoints, redis_proc: RedisServer, model: Reranker) -> GistStore:
    """The server's Feast store, opened from the test process (as the consumer would)."""
    return GistStore(
        server.feast_dir, online="redis", redis_url=redis_proc.url, fingerprint=model.fingerprint
    )


@pytest.fixture(scope="module", params=["http", "grpc"])
def client(request: pytest.FixtureRequest, server: Endpoints) -> Iterator[RerankClient]:
    with RerankClient(server.url(request.param), request.param) as c:
        yield c


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    """Sum of the samples named `name` whose labels include `labels` (over model instances too)."""
    want = set(labels.items())
    return sum(v for (n, labs), v in samples.items() if n == name and want <= labs)


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def model_metric(server: Endpoints, name: str, **labels: str) -> float:
    return value(scrape(server.metrics), name, **labels)


def shadow_backlog(samples: dict) -> float:
    done = sum(
        value(samples, "gistrank_shadow_requests_total", outcome=o) for o in ("compared", "failed", "dropped")
    )
    return value(samples, "gistrank_shadow_sampled_total") - done


def wait_shadow_idle(server: Endpoints) -> dict:
    """Metrics once every sampled request has been compared (or failed / dropped)."""
    samples: dict = {}

    def idle() -> bool:
        samples.update(scrape(server.metrics))
        return shadow_backlog(samples) == 0

    wait_until(idle, 120, "the shadow backlog to drain")
    return samples


# ---------------------------------------------------------------------------------------------- tests
def test_scores_equal_in_process_score(server: Endpoints, model: Reranker, catalog: Catalog) -> None:
    ids = fresh_ids(20)
    expected = model.score(QUERY, model.compress(texts(catalog, ids))).numpy()
    with RerankClient(server.http, "http") as http:
        first = http.rerank(QUERY, ids)
    with RerankClient(server.grpc, "grpc") as grpc:
        second = grpc.rerank(QUERY, ids)
    assert [c.item_id for c in first] == ids
    assert {c.status for c in first} == {"recompute"}  # nothing cached yet
    assert {c.status for c in second} == {"l1"}
    np.testing.assert_allclose([c.score for c in first], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose([c.score for c in second], expected, rtol=1e-4, atol=1e-5)


def test_feast_miss_recomputes_the_next_request_hits_l1_and_serving_never_writes_the_store(
    server: Endpoints, store: GistStore, model: Reranker, catalog: Catalog
) -> None:
    """This server has no broker to hand refresh requests to (test_scale runs the path through one to
    the consumer): a recompute stays in its L1, and the store is left to the consumer."""
    ids = fresh_ids(5)
    before = scrape(server.metrics)
    with RerankClient(server.http) as c:
        first = c.rerank(QUERY, ids)
        assert {x.status for x in first} == {"recompute"}
        second = c.rerank(QUERY, ids)
    assert {x.status for x in second} == {"l1"}
    assert [x.score for x in second] == [x.score for x in first]
    expected = model.score(QUERY, model.compress(texts(catalog, ids))).numpy()
    np.testing.assert_allclose([x.score for x in first], expected, rtol=1e-4, atol=1e-5)
    assert store.read(ids) == dict.fromkeys(ids)

    after = scrape(server.metrics)
    n = len(ids)
    assert delta(before, after, "gistrank_recompute_fallbacks_total", reason="feast_miss") == n
    assert delta(before, after, "gistrank_cache_misses_total", tier="l1") == n
    assert delta(before, after, "gistrank_cache_misses_total", tier="feast") == n
    assert delta(before, after, "gistrank_cache_hits_total", tier="l1") == n
    for result in ("published", "failed", "dropped"):
        assert delta(before, after, "gistrank_refresh_requests_total", result=result) == 0


def test_rows_written_by_the_consumer_are_feast_hits(
    server: Endpoints, store: GistStore, model: Reranker, catalog: Catalog
) -> None:
    ids = fresh_ids(3)
    kvs = model.compress(texts(catalog, ids))
    store.write([catalog_row(catalog, i, kv) for i, kv in zip(ids, kvs, strict=True)])
    hits = model_metric(server, "gistrank_cache_hits_total", tier="feast")
    with RerankClient(server.grpc, "grpc") as c:
        got = c.rerank(QUERY, ids)
    assert {x.status for x in got} == {"feast"}
    np.testing.assert_allclose([x.score for x in got], model.score(QUERY, kvs).numpy(), rtol=1e-4, atol=1e-5)
    assert model_metric(server, "gistrank_cache_hits_total", tier="feast") == hits + len(ids)


def test_corrupt_or_foreign_blobs_are_recomputed_never_used(
    server: Endpoints, store: GistStore, model: Reranker, catalog: Catalog
) -> None:
    ids = fresh_ids(5)
    kvs = dict(zip(ids, model.compress(texts(catalog, ids)), strict=True))
    # K/V that would change the score a lot if it were used
    noise = {i: dataclasses.replace(kv, kv=kv.kv * -3.0 + 1.0) for i, kv in kvs.items()}
    foreign = {i: dataclasses.replace(kv, fingerprint="f" * 32) for i, kv in noise.items()}
    a, b, c, d, e = ids
    good_blob = kv_codec.encode(noise[c], "x")
    flipped = bytearray(good_blob)
    flipped[-7] ^= 0x01
    rows = [
        # another model's blob (a row of another model in this model's view is refused by the store)
        catalog_row(catalog, a, noise[a], blob=kv_codec.encode(foreign[a], "y")),
        catalog_row(catalog, b, noise[b], blob=kv_codec.encode(foreign[b], "x")),  # column lies, blob foreign
        catalog_row(catalog, c, noise[c], blob=bytes(flipped)),  # one bit flipped
        catalog_row(catalog, d, noise[d], blob=kv_codec.encode(noise[d], "x")[:-100]),  # truncated
        catalog_row(catalog, e, noise[e], blob=b"\x80\x04\x95 not a blob"),  # not ours at all
    ]
    assert store.write(rows).written == tuple(ids)
    before = scrape(server.metrics)
    with RerankClient(server.http) as client:
        got = client.rerank(QUERY, ids)
    assert {x.status for x in got} == {"recompute"}
    expected = model.score(QUERY, [kvs[i] for i in ids]).numpy()
    np.testing.assert_allclose([x.score for x in got], expected, rtol=1e-4, atol=1e-5)
    after = scrape(server.metrics)
    assert delta(before, after, "gistrank_recompute_fallbacks_total", reason="foreign_fingerprint") == 2
    assert delta(before, after, "gistrank_recompute_fallbacks_total", reason="corrupt_blob") == 3

    assert store.read(ids) == {row.item_id: row for row in rows}  # left for the consumer to repair


def test_unknown_id_is_a_per_candidate_error(client: RerankClient) -> None:
    a, b = fresh_ids(2)
    assert [x.status for x in client.rerank(QUERY, [a, b])] == ["recompute", "recompute"]  # now in L1
    got = client.rerank(QUERY, [a, "ghost-1", b, "sku-999"])
    assert [x.status for x in got] == ["l1", "unknown_item", "l1", "unknown_item"]
    assert got[0].scored and got[2].scored and not got[1].scored and not got[3].scored
    alone = client.rerank(QUERY, [a, b])
    assert [got[0].score, got[2].score] == [x.score for x in alone]


def _infer(protocol: str, server: Endpoints, inputs: list[tuple[str, list[int], str, np.ndarray]]) -> object:
    module = httpclient if protocol == "http" else grpcclient
    tensors = []
    for name, shape, dtype, data in inputs:
        tensor = module.InferInput(name, shape, dtype)
        tensor.set_data_from_numpy(data)
        tensors.append(tensor)
    client = module.InferenceServerClient(server.url(protocol))
    try:
        return client.infer("gist_reranker", tensors)
    finally:
        client.close()


def _bytes(values: list[bytes]) -> np.ndarray:
    return np.array(values, dtype=np.object_)


def _ids_input(ids: list[str]) -> tuple[str, list[int], str, np.ndarray]:
    return ("ITEM_IDS", [len(ids)], "BYTES", _bytes([i.encode() for i in ids]))


def _cached_request(protocol: str, server: Endpoints) -> list[tuple[str, list[int], str, np.ndarray]]:
    """A valid request for two fresh items, sent once here: from now on both are L1 hits."""
    request = [GOOD_QUERY, _ids_input(fresh_ids(2))]
    assert _infer(protocol, server, request).as_numpy("STATUS").tolist() == [b"recompute", b"recompute"]
    return request


GOOD_QUERY = ("QUERY", [1], "BYTES", _bytes([QUERY.encode()]))
GOOD_IDS = ("ITEM_IDS", [2], "BYTES", _bytes([IDS[0].encode(), IDS[1].encode()]))
MALFORMED = {
    "empty query": ([("QUERY", [1], "BYTES", _bytes([b""])), GOOD_IDS], "QUERY is empty"),
    "blank query": ([("QUERY", [1], "BYTES", _bytes([b"  \n"])), GOOD_IDS], "QUERY is empty"),
    "no ids": ([GOOD_QUERY, ("ITEM_IDS", [0], "BYTES", _bytes([]))], "ITEM_IDS is empty"),
    "too many ids": (
        [
            GOOD_QUERY,
            ("ITEM_IDS", [MAX_CANDIDATES + 1], "BYTES", _bytes([b"sku-000"] * (MAX_CANDIDATES + 1))),
        ],
        f"more than the limit of {MAX_CANDIDATES}",
    ),
    "non-UTF-8 query": ([("QUERY", [1], "BYTES", _bytes([b"phone \xff\xfe"])), GOOD_IDS], "not valid UTF-8"),
    "non-UTF-8 id": (
        [GOOD_QUERY, ("ITEM_IDS", [2], "BYTES", _bytes([b"sku-000", b"sku-\xc3"]))],
        "ITEM_IDS[1] is not valid UTF-8",
    ),
    "control character in id": (
        [GOOD_QUERY, ("ITEM_IDS", [1], "BYTES", _bytes([b"sku\x00"]))],
        "ITEM_IDS[0]",
    ),
    "query too long": (
        [("QUERY", [1], "BYTES", _bytes([("phone " * 100).encode()])), GOOD_IDS],
        "over the limit max_query_tokens=64",
    ),
    "two queries": ([("QUERY", [2], "BYTES", _bytes([b"a", b"b"])), GOOD_IDS], "QUERY"),
    "ids as a matrix": ([GOOD_QUERY, ("ITEM_IDS", [1, 2], "BYTES", _bytes([[b"a", b"b"]]))], "ITEM_IDS"),
    "numeric query": ([("QUERY", [1], "FP32", np.array([1.0], dtype=np.float32)), GOOD_IDS], "QUERY"),
    "missing ids": ([GOOD_QUERY], "ITEM_IDS"),
    "first-stage scores short": (
        [GOOD_QUERY, GOOD_IDS, ("FIRST_STAGE_SCORES", [1], "FP32", np.array([1.0], dtype=np.float32))],
        "FIRST_STAGE_SCORES must have shape [2]",
    ),
    "first-stage NaN": (
        [
            GOOD_QUERY,
            GOOD_IDS,
            ("FIRST_STAGE_SCORES", [2], "FP32", np.array([1.0, np.nan], dtype=np.float32)),
        ],
        "FIRST_STAGE_SCORES[1] is nan",
    ),
    "first-stage FP64": (  # refused by Triton itself, against the declared datatype
        [GOOD_QUERY, GOOD_IDS, ("FIRST_STAGE_SCORES", [2], "FP64", np.array([1.0, 2.0]))],
        "FIRST_STAGE_SCORES",
    ),
}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_requests_get_clear_errors_and_the_server_stays_up(
    server: Endpoints, protocol: str, case: str
) -> None:
    inputs, message = MALFORMED[case]
    good = _cached_request(protocol, server)
    with pytest.raises(InferenceServerException) as err:
        _infer(protocol, server, inputs)
    assert message in err.value.message(), err.value.message()
    result = _infer(protocol, server, good)
    assert result.as_numpy("STATUS").tolist() == [b"l1", b"l1"]


_fuzz_bytes = st.one_of(
    st.binary(max_size=20), st.sampled_from([i.encode() for i in IDS[:4]] + [b"", b" ", b"\xff"])
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    query=st.lists(_fuzz_bytes, min_size=0, max_size=2),
    ids=st.lists(_fuzz_bytes, min_size=0, max_size=MAX_CANDIDATES + 2),
    protocol=st.sampled_from(["http", "grpc"]),
)
def test_fuzzed_requests_get_an_error_or_an_answer_and_the_server_keeps_answering(
    server: Endpoints, query: list[bytes], ids: list[bytes], protocol: str
) -> None:
    good_request = _cached_request(protocol, server)
    try:
        result = _infer(
            protocol,
            server,
            [("QUERY", [len(query)], "BYTES", _bytes(query)), ("ITEM_IDS", [len(ids)], "BYTES", _bytes(ids))],
        )
    except InferenceServerException as e:
        assert e.message()
    else:
        scores, statuses = result.as_numpy("SCORES"), result.as_numpy("STATUS")
        assert scores.shape == statuses.shape == (len(ids),)
        for score, status in zip(scores, statuses, strict=True):
            assert status.decode() in OK_STATUSES | ERROR_STATUSES
            assert np.isnan(score) == (status.decode() in ERROR_STATUSES)
    good = _infer(protocol, server, good_request)
    assert good.as_numpy("STATUS").tolist() == [b"l1", b"l1"]


@pytest.mark.fusion
def test_first_stage_scores_are_fused_by_the_served_rule_and_the_rerankers_own_come_beside(
    client: RerankClient, model: Reranker
) -> None:
    ids = fresh_ids(6)
    first_stage = [3.0, 12.5, 0.0, 7.25, 7.25, -1.0]  # e.g. BM25 (a tie included)
    plain = client.rerank(QUERY, ids)
    fused = client.rerank(QUERY, ids, first_stage)
    assert [c.score for c in plain] == [c.rerank_score for c in plain]  # nothing to fuse with
    own = [c.rerank_score for c in fused]
    np.testing.assert_allclose(own, [c.score for c in plain], rtol=1e-6)
    assert Fusion.parse(FUSION) == Fusion("rrf", 0.6, 10)
    np.testing.assert_allclose(
        [c.score for c in fused], reciprocal_rank_fusion(own, first_stage, 0.6, 10), rtol=1e-6
    )
    assert model.fusion == Fusion("linear", 0.5)  # the checkpoint's own setting: --fusion replaced it


@pytest.mark.fusion
def test_the_readme_http_json_request_with_first_stage_scores(server: Endpoints) -> None:
    """The curl body of docs/cascade.md (Triton's JSON protocol), with this catalog's ids."""
    ids = fresh_ids(3)
    body = {
        "inputs": [
            {"name": "QUERY", "shape": [1], "datatype": "BYTES", "data": ["usb-c charger 65W"]},
            {"name": "ITEM_IDS", "shape": [3], "datatype": "BYTES", "data": ids},
            {"name": "FIRST_STAGE_SCORES", "shape": [3], "datatype": "FP32", "data": [12.1, 9.7, 3.2]},
        ]
    }
    request = urllib.request.Request(
        f"http://{server.http}/v2/models/gist_reranker/infer", data=json.dumps(body).encode()
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        outputs = {o["name"]: o["data"] for o in json.loads(response.read())["outputs"]}
    assert set(outputs) == {"SCORES", "RERANK_SCORES", "STATUS"}
    assert outputs["STATUS"] == ["recompute"] * 3
    fused = reciprocal_rank_fusion(outputs["RERANK_SCORES"], [12.1, 9.7, 3.2], 0.6, 10)
    np.testing.assert_allclose(outputs["SCORES"], fused, rtol=1e-6)


@pytest.mark.fusion
def test_a_bad_first_stage_tensor_fails_alone_among_concurrent_requests(server: Endpoints) -> None:
    """Requests that reach the model together (Triton hands the Python backend a list): the malformed one
    gets its error, each other one its scores."""
    good = [GOOD_QUERY, GOOD_IDS, ("FIRST_STAGE_SCORES", [2], "FP32", np.array([1.0, 2.0], dtype=np.float32))]
    bad = [
        GOOD_QUERY,
        GOOD_IDS,
        ("FIRST_STAGE_SCORES", [2], "FP32", np.array([np.inf, 2.0], dtype=np.float32)),
    ]
    client = grpcclient.InferenceServerClient(server.grpc)
    results: list[object] = []

    def tensors(inputs):
        out = []
        for name, shape, dtype, data in inputs:
            tensor = grpcclient.InferInput(name, shape, dtype)
            tensor.set_data_from_numpy(data)
            out.append(tensor)
        return out

    try:
        for inputs in [good, good, bad, good, good]:
            client.async_infer(
                "gist_reranker", tensors(inputs), lambda result, error: results.append((result, error))
            )
        wait_until(lambda: len(results) == 5, 60, "five answers")
    finally:
        client.close()
    errors = [error for _, error in results if error is not None]
    assert len(errors) == 1 and "FIRST_STAGE_SCORES[0] is inf" in errors[0].message()
    answers = [result.as_numpy("SCORES") for result, error in results if error is None]
    assert len(answers) == 4 and all(np.isfinite(a).all() and a.shape == (2,) for a in answers)


@pytest.mark.fusion
def test_shadow_counts_fused_recall_for_requests_with_first_stage_scores(
    server: Endpoints, model: Reranker, catalog: Catalog
) -> None:
    fusion = Fusion.parse(FUSION)
    requests = [("256GB phone 2023", IDS[0:12]), ("blue titanium case", IDS[12:20])]
    before = wait_shadow_idle(server)
    expected = {k: [0, 0] for k in (1, 5, 10)}
    with RerankClient(server.http) as c:
        c.rerank(QUERY, IDS[20:25])  # no first-stage scores: no fused comparison
        for n, (query, ids) in enumerate(requests):
            first_stage = [float((7 * i + n) % 5) for i in range(len(ids))]
            # the served ranking as the shadow ranks it: fused from the reranker's float32 scores
            served = fusion.fuse([x.rerank_score for x in c.rerank(query, ids, first_stage)], first_stage)
            full = fusion.fuse(model.score_full(query, texts(catalog, ids)).tolist(), first_stage)
            for k, (overlap, reference) in overlap_at_k(served, full).items():
                expected[k][0] += overlap
                expected[k][1] += reference
    after = wait_shadow_idle(server)
    assert delta(before, after, "gistrank_shadow_requests_total", outcome="compared") == 3
    assert delta(before, after, "gistrank_rerank_first_stage_requests_total", first_stage="given") == 2
    assert delta(before, after, "gistrank_rerank_first_stage_requests_total", first_stage="absent") == 1
    for k, (overlap, reference) in expected.items():
        got = (
            delta(before, after, "gistrank_shadow_fused_topk_overlap_total", k=str(k)),
            delta(before, after, "gistrank_shadow_fused_topk_reference_total", k=str(k)),
        )
        assert got == (overlap, reference), f"fused recall@{k}"


def test_shadow_overlap_counters_match_offline_recall(
    server: Endpoints, model: Reranker, catalog: Catalog
) -> None:
    def top(scores: np.ndarray, k: int) -> set[int]:
        return set(np.argsort(-scores, kind="stable")[:k].tolist())

    requests = [
        ("256GB phone 2023", IDS[0:20]),
        ("blue titanium case", IDS[5:17]),
        ("fast wireless charger", IDS[20:33]),
        ("kettle", IDS[0:3]),
        ("black steel cable", IDS[:33:2]),
    ]
    before = wait_shadow_idle(server)
    expected = {k: [0, 0] for k in (1, 5, 10)}
    with RerankClient(server.grpc, "grpc") as c:
        for query, ids in requests:
            gist = np.array([x.score for x in c.rerank(query, ids)])
            full = model.score_full(query, texts(catalog, ids)).numpy()
            for k in expected:
                expected[k][0] += len(top(gist, k) & top(full, k))
                expected[k][1] += min(k, len(ids))
    after = wait_shadow_idle(server)
    assert delta(before, after, "gistrank_shadow_requests_total", outcome="compared") == len(requests)
    for k, (overlap, reference) in expected.items():
        got = (
            delta(before, after, "gistrank_shadow_topk_overlap_total", k=str(k)),
            delta(before, after, "gistrank_shadow_topk_reference_total", k=str(k)),
        )
        assert got == (overlap, reference), f"recall@{k}"


def test_metrics_follow_prometheus_conventions_and_triton_exports_its_own(server: Endpoints) -> None:
    ids = fresh_ids(2)
    with RerankClient(server.http) as c:
        c.rerank(QUERY, ids)  # scored: every stage timed, the K/V put in L1, a shadow request sent
        with pytest.raises(RerankError, match="QUERY is empty"):
            c.rerank("   ", ids)  # invalid
    samples = wait_shadow_idle(server)  # the shadow request has been answered by full_reranker
    names = {name for name, _ in samples}
    for name in (
        "gistrank_cache_hits_total",
        "gistrank_cache_misses_total",
        "gistrank_recompute_fallbacks_total",
        "gistrank_candidate_errors_total",
        "gistrank_refresh_requests_total",
        "gistrank_rerank_requests_total",
        "gistrank_rerank_request_duration_seconds_bucket",
        "gistrank_rerank_request_candidates_bucket",
        "gistrank_shadow_sampled_total",
        "gistrank_shadow_requests_total",
        "gistrank_shadow_topk_overlap_total",
        "gistrank_shadow_topk_reference_total",
        "gistrank_l1_cache_bytes",
        "gistrank_l1_cache_entries",
        "gistrank_l1_cache_evictions_total",
    ):
        assert name in names, name
    for stage in ("fetch", "model", "total"):
        assert value(samples, "gistrank_rerank_request_duration_seconds_count", stage=stage) > 0
    assert value(samples, "gistrank_l1_cache_bytes") > 0
    # through Triton's endpoint, each series labelled with the model instance that counted it
    assert samples[("gistrank_l1_cache_bytes", frozenset({("model_instance", "gist_reranker_0_0")}))] > 0
    label_values = {v for _, labels in samples for _, v in labels}
    assert not label_values & set(IDS + FRESH_IDS), "no item ids in labels"

    # (the Python backend's error responses count as Triton successes; ours count them as invalid)
    assert value(samples, "gistrank_rerank_requests_total", outcome="invalid") > 0
    triton: dict = {}  # the parser names counter samples with their _total suffix
    models = ("gist_reranker", "full_reranker")  # full_reranker: the shadow's requests

    def counted() -> bool:  # the backend may report a request's statistics just after its response
        triton.update(scrape(server.metrics))
        return all(
            value(triton, "nv_inference_request_success_total", model=m, version="1") > 0 for m in models
        )

    wait_until(counted, 30, "Triton to count a successful request of each model")
    for model in models:
        assert value(triton, "nv_inference_compute_infer_duration_us_total", model=model, version="1") > 0


def test_cli_rerank_over_http_and_grpc(server: Endpoints) -> None:
    app = typer.Typer()
    app.command()(rerank)
    runner = CliRunner()
    a, b = fresh_ids(2)
    with RerankClient(server.http) as c:
        assert [x.status for x in c.rerank(QUERY, [a, b])] == ["recompute", "recompute"]  # now in L1
    for protocol in ("http", "grpc"):
        url = server.url(protocol)
        result = runner.invoke(app, [QUERY, a, "ghost", b, "--url", url, "--protocol", protocol, "--json"])
        assert result.exit_code == 0, result.output
        rows = json.loads(result.output)
        assert [r["item_id"] for r in rows] == [a, "ghost", b]
        assert [r["status"] for r in rows] == ["l1", "unknown_item", "l1"] and rows[1]["score"] is None
        ranked = runner.invoke(app, [QUERY, a, "ghost", "--url", url, "--protocol", protocol])
        assert ranked.exit_code == 0 and ranked.output.splitlines()[-1].endswith("ghost")
        bad = runner.invoke(app, ["   ", a, "--url", url, "--protocol", protocol])
        assert bad.exit_code == 1 and "QUERY is empty" in bad.output


def test_full_reranker_is_served_too(server: Endpoints, model: Reranker, catalog: Catalog) -> None:
    with RerankClient(server.http, "http", model="full_reranker") as c:
        got = c.rerank(QUERY, [IDS[0], "ghost", IDS[1]])
    assert [x.status for x in got] == ["full", "unknown_item", "full"]
    expected = model.score_full(QUERY, texts(catalog, [IDS[0], IDS[1]])).numpy()
    np.testing.assert_allclose([got[0].score, got[2].score], expected, rtol=1e-4, atol=1e-5)


def test_feast_outage_is_served_by_recompute(
    server: Endpoints, redis_proc: RedisServer, model: Reranker, catalog: Catalog
) -> None:
    cached, *outage_ids = fresh_ids(6)
    with RerankClient(server.http) as c:
        assert [x.status for x in c.rerank(QUERY, [cached])] == ["recompute"]  # now in L1
    before = model_metric(server, "gistrank_recompute_fallbacks_total", reason="feast_unavailable")
    redis_proc.stop()
    try:
        with RerankClient(server.http) as c:
            for n, item_id in enumerate(outage_ids[:4]):  # fresh ids: neither in L1 nor anywhere else
                got = c.rerank(QUERY, [item_id, cached])
                assert [x.status for x in got] == ["recompute", "l1"], n
                expected = model.score(QUERY, model.compress(texts(catalog, [item_id]))).numpy()
                np.testing.assert_allclose(got[0].score, expected[0], rtol=1e-4, atol=1e-5)
                time.sleep(FEAST_RETRY_S / 2)
        assert (
            model_metric(server, "gistrank_recompute_fallbacks_total", reason="feast_unavailable")
            == before + 4
        )
        with urllib.request.urlopen(f"http://{server.http}/v2/health/ready", timeout=5) as response:
            assert response.status == 200
    finally:
        redis_proc.start()
    misses = model_metric(server, "gistrank_recompute_fallbacks_total", reason="feast_miss")
    time.sleep(FEAST_RETRY_S)
    with RerankClient(server.grpc, "grpc") as c:  # Redis is back (empty): Feast is asked again
        assert [x.status for x in c.rerank(QUERY, [outage_ids[4]])] == ["recompute"]
    assert model_metric(server, "gistrank_recompute_fallbacks_total", reason="feast_miss") == misses + 1


def test_no_password_in_tritons_config_or_in_any_log(server: Endpoints) -> None:
    """The Redis password (and the catalog URL) reach the models through the environment, not as
    parameters, which Triton serves unauthenticated; the outage above logged the store's address
    redacted. (After the outage test: its warnings are what would carry the URL.)"""
    for model in ("gist_reranker", "full_reranker"):
        with urllib.request.urlopen(f"http://{server.http}/v2/models/{model}/config", timeout=10) as r:
            config = r.read().decode()
        parameters = {k: v["string_value"] for k, v in json.loads(config)["parameters"].items()}
        assert parameters["catalog_url"] == "${GISTRANK_SERVE_CATALOG_URL}"
        assert REDIS_PASSWORD not in config and "redis://" not in config
    log = (server.run_dir / "tritonserver.log").read_text(errors="replace")
    assert "feast unavailable" in log and "redis at redis://:***@127.0.0.1" in log  # the outage, redacted
    assert REDIS_PASSWORD not in log + server.serve.output


def test_serve_stops_on_sigterm_with_its_store_down(
    server: Endpoints, redis_proc: RedisServer
) -> None:  # last: it stops the module's server
    """A server whose Redis went away stops on SIGTERM all the same, and nothing of its process group
    (tritonserver, each model's Python stub) outlives it: a stub whose shutdown waited on the store once
    lived on as an orphan."""
    assert server.startup_s > 0
    stubs = [c for c in processes_naming(str(server.run_dir)) if "triton_python_backend_stub" in c]
    assert len(stubs) == 2, stubs  # one per model (one instance each), named by their run folder
    redis_proc.stop()
    with RerankClient(server.http) as c:  # the store is asked, fails, and the item is recomputed
        assert [x.status for x in c.rerank(QUERY, fresh_ids(1))] == ["recompute"]
    assert server.serve.stop() == 0
    assert "stopping tritonserver" in server.serve.output
    assert processes_naming(str(server.run_dir)) == []  # tritonserver and both models' Python stubs
    with pytest.raises(RerankError), RerankClient(server.http, timeout_s=2) as c:
        c.rerank(QUERY, [IDS[0]])
