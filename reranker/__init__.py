"""GistRank reranker core: gist compression of items into per-layer K/V and online scoring against it.

Names are imported lazily: `reranker.core.render` and friends are used by processes (catalog, consumer
tooling) that should not pay for importing torch and transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reranker.core.config import GistConfig
    from reranker.core.errors import (
        EmptyInputError,
        FingerprintMismatchError,
        GistRankError,
        KVFormatError,
        QueryTooLongError,
    )
    from reranker.core.kv import GistKV
    from reranker.core.model import GistReranker

_WHERE = {
    "GistConfig": "reranker.core.config",
    "GistKV": "reranker.core.kv",
    "GistReranker": "reranker.core.model",
    "EmptyInputError": "reranker.core.errors",
    "FingerprintMismatchError": "reranker.core.errors",
    "GistRankError": "reranker.core.errors",
    "KVFormatError": "reranker.core.errors",
    "QueryTooLongError": "reranker.core.errors",
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
