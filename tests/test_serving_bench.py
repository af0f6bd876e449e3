"""`reranker.bench.serving`: the serving benchmark runs end to end on the tiny model and reports every number.

It starts a real tritonserver; the numbers themselves are not checked against any bound (a benchmark,
not a timed test), only that each was measured and is positive.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from reranker.bench.serving import PATHS, PROTOCOLS, RATIOS, STAGES, run_serving_bench

pytestmark = pytest.mark.triton

CANDIDATES = 8
REQUESTS = 4


def _positive(value: object, where: str) -> None:
    assert isinstance(value, int | float) and not isinstance(value, bool), f"{where}: {value!r}"
    assert math.isfinite(value) and value > 0, f"{where}: {value!r}"


def _latency(stats: dict, where: str, n: int) -> None:
    assert stats["n"] == n, f"{where}: n={stats['n']}, expected {n}"
    for key in ("p50_s", "p99_s", "mean_s", "min_s", "max_s"):
        _positive(stats[key], f"{where}.{key}")
    assert stats["min_s"] <= stats["p50_s"] <= stats["p99_s"] <= stats["max_s"], where


def test_serving_bench_tiny(tiny_base: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench_serving.json"
    returned = run_serving_bench(
        str(tiny_base),
        out,
        candidates=CANDIDATES,
        requests=REQUESTS,
        concurrency=2,
        dtype="float32",
        workdir=tmp_path / "work",
        feast_requests=2,
        recompute_requests=2,
        warmup=1,
        num_gist=4,
        item_tokens=(40, 80),
        num_threads=1,
        saturate_s=5,
        request_timeout_s=120,
        phase_budget_s=300,
    )
    result = json.loads(out.read_text())
    assert result == json.loads(json.dumps(returned.to_json()))  # the JSON is the returned result

    meta = result["meta"]
    assert meta["candidates"] == CANDIDATES and meta["concurrency"] == 2
    for key in ("mean_item_tokens", "duration_s", "torch_threads"):
        _positive(meta[key], f"meta.{key}")

    _latency(result["inprocess"]["score"], "inprocess.score", REQUESTS)
    _latency(result["inprocess"]["fetch"], "inprocess.fetch", REQUESTS)

    expected_n = {"hit": REQUESTS, "feast": 2, "recompute": 2}
    for path in PATHS:
        assert set(result["paths"][path]) == set(PROTOCOLS), path
        for protocol in PROTOCOLS:
            where = f"{path}.{protocol}"
            r = result["paths"][path][protocol]
            n = expected_n[path]
            assert r["requests"] == n and r["errors"] == 0 and not r["stopped_by_budget"], (where, r)
            # every candidate came through the path the phase is about
            assert r["statuses"] == {r["expected_status"]: n * CANDIDATES}, (where, r["statuses"])
            _latency(r["client"], f"{where}.client", n)
            for stage in STAGES:
                server = r["server"][stage]
                assert server["count"] == n, (where, stage, server)
                for key in ("p50_s", "p99_s", "mean_s"):
                    _positive(server[key], f"{where}.server.{stage}.{key}")
            # the client's round trip contains the server's total: the exact mean difference is positive
            _positive(r["overhead"]["mean_s"], f"{where}.overhead.mean_s")
            assert math.isfinite(r["overhead"]["p50_s"]), where  # from histogram buckets: an estimate
            assert r["queue_mean_s"] is not None and r["queue_mean_s"] >= 0, where
            _positive(r["throughput_rps"], f"{where}.throughput_rps")
            _positive(r["wall_s"], f"{where}.wall_s")
            _positive(r["client_cpu_s_per_request"], f"{where}.client_cpu_s_per_request")

    assert set(result["ratios"]) == {key for key, _ in RATIOS}
    for key, _ in RATIOS:
        for protocol in PROTOCOLS:
            _positive(result["ratios"][key][protocol], f"ratios.{key}.{protocol}")

    saturated = result["throughput"]
    assert (saturated["instances"], saturated["concurrency"]) == (1, 2)  # max(concurrency, 2 × instances)
    assert saturated["requests"] > 0 and saturated["errors"] == 0, saturated
    assert set(saturated["statuses"]) == {"l1"}, saturated
    for key in ("wall_s", "candidates_per_s", "inprocess_candidates_per_s", "ratio"):
        _positive(saturated[key], f"throughput.{key}")
    expected = (
        saturated["requests"] * CANDIDATES / saturated["wall_s"] / saturated["inprocess_candidates_per_s"]
    )
    assert math.isclose(saturated["ratio"], expected, rel_tol=1e-9)
