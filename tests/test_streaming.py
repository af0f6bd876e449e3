"""Kafka → gist K/V → Feast, end to end: a real broker (scripts/kafka.sh), a real Feast SQLite store, the tiny
model. Each test gets its own topics and consumer group on the module's broker, so tests stay independent.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import metric, wait_until
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.consumer.fetcher import ConsumerRecord
from kafka.structs import ConsumerGroupMetadata, MemberState
from services import WAIT_S, ConsumerProcess, Probe, RedisServer, free_port, kafka_env
from typer.testing import CliRunner

from localservices.kafka_broker import KafkaBroker
from reranker import Reranker, RerankerConfig
from reranker.catalog.database import Catalog
from reranker.catalog.events import ChangeEvent, ItemFields, encode_event
from reranker.catalog.kafka_settings import DLQ_MAX_MESSAGE_BYTES, KafkaSettings, ensure_topics
from reranker.catalog.publisher import EventPublisher, publish_catalog, publish_events
from reranker.core import kv_codec
from reranker.core.render import content_hash, render_item
from reranker.serving.lookup import ByteLRU, KVLookup, RefreshRequests
from reranker.store import GistStore
from streaming.cli import main as cli_app
from streaming.consumer import DeadLetter, GistConsumer, dead_letter_value, payload_bytes
from streaming.materialize import compress_rows

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CATALOG = REPO / "reranker" / "catalog" / "data" / "sample_catalog.jsonl"


# ------------------------------------------------------------------------------------------------ helpers
def fields(title: str, description: str = "", **attributes: Any) -> ItemFields:
    return ItemFields(title=title, attributes=attributes, description=description)


def upsert(item_id: str, version: int, item: ItemFields) -> ChangeEvent:
    return ChangeEvent(
        op="upsert", item_id=item_id, version=version, timestamp=datetime.now(UTC), fields=item
    )


def delete(item_id: str, version: int) -> ChangeEvent:
    return ChangeEvent(op="delete", item_id=item_id, version=version, timestamp=datetime.now(UTC))


def assert_row_is_direct_compress(
    store: GistStore, model: Reranker, item_id: str, item: ItemFields, version: int
):
    """The online row decodes to exactly what compressing the item directly gives (fp32 tiny model)."""
    row = store.read([item_id])[item_id]
    assert row is not None, f"{item_id} missing from the online store"
    assert row.version == version, f"{item_id}: stored version {row.version}, expected {version}"
    digest = content_hash(item.title, item.attributes, item.description)
    decoded = kv_codec.decode(row.kv, expected_fingerprint=model.fingerprint)
    expected = model.compress([render_item(item.title, item.attributes, item.description)])[0]
    assert (row.content_hash, decoded.content_hash, row.fingerprint) == (digest, digest, model.fingerprint)
    assert (row.item_tokens, row.num_gist) == (expected.item_tokens, expected.tail_slots)
    # Batch composition changes padding, so allow float noise, nothing more.
    torch.testing.assert_close(decoded.kv.kv, expected.kv, rtol=1e-4, atol=1e-5)


class Running:
    """`GistConsumer.run` in a background thread, as the CLI runs it in the main one."""

    def __init__(self, consumer: GistConsumer) -> None:
        self.stop_event = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(consumer,), daemon=True)
        self.thread.start()

    def _run(self, consumer: GistConsumer) -> None:
        try:
            consumer.run(self.stop_event)
        except BaseException as exc:
            self.errors.append(exc)

    def stop(self) -> None:
        """Request a stop, wait for it, and re-raise what the consumer raised, if anything."""
        self.stop_event.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "consumer did not stop"
        if self.errors:
            raise self.errors[0]


def consume_all(
    probe: Probe, model: Reranker, store: GistStore, timeout_s: float = 90, **kwargs: Any
) -> None:
    """Run an in-process GistConsumer until its group has committed everything in the change topic."""
    running = Running(GistConsumer(probe.settings, model, store, poll_timeout_s=0.2, **kwargs))
    try:
        wait_until(
            lambda: running.errors or probe.caught_up(), timeout_s, "the consumer to commit every record"
        )
    finally:
        running.stop()


def cli(args: list[str], settings: KafkaSettings) -> str:
    result = CliRunner().invoke(cli_app, [*args], env=kafka_env(settings), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


# ----------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def checkpoint(tiny_model: Reranker, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model as a checkpoint folder, for CLI runs and subprocess consumers."""
    return tiny_model.save_pretrained(tmp_path_factory.mktemp("tiny_checkpoint"))


@pytest.fixture
def settings(broker: KafkaBroker, request: pytest.FixtureRequest) -> KafkaSettings:
    name = f"{re.sub(r'[^a-zA-Z0-9]+', '-', request.node.name)[:60]}-{uuid.uuid4().hex[:6]}"
    config = KafkaSettings(
        bootstrap_servers=broker.bootstrap_servers,
        topic=f"{name}.changes",
        dlq_topic=f"{name}.dlq",
        group_id=f"{name}.writer",
        session_timeout_ms=6000,  # a killed consumer's partitions move on after 6 s, not 45
    )
    ensure_topics(config, partitions=2)
    return config


@pytest.fixture
def probe(settings: KafkaSettings) -> Iterator[Probe]:
    view = Probe(settings)
    yield view
    view.close()


@pytest.fixture
def store(tmp_path: Path, tiny_model: Reranker) -> GistStore:
    gist_store = GistStore(tmp_path / "feast", fingerprint=tiny_model.fingerprint)
    gist_store.apply()
    return gist_store


@pytest.fixture
def catalog_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'catalog.db'}"


# -------------------------------------------------------------------------------------------------- tests
def test_settings_from_env_build_client_kwargs() -> None:
    env = {
        "GISTRANK_KAFKA_BOOTSTRAP_SERVERS": "b1:9093, b2:9093",
        "GISTRANK_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "GISTRANK_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "GISTRANK_KAFKA_SASL_USERNAME": "writer",
        "GISTRANK_KAFKA_SASL_PASSWORD": "s3cret",
        "GISTRANK_KAFKA_SSL_CAFILE": "/etc/ca.pem",
        "GISTRANK_KAFKA_TOPIC": "changes",
        "GISTRANK_KAFKA_DLQ_TOPIC": "changes.dlq",
        "GISTRANK_KAFKA_GROUP_ID": "writers",
    }
    config = KafkaSettings.from_env(env, bootstrap_servers=None)
    assert "s3cret" not in repr(config)
    consumer = config.consumer_kwargs(config.group_for("f" * 32))
    assert consumer["bootstrap_servers"] == ["b1:9093", "b2:9093"]
    assert consumer["sasl_plain_password"] == "s3cret" and consumer["ssl_cafile"] == "/etc/ca.pem"
    assert (consumer["group_id"], consumer["enable_auto_commit"]) == ("writers", False)
    producer = config.producer_kwargs()
    assert (producer["acks"], producer["enable_idempotence"]) == ("all", True)
    assert set(consumer) <= set(KafkaConsumer.DEFAULT_CONFIG) and set(producer) <= set(
        KafkaProducer.DEFAULT_CONFIG
    )
    assert KafkaSettings.from_env(env, bootstrap_servers="x:1").servers == ["x:1"]
    assert KafkaSettings().group_for("ab12") == "gistrank-gist-writer-ab12"  # unset: one group per model
    with pytest.raises(ValueError, match="needs sasl_mechanism"):
        KafkaSettings.from_env({"GISTRANK_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"})
    with pytest.raises(ValueError, match="must differ"):
        KafkaSettings(topic="t", dlq_topic="t")


