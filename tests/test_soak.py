"""`gistrank soak` end to end at a small size: a real broker killed mid-stream, consumer processes killed
and joining, a serving replica reading, a live gc attempt; every store row must equal the catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from reranker.bench.soak import SoakConfig, run_soak

pytestmark = [pytest.mark.chaos, pytest.mark.kafka]


def test_a_small_soak_loses_nothing_leaves_nothing_stale_and_resurrects_nothing(tmp_path: Path) -> None:
    config = SoakConfig(
        events=600, items=60, consumers=2, partitions=4, consumer_kills=1, broker_kills=1, produce_s=15
    )
    report = run_soak(config, tmp_path / "soak", say=lambda _: None)
    assert report.events == 600 and report.upserts > 0 and report.deletes > 0
    assert (report.consumer_kills, report.broker_kills, report.consumers_joined) == (1, 1, 1)
    assert report.served_reads > 0 and report.gc_refused
    assert report.live > 0 and report.items > report.live  # some items end deleted
    assert (report.lost, report.stale, report.resurrected, report.dead_letters) == ([], [], [], 0)
