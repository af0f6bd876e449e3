"""`gistrank eval`: the fixed evaluation protocol of DESIGN §5.

Reference = the full-context teacher's ranking of the same candidates. For every test query and every
system: recall@K (K = 1, 5, 10) of the system's top-K against the teacher's top-K, NDCG@10 and
accuracy@1 against the labels. Systems, at matched storage and online cost:
    gist [t=…] k=…      the trained student's online path: score(query, compress(items)); t = hybrid
                        raw prefix kept beside the k gists
    untrained gists …   the same student with its initial gist embeddings
    prefix B · S        K/V of the item's first B tokens in place of the (prefix +) gists — prefix
                        caching cut to the same budget B = t + k (and B = t + k' for each k' of the
                        sweep), scored by student S's body and head
    … · untouched base  with `control_base`: the two controls above read by S's base LM, untrained
                        (the fair controls of a student scored by query likelihood)
    bm25                lexical baseline on the rendered item text (k1 = 0.9, b = 0.4, IDF over the
                        collection: the set's saved `collection.json`, else all of the set's items)
    no item             a constant score: what the query alone can do (nothing)
    full context · M    another full-context model M (e.g. a cheaper shadow candidate: a LoRA teacher)
    teacher             the reference itself (its NDCG is the ceiling)
Students that share a layout (t, k) carry their run folder's name as well: `gist t=32 k=8 · packed`.
Every metric is sliced by item-length quartile (length of the query's best-labelled item, in tokens)
and by hard-negative queries; each student is compared with each of its controls query by query
(paired differences). Output: results.json, report.md, one PNG per metric, and with `run_dir` one
TREC run file per system plus the split's qrels (`run_files.py`); `merge_results` joins evaluations of
different students on the same queries into one.

nDCG uses the gain 2^label − 1 on whatever integer scale the set's labels use (0–2 synthetic, 0–1 or
0–4 TREC); every table that reports it says so. A system that fails (an exception while compressing or
scoring) is dropped with its error recorded in results.json and report.md; the others' results stand.
Only the reference (teacher) failing ends the evaluation: nothing could be compared without it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from reranker.core.config import GistConfig
from reranker.core.kv import GistKV
from reranker.core.kv_codec import payload_nbytes
from reranker.core.model import GistReranker
from reranker.data.relevance_data import CollectionStats, RelevanceSet, collection_stats
from reranker.evaluation.baselines import (
    BM25_B,
    BM25_K1,
    bm25_scores,
    prefix_config,
    prefix_reader,
    untrained_gists,
)
from reranker.evaluation.fusion import fit_weight, interpolate
from reranker.evaluation.run_files import load_cached, save_runs
from reranker.evaluation.sweep import BudgetSweep, budget_reader
from reranker.ranking_metrics import (
    accuracy_at_1,
    bootstrap_ci,
    length_quartiles,
    ndcg_at_k,
    recall_at_k_vs_reference,
)

RECALL_KS = (1, 5, 10)
METRICS = ("recall@1", "recall@5", "recall@10", "ndcg@10", "acc@1")
INTERVAL_METRICS = ("recall@5", "ndcg@10")  # with a 95% bootstrap interval per system
PAIRED_METRICS = ("ndcg@10", "recall@5")  # compared student minus control, query by query
GAIN_NOTE = "nDCG gain 2^label − 1, discount 1/log2(rank + 1), ideal from the list's labels"

Scorer = Callable[[str, list[str]], list[float]]  # (query, candidate ids) → one score per candidate
Means = dict[str, float]  # metric → mean over queries, and "n": how many queries


# ------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class SystemFacts:
    """What the plots know of a system: its line (`family`), the K/V positions it stores per item (None:
    not a compressed system, drawn as a level) and, for a control, the student it controls."""

    family: str
    positions: int | None
    control_of: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"family": self.family, "positions": self.positions}
        return out if self.control_of is None else out | {"control_of": self.control_of}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SystemFacts:
        return cls(data["family"], data["positions"], data.get("control_of"))


TEACHER = SystemFacts("teacher", None)


def _nothing(_cand_ids: list[str]) -> None:
    return None


@dataclass(frozen=True)
class System:
    """A ranker under evaluation: how it scores a query's candidates, and its plot facts.

    `prepare` does a query's offline work before `score` is timed (compressing candidates not yet
    compressed); `key` names what produces the scores (model fingerprints and settings), so that a
    rerun reuses the scores cached under the same key (`--run-dir`); `stored` (item id → K/V
    positions kept) and `kv_dims` (L, H_kv, h) give the stored bytes of a compressed system; `forget`
    is told the candidates no later query names, so that an evaluation holds one query's K/V, not all."""

    score: Scorer
    facts: SystemFacts
    prepare: Callable[[list[str]], None] = _nothing
    key: str | None = None
    stored: dict[str, int] = field(default_factory=dict)
    kv_dims: tuple[int, int, int] | None = None
    forget: Callable[[list[str]], None] = _nothing  # drop what `prepare` kept for these candidates


