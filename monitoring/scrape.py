"""Read a Prometheus exposition endpoint into plain numbers (demos and benchmarks report from it)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple], float]


def scrape(url: str) -> Samples:
    """Every sample at `url`, keyed by (name, sorted label pairs)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample_sum(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples named `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))


def histogram_quantile(samples: Samples, name: str, q: float, **labels: str) -> float:
    """Histogram quantile as Prometheus computes it: linear inside the bucket that crosses q."""
    by_le: dict[float, float] = {}  # summed over the series that match (e.g. several model instances)
    for (n, lab), v in samples.items():
        if n == f"{name}_bucket" and set(labels.items()) <= set(lab):
            le = float(dict(lab)["le"])
            by_le[le] = by_le.get(le, 0.0) + v
    buckets = sorted(by_le.items())
    total = buckets[-1][1] if buckets else 0.0
    if total == 0:
        return float("nan")
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= q * total:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (q * total - prev_count) / max(count - prev_count, 1e-12)
        prev_le, prev_count = le, count
    return prev_le
