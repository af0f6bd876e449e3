"""`gistrank serve` and `gistrank rerank`: plain functions with typer-annotated options.

Registered as commands by reranker/cli/__init__.py (`app.command()(serve)`); heavy imports stay inside them.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import Annotated

import typer

from reranker.catalog.database import DEFAULT_URL
from reranker.catalog.preflight import check_model, ensure_free, port_option, require_broker
from reranker.core.checkpoints import DEFAULT_MODEL, model_spec


def serve(
    model: Annotated[
        str,
        typer.Option(help="preset or shipped alias, GistRank checkpoint folder, base alias or HF folder"),
    ] = DEFAULT_MODEL,
    compressor: Annotated[
        str | None, typer.Option(help="gist | select | prefix (default: the model's own)")
    ] = None,
    num_gist: Annotated[
        int | None, typer.Option(help="k stored positions (default: the model's own)")
    ] = None,
    max_item_tokens: Annotated[
        int | None, typer.Option(help="item tokens read, for the model and its shadow (default: their own)")
    ] = None,
    kv_storage: Annotated[
        str | None,
        typer.Option(
            "--kv-storage",
            "--storage-dtype",
            help="how the store keeps the K/V (float32 | bfloat16 | float16 | int8 | int4 | int2; default "
            "the model's own): in the store fingerprint, so give the consumer and `materialize` the same",
        ),
    ] = None,
    fusion: Annotated[
        str | None,
        typer.Option(
            help="how requests' FIRST_STAGE_SCORES are fused with the reranker's: linear:W | rrf:W[:K] | "
            "none, or the fusion.json of `gistrank eval --fit-fusion` (its entry for --model); default "
            "the model's own (the default model: linear:0.0, fitted on AP89 dev's BM25 top 20)"
        ),
    ] = None,
    catalog_url: Annotated[str, typer.Option(help="catalog DB (recompute source)")] = DEFAULT_URL,
    full_model: Annotated[
        str | None,
        typer.Option(
            "--shadow-model",
            "--full-model",
            help="shadow's full-context model; default the shipped teacher for a shipped student, "
            "else --model's own full-context forward",
        ),
    ] = None,
    feast_online: Annotated[
        str, typer.Option("--online", "--feast-online", help="online store: sqlite | redis | none")
    ] = "sqlite",
    feast_dir: Annotated[
        str, typer.Option(help="Feast data dir; default $GISTRANK_FEAST_DIR or $GISTRANK_HOME/feast")
    ] = "",
    redis_url: Annotated[str, typer.Option(help="for --online redis")] = "",
    feast_config: Annotated[
        str,
        typer.Option(
            envvar="GISTRANK_FEAST_CONFIG",
            help="a Feast feature_store.yaml used as written (Redis Cluster, a SQL registry, ...); "
            "replaces --feast-dir / --redis-url",
        ),
    ] = "",
    feast_retry_s: Annotated[float, typer.Option(help="after a Feast failure, recompute this long")] = 5.0,
    l1_bytes: Annotated[int, typer.Option(help="L1 cache bound, bytes of K/V")] = 256 * 1024 * 1024,
    l1_ttl_s: Annotated[float, typer.Option(help="L1 entry lifetime, seconds")] = 300.0,
    shadow_rate: Annotated[
        float, typer.Option(help="fraction of requests also scored by the full model")
    ] = 0.02,
    max_candidates: Annotated[int, typer.Option(help="most item ids per request")] = 200,
    kafka_bootstrap_servers: Annotated[
        str,
        typer.Option(
            "--bootstrap-servers",
            "--kafka-bootstrap-servers",
            help="broker to hand recomputed items to as refresh requests for the consumer group (topic "
            "and security from GISTRANK_KAFKA_*); default none: a recompute stays in this server's cache",
        ),
    ] = "",
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N")] = "auto",
    num_threads: Annotated[int, typer.Option(help="torch threads per model process; 0 = torch default")] = 0,
    host: Annotated[str, typer.Option(help="address every endpoint binds to")] = "127.0.0.1",
    http_port: Annotated[int, port_option("HTTP endpoint", free=True)] = 8000,
    grpc_port: Annotated[int, port_option("gRPC endpoint", free=True)] = 8001,
    metrics_port: Annotated[
        int, port_option("Triton's metrics: its nv_inference_* and the models' gistrank_*", free=True)
    ] = 8002,
    instances: Annotated[
        int, typer.Option(min=1, help="gist_reranker model instances (processes, one L1 cache each)")
    ] = 1,
    workdir: Annotated[str, typer.Option(help="runtime repository and log; default a temporary dir")] = "",
    startup_timeout_s: Annotated[float, typer.Option(help="give up if not ready by then")] = 600.0,
) -> None:
    """Run tritonserver with the gist_reranker and full_reranker models until SIGTERM or Ctrl-C.

    --compressor / --num-gist / --max-item-tokens / --kv-storage read --model with those settings; the
    consumer and `materialize` must be given the same ones, or their K/V carries another fingerprint."""
    ensure_free(host, {"--http-port": http_port, "--grpc-port": grpc_port, "--metrics-port": metrics_port})
    setting = fusion and _fusion_setting(fusion, model)
    spec = model_spec(
        model,
        compressor=compressor,
        num_gist=num_gist,
        max_item_tokens=max_item_tokens,
        kv_storage=kv_storage,
        fusion=setting,
    )
    check_model(spec, "--model / --compressor / --num-gist / --kv-storage")
    shadow = full_model and model_spec(full_model, max_item_tokens=max_item_tokens)
    if shadow:
        check_model(shadow, "--shadow-model")
    if kafka_bootstrap_servers:  # a wrong address fails now, not at the first recompute's refresh request
        from reranker.catalog.kafka_settings import KafkaSettings

        settings = KafkaSettings.from_env(bootstrap_servers=kafka_bootstrap_servers)
        require_broker(
            settings, verbose=False, how="--bootstrap-servers (or leave it out: no refresh requests)"
        )
    from reranker.serving.server import ServerError, ServerSettings, TritonServer  # torch: input known good

    server = TritonServer(
        ServerSettings(
            model_path=spec,
            catalog_url=catalog_url,
            full_model_path=shadow,
            feast_online=feast_online,
            feast_dir=feast_dir,
            redis_url=redis_url,
            feast_config=feast_config,
            feast_retry_s=feast_retry_s,
            l1_bytes=l1_bytes,
            l1_ttl_s=l1_ttl_s,
            shadow_rate=shadow_rate,
            max_candidates=max_candidates,
            kafka_bootstrap_servers=kafka_bootstrap_servers,
            device=device,
            num_threads=num_threads,
            host=host,
            http_port=http_port,
            grpc_port=grpc_port,
            metrics_port=metrics_port,
            instances=instances,
            workdir=workdir,
        )
    )
    # SIGTERM raises KeyboardInterrupt as Ctrl-C does: it leaves whatever serve waits on, start included.
    handlers = {
        sig: signal.signal(sig, signal.default_int_handler) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        started = time.monotonic()
        server.start(startup_timeout_s)
        typer.echo(
            f"ready in {time.monotonic() - started:.1f} s: HTTP {server.http_url}, gRPC {server.grpc_url}, "
            f"metrics {server.metrics_url} (log {server.log_path})"
        )
        while server.running:
            time.sleep(1.0)
        typer.echo(f"tritonserver exited unexpectedly:\n{server.log_tail()}", err=True)
        raise typer.Exit(1)
    except KeyboardInterrupt:
        typer.echo("stopping tritonserver")
    except ServerError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    finally:
        for sig in handlers:  # a second signal must not interrupt the orderly stop
            signal.signal(sig, signal.SIG_IGN)
        server.stop()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _fusion_setting(fusion: str, model: str) -> str:
    """--fusion as a RerankerConfig setting: as given, or read for `model` from an eval's fusion.json."""
    from pathlib import Path

    from reranker.core.fusion import FUSION_FILE, canonical_fusion, served_fusion

    try:
        if fusion.endswith(".json") or Path(fusion).is_dir():
            path = Path(fusion)
            return served_fusion(path / FUSION_FILE if path.is_dir() else path, model)
        return canonical_fusion(fusion)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--fusion") from None


