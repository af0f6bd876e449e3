"""`gistrank eval`: the fixed evaluation protocol of DESIGN §5.

Reference = the full-context teacher's ranking of the same candidates. For every test query and every
system: recall@K (K = 1, 5, 10) of the system's top-K against the teacher's top-K, NDCG@10 and
accuracy@1 against the labels. Systems, at matched storage and online cost:
    gist k=…            the trained student's online path: score(query, compress(items))
    untrained gists k=… the same student with its gist embeddings reset to their initial values
    prefix k=…          K/V of the item's first k tokens in place of the gists (prefix caching cut
                        to the same budget), scored by the same student
    bm25                lexical baseline on the rendered item text
    no item             a constant score: what the query alone can do (nothing)
    teacher             the reference itself (its NDCG is the ceiling)
Every metric is sliced by item-length quartile (length of the query's best-labelled item, in tokens)
and by hard-negative queries. Output: results.json, report.md, one PNG per metric.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm

from reranker.metrics import accuracy_at_1, length_quartiles, ndcg_at_k, recall_at_k_vs_reference
from reranker.model import GistReranker
from reranker.relevance_data import RelevanceSet

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


def _gist_systems(path: str | Path, texts_by_id: dict[str, str], device: str | None) -> dict[str, Callable]:
    """Scorers of one student checkpoint (k fixed by its config); item K/V compressed once per item.

    The untrained-gists baseline is a second copy of the student with its gist embeddings reset: the
    fingerprint (rightly) makes K/V from one set of gists unusable by a model holding the other."""
    student = GistReranker.from_pretrained(path, device=device)
    untrained = GistReranker.from_pretrained(path, device=device)
    with torch.no_grad():
        untrained.gist_embeddings.copy_(GistReranker.initial_gist_embeddings(untrained.lm, untrained.gist))
    ids = list(texts_by_id)
    texts = [texts_by_id[i] for i in ids]
    k = student.gist.num_gist

    def scorer(model: GistReranker, kvs: list) -> Callable:
        by_id = dict(zip(ids, kvs, strict=True))
        return lambda query, cand_ids: model.score(query, [by_id[i] for i in cand_ids]).tolist()

    return {
        f"gist k={k}": scorer(student, student.compress(texts, progress=True)),
        f"untrained gists k={k}": scorer(untrained, untrained.compress(texts)),
        f"prefix k={k}": scorer(student, student.compress_prefix(texts)),
    }


def evaluate(
    data: RelevanceSet,
    teacher_path: str | Path,
    student_paths: Sequence[str | Path],
    out: Path,
    split: str = "test",
    device: str | None = None,
) -> dict:
    test = data.split(split)
    if not test.queries:
        raise ValueError(f"split {split!r} has no queries")
    teacher = GistReranker.from_pretrained(teacher_path, device=device)
    used = {item_id for q in test.queries for item_id, _ in test.candidates(q.query_id)}
    texts_by_id = {item_id: data.items[item_id].text for item_id in sorted(used)}

    systems: dict[str, Callable] = {
        "bm25": lambda query, cand_ids: bm25_scores(query, [texts_by_id[i] for i in cand_ids]),
        "no item": lambda _query, cand_ids: [0.0] * len(cand_ids),
    }
    for path in student_paths:
        systems |= _gist_systems(path, texts_by_id, device)

    def target_length(query_id: str) -> int:
        cands = test.candidates(query_id)
        best = max(cands, key=lambda c: c[1])[0]
        return len(teacher.tokenizer(texts_by_id[best], add_special_tokens=False)["input_ids"])

    lengths = [target_length(q.query_id) for q in test.queries]
    quartiles = length_quartiles(lengths)
    records = []
    for query, quartile in tqdm(list(zip(test.queries, quartiles, strict=True)), desc="eval", unit="query"):
        cands = test.candidates(query.query_id)
        cand_ids = [c[0] for c in cands]
        labels = [c[1] for c in cands]
        reference = teacher.score_full(query.text, [texts_by_id[i] for i in cand_ids]).tolist()
        slices = {"query_id": query.query_id, "hard": query.hard, "length_quartile": quartile}
        records.append({"system": "teacher", **slices, **query_metrics(reference, reference, labels)})
        for name, score in systems.items():
            records.append(
                {"system": name, **slices, **query_metrics(score(query.text, cand_ids), reference, labels)}
            )

    summary = summarize(records)
    result = {
        "split": split,
        "teacher": str(teacher_path),
        "students": [str(p) for p in student_paths],
        "queries": len(test.queries),
        "length_quartile_cuts_tokens": _cuts(lengths, quartiles),
        "summary": summary,
        "records": records,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "report.md").write_text(markdown_report(result))
    plot(summary, out)
    return result


def summarize(records: Sequence[dict]) -> dict:
    """Mean of every metric per system: overall, per length quartile, hard vs other queries."""

    def mean(rows: list[dict]) -> dict[str, float]:
        return {m: sum(r[m] for r in rows) / len(rows) for m in METRICS} | {"n": len(rows)}

    out: dict = {}
    for system in dict.fromkeys(r["system"] for r in records):
        rows = [r for r in records if r["system"] == system]
        out[system] = {
            "all": mean(rows),
            "by_length_quartile": {
                str(q): mean([r for r in rows if r["length_quartile"] == q])
                for q in sorted({r["length_quartile"] for r in rows})
            },
            "hard": mean(hard) if (hard := [r for r in rows if r["hard"]]) else None,
            "not_hard": mean(other) if (other := [r for r in rows if not r["hard"]]) else None,
        }
    return out


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


def plot(summary: dict, out: Path) -> list[Path]:
    """One PNG per metric: metric vs k per length quartile, gist vs prefix vs untrained gists."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    families = ("gist", "prefix", "untrained gists")
    for metric in ("recall@5", "recall@10", "ndcg@10"):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for family, style in zip(families, ("-", "--", ":"), strict=True):
            runs = sorted(
                (int(name.rsplit("=", 1)[1]), s)
                for name, s in summary.items()
                if name.startswith(f"{family} k=")
            )
            if not runs:
                continue
            for q in sorted(runs[0][1]["by_length_quartile"]):
                ks = [k for k, _ in runs]
                ys = [s["by_length_quartile"][q][metric] for _, s in runs]
                ax.plot(ks, ys, style, marker="o", label=f"{family} Q{q}")
        ax.set_xlabel("k (gist tokens / prefix tokens)")
        ax.set_ylabel(metric)
        ax.set_title(f"{metric} vs k per item-length quartile")
        ax.legend(fontsize=7, ncol=3)
        ax.grid(alpha=0.3)
        path = out / f"{metric.replace('@', '_at_')}_vs_k.png"
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths
