"""Streaming commands: `publish`, `consume`, `materialize`, the `catalog` group (`load`, `update`) and the
`rollout` group (`status`, `gc`).

Kafka client settings come from `GISTRANK_KAFKA_*` variables (see `reranker.catalog.kafka_settings`);
`--bootstrap-servers` overrides the servers. `python -m streaming.cli …` runs these without the rest of
the `gistrank` CLI. Heavy imports (torch, feast) happen inside the commands that need them.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # model names resolve offline (reranker.core.base_models)

from reranker.catalog.database import (
    DEFAULT_URL,
    Catalog,
    CatalogError,
    check_catalog_file,
    check_catalog_url,
)
from reranker.catalog.kafka_settings import (
    KafkaSettings,
    ensure_topics,
)
from reranker.catalog.preflight import (
    LOG_FORMAT,
    check_model,
    ensure_free,
    kafka_logs,
    port_option,
    require_broker,
)
from reranker.core.checkpoints import DEFAULT_MODEL

if TYPE_CHECKING:
    from reranker.core.model import GistReranker
    from reranker.store import Coverage, GistStore


class OnlineStore(StrEnum):
    sqlite = "sqlite"
    redis = "redis"


class ComputeDType(StrEnum):
    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class BlobDType(StrEnum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"
    int8 = "int8"
    int4 = "int4"  # group-wise, keys per channel, values per position (reranker/core/kv_codec.py)
    int2 = "int2"


def _catalog_url(url: str | None) -> str | None:
    """A --catalog-url as given, refused when it is an SQLite file in a folder that does not exist."""
    try:
        return url and check_catalog_url(url)
    except CatalogError as exc:
        raise typer.BadParameter(str(exc)) from None


CatalogUrl = Annotated[
    str, typer.Option(callback=_catalog_url, help="SQLAlchemy URL of the catalog database")
]
BootstrapServers = Annotated[
    str | None, typer.Option(help="host:port[,…]; overrides $GISTRANK_KAFKA_BOOTSTRAP_SERVERS")
]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="show the Kafka client's own log lines")]
Partitions = Annotated[int, typer.Option(min=1, help="partitions of the change topic when this creates it")]
CreateTopics = Annotated[
    bool, typer.Option(help="create missing topics first (needs the admin right to create topics)")
]
FeastDir = Annotated[
    Path | None,
    typer.Option(help="Feast data dir (registry, SQLite online store); default $GISTRANK_HOME/feast"),
]
Online = Annotated[OnlineStore, typer.Option(help="online store")]
FeastConfig = Annotated[
    Path | None,
    typer.Option(
        envvar="GISTRANK_FEAST_CONFIG",
        help="a Feast feature_store.yaml used as written (any online store and registry: Redis Cluster, "
        "a SQL registry, ...); replaces --feast-dir / --online / --redis-url",
    ),
]
RedisUrl = Annotated[str | None, typer.Option(help="redis://host:port/db for --online redis")]
ModelRef = Annotated[
    str, typer.Option(help="preset or shipped alias, GistRank checkpoint folder, base alias or HF folder")
]
NumGist = Annotated[
    int | None, typer.Option(help="k stored positions (default: the model's own; 8 for a bare base)")
]
DType = Annotated[
    ComputeDType | None,
    typer.Option(
        help="model dtype of a fresh wrap (its weights and K/V; auto: bfloat16 only where fast; default "
        "float32; a checkpoint's own). Compute runs in it where the machine is native, else in float32"
    ),
]
KVStorageOpt = Annotated[
    BlobDType | None,
    typer.Option(
        "--kv-storage",
        "--storage-dtype",
        help="how the store keeps the K/V: the model reference's kv_storage setting, so part of the "
        "store fingerprint (default: the model's own; int4 / int2: group-wise codes, core/kv_codec.py)",
    ),
]
CompressBatch = Annotated[int, typer.Option(min=1, help="items per compression forward")]
CompressorOpt = Annotated[
    str | None,
    typer.Option(
        "--compressor",
        help="gist | select | prefix: what the k stored positions are (default: the model's own; select "
        "and prefix need no training and work on any checkpoint's body)",
    ),
]
MaxItemTokens = Annotated[
    int | None, typer.Option(help="item tokens read before truncating (default: the model's own cap)")
]


def _settings(bootstrap_servers: str | None) -> KafkaSettings:
    try:
        return KafkaSettings.from_env(bootstrap_servers=bootstrap_servers)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise typer.BadParameter(f"Kafka settings: {exc}") from None


def _load_model(
    ref: str,
    num_gist: int | None,
    dtype: ComputeDType | None,
    compressor: str | None = None,
    max_item_tokens: int | None = None,
    kv_storage: BlobDType | None = None,
) -> GistReranker:
    """`GistReranker.read`, its refusals as usage errors."""
    storage = kv_storage and kv_storage.value
    settings = {"num_gist": num_gist, "max_item_tokens": max_item_tokens, "kv_storage": storage}
    check_model(ref, compressor=compressor, **settings)
    from reranker import GistReranker  # torch: once the reference is known good
    from reranker.core.base_models import BaseModelUnavailableError
    from reranker.core.errors import one_line

    try:
        return GistReranker.read(
            ref, dtype and dtype.value, compressor, num_gist, max_item_tokens, kv_storage=storage
        )
    except (ValueError, BaseModelUnavailableError) as exc:  # an unknown name or compressor, a k the ...
        raise typer.BadParameter(one_line(exc), param_hint="--model") from None


def _open_store(
    fingerprint: str,
    feast_dir: Path | None,
    online: OnlineStore,
    redis_url: str | None,
    feast_config: Path | None = None,
    apply: bool = True,
) -> GistStore:
    """The store of the model with `fingerprint` (its own Feast view, registered here if new; with
    `apply` False only an existing store is opened, and nothing is written)."""
    from reranker.store import GistStore

    if feast_config is not None:
        if feast_dir is not None or redis_url is not None or online != OnlineStore.sqlite:
            raise typer.BadParameter(
                "--feast-config sets the stores itself: drop --feast-dir, --online, --redis-url"
            )
        store = GistStore(config=feast_config, fingerprint=fingerprint, create=apply)
    else:
        store = GistStore(
            feast_dir, online=online.value, redis_url=redis_url, fingerprint=fingerprint, create=apply
        )
    if apply:
        store.apply()
    return store


def _configure_logging(verbose: bool) -> None:
    """INFO for everything but kafka-python (`kafka_logs`); $GISTRANK_LOG_LEVEL (e.g. DEBUG: each batch's
    offsets as it starts) for the project's own loggers."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    kafka_logs(verbose)
    level = os.environ.get("GISTRANK_LOG_LEVEL", "INFO").upper()
    if level not in logging.getLevelNamesMapping():
        raise typer.BadParameter(f"$GISTRANK_LOG_LEVEL={level!r} is not a logging level")
    for name in ("streaming", "reranker"):
        logging.getLogger(name).setLevel(level)