@dataclass(frozen=True)
class QueryRecord:
    """One system on one query: the slices the query falls in and the system's METRICS on it."""

    system: str
    query_id: str
    hard: bool
    length_quartile: int
    metrics: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        slices = {"hard": self.hard, "length_quartile": self.length_quartile}
        return {"system": self.system, "query_id": self.query_id, **slices, **self.metrics}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueryRecord:
        metrics = {m: data[m] for m in METRICS}
        return cls(data["system"], data["query_id"], data["hard"], data["length_quartile"], metrics)


@dataclass(frozen=True)
class SystemSummary:
    """A system's means: over all queries (with 95% bootstrap intervals of INTERVAL_METRICS), per item-length
    quartile (keyed "0" … "3"), and over hard-negative vs other queries (None where there are none)."""

    all: Means
    ci95: dict[str, list[float]]
    by_length_quartile: dict[str, Means]
    hard: Means | None
    not_hard: Means | None


@dataclass(frozen=True)
class EvalResult:
    """One evaluation, as written to results.json (`to_json`) and read back (`from_json`)."""

    split: str
    teacher: str
    students: list[str]
    full_models: list[str]
    queries: int
    systems: dict[str, SystemFacts]
    length_quartile_cuts_tokens: dict[str, list[int]]  # quartile → [min, max] tokens of its best items
    summary: dict[str, SystemSummary]
    records: list[QueryRecord]
    errors: dict[str, str] = field(default_factory=dict)  # failed system → its error
    bm25: dict[str, Any] | None = None  # k1, b and where IDF came from (None: an older results.json)
    costs: dict[str, dict[str, float]] = field(default_factory=dict)  # system → `_costs`
    interpolation: dict[str, dict[str, Any]] = field(default_factory=dict)  # "<system> + bm25" → its fit
    truncation: dict[str, int] | None = None  # the teacher's item cap, items read, items it truncated

    def to_json(self) -> dict[str, Any]:
        optional = {"bm25": self.bm25} if self.bm25 is not None else {}
        if self.errors:
            optional["errors"] = self.errors
        if self.truncation is not None:
            optional["truncation"] = self.truncation
        return {
            "split": self.split,
            "teacher": self.teacher,
            "students": self.students,
            "full_models": self.full_models,
            "queries": self.queries,
            "systems": {name: facts.to_json() for name, facts in self.systems.items()},
            "length_quartile_cuts_tokens": self.length_quartile_cuts_tokens,
            "summary": {name: asdict(s) for name, s in self.summary.items()},
            "records": [r.to_json() for r in self.records],
            "costs": self.costs,
            "interpolation": self.interpolation,
        } | optional

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvalResult:
        """Read a results.json (one written before `full_models`, `bm25` or `errors` existed has none)."""
        return cls(
            split=data["split"],
            teacher=data["teacher"],
            students=list(data["students"]),
            full_models=list(data.get("full_models", [])),
            queries=data["queries"],
            systems={name: SystemFacts.from_json(f) for name, f in data["systems"].items()},
            length_quartile_cuts_tokens=dict(data["length_quartile_cuts_tokens"]),
            summary={name: SystemSummary(**s) for name, s in data["summary"].items()},
            records=[QueryRecord.from_json(r) for r in data["records"]],
            errors=dict(data.get("errors", {})),
            bm25=data.get("bm25"),
            costs=dict(data.get("costs", {})),
            interpolation=dict(data.get("interpolation", {})),
            truncation=data.get("truncation"),
        )


@dataclass(frozen=True)
class Difference:
    """A student minus a control on one metric, query by query."""

    mean: float
    ci95: list[float]  # 95% bootstrap interval of the mean
    better: int  # queries where the student scored higher
    worse: int


@dataclass(frozen=True)
class PairedDifference:
    student: str
    control: str
    by_metric: dict[str, Difference]  # PAIRED_METRICS


# ------------------------------------------------------------------------------------------- systems
def query_metrics(
    scores: Sequence[float], reference: Sequence[float], labels: Sequence[int]
) -> dict[str, float]:
    out = {f"recall@{k}": recall_at_k_vs_reference(scores, reference, k) for k in RECALL_KS}
    out["ndcg@10"] = ndcg_at_k(scores, labels, 10)
    out["acc@1"] = accuracy_at_1(scores, labels)
    return out


def _layout_name(gist: GistConfig, family: str = "gist", with_k: bool = True) -> str:
    """E.g. `gist t=32 k=8`; without k it names a plot line (one point per trained k)."""
    parts = [
        family,
        f"t={gist.keep_item_prefix}" if gist.keep_item_prefix else "",
        f"k={gist.num_gist}" if with_k else "",
    ]
    return " ".join(p for p in parts if p)


def _run_label(path: str | Path) -> str:
    """`runs/x/checkpoint` → `x`: what tells two students of one gist layout apart in one evaluation."""
    p = Path(path)
    return p.parent.name if p.name == "checkpoint" else p.name


