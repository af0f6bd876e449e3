"""What `gistrank eval` scores (DESIGN §5): the systems, at matched storage and online cost.

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
Each system carries a key naming what produces its scores, so that the runner scores one key once and a
rerun reuses the cached scores of an unchanged key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from reranker.core.compressors import compressor_for
from reranker.core.config import RerankerConfig
from reranker.core.kv import StoredUnit
from reranker.core.model import Reranker
from reranker.data.relevance_data import CollectionStats, collection_stats
from reranker.evaluation.baselines import (
    BM25_B,
    BM25_K1,
    bm25_scores,
    gists_untrained,
    prefix_config,
    prefix_reader,
    untrained_gists,
)
from reranker.evaluation.results import SystemFacts
from reranker.evaluation.sweep import BudgetSweep, sweep_body
from reranker.training.trainer import training_seconds

Scorer = Callable[[str, list[str]], list[float]]  # (query, candidate ids) → one score per candidate


def _nothing(_cand_ids: list[str]) -> None:
    return None


@dataclass(frozen=True)
class System:
    """A ranker under evaluation: how it scores a query's candidates, and its plot facts.

    `prepare` does a query's offline work before `score` is timed (compressing candidates not yet
    compressed; `compress_cost` gives its (seconds, items) so far); `key` names what produces the
    scores (model fingerprints and settings), so that a rerun reuses the scores cached under the same
    key (`--run-dir`); `stored` (item id → K/V positions kept) and `kv_dims` (L, H_kv, h) give the
    stored bytes of a compressed system; `forget` is told the candidates no later query names, so that
    an evaluation holds one query's K/V, not all."""

    score: Scorer
    facts: SystemFacts
    prepare: Callable[[list[str]], None] = _nothing
    key: str | None = None
    stored: dict[str, int] = field(default_factory=dict)
    kv_dims: tuple[int, int, int] | None = None
    forget: Callable[[list[str]], None] = _nothing  # drop what `prepare` kept for these candidates
    compress_cost: Callable[[], tuple[float, int]] | None = None
    training_seconds: float | None = None  # the wall time of the run that trained it (none: untrained)
    served_as: str | None = None  # the model reference `gistrank serve` loads for it (a student's own path)
    storage: str | None = None  # how its store keeps the K/V (RerankerConfig.storage): the bytes it costs


def _layout_name(gist: RerankerConfig, family: str = "gist", with_k: bool = True) -> str:
    """E.g. `gist t=32 k=8`, `gist pooled k=64` (GistPool's windows), `select kvzip per-head t=32 k=32`;
    without k it names a plot line (one point per trained k)."""
    settings = compressor_for(gist.compressor).settings
    parts = [
        family,
        "pooled" if gist.gist_pool_windows and "gist_pool_windows" in settings else "",
        "kvzip" if gist.select_scorer == "kvzip" and "select_scorer" in settings else "",
        "per-head" if gist.select_head_budget == "adaptive" and "select_head_budget" in settings else "",
        f"t={gist.keep_item_prefix}" if gist.keep_item_prefix else "",
        f"k={gist.num_gist}" if with_k else "",
        gist.kv_storage or "",  # stored at another precision than its dtype: another system
    ]
    return " ".join(p for p in parts if p)


def _run_label(path: str | Path) -> str:
    """`runs/x/checkpoint` → `x`: what tells two students of one gist layout apart in one evaluation."""
    p = Path(path)
    return p.parent.name if p.name == "checkpoint" else p.name