# ------------------------------------------------------------------------------------------ commands
def publish(
    file: Annotated[
        Path | None,
        typer.Option(
            exists=True, dir_okay=False, help="JSONL file of change events (default: the catalog database)"
        ),
    ] = None,
    since_version: Annotated[
        int | None,
        typer.Option(min=0, help="only catalog changes after this version (a resumable cursor)"),
    ] = None,
    catalog_url: CatalogUrl = DEFAULT_URL,
    bootstrap_servers: BootstrapServers = None,
    partitions: Partitions = 3,
    create_topics: CreateTopics = True,
    verbose: Verbose = False,
) -> None:
    """Publish change events (each item's current state, or a JSONL file) to the change topic."""
    from kafka.errors import KafkaError

    from reranker.catalog.publisher import (
        EventFileError,
        PublishError,
        check_event_file,
        publish_catalog,
        publish_events,
        read_event_file,
    )

    if file is not None:  # every line checked before any broker is asked: nothing is sent if one is bad
        try:
            check_event_file(file)
        except EventFileError as exc:
            raise typer.BadParameter(str(exc), param_hint="--file") from None
    settings = _settings(bootstrap_servers)
    require_broker(settings, verbose)
    if create_topics:
        ensure_topics(settings, partitions)
    try:
        if file is not None:
            count = publish_events(settings, read_event_file(file))
        else:
            with Catalog(catalog_url) as catalog:
                count = publish_catalog(settings, catalog, since_version)
    except (PublishError, KafkaError) as exc:
        # Events sent before the failure stay published; running the same publish again is harmless.
        typer.echo(f"publish failed: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"published {count} events to {settings.topic}")


def consume(
    model: ModelRef = DEFAULT_MODEL,
    num_gist: NumGist = None,
    compressor: CompressorOpt = None,
    max_item_tokens: MaxItemTokens = None,
    dtype: DType = None,
    kv_storage: KVStorageOpt = None,
    batch_size: Annotated[int, typer.Option(min=1, help="records polled per batch")] = 64,
    compress_batch_size: CompressBatch = 16,
    feast_dir: FeastDir = None,
    online: Online = OnlineStore.sqlite,
    redis_url: RedisUrl = None,
    feast_config: FeastConfig = None,
    bootstrap_servers: BootstrapServers = None,
    partitions: Partitions = 3,
    create_topics: CreateTopics = True,
    catalog_url: Annotated[
        str | None,
        typer.Option(
            envvar="GISTRANK_CATALOG_URL",
            callback=_catalog_url,
            help="check every event against this catalog (SQLAlchemy URL; the source of truth) and "
            "dead-letter what it does not back; unset: the change topic is trusted",
        ),
    ] = None,
    metrics_port: Annotated[int | None, port_option("serve Prometheus metrics on PORT (/metrics)")] = None,
    metrics_address: Annotated[
        str, typer.Option(help="address the metrics server binds (0.0.0.0 in a container)")
    ] = "127.0.0.1",
    max_batches: Annotated[int | None, typer.Option(min=1, help="exit after this many batches")] = None,
    idle_exit_s: Annotated[
        float | None, typer.Option(min=0, help="exit after this long without records")
    ] = None,
    rejoin_after_s: Annotated[
        float,
        typer.Option(
            min=0,
            envvar="GISTRANK_KAFKA_REJOIN_AFTER_S",
            help="leave and rejoin the group when the Kafka client has stopped consuming for this long "
            "(rebalancing without partitions, or no records while behind on a partition)",
        ),
    ] = 60.0,
    verbose: Verbose = False,
) -> None:
    """Consume change events: compress changed items into the gist store; SIGTERM finishes the batch."""
    _configure_logging(verbose)
    settings = _settings(bootstrap_servers)
    if metrics_port is not None:  # before the model loads, as every check of the options
        ensure_free(metrics_address, {"--metrics-port": metrics_port})
    # a misspelled model fails at once (exit 2), a down broker in seconds (exit 1): before the load
    storage = kv_storage and kv_storage.value
    check_model(
        model, compressor=compressor, num_gist=num_gist, max_item_tokens=max_item_tokens, kv_storage=storage
    )
    require_broker(settings, verbose)
    from streaming.consumer import ForeignGroupError, GistConsumer

    gist_model = _load_model(model, num_gist, dtype, compressor, max_item_tokens, kv_storage)
    store = _open_store(gist_model.fingerprint, feast_dir, online, redis_url, feast_config)
    if create_topics:
        ensure_topics(settings, partitions)
    if metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, addr=metrics_address)
    try:
        consumer = GistConsumer(
            settings,
            gist_model,
            store,
            batch_size=batch_size,
            compress_batch_size=compress_batch_size,
            catalog=Catalog(catalog_url) if catalog_url else None,
            rejoin_after_s=rejoin_after_s,
        )
    except ForeignGroupError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        logging.getLogger(__name__).info("%s: finishing the current batch (again to abort it)", name)
        signal.signal(signum, signal.SIG_DFL)  # a second signal ends the process; the batch is redelivered
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        batches = consumer.run(stop, max_batches=max_batches, idle_exit_s=idle_exit_s)
    except ForeignGroupError as exc:  # found before a commit: nothing of this batch was committed
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    typer.echo(f"committed {batches} batches")


