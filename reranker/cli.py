"""`gistrank` command line. Heavy imports (torch, feast, kafka) happen inside each command."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

# Model names resolve offline (presets, shipped checkpoints, local folders): a misspelled name is one line
# naming the known ones, not a minute of retries against the Hub. HF_HUB_OFFLINE=0 lets Hub ids through.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from reranker.catalog.preflight import check_model
from reranker.core.base_models import DEFAULT_BASE
from reranker.core.checkpoints import DEFAULT_MODEL
from reranker.core.home import home
from reranker.ranking_metrics import GAIN_FORMULA
from reranker.serving.cli import rerank, serve
from streaming.cli import (
    BlobDType,
    KVStorageOpt,
    catalog_app,
    consume,
    dlq_app,
    kafka_acls,
    materialize,
    publish,
    rollout_app,
)

if TYPE_CHECKING:
    from reranker.evaluation.results import EvalResult

GainChoice = StrEnum("GainChoice", {name: name for name in GAIN_FORMULA})  # eval --gain
HOME = home()  # $GISTRANK_HOME: the state folder (reranker/core/home.py)
RUNS = HOME / "runs"  # default output of benches, evals, plots

# plain help (no boxes that a pipe wraps into noise), -h beside --help, in every subcommand
app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help=__doc__,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"gistrank {version('gistrank')}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """`gistrank` command line. Heavy imports (torch, feast, kafka) happen inside each command."""


app.add_typer(catalog_app, name="catalog")
app.add_typer(rollout_app, name="rollout")
app.add_typer(dlq_app, name="dlq")
data_app = typer.Typer(
    no_args_is_help=True, help="Build relevance sets (the --data DIR form) from real data."
)
app.add_typer(data_app, name="data")
for command in (publish, consume, materialize, serve, rerank):
    app.command()(command)
app.command("kafka-acls")(kafka_acls)

# One name per concept across commands: --model is the model read (serve, consume, plan, rollout use it too);
# --base stays as the former name of train's and the benches'.
Model = Annotated[
    str,
    typer.Option("--model", "--base", help="model: preset, base alias, local HF folder or checkpoint"),
]
NumGist = Annotated[int, typer.Option(help="k gist tokens per item")]
DType = Annotated[str, typer.Option(help="auto | float32 | bfloat16 | float16 (auto: bf16 only where fast)")]


@app.command()
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


@app.command()
def bench(
    model: Model = DEFAULT_BASE,
    candidates: Annotated[int, typer.Option(help="N candidates per query")] = 50,
    query_tokens: Annotated[int, typer.Option(help="ℓ online tokens per candidate (query + score)")] = 32,
    item_tokens: Annotated[list[int] | None, typer.Option(help="j values to sweep (repeatable)")] = None,
    num_gist: NumGist = 8,
    dtype: DType = "auto",
    repeats: Annotated[int, typer.Option(help="timed runs of the gist path after a warm-up")] = 5,
    out: Annotated[Path, typer.Option(help="where the JSON result goes")] = RUNS / "bench_score.json",
    compressor: Annotated[
        str,
        typer.Option(
            help="gist | select | prefix: what the k stored positions are (online cost is the same)"
        ),
    ] = "gist",
    kv_storage: Annotated[
        list[BlobDType] | None,
        typer.Option(help="storages whose store hit (decode + score) is timed; repeatable"),
    ] = None,
) -> None:
    """Candidates/s of online `score` vs full-context `score_full`, next to the ideal (j + ℓ)/ℓ, the
    offline compression time per item, and ms per candidate of a store hit at each storage precision
    (default bfloat16, int8, int4, int2)."""
    check_model(model)
    from reranker.bench.score import run_score_bench

    js = item_tokens or [256, 512, 1024]
    storages = [s.value for s in kv_storage] if kv_storage else ["bfloat16", "int8", "int4", "int2"]
    run_score_bench(model, candidates, query_tokens, js, num_gist, dtype, repeats, out, compressor, storages)


@app.command(name="bench-packing")
def bench_packing(
    model: Model = DEFAULT_BASE,
    items: Annotated[int, typer.Option(help="synthetic items, one row each")] = 8,
    queries_per_item: Annotated[list[int] | None, typer.Option(help="m values to sweep (repeatable)")] = None,
    num_gist: NumGist = 8,
    max_item_tokens: int = 256,
    lora_rank: Annotated[int, typer.Option(help="LoRA adapters as in the quality recipe (0: full body)")] = 8,
    dtype: DType = "auto",
    repeats: Annotated[int, typer.Option(min=1, help="timed forward + backward runs per setting")] = 1,
    out: Annotated[Path, typer.Option(help="where the JSON result goes")] = RUNS / "bench_packing.json",
) -> None:
    """Training pairs/s with queries packed m per item row vs one row per pair, next to the ideal."""
    check_model(model)
    from reranker.bench.packing import run_packing_bench

    ms = queries_per_item or [1, 2, 4, 8]
    run_packing_bench(model, items, ms, num_gist, max_item_tokens, lora_rank, dtype, repeats, out)


@app.command(name="bench-store")
def bench_store(
    model: Model = DEFAULT_BASE,
    num_gist: NumGist = 8,
    dtype: DType = "auto",
    consumer_items: Annotated[int, typer.Option(help="items through Kafka → consumer → Feast")] = 64,
    read_ids: Annotated[int, typer.Option(help="ids per online read")] = 50,
    read_repeats: Annotated[int, typer.Option(help="timed reads per store")] = 30,
    workdir: Annotated[Path, typer.Option(help="broker, stores, catalog")] = HOME / "bench-store",
    out: Annotated[Path, typer.Option(help="where the JSON result goes")] = RUNS / "bench_store.json",
) -> None:
    """Consumer items/s vs raw compress; Feast read latency (SQLite, Redis) vs raw Redis; blob bytes."""
    check_model(model)
    from reranker.bench.store import run_store_bench

    run_store_bench(
        model, out, workdir, num_gist, dtype, consumer_items, read_ids=read_ids, read_repeats=read_repeats
    )


@app.command(name="bench-training")
def bench_training(
    model: Model = DEFAULT_BASE,
    num_gist: NumGist = 16,
    item_tokens: Annotated[int, typer.Option(help="j: tokens per synthetic item")] = 1024,
    lists: Annotated[int, typer.Option(help="candidate lists per step")] = 2,
    candidates: Annotated[int, typer.Option(help="candidates per list")] = 4,
    queries_per_list: Annotated[
        int, typer.Option(help="queries the frozen recipe asks of each list (its own + pseudo-queries)")
    ] = 4,
    lora_rank: Annotated[int, typer.Option(help="LoRA rank of the every-position recipe")] = 8,
    adapter_rank: Annotated[int, typer.Option(help="gist adapter rank of the frozen-reader recipe")] = 8,
    dtype: DType = "auto",
    steps: Annotated[int, typer.Option(min=1, help="timed steps per recipe, after one warm-up step")] = 2,
    workdir: Annotated[Path, typer.Option(help="the two runs' folders")] = HOME / "bench-training",
    out: Annotated[Path, typer.Option(help="where the JSON result goes")] = RUNS / "bench_training.json",
) -> None:
    """Training pairs per CPU-second: back-propagating through every item position (LoRA body) vs gists
    over a frozen reader's cached item K/V vs a reader adapter over stored units, same lists, side by side."""
    check_model(model)
    from reranker.bench.training import run_training_bench

    run_training_bench(
        model,
        num_gist,
        item_tokens,
        lists,
        candidates,
        queries_per_list,
        lora_rank,
        adapter_rank,
        dtype,
        steps,
        out,
        workdir,
    )


