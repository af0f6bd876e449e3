"""Bad input to the `gistrank` console script (its `main`, as a user runs it): each mistake is one error
line naming the value and what was expected, exit 2, no traceback, no service asked (Kafka points at a
closed port, the Hub is off), nothing written (the state folder and the working folder stay empty).
`{dir}`, `{file}` and `{labels}` in a row are an existing folder, an existing file and a relevance file
whose label is a score, not a grade; they sit outside the working folder and stay as they were."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.usage

MODEL = "gistrank-base-ql-prefix64"
BAD = [  # (arguments, what the error line must say)
    (["plan", "--items", "0", "--qps", "10", "--candidates", "10"], "'--items': Input should be greater"),
    (["plan", "--items", "9", "--qps", "1", "--candidates", "5", "--consumer-items-per-s", "-1"], "0.001"),
    (["plan", "--items", "9", "--qps", "1", "--candidates", "5", "--hit-ratio", "2"], "'--hit-ratio'"),
    (["catalog", "load", "missing.jsonl"], "'missing.jsonl' does not exist"),
    (["consume", "--model", "gistrank-bse-ql"], "not a known name or a local folder"),
    (["rollout", "status", "--model", f"{MODEL}?compressor=bogus"], "unknown compressor 'bogus'"),
    (["rollout", "status", "--model", f"{MODEL}?num_gist=-1"], "num_gist: Input should be greater"),
    (["rollout", "status", "--model", f"{MODEL}?num_gist=8&num_gist=16"], "set more than once"),
    (["rollout", "gc", "--unused-for", "-1"], "'--unused-for'"),
    (["serve", "--compressor", "bogus"], "unknown compressor 'bogus'"),
    (["serve", "--num-gist", "-1"], "num_gist: Input should be greater"),
    (["dlq", "replay", "--reason", "bogus"], "unknown reason ['bogus']"),
    (["soak", "--events", "0"], "'--events'"),
    (["catalog", "update", "x", "--title", "t", "--attr", "noequals"], "--attr 'noequals' is not key=value"),
    (
        ["eval", "--teacher", "t", "--student", "s", "--data", "d.jsonl", "--max-item-tokens", "9"],
        "synthetic",
    ),
    (["eval", "--teacher", "t", "--student", "s", "--gain", "bogus"], "'bogus' is not one of"),
    (["catalog", "load", "{dir}"], "is a directory"),
    (["publish", "--file", "{dir}"], "is a directory"),
    (["publish", "--file", "{file}"], "line 1: missing field 'op'"),  # the file checked before the broker
    (["consume", "--batch-size", "0"], "'--batch-size'"),  # options checked before the broker
    (["train-gists", "--out", "{file}"], "is a file"),  # before the reader is loaded
    (["train", "--out", "{file}"], "is a file"),
    (["eval", "--teacher", "t", "--student", "s", "--out", "{file}"], "is a file"),
    (["eval", "--teacher", "t", "--student", "s", "--data", "{labels}"], "label 1000000 is above 100"),
    (["train", "--out", "run", "--data", "{labels}"], "label 1000000 is above 100"),
    (["plan", "--items", "9", "--qps", "1", "--candidates", "5", "--storage-dtype", "int4"], "'int4'"),
    # issue 51, gc and ports: a fingerprint that names no view (here: no store at all) keeps nothing;
    # every port option is 1-65535 (0 = a free port where the help says so)
    (["rollout", "gc", "--fingerprint", "deadbeef"], "no view of deadbeef: no Feast store"),
    (["rollout", "gc", "--fingerprint", "deadbeef", "--dry-run"], "no view of deadbeef: no Feast store"),
    (["serve", "--http-port", "70000"], "'--http-port': Input should be less than or equal to 65535"),
    (["serve", "--grpc-port", "-1"], "'--grpc-port': Input should be greater than or equal to 0"),
    (["serve", "--metrics-port", "65536"], "'--metrics-port'"),
    (["consume", "--metrics-port", "0"], "'--metrics-port': Input should be greater than or equal to 1"),
]


@pytest.mark.parametrize(("args", "says"), BAD, ids=[" ".join(a)[:60] for a, _ in BAD])
def test_a_bad_input_is_one_line_exit_2_and_touches_nothing(
    args: list[str], says: str, tmp_path: Path
) -> None:
    home, work, given = tmp_path / "home", tmp_path / "work", tmp_path / "given"
    work.mkdir()
    (given / "folder").mkdir(parents=True)
    (given / "file.jsonl").write_text('{"item_id": "a"}\n')
    row = {"query_id": "q1", "query": "usb-c charger", "item_id": "i1", "title": "A charger", "label": 10**6}
    (given / "labels.jsonl").write_text(json.dumps(row) + "\n")
    before = sorted((p, p.stat().st_mtime_ns) for p in given.rglob("*"))
    names = {"dir": given / "folder", "file": given / "file.jsonl", "labels": given / "labels.jsonl"}
    args = [arg.format(**names) for arg in args]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GISTRANK_", "HF_HUB_OFFLINE"))}
    env |= {"GISTRANK_HOME": str(home), "GISTRANK_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    result = subprocess.run(
        [sys.executable, "-c", "from reranker.cli import main; main()", *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in result.stderr.splitlines() if line.lower().startswith("error")]
    assert result.returncode == 2, result.stderr
    assert len(errors) == 1 and says in errors[0], result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "Kafka" not in result.stderr  # checked before any broker was asked
    assert not home.exists() and not any(work.iterdir())  # nothing written
    assert sorted((p, p.stat().st_mtime_ns) for p in given.rglob("*")) == before


# Issue 51, broker reachability first: every Kafka command asks the bootstrap servers before it loads a
# model or touches a store, and gives up within $GISTRANK_KAFKA_CONNECT_TIMEOUT_S (default 5 s): one
# line naming the address and how to set it, exit 1 (a service that is down), nothing written.
DEAD_BROKER = [  # (arguments, how the line says to set the servers)
    (["consume", "--idle-exit-s", "5"], "--bootstrap-servers or $GISTRANK_KAFKA_BOOTSTRAP_SERVERS"),
    (["publish", "--file", "{events}"], "--bootstrap-servers or $GISTRANK_KAFKA_BOOTSTRAP_SERVERS"),
    (["dlq", "replay"], "--bootstrap-servers or $GISTRANK_KAFKA_BOOTSTRAP_SERVERS"),
    (["catalog", "update", "x", "--title", "t"], "(or --no-publish)"),
    (["serve", "--bootstrap-servers", "127.0.0.1:1"], "--bootstrap-servers (or leave it out"),
]
CLOSED_PORT = "127.0.0.1:1"


def _gistrank(
    args: list[str], work: Path, home: Path, **env: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    """The console script run as a user runs it, Kafka at a closed port: its result and wall time."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GISTRANK_", "HF_HUB_OFFLINE"))}
    base |= {"GISTRANK_HOME": str(home), "GISTRANK_KAFKA_BOOTSTRAP_SERVERS": CLOSED_PORT} | env
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", "from reranker.cli import main; main()", *args],
        cwd=work,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result, time.monotonic() - started


