"""What a row of a model's view holds (`GistRow`), the rule that decides which of two versions of an
item's row wins (`RowVersion.supersedes`, applied by `GistStore` and inside the fenced online stores of
`write_fence.py`), and what a write or a coverage check reports."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reranker.core.kv import StoredUnit


@dataclass(frozen=True)
class GistRow:
    """One item's stored gist K/V: `kv` is `reranker.core.kv_codec.encode` output, stored byte for byte."""

    item_id: str
    kv: bytes
    fingerprint: str
    num_gist: int
    item_tokens: int
    content_hash: str
    version: int

    def __post_init__(self) -> None:
        # Empty kv / fingerprint is what a tombstone holds; a live row with them would be unusable anyway.
        if not self.item_id or not self.kv or not self.fingerprint or not self.content_hash:
            raise ValueError(
                f"GistRow {self.item_id!r}: item_id, kv, fingerprint and content_hash are required"
            )
        if self.version < 0 or self.num_gist < 0 or self.item_tokens < 0:
            raise ValueError(f"GistRow {self.item_id!r}: version, num_gist and item_tokens must be >= 0")

    @classmethod
    def encode(
        cls, item_id: str, kv: StoredUnit, content_hash: str, version: int, storage_dtype: str | None = None
    ) -> GistRow:
        """The row for compressed `kv`, its K/V stored as `storage_dtype` (the writing model's
        `RerankerConfig.storage`; None: the K/V's own dtype): the one place (consumer, backfill) where K/V
        becomes stored bytes, so the columns always describe the blob."""
        from reranker.core import kv_codec  # torch, only for callers that hold K/V anyway

        return cls(
            item_id=item_id,
            kv=kv_codec.encode(kv, content_hash, storage_dtype),
            fingerprint=kv.fingerprint,
            num_gist=kv.tail_slots,
            item_tokens=kv.item_tokens,
            content_hash=content_hash,
            version=version,
        )


@dataclass(frozen=True)
class WriteResult:
    """Item ids of the input rows, in input order: each row is either written or skipped.

    Skipped means the stored row (or a later row of the same batch for that item) already wins, so there
    is nothing left to do for it: the consumer may commit either way.
    """

    written: tuple[str, ...]
    skipped: tuple[str, ...]


@dataclass(frozen=True)
class RowVersion:
    """What the winning rule compares: a row as stored or written, live or tombstone."""

    version: int
    deleted: bool
    fingerprint: str = ""
    content_hash: str = ""
    kv: bytes = b""

    def supersedes(self, stored: RowVersion | None) -> bool:
        if stored is None:
            return True
        if self.version != stored.version:
            return self.version > stored.version
        if stored.deleted:
            return False  # a delete is final for its version: a redelivered upsert must not undo it
        if self.deleted:
            return True
        return self.digest() != stored.digest()

    def digest(self) -> str:
        """The content compared at equal versions, as a string a Redis script can compare ('' if deleted)."""
        if self.deleted:
            return ""
        h = hashlib.sha256()
        for part in (self.fingerprint.encode(), self.content_hash.encode(), self.kv):
            h.update(len(part).to_bytes(8, "big") + part)
        return h.hexdigest()

    def fence(self) -> str:
        """The rule's inputs as one string for the Redis fence field (`write_fence`): the version zero-padded
        so that string order is numeric order (Lua numbers are exact only below 2**53)."""
        return f"{self.version:020d}|{int(self.deleted)}|{self.digest()}"

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> RowVersion:
        """From a row's column values (None where a column is missing)."""
        return cls(
            int(values["version"]),
            bool(values["deleted"]),
            values["fingerprint"] or "",
            values["content_hash"] or "",
            values["kv"] or b"",
        )


@dataclass(frozen=True)
class Coverage:
    """How many live catalog items have a current row (the catalog's version) in one model's view."""

    fingerprint: str
    items: int  # live catalog items looked at
    current: int  # rows at the item's catalog version
    behind: int  # rows at an older version (the consumer has not caught up with a change yet)

    @property
    def ratio(self) -> float:
        return self.current / self.items if self.items else 1.0
