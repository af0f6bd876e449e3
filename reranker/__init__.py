"""GistRank reranker core: gist compression of items into per-layer K/V and online scoring against it.

Names are imported lazily: `reranker.render` and friends are used by processes (catalog, consumer
tooling) that should not pay for importing torch and transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reranker.config import GistConfig
    from reranker.errors import (
        EmptyInputError,
        FingerprintMismatchError,
        GistRankError,
        KVFormatError,
        QueryTooLongError,
    )
    from reranker.kv import GistKV
    from reranker.model import GistReranker

_WHERE = {
    "GistConfig": "reranker.config",
    "GistKV": "reranker.kv",
    "GistReranker": "reranker.model",
    "EmptyInputError": "reranker.errors",
    "FingerprintMismatchError": "reranker.errors",
    "GistRankError": "reranker.errors",
    "KVFormatError": "reranker.errors",
    "QueryTooLongError": "reranker.errors",
}
__all__ = [
    "EmptyInputError",
    "FingerprintMismatchError",
    "GistConfig",
    "GistKV",
    "GistRankError",
    "GistReranker",
    "KVFormatError",
    "QueryTooLongError",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'reranker' has no attribute {name!r}")