@app.command(name="bench-serving")
def bench_serving(
    model: Model = DEFAULT_BASE,
    candidates: Annotated[int, typer.Option(help="item ids per request")] = 50,
    requests: Annotated[int, typer.Option(help="hit-path requests per protocol")] = 8,
    feast_requests: Annotated[int, typer.Option(help="Feast-path requests per protocol")] = 4,
    recompute_requests: Annotated[int, typer.Option(help="recompute-path requests per protocol")] = 2,
    concurrency: Annotated[int, typer.Option(help="concurrent clients")] = 4,
    num_threads: Annotated[int, typer.Option(help="torch threads per model process; 0 = default")] = 1,
    instances: Annotated[int, typer.Option(min=1, help="gist_reranker model instances")] = 1,
    saturate_s: Annotated[float, typer.Option(help="seconds of the saturated-throughput phase")] = 60.0,
    dtype: DType = "auto",
    out: Annotated[Path, typer.Option(help="where the JSON result goes")] = RUNS / "bench_serving.json",
) -> None:
    """End-to-end latency over HTTP and gRPC (hit / Feast / recompute paths) vs in-process score(), and
    saturated throughput (candidates/s) through Triton vs in-process score()."""
    check_model(model)
    from reranker.bench.serving import run_serving_bench

    run_serving_bench(
        model,
        out,
        candidates,
        requests,
        concurrency,
        dtype,
        feast_requests=feast_requests,
        recompute_requests=recompute_requests,
        num_threads=num_threads,
        instances=instances,
        saturate_s=saturate_s,
    )


