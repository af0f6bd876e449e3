"""Prometheus metrics of the Triton reranker (`reranker/serving/`), exported from the model process.

Same conventions as `monitoring.metrics`: prefix `gistrank_`, base units (seconds), `_total` counters,
bounded label values only (never an item id). Kept in their own module so that the serving and the
consumer metrics can be edited independently; both register in prometheus-client's default registry.

Ratios are meant to be taken over rates, e.g.
    L1 hit rate      rate(gistrank_cache_hits_total{tier="l1"}[5m])
                       / (rate(gistrank_cache_hits_total{tier="l1"}[5m])
                          + rate(gistrank_cache_misses_total{tier="l1"}[5m]))
    shadow recall@K  rate(gistrank_shadow_topk_overlap_total{k="10"}[1h])
                       / rate(gistrank_shadow_topk_reference_total{k="10"}[1h])
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

TIERS = ("l1", "feast")
RECOMPUTE_REASONS = (
    "feast_miss",  # no live row for the item in the online store
    "feast_unavailable",  # the online store could not be read (or is switched off after a failure)
    "foreign_fingerprint",  # a row written by other model weights / gist config: never used
    "corrupt_blob",  # a row whose blob fails to decode or does not fit the model
    "no_feast",  # the server runs without an online store (feast_online = none)
)
CANDIDATE_ERRORS = ("unknown_item", "catalog_unavailable", "recompute_failed")
REFRESH_RESULTS = ("published", "failed", "dropped")
REQUEST_OUTCOMES = ("ok", "invalid", "error")
STAGES = ("fetch", "model", "total")
SHADOW_OUTCOMES = ("compared", "dropped", "failed")
SHADOW_KS = (1, 5, 10)

CACHE_HITS = Counter(
    "gistrank_cache_hits_total", "Item K/V lookups answered by a cache tier (per distinct item).", ["tier"]
)
CACHE_MISSES = Counter(
    "gistrank_cache_misses_total",
    "Item K/V lookups a cache tier could not answer (per distinct item); Feast misses include "
    "unavailable, foreign-fingerprint and corrupt rows.",
    ["tier"],
)
RECOMPUTES = Counter(
    "gistrank_recompute_fallbacks_total",
    "Catalog items compressed on the request path because no usable cached K/V existed, by reason.",
    ["reason"],
)
CANDIDATE_ERROR_COUNT = Counter(
    "gistrank_candidate_errors_total",
    "Candidates answered with an error status instead of a score.",
    ["code"],
)
REFRESH_REQUESTS = Counter(
    "gistrank_refresh_requests_total",
    "Recomputed items handed to the consumer group as refresh events on the change topic, by result "
    "(serving never writes the store itself).",
    ["result"],
)
L1_BYTES = Gauge("gistrank_l1_cache_bytes", "Bytes of decoded K/V held by the in-process L1 cache.")
L1_ENTRIES = Gauge("gistrank_l1_cache_entries", "Items held by the in-process L1 cache.")
L1_EVICTIONS = Counter(
    "gistrank_l1_cache_evictions_total", "L1 entries dropped to stay under the byte bound or expired."
)
REQUESTS = Counter("gistrank_rerank_requests_total", "Rerank requests, by outcome.", ["outcome"])
REQUEST_SECONDS = Histogram(
    "gistrank_rerank_request_duration_seconds",
    "Rerank request latency in the model process: fetch (L1/Feast/recompute), model (scoring), total.",
    ["stage"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
REQUEST_CANDIDATES = Histogram(
    "gistrank_rerank_request_candidates",
    "Candidates (item ids) per valid rerank request.",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
)
SHADOW_SAMPLED = Counter(
    "gistrank_shadow_sampled_total",
    "Requests chosen for shadow scoring; minus the outcomes below, the backlog still being compared.",
)
SHADOW_REQUESTS = Counter(
    "gistrank_shadow_requests_total",
    "Sampled requests by outcome: compared, failed (shadow model error) or dropped (backlog full).",
    ["outcome"],
)
SHADOW_OVERLAP = Counter(
    "gistrank_shadow_topk_overlap_total",
    "Sum over compared requests of |top-K by gist scores ∩ top-K by full-context scores|.",
    ["k"],
)
SHADOW_REFERENCE = Counter(
    "gistrank_shadow_topk_reference_total",
    "Sum over compared requests of min(K, scored candidates): the denominator of recall@K.",
    ["k"],
)

# Every label value exists from the start (at 0), so rate() and alerts see a series before its first event.
for _tier in TIERS:
    CACHE_HITS.labels(tier=_tier)
    CACHE_MISSES.labels(tier=_tier)
for _reason in RECOMPUTE_REASONS:
    RECOMPUTES.labels(reason=_reason)
for _code in CANDIDATE_ERRORS:
    CANDIDATE_ERROR_COUNT.labels(code=_code)
for _result in REFRESH_RESULTS:
    REFRESH_REQUESTS.labels(result=_result)
for _outcome in REQUEST_OUTCOMES:
    REQUESTS.labels(outcome=_outcome)
for _stage in STAGES:
    REQUEST_SECONDS.labels(stage=_stage)
for _outcome in SHADOW_OUTCOMES:
    SHADOW_REQUESTS.labels(outcome=_outcome)
for _k in SHADOW_KS:
    SHADOW_OVERLAP.labels(k=str(_k))
    SHADOW_REFERENCE.labels(k=str(_k))
