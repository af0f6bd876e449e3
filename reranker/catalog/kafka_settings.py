"""Kafka client settings (from `GISTRANK_KAFKA_*` environment variables) and topic creation.

Every producer, consumer and admin client of the project is built from `KafkaSettings`, so a deployment
configures brokers, TLS and SASL once, in the environment, the way production injects secrets:

    GISTRANK_KAFKA_BOOTSTRAP_SERVERS   host:port[,host:port…]        (default 127.0.0.1:9092)
    GISTRANK_KAFKA_SECURITY_PROTOCOL   PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    GISTRANK_KAFKA_SASL_MECHANISM      PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
    GISTRANK_KAFKA_SASL_USERNAME / GISTRANK_KAFKA_SASL_PASSWORD
    GISTRANK_KAFKA_SSL_CAFILE / GISTRANK_KAFKA_SSL_CERTFILE / GISTRANK_KAFKA_SSL_KEYFILE
    GISTRANK_KAFKA_SSL_PASSWORD        password of an encrypted key file
    GISTRANK_KAFKA_TOPIC               change topic      (default gistrank.catalog-changes)
    GISTRANK_KAFKA_DLQ_TOPIC           dead-letter topic (default gistrank.catalog-changes.dlq)
    GISTRANK_KAFKA_GROUP_ID            consumer group    (default gistrank-gist-writer-<model fingerprint>)
    GISTRANK_KAFKA_SESSION_TIMEOUT_MS  how soon a crashed consumer's partitions move on (default 45000)
    GISTRANK_KAFKA_MAX_POLL_INTERVAL_MS  how long one batch may take before the consumer is dropped (300000)
    GISTRANK_KAFKA_CLIENT_ID           client id shown in broker logs and quotas (default gistrank)
    GISTRANK_KAFKA_CONNECT_TIMEOUT_S   how long a command waits for the brokers to answer (default 5)

kafka-python is imported inside the functions that need it, so reading settings stays cheap.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

ENV_PREFIX = "GISTRANK_KAFKA_"
# The dead-letter topic holds the original record base64-encoded (×4/3) plus the reason, so it must accept
# records larger than the change topic's (broker default ~1 MiB). Created with this limit by `ensure_topics`;
# the consumer's DLQ producer uses the same bound and truncates (flagged) only what would still not fit.
DLQ_MAX_MESSAGE_BYTES = 4 * 1024 * 1024

DEFAULT_GROUP_PREFIX = "gistrank-gist-writer-"

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class KafkaSettings(BaseModel):
    """Connection, security, topic and group settings shared by every Kafka client of GistRank."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str = "127.0.0.1:9092"
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None  # SecretStr: never printed in reprs or logs
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: SecretStr | None = None
    topic: str = Field("gistrank.catalog-changes", min_length=1)
    dlq_topic: str = Field("gistrank.catalog-changes.dlq", min_length=1)
    # None: one group per model (`group_for`), so two models' consumers never split one group's partitions
    group_id: str | None = Field(None, min_length=1)
    client_id: str = Field("gistrank", min_length=1)
    # The group waits this long for a consumer that died without leaving (kill -9, lost host) before its
    # partitions are reassigned; the broker bounds it (group.min.session.timeout.ms, 6 s by default).
    session_timeout_ms: int = Field(45_000, ge=1000)
    # A consumer that has not polled for this long (one batch too slow) leaves the group and its partitions
    # move on; its late writes lose against the new owner's (fenced store writes), its commit fails.
    max_poll_interval_ms: int = Field(300_000, ge=1000)
    # `check_reachable`'s bound: a live broker answers in well under a second, and a command against a
    # wrong address says so in seconds instead of after its clients' own 30 s retries.
    connect_timeout_s: float = Field(5.0, gt=0, le=600)

    @field_validator("bootstrap_servers")
    @classmethod
    def _servers_given(cls, value: str) -> str:
        if not [s for s in value.split(",") if s.strip()]:
            raise ValueError("bootstrap_servers needs at least one host:port")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSettings:
        uses_sasl = self.security_protocol.startswith("SASL_")
        if uses_sasl and (self.sasl_mechanism is None or not self.sasl_username or not self.sasl_password):
            raise ValueError(
                f"{self.security_protocol} needs sasl_mechanism, sasl_username and sasl_password"
            )
        if not uses_sasl and self.sasl_mechanism is not None:
            raise ValueError(f"sasl_mechanism is set but security_protocol is {self.security_protocol}")
        if self.topic == self.dlq_topic:
            raise ValueError("the dead-letter topic must differ from the change topic")
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> KafkaSettings:
        """Settings from `GISTRANK_KAFKA_*` variables; `overrides` that are not None win (CLI options)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is not None and raw.strip():
                values[name] = raw.strip()
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def servers(self) -> list[str]:
        return [s.strip() for s in self.bootstrap_servers.split(",") if s.strip()]

    def client_kwargs(self) -> dict[str, Any]:
        """Connection and security options common to producer, consumer and admin client."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.servers,
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
            # kafka-python backs off up to 30 s between reconnects by default; after a broker restart that
            # leaves a consumer idle long after the broker is back. 1 s is the Java client's default.
            "reconnect_backoff_max_ms": 1000,
        }
        if self.sasl_mechanism is not None and self.sasl_password is not None:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.sasl_password.get_secret_value()
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        if self.ssl_password is not None:
            kwargs["ssl_password"] = self.ssl_password.get_secret_value()
        return kwargs

    def producer_kwargs(self, max_request_size: int | None = None) -> dict[str, Any]:
        """acks=all + idempotence: a send is acknowledged only once every in-sync replica has it, and
        retries after a lost ack cannot duplicate or reorder records within a partition."""
        kwargs = self.client_kwargs() | {"acks": "all", "enable_idempotence": True, "linger_ms": 5}
        if max_request_size is not None:
            kwargs["max_request_size"] = max_request_size
        return kwargs

    def group_for(self, fingerprint: str) -> str:
        """The consumer group of the gist writers of one model: the configured one, else one per model."""
        return self.group_id or f"{DEFAULT_GROUP_PREFIX}{fingerprint}"

    def consumer_kwargs(self, group_id: str) -> dict[str, Any]:
        """Manual commits only (the consumer commits after its writes are acknowledged); a new group
        starts from the oldest retained event so that nothing published before it existed is missed."""
        return self.client_kwargs() | {
            "group_id": group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            # Topics are created explicitly (ensure_topics); a typo must not create an empty topic.
            "allow_auto_create_topics": False,
            "session_timeout_ms": self.session_timeout_ms,
            "max_poll_interval_ms": self.max_poll_interval_ms,
            # The usual third of the session timeout, never above kafka-python's 3 s default.
            "heartbeat_interval_ms": min(3000, self.session_timeout_ms // 3),
        }

    def admin_kwargs(self) -> dict[str, Any]:
        return self.client_kwargs()


class BrokerUnreachableError(RuntimeError):
    """No bootstrap server completed a metadata request within `KafkaSettings.connect_timeout_s`."""


class _FirstFailure(logging.Handler):
    """The first connection failure kafka-python logs while it retries: its bootstrap error only says that
    time ran out, the log says why (refused, no answer, a closed connection). The first, because the last
    is often a request the deadline cut short."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.reason: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        from kafka.errors import KafkaTimeoutError

        args = record.args if isinstance(record.args, tuple) else ()
        failures = [a for a in args if isinstance(a, BaseException) and not isinstance(a, KafkaTimeoutError)]
        if self.reason is None and failures:
            self.reason = " ".join(str(failures[0]).split())


def check_reachable(settings: KafkaSettings) -> None:
    """Bootstrap an admin client as every client of these settings would (TCP, then TLS and SASL as
    configured, then a metadata request), giving up after `connect_timeout_s`. Commands call it before
    they load a model or touch a store. Raises `BrokerUnreachableError` naming the servers and the first
    failure seen."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    failures = _FirstFailure()
    kafka_log = logging.getLogger("kafka")
    kafka_log.addHandler(failures)
    try:
        admin = KafkaAdminClient(
            **settings.admin_kwargs(), bootstrap_timeout_ms=int(settings.connect_timeout_s * 1000)
        )
    except KafkaError as exc:
        reason = failures.reason or " ".join(str(exc).split())
        if settings.security_protocol != "PLAINTEXT":  # the broker closes the connection on a bad login
            reason += f"; {settings.security_protocol}"
            reason += f" as {settings.sasl_username}" if settings.sasl_username else ""
            reason += ": a refused login or TLS handshake fails the same way"
        raise BrokerUnreachableError(
            f"no Kafka broker answered at {settings.bootstrap_servers} within "
            f"{settings.connect_timeout_s:g} s ({reason})"
        ) from None
    finally:
        kafka_log.removeHandler(failures)
    admin.close()


def ensure_topics(settings: KafkaSettings, partitions: int = 3, timeout_s: float = 30.0) -> None:
    """Create the change and dead-letter topics if missing (idempotent), and wait until both have leaders.

    Existing topics are left as they are, whatever their partition count. The replication factor is the
    broker's `default.replication.factor` (-1), which production clusters set and a dev broker keeps at 1.
    """
    from kafka import KafkaAdminClient
    from kafka.errors import TopicAlreadyExistsError, for_code

    if partitions < 1:
        raise ValueError(f"partitions must be ≥ 1, got {partitions}")
    wanted = {
        settings.topic: {"num_partitions": partitions, "replication_factor": -1},
        settings.dlq_topic: {
            "num_partitions": 1,
            "replication_factor": -1,
            "configs": {"max.message.bytes": str(DLQ_MAX_MESSAGE_BYTES)},
        },
    }
    admin = KafkaAdminClient(**settings.admin_kwargs())
    try:
        result = admin.create_topics(wanted, timeout_ms=int(timeout_s * 1000), raise_errors=False)
        for topic in result["topics"]:
            error = for_code(topic["error_code"])
            if topic["error_code"] != 0 and error is not TopicAlreadyExistsError:
                raise error(f"creating topic {topic['name']!r}: {topic.get('error_message')}")
        admin.wait_for_topics(list(wanted), timeout_ms=int(timeout_s * 1000))
    finally:
        admin.close()


def records_in(settings: KafkaSettings, topic: str) -> int:
    """Records ever written to `topic` (its end offsets, summed over partitions; 0 if it does not exist)."""
    from kafka import KafkaConsumer, TopicPartition

    reader = KafkaConsumer(**settings.client_kwargs())
    try:
        parts = [TopicPartition(topic, p) for p in reader.partitions_for_topic(topic) or ()]
        return sum(reader.end_offsets(parts).values()) if parts else 0
    finally:
        reader.close()


def group_progress(settings: KafkaSettings, group_id: str) -> tuple[int, int]:
    """(records `group_id` has committed, records ever written) on the change topic: the group has caught
    up when they are equal. Nothing committed yet (or the coordinator still moving after a broker
    restart) counts as 0."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    end = records_in(settings, settings.topic)
    admin = KafkaAdminClient(**settings.admin_kwargs())
    try:
        offsets = admin.list_group_offsets({group_id: None})[group_id]
    except KafkaError:
        return 0, end
    finally:
        admin.close()
    return sum(meta.offset for meta in offsets.values() if meta.offset >= 0), end