def materialize(
    stale_only: Annotated[
        bool, typer.Option("--stale-only/--all", help="only items whose stored fingerprint differs")
    ] = False,
    catalog_url: CatalogUrl = DEFAULT_URL,
    model: ModelRef = DEFAULT_MODEL,
    num_gist: NumGist = None,
    compressor: CompressorOpt = None,
    max_item_tokens: MaxItemTokens = None,
    dtype: DType = None,
    kv_storage: KVStorageOpt = None,
    batch_size: CompressBatch = 16,
    feast_dir: FeastDir = None,
    online: Online = OnlineStore.sqlite,
    redis_url: RedisUrl = None,
    feast_config: FeastConfig = None,
) -> None:
    """Backfill the gist store from the catalog: every live item, or only the stale ones."""
    from streaming.materialize import materialize as run_materialize

    gist_model = _load_model(model, num_gist, dtype, compressor, max_item_tokens, kv_storage)
    store = _open_store(gist_model.fingerprint, feast_dir, online, redis_url, feast_config)
    with Catalog(catalog_url) as catalog:
        result = run_materialize(catalog, gist_model, store, stale_only, batch_size)
    typer.echo(f"scanned {result.scanned}, compressed {result.compressed}, written {result.written}")


catalog_app = typer.Typer(no_args_is_help=True, add_completion=False, help="The item catalog.")


