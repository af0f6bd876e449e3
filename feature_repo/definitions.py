"""Feast objects for the gist K/V store: entity `item`, and per model fingerprint FP a push source
`item_gist_FP_push` and a feature view `item_gist_FP` (tagged with FP).

One view per model fingerprint is what makes a model rollout safe: a new model backfills its own view
beside the live one, each serving replica reads its own model's view, and the old view is dropped once no
replica reads it (`reranker/store/`, `gistrank rollout`). In a view, one row per item holds its
serialized gist K/V (`reranker.core.kv_codec` bytes) and the metadata needed to
decide, without decoding, whether the row is current: model fingerprint, content hash, catalog version.
A delete is a tombstone row (`deleted=True`, empty `kv`): Feast 0.49's online stores have no per-entity
delete, and the tombstone's version is what stops a stale upsert arriving after the delete from
resurrecting the item (see `reranker/store/`).

`feast apply` executes every .py file in this folder, so this must stay the only one; the application
loads it by path and calls `build_definitions` with its own data dir and its model's fingerprint. Run on
this folder, `feast apply` registers the entity only: views exist per model, so the application makes them.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from pathlib import Path

from feast import Entity, FeatureView, Field, FileSource, PushSource, ValueType
from feast.types import Bool, Bytes, Int64, String

ENTITY = "item"
JOIN_KEY = "item_id"
VIEW_PREFIX = "item_gist_"
FINGERPRINT_TAG = "gistrank_fingerprint"
TIMESTAMP_FIELD = "event_timestamp"
# Where `feast apply` run on this folder keeps its state (matches feature_store.yaml).
CLI_DATA_DIR = Path(__file__).resolve().parents[1] / "var" / "feast"


def view_name(fingerprint: str) -> str:
    return f"{VIEW_PREFIX}{fingerprint}"


def push_source_name(fingerprint: str) -> str:
    return f"{view_name(fingerprint)}_push"


def build_entity() -> Entity:
    return Entity(
        name=ENTITY, join_keys=[JOIN_KEY], value_type=ValueType.STRING, description="A catalog item."
    )


def build_definitions(data_dir: Path, fingerprint: str) -> tuple[Entity, PushSource, FeatureView]:
    """The objects to register for one model; `data_dir` holds the (never written) batch source parquet."""
    item = build_entity()
    view = view_name(fingerprint)
    # A PushSource needs a batch source; pushes go online only, so this parquet is never read or written
    # (Feast does not require it to exist) and only marks where an offline copy would go.
    batch = FileSource(
        name=f"{view}_batch",
        path=str(Path(data_dir).resolve() / f"{view}.parquet"),
        timestamp_field=TIMESTAMP_FIELD,
    )
    push = PushSource(name=push_source_name(fingerprint), batch_source=batch)
    feature_view = FeatureView(
        name=view,
        entities=[item],
        # ttl 0 means no expiry: a blob stays valid until its item or the model changes.
        ttl=timedelta(0),
        schema=[
            # Declaring the join key keeps a freshly built view equal to the registered one, which is how
            # GistStore.apply() sees that there is nothing to do.
            Field(name=JOIN_KEY, dtype=String),
            Field(name="kv", dtype=Bytes),
            Field(name="fingerprint", dtype=String),
            Field(name="num_gist", dtype=Int64),
            Field(name="item_tokens", dtype=Int64),
            Field(name="content_hash", dtype=String),
            Field(name="version", dtype=Int64),
            Field(name="deleted", dtype=Bool),
        ],
        source=push,
        online=True,
        description=f"Gist K/V blob per item of model {fingerprint}; deleted=True rows are tombstones.",
        tags={FINGERPRINT_TAG: fingerprint},
    )
    return item, push, feature_view


# `feast apply` imports this file before it writes the registry, and Feast creates only the last component
# of the registry's folder; making the whole path here lets a fresh clone apply without a setup step. A
# read-only checkout (an image) loses nothing: the application keeps its state in its own data dir.
with contextlib.suppress(OSError):
    CLI_DATA_DIR.mkdir(parents=True, exist_ok=True)

item = build_entity()