def test_ensure_topics_is_idempotent(settings: KafkaSettings, probe: Probe) -> None:
    ensure_topics(settings, partitions=5)  # exists already with 2: left alone, no error
    assert len(probe.end_offsets()) == 2
    configs = probe.admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, settings.dlq_topic)])
    assert configs["topic"][settings.dlq_topic]["max.message.bytes"]["value"] == str(DLQ_MAX_MESSAGE_BYTES)


def test_publish_consume_equals_direct_compress(
    settings: KafkaSettings, probe: Probe, store: GistStore, tiny_model: Reranker, catalog_url: str
) -> None:
    assert "16 items" in cli(["catalog", "load", str(SAMPLE_CATALOG), "--catalog-url", catalog_url], settings)
    out = cli(
        ["publish", "--catalog-url", catalog_url, "--bootstrap-servers", settings.bootstrap_servers], settings
    )
    assert "published 16 events" in out
    compressed = metric("gistrank_consumer_items_compressed_total")
    consume_all(probe, tiny_model, store, batch_size=5, compress_batch_size=3)
    assert metric("gistrank_consumer_items_compressed_total") - compressed == 16

    with Catalog(catalog_url) as catalog:
        items = {item.item_id: item for item in catalog.iter_items()}
    for item_id, item in items.items():
        assert_row_is_direct_compress(store, tiny_model, item_id, item.fields(), item.version)

    # At-least-once redelivery of everything: nothing recompressed, nothing changed.
    before = store.read(list(items))
    stale = metric("gistrank_consumer_events_skipped_total", reason="stale")
    cli(
        ["publish", "--catalog-url", catalog_url, "--bootstrap-servers", settings.bootstrap_servers], settings
    )
    consume_all(probe, tiny_model, store)
    assert metric("gistrank_consumer_items_compressed_total") - compressed == 16
    assert metric("gistrank_consumer_events_skipped_total", reason="stale") - stale == 16
    assert store.read(list(items)) == before


def test_catalog_update_and_delete_reach_the_store(
    settings: KafkaSettings, probe: Probe, store: GistStore, tiny_model: Reranker, catalog_url: str
) -> None:
    servers = ["--catalog-url", catalog_url, "--bootstrap-servers", settings.bootstrap_servers]
    cli(["catalog", "load", str(SAMPLE_CATALOG), *servers[:2]], settings)
    cli(["publish", *servers], settings)
    consume_all(probe, tiny_model, store)
    with Catalog(catalog_url) as catalog:
        changed, renamed, dropped = [item.item_id for item in catalog.iter_items()][:3]
        old = catalog.get([changed, renamed])
        old_changed, old_renamed = old[changed], old[renamed]

    assert "upsert" in cli(["catalog", "update", changed, "--attr", "storage=512GB", *servers], settings)
    # Extra spaces render to the same text: a new version, but no recompression.
    spaced = "  " + old_renamed.title.replace(" ", "   ") + " "
    cli(["catalog", "update", renamed, "--title", spaced, *servers], settings)
    assert "delete" in cli(["catalog", "update", dropped, "--delete", *servers], settings)
    unchanged = metric("gistrank_consumer_events_skipped_total", reason="unchanged")
    consume_all(probe, tiny_model, store)

    with Catalog(catalog_url) as catalog:
        now = catalog.get([changed, renamed])
    assert now[changed].attributes == old_changed.attributes | {"storage": "512GB"}  # --attr merges
    assert_row_is_direct_compress(store, tiny_model, changed, now[changed].fields(), now[changed].version)
    renamed_row = store.read([renamed])[renamed]
    assert renamed_row is not None and renamed_row.version == now[renamed].version > old_renamed.version
    assert renamed_row.content_hash == old_renamed.content_hash
    assert metric("gistrank_consumer_events_skipped_total", reason="unchanged") - unchanged == 1
    assert store.read([dropped]) == {dropped: None}

    # An upsert older than the delete (a replayed file) never resurrects the item.
    publish_events(settings, [upsert(dropped, 1, fields("resurrected?"))])
    consume_all(probe, tiny_model, store)
    assert store.read([dropped]) == {dropped: None}


def test_older_version_never_wins(
    settings: KafkaSettings, probe: Probe, store: GistStore, tiny_model: Reranker, tmp_path: Path
) -> None:
    a5, a3, a4 = fields("A five", "fifth"), fields("A three", "third"), fields("A four", "fourth")
    b2, b4 = fields("B two"), fields("B four", size="XL")
    events_file = tmp_path / "events.jsonl"
    # Within one batch: A's v3 after v5, B's v2 before v4.
    events = [upsert("A", 5, a5), upsert("A", 3, a3), upsert("B", 2, b2), upsert("B", 4, b4)]
    events_file.write_bytes(b"".join(encode_event(e)[1] + b"\n" for e in events))
    servers = ["--bootstrap-servers", settings.bootstrap_servers]
    assert "published 4 events" in cli(["publish", "--file", str(events_file), *servers], settings)
    superseded = metric("gistrank_consumer_events_skipped_total", reason="superseded")
    consume_all(probe, tiny_model, store, batch_size=10)
    assert_row_is_direct_compress(store, tiny_model, "A", a5, 5)
    assert_row_is_direct_compress(store, tiny_model, "B", b4, 4)
    # Each item's two events share a partition and a producer batch, hence one poll: A3 and B2 coalesced away.
    assert metric("gistrank_consumer_events_skipped_total", reason="superseded") - superseded == 2

    # In a later batch: older versions arrive after the newer ones were stored.
    stale = metric("gistrank_consumer_events_skipped_total", reason="stale")
    publish_events(settings, [upsert("A", 4, a4), delete("B", 3)])
    consume_all(probe, tiny_model, store)
    assert_row_is_direct_compress(store, tiny_model, "A", a5, 5)
    assert_row_is_direct_compress(store, tiny_model, "B", b4, 4)
    assert metric("gistrank_consumer_events_skipped_total", reason="stale") - stale == 2


