"""Per-candidate status strings returned beside each score (the STATUS output)."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    # where the candidate's gist K/V came from (the candidate has a score)
    L1 = "l1"  # the in-process cache
    FEAST = "feast"  # the Feast online store
    RECOMPUTE = "recompute"  # compressed from the catalog text during this request
    FULL = "full"  # scored by the full-context model (full_reranker only)
    # errors (the candidate's score is NaN; the other candidates are scored normally)
    UNKNOWN_ITEM = "unknown_item"  # not in the catalog (never existed or deleted)
    CATALOG_UNAVAILABLE = "catalog_unavailable"  # no cached K/V and the catalog could not be read
    RECOMPUTE_FAILED = "recompute_failed"  # the item's text could not be compressed

    @property
    def scored(self) -> bool:
        return self in _SCORED


_SCORED = frozenset({Status.L1, Status.FEAST, Status.RECOMPUTE, Status.FULL})
