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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.usage

MODEL = "gistrank-base-ql-prefix64"
PLAN = ["--items", "9", "--qps", "1", "--candidates", "5"]
TREC = ["--docs", "{sgml}", "--topics", "{sgml}", "--qrels", "{qrels}"]
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
    (["plan", "--items", "9", "--qps", "1", "--candidates", "5", "--storage-dtype", "int3"], "'int3'"),
    # issue 52: the storage and a budget in bytes are model settings, checked like the others
    (["serve", "--kv-storage", "int3"], "'int3'"),
    (["consume", "--model", f"{MODEL}?kv_storage=int3"], "kv_storage: Input should be"),
    ([*["plan", *PLAN], "--model", f"{MODEL}?kib=abc"], "kib='abc' is not a positive number of KiB"),
    ([*["plan", *PLAN], "--model", f"{MODEL}?kib=360&num_gist=8"], "sets both num_gist and kib"),
    ([*["plan", *PLAN], "--model", f"{MODEL}?kib=1"], "kib=1 holds 0 positions"),
    # issue 51, gc and ports: a fingerprint that names no view (here: no store at all) keeps nothing;
    # every port option is 1-65535 (0 = a free port where the help says so)
    (["rollout", "gc", "--fingerprint", "deadbeef"], "no view of deadbeef: no Feast store"),
    (["rollout", "gc", "--fingerprint", "deadbeef", "--dry-run"], "no view of deadbeef: no Feast store"),
    (["serve", "--http-port", "70000"], "'--http-port': Input should be less than or equal to 65535"),
    (["serve", "--grpc-port", "-1"], "'--grpc-port': Input should be greater than or equal to 0"),
    (["serve", "--metrics-port", "65536"], "'--metrics-port'"),
    (["consume", "--metrics-port", "0"], "'--metrics-port': Input should be greater than or equal to 1"),
    # issue 51, model references (one check, one message, before anything loads), outputs, input files
    (["plan", *PLAN, "--model", "gistrank-base-ql-prefx64"], "did you mean gistrank-base-ql-prefix64?"),
    (["plan", *PLAN, "--model", "./ckpt/"], "'./ckpt/' is not a known name or a local folder"),
    (["plan", *PLAN, "--model", "{dir}"], "neither a GistRank checkpoint (gistrank.json) nor"),
    (["eval", "--teacher", "gistrank-teacher-lor", "--student", "s"], "did you mean gistrank-teacher-lora?"),
    (["eval", "--teacher", "gistrank-teacher-lora", "--shadow-model", "./ckpt/"], "--shadow-model"),
    (["train", "--out", "run", "--model", "smollm2-135m"], "did you mean smollm2-135m-instruct?"),
    (["train-gists", "--out", "run", "--reader", "./ckpt/"], "'./ckpt/' is not a known name"),
    (["train-gists", "--out", "run", "--reader", f"{MODEL}?num_gist=0"], "num_gist: Input should be"),
    (["bench", "--model", "gistrank-ql-k5"], "did you mean gistrank-ql-k4?"),
    (["bench-store", "--model", "./ckpt/"], "'./ckpt/' is not a known name"),
    (["serve", "--model", "gistrank-hybrid-t32-k9"], "did you mean gistrank-hybrid-t32-k8?"),
    (["serve", "--shadow-model", "./ckpt/"], "--shadow-model"),
    (["demo", "--model", "./ckpt/"], "'./ckpt/' is not a known name"),
    (["probe", "--teacher", "gistrank-teacher-lora", "--student", "./ckpt/"], "--student"),
    (["materialize", "--model", "gistrank-ql-k5"], "did you mean gistrank-ql-k4?"),
    (["rollout", "gc", "--model", "./ckpt/"], "'./ckpt/' is not a known name"),
    (["data", "import-file", "{labels}", "--out", "{file}"], "is a file: give a new or empty folder"),
    (
        ["data", "import-file", "{labels}", "--out", "{dir}/.."],
        "holds other files",
    ),  # `--out .` in a busy folder
    (["data", "import-file", "{labels}", "--out", "{set}"], "pass --overwrite to replace it"),
    (["data", "import-trec", *TREC, "--out", "{set}"], "pass --overwrite to replace it"),
    (["data", "import-trec", *TREC, "--out", "new"], "this looks like TREC SGML (<DOC>)"),
    (["plan", "--items", "9", "--qps", "inf", "--candidates", "5"], "inf must be a finite number"),
    (["plan", "--items", "9", "--qps", "nan", "--candidates", "5"], "nan must be a finite number"),
    (["plan", *PLAN, "--hit-ratio", "nan"], "'--hit-ratio': nan must be a finite number"),
    (["plan", "--items", "1e20", "--qps", "1", "--candidates", "5"], "'--items'"),
    (["catalog", "load", "{empty}"], "no items: the file is empty"),
    (
        ["catalog", "load", "{csv}"],
        "expected JSON Lines (one JSON object per line), this looks like CSV (header 'a,b,c')",
    ),
    (["catalog", "load", "{sgml}"], "this looks like TREC SGML (<DOC>)"),
    (["publish", "--file", "{csv}"], "this looks like CSV (header 'a,b,c')"),
    (["eval", "--teacher", "t", "--student", "s", "--data", "{csv}"], "this looks like CSV (header 'a,b,c')"),
    (["catalog", "load", "{file}", "--catalog-url", "sqlite:///nodir/x.db"], "nodir does not exist"),
    (["consume", "--catalog-url", "sqlite:///nodir/x.db"], "nodir does not exist"),
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
        timeout=300,
    )
    return result, time.monotonic() - started


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
    (given / "empty.jsonl").write_text("")
    (given / "table.jsonl").write_text("a,b,c\n1,2,3\n")
    (given / "docs.jsonl").write_text("<DOC>\n<DOCNO> AP890101-0001 </DOCNO>\n</DOC>\n")
    (given / "qrels.txt").write_text("1 0 AP890101-0001 1\n")
    (given / "set").mkdir()
    for name in ("items.jsonl", "queries.jsonl", "judgments.jsonl"):
        (given / "set" / name).write_text("")
    before = sorted((p, p.stat().st_mtime_ns) for p in given.rglob("*"))
    names = {"dir": given / "folder", "file": given / "file.jsonl", "labels": given / "labels.jsonl"}
    names |= {"empty": given / "empty.jsonl", "csv": given / "table.jsonl", "sgml": given / "docs.jsonl"}
    names |= {"set": given / "set", "qrels": given / "qrels.txt"}
    args = [arg.format(**names) for arg in args]
    result, _ = _gistrank(args, work, home)
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