def test_publish_file_with_a_bad_line_publishes_nothing(
    settings: KafkaSettings, probe: Probe, tmp_path: Path
):
    good = encode_event(upsert("A", 1, fields("A")))[1]
    path = tmp_path / "events.jsonl"
    path.write_bytes(good + b"\n" + b'{"op": "upsert", "item_id": "B"}\n')
    result = CliRunner().invoke(
        cli_app,
        ["publish", "--file", str(path), "--bootstrap-servers", settings.bootstrap_servers],
        env={"GISTRANK_KAFKA_TOPIC": settings.topic, "GISTRANK_KAFKA_DLQ_TOPIC": settings.dlq_topic},
    )
    assert result.exit_code != 0 and "line 2" in result.output
    assert sum(probe.end_offsets().values()) == 0


def test_poison_events_are_dead_lettered_and_the_rest_processed(
    settings: KafkaSettings, probe: Probe, store: GistStore, tiny_model: Reranker
) -> None:
    def event_json(**overrides: Any) -> bytes:
        body = json.loads(encode_event(upsert("p", 1, fields("poison")))[1]) | overrides
        return json.dumps({k: v for k, v in body.items() if v is not None}).encode()

    ok1, ok2 = fields("first good item", "before the poison"), fields("second good item", "after it")
    huge_description = {"title": "t", "attributes": {}, "description": "x" * 70_000}
    poison: list[tuple[bytes | None, bytes | None, str]] = [
        (b"p", b"{not json", "invalid_json"),
        (b"p", b"[1, 2]", "invalid_json"),  # JSON, but not an object
        (b"p", event_json(version=None, fields=None), "schema"),  # missing fields
        (b"p", event_json(op="merge"), "schema"),  # unknown op
        (b"p", event_json(fields=huge_description), "schema"),  # text over the description limit
        (b"p", event_json(fields={**huge_description, "description": "y" * 600_000}), "oversized"),
        (b"p", event_json(version="7"), "schema"),  # wrong type
        (b"p", event_json(fields={"title": 5, "attributes": [], "description": None}), "schema"),
        (b"p", b"\xff\xfe\x00binary", "invalid_utf8"),
        (b"p", None, "tombstone"),
        (b"other", event_json(), "bad_key"),
        (None, event_json(), "bad_key"),
    ]
    before = {
        code: metric("gistrank_consumer_events_dead_lettered_total", reason=code) for _, _, code in poison
    }
    producer = KafkaProducer(**settings.producer_kwargs())
    records = [(b"ok1", encode_event(upsert("ok1", 1, ok1))[1])] + [(k, v) for k, v, _ in poison]
    records.append((b"ok2", encode_event(upsert("ok2", 2, ok2))[1]))
    # One partition, so source offsets follow the send order.
    sent = [
        producer.send(settings.topic, key=k, value=v, partition=0, headers=[("h", b"\x00\xff")])
        for k, v in records
    ]
    producer.flush()
    producer.close()
    offsets = [future.get(timeout=10).offset for future in sent]

    consume_all(probe, tiny_model, store, batch_size=4)
    assert_row_is_direct_compress(store, tiny_model, "ok1", ok1, 1)
    assert_row_is_direct_compress(store, tiny_model, "ok2", ok2, 2)
    assert store.read(["p"]) == {"p": None}

    letters = probe.dead_letters()
    assert len(letters) == len(poison)
    for letter, (key, value, code), offset in zip(letters, poison, offsets[1:-1], strict=True):
        body = json.loads(letter.value)
        assert body["reason_code"] == code and body["reason"], body["reason"]
        assert body["source"] == {
            "topic": settings.topic,
            "partition": 0,
            "offset": offset,
            "timestamp_ms": body["source"]["timestamp_ms"],
        }
        assert letter.key == key
        for original, payload in ((key, body["key"]), (value, body["value"])):
            assert payload_bytes(payload) == original  # lossless, UTF-8 or not
        assert [name for name, _ in body["headers"]] == ["h"] and payload_bytes(
            body["headers"][0][1]
        ) == b"\x00\xff"
    binary = json.loads(letters[8].value)["value"]
    assert binary["encoding"] == "base64" and "utf8_error" in binary
    for code in {code for _, _, code in poison}:
        expected = sum(1 for _, _, c in poison if c == code)
        assert metric("gistrank_consumer_events_dead_lettered_total", reason=code) - before[code] == expected


@pytest.mark.chaos
def test_events_the_catalog_does_not_back_are_dead_lettered(
    settings: KafkaSettings, probe: Probe, store: GistStore, tiny_model: Reranker, catalog_url: str
) -> None:
    """Given the catalog, the consumer writes only what the catalog backs: a forged event with a huge
    version, another text at the catalog's version, an unknown item or a delete of a live item goes to
    the dead-letter topic with its reason, and the catalog's own events land."""
    with Catalog(catalog_url) as catalog:
        real = [catalog.upsert(i, f"item {i}", {"n": i}, f"the real text of {i}") for i in "abcd"]
        real.append(catalog.delete("d"))
    a, b, c = real[:3]
    forged = [
        (upsert("a", a.version + 10**9, fields("pinned", "any text")), "ahead_of_catalog"),
        (upsert("b", b.version, fields("item b", "other text at the catalog's version")), "catalog_mismatch"),
        (delete("c", c.version), "catalog_mismatch"),  # the catalog holds c live at that version
        (upsert("ghost", 1, fields("not in the catalog")), "not_in_catalog"),
    ]
    assert publish_events(settings, [event for event, _ in forged] + real) == len(forged) + len(real)
    with Catalog(catalog_url) as catalog:
        consume_all(probe, tiny_model, store, catalog=catalog)
    for event in (a, b, c):
        assert event.fields is not None
        assert_row_is_direct_compress(store, tiny_model, event.item_id, event.fields, event.version)
    assert store.read(["d", "ghost"]) == {"d": None, "ghost": None}
    letters = [json.loads(letter.value) for letter in probe.dead_letters()]
    assert sorted((body["reason_code"], body["key"]["data"]) for body in letters) == sorted(
        (code, event.item_id) for event, code in forged
    )
    assert any(f"is ahead of the catalog's {a.version}" in body["reason"] for body in letters)