def _kv_system(
    texts_by_id: Mapping[str, str],
    reader: Callable[[], GistReranker],
    compress: Callable[[GistReranker, list[str]], list[GistKV]],
    facts: SystemFacts,
    key: str,
    release: Callable[[list[str]], None] | None = None,
) -> System:
    """Scores against stored K/V: the reader built on first use and each candidate compressed the first
    time a query needs it (offline work, in `prepare`) and forgotten after its last query (`release`:
    what the compressor must drop too, e.g. a shared pass's copy); a reader or compressor that fails
    fails its own system (recorded by `score_queries`), not the others."""
    state: dict[str, Any] = {"kvs": {}}
    stored: dict[str, int] = {}

    def prepare(cand_ids: list[str]) -> None:
        if "model" not in state:
            state["model"] = reader()
        todo = [i for i in dict.fromkeys(cand_ids) if i not in state["kvs"]]
        if todo:
            kvs = compress(state["model"], [texts_by_id[i] for i in todo])
            state["kvs"].update(zip(todo, kvs, strict=True))
            stored.update((i, kv.kv.shape[3]) for i, kv in zip(todo, kvs, strict=True))

    def score(query: str, cand_ids: list[str]) -> list[float]:
        prepare(cand_ids)
        return state["model"].score(query, [state["kvs"][i] for i in cand_ids]).tolist()

    def forget(cand_ids: list[str]) -> None:
        for i in cand_ids:
            state["kvs"].pop(i, None)
        if release is not None:
            release([texts_by_id[i] for i in cand_ids])

    return System(score, facts, prepare, key, stored, forget=forget)


def _own_compress(model: GistReranker, texts: list[str]) -> list[GistKV]:
    return model.compress(texts)


def _key(model: GistReranker, what: str = "") -> str:
    """What produces a system's scores: the reading model's fingerprint (weights and every reading
    setting) and compute dtype."""
    return f"{what}{model.fingerprint} {str(model.dtype).removeprefix('torch.')}"


def full_scorer(model: GistReranker, texts_by_id: Mapping[str, str]) -> Scorer:
    """A full-context model reading every candidate's text (the teacher, or another full model)."""
    return lambda query, cand_ids: model.score_full(query, [texts_by_id[i] for i in cand_ids]).tolist()


def full_system(model: GistReranker, texts_by_id: Mapping[str, str], facts: SystemFacts) -> System:
    return System(full_scorer(model, texts_by_id), facts, key=_key(model, "full context "))


def baseline_systems(
    texts_by_id: Mapping[str, str], collection: CollectionStats | None = None
) -> dict[str, System]:
    """BM25 on the item text (IDF over `collection`; None: over these texts), and a constant score:
    what the query alone can do (nothing)."""
    stats = collection or collection_stats(texts_by_id.values())
    return {
        "bm25": System(
            lambda query, cand_ids: bm25_scores(query, [texts_by_id[i] for i in cand_ids], collection=stats),
            SystemFacts("bm25", None),
            key=f"bm25 k1={BM25_K1} b={BM25_B} N={stats.documents} avgdl={stats.avg_length!r}",
        ),
        "no item": System(
            lambda _query, cand_ids: [0.0] * len(cand_ids), SystemFacts("no item", 0), key="constant 0"
        ),
    }


