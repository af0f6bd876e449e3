"""Typed errors of the reranker core.

Every error a caller can cause is a `GistRankError` (a `ValueError`), so services can turn bad
input into a precise per-request or per-candidate message without catching bugs by accident.
"""

from __future__ import annotations


class GistRankError(ValueError):
    """Base class for errors caused by the caller's input."""


def one_line(exc: BaseException) -> str:
    """An error as one line for a user: pydantic's multi-line report (with its docs links) becomes
    "field: message (got value)", joined by "; "; other messages have their whitespace collapsed."""
    errors = getattr(exc, "errors", None)
    if callable(errors) and type(exc).__name__ == "ValidationError":
        return "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']} (got {e.get('input')!r})"
            for e in errors()
        )
    return " ".join(str(exc).split()) or type(exc).__name__


class EmptyInputError(GistRankError):
    """An empty query, an empty item text, or an empty candidate list."""


class QueryTooLongError(GistRankError):
    """The query has more tokens than `RerankerConfig.max_query_tokens` (queries are never truncated)."""

    def __init__(self, n_tokens: int, limit: int) -> None:
        super().__init__(f"query has {n_tokens} tokens, over the limit max_query_tokens={limit}")
        self.n_tokens = n_tokens
        self.limit = limit


class FingerprintMismatchError(GistRankError):
    """Gist K/V produced by other model weights or another gist config: using it would be silently wrong."""

    def __init__(self, expected: str, got: str, index: int | None = None) -> None:
        where = f" (candidate {index})" if index is not None else ""
        super().__init__(
            f"fingerprint mismatch{where}: K/V was compressed by model {got!r}, this model is {expected!r}"
        )
        self.expected = expected
        self.got = got
        self.index = index


class KVFormatError(GistRankError):
    """Gist K/V whose shape, dtype or position data does not fit this model."""
