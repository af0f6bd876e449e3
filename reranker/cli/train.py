"""`gistrank train`, `train-gists`, `train-reader`, `curves`: training runs (reranker/training/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from reranker.catalog.preflight import check_model
from reranker.cli.options import (
    RUNS,
    Data,
    Device,
    DType,
    Minutes,
    Model,
    NumGist,
    Products,
    RunFolder,
    Steps,
    load_data,
    validation_problems,
)
from reranker.core.base_models import DEFAULT_BASE
from reranker.core.checkpoints import DEFAULT_MODEL


def train(
    out: Annotated[
        Path, typer.Option(file_okay=False, help="run folder: checkpoint/, curve.jsonl, trainer state")
    ],
    role: Annotated[str, typer.Option(help="teacher | student")] = "student",
    model: Model = DEFAULT_BASE,
    data: Data = "synthetic",
    seed: int = 0,
    products: Products = 200,
    num_gist: NumGist = 8,
    keep_item_prefix: Annotated[
        int, typer.Option(help="t: first item tokens kept as raw K/V beside the gists (hybrid; 0 = off)")
    ] = 0,
    max_item_tokens: int = 512,
    score_rule: Annotated[
        str,
        typer.Option(help="head (a trained logit) | query_likelihood (log p(query | item) from the LM head)"),
    ] = "head",
    query_template: Annotated[
        str | None,
        typer.Option(
            help="how the query follows the gists; must contain {query} (default: RerankerConfig's for head, "
            "the autoencoding prompt + {query} for query_likelihood)"
        ),
    ] = None,
    dtype: DType = "auto",
    config: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="JSON file of further TrainConfig fields")
    ] = None,
    resume: Annotated[bool, typer.Option(help="continue the run saved in --out")] = False,
    steps: Annotated[
        int | None, typer.Option(min=1, help="total steps (over the config's; with --resume: extend the run)")
    ] = None,
) -> None:
    """Train the full-context teacher or the gist student (each ingredient a TrainConfig switch)."""
    check_model(model)
    from pydantic import ValidationError

    relevance = load_data(data, seed, products, max_item_tokens)
    from reranker.core.config import RerankerConfig, resolve_dtype, template_for
    from reranker.training.trainer import TrainConfig, Trainer  # torch: once the data is known good

    if resume:
        try:
            trainer = Trainer.resume(out, relevance, steps=steps)
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="--steps") from err
    else:
        extra = json.loads(config.read_text()) if config else {}
        extra |= {} if steps is None else {"steps": steps}
        try:
            gist = RerankerConfig(
                num_gist=num_gist,
                keep_item_prefix=keep_item_prefix,
                max_item_tokens=max_item_tokens,
                score_rule=score_rule,
                dtype=resolve_dtype(dtype),
                **({"query_template": query_template} if query_template else template_for(score_rule)),
            )
            cfg = TrainConfig(**({"role": role, "base": model, "gist": gist, "seed": seed} | extra))
        except ValidationError as err:  # a bad option or --config field: say which, no traceback
            raise validation_problems(err) from err
        trainer = Trainer(cfg, relevance, out)
    curve = trainer.fit()
    steps_done = f"{len(curve)} step" + ("" if len(curve) == 1 else "s")
    typer.echo(f"{steps_done}, last loss {curve[-1]['loss']:.4f}; checkpoint: {out / 'checkpoint'}")


def train_gists(
    out: RunFolder,
    reader: Annotated[
        str,
        typer.Option(
            help="the frozen full-context reader the gists must match: a preset, base or checkpoint "
            "(default: the default model's reader, the untouched base by query likelihood)"
        ),
    ] = DEFAULT_MODEL,
    data: Data = "synthetic",
    seed: int = 0,
    products: Products = 200,
    num_gist: NumGist = 16,
    keep_item_prefix: Annotated[int, typer.Option(help="t: raw item tokens stored before the gists")] = 0,
    adapter_rank: Annotated[int, typer.Option(help="gist adapter rank (0: gist embeddings only)")] = 8,
    reader_rank: Annotated[
        int,
        typer.Option(
            min=0,
            help="reader adapter rank trained with the gists, at query rows only (0: the reader as it is)",
        ),
    ] = 0,
    pool_windows: Annotated[
        bool, typer.Option(help="each gist reads only its own span of the item (GistPool's windows)")
    ] = False,
    max_item_tokens: Annotated[
        int | None, typer.Option(help="item tokens read (default: the reader's)")
    ] = None,
    steps: Steps = 200,
    max_queries: Annotated[
        int | None, typer.Option(min=1, help="the first N train queries only (a slice sized to the CPU)")
    ] = None,
    minutes: Minutes = None,
    init_from: Annotated[
        str | None, typer.Option(help="continue from this gist checkpoint (same reader, k, t and rank)")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="JSON file of further FrozenGistConfig fields"),
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(file_okay=False, help="keep the reader's item K/V here (codec blobs) instead of in RAM"),
    ] = None,
    memory_items: Annotated[
        int, typer.Option(min=1, help="item K/V units held in memory (~16 MB each at 1024 bf16 tokens)")
    ] = 256,
    holdout_queries: Annotated[
        int,
        typer.Option(
            min=0,
            help="hold out the last N train queries: their lists pick the checkpoint's step (lowest "
            "list-wise KL to the reader; early stopping within the train split)",
        ),
    ] = 0,
    holdout_pseudo_queries: Annotated[
        int,
        typer.Option(
            min=0,
            help="pseudo-queries each held-out list is also asked (fixed sentences of its articles): "
            "a less noisy held-out KL, one more read per list and check each",
        ),
    ] = 0,
    holdout_every: Annotated[int, typer.Option(min=1, help="steps between two held-out checks")] = 20,
    holdout_patience: Annotated[
        int | None, typer.Option(min=1, help="stop after this many held-out checks without a new best")
    ] = None,
    device: Device = None,
) -> None:
    """Train gists over a frozen reader: its item K/V computed once, the gists and their adapter
    distilled list-wise to its full-context scores (reranker/training/frozen_reader.py)."""
    check_model(reader, "--reader")
    if init_from is not None:
        check_model(init_from, "--init-from")
    from pydantic import ValidationError

    from reranker.training.frozen_reader import FrozenGistConfig, FrozenGistTrainer

    relevance = load_data(data, seed, products, max_item_tokens or 1024).split("train", max_queries)
    extra = json.loads(config.read_text()) if config else {}
    try:
        cfg = FrozenGistConfig(
            **{
                "reader": reader,
                "num_gist": num_gist,
                "keep_item_prefix": keep_item_prefix,
                "adapter_rank": adapter_rank,
                "reader_rank": reader_rank,
                "pool_windows": pool_windows,
                "max_item_tokens": max_item_tokens,
                "steps": steps,
                "max_minutes": minutes,
                "seed": seed,
                "init_from": init_from,
                "holdout_queries": holdout_queries,
                "holdout_pseudo_queries": holdout_pseudo_queries,
                "holdout_every": holdout_every,
                "holdout_patience": holdout_patience,
            }
            | extra
        )
    except ValidationError as err:
        raise validation_problems(err) from err
    try:
        trainer = FrozenGistTrainer(cfg, relevance, out, device, cache_dir, memory_items)
    except ValueError as err:  # e.g. a holdout that leaves no query to train on
        raise typer.BadParameter(str(err)) from err
    curve = trainer.fit()
    steps = [row for row in curve if "loss" in row]
    rate = trainer.pairs / max(trainer.cpu_seconds, 1e-9)
    kept = "the last step's gists"
    if trainer.best is not None:
        kept = f"the gists of step {trainer.best.step}, held-out KL {trainer.best.kl:.4f}"
    last = f"last loss {steps[-1]['loss']:.4f}, " if steps else ""
    typer.echo(
        f"item K/V: {trainer.items.computed} items computed, {trainer.fill_seconds:.0f} s before the "
        f"first step; {len(steps)} steps, {last}{rate:.1f} pairs per CPU-second; checkpoint "
        f"({kept}): {out / 'checkpoint'}"
    )


def train_reader(
    out: RunFolder,
    model: Annotated[
        str,
        typer.Option(
            help="the store the reader reads: a preset, base or checkpoint with its stored-unit settings "
            "(REF?compressor=…&num_gist=…); its units are never rewritten"
        ),
    ] = DEFAULT_MODEL,
    data: Data = "synthetic",
    objective: Annotated[
        str, typer.Option(help="labels (list-wise CE) | distill (KL to the whole-item reader) | both")
    ] = "both",
    pseudo_lists: Annotated[
        int,
        typer.Option(
            min=0,
            help="pseudo-query lists from the set's items (title or a sentence → the item, BM25 "
            "neighbours as negatives): label-free, in domain",
        ),
    ] = 0,
    pseudo_query: Annotated[
        str,
        typer.Option(
            help="title (else a sentence) | sentence: one beginning past the tokens the store keeps verbatim"
        ),
    ] = "title",
    judged: Annotated[
        bool, typer.Option("--judged/--no-judged", help="train on the train split's judged lists")
    ] = True,
    rank: Annotated[int, typer.Option(min=1, help="reader adapter rank (every projection, query rows)")] = 8,
    steps: Steps = 200,
    minutes: Minutes = None,
    max_queries: Annotated[int | None, typer.Option(min=1, help="the first N train queries only")] = None,
    max_item_tokens: Annotated[
        int | None, typer.Option(help="item tokens read (default: the store's)")
    ] = None,
    seed: int = 0,
    products: Products = 200,
    init_from: Annotated[
        str | None, typer.Option(help="continue from this reader checkpoint (same store, same rank)")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="JSON file of further ReaderTrainConfig fields"),
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option(file_okay=False, help="keep the stored units here (codec blobs) instead of in RAM"),
    ] = None,
    device: Device = None,
) -> None:
    """Train the reader for the store: adapters at query rows only (and the head), over the store's
    units computed once; the dev split (or --holdout-queries in --config) picks the step. The result reads
    the same store: rolling it out rewrites nothing (reranker/training/reader_training.py)."""
    from pydantic import ValidationError

    from reranker.training.reader_training import ReaderTrainConfig, ReaderTrainer

    relevance = load_data(data, seed, products, max_item_tokens or 1024)
    if max_queries:
        kept = {q.query_id for q in relevance.split("train", max_queries).queries}
        kept |= {q.query_id for q in relevance.queries if q.split != "train"}
        relevance = relevance.model_copy(
            update={"queries": [q for q in relevance.queries if q.query_id in kept]}
        )
    extra = json.loads(config.read_text()) if config else {}
    try:
        cfg = ReaderTrainConfig(
            **{
                "model": model,
                "rank": rank,
                "objective": objective,
                "pseudo_lists": pseudo_lists,
                "pseudo_query": pseudo_query,
                "judged": judged,
                "max_item_tokens": max_item_tokens,
                "steps": steps,
                "max_minutes": minutes,
                "seed": seed,
                "init_from": init_from,
            }
            | extra
        )
        trainer = ReaderTrainer(cfg, relevance, out, device, cache_dir)
    except ValidationError as err:
        raise validation_problems(err) from err
    except ValueError as err:
        raise typer.BadParameter(str(err)) from err
    curve = trainer.fit()
    checks = [row for row in curve if "dev_ndcg@10" in row]
    untrained = checks[0]["dev_ndcg@10"]
    chosen = f"step {trainer.best[1]}, dev nDCG@10 {trainer.best[0]:.4f}, untrained {untrained:.4f}"
    typer.echo(
        f"{len(trainer.lists)} lists; stored units: {trainer.units.computed} computed (the rest read from "
        f"--cache-dir), {trainer.fill_seconds:.0f} s before the first step; {trainer.step} steps, "
        f"{trainer.pairs_per_cpu_s:.1f} pairs per CPU-second; checkpoint ({chosen}), store fingerprint "
        f"{trainer.model.fingerprint} (unchanged): "
        f"{out / 'checkpoint'}"
    )


def curves(
    runs: Annotated[list[str], typer.Argument(help="LABEL=RUN_DIR per training run (split at the last '=')")],
    out: Annotated[Path, typer.Option(help="PNG to write")] = RUNS / "curves.png",
    smooth: Annotated[int, typer.Option(help="running-mean window in steps")] = 5,
    key: Annotated[
        list[str] | None, typer.Option(help="curve.jsonl field, one panel each (repeatable)")
    ] = None,
) -> None:
    """Learning curves of several training runs side by side (default: loss, batch acc@1, score spread)."""
    from reranker.training.trainer import CURVE_KEYS, plot_curves

    pairs = [run.rsplit("=", 1) for run in runs]  # labels may hold "=" (k=8), folders rarely do
    if any(len(p) != 2 or not p[0] for p in pairs):
        raise typer.BadParameter("each run is LABEL=RUN_DIR")
    for label, run in pairs:
        if not (Path(run) / "curve.jsonl").is_file():
            raise typer.BadParameter(f"{label}: {run}/curve.jsonl does not exist")
    try:
        png = plot_curves({label: Path(run) for label, run in pairs}, out, smooth, tuple(key or CURVE_KEYS))
    except ValueError as exc:  # a --key no run logged
        raise typer.BadParameter(str(exc)) from exc
    typer.echo(png)
