"""`gistrank eval`, `eval-merge`, `probe`: offline quality against a reference (reranker/evaluation/)."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from reranker.catalog.preflight import check_model
from reranker.cli.options import RUNS, Data, Products, load_data
from reranker.ranking_metrics import GAIN_FORMULA

if TYPE_CHECKING:
    from reranker.evaluation.results import EvalResult


GainChoice = StrEnum("GainChoice", {name: name for name in GAIN_FORMULA})  # eval --gain


def probe(
    teacher: Annotated[Path, typer.Option(help="teacher checkpoint (reads the whole item)")],
    student: Annotated[Path, typer.Option(help="student checkpoint (reads its stored positions)")],
    out: Annotated[Path, typer.Option(help="JSON to write")] = RUNS / "probe.json",
    data: Data = "synthetic",
    seed: int = 0,
    products: Products = 200,
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

    relevance = load_data(data, seed, products, max_item_tokens)
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
    products: Products = 200,
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
    `gistrank-teacher-lora?compressor=select&num_gist=64&max_item_tokens=1024` (docs/core.md)."""
    if not student and not shadow_model:
        raise typer.BadParameter("nothing to evaluate: give --student and/or --shadow-model")
    if data != "synthetic" and max_item_tokens is not None:
        raise typer.BadParameter(
            "shapes the synthetic set only; read a --data set's items to N tokens with REF?max_item_tokens=N",
            param_hint="--max-item-tokens",
        )
    relevance = load_data(data, seed, products, max_item_tokens or 512)
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