@catalog_app.command("load")
def catalog_load(
    file: Annotated[
        Path,
        typer.Argument(
            exists=True,
            dir_okay=False,
            readable=True,
            help="JSONL: one {item_id, title, attributes, description} per line",
        ),
    ],
    catalog_url: CatalogUrl = DEFAULT_URL,
) -> None:
    """Import items (all or nothing); `publish` then emits their change events."""
    try:
        check_catalog_file(file)  # before the catalog is opened (or created): a bad file writes nothing
    except CatalogError as exc:
        raise typer.BadParameter(f"{file}: {exc}") from None
    with Catalog(catalog_url) as catalog:
        changed = catalog.load_jsonl(file)
    typer.echo(f"{changed} items created or changed")


def _parse_attrs(pairs: list[str]) -> dict[str, str]:
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--attr {pair!r} is not key=value")
        parsed[key] = value
    return parsed


@catalog_app.command("update")
def catalog_update(
    item_id: Annotated[str, typer.Argument(help="the item to create, change or delete")],
    title: Annotated[str | None, typer.Option(help="new title (required for a new item)")] = None,
    attr: Annotated[
        list[str] | None, typer.Option(help="key=value to set, key= to remove (repeatable)")
    ] = None,
    description: Annotated[str | None, typer.Option(help="new description")] = None,
    delete: Annotated[bool, typer.Option("--delete", help="delete the item")] = False,
    publish_event: Annotated[bool, typer.Option("--publish/--no-publish", help="emit the event")] = True,
    catalog_url: CatalogUrl = DEFAULT_URL,
    bootstrap_servers: BootstrapServers = None,
    verbose: Verbose = False,
) -> None:
    """Change one item in the catalog and publish its change event."""
    from kafka.errors import KafkaError

    from reranker.catalog.publisher import PublishError, publish_events

    settings = _settings(bootstrap_servers) if publish_event else None
    if delete and (title is not None or attr or description is not None):
        raise typer.BadParameter("--delete takes no --title, --attr or --description")
    edits = _parse_attrs(attr or [])  # checked before the catalog is opened (or created)
    if settings is not None:
        require_broker(
            settings, verbose, "--bootstrap-servers or $GISTRANK_KAFKA_BOOTSTRAP_SERVERS (or --no-publish)"
        )
    with Catalog(catalog_url) as catalog:
        try:
            if delete:
                event = catalog.delete(item_id)
            else:
                attributes = None
                if attr:
                    # --attr edits the stored attributes; the catalog replaces them whole, so merge here.
                    current = catalog.get([item_id]).get(item_id)
                    attributes = dict(current.attributes) if current is not None else {}
                    for key, value in edits.items():
                        if value:
                            attributes[key] = value
                        else:
                            attributes.pop(key, None)
                event = catalog.upsert(item_id, title=title, attributes=attributes, description=description)
        except CatalogError as exc:
            raise typer.BadParameter(str(exc)) from None
    typer.echo(f"{event.item_id}: {event.op} version {event.version}")
    if settings is not None:
        try:
            publish_events(settings, [event])
        except (PublishError, KafkaError) as exc:
            # The catalog change is committed; the cursor republishes it (a duplicate is harmless).
            typer.echo(
                f"not published ({exc}); retry with: publish --since-version {event.version - 1}", err=True
            )
            raise typer.Exit(1) from None
        typer.echo(f"published to {settings.topic}")


