"""`publish`, `consume`, `materialize`: catalog changes → Kafka → compressed units in Feast."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from reranker.catalog.database import DEFAULT_URL, Catalog
from reranker.catalog.kafka_settings import ensure_topics
from reranker.catalog.preflight import check_model, ensure_free, port_option, require_broker
from reranker.core.checkpoints import DEFAULT_MODEL
from streaming.cli.options import (
    BootstrapServers,
    CatalogUrl,
    CompressBatch,
    CompressorOpt,
    CreateTopics,
    DType,
    FeastConfig,
    FeastDir,
    KVStorageOpt,
    MaxItemTokens,
    ModelRef,
    NumGist,
    Online,
    OnlineStore,
    Partitions,
    RedisUrl,
    Verbose,
    catalog_url_option,
    configure_logging,
    kafka_settings,
    load_model,
    open_store,
)


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
    settings = kafka_settings(bootstrap_servers)
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
            callback=catalog_url_option,
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
    configure_logging(verbose)
    settings = kafka_settings(bootstrap_servers)
    if metrics_port is not None:  # before the model loads, as every check of the options
        ensure_free(metrics_address, {"--metrics-port": metrics_port})
    # a misspelled model fails at once (exit 2), a down broker in seconds (exit 1): before the load
    storage = kv_storage and kv_storage.value
    check_model(
        model, compressor=compressor, num_gist=num_gist, max_item_tokens=max_item_tokens, kv_storage=storage
    )
    require_broker(settings, verbose)
    from streaming.consumer import ForeignGroupError, GistConsumer

    gist_model = load_model(model, num_gist, dtype, compressor, max_item_tokens, kv_storage)
    store = open_store(gist_model.fingerprint, feast_dir, online, redis_url, feast_config)
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

    gist_model = load_model(model, num_gist, dtype, compressor, max_item_tokens, kv_storage)
    store = open_store(gist_model.fingerprint, feast_dir, online, redis_url, feast_config)
    with Catalog(catalog_url) as catalog:
        result = run_materialize(catalog, gist_model, store, stale_only, batch_size)
    typer.echo(f"scanned {result.scanned}, compressed {result.compressed}, written {result.written}")
