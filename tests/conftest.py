"""Shared fixtures: tiny random bases (Llama, Qwen2) saved once per session, wrapped rerankers, and a
small catalog. Helpers that are not fixtures live in helpers.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers import CATALOG_ITEMS, CountingStore

from localservices.kafka_broker import KafkaBroker
from reranker import Reranker, RerankerConfig
from reranker.catalog.database import Catalog
from reranker.core.tiny_base import build_tiny_base

# two cores for the suite: each of `make test`'s two pytest-xdist workers computes on one, a lone run on both
torch.set_num_threads(max(1, 2 // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))


@pytest.fixture(scope="session")
def tiny_bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny_bases")
    return {arch: build_tiny_base(root / arch, arch) for arch in ("llama", "qwen2")}


@pytest.fixture(scope="session")
def tiny_base(tiny_bases: dict[str, Path]) -> Path:
    return tiny_bases["llama"]


@pytest.fixture(scope="session")
def tiny_model(tiny_base: Path) -> Reranker:
    """A tiny fp32 Llama Reranker with k=4 (read-only: do not train or modify it in a test)."""
    return Reranker.from_pretrained(tiny_base, RerankerConfig(num_gist=4, dtype="float32"), device="cpu")


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    """A fresh SQLite catalog holding `CATALOG_ITEMS`."""
    with Catalog(f"sqlite:///{tmp_path / 'catalog.db'}") as cat:
        for item_id, (title, attributes, description) in CATALOG_ITEMS.items():
            cat.upsert(item_id, title, attributes, description)
        yield cat


@pytest.fixture
def feast_store(tmp_path: Path, tiny_model: Reranker) -> CountingStore:
    """`tiny_model`'s real Feast store (SQLite online store) in `tmp_path`, applied and empty, counting its
    reads and writes."""
    store = CountingStore(tmp_path / "feast", fingerprint=tiny_model.fingerprint)
    store.apply()
    return store


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A real Kafka broker (scripts/kafka.sh) on a free 127.0.0.1 port, one per test module."""
    kafka = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    kafka.start()
    yield kafka
    kafka.stop()
