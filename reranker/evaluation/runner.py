"""`gistrank eval`: the fixed evaluation protocol of DESIGN §5.

Reference = the full-context teacher's ranking of the same candidates. For every test query and every
system (`systems.py`): overlap@K (K = 1, 5, 10; results.json's "recall@K"), the share of the
teacher's top-K in the system's top-K, and NDCG@10 and accuracy@1 against the labels. Every metric is
sliced by item-length quartile (length of the query's best-labelled item, in tokens) and by
hard-negative queries; each student is compared with
each of its controls query by query (paired differences). Output: results.json, report.md, one PNG
per metric (`report.write_outputs`), and with `run_dir` one TREC run file per system plus the split's
qrels (`run_files.py`).

Metrics follow trec_eval: ties broken by item id descending, nDCG's gain the label itself on whatever
integer scale the set uses (0–2 synthetic, 0–1 or 0–4 TREC); every table that reports nDCG says so.
A system that fails (an exception while compressing or scoring) is dropped with its error recorded in
results.json and report.md; the others' results stand.
Only the reference (teacher) failing ends the evaluation: nothing could be compared without it.

Here: the run itself — scores cached per system key, online timing, failure isolation, each
candidate's K/V released after its last query —, the BM25 interpolations and the costs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from reranker.core.fusion import interpolate
from reranker.core.kv_codec import payload_nbytes
from reranker.core.model import Reranker
from reranker.data.relevance_data import RelevanceSet, collection_stats
from reranker.evaluation.baselines import BM25_B, BM25_K1
from reranker.evaluation.fusion import fit_weight
from reranker.evaluation.report import write_outputs
from reranker.evaluation.results import RECALL_KS, TEACHER, EvalResult, QueryRecord, SystemFacts, summarize
from reranker.evaluation.run_files import load_cached, save_runs
from reranker.evaluation.systems import (
    System,
    baseline_systems,
    full_context_systems,
    full_system,
    student_systems,
)
from reranker.ranking_metrics import (
    Gain,
    accuracy_at_1,
    length_quartiles,
    ndcg_at_k,
    recall_at_k_vs_reference,
)


def query_metrics(
    scores: Sequence[float],
    reference: Sequence[float],
    labels: Sequence[int],
    doc_ids: Sequence[str],
    gain: Gain = "linear",
) -> dict[str, float]:
    """One system's METRICS on one query: the overlap with the reference's top K, the rest against the
    labels (nDCG with `gain`); ties broken by `doc_ids` as trec_eval does."""
    out = {f"recall@{k}": recall_at_k_vs_reference(scores, reference, k, doc_ids) for k in RECALL_KS}
    out["ndcg@10"] = ndcg_at_k(scores, labels, 10, doc_ids, gain)
    out["acc@1"] = accuracy_at_1(scores, labels, doc_ids)
    return out


def best_item_tokens(model: Reranker, test: RelevanceSet, texts_by_id: Mapping[str, str]) -> list[int]:
    """Per query: tokens of its best-labelled candidate (the first of equals), what slices by length."""
    lengths = []
    for query in test.queries:
        best = max(test.candidates(query.query_id), key=lambda c: c[1])[0]
        lengths.append(len(model.tokenizer(texts_by_id[best], add_special_tokens=False)["input_ids"]))
    return lengths


@dataclass(frozen=True)
class Scored:
    """What `score_queries` gives: the metric records and raw scores (system → query id → one score per
    candidate, in candidate order) of the systems that finished, the error of each that did not, and
    per system the online seconds and candidates it was timed over (none for scores from the cache)."""

    records: list[QueryRecord]
    scores: dict[str, dict[str, list[float]]]
    errors: dict[str, str]
    timed: dict[str, tuple[float, int]] = field(default_factory=dict)
    same_as: dict[str, str] = field(default_factory=dict)  # system → the earlier one of the same key


def score_queries(
    test: RelevanceSet,
    reference: System,
    systems: Mapping[str, System],
    quartiles: Sequence[int],
    cached: Mapping[str, Mapping[str, list[float]]] | None = None,
    after_query: Callable[[Scored], None] | None = None,
    gain: Gain = "linear",
) -> Scored:
    """Every system's metrics on every query, against the `reference` ranking (recorded as "teacher").

    `cached` (system → query id → scores, e.g. from `load_cached`) is used instead of scoring where it
    holds the query; a system with the key of an earlier one (e.g. the same prefix control of two
    students on one body) takes its scores. A system's `prepare` (compression) runs before its
    `score` is timed; `after_query` gets what is finished after every query (to keep it on disk).
    A system that
    raises (while compressing, scoring, or with non-finite scores) is not called again and none of its
    records are kept — a system is compared on every query or not at all; its error is reported and the
    other systems go on. The reference raising ends the evaluation."""
    cached = cached or {}
    records: list[QueryRecord] = []
    everyone = {"teacher": reference, **systems}
    scores: dict[str, dict[str, list[float]]] = {name: {} for name in everyone}
    timed: dict[str, tuple[float, int]] = {}
    errors: dict[str, str] = {}
    first_of: dict[str, str] = {}
    same_as = {
        name: first_of.setdefault(s.key, name)
        for name, s in everyone.items()
        if s.key is not None and first_of.setdefault(s.key, name) != name
    }

    def finished() -> Scored:
        return Scored(
            [r for r in records if r.system not in errors],
            {name: by_query for name, by_query in scores.items() if name not in errors},
            dict(errors),
            {name: t for name, t in timed.items() if name not in errors},
            {name: first for name, first in same_as.items() if name not in errors},
        )

    last_query: dict[str, int] = {}  # candidate → the last query that names it
    for at, query in enumerate(test.queries):
        last_query |= {item_id: at for item_id, _ in test.candidates(query.query_id)}
    for at, (query, quartile) in enumerate(
        tqdm(list(zip(test.queries, quartiles, strict=True)), desc="eval", unit="query")
    ):
        cands = test.candidates(query.query_id)
        cand_ids, labels = [c[0] for c in cands], [c[1] for c in cands]
        truth: list[float] = []
        for name, system in everyone.items():
            if name in errors:
                continue
            try:
                values = cached.get(name, {}).get(query.query_id)
                if values is None and name in same_as:
                    values = scores[same_as[name]].get(query.query_id)
                if values is None:
                    system.prepare(cand_ids)
                    start = time.perf_counter()
                    values = [float(v) for v in system.score(query.text, cand_ids)]
                    seconds, n = timed.get(name, (0.0, 0))
                    timed[name] = (seconds + time.perf_counter() - start, n + len(cand_ids))
                truth = values if name == "teacher" else truth
                metrics = query_metrics(values, truth, labels, cand_ids, gain)
            except Exception as exc:  # one system's failure must not discard the others' results
                if name == "teacher":
                    raise
                errors[name] = f"{type(exc).__name__}: {exc}"
                tqdm.write(f"system {name!r} failed on query {query.query_id!r}: {errors[name]}")
                continue
            scores[name][query.query_id] = values
            records.append(QueryRecord(name, query.query_id, query.hard, quartile, metrics))
        done_with = [i for i in cand_ids if last_query[i] == at]
        for system in everyone.values():
            system.forget(done_with)
        if after_query is not None:
            after_query(finished())
    return finished()


def evaluate(
    data: RelevanceSet,
    teacher_path: str | Path,
    student_paths: Sequence[str | Path],
    out: Path,
    split: str = "test",
    device: str | None = None,
    prefix_ks: Sequence[int] = (4, 8, 16),
    full_paths: Sequence[str | Path] = (),
    control_base: bool = False,
    run_dir: Path | None = None,
    max_queries: int | None = None,
    gain: Gain = "linear",
    untrained_control: bool = True,
) -> EvalResult:
    """Score `data`'s `split` with the teacher, every student's systems and every other full-context
    model in `full_paths`; write results.json, report.md and plots to `out`, and with `run_dir` one TREC
    run file per system and the split's qrels (`run_files.write_runs`). `control_base`: read each
    student's controls with its untouched base LM as well; `untrained_control`: read a gist student's
    untrained gists beside it (see `systems._gist_systems`). BM25's IDF is over the set's collection
    (`data.collection`, saved by `gistrank data import-trec`), else over all of `data`'s items.
    `max_queries`: only the split's first queries (the slice is stated in the report). `gain`: nDCG's
    gain, the label (trec_eval's) or 2^label − 1, for every system and fit."""
    test = data.split(split, max_queries)
    if not test.queries:
        raise ValueError(f"split {split!r} has no queries")
    teacher = Reranker.from_pretrained(teacher_path, device=device)
    used = {item_id for q in test.queries for item_id, _ in test.candidates(q.query_id)}
    texts_by_id = {item_id: data.items[item_id].text for item_id in sorted(used)}
    collection = data.collection or collection_stats(item.text for item in data.items.values())
    bm25 = {
        "k1": BM25_K1,
        "b": BM25_B,
        "idf_documents": collection.documents,
        "idf_over": "the collection (collection.json)" if data.collection else "the set's items",
    }

    systems = baseline_systems(texts_by_id, collection)
    systems |= student_systems(student_paths, texts_by_id, prefix_ks, control_base, device, untrained_control)
    systems |= full_context_systems(full_paths, texts_by_id, device)
    reference = full_system(teacher, texts_by_id, TEACHER)
    everyone = {"teacher": reference, **systems}
    keys = {name: system.key for name, system in everyone.items()}
    cached, saved_costs = load_cached(run_dir, test, keys) if run_dir is not None else ({}, {})

    lengths = best_item_tokens(teacher, test, texts_by_id)
    quartiles = length_quartiles(lengths)

    def keep(so_far: Scored) -> None:
        """Every finished query on disk at once, with the costs measured so far: a run that is stopped
        loses one query's work at most."""
        if run_dir is not None:
            finished = {name: s for name, s in everyone.items() if name not in so_far.errors}
            costs = _costs(finished, so_far, saved_costs)
            save_runs(run_dir, test, so_far.scores, keys, costs)

    scored = score_queries(test, reference, systems, quartiles, cached, keep, gain)
    fused = bm25_interpolations(test, scored, everyone, quartiles, gain)
    finished = {name: s for name, s in everyone.items() if name not in scored.errors}
    costs = _costs(finished, scored, saved_costs)
    truncated = teacher.item_ids(list(texts_by_id.values()))[1]
    records = scored.records + [r for f in fused.values() for r in f.records]
    result = EvalResult(
        split=split,
        gain=gain,
        teacher=str(teacher_path),
        students=[str(p) for p in student_paths],
        full_models=[str(p) for p in full_paths],
        queries=len(test.queries),
        systems={name: system.facts for name, system in finished.items()}
        | {name: f.facts for name, f in fused.items()},
        length_quartile_cuts_tokens=_cuts(lengths, quartiles),
        summary=summarize(records),
        records=records,
        errors=scored.errors,
        bm25=bm25,
        costs=costs,
        interpolation={name: f.fit for name, f in fused.items()},
        truncation={
            "max_item_tokens": teacher.gist.max_item_tokens,
            "items": len(truncated),
            "truncated": sum(truncated),
        },
    )
    write_outputs(result, out)
    if run_dir is not None:
        save_runs(run_dir, test, scored.scores | {name: f.scores for name, f in fused.items()}, keys, costs)
    return result


@dataclass(frozen=True)
class Fused:
    """A system interpolated with BM25: its facts, records and scores (each query at its held-out
    weight), and the fit: {"weight": to deploy, "held_out_range": [min, max] of the held-out weights}."""

    facts: SystemFacts
    records: list[QueryRecord]
    scores: dict[str, list[float]]
    fit: dict[str, Any]


def bm25_interpolations(
    test: RelevanceSet,
    scored: Scored,
    systems: Mapping[str, System],
    quartiles: Sequence[int],
    gain: Gain = "linear",
) -> dict[str, Fused]:
    """The teacher, every other full-context model and every student's own online path interpolated
    with BM25 (`fusion`), named `<system> + bm25`."""
    if "bm25" not in scored.scores:
        return {}
    labels = {q.query_id: [label for _, label in test.candidates(q.query_id)] for q in test.queries}
    ids = {q.query_id: [item_id for item_id, _ in test.candidates(q.query_id)] for q in test.queries}
    quartile_of = dict(zip((q.query_id for q in test.queries), quartiles, strict=True))
    hard = {q.query_id: q.hard for q in test.queries}
    truth = scored.scores["teacher"]
    bm25 = scored.scores["bm25"]
    fused: dict[str, Fused] = {}
    for name, by_query in scored.scores.items():
        facts = systems[name].facts
        if facts.control_of is not None or name in ("bm25", "no item"):
            continue
        fitted = fit_weight(by_query, bm25, labels, ids, gain)
        fused_name = f"{name} + bm25"
        values = {q: interpolate(by_query[q], bm25[q], fitted.held_out[q]) for q in by_query}
        records = [
            QueryRecord(
                fused_name,
                q,
                hard[q],
                quartile_of[q],
                query_metrics(values[q], truth[q], labels[q], ids[q], gain),
            )
            for q in by_query
        ]
        family = "teacher + bm25" if name == "teacher" else f"{facts.family} + bm25"
        held = sorted(fitted.held_out.values())
        fit: dict[str, Any] = {"weight": fitted.weight, "held_out_range": [held[0], held[-1]]}
        if systems[name].served_as is not None:  # what `serve --fusion <out>/fusion.json` looks up
            fit["model"] = systems[name].served_as
        fused[fused_name] = Fused(SystemFacts(family, facts.positions), records, values, fit)
    return fused


def _costs(
    systems: Mapping[str, System], scored: Scored, saved: Mapping[str, Mapping[str, float]]
) -> dict[str, dict[str, float]]:
    """Per system: online ms per candidate (timed `score` calls, the query's candidates in one batch),
    for a compressed system the offline compression ms per item (a pass shared by several budgets
    counted for each: what any one of them would cost alone), for a trained student its training wall
    time, and the K/V positions it stores per item
    and their bytes as it stores them, in bf16 and in int8 (`kv_codec.payload_nbytes`, means over the
    items it compressed);
    from the cache where this run measured nothing."""
    out: dict[str, dict[str, float]] = {}
    for name in systems:
        costs = dict(saved.get(name, {}))
        measured = scored.same_as.get(name, name)  # a system that took another's scores costs as much
        measured = measured if measured in systems else name
        system = systems[measured]
        if measured in scored.timed:
            seconds, candidates = scored.timed[measured]
            costs["ms_per_candidate"] = 1000 * seconds / candidates
        if system.training_seconds is not None:
            costs["training_minutes"] = system.training_seconds / 60
        if system.compress_cost is not None and (spent := system.compress_cost())[1]:
            costs["compress_ms_per_item"] = 1000 * spent[0] / spent[1]
        if system.stored and system.kv_dims:
            layers, heads, dim = system.kv_dims
            positions = list(system.stored.values())
            costs["positions"] = sum(positions) / len(positions)
            stores = [(system.storage, "bytes_stored")] if system.storage else []
            for dtype, key in (*stores, ("bfloat16", "bytes_bf16"), ("int8", "bytes_int8")):
                costs[key] = sum(payload_nbytes(layers, p, heads, dim, dtype) for p in positions) / len(
                    positions
                )
        if costs:
            out[name] = costs
    return out


def _cuts(lengths: Sequence[int], quartiles: Sequence[int]) -> dict[str, list[int]]:
    return {
        str(q): [min(ls), max(ls)]
        for q in sorted(set(quartiles))
        if (ls := [n for n, qq in zip(lengths, quartiles, strict=True) if qq == q])
    }
