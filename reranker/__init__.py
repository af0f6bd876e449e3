"""GistRank's core API: items compressed into the per-layer K/V of a fixed budget of positions (the stored
unit), and a reranker that scores a query against stored units.

Names are imported lazily: `reranker.core.render` and friends are used by processes (catalog, consumer
tooling) that should not pay for importing torch and transformers.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reranker.core.config import RerankerConfig
    from reranker.core.errors import (
        EmptyInputError,
        FingerprintMismatchError,
        GistRankError,
        KVFormatError,
        QueryTooLongError,
    )
    from reranker.core.kv import StoredUnit
    from reranker.core.model import Reranker

_WHERE = {
    "RerankerConfig": "reranker.core.config",
    "StoredUnit": "reranker.core.kv",
    "Reranker": "reranker.core.model",
    "EmptyInputError": "reranker.core.errors",
    "FingerprintMismatchError": "reranker.core.errors",
    "GistRankError": "reranker.core.errors",
    "KVFormatError": "reranker.core.errors",
    "QueryTooLongError": "reranker.core.errors",
}
__all__ = [
    "EmptyInputError",
    "FingerprintMismatchError",
    "GistRankError",
    "KVFormatError",
    "QueryTooLongError",
    "Reranker",
    "RerankerConfig",
    "StoredUnit",
]


# names from the project's first idea (every stored unit was gists then), still importable for a release
_RENAMED = {"GistReranker": "Reranker", "GistConfig": "RerankerConfig", "GistKV": "StoredUnit"}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        new = _RENAMED[name]
        warnings.warn(f"reranker.{name} is now reranker.{new}", DeprecationWarning, stacklevel=2)
        name = new
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'reranker' has no attribute {name!r}")
