"""Prometheus metrics of GistRank (prefix `gistrank_`, base units, `_total` counters, no item-id labels)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

ITEMS_TRUNCATED = Counter(
    "gistrank_items_truncated_total",
    "Items longer than max_item_tokens whose text was truncated before compression.",
)

# ------------------------------------------------------------------------- Kafka consumer / publisher
# Bounded label values only. `reason` of a dead-lettered event is one of DEAD_LETTER_REASONS, `reason` of a
# skipped event one of SKIP_REASONS, `reason` of a group rejoin one of REJOIN_REASONS; items/s is
# rate(gistrank_consumer_items_compressed_total[1m]).
DEAD_LETTER_REASONS = (
    "tombstone",  # record without a value
    "oversized",  # value over events.MAX_EVENT_BYTES
    "invalid_utf8",
    "invalid_json",  # not JSON, or JSON but not an object
    "bad_key",  # key missing, not UTF-8, or not the event's item_id
    "schema",  # JSON object failing the event schema (missing field, unknown op, wrong type, too long)
    "compress_failed",  # valid event whose item could not be compressed or encoded
    "not_in_catalog",  # the catalog (source of truth, when the consumer is given it) has no such item
    "ahead_of_catalog",  # a version the catalog has not reached
    "catalog_mismatch",  # at the catalog's version, other content or the other op (upsert vs delete)
)
SKIP_REASONS = (
    "superseded",  # a newer version of the same item came in the same batch
    "stale",  # the store already holds this version or a newer one
    "unchanged",  # same content hash and fingerprint as stored: version bumped, no recompression
)
REJOIN_REASONS = (
    "lost_rebalance",  # the client stayed "rebalancing" without partitions (streaming/consumer.py)
    "stalled_partition",  # polls came back empty while an assigned partition was behind its end
)

CONSUMER_EVENTS = Counter(
    "gistrank_consumer_events_total",
    "Change-topic records consumed (valid or not), counted once per delivery.",
)
CONSUMER_COMPRESSED = Counter(
    "gistrank_consumer_items_compressed_total",
    "Items run through the model by the consumer (a few may then be refused by the store as stale).",
)
CONSUMER_DELETED = Counter(
    "gistrank_consumer_items_deleted_total",
    "Delete events applied to the feature store (tombstones written).",
)
CONSUMER_SKIPPED = Counter(
    "gistrank_consumer_events_skipped_total",
    "Valid events that needed no compression, by reason.",
    ["reason"],
)
CONSUMER_DEAD_LETTERED = Counter(
    "gistrank_consumer_events_dead_lettered_total",
    "Events sent to the dead-letter topic (acknowledged by the broker), by reason.",
    ["reason"],
)
CONSUMER_BATCH_SECONDS = Histogram(
    "gistrank_consumer_batch_duration_seconds",
    "Wall time of one consumer batch: validate, compress, write, dead-letter, commit.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
CONSUMER_BATCH_RETRIES = Counter(
    "gistrank_consumer_batch_retries_total",
    "Batches rewound and retried because the feature store, the catalog, the dead-letter produce or the "
    "commit failed, or compression ran out of memory.",
)
CONSUMER_REJOINS = Counter(
    "gistrank_consumer_rejoins_total",
    "Times the consumer left and rejoined its group because the Kafka client stopped consuming, by "
    "reason: lost_rebalance, stalled_partition.",
    ["reason"],
)
CONSUMER_LAG = Gauge(
    "gistrank_consumer_lag_records",
    "Records behind the partition's high watermark, per assigned partition.",
    ["topic", "partition"],
)
EVENTS_PUBLISHED = Counter(
    "gistrank_publisher_events_total",
    "Change events acknowledged by the broker (acks=all), by op.",
    ["op"],
)
# Every label value exists from the start (at 0), so rate() and alerts see a series before its first event.
for _reason in DEAD_LETTER_REASONS:
    CONSUMER_DEAD_LETTERED.labels(reason=_reason)
for _reason in SKIP_REASONS:
    CONSUMER_SKIPPED.labels(reason=_reason)
for _reason in REJOIN_REASONS:
    CONSUMER_REJOINS.labels(reason=_reason)
for _op in ("upsert", "delete"):
    EVENTS_PUBLISHED.labels(op=_op)