def rerank(
    query: Annotated[str, typer.Argument(help="the search query")],
    item_ids: Annotated[list[str], typer.Argument(help="candidate item ids")],
    url: Annotated[
        str | None, typer.Option(help="host:port; default 127.0.0.1:8000 (http) / :8001 (grpc)")
    ] = None,
    protocol: Annotated[str, typer.Option(help="http | grpc")] = "http",
    model: Annotated[str, typer.Option(help="gist_reranker, or full_reranker for the full-context model")] = (
        "gist_reranker"
    ),
    as_json: Annotated[
        bool, typer.Option("--json", help="JSON in request order instead of a ranking")
    ] = False,
    timeout_s: Annotated[float, typer.Option(help="request timeout, seconds")] = 60.0,
    first_stage_scores: Annotated[
        str | None,
        typer.Option(
            help="the first stage's score of each id, comma-separated in ITEM_IDS order (e.g. BM25's "
            "'12.1,9.7,3.2'): the served scores are then fused with them by the model's fusion setting"
        ),
    ] = None,
) -> None:
    """Score ITEM_IDS for QUERY on a running server; print them best first (errors last)."""
    from reranker.serving.client import RerankClient, RerankError

    if protocol not in ("http", "grpc"):
        raise typer.BadParameter("must be http or grpc", param_hint="--protocol")
    first_stage = None
    if first_stage_scores is not None:
        try:
            first_stage = [float(x) for x in first_stage_scores.split(",")]
        except ValueError:
            raise typer.BadParameter(
                f"{first_stage_scores!r} is not comma-separated numbers", param_hint="--first-stage-scores"
            ) from None
    try:
        with RerankClient(url, protocol, model, timeout_s) as client:  # type: ignore[arg-type]
            candidates = client.rerank(query, item_ids, first_stage)
    except RerankError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    if as_json:
        rows = [
            {
                "item_id": c.item_id,
                "score": c.score if c.scored else None,
                "rerank_score": c.rerank_score if c.scored else None,
                "status": c.status,
            }
            for c in candidates
        ]
        json.dump(rows, sys.stdout, ensure_ascii=False, indent=2)
        typer.echo()
        return
    ranked = sorted(candidates, key=lambda c: (not c.scored, -c.score if c.scored else 0.0))
    if first_stage is not None:
        typer.echo(f"{'':3}  {'fused':>10}  {'reranker':>10}  {'status':<19}  item")
    for rank, c in enumerate(ranked, start=1):
        score = f"{c.score:10.4f}" if c.scored else f"{'-':>10}"
        own = "" if first_stage is None else (f"{c.rerank_score:10.4f}  " if c.scored else f"{'-':>10}  ")
        typer.echo(f"{rank:3d}  {score}  {own}{c.status:<19}  {c.item_id}")
