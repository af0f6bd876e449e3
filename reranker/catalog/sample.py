"""The bundled sample catalog (a small product catalog in `Catalog.load_jsonl`'s format) and the queries
written for it, shipped as package data: what the demo, the serving benchmark and the tests load."""

from __future__ import annotations

import json
from importlib.resources import files
from importlib.resources.abc import Traversable

SAMPLE_CATALOG: Traversable = files("reranker.catalog").joinpath("data/sample_catalog.jsonl")
SAMPLE_QUERIES: Traversable = files("reranker.catalog").joinpath("data/sample_queries.txt")


def sample_catalog() -> list[dict]:
    """The sample catalog's items: dicts with item_id, title, attributes, description."""
    text = SAMPLE_CATALOG.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def sample_queries() -> list[str]:
    text = SAMPLE_QUERIES.read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip()]