Data = Annotated[
    str, typer.Option(help="'synthetic' (seeded generator) or a relevance file (JSONL/CSV) / saved set dir")
]


def _load_data(data: str, seed: int, products: int, max_item_tokens: int):  # -> RelevanceSet
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


Overwrite = Annotated[bool, typer.Option(help="replace the relevance set already in --out")]
_IMPORT_SUMMARY = "import.json"  # import-trec's counts, beside the set it describes


def _check_set_out(out: Path, overwrite: bool) -> None:
    """--out of a data import, checked before any input is read: a new or empty folder, or with
    --overwrite a relevance set written before (its files only). So `--out .` never scatters a set's
    files among others, and a set is never replaced silently."""
    from reranker.data.relevance_data import SET_FILES

    if out.exists() and not out.is_dir():
        raise typer.BadParameter(f"{out} is a file: give a new or empty folder", param_hint="--out")
    entries = sorted(entry.name for entry in out.iterdir()) if out.is_dir() else []
    others = [name for name in entries if name not in {*SET_FILES, _IMPORT_SUMMARY}]
    if others:
        listed = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        message = f"{out} holds other files ({listed}): give a new or empty folder"
        raise typer.BadParameter(message, param_hint="--out")
    if entries and not overwrite:
        raise typer.BadParameter(
            f"{out} already holds a relevance set: pass --overwrite to replace it, or give a new or empty "
            "folder",
            param_hint="--out",
        )


@data_app.command(name="import-trec")
def data_import_trec(
    docs: Annotated[Path, typer.Option(help="JSONL: {docno, title, text} or Pyserini's {id, contents}")],
    topics: Annotated[Path, typer.Option(help="JSONL: {qid, title, desc}")],
    qrels: Annotated[Path, typer.Option(help="TREC qrels: 'qid 0 docno label' per line")],
    out: Annotated[
        Path, typer.Option(help="relevance set directory to write (--data DIR of other commands)")
    ],
    query_field: Annotated[str, typer.Option(help="title (keywords) | desc (a sentence)")] = "title",
    candidates: Annotated[
        str,
        typer.Option(
            help="judged (the judged docs) | judged:N (N of them per topic, seeded, relevant share kept)"
            " | bm25:N (top N of BM25 over the collection) | sources joined by + (judged:20+bm25:20:"
            " their union per topic)"
        ),
    ] = "judged",
    splits: Annotated[
        str, typer.Option(help="inclusive topic-number ranges per split; a topic outside them is an error")
    ] = "train=1-50,dev=51-100",
    dedupe: Annotated[
        bool, typer.Option(help="merge repeated (topic, doc) qrels lines, keeping the higher label")
    ] = False,
    overwrite: Overwrite = False,
) -> None:
    """A relevance set from a TREC collection: documents, topics, qrels (labels on any 0–n scale).

    Candidates are each topic's judged documents (judged:N: N of them drawn per topic, seeded, with
    the pool's share of relevant ones), or with bm25:N its top N of a BM25 ranking of the
    whole collection (bm25s, k1 0.9, b 0.4, Porter stems; unjudged = 0), or with A+B both
    (judged:20+bm25:20: each topic's union, for training lists). Candidates are stored
    shuffled (seeded), and the collection's term statistics go to collection.json, for the BM25
    baseline's IDF. Default splits: topics 1–50 train, 51–100 dev (AP89's convention). Duplicate
    qrels lines are an error naming file and line unless --dedupe."""
    import time

    from reranker.core.errors import GistRankError
    from reranker.data.trec import import_trec, write_summary

    if query_field not in ("title", "desc"):
        raise typer.BadParameter("must be title or desc", param_hint="--query-field")
    _check_set_out(out, overwrite)
    start = time.perf_counter()
    try:
        result = import_trec(docs, topics, qrels, query_field, candidates, splits, dedupe)  # type: ignore[arg-type]
    except (GistRankError, ValueError) as exc:  # bad input: one line naming file and line, no traceback
        raise typer.BadParameter(str(exc)) from exc
    result.relevance.save_jsonl(out)
    write_summary(result, out)
    typer.echo(result.summary())
    typer.echo(f"wrote {out} in {time.perf_counter() - start:.0f} s")


