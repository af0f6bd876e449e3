"""GistRank reranker core: gist compression of items into per-layer K/V and online scoring against it."""

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
