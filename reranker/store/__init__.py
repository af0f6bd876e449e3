"""The gist K/V feature store: one facade over Feast for the consumer (writes) and the reranker (reads).

A store is bound to one model: its rows live in that model's Feast feature view ``item_gist_<fingerprint>``
(``feature_repo/``), keyed by ``item_id``, so a new model backfills its own view while replicas of the
live model keep reading theirs, and the old view is dropped after the switch (`views`, `coverage`,
`drop`; `gistrank rollout`). The online store is the one of the Feast config: the project's own (SQLite
by default, or one Redis) or a deployment's feature_store.yaml used as written (Redis Cluster, any Feast
online store and registry; `GistStore`).
This module owns the rules Feast does not have:

* **Which write wins.** A row replaces the stored one when its catalog version is higher; at the same
  version when the stored row is live and the new one differs in content hash or bytes (a corrupt blob
  repaired) or is a delete. An older version, an
  exact duplicate (at-least-once redelivery) or anything at or below a tombstone's version is skipped.
  Deciding needs the stored row, so every write reads first, in one batched call.
* **Deletes are tombstones** (``deleted=True``, empty ``kv``) and read as ``None``. Feast 0.49's online
  stores have no per-entity delete (SQLite: none; Redis: only all entities of a join key at once), and
  only a kept version can stop a stale upsert that arrives after the delete from resurrecting the item.
* **Event timestamps.** Feast's Redis store keeps whole seconds and silently drops a write whose second
  is not after the stored one (SQLite overwrites regardless). Every write therefore gets
  ``max(now, stored + 1)`` in whole seconds, so rewrites within the same second land too (their
  timestamps run ahead of the clock by at most the number of such rewrites).

The rule is applied twice: here, against a batched read, to resolve a batch and to report what was
written; and inside the online store, atomically with the write (`reranker.store.write_fence`, swapped in for
Feast's SQLite and Redis stores), so a second writer of the same item in another process — a consumer
dropped from its group mid-batch, `materialize` beside a consumer — cannot put an older version over a
newer one. Other Feast online stores get the in-process check only.

``import feast`` takes seconds, so it happens when a `GistStore` is built, not when this module is
imported; build one per process and reuse it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlsplit

import redis.exceptions
import sqlalchemy.exc
import yaml

from reranker.core.home import home
from reranker.store.rows import Coverage, GistRow, RowVersion, WriteResult

if TYPE_CHECKING:
    from feast import FeatureStore, RepoConfig

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
FEATURE_REPO = REPO_ROOT / "feature_repo"
DATA_DIR_ENV = "GISTRANK_FEAST_DIR"
ONLINE_ENV = "GISTRANK_FEAST_ONLINE"
REDIS_URL_ENV = "GISTRANK_REDIS_URL"
CONFIG_ENV = "GISTRANK_FEAST_CONFIG"  # a feature_store.yaml used as written
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
# Bounds how long a read waits on an unreachable Redis before the caller falls back to recompute.
REDIS_CONNECT_TIMEOUT_S = 2
REDIS_SOCKET_TIMEOUT_S = 5

_FEATURES = ("kv", "fingerprint", "num_gist", "item_tokens", "content_hash", "version", "deleted")
_TS_SUFFIX = "__ts"  # OnlineResponse.to_dict(include_event_timestamps=True) names timestamps so

Online = Literal["sqlite", "redis"]


# What an online store or registry that cannot be reached raises: Redis (a cluster's "no node answers" is
# not a RedisError), SQLite, a SQL registry through SQLAlchemy, the network.
_UNAVAILABLE = (
    redis.exceptions.RedisError,
    redis.exceptions.RedisClusterException,
    sqlite3.Error,
    sqlalchemy.exc.OperationalError,
    OSError,
)


def default_data_dir() -> Path:
    """The Feast data dir when none is given: $GISTRANK_FEAST_DIR, else $GISTRANK_HOME/feast."""
    return Path(os.environ.get(DATA_DIR_ENV) or home() / "feast")


class FeatureStoreUnavailableError(RuntimeError):
    """The online store or registry cannot be used now (Redis down, database unreadable, view not applied).

    The serving layer treats it as a miss for every item and recomputes; the consumer retries without
    committing its offsets.
    """


class NoFeatureStoreError(FeatureStoreUnavailableError):
    """No registry where the config points (nothing was ever applied there, or a wrong path), found by a
    store opened with `create=False`."""


def redacted(url: str) -> str:
    """`url` (scheme://user:password@host/..., or Feast's host:port,password=...) with the password
    replaced by *** (for logs and error messages)."""
    url = re.sub(r"(password=)[^,\s]*", r"\1***", url)
    parts = urlsplit(url)
    if not parts.password:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    return parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{host}").geturl()


def _redis_connection_string(url: str) -> str:
    """Feast's ``host:port,key=value`` form of a ``redis://[:password@]host[:port][/db]`` URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise ValueError(f"redis_url must look like redis://host:port/db, got {redacted(url)!r}")
    db = parts.path.lstrip("/") or "0"
    options = [
        f"{parts.hostname}:{parts.port or 6379}",
        f"db={int(db)}",
        f"socket_connect_timeout={REDIS_CONNECT_TIMEOUT_S}",
        f"socket_timeout={REDIS_SOCKET_TIMEOUT_S}",
    ]
    if parts.password:
        password = unquote(parts.password)
        if "," in password:
            raise ValueError("Feast's Redis connection string cannot carry a password containing ','")
        options.append(f"password={password}")
    if parts.scheme == "rediss":
        options.append("ssl=true")
    return ",".join(options)


def _load_definitions() -> ModuleType:
    # feature_repo/ is not a package (an __init__.py would be executed by `feast apply`), so load by path.
    spec = importlib.util.spec_from_file_location(
        "gistrank_feature_definitions", FEATURE_REPO / "definitions.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _absent_registry(config: RepoConfig) -> Path | None:
    """The path of a local file registry that does not exist; None when it exists or lives elsewhere (a
    SQL database, object storage), where telling would need a connection."""
    registry = config.registry
    if registry.registry_type != "file" or urlsplit(registry.path).scheme:
        return None
    path = Path(registry.path)
    path = path if path.is_absolute() else Path(config.repo_path) / path
    return None if path.is_file() else path


# The view's own note of when serving last read it (`GistStore.record_use`): catalog item ids cannot hold
# control characters (reranker.catalog.events), so this id is never an item's.
LAST_USE_ID = "\x00last-use"
_FINGERPRINT = re.compile(r"[0-9a-zA-Z]{1,64}")


class GistStore:
    """Batched reads and version-guarded writes of one model's gist K/V rows (module docstring)."""

    def __init__(
        self,
        data_dir: Path | None = None,
        online: Online | None = None,
        redis_url: str | None = None,
        config: str | Path | None = None,
        *,
        fingerprint: str,
        create: bool = True,
    ) -> None:
        """`fingerprint` is the model's (`Reranker.fingerprint`): the view this store reads and writes.

        Two ways to configure the store (see `_repo_config`):

        * `config`: a Feast `feature_store.yaml`, used as written — any
          online store and registry Feast supports (Redis Cluster, Cassandra, DynamoDB, a SQL
          registry, ...), `${VAR}` expanded from the environment as Feast does, relative paths read
          from the file's folder. `data_dir`, `online` and `redis_url` must then be left unset.
        * otherwise the project's own `feature_repo/feature_store.yaml` with local-run overrides: its
          registry and SQLite file in `data_dir` (default: `default_data_dir()`), and with
          `online="redis"` one Redis at `redis_url` as the online store.

        `create=False` opens an existing store only: a local file registry that is not there is a
        `NoFeatureStoreError` and nothing is created (Feast would write an empty registry and its folder).
        """
        if config is not None and (data_dir is not None or online is not None or redis_url is not None):
            raise ValueError(
                f"a Feast config ({config}) sets the stores itself: "
                "leave data_dir, online and redis_url unset"
            )
        if not _FINGERPRINT.fullmatch(fingerprint):
            raise ValueError(f"fingerprint must be 1-64 letters or digits, got {fingerprint!r}")
        self.fingerprint = fingerprint
        online = online or "sqlite"
        if online not in ("sqlite", "redis"):
            raise ValueError(f"online must be 'sqlite' or 'redis', got {online!r}")
        self.config_path = Path(config).resolve() if config is not None else None
        if self.config_path is not None:
            self.data_dir = self.config_path.parent
        else:
            self.data_dir = Path(data_dir or default_data_dir()).resolve()
        self.redis_url = (redis_url or DEFAULT_REDIS_URL) if online == "redis" and config is None else None

        from feast import FeatureStore

        self._definitions = _load_definitions()
        self._objects = self._definitions.build_definitions(self.data_dir, fingerprint)
        self.view = self._definitions.view_name(fingerprint)
        repo_config = self._repo_config(online)
        from reranker.store.write_fence import FENCED_TYPES

        kind = str(repo_config.online_store.type)
        # "sqlite" / "redis" for the fenced stores swapped in for them (`reranker.store.write_fence`)
        self.online = {fenced: plain for plain, fenced in FENCED_TYPES.items()}.get(kind, kind)
        if self.online not in FENCED_TYPES:
            logger.warning(
                "online store %s: writes are compared with the stored version within this process only; "
                "run one writer per item (write_fence fences SQLite and Redis across processes)",
                kind,
            )
        self._where = self._describe(repo_config)
        self.create = create
        if not create and (registry := _absent_registry(repo_config)) is not None:
            raise NoFeatureStoreError(f"no Feast store (no registry at {registry})")
        try:
            # Feast creates only the last path component itself.
            self.data_dir.mkdir(parents=True, exist_ok=True)
            # Reads the registry, creating an empty one in a fresh data dir; Redis is not contacted yet.
            self._store: FeatureStore = FeatureStore(config=repo_config)
        except OSError as e:
            raise FeatureStoreUnavailableError(f"feast data dir {self.data_dir}: {e}") from e
        # One lock for every Feast call: the SQLite store shares one connection across threads, and a
        # write's read-before-write must not interleave with another write.
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, fingerprint: str) -> GistStore:
        """Configured by $GISTRANK_FEAST_CONFIG (a feature_store.yaml), else by $GISTRANK_FEAST_DIR,
        $GISTRANK_FEAST_ONLINE (sqlite|redis) and $GISTRANK_REDIS_URL."""
        if os.environ.get(CONFIG_ENV):
            return cls(config=os.environ[CONFIG_ENV], fingerprint=fingerprint)
        online = os.environ.get(ONLINE_ENV, "sqlite")
        if online not in ("sqlite", "redis"):
            raise ValueError(f"${ONLINE_ENV} must be 'sqlite' or 'redis', got {online!r}")
        return cls(online=online, redis_url=os.environ.get(REDIS_URL_ENV), fingerprint=fingerprint)

    def for_model(self, fingerprint: str) -> GistStore:
        """A store on the same Feast config, bound to another model's view."""
        if self.config_path is not None:
            return GistStore(config=self.config_path, fingerprint=fingerprint, create=self.create)
        online: Online = "redis" if self.redis_url is not None else "sqlite"
        return GistStore(self.data_dir, online, self.redis_url, fingerprint=fingerprint, create=self.create)

    def _repo_config(self, online: Online) -> RepoConfig:
        from feast import RepoConfig

        path = self.config_path or FEATURE_REPO / "feature_store.yaml"
        # Feast's own loader expands ${VAR} the same way before parsing
        raw: dict[str, Any] = yaml.safe_load(os.path.expandvars(path.read_text()))
        if self.config_path is None:  # the project's file: registry and online store moved for this run
            raw["registry"] = {**raw["registry"], "path": str(self.data_dir / "registry.db")}
            if online == "redis":
                assert self.redis_url is not None
                raw["online_store"] = {
                    "type": "redis",
                    "connection_string": _redis_connection_string(self.redis_url),
                }
            else:
                raw["online_store"] = {"type": "sqlite", "path": str(self.data_dir / "online.db")}
        from reranker.store.write_fence import FENCED_TYPES

        online_store = raw.setdefault("online_store", {"type": "sqlite"})
        if isinstance(online_store, str):  # Feast's shorthand `online_store: redis`
            online_store = raw["online_store"] = {"type": online_store}
        online_store["type"] = FENCED_TYPES.get(online_store.get("type", "sqlite"), online_store.get("type"))
        config = RepoConfig(**raw)
        config.repo_path = path.parent  # what relative paths in the file are read from, as in `feast`
        return config

    def _describe(self, config: RepoConfig) -> str:
        """Where the online store is, for error messages."""
        store = config.online_store
        if self.redis_url is not None:
            return f"redis at {redacted(self.redis_url)}"
        where = getattr(store, "connection_string", None) or getattr(store, "path", None) or ""
        source = f" (from {self.config_path})" if self.config_path is not None else ""
        kind = getattr(store, "redis_type", None) or self.online
        return f"{getattr(kind, 'value', kind)} online store {redacted(where)}{source}".replace("  ", " ")

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Hold the lock and turn "the store cannot be used" into `FeatureStoreUnavailableError`."""
        from feast.errors import FeastObjectNotFoundException

        with self._lock:
            try:
                yield
            except _UNAVAILABLE as e:
                raise FeatureStoreUnavailableError(f"{self._where}: {e}") from e
            except FeastObjectNotFoundException as e:
                raise FeatureStoreUnavailableError(
                    f"{e} (registry {self._store.config.registry.path}; call GistStore.apply())"
                ) from e

    def apply(self) -> None:
        """Register entity, push source and view; a no-op, without touching the registry, when current.

        Feast rewrites the registry file in place (not atomically), so skipping unchanged applies keeps
        processes that start together from reading a half-written registry.
        """
        with self._guard():
            if not self._registered():
                self._store.apply(list(self._objects))
                # a SQL registry serves reads from a cache that its own apply does not update
                self._store.refresh_registry()

    def _registered(self) -> bool:
        registered = {
            (type(o), o.name): o
            for o in (
                *self._store.list_entities(allow_cache=False),
                *self._store.list_data_sources(allow_cache=False),
                *self._store.list_feature_views(allow_cache=False),
            )
        }
        push = self._objects[1]
        wanted = (*self._objects, push.batch_source)
        # Feast's __eq__ raises for any other type (None included), hence the type in the key.
        return all((type(o), o.name) in registered and registered[type(o), o.name] == o for o in wanted)

    def views(self) -> list[str]:
        """Fingerprints of every model with a gist view in the registry (this store's model included
        once applied), in registration order."""
        with self._guard():
            registered = self._store.list_feature_views(allow_cache=False)
        tag = self._definitions.FINGERPRINT_TAG
        return [
            v.tags[tag]
            for v in registered
            if v.name.startswith(self._definitions.VIEW_PREFIX) and tag in v.tags
        ]

    def coverage(self, items: Sequence[tuple[str, int]], batch: int = 1000) -> Coverage:
        """How many of the live catalog `items` ((item_id, version) pairs) this model's view holds at
        their catalog version: a rollout may switch replicas to this model once every item is current."""
        current = behind = 0
        for start in range(0, len(items), batch):
            chunk = items[start : start + batch]
            with self._guard():
                values = self._online([i for i, _ in chunk], ("version", "deleted"))
            for (_, version), stored, deleted in zip(
                chunk, values["version"], values["deleted"], strict=True
            ):
                if stored is None or deleted:
                    continue
                if stored >= version:
                    current += 1
                else:
                    behind += 1
        return Coverage(self.fingerprint, len(items), current, behind)

    def drop(self) -> None:
        """Remove this model's view from the registry and its rows from the online store (Feast tears the
        table down). For the garbage collection after a rollout: no replica may still read this model."""
        _, push, view = self._objects
        with self._guard():
            # the registered view, not the local definition: Feast finds the rows to delete by the join
            # keys it inferred at apply time
            registered = self._store.get_feature_view(view.name)
            self._store.apply([], objects_to_delete=[registered, push, push.batch_source], partial=False)
            self._store.refresh_registry()
            if self.online == "redis":
                self._delete_redis_rows(registered)

    def _delete_redis_rows(self, view: Any) -> None:
        """Feast 0.49's Redis `delete_table` finds a view's rows by a key prefix in the version-2 entity key
        format, which matches no key written in version 3 (this project's), so the rows would stay behind.
        Delete the view's fields from every key of the project, through Feast's own client (cluster too)."""
        from feast.infra.online_stores.helpers import _mmh3

        from reranker.store import write_fence

        config = self._store.config
        client = self._online_store()._get_client(config.online_store)
        fields = [_mmh3(f"{view.name}:{f.name}") for f in view.features]
        fields += [f"_ts:{view.name}".encode(), write_fence.fence_field(view.name).encode()]
        with client.pipeline(transaction=False) as pipe:
            for n, key in enumerate(client.scan_iter(match=b"*" + config.project.encode()), start=1):
                pipe.hdel(key, *fields)  # a hash left without fields is removed by Redis itself
                if n % 1000 == 0:  # bounded: a catalog has millions of keys
                    pipe.execute()
            pipe.execute()

    def _online(self, item_ids: list[str], features: Sequence[str]) -> dict[str, list[Any]]:
        """One batched get_online_features; values are None where an item has no row."""
        view = self.view
        response = self._store.get_online_features(
            features=[f"{view}:{f}" for f in features],
            entity_rows=[{self._definitions.JOIN_KEY: i} for i in item_ids],
        )
        return response.to_dict(include_event_timestamps=True)

    def read(self, item_ids: Sequence[str]) -> dict[str, GistRow | None]:
        """Rows for `item_ids` (duplicates collapse); missing or deleted items map to None."""
        ids = list(dict.fromkeys(item_ids))
        if not ids:
            return {}
        with self._guard():
            values = self._online(ids, _FEATURES)
        rows: dict[str, GistRow | None] = {}
        for i, item_id in enumerate(ids):
            if values["version"][i] is None or values["deleted"][i]:
                rows[item_id] = None
            else:
                rows[item_id] = GistRow(
                    item_id=item_id,
                    kv=values["kv"][i],
                    fingerprint=values["fingerprint"][i],
                    num_gist=values["num_gist"][i],
                    item_tokens=values["item_tokens"][i],
                    content_hash=values["content_hash"][i],
                    version=values["version"][i],
                )
        return rows

    def versions(self, item_ids: Sequence[str]) -> dict[str, int]:
        """The version of each item's row, live or tombstone; items without a row are absent."""
        ids = list(dict.fromkeys(item_ids))
        if not ids:
            return {}
        with self._guard():
            values = self._online(ids, ("version",))
        return {i: v for i, v in zip(ids, values["version"], strict=True) if v is not None}

    def record_use(self, replica: str) -> None:
        """Note that a serving replica reads this model's view now (for `rollout gc`'s guard): a row under
        an id no catalog item can have, its version the time in whole seconds, its bytes the replica's
        name; the version rule keeps the latest of every replica's notes."""
        now = int(time.time())
        self.write([GistRow(LAST_USE_ID, replica.encode() or b"?", self.fingerprint, 0, 0, "use", now)])

    def last_use(self) -> tuple[int, str] | None:
        """(unix seconds, replica) of the latest `record_use` in this view, None if serving never read it."""
        row = self.read([LAST_USE_ID])[LAST_USE_ID]
        return None if row is None else (row.version, row.kv.decode(errors="replace"))

    def stored_fingerprints(self, item_ids: Sequence[str]) -> dict[str, str | None]:
        """Fingerprint of each item's live row, None when missing or deleted (so it needs materializing)."""
        ids = list(dict.fromkeys(item_ids))
        if not ids:
            return {}
        with self._guard():
            values = self._online(ids, ("fingerprint", "deleted"))
        return {
            item_id: None if values["deleted"][i] in (None, True) else values["fingerprint"][i]
            for i, item_id in enumerate(ids)
        }

    def write(self, rows: Sequence[GistRow]) -> WriteResult:
        """Store the rows that win against what is stored (module docstring), in one batched push."""
        foreign = sorted({r.fingerprint for r in rows} - {self.fingerprint})
        if foreign:
            raise ValueError(f"rows of models {foreign} written to the view of model {self.fingerprint}")
        return self._write(
            [(r.item_id, RowVersion(r.version, False, r.fingerprint, r.content_hash, r.kv), r) for r in rows]
        )

    def delete(self, item_ids: Sequence[str], versions: Sequence[int]) -> WriteResult:
        """Tombstone each item at its version, unless a newer version is stored (or it is already deleted)."""
        if len(item_ids) != len(versions):
            raise ValueError(f"{len(item_ids)} item ids but {len(versions)} versions")
        if not all(item_ids):
            raise ValueError("item ids must be non-empty")
        return self._write([(i, RowVersion(v, True), None) for i, v in zip(item_ids, versions, strict=True)])

    def _write(self, entries: list[tuple[str, RowVersion, GistRow | None]]) -> WriteResult:
        if not entries:
            return WriteResult((), ())
        import pandas as pd

        ids = list(dict.fromkeys(item_id for item_id, _, _ in entries))
        with self._guard():
            values = self._online(ids, _FEATURES)
            stored: dict[str, RowVersion | None] = {}
            stored_ts: dict[str, int] = {}
            for i, item_id in enumerate(ids):
                stored_ts[item_id] = values[f"version{_TS_SUFFIX}"][i]
                row = {f: values[f][i] for f in _FEATURES}
                stored[item_id] = None if row["version"] is None else RowVersion.from_values(row)
            # Resolve the batch against the store and against itself: per item, the winning entry's index.
            winner: dict[str, int] = {}
            for n, (item_id, record, _) in enumerate(entries):
                current = entries[winner[item_id]][1] if item_id in winner else stored[item_id]
                if record.supersedes(current):
                    winner[item_id] = n
            winning = sorted(winner.values())
            if winning:
                now = int(time.time())
                frame = pd.DataFrame(
                    [self._frame_row(*entries[n], max(now, stored_ts[entries[n][0]] + 1)) for n in winning]
                )
                frame[self._definitions.TIMESTAMP_FIELD] = pd.to_datetime(
                    frame[self._definitions.TIMESTAMP_FIELD], unit="s", utc=True
                )
                self._store.push(self._definitions.push_source_name(self.fingerprint), frame)
                # another process's write that landed after the read above wins inside the store
                fenced = set(getattr(self._online_store(), "fenced_out", ()))
                winning = [n for n in winning if entries[n][0] not in fenced]
        won = set(winning)
        return WriteResult(
            written=tuple(entries[n][0] for n in winning),
            skipped=tuple(e[0] for n, e in enumerate(entries) if n not in won),
        )

    def _online_store(self) -> Any:
        return self._store._get_provider().online_store

    def _frame_row(self, item_id: str, record: RowVersion, row: GistRow | None, ts: int) -> dict[str, Any]:
        return {
            self._definitions.JOIN_KEY: item_id,
            "kv": record.kv,
            "fingerprint": record.fingerprint,
            "num_gist": row.num_gist if row else 0,
            "item_tokens": row.item_tokens if row else 0,
            "content_hash": record.content_hash,
            "version": record.version,
            "deleted": record.deleted,
            self._definitions.TIMESTAMP_FIELD: ts,
        }
