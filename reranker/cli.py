"""`gistrank` command line. Heavy imports (torch, feast, kafka) happen inside each command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)

Base = Annotated[str, typer.Option(help="base alias, local HF folder, or GistRank checkpoint folder")]
NumGist = Annotated[int, typer.Option(help="k gist tokens per item")]
DType = Annotated[str, typer.Option(help="auto | float32 | bfloat16 | float16 (auto: bf16 only where fast)")]
DEFAULT_BASE = "smollm2-135m-instruct"


@app.command()
def demo(base: Base = DEFAULT_BASE, num_gist: NumGist = 8, dtype: DType = "auto") -> None:
    """Compress the sample catalog, rank sample queries with `score` (gist K/V) beside `score_full`."""
    from reranker.demo import run_core_demo

    run_core_demo(base, num_gist=num_gist, dtype=dtype)


@app.command()
def bench(
    base: Base = DEFAULT_BASE,
    candidates: Annotated[int, typer.Option(help="N candidates per query")] = 50,
    query_tokens: Annotated[int, typer.Option(help="ℓ online tokens per candidate (query + score)")] = 32,
    item_tokens: Annotated[list[int] | None, typer.Option(help="j values to sweep (repeatable)")] = None,
    num_gist: NumGist = 8,
    dtype: DType = "auto",
    repeats: Annotated[int, typer.Option(help="timed runs of the gist path after a warm-up")] = 5,
    out: Annotated[Path, typer.Option(help="where the JSON result goes")] = Path("runs/bench_score.json"),
) -> None:
    """Candidates/s of online `score` vs full-context `score_full`, next to the ideal (j + ℓ)/ℓ."""
    from reranker.bench import run_score_bench

    js = item_tokens or [256, 512, 1024]
    run_score_bench(base, candidates, query_tokens, js, num_gist, dtype, repeats, out)


if __name__ == "__main__":
    app()
