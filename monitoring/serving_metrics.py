"""Metrics of the Triton reranker (`reranker/serving/`): where they are declared and where they go.

Inside a Triton model process (`export_through_triton`, called by each model's `initialize`) every
metric goes through Triton's own metric API (the Python backend's `pb_utils.MetricFamily`), so it is
served on Triton's metrics endpoint beside `nv_inference_*`, labelled `model_instance` with the model
instance that counted it: any `instance_group` count works, and the L1 gauges and hit counts are per
instance. Everywhere else (unit tests, in-process benchmarks) they are prometheus-client metrics in its
default registry, the same names and labels without `model_instance`.

Same conventions as `monitoring.metrics`: prefix `gistrank_`, base units (seconds), `_total` counters,
bounded label values only (never an item id).

Ratios are meant to be taken over rates, summed over instances, e.g.
    L1 hit rate      sum(rate(gistrank_cache_hits_total{tier="l1"}[5m]))
                       / (sum(rate(gistrank_cache_hits_total{tier="l1"}[5m]))
                          + sum(rate(gistrank_cache_misses_total{tier="l1"}[5m])))
    shadow recall@K  sum(rate(gistrank_shadow_topk_overlap_total{k="10"}[1h]))
                       / sum(rate(gistrank_shadow_topk_reference_total{k="10"}[1h]))
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Literal

from prometheus_client import Counter, Gauge, Histogram

from monitoring import metrics as consumer_metrics

Kind = Literal["counter", "gauge", "histogram"]
INSTANCE_LABEL = "model_instance"


class _Child:
    """One labelled series: a prometheus-client child, or a Triton `Metric`."""

    def __init__(self, series: Any, triton: bool) -> None:
        self._series = series
        self._triton = triton

    def inc(self, amount: float = 1.0) -> None:
        if self._triton:
            self._series.increment(float(amount))
        else:
            self._series.inc(amount)

    def set(self, value: float) -> None:
        self._series.set(float(value))

    def observe(self, value: float) -> None:
        self._series.observe(float(value))


class ServingMetric:
    """A metric with prometheus-client's interface (`labels(...)`, `inc`, `set`, `observe`) whose series
    live in prometheus-client or, after `export_through_triton`, in Triton (module docstring)."""

    def __init__(
        self,
        kind: Kind,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] | None = None,
        default: Any = None,
    ) -> None:
        self.kind, self.name, self.documentation = kind, name, documentation
        self.labelnames = tuple(labelnames)
        self.buckets = list(buckets) if buckets is not None else None
        if default is None:  # `default`: an existing prometheus-client metric of the same name to use
            extra = {"buckets": self.buckets} if self.buckets is not None else {}
            default = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}[kind](
                name, documentation, self.labelnames, **extra
            )
        self._default = default
        self._family: Any = None
        self._instance = ""
        self._children: dict[tuple[str, ...], _Child] = {}
        self._lock = threading.Lock()

    def labels(self, **labels: str) -> _Child:
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {sorted(labels)}")
        key = tuple(str(labels[n]) for n in self.labelnames)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self._child(dict(zip(self.labelnames, key, strict=True)))
            return child

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)

    def set(self, value: float) -> None:
        self.labels().set(value)

    def observe(self, value: float) -> None:
        self.labels().observe(value)

    def _child(self, labels: dict[str, str]) -> _Child:
        if self._family is None:
            return _Child(self._default.labels(**labels) if labels else self._default, False)
        labels = {**labels, INSTANCE_LABEL: self._instance}
        extra = {"buckets": self.buckets} if self.kind == "histogram" else {}
        return _Child(self._family.Metric(labels=labels, **extra), True)

    def use_triton(self, pb_utils: Any, instance: str) -> None:
        kind = {
            "counter": pb_utils.MetricFamily.COUNTER,
            "gauge": pb_utils.MetricFamily.GAUGE,
            "histogram": pb_utils.MetricFamily.HISTOGRAM,
        }[self.kind]
        with self._lock:
            self._family = pb_utils.MetricFamily(name=self.name, description=self.documentation, kind=kind)
            self._instance = instance
            self._children.clear()


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
FIRST_STAGE = ("given", "absent")
SHADOW_OUTCOMES = ("compared", "dropped", "failed")
SHADOW_KS = (1, 5, 10)

CACHE_HITS = ServingMetric(
    "counter",
    "gistrank_cache_hits_total",
    "Item K/V lookups answered by a cache tier (per distinct item).",
    ["tier"],
)
CACHE_MISSES = ServingMetric(
    "counter",
    "gistrank_cache_misses_total",
    "Item K/V lookups a cache tier could not answer (per distinct item); Feast misses include "
    "unavailable, foreign-fingerprint and corrupt rows.",
    ["tier"],
)
RECOMPUTES = ServingMetric(
    "counter",
    "gistrank_recompute_fallbacks_total",
    "Catalog items compressed on the request path because no usable cached K/V existed, by reason.",
    ["reason"],
)
CANDIDATE_ERROR_COUNT = ServingMetric(
    "counter",
    "gistrank_candidate_errors_total",
    "Candidates answered with an error status instead of a score.",
    ["code"],
)
REFRESH_REQUESTS = ServingMetric(
    "counter",
    "gistrank_refresh_requests_total",
    "Recomputed items handed to the consumer group as refresh events on the change topic, by result "
    "(serving never writes the store itself).",
    ["result"],
)
L1_BYTES = ServingMetric(
    "gauge", "gistrank_l1_cache_bytes", "Bytes of decoded K/V held by the in-process L1 cache."
)
L1_ENTRIES = ServingMetric("gauge", "gistrank_l1_cache_entries", "Items held by the in-process L1 cache.")
L1_EVICTIONS = ServingMetric(
    "counter",
    "gistrank_l1_cache_evictions_total",
    "L1 entries dropped to stay under the byte bound or expired.",
)
REQUESTS = ServingMetric(
    "counter", "gistrank_rerank_requests_total", "Rerank requests, by outcome.", ["outcome"]
)
FIRST_STAGE_REQUESTS = ServingMetric(
    "counter",
    "gistrank_rerank_first_stage_requests_total",
    "Valid rerank requests by whether they brought first-stage scores (given: SCORES fused with them) "
    "or not (absent: SCORES are the reranker's).",
    ["first_stage"],
)
REQUEST_SECONDS = ServingMetric(
    "histogram",
    "gistrank_rerank_request_duration_seconds",
    "Rerank request latency in the model process: fetch (L1/Feast/recompute), model (scoring), total.",
    ["stage"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
REQUEST_CANDIDATES = ServingMetric(
    "histogram",
    "gistrank_rerank_request_candidates",
    "Candidates (item ids) per valid rerank request.",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000),
)
SHADOW_SAMPLED = ServingMetric(
    "counter",
    "gistrank_shadow_sampled_total",
    "Requests chosen for shadow scoring; minus the outcomes below, the backlog still being compared.",
)
SHADOW_REQUESTS = ServingMetric(
    "counter",
    "gistrank_shadow_requests_total",
    "Sampled requests by outcome: compared, failed (shadow model error) or dropped (backlog full).",
    ["outcome"],
)
SHADOW_OVERLAP = ServingMetric(
    "counter",
    "gistrank_shadow_topk_overlap_total",
    "Sum over compared requests of |top-K by gist scores ∩ top-K by full-context scores|.",
    ["k"],
)
SHADOW_REFERENCE = ServingMetric(
    "counter",
    "gistrank_shadow_topk_reference_total",
    "Sum over compared requests of min(K, scored candidates): the denominator of recall@K.",
    ["k"],
)
SHADOW_FUSED_OVERLAP = ServingMetric(
    "counter",
    "gistrank_shadow_fused_topk_overlap_total",
    "Over compared requests that brought first-stage scores: sum of |top-K of the served (fused) ranking "
    "∩ top-K of the full-context scores fused with the same first-stage scores by the same rule|.",
    ["k"],
)
SHADOW_FUSED_REFERENCE = ServingMetric(
    "counter",
    "gistrank_shadow_fused_topk_reference_total",
    "Over compared requests that brought first-stage scores: sum of min(K, scored candidates).",
    ["k"],
)

ITEMS_TRUNCATED = ServingMetric(
    "counter",
    "gistrank_items_truncated_total",
    "Items longer than max_item_tokens whose text was truncated before compression.",
    default=consumer_metrics.ITEMS_TRUNCATED,  # the consumer counts the same thing in its own process
)
_ALL = (
    CACHE_HITS,
    CACHE_MISSES,
    RECOMPUTES,
    CANDIDATE_ERROR_COUNT,
    REFRESH_REQUESTS,
    L1_BYTES,
    L1_ENTRIES,
    L1_EVICTIONS,
    REQUESTS,
    FIRST_STAGE_REQUESTS,
    REQUEST_SECONDS,
    REQUEST_CANDIDATES,
    SHADOW_SAMPLED,
    SHADOW_REQUESTS,
    SHADOW_OVERLAP,
    SHADOW_REFERENCE,
    SHADOW_FUSED_OVERLAP,
    SHADOW_FUSED_REFERENCE,
    ITEMS_TRUNCATED,
)


def _declare_series() -> None:
    """Every label value exists from the start (at 0), so rate() and alerts see a series before its
    first event."""
    for metric in (L1_BYTES, L1_ENTRIES, L1_EVICTIONS, REQUEST_CANDIDATES, SHADOW_SAMPLED, ITEMS_TRUNCATED):
        metric.labels()
    for tier in TIERS:
        CACHE_HITS.labels(tier=tier)
        CACHE_MISSES.labels(tier=tier)
    for reason in RECOMPUTE_REASONS:
        RECOMPUTES.labels(reason=reason)
    for code in CANDIDATE_ERRORS:
        CANDIDATE_ERROR_COUNT.labels(code=code)
    for result in REFRESH_RESULTS:
        REFRESH_REQUESTS.labels(result=result)
    for outcome in REQUEST_OUTCOMES:
        REQUESTS.labels(outcome=outcome)
    for given in FIRST_STAGE:
        FIRST_STAGE_REQUESTS.labels(first_stage=given)
    for stage in STAGES:
        REQUEST_SECONDS.labels(stage=stage)
    for outcome in SHADOW_OUTCOMES:
        SHADOW_REQUESTS.labels(outcome=outcome)
    for k in SHADOW_KS:
        SHADOW_OVERLAP.labels(k=str(k))
        SHADOW_REFERENCE.labels(k=str(k))
        SHADOW_FUSED_OVERLAP.labels(k=str(k))
        SHADOW_FUSED_REFERENCE.labels(k=str(k))


def export_through_triton(pb_utils: Any, model_instance: str) -> None:
    """Send every serving metric of this process to Triton's metrics endpoint, labelled with
    `model_instance` (a Triton model's `args["model_instance_name"]`); call once, in `initialize`."""
    for metric in _ALL:
        metric.use_triton(pb_utils, model_instance)
    _declare_series()


_declare_series()
