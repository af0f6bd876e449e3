"""`rollout status | gc`: each model's units live in their own Feast view; watch a new one cover the
catalog, then drop the old."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from reranker.catalog.database import DEFAULT_URL, Catalog, CatalogError
from reranker.core.checkpoints import DEFAULT_MODEL
from streaming.cli.options import (
    CatalogUrl,
    CompressorOpt,
    FeastConfig,
    FeastDir,
    Fingerprint,
    MaxItemTokens,
    ModelRef,
    NumGist,
    Online,
    OnlineStore,
    RedisUrl,
    load_model,
    model_fingerprint,
    open_store,
)

if TYPE_CHECKING:
    from reranker.store import Coverage


rollout_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Model rollouts: each model's K/V lives in its own Feast view; watch a new model's backfill "
    "cover the catalog, then drop the old model's view.",
)


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
    store = open_store(target, feast_dir, online, redis_url, feast_config, apply=False)
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
        reader = load_model(model, num_gist, None, compressor, max_item_tokens)
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

    live = model_fingerprint(fingerprint, model, num_gist, compressor, max_item_tokens)
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
        other = open_store(view, feast_dir, online, redis_url, feast_config, apply=False)
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