class StoredKV:
    """Scores against stored K/V: the reader built on first use and each candidate compressed the first
    time a query needs it (offline work, in `prepare`) and forgotten after its last query (`release`:
    what the compressor must drop too, e.g. a shared pass's copy); a reader or compressor that fails
    fails its own system (recorded by `score_queries`), not the others. `cost`: the (seconds, items) of
    the compression pass this system shares (`BudgetSweep.cost`); default its own compress calls'."""

    def __init__(
        self,
        texts_by_id: Mapping[str, str],
        reader: Callable[[], Reranker],
        compress: Callable[[Reranker, list[str]], list[StoredUnit]],
        release: Callable[[list[str]], None] | None = None,
        cost: Callable[[], tuple[float, int]] | None = None,
    ) -> None:
        self._texts_by_id = texts_by_id
        self._reader = reader
        self._compress = compress
        self._release = release
        self._model: Reranker | None = None
        self._kvs: dict[str, StoredUnit] = {}
        self.stored: dict[str, int] = {}  # item id → K/V positions kept (the costs' bytes per item)
        self.seconds, self.items = 0.0, 0  # spent in `compress`, items it compressed
        self._cost = cost or (lambda: (self.seconds, self.items))

    def _reading_model(self) -> Reranker:
        if self._model is None:
            self._model = self._reader()
        return self._model

    def prepare(self, cand_ids: list[str]) -> None:
        model = self._reading_model()
        todo = [i for i in dict.fromkeys(cand_ids) if i not in self._kvs]
        if todo:
            start = time.perf_counter()
            kvs = self._compress(model, [self._texts_by_id[i] for i in todo])
            self.seconds += time.perf_counter() - start
            self.items += len(todo)
            self._kvs.update(zip(todo, kvs, strict=True))
            self.stored.update((i, kv.positions) for i, kv in zip(todo, kvs, strict=True))

    def score(self, query: str, cand_ids: list[str]) -> list[float]:
        self.prepare(cand_ids)
        return self._reading_model().score(query, [self._kvs[i] for i in cand_ids]).tolist()

    def forget(self, cand_ids: list[str]) -> None:
        for i in cand_ids:
            self._kvs.pop(i, None)
        if self._release is not None:
            self._release([self._texts_by_id[i] for i in cand_ids])

    def system(
        self,
        facts: SystemFacts,
        key: str,
        kv_dims: tuple[int, int, int],
        training_seconds: float | None = None,
        storage: str | None = None,
    ) -> System:
        """The system the runner scores: these methods, and `stored` filled as they compress."""
        return System(
            self.score,
            facts,
            self.prepare,
            key,
            self.stored,
            kv_dims,
            self.forget,
            self._cost,
            training_seconds,
            storage=storage,
        )


def _own_compress(model: Reranker, texts: list[str]) -> list[StoredUnit]:
    return model.as_stored(model.compress(texts))  # what serving reads: through the store's precision


def _key(model: Reranker, what: str = "") -> str:
    """What produces a system's scores: the reading model's fingerprint (weights and every reading
    setting but fusion, which no score depends on) and compute dtype."""
    return f"{what}{model.scores_fingerprint} {str(model.dtype).removeprefix('torch.')}"


def full_scorer(model: Reranker, texts_by_id: Mapping[str, str]) -> Scorer:
    """A full-context model reading every candidate's text (the teacher, or another full model)."""
    return lambda query, cand_ids: model.score_full(query, [texts_by_id[i] for i in cand_ids]).tolist()


def full_system(model: Reranker, texts_by_id: Mapping[str, str], facts: SystemFacts) -> System:
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


def _prefix_sweep(reader: Reranker, budgets: Sequence[int]) -> BudgetSweep:
    """Prefix caching of each of `budgets` positions, read by `reader`'s body and head, in one pass."""
    body = prefix_reader(reader, max(budgets))
    return BudgetSweep(body, [prefix_config(body.gist, b) for b in budgets])


