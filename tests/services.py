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

__all__ = ["RedisCluster", "RedisServer", "Serve", "feast_cluster_config", "redis_cluster", "redis_server"]


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


def feast_cluster_config(folder: Path, connection_string: str) -> Path:
    """A Feast repo config as a deployment writes it — Redis Cluster online store at `connection_string`
    (Feast expands ${VAR} in it), SQL registry (SQLite through SQLAlchemy here; PostgreSQL in
    production) — written to `folder`/feature_store.yaml."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "feature_store.yaml"
    config.write_text(
        "project: gistrank\n"
        "provider: local\n"
        "registry:\n"
        "  registry_type: sql\n"
        f"  path: sqlite:///{folder / 'registry.db'}\n"
        "  cache_ttl_seconds: 60\n"
        # Feast 0.49's SQL registry nests a second write transaction inside apply's, which SQLite
        # refuses ("database is locked", feast-dev/feast#5565); PostgreSQL needs no such setting
        "  sqlalchemy_config_kwargs: {echo: false, isolation_level: AUTOCOMMIT}\n"
        "online_store:\n"
        "  type: redis\n"
        "  redis_type: redis_cluster\n"
        f"  connection_string: {connection_string}\n"
        "offline_store:\n"
        "  type: file\n"
        "entity_key_serialization_version: 3\n"
    )
    return config


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
