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
    bm25                lexical baseline on the rendered item text
    no item             a constant score: what the query alone can do (nothing)
    full context · M    another full-context model M (e.g. a cheaper shadow candidate: a LoRA teacher)
    teacher             the reference itself (its NDCG is the ceiling)
Students that share a layout (t, k) carry their run folder's name as well: `gist t=32 k=8 · packed`.
Every metric is sliced by item-length quartile (length of the query's best-labelled item, in tokens)
and by hard-negative queries; each student is compared with each of its controls query by query
(paired differences). Output: results.json, report.md, one PNG per metric; `merge_results` joins
evaluations of different students on the same queries into one.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from tqdm.auto import tqdm

from reranker.core.config import GistConfig
from reranker.core.model import GistReranker
from reranker.evaluation.ranking_metrics import (
    accuracy_at_1,
    bootstrap_ci,
    length_quartiles,
    ndcg_at_k,
    recall_at_k_vs_reference,
)
from reranker.training.relevance_data import RelevanceSet

RECALL_KS = (1, 5, 10)
METRICS = ("recall@1", "recall@5", "recall@10", "ndcg@10", "acc@1")
_WORD = re.compile(r"[a-z0-9]+(?:\.[0-9]+)?")


def bm25_scores(query: str, docs: Sequence[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Okapi BM25 of `query` against `docs`, IDF over those docs (the candidate list)."""
    tokenized = [_WORD.findall(d.lower()) for d in docs]
    avg_len = sum(map(len, tokenized)) / len(tokenized) or 1.0
    df = Counter(term for doc in tokenized for term in set(doc))
    n = len(docs)
    scores = []
    for doc in tokenized:
        tf = Counter(doc)
        score = 0.0
        for term in set(_WORD.findall(query.lower())):
            if tf[term]:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * tf[term] * (k1 + 1) / (tf[term] + k1 * (1 - b + b * len(doc) / avg_len))
        scores.append(score)
    return scores


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


def _gist_systems(
    student: GistReranker,
    texts_by_id: dict[str, str],
    prefix_ks: Sequence[int],
    label: str = "",
    base: GistReranker | None = None,
) -> dict[str, tuple[Callable, dict]]:
    """Scorers of one student checkpoint, each with its plot facts (family, stored positions per item,
    and for a control the student it controls); item K/V compressed once per item and system. A
    `label` (its run) suffixes every name and family.

    The untrained-gists control is the student's body and head with its initial gists (the
    fingerprint rightly keeps K/V of one set of gists away from a model holding the other). The prefix
    controls cache the item's first t + k' tokens for each k' in `prefix_ks` and the student's k. With
    `base` (the untouched base LM under the student's gist config) both controls are also read by it:
    the fair controls of a student whose score rule needs no trained parameter (query likelihood),
    since the student's own body has learned to read gists rather than raw tokens."""
    suffix = f" · {label}" if label else ""

    def name(family: str = "gist", with_k: bool = True) -> str:
        return _layout_name(student.gist, family, with_k) + suffix

    ids = list(texts_by_id)
    texts = [texts_by_id[i] for i in ids]
    t, k = student.gist.keep_item_prefix, student.gist.num_gist

    def scorer(model: GistReranker, kvs: list) -> Callable:
        by_id = dict(zip(ids, kvs, strict=True))
        return lambda query, cand_ids: model.score(query, [by_id[i] for i in cand_ids]).tolist()

    main = name()
    systems = {
        main: (
            scorer(student, student.compress(texts, progress=True)),
            {"family": name(with_k=False), "positions": t + k},
        )
    }
    readers = [(student, "")] + ([(base, " · untouched base")] if base is not None else [])
    for reader, tag in readers:
        untrained = reader.with_gist_config(reader.gist)
        systems[name("untrained gists") + tag] = (
            scorer(untrained, untrained.compress(texts)),
            {"family": name("untrained gists", with_k=False) + tag, "positions": t + k, "control_of": main},
        )
        for budget in sorted({t + kk for kk in (*prefix_ks, k)}):
            plain_cfg = GistConfig(**(reader.gist.model_dump() | {"num_gist": budget, "keep_item_prefix": 0}))
            plain = reader.with_gist_config(plain_cfg)
            # scored by this reader's body and head: two students' prefix controls of one budget differ
            systems[f"prefix {budget} · {main}{tag}"] = (
                scorer(plain, plain.compress_prefix(texts)),
                {"family": f"prefix · {main}{tag}", "positions": budget, "control_of": main},
            )
    return systems


def _full_scorer(model: GistReranker, texts_by_id: dict[str, str]) -> Callable:
    return lambda query, cand_ids: model.score_full(query, [texts_by_id[i] for i in cand_ids]).tolist()


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
) -> dict:
    """Score `data`'s `split` with the teacher, every student's systems and every other full-context
    model in `full_paths`; write results.json, report.md and plots to `out`. `control_base`: read each
    student's controls with its untouched base LM as well (see `_gist_systems`)."""
    test = data.split(split)
    if not test.queries:
        raise ValueError(f"split {split!r} has no queries")
    teacher = GistReranker.from_pretrained(teacher_path, device=device)
    used = {item_id for q in test.queries for item_id, _ in test.candidates(q.query_id)}
    texts_by_id = {item_id: data.items[item_id].text for item_id in sorted(used)}

    systems: dict[str, tuple[Callable, dict]] = {
        "bm25": (
            lambda query, cand_ids: bm25_scores(query, [texts_by_id[i] for i in cand_ids]),
            {"family": "bm25", "positions": None},
        ),
        "no item": (lambda _query, cand_ids: [0.0] * len(cand_ids), {"family": "no item", "positions": 0}),
    }
    students = [GistReranker.from_pretrained(path, device=device) for path in student_paths]
    layouts = [_layout_name(s.gist) for s in students]
    labels = [
        _run_label(p) if layouts.count(n) > 1 else "" for p, n in zip(student_paths, layouts, strict=True)
    ]
    if len(set(zip(layouts, labels, strict=True))) < len(students):
        raise ValueError(f"students {list(map(str, student_paths))} repeat a layout and a run folder name")
    bases: dict[tuple[str, str], GistReranker] = {}  # one body per base and dtype, however many students
    for student, label in zip(students, labels, strict=True):
        base = None
        if control_base:
            key = (student.base_ref, student.gist.dtype)
            if key not in bases:
                bases[key] = GistReranker.from_pretrained(student.base_ref, student.gist, device=device)
            base = bases[key].with_gist_config(student.gist)  # untouched: its initial gists and head
        systems |= _gist_systems(student, texts_by_id, prefix_ks, label, base)
    for path in full_paths:
        systems[f"full context · {path}"] = (
            _full_scorer(GistReranker.from_pretrained(path, device=device), texts_by_id),
            {"family": "full context", "positions": None},
        )

    def target_length(query_id: str) -> int:
        cands = test.candidates(query_id)
        best = max(cands, key=lambda c: c[1])[0]
        return len(teacher.tokenizer(texts_by_id[best], add_special_tokens=False)["input_ids"])

    teacher_scores = _full_scorer(teacher, texts_by_id)
    lengths = [target_length(q.query_id) for q in test.queries]
    quartiles = length_quartiles(lengths)
    records = []
    for query, quartile in tqdm(list(zip(test.queries, quartiles, strict=True)), desc="eval", unit="query"):
        cands = test.candidates(query.query_id)
        cand_ids = [c[0] for c in cands]
        labels = [c[1] for c in cands]
        reference = teacher_scores(query.text, cand_ids)
        slices = {"query_id": query.query_id, "hard": query.hard, "length_quartile": quartile}
        records.append({"system": "teacher", **slices, **query_metrics(reference, reference, labels)})
        for name, (score, _) in systems.items():
            records.append(
                {"system": name, **slices, **query_metrics(score(query.text, cand_ids), reference, labels)}
            )

    summary = summarize(records)
    result = {
        "split": split,
        "teacher": str(teacher_path),
        "students": [str(p) for p in student_paths],
        "full_models": [str(p) for p in full_paths],
        "queries": len(test.queries),
        "systems": {"teacher": {"family": "teacher", "positions": None}}
        | {name: facts for name, (_, facts) in systems.items()},
        "length_quartile_cuts_tokens": _cuts(lengths, quartiles),
        "summary": summary,
        "records": records,
    }
    write_outputs(result, out)
    return result


def merge_results(results: Sequence[dict]) -> dict:
    """One evaluation out of several of the same teacher, split and queries (e.g. one run per trained
    k, done at different times), so the k sweep is one table and one plot. A system in more than one
    run (teacher, BM25, no item, a student evaluated twice) must have scored identically in each."""
    if not results:
        raise ValueError("nothing to merge")
    first = results[0]
    for key in ("split", "teacher", "queries", "length_quartile_cuts_tokens"):
        for other in results[1:]:
            if other[key] != first[key]:
                raise ValueError(f"cannot merge: {key} differs ({first[key]!r} vs {other[key]!r})")
    systems: dict[str, dict] = {}
    records: dict[str, list[dict]] = {}
    for result in results:
        for name, facts in result["systems"].items():
            mine = [r for r in result["records"] if r["system"] == name]
            if name in systems and (systems[name] != facts or records[name] != mine):
                raise ValueError(f"cannot merge: system {name!r} differs between the evaluations")
            systems[name], records[name] = facts, mine
    merged = [r for rows in records.values() for r in rows]
    return first | {
        "students": list(dict.fromkeys(s for result in results for s in result["students"])),
        "full_models": list(dict.fromkeys(m for result in results for m in result.get("full_models", []))),
        "systems": systems,
        "summary": summarize(merged),
        "records": merged,
    }


def write_outputs(result: dict, out: Path) -> None:
    """results.json, report.md and the plots of one evaluation (re-runnable from a saved results.json)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "report.md").write_text(markdown_report(result))
    plot(result["summary"], result["systems"], out)


def summarize(records: Sequence[dict]) -> dict:
    """Mean of every metric per system: overall (with 95% bootstrap intervals of recall@5 and
    NDCG@10 over queries), per length quartile, hard vs other queries."""

    def mean(rows: list[dict]) -> dict[str, float]:
        return {m: sum(r[m] for r in rows) / len(rows) for m in METRICS} | {"n": len(rows)}

    out: dict = {}
    for system in dict.fromkeys(r["system"] for r in records):
        rows = [r for r in records if r["system"] == system]
        out[system] = {
            "all": mean(rows),
            "ci95": {m: list(bootstrap_ci([r[m] for r in rows])) for m in ("recall@5", "ndcg@10")},
            "by_length_quartile": {
                str(q): mean([r for r in rows if r["length_quartile"] == q])
                for q in sorted({r["length_quartile"] for r in rows})
            },
            "hard": mean(hard) if (hard := [r for r in rows if r["hard"]]) else None,
            "not_hard": mean(other) if (other := [r for r in rows if not r["hard"]]) else None,
        }
    return out


def paired_differences(result: dict) -> list[dict]:
    """Each student minus each of its controls, query by query (the pairing cancels the spread between
    easy and hard queries that the per-system intervals carry): mean difference of NDCG@10 and
    recall@5, its 95% bootstrap interval, and how many queries went better / worse."""
    by_key = {(r["system"], r["query_id"]): r for r in result["records"]}
    queries = list(dict.fromkeys(r["query_id"] for r in result["records"]))
    rows = []
    for control, facts in result["systems"].items():
        if (student := facts.get("control_of")) is None:
            continue
        row: dict = {"student": student, "control": control}
        for metric in ("ndcg@10", "recall@5"):
            diffs = [by_key[student, q][metric] - by_key[control, q][metric] for q in queries]
            row[metric] = {
                "mean": sum(diffs) / len(diffs),
                "ci95": list(bootstrap_ci(diffs)),
                "better": sum(d > 0 for d in diffs),
                "worse": sum(d < 0 for d in diffs),
            }
        rows.append(row)
    return rows


def _cuts(lengths: Sequence[int], quartiles: Sequence[int]) -> dict[str, list[int]]:
    return {
        str(q): [min(ls), max(ls)]
        for q in sorted(set(quartiles))
        if (ls := [n for n, qq in zip(lengths, quartiles, strict=True) if qq == q])
    }


def markdown_report(result: dict) -> str:
    summary = result["summary"]
    lines = [
        f"## Evaluation on split `{result['split']}` ({result['queries']} queries)",
        "",
        f"Reference ranking: teacher `{result['teacher']}`. Recall@K is against the teacher's top-K.",
        "",
        "| system | " + " | ".join(METRICS) + " | hard-query recall@5 | hard-query ndcg@10 |",
        "|---|" + "---|" * (len(METRICS) + 2),
    ]
    for system, s in summary.items():
        hard = s["hard"]
        tail = [f"{hard['recall@5']:.3f}", f"{hard['ndcg@10']:.3f}"] if hard else ["–", "–"]
        lines.append(
            f"| {system} | "
            + " | ".join(f"{s['all'][m]:.3f}" for m in METRICS)
            + " | "
            + " | ".join(tail)
            + " |"
        )
    lines += ["", "Mean with 95% bootstrap interval over queries:", ""]
    lines += ["| system | recall@5 | ndcg@10 |", "|---|---|---|"]
    for system, s in summary.items():
        ci = s["ci95"]
        cells = [f"{s['all'][m]:.3f} [{ci[m][0]:.3f}, {ci[m][1]:.3f}]" for m in ("recall@5", "ndcg@10")]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    if paired := paired_differences(result):
        title = (
            "Each student minus its controls, paired over queries (95% bootstrap interval; better / worse)"
        )
        lines += ["", title + ":", "", "| student | control | Δ ndcg@10 | Δ recall@5 |", "|---|---|---|---|"]
        for row in paired:
            cells = [
                f"{d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] ({d['better']} / {d['worse']})"
                for d in (row["ndcg@10"], row["recall@5"])
            ]
            lines.append(f"| {row['student']} | {row['control']} | " + " | ".join(cells) + " |")
    cuts = result["length_quartile_cuts_tokens"]
    lines += ["", "Recall@5 by item-length quartile (tokens of the query's best item):", ""]
    quarts = sorted(cuts)
    lines.append("| system | " + " | ".join(f"Q{q} ({cuts[q][0]}–{cuts[q][1]})" for q in quarts) + " |")
    lines.append("|---|" + "---|" * len(quarts))
    for system, s in summary.items():
        row = [
            f"{s['by_length_quartile'][q]['recall@5']:.3f}" if q in s["by_length_quartile"] else "–"
            for q in quarts
        ]
        lines.append(f"| {system} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


_LEVELS = {"bm25": {"color": "gray", "ls": "--"}, "no item": {"color": "gray", "ls": ":"}}


def plot(summary: dict, systems: dict[str, dict], out: Path) -> list[Path]:
    """One PNG per metric: metric vs stored K/V positions per item (k, or t + k for a hybrid), one panel
    for all queries and one per item-length quartile, one colour per system family — trained gists vs
    prefix caching (scored by the same student) vs untrained gists — with BM25, the no-item floor and
    other full-context models as horizontal lines. No students, no plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = sorted({f["family"] for f in systems.values() if f["positions"]})
    if not families:  # only full-context models and baselines: nothing varies with k
        return []
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    quartiles = sorted({q for s in summary.values() for q in s["by_length_quartile"]})
    panels = [("all queries", lambda s: s["all"])] + [
        (f"item-length quartile Q{q}", lambda s, q=q: s["by_length_quartile"].get(q)) for q in quartiles
    ]
    paths = []
    for metric in ("recall@5", "recall@10", "ndcg@10"):
        fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4), sharey=True, squeeze=False)
        for ax, (title, part) in zip(axes[0], panels, strict=True):
            for index, family in enumerate(families):
                runs = sorted(
                    (f["positions"], part(summary[name])[metric])
                    for name, f in systems.items()
                    if f["family"] == family and part(summary[name])
                )
                xs, ys = zip(*runs, strict=True)
                ax.plot(xs, ys, marker="o", color=colors[index % len(colors)], label=family)
            for name, facts in systems.items():
                if facts["positions"] or name == "teacher" or not part(summary[name]):
                    continue
                style = _LEVELS.get(name, {"color": "black", "ls": "-."})
                ax.axhline(part(summary[name])[metric], **style, label=name)
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
