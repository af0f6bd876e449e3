"""A throwaway redis-server on 127.0.0.1 (no persistence): used by the tests and by `gistrank bench-store`."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Self

import redis


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A throwaway redis-server (no persistence) on 127.0.0.1 with its files in `workdir`.

    `stop()` then `start()` again brings it back on the same port, so a client configured with `url` sees
    an outage and a recovery (an empty one: nothing is persisted).
    """

    def __init__(self, workdir: Path, timeout_s: float = 10.0) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed: run scripts/setup_system.sh")
        self.exe = exe
        self.workdir = workdir.resolve()  # redis-server chdirs to --dir before opening --logfile
        self.timeout_s = timeout_s
        self.port = 0  # picked by the first start
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Self:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / "redis.log"
        # The free port can be taken between probing and binding; redis-server then exits and the first
        # start retries on another. A restart must keep the port that clients already hold.
        for _ in range(1 if self.port else 3):
            port = self.port or _free_port()
            args = [self.exe, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(self.workdir)]
            args += ["--save", "", "--appendonly", "no", "--logfile", str(log)]
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            try:
                ready = _wait_ready(self.proc, port, self.timeout_s)
            except BaseException:
                self.stop()
                raise
            if ready:
                self.port = port
                return self
            self.stop()
        last_log = log.read_text() if log.exists() else ""
        raise RuntimeError(f"redis-server did not start; last log:\n{last_log}")

    def stop(self) -> None:
        """SIGTERM, SIGKILL if it lingers."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


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
