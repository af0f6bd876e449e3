"""What an evaluation records and writes: per system and query the METRICS (`QueryRecord`), their means
and intervals (`SystemSummary`, `summarize`), each student minus its controls (`paired_differences`;
one system against another across two evaluations: `paired_across`, a table row of them:
`paired_row`), and the whole evaluation as
results.json (`EvalResult`, written by `report.write_outputs`, read back from an eval folder by
`EvalResult.read`);
`merge_results` joins evaluations of different students on the same queries into one. Data and
arithmetic on it, no model: the runner, the report and the plots build on it, and `gistrank eval-merge`
needs nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from reranker.ranking_metrics import GAIN_FORMULA, bootstrap_ci

RECALL_KS = (1, 5, 10)
METRICS = ("recall@1", "recall@5", "recall@10", "ndcg@10", "acc@1")
INTERVAL_METRICS = ("recall@5", "ndcg@10")  # with a 95% bootstrap interval per system
PAIRED_METRICS = ("ndcg@10", "recall@5")  # compared student minus control, query by query
Means = dict[str, float]  # metric → mean over queries, and "n": how many queries


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
    costs: dict[str, dict[str, float]] = field(default_factory=dict)  # system → its costs (`runner._costs`)
    interpolation: dict[str, dict[str, Any]] = field(default_factory=dict)  # "<system> + bm25" → its fit
    truncation: dict[str, int] | None = None  # the teacher's item cap, items read, items it truncated
    gain: str = "linear"  # nDCG's gain: "linear" (the label, trec_eval's) or "exponential" (2^label − 1)

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
            "gain": self.gain,
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
            gain=data.get("gain", "linear"),
        )

    @classmethod
    def read(cls, folder: Path) -> EvalResult:
        """The evaluation an eval folder holds (its results.json)."""
        return cls.from_json(json.loads((folder / "results.json").read_text()))


@dataclass(frozen=True)
class Difference:
    """A student minus a control on one metric, query by query."""

    mean: float
    ci95: list[float]  # 95% bootstrap interval of the mean
    better: int  # queries where the student scored higher
    worse: int

    @classmethod
    def of(cls, diffs: Sequence[float]) -> Difference:
        """From the per-query differences (student − control)."""
        return cls(
            mean=sum(diffs) / len(diffs),
            ci95=list(bootstrap_ci(diffs)),
            better=sum(d > 0 for d in diffs),
            worse=sum(d < 0 for d in diffs),
        )

    def __str__(self) -> str:
        return f"{self.mean:+.3f} [{self.ci95[0]:+.3f}, {self.ci95[1]:+.3f}] ({self.better} / {self.worse})"


@dataclass(frozen=True)
class PairedDifference:
    student: str
    control: str
    by_metric: dict[str, Difference]  # PAIRED_METRICS


def merge_results(results: Sequence[EvalResult]) -> EvalResult:
    """One evaluation out of several of the same teacher, split and queries (e.g. one run per trained
    k, done at different times), so the k sweep is one table and one plot. A system in more than one
    run (teacher, BM25, no item, a student evaluated twice) must have scored identically in each."""
    if not results:
        raise ValueError("nothing to merge")
    first = results[0]
    for key in ("split", "teacher", "queries", "length_quartile_cuts_tokens", "gain"):
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
            by_metric[metric] = Difference.of(diffs)
        rows.append(PairedDifference(student, control, by_metric))
    return rows


def paired_across(
    first: EvalResult, student: str, second: EvalResult, control: str, metric: str
) -> Difference:
    """`student` in one evaluation minus `control` in another (or the same), query by query — two runs
    of the same queries, e.g. a new checkpoint against an earlier one's results.json."""
    a = {r.query_id: r for r in first.records if r.system == student}
    b = {r.query_id: r for r in second.records if r.system == control}
    if not a or a.keys() != b.keys():
        raise ValueError(f"{student!r} and {control!r} were not evaluated on the same queries")
    return Difference.of([a[q].metrics[metric] - b[q].metrics[metric] for q in sorted(a)])


def paired_row(
    label: str,
    first: EvalResult,
    student: str,
    second: EvalResult,
    control: str,
    metrics: Sequence[str] = ("ndcg@10", "recall@5", "recall@10"),
) -> str:
    """One Markdown table row: `label`, then `paired_across` for each of `metrics` (the reports'
    `paired.py` scripts print their tables with it)."""
    cells = [str(paired_across(first, student, second, control, m)) for m in metrics]
    return f"| {label} | " + " | ".join(cells) + " |"


def metric_header(metric: str, gain: str = "linear") -> str:
    """A metric's column header: nDCG columns carry their gain, so no table is read on the wrong scale, and
    the overlap with the reference is not read as the IR recall of relevant items."""
    if metric.startswith("ndcg"):
        return f"{metric} (gain = {GAIN_FORMULA[gain]})"
    return metric.replace("recall@", "overlap@")