def _gist_systems(
    student: GistReranker,
    texts_by_id: Mapping[str, str],
    prefix_ks: Sequence[int],
    label: str = "",
    base: GistReranker | None = None,
    shared: BudgetSweep | None = None,
    prefixes: BudgetSweep | None = None,
) -> dict[str, System]:
    """Systems of one student checkpoint: its own online path and its controls. A `label` (its run)
    suffixes every name and family; `shared`: the one compression pass the student's k is part of;
    `prefixes`: the one prefix pass of its group (which holds every budget asked here).

    The controls are the untrained-gists baseline (the student's body and head, initial gists; gist
    students only) and
    prefix caching of the item's first t + k' tokens for each k' in `prefix_ks` and the student's k (for
    a prefix student, read by its own body, that is the student). With
    `base` (the untouched base LM under the student's gist config) both controls are also read by it:
    the fair controls of a student whose score rule needs no trained parameter (query likelihood),
    since the student's own body has learned to read gists rather than raw tokens."""
    suffix = f" · {label}" if label else ""

    def name(family: str = student.gist.compressor, with_k: bool = True) -> str:
        return _layout_name(student.gist, family, with_k) + suffix

    t, k = student.gist.keep_item_prefix, student.gist.num_gist
    main = name()
    dims = (student.num_layers, student.num_kv_heads, student.head_dim)
    facts = SystemFacts(name(with_k=False), t + k)
    if shared is None:
        own = _kv_system(texts_by_id, lambda: student, _own_compress, facts, _key(student, "own "))
    else:  # `student` is the pass's reader of k
        compress = lambda _m, texts: shared.compress(k, texts)  # noqa: E731
        own = _kv_system(texts_by_id, lambda: student, compress, facts, _key(student, "own "), shared.forget)
    systems = {main: replace(own, kv_dims=dims)}
    readers = [(student, "")] + ([(base, " · untouched base")] if base is not None else [])
    for reader, tag in readers:
        if student.compressor.learned:  # selection and prefix have no gists to leave untrained
            control = _kv_system(
                texts_by_id,
                lambda r=reader: untrained_gists(r),
                _own_compress,
                SystemFacts(name("untrained gists", with_k=False) + tag, t + k, main),
                _key(reader, "untrained gists of "),
            )
            systems[name("untrained gists") + tag] = replace(control, kv_dims=dims)
        # a prefix student's own budget, read by its own body, is the student itself
        own = () if not tag and prefix_config(reader.gist, t + k) == student.gist else (k,)
        budgets = sorted({t + kk for kk in (*prefix_ks, *own)})
        if not budgets:
            continue
        # one line in the plots per body: a gist student's own, a select or prefix group's shared one
        family = f"prefix · {name(with_k=student.compressor.learned)}{tag}"
        if prefixes is None or tag:
            prefixes = BudgetSweep(prefix_reader(reader, budgets[-1]), budgets)
        for budget in budgets:
            # scored by this reader's body and head: two students' prefix controls of one budget differ,
            # unless they read through one body and head — a select group gets one control per budget
            # (`student_systems`); any others with one key are scored once (`score_queries`)
            control = _kv_system(
                texts_by_id,
                lambda b=budget, pp=prefixes: pp.reader(b),
                lambda _m, texts, b=budget, pp=prefixes: pp.compress(b, texts),
                SystemFacts(family, budget, main),
                _key(prefixes.reader(budget), "prefix "),
                prefixes.forget,
            )
            systems[f"prefix {budget} · {main}{tag}"] = replace(control, kv_dims=dims)
    return systems


def student_systems(
    paths: Sequence[str | Path],
    texts_by_id: Mapping[str, str],
    prefix_ks: Sequence[int],
    control_base: bool = False,
    device: str | None = None,
) -> dict[str, System]:
    """Every student's systems (`_gist_systems`). Students of one gist layout are told apart by their
    run folder; with `control_base` each base LM is loaded once (per dtype), however many students.
    Select or prefix students that differ only in k (same body and settings) share one body and one
    compression pass (`BudgetSweep`)."""
    students = [GistReranker.from_pretrained(path, device=device) for path in paths]
    # the name `_gist_systems` gives each (its compressor, t, k): only students that would share one need
    # their run folder in it, so a cached system keeps its name when another compressor's student joins
    layouts = [_layout_name(s.gist, s.gist.compressor) for s in students]
    labels = [_run_label(p) if layouts.count(n) > 1 else "" for p, n in zip(paths, layouts, strict=True)]
    if len(set(zip(layouts, labels, strict=True))) < len(students):
        raise ValueError(f"students {list(map(str, paths))} repeat a layout and a run folder name")
    groups: dict[str, list[GistReranker]] = {}
    group_of: list[str | None] = []
    for student in students:
        group = None
        if not student.compressor.learned:  # one body and settings, any k: one sweep
            group = _key(budget_reader(student, 1))
            groups.setdefault(group, []).append(student)
        group_of.append(group)
    passes = {g: BudgetSweep(members[0], [m.gist.num_gist for m in members]) for g, members in groups.items()}
    shared_of = [passes[g] if g else None for g in group_of]
    # a grouped student is read through its pass's body: the other copies of that body can go
    students = [
        s if p is None else p.reader(s.gist.num_gist) for s, p in zip(students, shared_of, strict=True)
    ]
    # one prefix pass and one prefix control per budget for a group (its reader is the group's body, so
    # a second student's control would score exactly what the first's does): each member controls its
    # own budget; the first member also the budgets of `prefix_ks` that no member has
    prefix_passes = {}
    for g, members in groups.items():
        t, ks = members[0].gist.keep_item_prefix, [m.gist.num_gist for m in members]
        budgets = sorted({t + k for k in (*prefix_ks, *ks)})
        prefix_passes[g] = (BudgetSweep(prefix_reader(passes[g].body, budgets[-1]), budgets), ks)
    del groups
    bases: dict[tuple[str, str], GistReranker] = {}
    systems: dict[str, System] = {}
    for student, label, group in zip(students, labels, group_of, strict=True):
        controls, prefixes = prefix_ks, None
        if group is not None:
            prefixes, ks = prefix_passes[group]
            first = ks[0] == student.gist.num_gist
            controls = [k for k in prefix_ks if k not in ks] if first else []
        base = None
        if control_base:
            key = (student.base_ref, student.gist.dtype)
            if key not in bases:
                bases[key] = GistReranker.from_pretrained(student.base_ref, student.gist, device=device)
            base = bases[key].with_gist_config(student.gist)  # untouched: its initial gists and head
        shared = passes[group] if group is not None else None
        systems |= _gist_systems(student, texts_by_id, controls, label, base, shared, prefixes)
    return systems