@pytest.mark.chaos
def test_running_out_of_memory_is_retried_not_dead_lettered_and_the_lag_stays_visible(
    settings: KafkaSettings,
    probe: Probe,
    store: GistStore,
    tiny_model: Reranker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An out-of-memory error says nothing about the item: the batch is rewound and retried with back-off
    (counted), the lag gauge shows the waiting backlog meanwhile, and once memory is back every item lands;
    nothing is dead-lettered."""
    import streaming.consumer as consumer_module

    memory_back = threading.Event()
    compress = consumer_module.compress_rows

    def out_of_memory_until_released(*args: Any, **kwargs: Any) -> Any:
        if not memory_back.is_set():
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return compress(*args, **kwargs)

    monkeypatch.setattr(consumer_module, "compress_rows", out_of_memory_until_released)
    items = {f"item-{n}": fields(f"item {n}", "text " * n) for n in range(6)}
    assert publish_events(settings, [upsert(i, 1, item) for i, item in items.items()]) == 6
    retries = metric("gistrank_consumer_batch_retries_total")
    running = Running(GistConsumer(settings, tiny_model, store, poll_timeout_s=0.2, max_backoff_s=0.5))
    try:

        def backlog() -> float:
            lag = "gistrank_consumer_lag_records"
            return sum(metric(lag, topic=settings.topic, partition=str(p)) for p in (0, 1))

        wait_until(
            lambda: metric("gistrank_consumer_batch_retries_total") >= retries + 3 and backlog() == 6,
            WAIT_S,
            "the failing batch to be retried with its backlog in the lag gauge",
        )
        assert not probe.committed()
        memory_back.set()
        wait_until(lambda: running.errors or probe.caught_up(), WAIT_S, "the consumer to commit every record")
    finally:
        running.stop()
    for item_id, item in items.items():
        assert_row_is_direct_compress(store, tiny_model, item_id, item, 1)
    assert probe.dead_letters() == []


@pytest.mark.chaos
def test_dead_letters_are_replayed_by_reason_once_their_cause_is_gone(
    settings: KafkaSettings, probe: Probe, store: GistStore, tiny_model: Reranker, catalog_url: str
) -> None:
    """An event that reached the topic before its item reached the (lagging) catalog is dead-lettered as
    not_in_catalog; once the catalog has it, `dlq replay --reason not_in_catalog --apply` sends it back
    and it lands. A dry run counts without sending; letters of other reasons stay where they are."""
    late = fields("late item", "published before the catalog replica had it", colour="red")
    producer = KafkaProducer(**settings.producer_kwargs())
    producer.send(settings.topic, key=b"bad", value=b"{not json", headers=[("trace", b"\x00\x01")])
    producer.close()
    assert publish_events(settings, [upsert("late", 1, late)]) == 1
    with Catalog(catalog_url) as catalog:
        consume_all(probe, tiny_model, store, catalog=catalog)
        assert store.read(["late"]) == {"late": None}
        assert catalog.upsert("late", late.title, late.attributes, late.description).version == 1

        sent = sum(probe.end_offsets().values())
        out = cli(["dlq", "replay"], settings)
        assert "read 2 letters" in out and "matching: invalid_json 1, not_in_catalog 1" in out, out
        assert "dry run" in out and sum(probe.end_offsets().values()) == sent  # nothing sent
        out = cli(["dlq", "replay", "--reason", "not_in_catalog", "--apply"], settings)
        assert "matching: not_in_catalog 1" in out and f"replayed 1 to {settings.topic}" in out, out
        assert sum(probe.end_offsets().values()) == sent + 1
        consume_all(probe, tiny_model, store, catalog=catalog)
    assert_row_is_direct_compress(store, tiny_model, "late", late, 1)
    assert [json.loads(letter.value)["reason_code"] for letter in probe.dead_letters()] == [
        "invalid_json",
        "not_in_catalog",
    ]  # the replay was accepted: no new letter
    out = cli(["dlq", "replay", "--since-offset", "2"], settings)
    assert "read 0 letters" in out, out


@pytest.mark.chaos
def test_a_catalog_restored_from_backup_is_reconciled_and_its_later_changes_land(
    settings: KafkaSettings, probe: Probe, store: GistStore, tiny_model: Reranker, tmp_path: Path
) -> None:
    """Changes made after a backup reach the store; the catalog is then restored from the backup. The
    store's rows of those items are ahead of the catalog, so its next changes would be dropped (and a
    deletion it never saw would hide a live item). `catalog reconcile` moves the version counter past
    the store and republishes those items: the store follows the restored catalog, later changes land."""
    live_url, backup = f"sqlite:///{tmp_path / 'live.db'}", tmp_path / "backup.db"
    with Catalog(live_url) as catalog:
        for item_id in ("a", "b", "c"):
            catalog.upsert(item_id, f"item {item_id}", {}, "as backed up")
        with sqlite3.connect(tmp_path / "live.db") as source, sqlite3.connect(backup) as copy:
            source.backup(copy)
        catalog.upsert("a", "item a", {}, "changed after the backup")
        catalog.upsert("a", "item a", {}, "changed twice after the backup")
        catalog.delete("b")
        publish_catalog(settings, catalog)
    consume_all(probe, tiny_model, store)
    assert store.versions(["a", "b", "c"]) == {"a": 5, "b": 6, "c": 3}

    restored = f"sqlite:///{backup}"  # a@1, b@2, c@3, counter at 3
    with Catalog(restored) as catalog:
        lost_update = catalog.upsert("a", "item a", {}, "changed after the restore")
        assert lost_update.version == 4 and store.versions(["a"])["a"] == 5  # would lose to the stored row
        args = ["catalog", "reconcile", "--fingerprint", tiny_model.fingerprint, "--catalog-url", restored]
        out = cli([*args, "--feast-dir", str(store.data_dir)], settings)
        assert "2 had rows ahead of the catalog" in out and "published 2 events" in out, out
        consume_all(probe, tiny_model, store)
        items = catalog.get(["a", "b", "c"])
        for item in items.values():
            assert_row_is_direct_compress(store, tiny_model, item.item_id, item.fields(), item.version)
        assert items["a"].description == "changed after the restore" and items["b"].version > 6
        later = catalog.upsert("c", "item c", {}, "a later change")
        assert later.version > 6  # past everything the store holds
        publish_events(settings, [later])
        consume_all(probe, tiny_model, store)
        assert_row_is_direct_compress(store, tiny_model, "c", later.fields, later.version)


def test_dead_letter_value_keeps_bytes_unless_over_the_topic_limit() -> None:
    small = b"\x00\xff\xfe not utf-8"
    record = ConsumerRecord("t", 3, -1, 42, 1, 0, b"k", small, [], None, 1, len(small), 0)
    body = json.loads(dead_letter_value(DeadLetter(record, "why", "invalid_utf8"), "g"))
    assert payload_bytes(body["value"]) == small and "truncated" not in body["value"]
    assert body["source"]["offset"] == 42 and body["consumer_group"] == "g"

    huge = os.urandom(DLQ_MAX_MESSAGE_BYTES)
    record = record._replace(value=huge)
    encoded = dead_letter_value(DeadLetter(record, "why", "oversized"), "g")
    assert len(encoded) < DLQ_MAX_MESSAGE_BYTES
    value = json.loads(encoded)["value"]
    assert value["truncated"] is True and value["size"] == len(huge)
    assert value["sha256"] == hashlib.sha256(huge).hexdigest()
    assert huge.startswith(payload_bytes(value))


def test_materialize_recompresses_exactly_the_stale_items(
    settings: KafkaSettings,
    store: GistStore,
    tiny_model: Reranker,
    tiny_base: Path,
    checkpoint: Path,
    catalog_url: str,
    tmp_path: Path,
) -> None:
    feast = ["--feast-dir", str(tmp_path / "feast"), "--catalog-url", catalog_url]
    cli(["catalog", "load", str(SAMPLE_CATALOG), "--catalog-url", catalog_url], settings)
    out = cli(["materialize", "--all", "--model", str(checkpoint), *feast], settings)
    assert "scanned 16, compressed 16, written 16" in out

    # A model upgrade (another gist config → another fingerprint). Five items are already current with it,
    # one item is deleted from the catalog: the other ten are stale.
    upgraded = Reranker.from_pretrained(tiny_base, RerankerConfig(num_gist=2, dtype="float32"), device="cpu")
    upgraded_dir = upgraded.save_pretrained(tmp_path / "upgraded")
    with Catalog(catalog_url) as catalog:
        items = list(catalog.iter_items())
        catalog.delete(items[-1].item_id)
    current = items[:5]
    new_store = store.for_model(upgraded.fingerprint)  # the upgrade's own view, beside the live one
    new_store.apply()
    new_store.write(compress_rows(upgraded, [(i.item_id, i.fields(), i.version) for i in current]))
    current_rows = new_store.read([i.item_id for i in current])
    live_rows = store.read([i.item_id for i in items])

    out = cli(["materialize", "--stale-only", "--model", str(upgraded_dir), *feast], settings)
    assert "scanned 15, compressed 10, written 10" in out
    fingerprints = new_store.stored_fingerprints([i.item_id for i in items[:-1]])
    assert set(fingerprints.values()) == {upgraded.fingerprint}
    assert new_store.read([i.item_id for i in current]) == current_rows  # untouched
    for item in items[5:-1]:
        assert_row_is_direct_compress(new_store, upgraded, item.item_id, item.fields(), item.version)
    assert store.read([i.item_id for i in items]) == live_rows  # the live model's view is left as it was

    out = cli(["materialize", "--stale-only", "--model", str(upgraded_dir), *feast], settings)
    assert "scanned 15, compressed 0, written 0" in out


def repaired_on_rejoin(client: KafkaConsumer, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set when the consumer leaves its group to rejoin, which also undoes every patch of the
    client: the rejoin repairs it."""
    rejoined = threading.Event()
    unsubscribe = client.unsubscribe

    def leave() -> None:
        monkeypatch.undo()
        rejoined.set()
        unsubscribe()

    monkeypatch.setattr(client, "unsubscribe", leave)
    return rejoined


