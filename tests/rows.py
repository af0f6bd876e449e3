"""Store rows for catalog items, for tests that fill a Feast store (real or fake) by hand."""

from __future__ import annotations

from reranker import kv_codec
from reranker.kv import GistKV
from streaming.catalog import Catalog
from streaming.gist_store import GistRow


def catalog_row(catalog: Catalog, item_id: str, kv: GistKV, blob: bytes | None = None) -> GistRow:
    """`item_id`'s row holding `kv`, under the item's current content hash and version.

    `blob` is stored in place of the encoded `kv`: a damaged or foreign blob behind truthful columns.
    """
    item = catalog.get([item_id])[item_id]
    return GistRow(
        item_id=item_id,
        kv=blob if blob is not None else kv_codec.encode(kv, item.content_hash),
        fingerprint=kv.fingerprint,
        num_gist=kv.num_gist,
        item_tokens=kv.item_tokens,
        content_hash=item.content_hash,
        version=item.version,
    )
