"""The table of reports/quality/fusion.md: each shipped model's BM25 fusion on dev, from evaluations
already run — the AP89 reader report's per-query nDCG@10 for the default (`ap89-reader/*.json`) and
`gistrank eval --fit-fusion` of the synthetic-trained students (`fusion-*/`). Reads JSON
only (no model, no data):

    .venv/bin/python reports/quality/fusion_table.py
"""

from __future__ import annotations

import json
from pathlib import Path

from reranker.evaluation.results import Difference, EvalResult
from reranker.ranking_metrics import bootstrap_ci

HERE = Path(__file__).parent
STUDENT_EVALS = {
    "fusion-ap89-bm25-20": "AP89 dev, BM25's top 20",
    "fusion-ap89-judged-20": "AP89 dev, judged:20",
    "fusion-synthetic-dev": "synthetic catalog, dev",
}
LISTS = {
    "bm25-20": "AP89 dev, BM25's top 20 (47 topics)",
    "judged-20": "AP89 dev, judged:20 (47 topics)",
    "synthetic-dev": "synthetic catalog, dev (80 queries)",
}


def mean_ci(values: list[float]) -> str:
    low, high = bootstrap_ci(values)
    return f"{sum(values) / len(values):.3f} [{low:.3f}, {high:.3f}]"


def row(lists: str, weight: float, ndcg: dict[str, dict[str, float]], system: str, fused: str) -> str:
    queries = list(ndcg["bm25"])
    values = {name: [ndcg[name][q] for q in queries] for name in ("bm25", system, fused)}
    over_bm25 = Difference.of([f - b for f, b in zip(values[fused], values["bm25"], strict=True)])
    over_own = Difference.of([f - s for f, s in zip(values[fused], values[system], strict=True)])
    cells = [lists, f"{weight:g}", *(mean_ci(values[name]) for name in ("bm25", system, fused))]
    return "| " + " | ".join([*cells, str(over_bm25), str(over_own)]) + " |"


def main() -> None:
    columns = [
        "lists",
        "W fitted",
        "BM25",
        "reranker alone",
        "fused (held-out W)",
        "fused − BM25",
        "fused − alone",
    ]
    header = "| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|"
    print("gistrank-base-ql-prefix64 (the former default; serves linear:0.4)\n")
    print(header)
    for name, lists in LISTS.items():
        saved = json.loads((HERE / "ap89-reader" / f"{name}.json").read_text())
        print(row(lists, saved["fusion_weights"]["default"], saved["ndcg@10"], "default", "default + bm25"))
    print("\nthe shipped students (gistrank eval --fit-fusion)\n")
    print(header.replace("lists", "model · lists", 1))
    for folder, lists in STUDENT_EVALS.items():
        result = EvalResult.read(HERE / folder)
        by_query: dict[str, dict[str, float]] = {}
        for record in result.records:
            by_query.setdefault(record.system, {})[record.query_id] = record.metrics["ndcg@10"]
        for fused, fit in result.interpolation.items():
            if "model" in fit:
                name = f"{fit['model']} · {lists} ({result.queries} queries)"
                print(row(name, fit["weight"], by_query, fused.removesuffix(" + bm25"), fused))


if __name__ == "__main__":
    main()