def _gist_systems(
    student: Reranker,
    texts_by_id: Mapping[str, str],
    prefix_ks: Sequence[int],
    label: str = "",
    base: Reranker | None = None,
    shared: BudgetSweep | None = None,
    prefixes: BudgetSweep | None = None,
    trained_s: float | None = None,
    untrained_control: bool = True,
) -> dict[str, System]:
    """Systems of one student checkpoint: its own online path and its controls. A `label` (its run)
    suffixes every name and family; `shared`: the one compression pass the student's k is part of;
    `prefixes`: the one prefix pass of its group (which holds every budget asked here); `trained_s`:
    the wall time of the run that trained it.

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
    if shared is None:
        own = StoredKV(texts_by_id, lambda: student, _own_compress)
    else:  # `student` is the pass's reader of k
        own = StoredKV(
            texts_by_id,
            lambda: student,
            lambda _m, texts: shared.compress(student.gist, texts),
            shared.forget,
            shared.cost,
        )
    facts = SystemFacts(name(with_k=False), t + k)
    systems = {main: own.system(facts, _key(student, "own "), dims, trained_s, student.gist.storage)}
    readers = [(student, "")] + ([(base, " · untouched base")] if base is not None else [])
    for reader, tag in readers:
        # selection and prefix have no gists to leave untrained; untrained gists are their own control
        if untrained_control and student.compressor.learned and not gists_untrained(student):
            untrained = StoredKV(texts_by_id, lambda r=reader: untrained_gists(r), _own_compress)
            systems[name("untrained gists") + tag] = untrained.system(
                SystemFacts(name("untrained gists", with_k=False) + tag, t + k, main),
                _key(reader, "untrained gists of "),
                dims,
                storage=reader.gist.storage,
            )
        # a prefix student's own budget, read by its own body, is the student itself
        own = () if not tag and prefix_config(reader.gist, t + k) == student.gist else (k,)
        budgets = sorted({t + kk for kk in (*prefix_ks, *own)})
        if not budgets:
            continue
        # one line in the plots per body: a gist student's own, a select or prefix group's shared one
        family = f"prefix · {name(with_k=student.compressor.learned)}{tag}"
        if prefixes is None or tag:
            prefixes = _prefix_sweep(reader, budgets)
        for budget in budgets:
            # scored by this reader's body and head: two students' prefix controls of one budget differ,
            # unless they read through one body and head — a select group gets one control per budget
            # (`student_systems`); any others with one key are scored once (`score_queries`)
            at = prefix_config(prefixes.body.gist, budget)
            control = StoredKV(
                texts_by_id,
                lambda at=at, pp=prefixes: pp.reader(at),
                lambda _m, texts, at=at, pp=prefixes: pp.compress(at, texts),
                prefixes.forget,
                prefixes.cost,
            )
            systems[f"prefix {budget} · {main}{tag}"] = control.system(
                SystemFacts(family, budget, main),
                _key(prefixes.reader(at), "prefix "),
                dims,
                storage=at.storage,
            )
    return systems


def student_systems(
    paths: Sequence[str | Path],
    texts_by_id: Mapping[str, str],
    prefix_ks: Sequence[int],
    control_base: bool = False,
    device: str | None = None,
    untrained_control: bool = True,
) -> dict[str, System]:
    """Every student's systems (`_gist_systems`; `untrained_control`: with its untrained gists).
    Students of one gist layout are told apart by their run folder; with `control_base` each base LM is
    loaded once (per dtype), however many students.
    Select or prefix students that differ only in k (same body and settings) share one body and one
    compression pass (`BudgetSweep`), and so do those that differ in anything else one pass serves (a
    selection student's hybrid prefix t and per-head rule)."""
    students = [Reranker.from_pretrained(path, device=device) for path in paths]
    # the name `_gist_systems` gives each (its compressor, t, k): only students that would share one need
    # their run folder in it, so a cached system keeps its name when another compressor's student joins
    layouts = [_layout_name(s.gist, s.gist.compressor) for s in students]
    labels = [_run_label(p) if layouts.count(n) > 1 else "" for p, n in zip(paths, layouts, strict=True)]
    if len(set(zip(layouts, labels, strict=True))) < len(students):
        raise ValueError(f"students {list(map(str, paths))} repeat a layout and a run folder name")
    groups: dict[str, list[Reranker]] = {}
    group_of: list[str | None] = []
    for student in students:
        group = None
        if not student.compressor.learned:  # one body and settings, any layout its pass serves: one sweep
            group = _key(sweep_body(student))
            groups.setdefault(group, []).append(student)
        group_of.append(group)
    passes = {g: BudgetSweep(members[0], [m.gist for m in members]) for g, members in groups.items()}
    shared_of = [passes[g] if g else None for g in group_of]
    # a grouped student is read through its pass's body: the other copies of that body can go
    students = [s if p is None else p.reader(s.gist) for s, p in zip(students, shared_of, strict=True)]
    # one prefix pass for a group, one prefix control per stored budget t + k (its reader is the group's
    # body, so a second student's control of one budget has the first's key and is scored once): each
    # member controls its own budget; the first member also the budgets t + k' of `prefix_ks` that no
    # member stores
    prefix_passes = {}
    for g, members in groups.items():
        first = members[0].gist
        totals = {m.gist.keep_item_prefix + m.gist.num_gist for m in members}
        budgets = sorted(totals | {first.keep_item_prefix + k for k in prefix_ks})
        prefix_passes[g] = (_prefix_sweep(passes[g].body, budgets), totals, first)
    del groups
    bases: dict[tuple[str, str], Reranker] = {}
    systems: dict[str, System] = {}
    for student, path, label, group in zip(students, paths, labels, group_of, strict=True):
        controls, prefixes = prefix_ks, None
        if group is not None:
            prefixes, totals, first = prefix_passes[group]
            t = student.gist.keep_item_prefix
            controls = [k for k in prefix_ks if t + k not in totals] if student.gist == first else []
        base = None
        if control_base:
            key = (student.base_ref, student.gist.dtype)
            if key not in bases:
                bases[key] = Reranker.from_pretrained(student.base_ref, student.gist, device=device)
            base = bases[key].with_gist_config(student.gist)  # untouched: its initial gists and head
        shared = passes[group] if group is not None else None
        trained_s = training_seconds(path)
        own = _gist_systems(
            student, texts_by_id, controls, label, base, shared, prefixes, trained_s, untrained_control
        )
        main = next(iter(own))  # the student's own online path comes first
        systems |= own | {main: replace(own[main], served_as=str(path))}
    return systems


def full_context_systems(
    paths: Sequence[str | Path], texts_by_id: Mapping[str, str], device: str | None = None
) -> dict[str, System]:
    """Other full-context models (e.g. a cheaper shadow candidate), each reading every item in full."""
    return {
        f"full context · {path}": full_system(
            Reranker.from_pretrained(path, device=device), texts_by_id, SystemFacts("full context", None)
        )
        for path in paths
    }