@pytest.mark.parametrize(("args", "how"), DEAD_BROKER, ids=[" ".join(a)[:40] for a, _ in DEAD_BROKER])
def test_a_dead_broker_is_one_line_exit_1_within_15_s_and_touches_nothing(
    args: list[str], how: str, tmp_path: Path
) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    events = tmp_path / "events.jsonl"  # a valid file: it is checked before the broker
    events.write_text('{"op": "delete", "item_id": "a", "version": 1, "timestamp": "2024-01-01T00:00:00Z"}\n')
    result, wall_s = _gistrank([arg.format(events=events) for arg in args], work, home)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()  # no Kafka log line, no traceback: the error is all there is
    assert len(lines) == 1 and lines[0].startswith("error: no Kafka broker answered"), result.stderr
    assert CLOSED_PORT in lines[0] and how in lines[0] and "within 5 s" in lines[0]
    assert "Traceback" not in result.stdout
    assert not home.exists() and not any(work.iterdir())  # no feast/, no catalog.db: nothing written
    assert wall_s < 15, f"{wall_s:.1f} s"  # a 5 s wait plus the interpreter's start


def test_the_broker_wait_is_configurable_and_kafka_logs_show_when_asked(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    result, _ = _gistrank(["dlq", "replay", "-v"], work, home, GISTRANK_KAFKA_CONNECT_TIMEOUT_S="1")
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "within 1 s" in errors[0], result.stderr
    assert " kafka." in result.stderr  # kafka-python's own lines, asked for with -v
    assert not home.exists() and not any(work.iterdir())


# Issue 51, ports: a server's port that is taken is found before the model loads or tritonserver starts
@pytest.mark.parametrize(
    "command",
    [["serve", "--http-port"], ["serve", "--metrics-port"], ["consume", "--metrics-port"]],
    ids=lambda c: " ".join(c),
)
def test_a_busy_port_is_one_line_naming_its_holder_before_anything_starts(
    command: list[str], tmp_path: Path
) -> None:
    workdir = ["--workdir", str(tmp_path / "triton")] if command[0] == "serve" else []
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result, took = _gistrank([*command, str(port), *workdir], tmp_path, tmp_path / "home")
    errors = [line for line in result.stderr.splitlines() if line.lower().startswith("error")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in errors[0], errors
    assert f"(held by pid {os.getpid()}: " in errors[0], errors  # this test's process holds it
    assert "Traceback" not in result.stderr and "Kafka" not in result.stderr
    assert not (tmp_path / "triton").exists() and not (tmp_path / "home").exists()  # nothing started
    assert took < 30, took  # the CLI's imports, not a model load (~30 s before)


def test_one_port_given_to_two_endpoints_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    result, _ = _gistrank(["serve", "--http-port", port, "--metrics-port", port], tmp_path, tmp_path / "home")
    errors = [line for line in result.stderr.splitlines() if line.lower().startswith("error")]
    assert result.returncode == 2 and len(errors) == 1 and f"{port} is --http-port too" in errors[0], errors
