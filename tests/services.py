"""Real services for integration tests, each bound to 127.0.0.1 on a free port and stopped afterwards."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def redis_server(tmp_path: Path, timeout_s: float = 10.0) -> Iterator[str]:
    """Run a throwaway redis-server (no persistence) with its files in `tmp_path`; yield its URL.

    Stopped with SIGTERM (SIGKILL if it lingers) when the block exits: code that keeps the URL after the
    block sees Redis down.
    """
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError("redis-server is not installed: run scripts/setup_system.sh")
    # The free port can be taken between probing and binding; redis-server then exits and we retry.
    for _ in range(3):
        port = _free_port()
        workdir = tmp_path / f"redis-{port}"
        workdir.mkdir(parents=True, exist_ok=True)
        log = workdir / "redis.log"
        args = [exe, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(workdir)]
        args += ["--save", "", "--appendonly", "no", "--logfile", str(log)]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            if _wait_ready(proc, port, timeout_s):
                yield f"redis://127.0.0.1:{port}/0"
                return
        finally:
            _stop(proc)
    raise RuntimeError(f"redis-server did not start; last log:\n{log.read_text() if log.exists() else ''}")


def _wait_ready(proc: subprocess.Popen[bytes], port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    with redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            try:
                return client.ping()
            except redis.exceptions.ConnectionError:
                time.sleep(0.02)
    raise RuntimeError(f"redis-server on port {port} not ready after {timeout_s} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
