"""Options and helpers the writer's commands share, declared once: Kafka settings, the model read, the
Feast store opened, logging."""

from __future__ import annotations

import logging
import os
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from reranker.catalog.database import CatalogError, check_catalog_url
from reranker.catalog.kafka_settings import KafkaSettings
from reranker.catalog.preflight import LOG_FORMAT, check_model, kafka_logs

if TYPE_CHECKING:
    from reranker.core.model import Reranker
    from reranker.store import GistStore


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


def catalog_url_option(url: str | None) -> str | None:
    """A --catalog-url as given, refused when it is an SQLite file in a folder that does not exist."""
    try:
        return url and check_catalog_url(url)
    except CatalogError as exc:
        raise typer.BadParameter(str(exc)) from None


CatalogUrl = Annotated[
    str, typer.Option(callback=catalog_url_option, help="SQLAlchemy URL of the catalog database")
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


def kafka_settings(bootstrap_servers: str | None) -> KafkaSettings:
    try:
        return KafkaSettings.from_env(bootstrap_servers=bootstrap_servers)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise typer.BadParameter(f"Kafka settings: {exc}") from None


def load_model(
    ref: str,
    num_gist: int | None,
    dtype: ComputeDType | None,
    compressor: str | None = None,
    max_item_tokens: int | None = None,
    kv_storage: BlobDType | None = None,
) -> Reranker:
    """`Reranker.read`, its refusals as usage errors."""
    storage = kv_storage and kv_storage.value
    settings = {"num_gist": num_gist, "max_item_tokens": max_item_tokens, "kv_storage": storage}
    check_model(ref, compressor=compressor, **settings)
    from reranker import Reranker  # torch: once the reference is known good
    from reranker.core.base_models import BaseModelUnavailableError
    from reranker.core.errors import one_line

    try:
        return Reranker.read(
            ref, dtype and dtype.value, compressor, num_gist, max_item_tokens, kv_storage=storage
        )
    except (ValueError, BaseModelUnavailableError) as exc:  # an unknown name or compressor, a k the ...
        raise typer.BadParameter(one_line(exc), param_hint="--model") from None


def open_store(
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


def configure_logging(verbose: bool) -> None:
    """INFO for everything but kafka-python (`kafka_logs`); $GISTRANK_LOG_LEVEL (e.g. DEBUG: each batch's
    offsets as it starts) for the project's own loggers."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    kafka_logs(verbose)
    level = os.environ.get("GISTRANK_LOG_LEVEL", "INFO").upper()
    if level not in logging.getLevelNamesMapping():
        raise typer.BadParameter(f"$GISTRANK_LOG_LEVEL={level!r} is not a logging level")
    for name in ("streaming", "reranker"):
        logging.getLogger(name).setLevel(level)


Fingerprint = Annotated[
    str | None, typer.Option(help="the model's fingerprint, instead of loading --model to compute it")
]


def model_fingerprint(
    fingerprint: str | None,
    model: str,
    num_gist: int | None,
    compressor: str | None,
    max_item_tokens: int | None,
) -> str:
    """--fingerprint as given, else the fingerprint of --model read with its settings."""
    return fingerprint or load_model(model, num_gist, None, compressor, max_item_tokens).fingerprint