@data_app.command(name="import-file")
def data_import_file(
    path: Annotated[Path, typer.Argument(help="flat relevance file, one judgment per row (JSONL or CSV)")],
    out: Annotated[Path, typer.Option(help="relevance set directory to write")],
    esci: Annotated[
        bool, typer.Option(help="labels are Amazon ESCI's E/S/C/I, read as 3/2/1/0 (gain 2^label − 1)")
    ] = False,
    dedupe: Annotated[
        bool, typer.Option(help="merge repeated (query, item) rows, keeping the higher label")
    ] = False,
    default_split: Annotated[str, typer.Option(help="split of rows without a split column")] = "test",
    overwrite: Overwrite = False,
) -> None:
    """A relevance set directory from a flat file (what --data FILE reads), with label mapping and
    duplicate merging that --data FILE does not do."""
    from reranker.core.errors import GistRankError
    from reranker.data.relevance_data import ESCI_LABELS, SPLITS, load_relevance_file

    if default_split not in SPLITS:
        raise typer.BadParameter(f"must be one of {', '.join(SPLITS)}", param_hint="--default-split")
    _check_set_out(out, overwrite)
    try:
        relevance = load_relevance_file(
            path,
            default_split=default_split,  # type: ignore[arg-type]
            label_map=ESCI_LABELS if esci else None,
            dedupe=dedupe,
        )
    except GistRankError as exc:
        raise typer.BadParameter(str(exc), param_hint="PATH") from exc
    (out / _IMPORT_SUMMARY).unlink(missing_ok=True)  # a replaced TREC import's counts describe another set
    relevance.save_jsonl(out)
    typer.echo(f"{len(relevance.queries)} queries, {len(relevance.items)} items; wrote {out}")


