"""reranker/serving/server.py: the runtime model repository, the server settings and its environment
(no tritonserver is started)."""

from __future__ import annotations

import os
import signal
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import alive, wait_until

from reranker.core.checkpoints import (
    DEFAULT_MODEL,
    HYBRID_CHECKPOINT,
    QL_CHECKPOINT,
    SHADOW_CHECKPOINT,
    SHIPPED,
)
from reranker.serving.server import (
    FULL_MODEL,
    GIST_MODEL,
    PROJECT_ROOT,
    TEMPLATE_REPO,
    ServerError,
    ServerSettings,
    read_parameters,
    server_env,
    set_parameters,
    start_group,
    stop_group,
    write_backends,
    write_repository,
)


def test_set_parameters_escapes_values_and_refuses_unknown_keys(tmp_path: Path) -> None:
    text = (TEMPLATE_REPO / GIST_MODEL / "config.pbtxt").read_text()
    odd = 'C:\\dir "quoted"\nnext'
    assert read_parameters(set_parameters(text, {"catalog_url": odd}))["catalog_url"] == odd
    with pytest.raises(ServerError, match="not listed"):
        set_parameters(text, {"nope": "1"})
    settings_ = ServerSettings(model_path="/m", shadow_rate=1.0, instances=3)
    repo = write_repository(tmp_path / "models", settings_.parameters(), settings_.instance_counts())
    gist_config = (repo / GIST_MODEL / "config.pbtxt").read_text()
    written = read_parameters(gist_config)
    assert (
        written["shadow_rate"] == "1.0" and "instance_group [ { count: 3, kind: KIND_CPU } ]" in gist_config
    )
    with pytest.raises(ServerError, match="instances must be >= 1"):
        ServerSettings(model_path="/m", instances=0).instance_counts()
    assert read_parameters((repo / FULL_MODEL / "config.pbtxt").read_text())["model_path"] == "/m"
    assert (repo / GIST_MODEL / "1" / "model.py").is_file()


def test_local_settings_pick_free_ports_and_keep_files_in_the_workdir(tmp_path: Path) -> None:
    local = ServerSettings.local("/m", tmp_path, shadow_rate=1.0, grpc_port=9001)
    assert (local.http_port, local.metrics_port) == (0, 0)  # 0: free at start
    assert local.grpc_port == 9001 and local.shadow_rate == 1.0 and local.model_path == "/m"
    assert (local.feast_dir, local.workdir) == (str(tmp_path / "feast"), str(tmp_path / "triton"))


def test_shadow_defaults_to_the_shipped_teacher_only_for_a_shipped_student() -> None:
    def shadow(**kwargs: str) -> str:
        return ServerSettings(**kwargs).parameters()[FULL_MODEL]["model_path"]

    assert shadow(model_path="/m") == "/m"  # any other model: its own full-context forward
    assert shadow(model_path=DEFAULT_MODEL) == DEFAULT_MODEL  # the default preset reads the base
    assert shadow(model_path=HYBRID_CHECKPOINT) == SHADOW_CHECKPOINT
    assert shadow(model_path=str(SHIPPED[HYBRID_CHECKPOINT])) == SHADOW_CHECKPOINT  # by folder too
    assert shadow(model_path=HYBRID_CHECKPOINT, full_model_path="/t") == "/t"
    assert shadow(model_path=QL_CHECKPOINT) == SHADOW_CHECKPOINT  # the other shipped student
    assert shadow(model_path=SHADOW_CHECKPOINT) == SHADOW_CHECKPOINT  # the teacher checks itself


def test_server_env_puts_this_interpreter_first(tmp_path: Path) -> None:
    env = server_env({"LD_LIBRARY_PATH": "/usr/lib/x86_64-linux-gnu", "PATH": "/usr/bin"})
    libdir = sysconfig.get_config_var("LIBDIR")
    ld = env["LD_LIBRARY_PATH"].split(os.pathsep)
    assert ld[0] == libdir and ld[-1] == "/usr/lib/x86_64-linux-gnu"
    assert (Path(libdir) / f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0").is_file()
    pythonpath = env["PYTHONPATH"].split(os.pathsep)
    assert pythonpath[:2] == [str(PROJECT_ROOT), sysconfig.get_paths()["purelib"]]
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    backends = write_backends(tmp_path / "backends")
    stub = backends / "python" / "triton_python_backend_stub"
    assert stub.is_file() and os.access(stub, os.X_OK)
    assert (backends / "python" / "libtriton_python.so").is_file()


def test_stop_group_kills_what_outlives_the_leader(tmp_path: Path) -> None:
    """A leader that exits on SIGTERM with a child that ignores it (a Triton that gave up on a stub whose
    finalize hangs): after `stop_group` neither is running."""
    child = (
        "import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
    )
    leader = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {child!r}, sys.argv[1]]); time.sleep(600)"
    )
    pid_file = tmp_path / "child.pid"
    with open(tmp_path / "log", "wb") as log:
        process = start_group([sys.executable, "-c", leader, str(pid_file)], log, os.environ)
    wait_until(lambda: pid_file.is_file() and pid_file.read_text(), 30, "the child to start")
    child_pid = int(pid_file.read_text())
    assert os.getpgid(child_pid) == process.pid != os.getpgid(0)  # its own group, the child in it
    assert stop_group(process, timeout_s=10) == -signal.SIGTERM
    wait_until(lambda: not alive(child_pid), 10, "the child that ignored SIGTERM to be killed")
