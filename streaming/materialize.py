"""Offline backfill: compress catalog items straight into the model's gist view, all or only the stale ones.

Stale = no live row in the model's view (missing or deleted there; a row whose fingerprint is not the
model's would be too). A rerun after an interruption resumes where it stopped. Rows are written at the
item's catalog version, so the store refuses them where the consumer has already written a newer one.

The consumer group is the one writer of a model's view while it runs, and the store serialises writes
within one process only: run `materialize` before starting the model's consumers (a bootstrap), not
beside them, or a consumer's newer row can be overwritten by the backfill's read-then-write of an older
version. A live backfill (a model rollout) is events through the topic: `gistrank publish` and the new
model's own consumer group (docs/deploy.md, "Scale-out").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from tqdm.auto import tqdm

from monitoring.metrics import ITEMS_TRUNCATED
from reranker.catalog.database import BATCH, Catalog, Item
from reranker.catalog.events import ItemFields
from reranker.core.render import content_hash, render_item
from reranker.store import GistRow, GistStore

if TYPE_CHECKING:
    from reranker.core.model import Reranker


@dataclass(frozen=True)
class MaterializeResult:
    scanned: int  # live catalog items looked at
    compressed: int  # items run through the model
    written: int  # rows the store took (the rest it already had, or had newer)


def _live_items(catalog: Catalog) -> int:
    with Session(catalog.engine) as session:
        return session.scalar(select(func.count()).select_from(Item).where(Item.deleted.is_(False))) or 0


def _chunks(items: Iterator[Item], size: int) -> Iterator[list[Item]]:
    chunk: list[Item] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def compress_rows(
    model: Reranker,
    items: Sequence[tuple[str, ItemFields, int]],
    batch_size: int = 16,
) -> list[GistRow]:
    """(item_id, fields, version) → store rows: render, compress in `batch_size` forwards, encode at the
    model's storage (`RerankerConfig.storage`: part of its store fingerprint, so every writer of one view
    encodes alike).

    The one place, shared by the consumer and the backfill, where item content becomes a K/V blob. The
    content hash is computed from the fields, never copied from elsewhere: a renderer change must show.
    """
    texts = [render_item(f.title, f.attributes, f.description) for _, f, _ in items]
    kvs = model.compress(texts, batch_size=batch_size)
    ITEMS_TRUNCATED.inc(sum(kv.truncated for kv in kvs))
    rows = []
    for (item_id, fields, version), kv in zip(items, kvs, strict=True):
        digest = content_hash(fields.title, fields.attributes, fields.description)
        rows.append(GistRow.encode(item_id, kv, digest, version, model.gist.storage))
    return rows


def materialize(
    catalog: Catalog,
    model: Reranker,
    store: GistStore,
    stale_only: bool = False,
    batch_size: int = 16,
    progress: bool = True,
) -> MaterializeResult:
    """Compress every live catalog item (or only the stale ones) in `batch_size` forwards and write them.

    Items are read, compared, compressed and written `database.BATCH` at a time, so memory stays bounded
    and a crash loses at most one chunk of work.
    """
    fingerprint = model.fingerprint
    scanned = compressed = written = 0
    with tqdm(total=_live_items(catalog), unit="item", desc="materialize", disable=not progress) as bar:
        for chunk in _chunks(catalog.iter_items(), BATCH):
            scanned += len(chunk)
            todo = chunk
            if stale_only:
                stored = store.stored_fingerprints([item.item_id for item in chunk])
                todo = [item for item in chunk if stored[item.item_id] != fingerprint]
            if todo:
                items = [(item.item_id, item.fields(), item.version) for item in todo]
                rows = compress_rows(model, items, batch_size)
                compressed += len(rows)
                written += len(store.write(rows).written)
            bar.update(scanned - bar.n)
            bar.set_postfix(compressed=compressed, written=written)
    return MaterializeResult(scanned=scanned, compressed=compressed, written=written)