@catalog_app.command("reconcile")
def catalog_reconcile(
    model: ModelRef = DEFAULT_MODEL,
    num_gist: NumGist = None,
    compressor: CompressorOpt = None,
    max_item_tokens: MaxItemTokens = None,
    fingerprint: Annotated[
        str | None, typer.Option(help="a model's fingerprint instead of loading --model (any view will do)")
    ] = None,
    catalog_url: CatalogUrl = DEFAULT_URL,
    publish: Annotated[
        bool, typer.Option("--publish/--no-publish", help="publish the restamped items' events")
    ] = True,
    feast_dir: FeastDir = None,
    online: Online = OnlineStore.sqlite,
    redis_url: RedisUrl = None,
    feast_config: FeastConfig = None,
    bootstrap_servers: BootstrapServers = None,
    verbose: Verbose = False,
) -> None:
    """After restoring the catalog from a backup: find items whose stored rows (in any model's view) are
    ahead of the catalog, move its version counter past them, and republish those items at new versions
    so the store follows the catalog again (streaming/reconcile.py). Run before the catalog takes writes."""
    from kafka.errors import KafkaError

    from reranker.catalog.publisher import PublishError, publish_events
    from streaming.reconcile import reconcile

    settings = _settings(bootstrap_servers) if publish else None
    if settings is not None:
        if fingerprint is None:
            check_model(model, compressor=compressor, num_gist=num_gist, max_item_tokens=max_item_tokens)
        require_broker(settings, verbose)
    store = _open_store(
        _fingerprint(fingerprint, model, num_gist, compressor, max_item_tokens),
        feast_dir,
        online,
        redis_url,
        feast_config,
    )
    with Catalog(catalog_url) as catalog:
        result = reconcile(catalog, store)
    typer.echo(f"checked {result.checked} catalog items; {len(result.ahead)} had rows ahead of the catalog")
    if not result.events:
        return
    typer.echo(f"restamped them at versions {result.events[0].version}..{result.events[-1].version}")
    if settings is None:
        typer.echo(
            "not published (--no-publish): publish them with `gistrank publish --since-version "
            f"{result.events[0].version - 1}`"
        )
        return
    try:
        published = publish_events(settings, result.events)
    except (PublishError, KafkaError) as exc:
        typer.echo(
            f"not published ({exc}); retry with: publish --since-version {result.events[0].version - 1}",
            err=True,
        )
        raise typer.Exit(1) from None
    typer.echo(f"published {published} events")


rollout_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Model rollouts: each model's K/V lives in its own Feast view; watch a new model's backfill "
    "cover the catalog, then drop the old model's view.",
)
Fingerprint = Annotated[
    str | None, typer.Option(help="the model's fingerprint, instead of loading --model to compute it")
]


def _fingerprint(
    fingerprint: str | None,
    model: str,
    num_gist: int | None,
    compressor: str | None,
    max_item_tokens: int | None,
) -> str:
    return fingerprint or _load_model(model, num_gist, None, compressor, max_item_tokens).fingerprint


def _coverages(
    target: str,
    catalog_url: str,
    feast_dir: Path | None,
    online: OnlineStore,
    redis_url: str | None,
    feast_config: Path | None,
) -> dict[str, Coverage]:
    """Every model view of the store (read-only) → its coverage of the live catalog; raises
    `CatalogError` for no catalog, `NoFeatureStoreError` for no store, `FeatureStoreUnavailableError`."""
    store = _open_store(target, feast_dir, online, redis_url, feast_config, apply=False)
    with Catalog(catalog_url, create=False) as catalog:
        items = [(item.item_id, item.version) for item in catalog.iter_items()]
    return {
        view: store.for_model(view).coverage(items) if view != target else store.coverage(items)
        for view in store.views()
    }