def full_context_systems(
    paths: Sequence[str | Path], texts_by_id: Mapping[str, str], device: str | None = None
) -> dict[str, System]:
    """Other full-context models (e.g. a cheaper shadow candidate), each reading every item in full."""
    return {
        f"full context · {path}": full_system(
            GistReranker.from_pretrained(path, device=device), texts_by_id, SystemFacts("full context", None)
        )
        for path in paths
    }


# ------------------------------------------------------------------------------------------ scoring
def best_item_tokens(model: GistReranker, test: RelevanceSet, texts_by_id: Mapping[str, str]) -> list[int]:
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
                metrics = query_metrics(values, truth, labels)
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
) -> EvalResult:
    """Score `data`'s `split` with the teacher, every student's systems and every other full-context
    model in `full_paths`; write results.json, report.md and plots to `out`, and with `run_dir` one TREC
    run file per system and the split's qrels (`run_files.write_runs`). `control_base`: read each
    student's controls with its untouched base LM as well (see `_gist_systems`). BM25's IDF is over the
    set's collection (`data.collection`, saved by `gistrank data import-trec`), else over all of
    `data`'s items. `max_queries`: only the split's first queries (the slice is stated in the report)."""
    test = data.split(split, max_queries)
    if not test.queries:
        raise ValueError(f"split {split!r} has no queries")
    teacher = GistReranker.from_pretrained(teacher_path, device=device)
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
    systems |= student_systems(student_paths, texts_by_id, prefix_ks, control_base, device)
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

    scored = score_queries(test, reference, systems, quartiles, cached, keep)
    fused = bm25_interpolations(test, scored, everyone, quartiles)
    finished = {name: s for name, s in everyone.items() if name not in scored.errors}
    costs = _costs(finished, scored, saved_costs)
    truncated = teacher.item_ids(list(texts_by_id.values()))[1]
    records = scored.records + [r for f in fused.values() for r in f.records]
    result = EvalResult(
        split=split,
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
    test: RelevanceSet, scored: Scored, systems: Mapping[str, System], quartiles: Sequence[int]
) -> dict[str, Fused]:
    """The teacher, every other full-context model and every student's own online path interpolated
    with BM25 (`fusion`), named `<system> + bm25`."""
    if "bm25" not in scored.scores:
        return {}
    labels = {q.query_id: [label for _, label in test.candidates(q.query_id)] for q in test.queries}
    quartile_of = dict(zip((q.query_id for q in test.queries), quartiles, strict=True))
    hard = {q.query_id: q.hard for q in test.queries}
    truth = scored.scores["teacher"]
    bm25 = scored.scores["bm25"]
    fused: dict[str, Fused] = {}
    for name, by_query in scored.scores.items():
        facts = systems[name].facts
        if facts.control_of is not None or name in ("bm25", "no item"):
            continue
        fitted = fit_weight(by_query, bm25, labels)
        fused_name = f"{name} + bm25"
        values = {q: interpolate(by_query[q], bm25[q], fitted.held_out[q]) for q in by_query}
        records = [
            QueryRecord(fused_name, q, hard[q], quartile_of[q], query_metrics(values[q], truth[q], labels[q]))
            for q in by_query
        ]
        family = "teacher + bm25" if name == "teacher" else f"{facts.family} + bm25"
        held = sorted(fitted.held_out.values())
        fit = {"weight": fitted.weight, "held_out_range": [held[0], held[-1]]}
        fused[fused_name] = Fused(SystemFacts(family, facts.positions), records, values, fit)
    return fused


def _costs(
    systems: Mapping[str, System], scored: Scored, saved: Mapping[str, Mapping[str, float]]
) -> dict[str, dict[str, float]]:
    """Per system: online ms per candidate (timed `score` calls, the query's candidates in one batch)
    and for a compressed system the K/V positions it stores per item and their bytes in bf16 and int8
    (`kv_codec.payload_nbytes`, means over the items it compressed); from the cache where this run
    measured nothing."""
    out: dict[str, dict[str, float]] = {}
    for name in systems:
        costs = dict(saved.get(name, {}))
        measured = scored.same_as.get(name, name)  # a system that took another's scores costs as much
        measured = measured if measured in systems else name
        system = systems[measured]
        if measured in scored.timed:
            seconds, candidates = scored.timed[measured]
            costs["ms_per_candidate"] = 1000 * seconds / candidates
        if system.stored and system.kv_dims:
            layers, heads, dim = system.kv_dims
            positions = list(system.stored.values())
            costs["positions"] = sum(positions) / len(positions)
            for dtype, key in (("bfloat16", "bytes_bf16"), ("int8", "bytes_int8")):
                costs[key] = sum(payload_nbytes(layers, p, heads, dim, dtype) for p in positions) / len(
                    positions
                )
        if costs:
            out[name] = costs
    return out


