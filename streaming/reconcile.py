"""After the catalog was restored from a backup: store rows ahead of the catalog, and their repair.

The catalog hands out versions from one counter. Restored from a backup, the counter goes back, while the
store keeps rows at the versions issued after the backup — for content the catalog no longer has, or
deletions it never saw. Those rows beat every later change of their items (the version rule), so the
catalog's updates would be dropped for them until its counter passed them again.

`reconcile` finds every item whose row, in any model's view, is at a version above the catalog's, moves
the catalog's counter past every stored version, and gives each such item a new version with the
catalog's content (`Catalog.restamp_past`); published, those events put the catalog's state back in every
view, and every later change gets a version above anything stored. Run it once after a restore, before
the catalog takes new writes: `gistrank catalog reconcile`.
"""

from __future__ import annotations

from dataclasses import dataclass

from reranker.catalog.database import Catalog
from reranker.catalog.events import ChangeEvent
from reranker.store import GistStore


@dataclass(frozen=True)
class Reconciled:
    checked: int  # catalog items looked at (live and deleted)
    ahead: dict[str, int]  # item id → the highest stored version above the catalog's
    events: list[ChangeEvent]  # the restamped items' events, to publish


def reconcile(catalog: Catalog, store: GistStore, batch: int = 1000) -> Reconciled:
    """Compare every catalog item with its rows in every view of `store`'s registry; restamp the items
    whose rows are ahead (module docstring)."""
    views = [store.for_model(v) if v != store.fingerprint else store for v in store.views()]
    ids = [event.item_id for event in catalog.events()]
    ahead: dict[str, int] = {}
    for start in range(0, len(ids), batch):
        chunk = ids[start : start + batch]
        states = catalog.states(chunk)
        for view in views:
            for item_id, version in view.versions(chunk).items():
                if version > states[item_id].version:
                    ahead[item_id] = max(version, ahead.get(item_id, 0))
    events = catalog.restamp_past(ahead) if ahead else []
    return Reconciled(len(ids), ahead, events)
