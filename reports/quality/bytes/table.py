"""The tables and the plot of `evaluate.py`'s scores: per list kind, each (positions, storage) setting's
KiB per item, nDCG@10 and overlap@10 with the whole-article reader (95% bootstrap intervals over
queries), paired differences with today's default (prefix 64, bfloat16), online ms per candidate
(decode included) and compress ms per item; the storage default by the issue's rule; for a set whose
queries state fields (the synthetic catalog), the same by slice of queries naming an exact field.

    .venv/bin/python reports/quality/bytes/table.py runs/bytes/ap89.json --plot reports/quality/bytes/ap89.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from reranker.evaluation.results import Difference
from reranker.ranking_metrics import bootstrap_ci, ndcg_at_k, recall_at_k_vs_reference

DEFAULT = "prefix 64 bfloat16"  # what the default stores at the documented (bf16) size
READER = "whole article"
EXACT = ("part_number", "storage", "model")  # query fields that low precision could blur (the seed's fear)


def per_query(lists: dict[str, Any], system: str) -> dict[str, tuple[float, float]]:
    """query id → (nDCG@10, overlap@10 with the whole-article reader)."""
    out = {}
    for q, item in lists.items():
        scores, ids = item["scores"][system], item["ids"]
        ndcg = ndcg_at_k(scores, item["labels"], 10, ids)
        overlap = recall_at_k_vs_reference(scores, item["scores"][READER], 10, ids)
        out[q] = (ndcg, overlap)
    return out


def mean_ci(values: list[float]) -> str:
    lo, hi = bootstrap_ci(values)
    return f"{sum(values) / len(values):.3f} [{lo:.3f}, {hi:.3f}]"


def table(lists: dict[str, Any], kib: dict[str, float], timing: dict[str, Any]) -> tuple[list[str], dict]:
    systems = list(next(iter(lists.values()))["scores"])
    by_system = {s: per_query(lists, s) for s in systems}
    queries = list(lists)
    base = by_system[DEFAULT]
    rows = [
        "| system | KiB/item | nDCG@10 [95% CI] | overlap@10 vs reader | Δ nDCG@10 vs default | "
        "Δ overlap@10 vs default | online ms/cand | compress ms/item |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary = {}
    for s in systems:
        ndcg = [by_system[s][q][0] for q in queries]
        overlap = [by_system[s][q][1] for q in queries]
        d_ndcg = Difference.of([by_system[s][q][0] - base[q][0] for q in queries])
        d_overlap = Difference.of([by_system[s][q][1] - base[q][1] for q in queries])
        summary[s] = {
            "kib": kib.get(s),
            "ndcg": sum(ndcg) / len(ndcg),
            "overlap": sum(overlap) / len(overlap),
            "d_ndcg": d_ndcg,
        }
        t = timing.get(s, {})
        online, compress = t.get("ms_per_candidate"), t.get("compress_ms_per_item")
        cells = [
            s,
            f"{kib[s]:,.0f}" if s in kib else "–",
            mean_ci(ndcg),
            mean_ci(overlap),
            "–" if s == DEFAULT else str(d_ndcg),
            "–" if s == DEFAULT else str(d_overlap),
            f"{online:.1f}" if online else "–",
            f"{compress:.0f}" if compress else "–",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows, summary


def by_rule(summary: dict[str, Any]) -> str:
    """The storage of the default's compressor (prefix caching) with the fewest bytes whose nDCG@10 is not
    separably below the default's (the paired interval reaches 0 or above) and whose overlap@10 with the
    reader is at least the default's; and the settings of other compressors that meet both with fewer
    bytes (a change of compressor, weighed in the report, not picked by a storage rule)."""
    base = summary[DEFAULT]
    eligible = sorted(
        (
            s
            for s, v in summary.items()
            if v["kib"] is not None and v["d_ndcg"].ci95[1] >= 0 and v["overlap"] >= base["overlap"]
        ),
        key=lambda s: summary[s]["kib"],
    )
    compressor = DEFAULT.split()[0]
    storage = next(s for s in eligible if s.split()[0] == compressor)
    cheaper = summary[storage]["kib"]
    others = [s for s in eligible if s.split()[0] != compressor and summary[s]["kib"] < cheaper]
    also = f"; with fewer bytes and another compressor: {', '.join(others)}" if others else ""
    return f"**{storage}**{also}"


def slices(lists: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Queries naming each exact field, and those naming none."""
    out = {f"names {f}": {q: v for q, v in lists.items() if f in v["fields"]} for f in EXACT}
    out["names none of them"] = {q: v for q, v in lists.items() if not set(EXACT) & set(v["fields"])}
    return {k: v for k, v in out.items() if v}


def plot(sets: dict[str, dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(sets), 2, figsize=(11, 4 * len(sets)), squeeze=False)
    for row, (name, summary) in zip(axes, sets.items(), strict=True):
        for ax, metric, label in ((row[0], "ndcg", "nDCG@10"), (row[1], "overlap", "overlap@10 vs reader")):
            # one line per compressor and storage: "prefix 128 int4" → "prefix int4"
            lines: dict[str, list[tuple[float, float]]] = {}
            for s, v in summary.items():
                if v["kib"] is not None:
                    words = s.split()
                    lines.setdefault(f"{words[0]} {words[-1]}", []).append((v["kib"], v[metric]))
            for line, points in sorted(lines.items()):
                style = "o-" if line.startswith("prefix") else "s--"
                ax.plot(*zip(*sorted(points), strict=True), style, label=line)
            for level, style in ((READER, "k-."), ("bm25", "k--")):
                if level in summary and not (metric == "overlap" and level == READER):
                    ax.axhline(summary[level][metric], ls=style[1:], color=style[0], label=level)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("KiB per item (log scale)")
            ax.set_ylabel(label)
            ax.set_title(f"{name}: {label}")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scores", type=Path, help="evaluate.py's --out")
    parser.add_argument("--plot", type=Path, help="where the quality-vs-bytes plot goes")
    args = parser.parse_args()
    data = json.loads(args.scores.read_text())
    summaries = {}
    for name, lists in data["sets"].items():
        rows, summary = table(lists, data["kib"], data["timing"])
        summaries[name] = summary
        print(f"\n### {name}: {len(lists)} dev queries\n")
        print("\n".join(rows))
        print(f"\nBy the rule: {by_rule(summary)}")
        for slice_name, subset in slices(lists).items():
            if len(subset) < len(lists):
                print(f"\n#### {name}, queries that {slice_name}: {len(subset)}\n")
                print("\n".join(table(subset, data["kib"], data["timing"])[0]))
    if args.plot:
        plot(summaries, args.plot)


if __name__ == "__main__":
    main()