# ------------------------------------------------------------------------------------------ results
def merge_results(results: Sequence[EvalResult]) -> EvalResult:
    """One evaluation out of several of the same teacher, split and queries (e.g. one run per trained
    k, done at different times), so the k sweep is one table and one plot. A system in more than one
    run (teacher, BM25, no item, a student evaluated twice) must have scored identically in each."""
    if not results:
        raise ValueError("nothing to merge")
    first = results[0]
    for key in ("split", "teacher", "queries", "length_quartile_cuts_tokens"):
        for other in results[1:]:
            if getattr(other, key) != getattr(first, key):
                mine, theirs = getattr(first, key), getattr(other, key)
                raise ValueError(f"cannot merge: {key} differs ({mine!r} vs {theirs!r})")
    systems: dict[str, SystemFacts] = {}
    records: dict[str, list[QueryRecord]] = {}
    for result in results:
        for name, facts in result.systems.items():
            mine = [r for r in result.records if r.system == name]
            if name in systems and (systems[name] != facts or records[name] != mine):
                raise ValueError(f"cannot merge: system {name!r} differs between the evaluations")
            systems[name], records[name] = facts, mine
    merged = [r for rows in records.values() for r in rows]
    errors = {n: e for result in results for n, e in result.errors.items() if n not in systems}
    return replace(
        first,
        students=list(dict.fromkeys(s for result in results for s in result.students)),
        full_models=list(dict.fromkeys(m for result in results for m in result.full_models)),
        systems=systems,
        summary=summarize(merged),
        records=merged,
        errors=errors,
        bm25=next((result.bm25 for result in results if result.bm25 is not None), None),
        costs={n: c for result in results for n, c in result.costs.items() if n in systems},
        interpolation={n: f for result in results for n, f in result.interpolation.items() if n in systems},
    )


def write_outputs(result: EvalResult, out: Path) -> None:
    """results.json, report.md and the plots of one evaluation (re-runnable from a saved results.json)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
    (out / "report.md").write_text(markdown_report(result))
    plot(result.summary, result.systems, out)
    plot_vs_bytes(result, out)


def summarize(records: Sequence[QueryRecord]) -> dict[str, SystemSummary]:
    """Mean of every metric per system: overall (with 95% bootstrap intervals of INTERVAL_METRICS over
    queries), per length quartile, hard vs other queries."""

    def mean(rows: list[QueryRecord]) -> Means:
        return {m: sum(r.metrics[m] for r in rows) / len(rows) for m in METRICS} | {"n": len(rows)}

    out = {}
    for system in dict.fromkeys(r.system for r in records):
        rows = [r for r in records if r.system == system]
        hard, other = [r for r in rows if r.hard], [r for r in rows if not r.hard]
        out[system] = SystemSummary(
            all=mean(rows),
            ci95={m: list(bootstrap_ci([r.metrics[m] for r in rows])) for m in INTERVAL_METRICS},
            by_length_quartile={
                str(q): mean([r for r in rows if r.length_quartile == q])
                for q in sorted({r.length_quartile for r in rows})
            },
            hard=mean(hard) if hard else None,
            not_hard=mean(other) if other else None,
        )
    return out


def paired_differences(
    records: Sequence[QueryRecord], systems: Mapping[str, SystemFacts]
) -> list[PairedDifference]:
    """Each student minus each of its controls, query by query (the pairing cancels the spread between
    easy and hard queries that the per-system intervals carry): mean difference of PAIRED_METRICS, its
    95% bootstrap interval, and how many queries went better / worse."""
    by_key = {(r.system, r.query_id): r for r in records}
    queries = list(dict.fromkeys(r.query_id for r in records))
    rows = []
    for control, facts in systems.items():
        if (student := facts.control_of) is None or student not in systems:  # a failed student
            continue
        by_metric = {}
        for metric in PAIRED_METRICS:
            diffs = [by_key[student, q].metrics[metric] - by_key[control, q].metrics[metric] for q in queries]
            by_metric[metric] = Difference(
                mean=sum(diffs) / len(diffs),
                ci95=list(bootstrap_ci(diffs)),
                better=sum(d > 0 for d in diffs),
                worse=sum(d < 0 for d in diffs),
            )
        rows.append(PairedDifference(student, control, by_metric))
    return rows


def _cuts(lengths: Sequence[int], quartiles: Sequence[int]) -> dict[str, list[int]]:
    return {
        str(q): [min(ls), max(ls)]
        for q in sorted(set(quartiles))
        if (ls := [n for n, qq in zip(lengths, quartiles, strict=True) if qq == q])
    }


def _header(metric: str) -> str:
    """A metric's column header: nDCG columns carry their gain, so no table is read on the wrong scale."""
    return f"{metric} (gain 2^label − 1)" if metric.startswith("ndcg") else metric


def _bm25_note(result: EvalResult) -> list[str]:
    if result.bm25 is None:
        return []
    b = result.bm25
    return [
        "",
        f"bm25: Okapi BM25, k1 = {b['k1']}, b = {b['b']}, IDF over {b['idf_over']} "
        f"(N = {b['idf_documents']} documents).",
    ]