@rollout_app.command("status")
def rollout_status(
    model: ModelRef = DEFAULT_MODEL,
    num_gist: NumGist = None,
    compressor: CompressorOpt = None,
    max_item_tokens: MaxItemTokens = None,
    fingerprint: Fingerprint = None,
    catalog_url: CatalogUrl = DEFAULT_URL,
    feast_dir: FeastDir = None,
    online: Online = OnlineStore.sqlite,
    redis_url: RedisUrl = None,
    feast_config: FeastConfig = None,
) -> None:
    """Coverage of the catalog by every model's view (reads only). Exit 0: --model's view covers every
    live item at its catalog version (replicas may switch to it); 1: not yet; 3: cannot tell (no
    catalog, no store, no view of that model, store unreachable)."""
    from reranker.store import FeatureStoreUnavailableError

    if fingerprint:
        reader, target = None, fingerprint
    else:
        reader = _load_model(model, num_gist, None, compressor, max_item_tokens)
        target = reader.fingerprint

    def cannot_tell(reason: str) -> NoReturn:
        typer.echo(f"cannot tell whether model {target} covers the catalog: {reason}", err=True)
        raise typer.Exit(3)

    try:
        coverages = _coverages(target, catalog_url, feast_dir, online, redis_url, feast_config)
    except (CatalogError, FeatureStoreUnavailableError) as exc:
        cannot_tell(str(exc))
    if target not in coverages:
        cannot_tell("the store has no view of it (its consumers never ran, or a mistyped fingerprint)")
    covered = coverages[target]
    if reader is not None:  # how replicas of --model read the view: a shadow compares one reading only
        typer.echo(
            f"--model reads store {target} as reader {reader.reader_fingerprint}, its scores fused with "
            f"requests' first-stage scores by {reader.fusion}"
        )
    if reader is not None and reader.gist.reader_adapter_rank:
        typer.echo(
            f"a reader for store {target} (reader {reader.reader_fingerprint}): its adapter acts at query "
            "rows only, so it reads that store's view as it is — rolling it out writes nothing to the store"
        )
    typer.echo(f"{covered.items} live catalog items")
    typer.echo(f"{'model fingerprint':<34} {'current':>9} {'behind':>8} {'missing':>8} {'coverage':>9}")
    for view, cov in coverages.items():
        missing = cov.items - cov.current - cov.behind
        mark = "  <- --model" if view == target else ""
        typer.echo(f"{view:<34} {cov.current:>9} {cov.behind:>8} {missing:>8} {cov.ratio:>9.1%}{mark}")
    if covered.current == covered.items:
        typer.echo(f"model {target} covers the catalog: replicas may switch to it")
        return
    typer.echo(f"model {target} is not ready: {covered.items - covered.current} items not current yet")
    raise typer.Exit(1)


@rollout_app.command("gc")
def rollout_gc(
    model: ModelRef = DEFAULT_MODEL,
    num_gist: NumGist = None,
    compressor: CompressorOpt = None,
    max_item_tokens: MaxItemTokens = None,
    fingerprint: Fingerprint = None,
    keep: Annotated[list[str] | None, typer.Option(help="another fingerprint to keep (repeatable)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only say what would be dropped")] = False,
    unused_for: Annotated[
        float,
        typer.Option(
            min=0,
            help="minutes without a serving read before a view may be dropped (replicas note "
            "their use once a minute)",
        ),
    ] = 15.0,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="drop views that serving read recently too, and keep --model's view although it does not "
            "cover the catalog (the views that do are dropped)",
        ),
    ] = False,
    catalog_url: CatalogUrl = DEFAULT_URL,
    feast_dir: FeastDir = None,
    online: Online = OnlineStore.sqlite,
    redis_url: RedisUrl = None,
    feast_config: FeastConfig = None,
) -> None:
    """Drop every model's view (registry entry and online rows) except --model's (the live one) and
    --keep's, and except views a serving replica read in the last --unused-for minutes (unless --force);
    exit 1 if any view was refused. --model's view must exist and cover the catalog (every live item at
    its catalog version, as `rollout status` says) unless --force; a --keep must exist: else exit 2,
    nothing dropped. Run it after every replica serves the live model."""
    import time

    from reranker.store import FeatureStoreUnavailableError, NoFeatureStoreError

    live = _fingerprint(fingerprint, model, num_gist, compressor, max_item_tokens)
    kept = [live, *(keep or [])]
    hint = "--fingerprint / --model / --keep"
    try:
        coverages = _coverages(live, catalog_url, feast_dir, online, redis_url, feast_config)
    except NoFeatureStoreError as exc:
        raise typer.BadParameter(f"no view of {live}: {exc}", param_hint=hint) from None
    except CatalogError as exc:
        raise typer.BadParameter(
            f"cannot tell which views cover it: {exc}", param_hint="--catalog-url"
        ) from None
    except FeatureStoreUnavailableError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    views = "; ".join(
        f"{view} {cov.ratio:.1%} ({cov.current}/{cov.items} current, {cov.behind} behind)"
        for view, cov in coverages.items()
    )
    unknown = [view for view in kept if view not in coverages]
    if unknown:
        raise typer.BadParameter(
            f"no view of {', '.join(unknown)}; the views: {views or 'none'}", param_hint=hint
        )
    if coverages[live].ratio < 1 and not force:
        raise typer.BadParameter(
            f"{live}'s view does not cover the catalog, so gc would drop what serves; the views: {views}; "
            "keep one at 100% (`rollout status`), or pass --force",
            param_hint=hint,
        )
    refused = 0
    for view in coverages:
        if view in kept:
            typer.echo(f"keep {view}")
            continue
        other = _open_store(view, feast_dir, online, redis_url, feast_config, apply=False)
        used = other.last_use()
        if used is not None and not force and time.time() - used[0] < unused_for * 60:
            refused += 1
            typer.echo(
                f"refuse {view}: serving read it {time.time() - used[0]:.0f} s ago (replica {used[1]}); "
                f"switch its replicas first, or pass --force"
            )
            continue
        if not dry_run:
            other.drop()
        typer.echo(f"{'would drop' if dry_run else 'dropped'} {view}")
    if refused:
        raise typer.Exit(1)


