"""`gistrank data`: relevance sets (the --data DIR form) from real data (reranker/data/)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

data_app = typer.Typer(
    no_args_is_help=True, help="Build relevance sets (the --data DIR form) from real data."
)
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