def _interpolation_note(result: EvalResult) -> list[str]:
    if not result.interpolation:
        return []
    weights = "; ".join(
        f"{name}: α = {fit['weight']:.1f} (held out {lo:.1f}–{hi:.1f})"
        for name, fit in result.interpolation.items()
        for lo, hi in [fit["held_out_range"]]
    )
    return [
        "",
        "`<system> + bm25`: per query α · minmax(system) + (1 − α) · minmax(bm25), α ∈ {0, 0.1, …, 1} "
        "fitted on nDCG@10; each query is scored with the α fitted on the other queries (leave-one-out), "
        f"the α to deploy is fitted on all of them. {weights}.",
    ]


def _truncation_note(result: EvalResult) -> list[str]:
    if not (t := result.truncation):
        return []
    share = t["truncated"] / t["items"] if t["items"] else 0.0
    return [
        "",
        f"Items read up to {t['max_item_tokens']} tokens: {t['truncated']} of {t['items']} candidates "
        f"({share:.0%}) were longer and cut there (every system reads the same cut).",
    ]


def _cost_table(result: EvalResult) -> list[str]:
    """Stored positions and bytes per item, online ms per candidate (the query's candidates in one
    batch on this machine)."""
    rows = [(name, c) for name, c in result.costs.items() if name in result.summary]
    if not rows:
        return []

    def cell(costs: Mapping[str, float], key: str, scale: float = 1.0, fmt: str = "{:.1f}") -> str:
        return fmt.format(costs[key] / scale) if key in costs else "–"

    lines = [
        "",
        "Cost per item and per candidate (K/V positions and payload bytes: means over the items stored; "
        "ms: online scoring, one query's candidates per batch, this machine):",
        "",
        "| system | stored positions | KiB/item bf16 | KiB/item int8 | ms/candidate |",
        "|---|---|---|---|---|",
    ]
    for name, costs in rows:
        cells = [
            cell(costs, "positions"),
            cell(costs, "bytes_bf16", 1024),
            cell(costs, "bytes_int8", 1024),
            cell(costs, "ms_per_candidate", fmt="{:.2f}"),
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def markdown_report(result: EvalResult) -> str:
    summary = result.summary
    hard_cols = ["hard-query recall@5", "hard-query " + _header("ndcg@10")]
    lines = [
        f"## Evaluation on split `{result.split}` ({result.queries} queries)",
        "",
        f"Reference ranking: teacher `{result.teacher}`. Recall@K is against the teacher's top-K; "
        f"{GAIN_NOTE}.",
        "",
        "| system | " + " | ".join([*map(_header, METRICS), *hard_cols]) + " |",
        "|---|" + "---|" * (len(METRICS) + 2),
    ]
    for system, s in summary.items():
        hard = s.hard
        tail = [f"{hard['recall@5']:.3f}", f"{hard['ndcg@10']:.3f}"] if hard else ["–", "–"]
        lines.append(
            f"| {system} | "
            + " | ".join(f"{s.all[m]:.3f}" for m in METRICS)
            + " | "
            + " | ".join(tail)
            + " |"
        )
    lines += _bm25_note(result) + _interpolation_note(result) + _truncation_note(result)
    lines += _cost_table(result)
    lines += ["", "Mean with 95% bootstrap interval over queries:", ""]
    lines += ["| system | " + " | ".join(map(_header, INTERVAL_METRICS)) + " |", "|---|---|---|"]
    for system, s in summary.items():
        ci = s.ci95
        cells = [f"{s.all[m]:.3f} [{ci[m][0]:.3f}, {ci[m][1]:.3f}]" for m in INTERVAL_METRICS]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    if paired := paired_differences(result.records, result.systems):
        title = (
            "Each student minus its controls, paired over queries (95% bootstrap interval; better / worse)"
        )
        header = "| student | control | " + " | ".join(f"Δ {_header(m)}" for m in PAIRED_METRICS) + " |"
        lines += ["", title + ":", "", header, "|---|---|---|---|"]
        for row in paired:
            cells = [
                f"{d.mean:+.3f} [{d.ci95[0]:+.3f}, {d.ci95[1]:+.3f}] ({d.better} / {d.worse})"
                for d in (row.by_metric[m] for m in PAIRED_METRICS)
            ]
            lines.append(f"| {row.student} | {row.control} | " + " | ".join(cells) + " |")
    cuts = result.length_quartile_cuts_tokens
    lines += ["", "Recall@5 by item-length quartile (tokens of the query's best item):", ""]
    quarts = sorted(cuts)
    lines.append("| system | " + " | ".join(f"Q{q} ({cuts[q][0]}–{cuts[q][1]})" for q in quarts) + " |")
    lines.append("|---|" + "---|" * len(quarts))
    for system, s in summary.items():
        row = [
            f"{s.by_length_quartile[q]['recall@5']:.3f}" if q in s.by_length_quartile else "–" for q in quarts
        ]
        lines.append(f"| {system} | " + " | ".join(row) + " |")
    if result.errors:
        lines += ["", "Systems that failed (left out of every table above):", ""]
        lines += ["| system | error |", "|---|---|"]
        lines += [
            f"| {name} | {' '.join(error.split()).replace('|', '/')} |"
            for name, error in result.errors.items()
        ]
    return "\n".join(lines) + "\n"


_LEVELS = {"bm25": {"color": "gray", "ls": "--"}, "no item": {"color": "gray", "ls": ":"}}


def _level_styles(names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The horizontal line of each system with no stored positions: BM25 and the no-item floor grey,
    the reference black, every other full-context model a colour of its own (its BM25 interpolation
    dotted), so that several of them stay apart in the legend."""
    import matplotlib

    dark = matplotlib.colormaps["Dark2"]
    others = [n for n in names if n not in _LEVELS and n != "teacher"]
    styles = {
        n: {"color": dark(i % 8), "ls": ":" if n.endswith(" + bm25") else "-."} for i, n in enumerate(others)
    }
    return styles | {"teacher": {"color": "black", "ls": "-."}} | _LEVELS


def _palette(n: int) -> list:
    """n colours for n plotted families: the default cycle while it lasts (10), then tab20's 20, so
    that two families do not share a colour in a wide sweep."""
    import matplotlib

    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    return colors if n <= len(colors) else [matplotlib.colormaps["tab20"](i % 20) for i in range(n)]


def plot(summary: Mapping[str, SystemSummary], systems: Mapping[str, SystemFacts], out: Path) -> list[Path]:
    """One PNG per metric: metric vs stored K/V positions per item (k, or t + k for a hybrid), one panel
    for all queries and one per item-length quartile, one colour per system family — trained gists vs
    prefix caching (scored by the same student) vs untrained gists — with BM25, the no-item floor and
    other full-context models as horizontal lines. No students, no plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = sorted({f.family for f in systems.values() if f.positions})
    if not families:  # only full-context models and baselines: nothing varies with k
        return []
    colors = _palette(len(families))
    quartiles = sorted({q for s in summary.values() for q in s.by_length_quartile})
    panels: list[tuple[str, Callable[[SystemSummary], Means | None]]] = [("all queries", lambda s: s.all)]
    panels += [(f"item-length quartile Q{q}", lambda s, q=q: s.by_length_quartile.get(q)) for q in quartiles]
    paths = []
    for metric in ("recall@5", "recall@10", "ndcg@10"):
        fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4), sharey=True, squeeze=False)
        for ax, (title, part) in zip(axes[0], panels, strict=True):
            for index, family in enumerate(families):
                runs = sorted(
                    (f.positions, means[metric])
                    for name, f in systems.items()
                    if f.family == family and (means := part(summary[name]))
                )
                xs, ys = zip(*runs, strict=True)
                ax.plot(xs, ys, marker="o", color=colors[index % len(colors)], label=family)
            levels = _level_styles([n for n, f in systems.items() if not f.positions])
            for name, facts in systems.items():
                if facts.positions or name == "teacher" or not (means := part(summary[name])):
                    continue
                ax.axhline(means[metric], **levels[name], label=name)
            ax.set_xscale("log", base=2)
            ax.set_title(title)
            ax.set_xlabel("stored K/V positions per item")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(metric)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
        fig.suptitle(f"{metric} vs stored positions (k, or t + k)")
        path = out / f"{metric.replace('@', '_at_')}_vs_k.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


