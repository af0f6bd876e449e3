"""Dead letters back onto the change topic: `gistrank dlq replay`.

A dead-letter record keeps the original key, value and headers losslessly (`streaming.consumer`), so a
letter whose cause is gone — the producer fixed, the catalog caught up (`ahead_of_catalog` from a
lagging replica), a model that can now compress the item — is replayed by sending those bytes to the
change topic again, with a `gistrank-replayed-from` header naming the letter. The consumer checks the
replayed event like any other; at worst it is dead-lettered again, and the version rules make a
duplicate harmless.

The letters read are those up to the dead-letter topic's end when the replay starts, from
`since_offset` on, so letters that the replay itself causes are not read again in the same run. A dry run
(the default) only counts them by reason.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from kafka import KafkaConsumer, KafkaProducer
from kafka.consumer.fetcher import ConsumerRecord
from kafka.structs import TopicPartition

from reranker.catalog.kafka_settings import KafkaSettings
from streaming.consumer import payload_bytes

REPLAYED_FROM = "gistrank-replayed-from"  # header: "<dlq topic>[<partition>]@<offset>"


@dataclass
class ReplayReport:
    read: int = 0  # letters read (from since_offset up to the end at the start)
    matched: Counter[str] = field(default_factory=Counter)  # by reason code: letters the filter selects
    replayed: int = 0  # sent to the change topic (0 in a dry run)
    truncated: int = 0  # matched but unreplayable: the letter kept only a prefix of the record
    next_offset: dict[int, int] = field(default_factory=dict)  # per partition: where a later run resumes


def replay(
    settings: KafkaSettings,
    reasons: set[str] | None = None,
    apply: bool = False,
    since_offset: int = 0,
    timeout_s: float = 30.0,
) -> ReplayReport:
    """Replay the dead letters with a reason code in `reasons` (every code when None); see the module
    docstring. Raises `ValueError` for a malformed letter (not written by this project's consumer)."""
    report = ReplayReport()
    producer = KafkaProducer(**settings.producer_kwargs()) if apply else None
    try:
        for letter in _letters(settings, since_offset, timeout_s, report):
            report.read += 1
            body = _body(letter)
            if reasons is not None and body["reason_code"] not in reasons:
                continue
            report.matched[body["reason_code"]] += 1
            payloads = [body["key"], body["value"], *(h for _, h in body["headers"])]
            if any(p is not None and p.get("truncated") for p in payloads):
                report.truncated += 1
                continue
            if producer is not None:
                origin = f"{letter.topic}[{letter.partition}]@{letter.offset}".encode()
                headers = [(name, payload_bytes(h) or b"") for name, h in body["headers"]]
                producer.send(
                    settings.topic,
                    key=payload_bytes(body["key"]),
                    value=payload_bytes(body["value"]),
                    headers=[*headers, (REPLAYED_FROM, origin)],
                )
                report.replayed += 1
        if producer is not None:
            producer.flush(timeout=timeout_s)
    finally:
        if producer is not None:
            producer.close(timeout=timeout_s)
    return report


def _letters(
    settings: KafkaSettings, since_offset: int, timeout_s: float, report: ReplayReport
) -> Iterator[ConsumerRecord]:
    reader = KafkaConsumer(**settings.client_kwargs(), enable_auto_commit=False)
    try:
        partitions = [
            TopicPartition(settings.dlq_topic, p)
            for p in sorted(reader.partitions_for_topic(settings.dlq_topic) or ())
        ]
        if not partitions:
            raise ValueError(f"dead-letter topic {settings.dlq_topic!r} does not exist")
        reader.assign(partitions)
        end = reader.end_offsets(partitions)
        for tp in partitions:
            reader.seek(tp, min(max(since_offset, reader.beginning_offsets([tp])[tp]), end[tp]))
            report.next_offset[tp.partition] = end[tp]
        deadline = time.monotonic() + timeout_s
        while any(reader.position(tp) < end[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {settings.dlq_topic} within {timeout_s:.0f} s")
            for batch in reader.poll(timeout_ms=500).values():
                yield from (r for r in batch if r.offset < end[TopicPartition(r.topic, r.partition)])
    finally:
        reader.close()


_FIELDS = {"reason_code", "key", "value", "headers"}


def _body(letter: ConsumerRecord) -> dict:
    where = f"{letter.topic}[{letter.partition}]@{letter.offset}"
    try:
        body = json.loads(letter.value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where} is not a GistRank dead letter: {exc}") from None
    missing = sorted(_FIELDS - set(body)) if isinstance(body, dict) else sorted(_FIELDS)
    if missing:
        raise ValueError(f"{where} is not a GistRank dead letter: it lacks {missing}")
    return body
