"""A chaos soak of the data path that anyone can run: `gistrank soak`.

Everything is real and started here: a Kafka broker (scripts/kafka.sh), the catalog (SQLite), the Feast
store (SQLite, fenced writes), N `gistrank consume` processes of one model (a tiny random one: the soak
tests the data path, not ranking), and an in-process serving replica that reads the store as Triton's
would. A stream of catalog changes — updates, deletes, re-creations and bursts of updates on one item —
is written to the catalog and published, while the soak

* kills consumer processes with SIGKILL (each restarted at once),
* kills the broker with SIGKILL and starts it again,
* starts one more consumer mid-stream (a rebalance),
* runs `gistrank rollout gc` with another model's view (covering the catalog) as live, which must refuse
  the view being served.

Then it waits until the group has committed every record, stops the consumers (SIGTERM), and compares
every item of the catalog with the store: a live item whose row is missing is *lost*, one at another
version or content *stale*, a deleted item that still reads back *resurrected*. Every event is one the
catalog backs, so any dead letter is an error too.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from localservices.kafka_broker import KafkaBroker
from reranker.catalog.database import Catalog
from reranker.catalog.events import ChangeEvent
from reranker.catalog.kafka_settings import KafkaSettings, ensure_topics, group_progress, records_in
from reranker.catalog.publisher import EventPublisher, PublishError
from reranker.store import GistRow, GistStore

if TYPE_CHECKING:
    from reranker.core.model import Reranker

WORDS = [
    "steel",
    "phone",
    "kettle",
    "cable",
    "charger",
    "lamp",
    "desk",
    "chair",
    "blue",
    "red",
    "black",
    "65W",
    "1.7L",
    "256GB",
    "usb-c",
]


GC_LIVE = "f" * 32  # the model the gc attempt keeps: its view is registered at the start


@dataclass(frozen=True)
class SoakConfig:
    events: int = 10_000  # catalog changes written and published
    items: int = 300  # distinct item ids they touch
    consumers: int = 3  # consumer processes at the start (one more joins mid-stream)
    partitions: int = 6
    consumer_kills: int = 6
    broker_kills: int = 2
    produce_s: float = 180.0  # the changes are spread over this long, so the faults land mid-stream
    drain_timeout_s: float = 600.0
    seed: int = 0


@dataclass
class SoakReport:
    events: int = 0
    upserts: int = 0
    deletes: int = 0
    consumer_kills: int = 0
    broker_kills: int = 0
    consumers_joined: int = 0
    gc_refused: bool = False
    served_reads: int = 0
    dead_letters: int = 0
    items: int = 0
    live: int = 0
    lost: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    resurrected: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.gc_refused and not (self.dead_letters or self.lost or self.stale or self.resurrected)


class _Consumers:
    """`python -m streaming.cli consume` processes of the soak's model, each logging to its own file."""

    def __init__(self, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.args, self.env, self.logs = args, env, logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        log = open(self.logs / f"consumer-{len(self.procs)}.log", "wb")  # noqa: SIM115 - the process owns it
        self.procs.append(subprocess.Popen(self.args, env=self.env, stdout=log, stderr=subprocess.STDOUT))

    def kill_one(self, rng: random.Random) -> None:
        """SIGKILL a running consumer and start a new one in its place."""
        alive = [p for p in self.procs if p.poll() is None]
        victim = rng.choice(alive)
        victim.kill()
        victim.wait()
        self.start()

    def revive(self) -> int:
        """Start a replacement for each consumer that exited on its own; returns how many."""
        dead = [p for p in self.procs if p.poll() is not None and p.returncode != -signal.SIGKILL]
        for proc in dead:
            self.procs.remove(proc)
            self.start()
        return len(dead)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class _Rig:
    """What the change stream and its faults act on: the soak's broker, consumers and model, its seeded
    randomness, its report and its progress line."""

    config: SoakConfig
    settings: KafkaSettings
    broker: KafkaBroker
    consumers: _Consumers
    model: Reranker
    workdir: Path
    rng: random.Random
    report: SoakReport
    say: Callable[[str], None]


def run_soak(config: SoakConfig, workdir: Path, say: Callable[[str], None] = print) -> SoakReport:
    """Run the soak in `workdir` (emptied first); see the module docstring."""
    from reranker.core.config import RerankerConfig
    from reranker.core.model import Reranker
    from reranker.core.tiny_base import build_tiny_base

    started = time.monotonic()
    report = SoakReport()
    shutil.rmtree(workdir, ignore_errors=True)
    (workdir / "logs").mkdir(parents=True)
    rng = random.Random(config.seed)
    base = build_tiny_base(workdir / "tiny-base")
    model = Reranker.from_pretrained(
        base, RerankerConfig(num_gist=2, max_item_tokens=48, dtype="float32"), device="cpu"
    )
    checkpoint = model.save_pretrained(workdir / "model")
    catalog_url = f"sqlite:///{workdir / 'catalog.db'}"
    broker = KafkaBroker(workdir / "kafka")
    settings = KafkaSettings(bootstrap_servers=broker.start(), session_timeout_ms=6000)
    ensure_topics(settings, config.partitions)
    store = GistStore(workdir / "feast", fingerprint=model.fingerprint)
    store.apply()  # before the consumers race to create the registry
    store.for_model(GC_LIVE).apply()  # and before they read it: Feast rewrites the registry in place
    say(f"broker {settings.bootstrap_servers}, model {model.fingerprint}, workdir {workdir}")
    env = os.environ | {
        "GISTRANK_KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "GISTRANK_KAFKA_SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
    }
    consume = [sys.executable, "-m", "streaming.cli", "consume", "--model", str(checkpoint)]
    consume += ["--feast-dir", str(workdir / "feast"), "--catalog-url", catalog_url, "--no-create-topics"]
    consume += ["--batch-size", "32", "--compress-batch-size", "16"]
    consumers = _Consumers(consume, env, workdir / "logs")
    rig = _Rig(config, settings, broker, consumers, model, workdir, rng, report, say)
    stop_reading = threading.Event()
    try:
        for _ in range(config.consumers):
            consumers.start()
        with Catalog(catalog_url) as catalog:
            reader = threading.Thread(
                target=_serve_reads,
                args=(model, catalog_url, store, config, stop_reading, report),
                daemon=True,
            )
            reader.start()
            _produce(rig, catalog)
            say(f"published {report.events} changes; waiting for the consumers to commit them all")
            _drain(settings, settings.group_for(model.fingerprint), consumers, config.drain_timeout_s)
            consumers.stop()
            stop_reading.set()
            reader.join(timeout=30)
            _compare(catalog, store, report)
        report.dead_letters = records_in(settings, settings.dlq_topic)
    finally:
        stop_reading.set()
        consumers.stop()
        broker.stop()
    report.seconds = time.monotonic() - started
    return report


def _produce(rig: _Rig, catalog: Catalog) -> None:
    """Write the changes to the catalog and publish them, paced over `produce_s`; the faults fire at
    evenly spread points of the stream."""
    config, settings, rng, report = rig.config, rig.settings, rig.rng, rig.report
    n = config.events
    faults: dict[int, str] = {}
    for k in range(config.consumer_kills):
        faults[n * (k + 1) // (config.consumer_kills + 1)] = "kill consumer"
    for k in range(config.broker_kills):
        faults[n * (2 * k + 1) // (2 * config.broker_kills) + 1] = "kill broker"
    faults[n // 2 + 2] = "join consumer"
    faults[n * 3 // 5 + 3] = "gc"
    live: set[str] = set()
    burst_item, burst_left = "", 0
    pending: list[ChangeEvent] = []  # sent since the last acknowledged flush: resent if that fails
    publisher = EventPublisher(settings)
    try:
        for i in range(n):
            if burst_left:
                item_id, burst_left = burst_item, burst_left - 1
            else:
                item_id = f"soak-{rng.randrange(config.items):04d}"
                if rng.random() < 0.02:  # a burst: the next 10-30 changes all hit this item
                    burst_item, burst_left = item_id, rng.randint(10, 30)
            if item_id in live and rng.random() < 0.1:
                event = catalog.delete(item_id)
                live.discard(item_id)
                report.deletes += 1
            else:
                text = " ".join(rng.choices(WORDS, k=rng.randint(3, 25)))
                event = catalog.upsert(item_id, f"{item_id} rev {i}", {"n": i % 7}, text)
                live.add(item_id)
                report.upserts += 1
            pending.append(event)
            publisher.send(event)
            report.events += 1
            if i % 50 == 49 or i == n - 1:
                publisher = _flush(publisher, settings, pending)
                time.sleep(config.produce_s * 50 / n)
            fault = faults.get(i)
            if fault is not None:
                publisher = _flush(publisher, settings, pending)
                rig.say(f"{i + 1}/{n} changes: {fault}")
                _fault(rig, fault, catalog)
    finally:
        publisher.close()


def _flush(publisher: EventPublisher, settings: KafkaSettings, pending: list[ChangeEvent]) -> EventPublisher:
    """Flush; on failure (the broker is down) resend every unacknowledged event on a new producer until
    it is acknowledged (duplicates are harmless: the version rules)."""
    while True:
        try:
            publisher.flush()
            pending.clear()
            return publisher
        except PublishError:
            publisher.close()
            time.sleep(1.0)
            publisher = EventPublisher(settings)
            for event in pending:
                publisher.send(event)


def _fault(rig: _Rig, fault: str, catalog: Catalog) -> None:
    report = rig.report
    if fault == "kill consumer":
        rig.consumers.kill_one(rig.rng)
        report.consumer_kills += 1
    elif fault == "kill broker":
        rig.broker.kill()
        time.sleep(2.0)
        rig.broker.start()
        report.broker_kills += 1
    elif fault == "join consumer":
        rig.consumers.start()
        report.consumers_joined += 1
    elif fault == "gc":
        # another model's finished backfill declared live (gc keeps only a view that covers the catalog,
        # which stands still while this thread runs): the soak's own view is being served, so gc must
        # refuse to drop it
        other = GistStore(rig.workdir / "feast", fingerprint=GC_LIVE)
        items = [(item.item_id, item.version) for item in catalog.iter_items()]
        other.write([GistRow(i, b"kv", GC_LIVE, 0, 0, "soak", version) for i, version in items])
        gc = [sys.executable, "-m", "streaming.cli", "rollout", "gc", "--fingerprint", GC_LIVE]
        gc += ["--feast-dir", str(rig.workdir / "feast"), "--catalog-url", str(catalog.engine.url)]
        result = subprocess.run(gc, capture_output=True, text=True, check=False)
        report.gc_refused = result.returncode == 1 and f"refuse {rig.model.fingerprint}" in result.stdout


def _serve_reads(
    model: Reranker,
    catalog_url: str,
    store: GistStore,
    config: SoakConfig,
    stop: threading.Event,
    report: SoakReport,
) -> None:
    """A serving replica's reads, as Triton's model does them (`KVLookup`), a few candidates at a time."""
    from reranker.serving.lookup import ByteLRU, KVLookup

    rng = random.Random(config.seed + 1)
    with Catalog(catalog_url) as catalog:
        lookup = KVLookup(model, ByteLRU(16 * 1024 * 1024, ttl_s=5.0), catalog, store)
        while not stop.wait(0.5):
            lookup.fetch([f"soak-{rng.randrange(config.items):04d}" for _ in range(8)])
            report.served_reads += 8


def _drain(settings: KafkaSettings, group: str, consumers: _Consumers, timeout_s: float) -> None:
    """Wait until `group` has committed every record of the change topic, reviving crashed consumers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        consumers.revive()
        committed, end = group_progress(settings, group)
        if committed >= end:
            return
        time.sleep(1.0)
    raise TimeoutError(f"the consumers did not commit every record within {timeout_s:.0f} s")


def _compare(catalog: Catalog, store: GistStore, report: SoakReport) -> None:
    """Every catalog item, live or deleted, against its row in the store."""
    states = catalog.states(event.item_id for event in catalog.events())  # deleted items too
    rows = store.read(list(states))
    report.items = len(states)
    for item_id, state in sorted(states.items()):
        row = rows[item_id]
        if state.deleted:
            if row is not None:
                report.resurrected.append(item_id)
            continue
        report.live += 1
        if row is None:
            report.lost.append(item_id)
        elif (row.version, row.content_hash) != (state.version, state.content_hash):
            report.stale.append(item_id)