dlq_app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="The dead-letter topic: events the consumer refused."
)


@dlq_app.command("replay")
def dlq_replay(
    reason: Annotated[
        list[str] | None,
        typer.Option(help="replay letters with this reason code (repeatable; default: every reason)"),
    ] = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="send them to the change topic (default: a dry run that counts)")
    ] = False,
    since_offset: Annotated[
        int, typer.Option(min=0, help="first dead-letter offset to read (each run prints where to resume)")
    ] = 0,
    bootstrap_servers: BootstrapServers = None,
    verbose: Verbose = False,
) -> None:
    """Send dead-lettered events back to the change topic, by reason code, once their cause is fixed."""
    from kafka.errors import KafkaError

    from monitoring.metrics import DEAD_LETTER_REASONS

    unknown = sorted(set(reason or ()) - set(DEAD_LETTER_REASONS))
    if unknown:
        raise typer.BadParameter(f"unknown reason {unknown}; known: {', '.join(DEAD_LETTER_REASONS)}")
    settings = _settings(bootstrap_servers)
    require_broker(settings, verbose)
    from streaming.replay import replay  # imports the consumer's (torch, feast): after the broker answered

    try:
        report = replay(settings, set(reason) if reason else None, apply, since_offset)
    except (ValueError, TimeoutError, KafkaError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    by_reason = ", ".join(f"{code} {n}" for code, n in sorted(report.matched.items())) or "none"
    typer.echo(f"read {report.read} letters of {settings.dlq_topic}; matching: {by_reason}")
    if report.truncated:
        typer.echo(f"{report.truncated} matching letters kept only a prefix of their record: not replayable")
    action = f"replayed {report.replayed} to {settings.topic}" if apply else "dry run: pass --apply to replay"
    resume = ", ".join(f"partition {p}: {o}" for p, o in sorted(report.next_offset.items()))
    typer.echo(f"{action}; next run resumes at --since-offset ({resume})")


def kafka_acls(
    publisher: Annotated[str, typer.Option(help="principal (SASL user) of the publishers and tools")],
    consumer: Annotated[str, typer.Option(help="principal of the gist consumers")],
    serving: Annotated[str, typer.Option(help="principal of the Triton servers (refresh requests)")],
    bootstrap_servers: BootstrapServers = None,
    verbose: Verbose = False,
) -> None:
    """Grant each role its ACLs on the topics and groups of $GISTRANK_KAFKA_* (reranker/catalog/
    kafka_acls.py); run with an administrator's credentials in GISTRANK_KAFKA_SASL_*."""
    from kafka.errors import KafkaError

    from reranker.catalog.kafka_acls import apply_acls

    settings = _settings(bootstrap_servers)
    require_broker(settings, verbose)
    try:
        count = apply_acls(settings, {"publisher": publisher, "consumer": consumer, "serving": serving})
    except (KafkaError, RuntimeError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{count} ACLs in place for publisher={publisher}, consumer={consumer}, serving={serving}")


main = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help=__doc__,
    context_settings={"help_option_names": ["-h", "--help"]},  # as `gistrank`'s: -h beside --help
)
main.command()(publish)
main.command()(consume)
main.command()(materialize)
main.add_typer(catalog_app, name="catalog")
main.add_typer(rollout_app, name="rollout")
main.add_typer(dlq_app, name="dlq")
main.command("kafka-acls")(kafka_acls)

if __name__ == "__main__":
    main()
