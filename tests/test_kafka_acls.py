"""ACLs on a real broker that authenticates its clients (scripts/kafka.sh with GISTRANK_KAFKA_SASL_USERS):
`gistrank kafka-acls` grants each role what it needs and nothing more, so only the publisher and the
servers can write the change topic, and the consumer still does its whole job."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka.errors import KafkaError
from services import kafka_env
from typer.testing import CliRunner

from localservices.kafka_broker import KafkaBroker
from reranker import Reranker
from reranker.catalog.events import ChangeEvent, ItemFields
from reranker.catalog.kafka_settings import KafkaSettings, ensure_topics
from reranker.catalog.publisher import PublishError, publish_events
from reranker.cli import app
from reranker.store import GistStore
from streaming.consumer import GistConsumer

pytestmark = [pytest.mark.kafka, pytest.mark.chaos]

USERS = {
    "admin": "admin-pw",
    "publisher": "pub-pw",
    "consumer": "con-pw",
    "serving": "srv-pw",
    "intruder": "x",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    users = ",".join(f"{u}:{p}" for u, p in USERS.items())
    running = KafkaBroker(tmp_path_factory.mktemp("kafka-sasl"), sasl_users=users)
    running.start()
    yield running
    running.stop()


def as_user(broker: KafkaBroker, user: str) -> KafkaSettings:
    return KafkaSettings(
        bootstrap_servers=broker.bootstrap_servers,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username=user,
        sasl_password=USERS[user],
        topic="acl.changes",
        dlq_topic="acl.changes.dlq",
    )


def upsert(item_id: str, version: int) -> ChangeEvent:
    item = ItemFields(title=f"{item_id} v{version}", attributes={}, description="text")
    return ChangeEvent(
        op="upsert", item_id=item_id, version=version, timestamp=datetime.now(UTC), fields=item
    )


def test_only_the_granted_roles_write_the_change_topic_and_the_consumer_does_its_job(
    broker: KafkaBroker, tiny_model: Reranker, tmp_path: Path
) -> None:
    admin = as_user(broker, "admin")
    env = kafka_env(admin) | {
        "GISTRANK_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "GISTRANK_KAFKA_SASL_MECHANISM": "PLAIN",
        "GISTRANK_KAFKA_SASL_USERNAME": "admin",
        "GISTRANK_KAFKA_SASL_PASSWORD": USERS["admin"],
    }
    args = ["kafka-acls", "--publisher", "publisher", "--consumer", "consumer", "--serving", "serving"]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0 and "ACLs in place" in result.output, result.output

    publisher = as_user(broker, "publisher")
    ensure_topics(publisher, partitions=2)  # the publisher may create the topics
    assert publish_events(publisher, [upsert("a", 1), upsert("b", 1)]) == 2
    assert publish_events(as_user(broker, "serving"), [upsert("a", 2)]) == 1  # a refresh request
    for outsider in ("intruder", "consumer"):  # no grant, or a grant to read only
        with pytest.raises((PublishError, KafkaError)):
            publish_events(as_user(broker, outsider), [upsert("a", 10**9)])

    store = GistStore(tmp_path / "feast", fingerprint=tiny_model.fingerprint)
    store.apply()
    consumer = GistConsumer(as_user(broker, "consumer"), tiny_model, store, poll_timeout_s=0.2)
    assert consumer.run(threading.Event(), idle_exit_s=5) >= 1
    rows = store.read(["a", "b"])
    assert (rows["a"].version, rows["b"].version) == (2, 1)
    with pytest.raises(KafkaError):  # the intruder cannot even read the topic in some other group
        GistConsumer(as_user(broker, "intruder"), tiny_model, store).run(threading.Event(), max_batches=1)


def test_a_wrong_password_is_one_line_naming_the_login_within_the_wait(broker: KafkaBroker) -> None:
    """The broker check of every Kafka command (issue 51) logs in as its clients would: a wrong SASL
    password is refused within $GISTRANK_KAFKA_CONNECT_TIMEOUT_S, and the line names the login tried."""
    env = kafka_env(as_user(broker, "publisher")) | {
        "GISTRANK_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "GISTRANK_KAFKA_SASL_MECHANISM": "PLAIN",
        "GISTRANK_KAFKA_SASL_USERNAME": "publisher",
        "GISTRANK_KAFKA_SASL_PASSWORD": "not-the-password",
        "GISTRANK_KAFKA_CONNECT_TIMEOUT_S": "2",
    }
    started = time.monotonic()
    result = CliRunner().invoke(app, ["dlq", "replay"], env=env)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: no Kafka broker answered"), result.output
    assert f"at {broker.bootstrap_servers} within 2 s" in result.output
    assert "SASL_PLAINTEXT as publisher: a refused login" in result.output
    assert time.monotonic() - started < 10
    right = env | {"GISTRANK_KAFKA_SASL_PASSWORD": USERS["publisher"]}
    result = CliRunner().invoke(app, ["dlq", "replay"], env=right)  # passes the check, whatever follows
    assert "no Kafka broker answered" not in result.output, result.output
