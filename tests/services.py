"""Real services for integration tests, each bound to 127.0.0.1 on a free port and stopped afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from streaming.redis_server import RedisServer

__all__ = ["RedisServer", "redis_server"]


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
