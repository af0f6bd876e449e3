"""Real services for integration tests, each bound to 127.0.0.1 on a free port and stopped afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from reranker.serving.server import PROJECT_ROOT
from streaming.redis_server import RedisCluster, RedisServer

__all__ = ["RedisCluster", "RedisServer", "Serve", "redis_cluster", "redis_server"]


@contextmanager
def redis_server(tmp_path: Path, timeout_s: float = 10.0) -> Iterator[str]:
    """Run a `RedisServer` with its files in `tmp_path`; yield its URL.

    Stopped when the block exits: code that keeps the URL after the block sees Redis down.
    """
    server = RedisServer(tmp_path / "redis", timeout_s).start()
    try:
        yield server.url
    finally:
        server.stop()


@contextmanager
def redis_cluster(tmp_path: Path, masters: int = 3) -> Iterator[RedisCluster]:
    """Run a `RedisCluster` of `masters` masters with its files in `tmp_path`; stopped at the block's end."""
    cluster = RedisCluster(tmp_path / "redis-cluster", masters).start()
    try:
        yield cluster
    finally:
        cluster.stop()


class Serve:
    """`gistrank serve` (reranker.serving.cli.serve) in a subprocess, its output collected."""

    def __init__(self, args: list[str]) -> None:
        code = "import typer; from reranker.serving.cli import serve; typer.run(serve)"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self._reader.start()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"no {text!r} from gistrank serve:\n{self.output}")

    def stop(self, timeout_s: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout_s)
        self._reader.join(5)
        return code