def plot_vs_bytes(result: EvalResult, out: Path) -> Path | None:
    """quality_vs_bytes.png: nDCG@10 and recall@10 against the K/V bytes each compressed system stores
    per item in int8 (log scale), one line per family; full-context models and BM25 as levels. None
    when no system stored K/V."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sized = {
        name: costs["bytes_int8"] / 1024
        for name, costs in result.costs.items()
        if "bytes_int8" in costs and name in result.summary
    }
    if not sized:
        return None
    families = sorted({result.systems[name].family for name in sized})
    colors = _palette(len(families))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), squeeze=False)
    for ax, metric in zip(axes[0], ("ndcg@10", "recall@10"), strict=True):
        for index, family in enumerate(families):
            points = sorted(
                (kib, result.summary[name].all[metric])
                for name, kib in sized.items()
                if result.systems[name].family == family
            )
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", color=colors[index % len(colors)], label=family)
        levels = _level_styles([n for n, f in result.systems.items() if f.positions is None])
        for name, facts in result.systems.items():
            if (
                facts.positions is None
                and name in result.summary
                and (metric != "recall@10" or name != "teacher")
            ):
                ax.axhline(result.summary[name].all[metric], **levels[name], lw=1, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("stored K/V per item, KiB (int8)")
        ax.set_ylabel(_header(metric))
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle(f"Quality vs stored bytes ({result.queries} queries of split {result.split})")
    path = out / "quality_vs_bytes.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
