"""Prometheus metrics of GistRank (prefix `gistrank_`, base units, `_total` counters, no item-id labels)."""

from __future__ import annotations

from prometheus_client import Counter

ITEMS_TRUNCATED = Counter(
    "gistrank_items_truncated_total",
    "Items longer than max_item_tokens whose text was truncated before compression.",
)
