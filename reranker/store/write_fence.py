"""Which write wins, decided inside the online store: Feast online stores whose write compares each row
with the stored one and writes only the winner, in one atomic step, so no other process can write in
between.

`GistStore` resolves a batch against what it reads first, but between its read and Feast's write another
process may write the same item: a consumer dropped from its group mid-batch (a zombie) and the
partition's new owner, `materialize` beside a consumer. With Feast's own stores
the slower writer wins whatever its version. These stores close that gap:

* SQLite: the write starts with ``BEGIN IMMEDIATE`` (the database's write lock, across processes),
  reads the stored rows' version columns, and writes the winners in the same transaction.
* Redis (single, Sentinel or Cluster): per item, one Lua script compares the row's ``_fence:<view>``
  field (version, tombstone flag, content digest) with the incoming one and, if it wins, sets every
  field; Redis runs a script atomically, and one item is one key, so Cluster routes it to one node.
  A row written before this field existed loses nothing but its fence: the next write of it wins once.

They store exactly what Feast's own stores do (same tables, keys, fields; Feast reads them unchanged);
`GistStore` swaps them in for ``type: sqlite`` and ``type: redis`` in any feature_store.yaml. Ids of rows
that lost at the store are left in `fenced_out` for the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal

from feast import FeatureView, RepoConfig
from feast.infra.key_encoding_utils import serialize_entity_key
from feast.infra.online_stores.helpers import _mmh3, _redis_key
from feast.infra.online_stores.redis import RedisOnlineStore, RedisOnlineStoreConfig
from feast.infra.online_stores.sqlite import SqliteOnlineStore, SqliteOnlineStoreConfig, _table_id
from feast.protos.feast.types.EntityKey_pb2 import EntityKey
from feast.protos.feast.types.Value_pb2 import Value
from feast.utils import make_tzaware
from google.protobuf.timestamp_pb2 import Timestamp

from reranker.store.rows import RowVersion

FENCED_SQLITE = f"{__name__}.FencedSqliteOnlineStore"
FENCED_REDIS = f"{__name__}.FencedRedisOnlineStore"
FENCED_TYPES = {"sqlite": FENCED_SQLITE, "redis": FENCED_REDIS}  # Feast's type → the fenced one
_COMPARED = ("version", "deleted", "fingerprint", "content_hash", "kv")

Row = tuple[EntityKey, dict[str, Value], datetime, datetime | None]  # what Feast hands a store's write


def _plain(value: Value) -> Any:
    kind = value.WhichOneof("val")
    return None if kind is None else getattr(value, kind)


def _item_id(entity_key: EntityKey) -> str:
    return entity_key.entity_values[0].string_val


def _incoming(values: dict[str, Value]) -> RowVersion:
    return RowVersion.from_values({f: _plain(values[f]) for f in _COMPARED})


class FencedSqliteOnlineStoreConfig(SqliteOnlineStoreConfig):
    type: Literal["reranker.store.write_fence.FencedSqliteOnlineStore"] = FENCED_SQLITE  # type: ignore[assignment]


class FencedSqliteOnlineStore(SqliteOnlineStore):
    """Feast's SQLite store whose batch write is one transaction holding the write lock from the read of
    the stored versions to the commit (module docstring)."""

    fenced_out: tuple[str, ...] = ()

    def online_write_batch(
        self,
        config: RepoConfig,
        table: FeatureView,
        data: list[Row],
        progress: Callable[[int], Any] | None,
    ) -> None:
        conn = self._get_conn(config)
        conn.execute("BEGIN IMMEDIATE")  # waits for (and then blocks) every other writer of the file
        try:
            keys = [
                serialize_entity_key(
                    ek, entity_key_serialization_version=config.entity_key_serialization_version
                )
                for ek, _, _, _ in data
            ]
            stored = self._stored(conn, _table_id(config.project, table), keys)
            wins = [
                _incoming(row[1]).supersedes(stored.get(key)) for row, key in zip(data, keys, strict=True)
            ]
            winners = [row for row, won in zip(data, wins, strict=True) if won]
            self.fenced_out = tuple(_item_id(row[0]) for row, won in zip(data, wins, strict=True) if not won)
            if winners:
                super().online_write_batch(config, table, winners, progress)  # commits (`with conn`)
            else:
                conn.commit()
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise

    @staticmethod
    def _stored(conn: Any, table: str, keys: Sequence[bytes]) -> dict[bytes, RowVersion]:
        columns: dict[bytes, dict[str, Any]] = {}
        marks = ",".join("?" * len(_COMPARED))
        for key in dict.fromkeys(keys):
            cursor = conn.execute(
                f"SELECT feature_name, value FROM {table} WHERE entity_key = ? AND feature_name IN ({marks})",
                (key, *_COMPARED),
            )
            for name, blob in cursor.fetchall():
                value = Value()
                value.ParseFromString(blob)
                columns.setdefault(key, dict.fromkeys(_COMPARED))[name] = _plain(value)
        return {key: RowVersion.from_values(c) for key, c in columns.items() if c["version"] is not None}


# KEYS[1]: the item's hash. ARGV: fence field, incoming fence value, TTL seconds (0: none), then field/value
# pairs. Fence values: "<version, 20 digits>|<deleted 0/1>|<digest>" (RowVersion.fence).
_COMPARE_AND_SET = """
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if stored then
  local v, d, h = string.match(stored, '^(%d+)|(%d)|(.*)$')
  local nv, nd, nh = string.match(ARGV[2], '^(%d+)|(%d)|(.*)$')
  if nv < v then return 0 end
  if nv == v and (d == '1' or (nd == '0' and nh == h)) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], unpack(ARGV, 4))
if tonumber(ARGV[3]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
return 1
"""


def fence_field(view: str) -> str:
    return f"_fence:{view}"


class FencedRedisOnlineStoreConfig(RedisOnlineStoreConfig):
    type: Literal["reranker.store.write_fence.FencedRedisOnlineStore"] = FENCED_REDIS  # type: ignore[assignment]


class FencedRedisOnlineStore(RedisOnlineStore):
    """Feast's Redis store whose write is a compare-and-set script per item (module docstring)."""

    fenced_out: tuple[str, ...] = ()

    def online_write_batch(
        self,
        config: RepoConfig,
        table: FeatureView,
        data: list[Row],
        progress: Callable[[int], Any] | None,
    ) -> None:
        online = config.online_store
        client = self._get_client(online)
        script = client.register_script(_COMPARE_AND_SET)
        ttl = online.key_ttl_seconds or 0
        lost = []
        for entity_key, values, timestamp, _ in data:
            ts = Timestamp(seconds=int(make_tzaware(timestamp).timestamp()))
            fields: list[Any] = [f"_ts:{table.name}", ts.SerializeToString()]
            for name, value in values.items():
                fields += [_mmh3(f"{table.name}:{name}"), value.SerializeToString()]
            key = _redis_key(
                config.project,
                entity_key,
                entity_key_serialization_version=config.entity_key_serialization_version,
            )
            if not script(
                keys=[key], args=[fence_field(table.name), _incoming(values).fence(), ttl, *fields]
            ):
                lost.append(_item_id(entity_key))
        self.fenced_out = tuple(lost)
        if progress:
            progress(len(data))
