"""`catalog load | update | reconcile`: the item catalog, the source of truth the change events come from."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from reranker.catalog.database import DEFAULT_URL, Catalog, CatalogError, check_catalog_file
from reranker.catalog.preflight import check_model, require_broker
from reranker.core.checkpoints import DEFAULT_MODEL
from streaming.cli.options import (
    BootstrapServers,
    CatalogUrl,
    CompressorOpt,
    FeastConfig,
    FeastDir,
    MaxItemTokens,
    ModelRef,
    NumGist,
    Online,
    OnlineStore,
    RedisUrl,
    Verbose,
    kafka_settings,
    model_fingerprint,
    open_store,
)

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

    settings = kafka_settings(bootstrap_servers) if publish_event else None
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

    settings = kafka_settings(bootstrap_servers) if publish else None
    if settings is not None:
        if fingerprint is None:
            check_model(model, compressor=compressor, num_gist=num_gist, max_item_tokens=max_item_tokens)
        require_broker(settings, verbose)
    store = open_store(
        model_fingerprint(fingerprint, model, num_gist, compressor, max_item_tokens),
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
