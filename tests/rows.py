"""Store rows for catalog items, for tests that fill a Feast store (real or fake) by hand."""

from __future__ import annotations

import dataclasses

from reranker.core.kv import GistKV
from reranker.store import GistRow
from streaming.catalog import Catalog


def catalog_row(catalog: Catalog, item_id: str, kv: GistKV, blob: bytes | None = None) -> GistRow:
    """`item_id`'s row holding `kv`, under the item's current content hash and version.

    `blob` is stored in place of the encoded `kv`: a damaged or foreign blob behind truthful columns.
    """
    item = catalog.get([item_id])[item_id]
    row = GistRow.encode(item_id, kv, item.content_hash, item.version)
    return row if blob is None else dataclasses.replace(row, kv=blob)