def test_consumer_rejoins_when_kafka_python_loses_a_rebalance(
    settings: KafkaSettings,
    probe: Probe,
    store: GistStore,
    tiny_model: Reranker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    publish_events(settings, [upsert("s", 1, fields("stuck"))])
    consumer = GistConsumer(settings, tiny_model, store, poll_timeout_s=0.2, rejoin_after_s=0)
    client = consumer._consumer
    # The state kafka-python 3.0.12 can end up in: "rebalancing" forever, no partitions, nothing polled.
    monkeypatch.setattr(
        client, "group_metadata", lambda: ConsumerGroupMetadata(state=MemberState.REBALANCING)
    )
    monkeypatch.setattr(client, "poll", lambda **_: {})
    rejoined = repaired_on_rejoin(client, monkeypatch)
    lost = metric("gistrank_consumer_rejoins_total", reason="lost_rebalance")
    running = Running(consumer)
    try:
        assert rejoined.wait(timeout=30), "the consumer never rejoined"
        wait_until(probe.caught_up, 60, "the consumer to process the event after rejoining")
    finally:
        running.stop()
    assert_row_is_direct_compress(store, tiny_model, "s", fields("stuck"), 1)
    assert metric("gistrank_consumer_rejoins_total", reason="lost_rebalance") == lost + 1


def test_consumer_rejoins_when_kafka_python_stops_fetching_an_assigned_partition(
    settings: KafkaSettings,
    probe: Probe,
    store: GistStore,
    tiny_model: Reranker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """dpkp/kafka-python#3131: the partitions stay assigned but polls come back empty while records wait.
    An idle consumer at its partitions' ends never rejoins; one that is behind rejoins and catches up."""
    stalled = functools.partial(metric, "gistrank_consumer_rejoins_total", reason="stalled_partition")
    before = stalled()
    publish_events(settings, [upsert("a", 1, fields("first"))])
    consumer = GistConsumer(settings, tiny_model, store, poll_timeout_s=0.2, rejoin_after_s=1)
    client = consumer._consumer
    running = Running(consumer)
    try:
        wait_until(probe.caught_up, 60, "the consumer to process the first event")
        time.sleep(3)  # idle at the ends for three rejoin periods: nothing to repair
        assert stalled() == before
        assert client.assignment()
        stuck = threading.Event()

        def stuck_poll(**_: Any) -> dict:
            stuck.set()
            return {}  # assigned, never fetched again

        monkeypatch.setattr(client, "poll", stuck_poll)
        assert stuck.wait(timeout=10)  # the real poll that was under way has returned
        rejoined = repaired_on_rejoin(client, monkeypatch)
        publish_events(settings, [upsert("b", 1, fields("second"))])
        assert rejoined.wait(timeout=30), "the consumer never rejoined"
        wait_until(probe.caught_up, 60, "the consumer to process the second event after rejoining")
    finally:
        running.stop()
    assert_row_is_direct_compress(store, tiny_model, "b", fields("second"), 1)
    assert stalled() == before + 1


def test_consumer_killed_mid_batch_then_sigterm_loses_nothing(
    settings: KafkaSettings, probe: Probe, tiny_model: Reranker, checkpoint: Path, tmp_path: Path
) -> None:
    # 30 items × 3 versions, interleaved like a live catalog: every batch holds several items' changes.
    latest: dict[str, tuple[int, ItemFields]] = {}
    events = []
    for version in range(1, 91):
        item_id = f"item-{version % 30}"
        item = fields(f"{item_id} version {version}", f"{version} " * (5 + version % 30), size=str(version))
        latest[item_id] = (version, item)
        events.append(upsert(item_id, version, item))
    assert publish_events(settings, events) == 90
    feast_dir = tmp_path / "feast"
    port = free_port()

    # SIGKILL inside a batch: after two committed batches, the process is frozen (SIGSTOP) as soon as the
    # next batch has started and before it commits, then killed; the group's offsets stop exactly where
    # that batch begins.
    first = ConsumerProcess(settings, checkpoint, feast_dir, port)
    first.wait_for_batches(2)
    in_hand = first.freeze_inside_batch()
    rc, _ = first.finish(signal.SIGKILL)
    assert rc == -signal.SIGKILL
    offsets = {f"{tp.topic}[{tp.partition}]": offset for tp, offset in probe.committed().items()}
    assert all(offsets.get(key, 0) == span[0] for key, span in in_hand.items()), (offsets, in_hand)
    committed = sum(offsets.values())
    assert 0 < committed == first.committed_records() < 90, "".join(first.log)

    # Restart, then SIGTERM while it has work: it finishes the batch in hand, commits it and exits 0, so
    # the group's offsets are exactly what it logged as committed.
    second = ConsumerProcess(settings, checkpoint, feast_dir, port)
    second.wait_for_batches(1)
    # the killed batch's records are delivered again: the restart's first batch begins where it began
    for key, span in in_hand.items():
        assert next(s[key] for s in second.processed_spans() if key in s)[0] == span[0], (key, span)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        exposition = response.read().decode()
    assert re.search(r"^gistrank_consumer_events_total [1-9]", exposition, re.M), exposition
    assert "gistrank_consumer_batch_duration_seconds_bucket" in exposition
    rc, stdout = second.finish(signal.SIGTERM)
    log = "".join(second.log)
    assert rc == 0 and "SIGTERM: finishing the current batch" in log, log
    assert re.search(r"committed [1-9]\d* batches", stdout), stdout
    assert sum(probe.committed().values()) == committed + second.committed_records() < 90, log

    # A third consumer drains the rest: redelivery is harmless, each item ends at its latest version.
    store = GistStore(feast_dir, fingerprint=tiny_model.fingerprint)
    consume_all(probe, tiny_model, store)
    for item_id, (version, item) in latest.items():
        assert_row_is_direct_compress(store, tiny_model, item_id, item, version)


@pytest.mark.chaos
def test_a_second_model_in_the_live_group_is_refused_and_commits_nothing(
    settings: KafkaSettings,
    probe: Probe,
    tiny_model: Reranker,
    tiny_base: Path,
    store: GistStore,
    tmp_path: Path,
) -> None:
    """Model B's consumer started with model A's group (GISTRANK_KAFKA_GROUP_ID copied from A's manifest)
    would take half the partitions and commit them: A would never see those changes, deletes included.
    It is refused at start with a one-line error, commits nothing, and A then sees every change."""
    latest = {f"item-{n}": (1, fields(f"item {n}", "first")) for n in range(12)}
    assert publish_events(settings, [upsert(i, v, item) for i, (v, item) in latest.items()]) == 12
    consume_all(probe, tiny_model, store)
    offsets = probe.admin.list_group_offsets({settings.group_id: None})[settings.group_id]
    assert {meta.metadata for meta in offsets.values()} == {f"gistrank-model={tiny_model.fingerprint}"}
    committed = probe.committed()

    changes = [upsert(f"item-{n}", 2, fields(f"item {n}", "second")) for n in range(6)]
    assert publish_events(settings, [*changes, delete("item-11", 2)]) == 7
    model_b = Reranker.from_pretrained(tiny_base, RerankerConfig(num_gist=2, dtype="float32"), device="cpu")
    assert model_b.fingerprint != tiny_model.fingerprint
    args = ["consume", "--model", str(model_b.save_pretrained(tmp_path / "model-b"))]
    args += ["--feast-dir", str(tmp_path / "feast-b"), "--no-create-topics", "--idle-exit-s", "5"]
    result = CliRunner().invoke(cli_app, args, env=kafka_env(settings))
    assert result.exit_code == 2, result.output
    assert f"committed for model {tiny_model.fingerprint}" in result.output
    assert "Traceback" not in result.output
    assert probe.committed() == committed  # B committed nothing

    consume_all(probe, tiny_model, store)  # A resumes: every change reaches its view, the delete too
    for event in changes:
        assert_row_is_direct_compress(store, tiny_model, event.item_id, event.fields, 2)
    assert store.read(["item-11"])["item-11"] is None


# A consumer process that dies (SIGKILL) in its first commit: after the batch's rows and tombstones were
# written and its dead letters acknowledged, before the broker has its offsets.
_DIES_BEFORE_COMMIT = """
import os, signal, sys, threading
from pathlib import Path
from reranker import Reranker
from reranker.catalog.kafka_settings import KafkaSettings
from reranker.store import GistStore
from streaming.consumer import GistConsumer
checkpoint, feast_dir, marker = sys.argv[1:]
model = Reranker.from_pretrained(checkpoint, device="cpu")
class DiesBeforeCommit(GistConsumer):
    def _commit(self, records):
        Path(marker).write_text(str(len(records)))
        os.kill(os.getpid(), signal.SIGKILL)
store = GistStore(Path(feast_dir), fingerprint=model.fingerprint)
DiesBeforeCommit(KafkaSettings.from_env(), model, store, batch_size=100).run(threading.Event())
"""


@pytest.mark.chaos
def test_a_kill_between_the_store_write_and_the_commit_loses_nothing(
    settings: KafkaSettings,
    probe: Probe,
    tiny_model: Reranker,
    checkpoint: Path,
    store: GistStore,
    tmp_path: Path,
) -> None:
    """The one window at-least-once delivery leaves: everything of a batch is in the store, its offsets
    are not committed. The next consumer gets the batch again, and the redelivery changes nothing: every
    item ends at its latest version, deleted items stay deleted."""
    latest: dict[str, tuple[int, ItemFields | None]] = {}
    events = []
    for version in range(1, 41):
        item_id = f"item-{version % 12}"
        if version % 9 == 0:
            events.append(delete(item_id, version))
            latest[item_id] = (version, None)
        else:
            item = fields(f"{item_id} v{version}", "text " * (version % 5))
            events.append(upsert(item_id, version, item))
            latest[item_id] = (version, item)
    assert publish_events(settings, events) == 40
    marker = tmp_path / "died-committing"
    dying = subprocess.run(
        [sys.executable, "-c", _DIES_BEFORE_COMMIT, str(checkpoint), str(store.data_dir), str(marker)],
        env=os.environ | kafka_env(settings),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert dying.returncode == -signal.SIGKILL, dying.stderr
    in_batch = int(marker.read_text())
    assert in_batch > 0 and probe.committed() == {}  # died holding a written, uncommitted batch
    written = {i: r.version for i, r in store.read(list(latest)).items() if r is not None}
    assert written  # the batch's rows were in the store before the kill

    consume_all(probe, tiny_model, store)
    for item_id, (version, item) in latest.items():
        if item is None:
            assert store.read([item_id])[item_id] is None, item_id
        else:
            assert_row_is_direct_compress(store, tiny_model, item_id, item, version)


@pytest.mark.scale
def test_two_consumers_share_the_topic_and_the_survivor_of_a_kill_takes_over(
    settings: KafkaSettings, probe: Probe, tiny_model: Reranker, checkpoint: Path, tmp_path: Path
) -> None:
    """A backfill scaled out: two consumer processes of one group each own a partition and both commit
    work; one is killed with SIGKILL while events still flow to both partitions; the survivor takes the
    dead one's partition (after the session timeout) and drains the topic; the store equals the
    catalog's latest version of every item."""
    latest: dict[str, tuple[int, ItemFields]] = {}

    def event(version: int) -> ChangeEvent:
        item_id = f"item-{version % 40}"
        item = fields(f"{item_id} version {version}", f"{version} " * (5 + version % 20), size=str(version))
        latest[item_id] = (version, item)
        return upsert(item_id, version, item)

    feast_dir = tmp_path / "feast"
    GistStore(
        feast_dir, fingerprint=tiny_model.fingerprint
    ).apply()  # before two processes race to create the registry
    doomed = ConsumerProcess(settings, checkpoint, feast_dir, free_port())
    survivor = ConsumerProcess(settings, checkpoint, feast_dir, free_port())
    trickle: threading.Thread | None = None
    try:
        wait_until(lambda: probe.stable_members() == 2, WAIT_S, "both consumers to join the group")
        assert publish_events(settings, [event(v) for v in range(1, 81)]) == 80  # keys on both partitions
        doomed.wait_for_batches(1)
        survivor.wait_for_batches(1)

        def produce() -> None:  # the rest keeps arriving across the kill
            with EventPublisher(settings) as publisher:
                for version in range(81, 401):
                    publisher.send(event(version))
                    if version % 20 == 0:
                        publisher.flush()
                        time.sleep(0.2)

        trickle = threading.Thread(target=produce, daemon=True)
        trickle.start()
        doomed.wait_for_batches(1)
        rc, _ = doomed.finish(signal.SIGKILL)
        assert rc == -signal.SIGKILL
        trickle.join(timeout=WAIT_S)
        assert not trickle.is_alive(), "the producer did not finish"
        try:
            wait_until(probe.caught_up, WAIT_S, "the survivor to drain both partitions")
        except AssertionError as exc:
            state = f"committed {probe.committed()}, end {probe.end_offsets()}"
            raise AssertionError(f"{exc}; {state}; the survivor's log:\n" + "".join(survivor.log)) from None
        assert sum(probe.end_offsets().values()) == 400
        rc, _ = survivor.finish(signal.SIGTERM)
        assert rc == 0, "".join(survivor.log)
    finally:
        for process in (doomed, survivor):
            if process.proc.poll() is None:
                process.proc.kill()
    assert doomed.committed_records() > 0 and survivor.committed_records() > 0
    store = GistStore(feast_dir, fingerprint=tiny_model.fingerprint)
    for item_id, (version, item) in latest.items():
        assert_row_is_direct_compress(store, tiny_model, item_id, item, version)


@pytest.mark.redis
def test_a_store_outage_under_a_live_consumer_is_retried_and_committed_only_after_the_write(
    settings: KafkaSettings, probe: Probe, tiny_model: Reranker, tmp_path: Path
) -> None:
    """The real online store (redis-server) stops under a live consumer: every batch fails, is rewound
    and retried (the retry counter rises) and nothing is committed; once Redis is back the batches are
    written and only then committed, each item at its latest version."""
    redis_proc = RedisServer(tmp_path / "redis").start()
    try:
        store = GistStore(
            tmp_path / "feast", online="redis", redis_url=redis_proc.url, fingerprint=tiny_model.fingerprint
        )
        store.apply()
        running = Running(
            GistConsumer(settings, tiny_model, store, batch_size=8, poll_timeout_s=0.2, max_backoff_s=1.0)
        )
        try:
            first = {f"o-{n}": fields(f"o-{n} first", "before the outage") for n in range(8)}
            publish_events(settings, [upsert(i, 1, item) for i, item in first.items()])
            wait_until(probe.caught_up, WAIT_S, "the first batch")
            committed = sum(probe.committed().values())
            redis_proc.stop()
            retries = metric("gistrank_consumer_batch_retries_total")
            second = {f"o-{n}": fields(f"o-{n} second", "during the outage") for n in range(8)}
            publish_events(settings, [upsert(i, 2, item) for i, item in second.items()])
            wait_until(
                lambda: metric("gistrank_consumer_batch_retries_total") >= retries + 2,
                WAIT_S,
                "the consumer to retry the failing batch",
            )
            assert sum(probe.committed().values()) == committed  # nothing committed without its write
            redis_proc.start()  # same port, empty: nothing was persisted
            wait_until(probe.caught_up, WAIT_S, "the retried batch to be written and committed")
        finally:
            running.stop()
        for item_id, item in second.items():
            assert_row_is_direct_compress(store, tiny_model, item_id, item, 2)
    finally:
        redis_proc.stop()


def test_a_refresh_request_replaces_an_unusable_row_and_leaves_a_usable_one(
    settings: KafkaSettings, probe: Probe, store: GistStore, tiny_model: Reranker
) -> None:
    """A serving replica's refresh request at the stored version: the consumer recompresses when the
    stored row does not decode (what made the replica recompute), and skips it when the row is fine. A
    plain upsert at the stored version is skipped either way (a redelivery)."""
    good, bad = fields("Good row", "stays"), fields("Bad row", "gets repaired")
    publish_events(settings, [upsert("good", 2, good), upsert("bad", 2, bad)])
    consume_all(probe, tiny_model, store)
    row = store.read(["bad"])["bad"]
    assert row is not None
    store.write([dataclasses.replace(row, kv=row.kv[:-16])])  # a damaged blob behind truthful columns
    before = {item_id: store.read([item_id])[item_id] for item_id in ("good", "bad")}

    publish_events(settings, [upsert("bad", 2, bad)])  # not a refresh: a redelivery, skipped
    consume_all(probe, tiny_model, store)
    assert store.read(["bad"])["bad"] == before["bad"]

    stale = metric("gistrank_consumer_events_skipped_total", reason="stale")
    refresh = [
        upsert(i, 2, f).model_copy(update={"refresh": True}) for i, f in (("good", good), ("bad", bad))
    ]
    publish_events(settings, refresh)
    consume_all(probe, tiny_model, store)
    assert store.read(["good"])["good"] == before["good"]  # usable: not rewritten
    assert_row_is_direct_compress(store, tiny_model, "bad", bad, 2)  # repaired at the same version
    assert metric("gistrank_consumer_events_skipped_total", reason="stale") - stale == 1


class HeldRefreshes:
    """A serving replica's refresh sink that holds each request until the test publishes it, through the
    replica's own producer: requests computed from an old catalog read go out late and out of order."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.held: list[ChangeEvent] = []
        self.publisher = EventPublisher(settings)

    def send(self, event: ChangeEvent) -> None:
        self.held.append(event)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.publisher.close()

    def release(self, index: int) -> None:
        self.publisher.send(self.held.pop(index % len(self.held)))
        self.publisher.flush()


# One step of a catalog / replica interleaving: (kind, item number).
_RACE_STEP = st.tuples(st.sampled_from(["change", "delete", "serve", "release"]), st.integers(0, 7))


@pytest.mark.scale
@hypothesis_settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(_RACE_STEP, min_size=4, max_size=16))
def test_refresh_requests_racing_catalog_changes_never_leave_an_older_version(
    race: tuple[KafkaSettings, Probe, Catalog, GistStore, KVLookup, HeldRefreshes, EventPublisher],
    steps: list[tuple[str, int]],
) -> None:
    """One writer per item, over interleavings: the catalog changes and deletes items and publishes each
    change; a serving replica (KVLookup, real recompute) reads the catalog at any moment and its refresh
    requests reach the topic late and out of order; a consumer process (the only writer) runs throughout.
    Once it has caught up, every item's row is the catalog's latest version (or gone, if deleted): no
    refresh computed from an older read ever wins."""
    _settings, probe, catalog, store, replica, sink, changes = race
    prefix = uuid.uuid4().hex[:6]  # each example its own items
    ids = [f"race-{prefix}-{n}" for n in range(3)]
    for item_id in ids:
        changes.send(catalog.upsert(item_id, f"{item_id} first", {"n": 0}, "first state"))
    for kind, n in steps:
        item_id = ids[n % len(ids)]
        if kind == "change":
            changes.send(catalog.upsert(item_id, f"{item_id} at step {n}", {"n": n}, "changed " * (n + 1)))
        elif kind == "delete" and item_id in catalog.get([item_id]):
            changes.send(catalog.delete(item_id))
        elif kind == "serve":
            replica.fetch([item_id])  # recompute (no store: every read misses) → a held refresh request
            assert replica.refresh is not None and replica.refresh.drain(10)
        elif kind == "release" and sink.held:
            sink.release(n)
        changes.flush()
    while sink.held:
        sink.release(-1)  # the rest, newest first: the oldest reads go out last
    wait_until(probe.caught_up, WAIT_S, "the consumer process to process every event")
    live = catalog.get(ids)
    rows = store.read(ids)
    for item_id in ids:
        if item_id not in live:
            assert rows[item_id] is None, f"{item_id} was deleted in the catalog but has a row"
            continue
        item, row = live[item_id], rows[item_id]
        assert row is not None, f"{item_id} has no row"
        assert (row.version, row.content_hash) == (item.version, item.content_hash), item_id


@pytest.fixture
def race(
    settings: KafkaSettings, probe: Probe, tiny_model: Reranker, checkpoint: Path, tmp_path: Path
) -> Iterator[tuple[KafkaSettings, Probe, Catalog, GistStore, KVLookup, HeldRefreshes, EventPublisher]]:
    """The parts of the refresh race: the consumer process, the catalog and its change feed, a replica."""
    feast_dir = tmp_path / "feast"
    store = GistStore(feast_dir, fingerprint=tiny_model.fingerprint)
    store.apply()
    writer = ConsumerProcess(settings, checkpoint, feast_dir, free_port())
    sink = HeldRefreshes(settings)
    replica = KVLookup(tiny_model, ByteLRU(0, 60.0), Catalog(f"sqlite:///{tmp_path / 'catalog.db'}"), None,
                       RefreshRequests(lambda: sink))  # fmt: skip
    changes = EventPublisher(settings)
    try:
        yield settings, probe, replica.catalog, store, replica, sink, changes
        assert writer.proc.poll() is None, "".join(writer.log)
    finally:
        changes.close()
        assert replica.refresh is not None
        replica.refresh.close()
        replica.catalog.close()
        writer.finish(signal.SIGTERM)


@pytest.mark.parametrize("outage", ["stop", "kill -9"])
def test_broker_restart_while_events_flow(
    broker: KafkaBroker,
    settings: KafkaSettings,
    probe: Probe,
    store: GistStore,
    tiny_model: Reranker,
    outage: str,
) -> None:
    """The broker goes away under a live producer and consumer — a clean stop, or a crash (SIGKILL of
    the broker process) — and comes back: nothing is lost, the consumer resumes, every item ends at its
    latest version."""
    latest: dict[str, tuple[int, ItemFields]] = {}
    published = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        # A steady trickle across the restart from one idempotent producer, which retries while it is down.
        try:
            with EventPublisher(settings) as publisher:
                for version in range(1, 201):
                    item_id = f"flow-{version % 20}"
                    item = fields(f"{item_id} v{version}", "flowing " * (version % 7))
                    latest[item_id] = (version, item)
                    publisher.send(upsert(item_id, version, item))
                    if version % 10 == 0:
                        publisher.flush()
                        time.sleep(0.25)
        except BaseException as exc:
            errors.append(exc)
        finally:
            published.set()

    running = Running(GistConsumer(settings, tiny_model, store, batch_size=8, poll_timeout_s=0.2))
    threading.Thread(target=produce, daemon=True).start()
    try:
        wait_until(lambda: sum(probe.committed().values()) >= 16, 60, "the first committed batches")
        assert not published.is_set(), "the producer finished before the restart; make it trickle longer"
        if outage == "stop":
            broker.stop()
        else:
            pid = broker.running_pid()
            broker.kill()
            assert pid is not None and broker.running_pid() is None  # gone (at most a zombie)
        broker.start()
        assert published.wait(timeout=WAIT_S), "producer did not finish"
        assert not errors, errors
        wait_until(probe.caught_up, WAIT_S, "the consumer to catch up after the broker restart")
    finally:
        running.stop()
    assert len(latest) == 20
    for item_id, (version, item) in latest.items():
        assert_row_is_direct_compress(store, tiny_model, item_id, item, version)
