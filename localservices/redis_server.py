"""Throwaway redis-servers on 127.0.0.1 (no persistence): one (`RedisServer`), or a Redis Cluster of several
masters (`RedisCluster`); used by the tests and by `gistrank bench-store`."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
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

    def __init__(
        self,
        workdir: Path,
        timeout_s: float = 10.0,
        extra_args: Sequence[str] = (),
        password: str | None = None,
    ) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed: run scripts/setup_system.sh")
        self.exe = exe
        self.workdir = workdir.resolve()  # redis-server chdirs to --dir before opening --logfile
        self.timeout_s = timeout_s
        self.extra_args = list(extra_args)
        self.password = password  # clients must AUTH (`url` carries it)
        self.port = 0  # picked by the first start
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> Self:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / "redis.log"
        # The free port can be taken between probing and binding; redis-server then exits and the first
        # start retries on another. A restart must keep the port that clients already hold.
        for _ in range(1 if self.port else 3):
            port = self.port or _free_port()
            args = [self.exe, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(self.workdir)]
            args += ["--save", "", "--appendonly", "no", "--logfile", str(log), *self.extra_args]
            args += ["--requirepass", self.password] if self.password else []
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            try:
                ready = _wait_ready(self.proc, port, self.timeout_s, self.password)
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


def _wait_ready(proc: subprocess.Popen[bytes], port: int, timeout_s: float, password: str | None) -> bool:
    deadline = time.monotonic() + timeout_s
    with redis.Redis(host="127.0.0.1", port=port, password=password, socket_connect_timeout=0.5) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            try:
                return client.ping()
            except redis.exceptions.ConnectionError:
                time.sleep(0.02)
    raise RuntimeError(f"redis-server on port {port} not ready after {timeout_s} s")


class RedisCluster:
    """A Redis Cluster of `masters` throwaway redis-servers (no replicas) on 127.0.0.1, its hash slots
    spread over them by `redis-cli --cluster create`. `nodes` is Feast's `connection_string` for
    `redis_type: redis_cluster`."""

    def __init__(self, workdir: Path, masters: int = 3, timeout_s: float = 20.0) -> None:
        cluster_args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        # the bus port is named, not the default port + 10000 (above 65535 for a high free port)
        self.servers = [
            RedisServer(workdir / f"node{i}", timeout_s, [*cluster_args, "--cluster-port", str(_free_port())])
            for i in range(masters)
        ]
        self.timeout_s = timeout_s

    @property
    def nodes(self) -> str:
        return ",".join(f"127.0.0.1:{s.port}" for s in self.servers)

    def start(self) -> Self:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is not installed: run scripts/setup_system.sh")
        try:
            for server in self.servers:
                server.start()
            addresses = [f"127.0.0.1:{s.port}" for s in self.servers]
            subprocess.run(
                [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
                check=True,
                capture_output=True,
                timeout=self.timeout_s,
            )
            self._wait_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ok(self) -> None:
        """Until every node reports the cluster up with all 16384 slots served (slots propagate by gossip)."""
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            infos = []
            for server in self.servers:
                with redis.Redis(host="127.0.0.1", port=server.port) as client:
                    infos.append(client.cluster("INFO"))  # parsed into a dict
            if all(i["cluster_state"] == "ok" and int(i["cluster_slots_ok"]) == 16384 for i in infos):
                return
            time.sleep(0.1)
        raise RuntimeError(f"redis cluster {self.nodes} not ready after {self.timeout_s} s")

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
