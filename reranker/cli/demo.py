"""`gistrank demo`: the main job on embedded defaults (reranker/demo/)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from reranker.catalog.preflight import check_model
from reranker.cli.options import HOME
from reranker.core.checkpoints import DEFAULT_MODEL


def demo(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "--base",
            help="model: a preset (the default reads the untouched base by query likelihood with prefix "
            "caching at 64), a shipped checkpoint alias or folder (trained), or a base to wrap untrained",
        ),
    ] = DEFAULT_MODEL,
    num_gist: Annotated[
        int | None, typer.Option(help="k stored positions (default: the model's own)")
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            help="dtype of a fresh wrap's weights and K/V: float32 | bfloat16 | float16 | auto (bf16 only "
            "where fast, so its fingerprint depends on the machine); default the model's own, the same on "
            "every machine, as `serve` and `consume` use"
        ),
    ] = None,
    core: Annotated[
        bool, typer.Option(help="in-process only: compress + score vs score_full, no services")
    ] = False,
    workdir: Annotated[Path, typer.Option(help="where the pipeline demo keeps its state")] = HOME / "demo",
    queries: Annotated[int, typer.Option(help="sample queries ranked through Triton")] = 3,
    max_item_tokens: Annotated[
        int | None,
        typer.Option(
            help="item tokens read (the full-context shadow reads them all, on CPU; default: the model's own)"
        ),
    ] = None,
    shadow_model: Annotated[
        str | None,
        typer.Option(
            help="full-context model of the shadow; default the shipped teacher for a shipped student, "
            "else the model's own full-context forward"
        ),
    ] = None,
    compressor: Annotated[
        str | None,
        typer.Option(
            help="gist | select | prefix: what the k stored positions are (default: the model's own); "
            "select and prefix read any checkpoint's body with --num-gist positions and no training"
        ),
    ] = None,
) -> None:
    """The main job: catalog → Kafka → consumer → Feast → Triton reranking with shadow, then metrics."""
    check_model(model, compressor=compressor, num_gist=num_gist, max_item_tokens=max_item_tokens)
    if shadow_model is not None:
        check_model(shadow_model, "--shadow-model")
    if core:
        from reranker.demo.core import run_core_demo

        run_core_demo(model, num_gist, dtype, compressor=compressor, max_item_tokens=max_item_tokens)
        return
    from reranker.demo.pipeline import run_pipeline_demo

    run_pipeline_demo(model, workdir, num_gist, dtype, queries, max_item_tokens, shadow_model, compressor)