@app.command()
def train(
    out: Annotated[
        Path, typer.Option(file_okay=False, help="run folder: checkpoint/, curve.jsonl, trainer state")
    ],
    role: Annotated[str, typer.Option(help="teacher | student")] = "student",
    model: Model = DEFAULT_BASE,
    data: Data = "synthetic",
    seed: int = 0,
    products: Annotated[int, typer.Option(help="synthetic catalog size (product families)")] = 200,
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
            help="how the query follows the gists; must contain {query} (default: GistConfig's for head, "
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

    relevance = _load_data(data, seed, products, max_item_tokens)
    from reranker.core.config import GistConfig, resolve_dtype, template_for
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
            gist = GistConfig(
                num_gist=num_gist,
                keep_item_prefix=keep_item_prefix,
                max_item_tokens=max_item_tokens,
                score_rule=score_rule,
                dtype=resolve_dtype(dtype),
                **({"query_template": query_template} if query_template else template_for(score_rule)),
            )
            cfg = TrainConfig(**({"role": role, "base": model, "gist": gist, "seed": seed} | extra))
        except ValidationError as err:  # a bad option or --config field: say which, no traceback
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
            raise typer.BadParameter(problems) from err
        trainer = Trainer(cfg, relevance, out)
    curve = trainer.fit()
    steps_done = f"{len(curve)} step" + ("" if len(curve) == 1 else "s")
    typer.echo(f"{steps_done}, last loss {curve[-1]['loss']:.4f}; checkpoint: {out / 'checkpoint'}")


@app.command(name="train-gists")
def train_gists(
    out: Annotated[
        Path, typer.Option(file_okay=False, help="run folder: checkpoint/, curve.jsonl, config.json")
    ],
    reader: Annotated[
        str,
        typer.Option(
            help="the frozen full-context reader the gists must match: a preset, base or checkpoint "
            "(default: the default model's reader, the untouched base by query likelihood)"
        ),
    ] = DEFAULT_MODEL,
    data: Data = "synthetic",
    seed: int = 0,
    products: Annotated[int, typer.Option(help="synthetic catalog size (product families)")] = 200,
    num_gist: NumGist = 16,
    keep_item_prefix: Annotated[int, typer.Option(help="t: raw item tokens stored before the gists")] = 0,
    adapter_rank: Annotated[int, typer.Option(help="gist adapter rank (0: gist embeddings only)")] = 8,
    pool_windows: Annotated[
        bool, typer.Option(help="each gist reads only its own span of the item (GistPool's windows)")
    ] = False,
    max_item_tokens: Annotated[
        int | None, typer.Option(help="item tokens read (default: the reader's)")
    ] = None,
    steps: Annotated[int, typer.Option(min=1)] = 200,
    max_queries: Annotated[
        int | None, typer.Option(min=1, help="the first N train queries only (a slice sized to the CPU)")
    ] = None,
    minutes: Annotated[float | None, typer.Option(min=0, help="stop after this much wall time")] = None,
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
    device: Annotated[str | None, typer.Option(help="cpu | cuda (default: cuda when present)")] = None,
) -> None:
    """Train gists over a frozen reader: its item K/V computed once, the gists and their adapter
    distilled list-wise to its full-context scores (reranker/training/frozen_reader.py)."""
    check_model(reader, "--reader")
    if init_from is not None:
        check_model(init_from, "--init-from")
    from pydantic import ValidationError

    from reranker.training.frozen_reader import FrozenGistConfig, FrozenGistTrainer

    relevance = _load_data(data, seed, products, max_item_tokens or 1024).split("train", max_queries)
    extra = json.loads(config.read_text()) if config else {}
    try:
        cfg = FrozenGistConfig(
            **{
                "reader": reader,
                "num_gist": num_gist,
                "keep_item_prefix": keep_item_prefix,
                "adapter_rank": adapter_rank,
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
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise typer.BadParameter(problems) from err
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


@app.command(name="train-reader")
def train_reader(
    out: Annotated[
        Path, typer.Option(file_okay=False, help="run folder: checkpoint/, curve.jsonl, config.json")
    ],
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
    steps: Annotated[int, typer.Option(min=1)] = 200,
    minutes: Annotated[float | None, typer.Option(min=0, help="stop after this much wall time")] = None,
    max_queries: Annotated[int | None, typer.Option(min=1, help="the first N train queries only")] = None,
    max_item_tokens: Annotated[
        int | None, typer.Option(help="item tokens read (default: the store's)")
    ] = None,
    seed: int = 0,
    products: Annotated[int, typer.Option(help="synthetic catalog size (product families)")] = 200,
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
    device: Annotated[str | None, typer.Option(help="cpu | cuda (default: cuda when present)")] = None,
) -> None:
    """Train the reader for the store: adapters at query rows only (and the head), over the store's
    units computed once; the dev split (or --holdout-queries in --config) picks the step. The result reads
    the same store: rolling it out rewrites nothing (reranker/training/reader_training.py)."""
    from pydantic import ValidationError

    from reranker.training.reader_training import ReaderTrainConfig, ReaderTrainer

    relevance = _load_data(data, seed, products, max_item_tokens or 1024)
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
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise typer.BadParameter(problems) from err
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


@app.command()
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


@app.command()
def probe(
    teacher: Annotated[Path, typer.Option(help="teacher checkpoint (reads the whole item)")],
    student: Annotated[Path, typer.Option(help="student checkpoint (reads its stored positions)")],
    out: Annotated[Path, typer.Option(help="JSON to write")] = RUNS / "probe.json",
    data: Data = "synthetic",
    seed: int = 0,
    products: int = 200,
    max_item_tokens: int = 512,
    split: str = "test",
    queries: int = 8,
    candidates: int = 6,
    fresh_gists: Annotated[
        tuple[int, int] | None,
        typer.Option(help="K T: the student's body and head with untrained gists (k = K, t = T) instead"),
    ] = None,
) -> None:
    """Per layer: how much of the item reaches the student's query (item share, centered gap), how much
    its gists vary with the item, sinks. `--fresh-gists 8 1 --student TEACHER` = a warm start's step 0."""
    check_model(teacher, "--teacher")
    check_model(student, "--student")
    from reranker.evaluation.probe import probe_states

    relevance = _load_data(data, seed, products, max_item_tokens)
    try:
        probe_states(
            relevance,
            teacher,
            student,
            out,
            split=split,
            queries=queries,
            candidates=candidates,
            fresh_gists=fresh_gists,
        )
    except ValueError as exc:  # too few candidates, an empty split, an invalid fresh gist config
        raise typer.BadParameter(str(exc)) from exc


def _finite(low: float, high: float = math.inf) -> Callable[[str], float]:
    """A float option's parser: a finite number in [low, high]. inf and nan are refused as what they are
    (`plan --qps inf` would print inf GB/s and nan TFLOP/s; nan compares false with any bound)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise typer.BadParameter(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise typer.BadParameter(f"{text} must be a finite number")
        if not low <= value <= high:
            bound = f"≥ {low:g}" if value < low else f"≤ {high:g}"
            raise typer.BadParameter(f"{text} must be {bound}")
        return value

    return parse


@app.command()
def plan(
    items: Annotated[int, typer.Option(min=1, help="catalog size")],
    qps: Annotated[float, typer.Option(parser=_finite(0), help="queries per second")],
    candidates: Annotated[int, typer.Option(min=1, help="candidates reranked per query")],
    model: Annotated[
        str,
        typer.Option(help="model reference (alias, folder, REF?settings; ?kib=N: a budget in KiB per item)"),
    ] = DEFAULT_MODEL,
    kv_storage: KVStorageOpt = None,
    hit_ratio: Annotated[
        float, typer.Option(parser=_finite(0, 1), help="share of lookups served from the store")
    ] = 1.0,
    shard_gib: Annotated[
        float, typer.Option(parser=_finite(0.001), help="memory per Redis Cluster master, GiB")
    ] = 64.0,
    shard_fill: Annotated[
        float, typer.Option(parser=_finite(0.001, 1), help="share of that memory given to K/V")
    ] = 0.75,
    query_tokens: Annotated[int, typer.Option(min=1, help="ℓ online tokens per candidate")] = 32,
    item_tokens: Annotated[
        int | None, typer.Option(min=1, help="mean item tokens (default the model's cap)")
    ] = None,
    consumer_items_per_s: Annotated[
        float | None,
        typer.Option(
            parser=_finite(0.001), help="one consumer's items/s (default: measured here on made-up items)"
        ),
    ] = None,
    consumers: Annotated[int, typer.Option(min=1, help="consumer processes for the backfill")] = 1,
    window_hours: Annotated[
        float, typer.Option(parser=_finite(0.001), help="backfill window to size consumers for")
    ] = 24.0,
) -> None:
    """Capacity: K/V bytes per item (the codec's real blob), store size and Redis shards, fetch
    bytes/s, online FLOPs/s, backfill hours and consumers — from the model's own config."""
    from reranker.core.checkpoints import model_spec

    spec = model_spec(model, kv_storage=kv_storage and kv_storage.value)
    check_model(spec)
    from rich.console import Console
    from rich.table import Table

    from reranker.core.errors import one_line
    from reranker.core.model import GistReranker
    from reranker.serving.capacity import measure_items_per_s
    from reranker.serving.capacity import plan as make_plan

    try:
        reader = GistReranker.from_pretrained(spec)
    except ValueError as exc:  # a budget in KiB that holds no position
        raise typer.BadParameter(one_line(exc), param_hint="--model") from None
    if consumer_items_per_s is None:
        consumer_items_per_s = measure_items_per_s(reader, item_tokens or reader.gist.max_item_tokens)
    result = make_plan(
        reader,
        items,
        qps,
        candidates,
        hit_ratio,
        shard_gib,
        shard_fill,
        query_tokens,
        item_tokens,
        consumer_items_per_s,
        consumers,
        window_hours,
    )
    g = reader.gist
    table = Table(
        title=f"{model}: {g.compressor}, t={g.keep_item_prefix}, k={g.num_gist}, K/V stored as {g.storage}"
    )
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for name, value in result.rows():
        table.add_row(name, value)
    Console().print(table)


@app.command(name="eval")
def evaluate(
    teacher: Annotated[Path, typer.Option(help="teacher checkpoint (the reference ranking)")],
    student: Annotated[
        list[Path] | None, typer.Option(help="student checkpoint; repeat for the k sweep or to compare runs")
    ] = None,
    shadow_model: Annotated[
        list[str] | None,
        typer.Option(
            "--shadow-model",
            "--full-model",
            help="another full-context model scored against the teacher (a shadow candidate; repeatable)",
        ),
    ] = None,
    out: Annotated[Path, typer.Option(file_okay=False, help="report folder")] = RUNS / "eval",
    data: Data = "synthetic",
    seed: int = 0,
    products: int = 200,
    max_item_tokens: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="item length of the synthetic set (default 512); a --data set's items are read as far as "
            "each model reads (REF?max_item_tokens=N)",
        ),
    ] = None,
    split: Annotated[
        str | None, typer.Option(help="split to evaluate (default: test, or dev where there is no test)")
    ] = None,
    prefix_k: Annotated[
        list[int] | None, typer.Option(help="k' of the prefix-caching baselines (t + k' tokens; repeatable)")
    ] = None,
    control_base: Annotated[
        bool,
        typer.Option(
            help="also read each student's untrained-gists and prefix controls with its untouched base LM "
            "(the fair controls under --score-rule query_likelihood; a head-rule base has an untrained head)"
        ),
    ] = False,
    untrained_control: Annotated[
        bool,
        typer.Option(
            help="read each gist student's untrained gists beside it (what training added); "
            "--no-untrained-control skips that second compression of every item"
        ),
    ] = True,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            file_okay=False, help="also write one TREC run file per system and the split's qrels here"
        ),
    ] = None,
    max_queries: Annotated[
        int | None, typer.Option(min=1, help="only the split's first N queries (a slice sized to the CPU)")
    ] = None,
    gain: Annotated[
        GainChoice,
        typer.Option(help="nDCG gain: linear (the label, trec_eval's) | exponential (2^label − 1)"),
    ] = GainChoice.linear,
    fit_fusion: Annotated[
        bool,
        typer.Option(
            help="also write fusion.json: each --student's BM25 fusion weight fitted on this split, for "
            "`gistrank serve --model REF --fusion <out>/fusion.json`"
        ),
    ] = False,
) -> None:
    """Recall@K against the teacher, NDCG@10, sliced by item length and hard negatives; JSON, MD, PNG.

    --teacher / --student / --shadow-model take model references with reading settings, e.g.
    `gistrank-teacher-lora?compressor=select&num_gist=64&max_item_tokens=1024` (README, core API)."""
    if not student and not shadow_model:
        raise typer.BadParameter("nothing to evaluate: give --student and/or --shadow-model")
    if data != "synthetic" and max_item_tokens is not None:
        raise typer.BadParameter(
            "shapes the synthetic set only; read a --data set's items to N tokens with REF?max_item_tokens=N",
            param_hint="--max-item-tokens",
        )
    relevance = _load_data(data, seed, products, max_item_tokens or 512)
    present = sorted({query.split for query in relevance.queries})
    split = split or ("test" if "test" in present else "dev")
    if split not in present:
        raise typer.BadParameter(
            f"{split!r} has no queries in this set; it has {present}", param_hint="--split"
        )
    # the data's own mistakes first (a cheap read), then the models', before any is loaded
    check_model(teacher, "--teacher")
    for option, refs in (("--student", student), ("--shadow-model", shadow_model)):
        for ref in refs or ():
            check_model(ref, option)
    from reranker.evaluation.runner import evaluate as run_eval  # torch: once the input is known good

    result = run_eval(
        relevance,
        teacher,
        student or [],
        out,
        split=split,
        prefix_ks=prefix_k or (4, 8, 16),
        full_paths=shadow_model or [],
        control_base=control_base,
        run_dir=run_dir,
        max_queries=max_queries,
        gain=gain.value,  # type: ignore[arg-type]  # one of GAIN_FORMULA's keys
        untrained_control=untrained_control,
    )
    typer.echo((out / "report.md").read_text())
    plots = " and plots" if student else ""  # full-context models alone have no metric-vs-k plot
    runs = f"; run files in {run_dir}" if run_dir else ""
    fitted = ""
    if fit_fusion:
        fitted = f", {_write_fusion(result, out)}"
    typer.echo(f"{result.queries} queries; wrote {out}/results.json, report.md{fitted}{plots}{runs}")


