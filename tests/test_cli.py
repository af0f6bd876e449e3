"""The README's entry points run end to end (on a tiny model, so in seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import unboxed
from typer.testing import CliRunner

from reranker.catalog.sample import sample_catalog, sample_queries
from reranker.cli import app
from reranker.core.fusion import interpolate

runner = CliRunner()


def test_demo_ranks_every_sample_query(tiny_base: Path) -> None:
    args = ["demo", "--core", "--model", str(tiny_base), "--num-gist", "4", "--dtype", "float32"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"compressed {len(sample_catalog())} items" in result.output
    for query in sample_queries():
        assert f"query: {query!r}" in result.output
    assert "untrained" in result.output


def test_demo_core_reads_the_model_with_the_compressor_asked(tiny_base: Path) -> None:
    """--compressor and --max-item-tokens reach the in-process demo (they were ignored: a base asked for
    prefix caching was ranked through untrained gists)."""
    args = ["demo", "--core", "--model", str(tiny_base), "--num-gist", "4", "--dtype", "float32"]
    result = runner.invoke(app, [*args, "--compressor", "prefix", "--max-item-tokens", "40"])
    assert result.exit_code == 0, result.output
    assert "k=4, t=0, prefix" in result.output and "stored K/V (prefix)" in result.output
    assert "untrained" not in result.output  # prefix caching has nothing to train
    assert "–40 tokens)" in result.output  # every sample item is longer: cut at 40


@pytest.mark.parametrize("compressor", ["gist", "select"])
def test_bench_writes_a_row_per_item_length(tiny_base: Path, tmp_path: Path, compressor: str) -> None:
    out = tmp_path / "bench.json"
    args = ["bench", "--model", str(tiny_base), "--candidates", "6", "--query-tokens", "8"]
    args += ["--dtype", "float32", "--compressor", compressor]
    args += ["--item-tokens", "32", "--item-tokens", "96", "--repeats", "1", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    rows = saved["rows"]
    assert saved["meta"]["compressor"] == compressor and compressor in result.output
    assert [r["item_tokens"] for r in rows] == [32, 96]
    assert all(r["compress_ms_per_item"] > 0 for r in rows)
    for r in rows:
        assert abs(r["mean_item_tokens"] - r["item_tokens"]) <= 2
        assert r["ideal_speedup"] == (r["mean_item_tokens"] + r["online_tokens"]) / r["online_tokens"]
        assert r["speedup"] == r["online_candidates_per_s"] / r["full_candidates_per_s"]
        # a store hit per storage precision, decode included, in the same run
        assert list(r["stored_ms_per_candidate"]) == ["bfloat16", "int8", "int4", "int2"]
        assert all(ms > 0 for ms in r["stored_ms_per_candidate"].values())


def test_train_and_eval_commands(tiny_base: Path, tmp_path: Path) -> None:
    """`gistrank train` on a generated synthetic set, then `gistrank eval` of the student."""
    common = ["--data", "synthetic", "--products", "4", "--max-item-tokens", "64"]
    cfg = tmp_path / "cfg.json"
    fields = {"steps": 2, "queries_per_step": 1, "candidates_per_query": 3, "train_body": False}
    cfg.write_text(json.dumps(fields))
    for role in ("teacher", "student"):
        args = ["train", "--out", str(tmp_path / role), "--role", role, "--model", str(tiny_base)]
        args += ["--num-gist", "2", "--keep-item-prefix", "3", "--dtype", "float32", "--config", str(cfg)]
        result = runner.invoke(app, [*args, *common])
        assert result.exit_code == 0, result.output
        assert "2 steps" in result.output
    resume = ["train", "--out", str(tmp_path / "student"), "--resume", "--steps", "3", *common]
    result = runner.invoke(app, resume)
    assert result.exit_code == 0, result.output
    assert "1 step, last loss" in result.output  # extended by one step
    result = runner.invoke(app, resume)
    assert result.exit_code != 0 and "alreadyatstep3" in unboxed(result.output)
    saved = json.loads((tmp_path / "student" / "checkpoint" / "gistrank.json").read_text())
    assert (saved["gist"]["num_gist"], saved["gist"]["keep_item_prefix"]) == (2, 3)
    args = ["eval", "--teacher", str(tmp_path / "teacher" / "checkpoint"), "--prefix-k", "1"]
    args += ["--student", str(tmp_path / "student" / "checkpoint"), "--out", str(tmp_path / "eval"), *common]
    result = runner.invoke(app, [*args, "--control-base"])
    assert result.exit_code == 0, result.output
    assert "| gist t=3 k=2 |" in result.output and "| prefix 4 · gist t=3 k=2 |" in result.output
    assert "| gist t=3 k=2 | prefix 4 · gist t=3 k=2 · untouched base |" in result.output  # paired
    assert "| untrained gists t=3 k=2 |" in result.output
    assert (tmp_path / "eval" / "results.json").is_file()
    merged = tmp_path / "merged"
    result = runner.invoke(
        app, ["eval-merge", str(tmp_path / "eval"), str(tmp_path / "eval"), "--out", str(merged)]
    )
    assert result.exit_code == 0, result.output  # a run merged with itself: every system agrees
    assert (
        json.loads((merged / "results.json").read_text())["summary"]
        == json.loads((tmp_path / "eval" / "results.json").read_text())["summary"]
    )
    result = runner.invoke(app, ["eval-merge", str(tmp_path / "eval"), str(tmp_path / "nowhere")])
    assert result.exit_code != 0 and "nowhere/results.jsondoesnotexist" in unboxed(result.output)
    result = runner.invoke(app, [*args, "--no-untrained-control", "--fit-fusion"])  # no second compression
    assert result.exit_code == 0, result.output
    assert "| gist t=3 k=2 |" in result.output and "untrained gists" not in result.output
    # the student's BM25 fusion, as fitted on this split, for `serve --fusion` to read
    student = str(tmp_path / "student" / "checkpoint")
    fitted = json.loads((tmp_path / "eval" / "fusion.json").read_text())["models"]
    weight = json.loads((tmp_path / "eval" / "results.json").read_text())["interpolation"][
        "gist t=3 k=2 + bm25"
    ]
    assert list(fitted) == [student] and fitted[student]["fusion"] == f"linear:{weight['weight']:g}"
    assert f"--model '{student}' --fusion {tmp_path / 'eval' / 'fusion.json'}" in result.output
    teacher_only = ["eval", "--teacher", str(tmp_path / "teacher" / "checkpoint"), *common]
    result = runner.invoke(app, teacher_only)
    assert result.exit_code != 0 and "nothingtoevaluate" in unboxed(result.output)
    full = ["--shadow-model", str(tmp_path / "teacher" / "checkpoint"), "--out", str(tmp_path / "eval-full")]
    result = runner.invoke(app, [*teacher_only, *full])  # a shadow candidate alone, no student
    assert result.exit_code == 0, result.output
    assert f"| full context · {tmp_path / 'teacher' / 'checkpoint'} | 1.000 | 1.000 |" in result.output
    assert not list((tmp_path / "eval-full").glob("*.png"))  # no student: no metric-vs-k plot
    assert result.output.rstrip().endswith("results.json, report.md")
    args = ["probe", "--teacher", str(tmp_path / "teacher" / "checkpoint"), "--queries", "2"]
    args += [
        "--student",
        str(tmp_path / "student" / "checkpoint"),
        "--out",
        str(tmp_path / "probe.json"),
        *common,
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "centered" in result.output and "t=3, k=2" in result.output  # rich may wrap headers
    assert [r["layer"] for r in json.loads((tmp_path / "probe.json").read_text())["rows"]] == [1, 2, 3]
    result = runner.invoke(app, [*args, "--fresh-gists", "4", "1"])  # the student's body, untrained gists
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "probe.json").read_text())["meta"]["fresh_gists"] == [4, 1]
    result = runner.invoke(app, [*args, "--candidates", "1"])
    assert result.exit_code == 2 and "atleast2candidates" in unboxed(result.output)

    png = tmp_path / "curves.png"
    runs = [f"teacher={tmp_path / 'teacher'}", f"student k=2={tmp_path / 'student'}"]  # '=' in a label
    result = runner.invoke(app, ["curves", *runs, "--out", str(png)])
    assert result.exit_code == 0, result.output
    assert png.is_file()
    one_panel = tmp_path / "listwise.png"  # a single chosen field: one panel
    result = runner.invoke(app, ["curves", *runs, "--out", str(one_panel), "--key", "listwise"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["curves", *runs, "--out", str(tmp_path / "x.png"), "--key", "hidden"])
    assert result.exit_code == 2 and "norunlogged['hidden']" in unboxed(result.output)
    assert not (tmp_path / "x.png").exists()
    assert one_panel.read_bytes()[:4] == b"\x89PNG"
    result = runner.invoke(app, ["curves", f"missing={tmp_path / 'nowhere'}"])
    assert result.exit_code != 0 and "curve.jsonldoesnotexist" in unboxed(result.output)


def test_train_refuses_bad_options_with_their_names(tiny_base: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"stepz": 2}))
    args = ["train", "--out", str(tmp_path / "run"), "--model", str(tiny_base), "--products", "2"]
    result = runner.invoke(app, [*args, "--score-rule", "bogus", "--dtype", "bogus"])
    assert result.exit_code == 2 and not isinstance(result.exception, ValueError)  # a usage error
    message = unboxed(result.output)
    assert "score_rule:Inputshouldbe'head'or'query_likelihood'" in message and "dtype:" in message
    result = runner.invoke(app, [*args, "--config", str(cfg)])
    assert result.exit_code == 2 and "stepz:Extrainputsarenotpermitted" in unboxed(result.output)
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_eval_refuses_a_duplicated_relevance_row_naming_file_and_line(tmp_path: Path) -> None:
    row = {"query_id": "q1", "query": "blue phone", "item_id": "i1", "item_text": "Phone, blue", "label": 2}
    data = tmp_path / "rel.jsonl"
    data.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    args = ["eval", "--teacher", str(tmp_path / "teacher"), "--student", str(tmp_path / "student")]
    result = runner.invoke(app, [*args, "--data", str(data)])
    assert result.exit_code == 2 and not isinstance(result.exception, ValueError)  # a usage error
    message = unboxed(result.output)
    assert f"{data}:2:duplicatejudgmentforquery'q1',item'i1'(firstonline1)".replace(" ", "") in message
    assert "Traceback" not in result.output


@pytest.mark.kafka
@pytest.mark.triton
def test_pipeline_demo_end_to_end(tiny_base: Path, tmp_path: Path) -> None:
    """`make demo` on a tiny model: every stage runs against the real services and they all stop. (The
    select compressor's way through Feast into Triton: tests/test_reader_rollout.py.)"""
    args = ["demo", "--model", str(tiny_base), "--num-gist", "4", "--dtype", "float32"]
    args += ["--workdir", str(tmp_path / "demo"), "--queries", "2", "--compressor", "gist"]
    result = runner.invoke(app, args, env={"COLUMNS": "200"})  # table cells unwrapped
    assert result.exit_code == 0, result.output
    out = result.output
    assert ": gist, k=4, t=0, K/V stored as float32, fingerprint" in out
    assert "16/16 items have stored K/V in Feast" in out
    assert out.count("query: ") == 2
    assert "→ version" in out and "(feast)" in out.split("→ version")[1]
    assert "· l1)" in out.split("→ version")[0]  # the repeated gist request is an L1 hit
    assert "shadow recall @1 / @5 / @10" in out and "consumer events consumed / items compressed" in out
    assert "fused with BM25 @1 / @5 / @10" in out
    (given,) = [line for line in out.splitlines() if "requests with / without first-stage scores" in line]
    assert given.split("│")[-2].strip() == "2 / 4"  # each query once with BM25's scores; the others without
    assert not (tmp_path / "demo" / "kafka" / "broker.pid").exists()  # the broker was stopped
    # each request carried BM25's scores: served fused as the evaluation interpolates (the tiny wrap's
    # default weight), the reranker's own scores beside them
    assert "first stage: BM25" in out and "fused with first-stage scores by linear:0.5" in out
    rankings = json.loads((tmp_path / "demo" / "rankings.json").read_text())
    assert len(rankings) == 2
    for row in rankings:
        assert len(row["first_stage_bm25"]) == len(row["item_ids"]) == 16 and max(row["first_stage_bm25"]) > 0
        np.testing.assert_allclose(
            row["served_scores"], interpolate(row["rerank_scores"], row["first_stage_bm25"], 0.5), atol=1e-6
        )


def test_bench_packing_compares_pairs_per_second(tiny_base: Path, tmp_path: Path) -> None:
    out = tmp_path / "packing.json"
    args = ["bench-packing", "--model", str(tiny_base), "--items", "3", "--num-gist", "2"]
    args += ["--dtype", "float32", "--max-item-tokens", "48", "--out", str(out)]
    args += ["--queries-per-item", "1", "--queries-per-item", "3"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["rows"]
    assert [r["queries_per_item"] for r in rows] == [1, 3]
    for r in rows:
        assert r["items"] == 3 and r["unpacked_pairs_per_s"] > 0 and r["packed_pairs_per_s"] > 0
        assert r["speedup"] == r["packed_pairs_per_s"] / r["unpacked_pairs_per_s"]
    span = rows[0]["mean_item_tokens"] + 2
    assert rows[0]["ideal_speedup"] == pytest.approx(1.0)  # one query per row: nothing to share
    assert rows[1]["ideal_speedup"] == pytest.approx(
        3 * (span + rows[1]["mean_online_tokens"]) / (span + 3 * rows[1]["mean_online_tokens"])
    )


@pytest.mark.kafka
@pytest.mark.redis
def test_bench_store_measures_every_path(tiny_base: Path, tmp_path: Path) -> None:
    out = tmp_path / "store.json"
    args = ["bench-store", "--model", str(tiny_base), "--num-gist", "4", "--dtype", "float32"]
    args += ["--consumer-items", "8", "--read-ids", "10", "--read-repeats", "3"]
    args += ["--workdir", str(tmp_path / "w"), "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    bench = json.loads(out.read_text())
    assert bench["consumer"]["items"] == 8 and bench["consumer"]["consumer_items_per_s"] > 0
    scaling = bench["consumer_scaling"]
    assert set(scaling["items_per_s"]) == {"1", "2"} and all(r > 0 for r in scaling["items_per_s"].values())
    assert scaling["speedup"]["1"] == 1.0 and scaling["partitions"] == 2
    for path in ("feast_sqlite", "feast_redis", "raw_redis_pipeline"):
        assert 0 < bench["read"][path]["p50_ms"] <= bench["read"][path]["p99_ms"]
    sizes = {b["storage_dtype"]: b for b in bench["blobs"]}
    assert set(sizes) == {"float32", "float16", "bfloat16", "int8", "int4", "int2"}
    # a float blob is the formula and a header; a quantised one adds its scales (and minimums)
    assert all(
        0 < b["overhead_bytes"] < 1024 for d, b in sizes.items() if d.startswith("float") or d == "bfloat16"
    )
    assert sizes["int2"]["blob_bytes"] < sizes["int4"]["blob_bytes"] < sizes["int8"]["blob_bytes"]


def test_version_and_short_help_on_every_command_readable_in_a_pipe() -> None:
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"gistrank {version('gistrank')}\n"
    commands = (["-h"], ["rollout", "gc", "-h"], ["dlq", "replay", "-h"], ["eval", "-h"], ["serve", "-h"])
    for command in commands:
        result = runner.invoke(app, command, prog_name="gistrank")
        assert result.exit_code == 0 and result.output.startswith("Usage: gistrank"), (command, result.output)
        assert not set("╭│╰─") & set(result.output), result.output  # no boxes for a pipe to wrap
    # one name per concept: serve takes the names consume and demo use (its older ones still work)
    serve, consume = (runner.invoke(app, [c, "-h"]).output for c in ("serve", "consume"))
    for name in ("--online", "--bootstrap-servers"):
        assert name in serve and name in consume
    assert "--shadow-model" in serve and "--shadow-model" in runner.invoke(app, ["demo", "-h"]).output


def test_a_misspelled_model_name_is_one_line_naming_the_known_ones_and_no_service_is_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No Hub call (HF_HUB_OFFLINE, set by the CLI) and no broker: the name is checked first. The
    bootstrap server points at a closed port, so reaching Kafka would show up as a Kafka error."""
    from reranker.core.base_models import BaseModelUnavailableError, resolve_base

    env = {"HF_HUB_OFFLINE": "1", "GISTRANK_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    result = runner.invoke(app, ["consume", "--model", "gistrank-bse-ql"], env=env)
    assert result.exit_code == 2, result.output
    assert "'gistrank-bse-ql' is not a known name or a local folder" in result.output
    assert "gistrank-base-ql-prefix128-int4" in result.output and "Kafka" not in result.output
    assert "Traceback" not in result.output
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BaseModelUnavailableError, match="known: gistrank-base-ql-prefix128-int4"):
        resolve_base("org/some-hub-model")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # a user who can reach the Hub lets its ids through
    assert resolve_base("org/some-hub-model") == "org/some-hub-model"
