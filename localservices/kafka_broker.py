"""A real single-node Apache Kafka broker (KRaft) for tests, the demo and CI.

Everything about fetching, configuring and running the broker lives in ``scripts/kafka.sh`` so that a shell,
CI and Python all start it the same way; this module only drives that script. The broker binds to 127.0.0.1
only, and its state (storage, ports, log) lives in ``data_dir``, so a restart resumes the same cluster.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

KAFKA_SH = Path(__file__).resolve().parents[1] / "scripts" / "kafka.sh"


class KafkaBrokerError(RuntimeError):
    """kafka.sh failed; the message carries its stderr, which ends with the tail of the broker log."""


class KafkaBroker:
    """Start, stop, crash and restart the broker whose storage is ``data_dir``.

    ``port`` pins the client port on first start; without it a free one is chosen. Either way the ports are
    stored in ``data_dir`` and reused by every later start, so clients can reconnect after a restart.
    """

    def __init__(self, data_dir: Path, port: int | None = None, sasl_users: str | None = None) -> None:
        """`sasl_users` ("user:password,...", the first the broker's own): clients must authenticate and
        ACLs decide (kafka.sh, GISTRANK_KAFKA_SASL_USERS); written on the first start only."""
        self.data_dir = Path(data_dir)
        self.port = port
        self.sasl_users = sasl_users

    @property
    def bootstrap_servers(self) -> str:
        """The address clients connect to; known once a port was pinned or the broker has been started."""
        if self.port is None:
            raise KafkaBrokerError("the broker has not been started yet, so its port is not known")
        return f"127.0.0.1:{self.port}"

    def start(self) -> str:
        """Start the broker (fetching the jars on first use) and return once it serves clients.

        Returns the bootstrap servers string. Starting a running broker is a no-op.
        """
        args = ["start", str(self.data_dir)]
        if self.port is not None:
            args.append(str(self.port))
        address = self._run(*args).splitlines()[-1]
        self.port = int(address.rsplit(":", 1)[1])
        return address

    def stop(self) -> None:
        """Shut down cleanly (SIGTERM; SIGKILL after the script's timeout). No-op if not running."""
        self._run("stop", str(self.data_dir))

    def kill(self, timeout_s: float = 10.0) -> None:
        """SIGKILL the broker, as a crash would, and wait until it is gone.

        Failure tests use this to check that un-committed work is redelivered after a restart. Waiting
        matters: until the process is gone its ports and storage lock are still held.
        """
        pid = self.running_pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout_s
        while self.running_pid() is not None:
            if time.monotonic() > deadline:
                raise KafkaBrokerError(f"broker pid {pid} still alive {timeout_s} s after SIGKILL")
            time.sleep(0.1)

    def restart(self) -> str:
        """Stop (if running) and start again on the same storage and ports; returns the bootstrap servers."""
        self.stop()
        return self.start()

    def running_pid(self) -> int | None:
        """The broker's PID if it is running, else None (the script checks the PID really is this broker)."""
        result = subprocess.run(
            [str(KAFKA_SH), "status", str(self.data_dir)], capture_output=True, text=True, check=False
        )
        if result.returncode == 3:
            return None
        if result.returncode != 0:
            raise KafkaBrokerError(f"kafka.sh status failed ({result.returncode}):\n{result.stderr}")
        # "running pid=<pid> bootstrap=127.0.0.1:<port>"
        return int(result.stdout.split()[1].removeprefix("pid="))

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self, *args: str) -> str:
        """Run kafka.sh and return its stdout; its stderr only matters when it fails."""
        env = os.environ | ({"GISTRANK_KAFKA_SASL_USERS": self.sasl_users} if self.sasl_users else {})
        result = subprocess.run([str(KAFKA_SH), *args], capture_output=True, text=True, check=False, env=env)
        if result.returncode != 0:
            command = " ".join(args)
            raise KafkaBrokerError(f"kafka.sh {command} failed ({result.returncode}):\n{result.stderr}")
        return result.stdout