def _write_fusion(result: EvalResult, out: Path) -> str:
    """fusion.json of `eval --fit-fusion`, and how to serve each entry; → the file's name."""
    from reranker.core.fusion import FUSION_FILE
    from reranker.evaluation.fusion import served_fusions

    fusions = served_fusions(result)
    if not fusions["models"]:
        typer.echo("no fusion fitted: the set has no BM25 scores or no student was evaluated", err=True)
    (out / FUSION_FILE).write_text(json.dumps(fusions, indent=2) + "\n")
    for model, entry in fusions["models"].items():
        serve = f"gistrank serve --model '{model}' --fusion {out / FUSION_FILE}"
        typer.echo(f"{model} fused with BM25 at {entry['fusion']}: {serve}")
        if entry["fusion"] == "linear:0":
            typer.echo(f"  weight 0: BM25 alone ranked best on this split; served, it switches {model} off")
    return FUSION_FILE


@app.command(name="eval-merge")
def eval_merge(
    runs: Annotated[list[Path], typer.Argument(help="eval folders (each with results.json), same queries")],
    out: Annotated[Path, typer.Option(file_okay=False, help="report folder")] = RUNS / "eval-merged",
) -> None:
    """Join evaluations of different students on the same teacher and queries (one per trained k) into
    one results.json, report.md and set of plots."""
    from reranker.evaluation.report import write_outputs
    from reranker.evaluation.results import EvalResult, merge_results

    for run in runs:
        if not (run / "results.json").is_file():
            raise typer.BadParameter(f"{run}/results.json does not exist")
    try:
        merged = merge_results([EvalResult.read(run) for run in runs])
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    write_outputs(merged, out)
    typer.echo((out / "report.md").read_text())
    typer.echo(f"{len(merged.systems)} systems; wrote {out}/results.json, report.md and plots")


