"""Real services for integration tests, each bound to 127.0.0.1 on a free port and stopped afterwards, and
the views of them tests take: a Kafka topic's offsets and group (`Probe`), a consumer process's log."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import KafkaError

from localservices.redis_server import RedisCluster, RedisServer
from reranker.catalog.kafka_settings import KafkaSettings
from reranker.serving.server import PROJECT_ROOT, free_port

__all__ = [
    "WAIT_S",
    "ConsumerProcess",
    "Probe",
    "RedisCluster",
    "RedisServer",
    "Serve",
    "feast_cluster_config",
    "free_port",
    "kafka_env",
    "redis_cluster",
    "redis_server",
]


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

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        code = "import typer; from reranker.serving.cli import serve; typer.run(serve)"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
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


# ------------------------------------------------------------------------------------ Kafka side
WAIT_S = 120.0  # generous: subprocess start (torch + feast imports) is slow on a busy 2-core machine


def kafka_env(settings: KafkaSettings) -> dict[str, str]:
    """The GISTRANK_KAFKA_* variables that make a subprocess's clients use `settings`' topics and group."""
    return {
        "GISTRANK_KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "GISTRANK_KAFKA_TOPIC": settings.topic,
        "GISTRANK_KAFKA_DLQ_TOPIC": settings.dlq_topic,
        "GISTRANK_KAFKA_SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
    } | ({"GISTRANK_KAFKA_GROUP_ID": settings.group_id} if settings.group_id else {})


class Probe:
    """Read-only view of a test's topics and group: end offsets, committed offsets, dead-letter records."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.admin = KafkaAdminClient(**settings.admin_kwargs())
        self.reader = KafkaConsumer(**settings.client_kwargs())

    def close(self) -> None:
        self.admin.close()
        self.reader.close()

    def _partitions(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in sorted(self.reader.partitions_for_topic(topic) or ())]

    def end_offsets(self) -> dict[TopicPartition, int]:
        return self.reader.end_offsets(self._partitions(self.settings.topic))

    def committed(self) -> dict[TopicPartition, int]:
        try:
            offsets = self.admin.list_group_offsets({self.settings.group_id: None})[self.settings.group_id]
        except KafkaError as exc:
            if exc.retriable:  # e.g. the group coordinator is still being set up: nothing committed yet
                return {}
            raise
        return {tp: meta.offset for tp, meta in offsets.items() if meta.offset >= 0}

    def stable_members(self) -> int:
        """Members of the test's group once it has settled (0 while it rebalances or is empty)."""
        try:
            group = self.admin.describe_groups([self.settings.group_id])[self.settings.group_id]
        except KafkaError as exc:
            if exc.retriable:  # e.g. the group coordinator is still being set up
                return 0
            raise
        return len(group["members"]) if group.get("group_state") == "Stable" else 0

    def caught_up(self) -> bool:
        committed = self.committed()
        return all(committed.get(tp, 0) == end for tp, end in self.end_offsets().items())

    def dead_letters(self) -> list[ConsumerRecord]:
        partitions = self._partitions(self.settings.dlq_topic)
        self.reader.assign(partitions)
        self.reader.seek_to_beginning(*partitions)
        end = self.reader.end_offsets(partitions)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + 30
        while any(self.reader.position(tp) < end[tp] for tp in partitions):
            assert time.monotonic() < deadline, "could not read the dead-letter topic"
            for batch in self.reader.poll(timeout_ms=500).values():
                records.extend(batch)
        return records  # one partition: in the order they were dead-lettered


class ConsumerProcess:
    """`python -m streaming.cli consume` as a real subprocess; its stderr (the log) is read as it comes."""

    def __init__(
        self,
        settings: KafkaSettings,
        checkpoint: Path | str,
        feast_dir: Path | None,
        metrics_port: int,
        feast_config: Path | None = None,
    ) -> None:
        env = (
            os.environ
            | kafka_env(settings)
            | {
                "GISTRANK_LOG_LEVEL": "DEBUG",  # each batch's offsets as it starts
                "PYTHONUNBUFFERED": "1",
            }
        )
        args = [sys.executable, "-m", "streaming.cli", "consume", "--model", str(checkpoint)]
        args += ["--feast-config", str(feast_config)] if feast_config else ["--feast-dir", str(feast_dir)]
        args += ["--bootstrap-servers", settings.bootstrap_servers]
        args += ["--batch-size", "8", "--compress-batch-size", "4", "--no-create-topics"]
        args += ["--metrics-port", str(metrics_port)]
        # A client that stopped consuming (kafka-python 3.0.12, see GistConsumer._check_membership)
        # rejoins well within a test's wait, while a kill's 6 s session timeout still runs its course.
        args += ["--rejoin-after-s", "10"]
        self.proc = subprocess.Popen(
            args, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        self._pump = threading.Thread(target=self._read_stderr, daemon=True)
        self._pump.start()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            self.log.append(line)
            self.lines.put(line)

    def wait_for_batches(self, count: int, timeout_s: float = WAIT_S) -> None:
        """Block until the consumer has logged `count` more committed batches."""
        deadline = time.monotonic() + timeout_s
        while count:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.proc.kill()
                raise AssertionError("consumer logged no batch in time:\n" + "".join(self.log)) from None
            count -= BATCH_LINE.search(line) is not None

    def freeze_inside_batch(self, timeout_s: float = WAIT_S) -> dict[str, list[int]]:
        """SIGSTOP the process as soon as a batch has started and before it commits; return that batch's
        offsets per partition ("topic[p]" → [first, last]). A batch that commits before the stop lands
        (the log shows it) is let go (SIGCONT), and the next one is caught."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            started = PROCESSING_LINE.search(line)
            if started is None:
                continue
            os.kill(self.proc.pid, signal.SIGSTOP)
            time.sleep(0.5)  # what it wrote before the stop reaches the log
            later = []
            while not self.lines.empty():
                later.append(self.lines.get())
            if any(BATCH_LINE.search(x) for x in later):
                os.kill(self.proc.pid, signal.SIGCONT)
                continue
            return json.loads(started.group(1))
        raise AssertionError("no batch caught before its commit:\n" + "".join(self.log))

    def processed_spans(self) -> list[dict[str, list[int]]]:
        """The offsets of every batch this process started, in order."""
        return [json.loads(m.group(1)) for line in self.log if (m := PROCESSING_LINE.search(line))]

    def finish(self, sig: signal.Signals, timeout_s: float = 60) -> tuple[int, str]:
        """Send `sig`, wait for the exit; returns the exit status and stdout (the log stays in .log)."""
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=timeout_s)
        self._pump.join(timeout=10)  # the rest of the log
        assert self.proc.stdout is not None
        return rc, self.proc.stdout.read().decode()  # a line or two: it cannot have filled the pipe

    def committed_records(self) -> int:
        """Records in the batches this process logged as committed."""
        return sum(int(m.group(1)) for line in self.log if (m := BATCH_LINE.search(line)))


BATCH_LINE = re.compile(r"streaming\.consumer: batch of (\d+) records")
PROCESSING_LINE = re.compile(r"streaming\.consumer: processing \d+ records: offsets (\{.*\})")
