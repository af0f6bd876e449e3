"""Options and helpers the `gistrank` commands share, declared once: one name per concept across commands
(--model is the model read: serve, consume, plan, rollout use it too; --base stays as the former name of
train's and the benches')."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from reranker.core.home import home

if TYPE_CHECKING:
    from pydantic import ValidationError

    from reranker.data.relevance_data import RelevanceSet

HOME = home()  # $GISTRANK_HOME: the state folder (reranker/core/home.py)
RUNS = HOME / "runs"  # default output of benches, evals, plots

Model = Annotated[
    str,
    typer.Option("--model", "--base", help="model: preset, base alias, local HF folder or checkpoint"),
]
NumGist = Annotated[int, typer.Option(help="k gist tokens per item")]
DType = Annotated[str, typer.Option(help="auto | float32 | bfloat16 | float16 (auto: bf16 only where fast)")]
Data = Annotated[
    str, typer.Option(help="'synthetic' (seeded generator) or a relevance file (JSONL/CSV) / saved set dir")
]
Products = Annotated[int, typer.Option(help="synthetic catalog size (product families)")]
RunFolder = Annotated[
    Path, typer.Option(file_okay=False, help="run folder: checkpoint/, curve.jsonl, config.json")
]
Steps = Annotated[int, typer.Option(min=1)]
Minutes = Annotated[float | None, typer.Option(min=0, help="stop after this much wall time")]
Device = Annotated[str | None, typer.Option(help="cpu | cuda (default: cuda when present)")]


def load_data(data: str, seed: int, products: int, max_item_tokens: int) -> RelevanceSet:
    """--data as a relevance set: the seeded synthetic one, a saved set folder or a flat file."""
    from reranker.core.errors import GistRankError
    from reranker.data.data_synth import generate
    from reranker.data.relevance_data import RelevanceSet, load_relevance_file

    if data == "synthetic":
        return generate(seed, products, queries_per_product=4, length_tokens=(100, max(120, max_item_tokens)))
    path = Path(data)
    try:
        return RelevanceSet.load_jsonl(path) if path.is_dir() else load_relevance_file(path)
    except GistRankError as exc:  # a bad relevance file: one line naming its file and line, no traceback
        raise typer.BadParameter(str(exc), param_hint="--data") from exc


def validation_problems(err: ValidationError) -> typer.BadParameter:
    """A bad option or --config field as one usage error naming each field, no traceback."""
    problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
    return typer.BadParameter(problems)