if __name__ == "__main__":
    app()


@app.command()
def soak(
    events: Annotated[int, typer.Option(min=1, help="catalog changes written and published")] = 10_000,
    items: Annotated[int, typer.Option(min=1, help="distinct items they touch")] = 300,
    consumers: Annotated[int, typer.Option(min=1, help="consumer processes at the start")] = 3,
    consumer_kills: Annotated[int, typer.Option(min=0, help="consumers killed with SIGKILL")] = 6,
    broker_kills: Annotated[int, typer.Option(min=0, help="broker crashes (SIGKILL, then restart)")] = 2,
    produce_s: Annotated[float, typer.Option(min=0, help="seconds the changes are spread over")] = 180.0,
    seed: Annotated[int, typer.Option(help="seeds the changes and which consumer dies")] = 0,
    workdir: Annotated[Path, typer.Option(help="emptied, then holds broker, stores and logs")] = HOME
    / "soak",
) -> None:
    """Chaos soak of the data path (reranker/bench/soak.py): a real broker, N consumer processes, the stores,
    ≥ 10,000 catalog changes with consumer and broker kills, a consumer joining and a live gc attempt;
    then every store row against the catalog. Exit 0 only with nothing lost, stale or resurrected."""
    from rich.console import Console
    from rich.table import Table

    from reranker.bench.soak import SoakConfig, run_soak

    console = Console()
    config = SoakConfig(
        events, items, consumers, consumers + 3, consumer_kills, broker_kills, produce_s, seed=seed
    )
    report = run_soak(config, workdir.resolve(), console.print)
    table = Table(title=f"soak: {report.seconds:.0f} s")
    for name in ("result", "value"):
        table.add_column(name)
    rows = {
        "events (upserts / deletes)": f"{report.events} ({report.upserts} / {report.deletes})",
        "consumer kills / broker kills / consumers joined": (
            f"{report.consumer_kills} / {report.broker_kills} / {report.consumers_joined}"
        ),
        "live gc attempt refused": str(report.gc_refused),
        "serving reads during the soak": str(report.served_reads),
        "catalog items (live)": f"{report.items} ({report.live})",
        "lost": str(len(report.lost)),
        "stale": str(len(report.stale)),
        "resurrected": str(len(report.resurrected)),
        "dead letters": str(report.dead_letters),
    }
    for name, value in rows.items():
        table.add_row(name, value)
    console.print(table)
    for name in ("lost", "stale", "resurrected"):
        if getattr(report, name):
            console.print(f"{name}: {', '.join(getattr(report, name)[:20])}")
    if not report.ok:
        raise typer.Exit(1)


# What a user can get wrong surfaces as these (a value out of range, a file that is not there, a model
# setting that does not validate); anything else is a bug and keeps its traceback.
_MISTAKES = (
    ValueError,
    OverflowError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    FileExistsError,
)


def main() -> None:
    """The `gistrank` console script: the commands, with every user mistake as one line and exit 2
    (GISTRANK_TRACEBACK=1 shows the traceback instead)."""
    import sys

    from reranker.core.errors import one_line

    try:
        code = typer.main.get_command(app).main(prog_name="gistrank", standalone_mode=False)
    except typer.TyperException as exc:  # click's usage errors (typer vendors click): message, exit 2
        exc.show()  # type: ignore[attr-defined]
        sys.exit(exc.exit_code)  # type: ignore[attr-defined]
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    except _MISTAKES as exc:
        if os.environ.get("GISTRANK_TRACEBACK"):
            raise
        typer.echo(f"error: {one_line(exc)}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