@pytest.fixture(scope="module")
def dead_broker_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Path, subprocess.CompletedProcess[str], float]]:
    """Every DEAD_BROKER command run at once (each waits out the same 5 s, so together they take one
    wait): its folder (home/ and work/ inside), result and wall time, by the command's words."""
    root = tmp_path_factory.mktemp("dead-broker")
    events = root / "events.jsonl"  # a valid file: it is checked before the broker
    events.write_text('{"op": "delete", "item_id": "a", "version": 1, "timestamp": "2024-01-01T00:00:00Z"}\n')

    def run(number: int, args: list[str]) -> tuple[Path, subprocess.CompletedProcess[str], float]:
        folder = root / str(number)
        (folder / "work").mkdir(parents=True)
        return folder, *_gistrank(
            [arg.format(events=events) for arg in args], folder / "work", folder / "home"
        )

    with ThreadPoolExecutor(len(DEAD_BROKER)) as pool:
        runs = pool.map(run, range(len(DEAD_BROKER)), [args for args, _ in DEAD_BROKER])
        return {" ".join(args): done for (args, _), done in zip(DEAD_BROKER, runs, strict=True)}


@pytest.mark.parametrize(("args", "how"), DEAD_BROKER, ids=[" ".join(a)[:40] for a, _ in DEAD_BROKER])
def test_a_dead_broker_is_one_line_exit_1_within_15_s_and_touches_nothing(
    args: list[str],
    how: str,
    dead_broker_runs: dict[str, tuple[Path, subprocess.CompletedProcess[str], float]],
) -> None:
    folder, result, wall_s = dead_broker_runs[" ".join(args)]
    home, work = folder / "home", folder / "work"
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


# issue 51: what the BAD table cannot show (a command that succeeds, a second run)
def test_an_import_replaces_a_relevance_set_only_with_overwrite(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from reranker.cli import app
    from reranker.data.relevance_data import RelevanceSet

    row = {"query_id": "q1", "query": "usb-c charger", "item_id": "i1", "title": "A charger", "label": 2}
    source, out = tmp_path / "labels.jsonl", tmp_path / "set"
    source.write_text(json.dumps(row) + "\n")
    args = ["data", "import-file", str(source), "--out", str(out)]
    assert CliRunner().invoke(app, args).exit_code == 0
    (out / "import.json").write_text("{}\n")  # a TREC import's counts, from the set this one replaces
    source.write_text(json.dumps(row | {"label": 3}) + "\n")
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and "--overwrite" in refused.output
    assert RelevanceSet.load_jsonl(out).candidates("q1") == [("i1", 2)]  # untouched
    assert CliRunner().invoke(app, [*args, "--overwrite"]).exit_code == 0
    assert RelevanceSet.load_jsonl(out).candidates("q1") == [("i1", 3)]
    assert sorted(p.name for p in out.iterdir()) == ["items.jsonl", "judgments.jsonl", "queries.jsonl"]


def test_a_byte_order_mark_is_skipped_in_catalog_and_event_files(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from reranker.catalog.publisher import check_event_file
    from streaming.cli import main as streaming_app

    bom = b"\xef\xbb\xbf"
    item = {"item_id": "a", "title": "A charger", "attributes": {}, "description": ""}
    (tmp_path / "items.jsonl").write_bytes(bom + json.dumps(item).encode() + b"\n")
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    result = CliRunner().invoke(
        streaming_app, ["catalog", "load", str(tmp_path / "items.jsonl"), "--catalog-url", url]
    )
    assert result.exit_code == 0 and "1 items created" in result.output, result.output
    event = {
        "op": "upsert",
        "item_id": "a",
        "version": 1,
        "timestamp": "2024-01-01T00:00:00Z",
        "fields": item,
    }
    del event["fields"]["item_id"]
    (tmp_path / "events.jsonl").write_bytes(bom + json.dumps(event).encode() + b"\n")
    check_event_file(tmp_path / "events.jsonl")  # raises EventFileError on a line it refuses


def test_python_m_streaming_cli_takes_h() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "streaming.cli", "catalog", "load", "-h"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout and "--catalog-url" in result.stdout
