"""What an evaluation writes to its folder (`write_outputs`): results.json, report.md (`markdown_report`:
the metrics table, its notes — BM25, interpolation, truncation —, costs, intervals, paired differences,
recall by length quartile, failed systems) and the plots (`plots.py`). Re-runnable from a saved
results.json (`gistrank eval-merge`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from reranker.evaluation.plots import plot, plot_vs_bytes
from reranker.evaluation.results import (
    INTERVAL_METRICS,
    METRICS,
    PAIRED_METRICS,
    EvalResult,
    metric_header,
    paired_differences,
)
from reranker.ranking_metrics import GAIN_FORMULA


def gain_note(gain: str) -> str:
    conventions = "trec_eval's conventions" if gain == "linear" else "trec_eval's, but for the gain"
    return (
        f"nDCG gain = {GAIN_FORMULA[gain]}, discount 1/log2(rank + 1), ideal from the list's labels, ties "
        f"by item id descending ({conventions}); overlap@K = the share of the teacher's top K in the "
        "system's top K (results.json: recall@K)"
    )


def write_outputs(result: EvalResult, out: Path) -> None:
    """results.json, report.md and the plots of one evaluation (re-runnable from a saved results.json)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result.to_json(), indent=2) + "\n")
    (out / "report.md").write_text(markdown_report(result))
    plot(result.summary, result.systems, out)
    plot_vs_bytes(result, out)


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
    """Stored positions and bytes per item, offline compression ms per item, online ms per candidate
    (the query's candidates in one batch on this machine), training wall time."""
    rows = [(name, c) for name, c in result.costs.items() if name in result.summary]
    if not rows:
        return []

    def cell(costs: Mapping[str, float], key: str, scale: float = 1.0, fmt: str = "{:.1f}") -> str:
        return fmt.format(costs[key] / scale) if key in costs else "–"

    lines = [
        "",
        "Cost per item and per candidate (K/V positions and payload bytes: means over the items stored; "
        "compress ms: offline, per item, a pass shared by several budgets counted for each; ms/candidate: "
        "online scoring, one query's candidates per batch; this machine; training: the wall time of the "
        "student's run, on the machine that trained it):",
        "",
        "| system | stored positions | KiB/item as stored | KiB/item bf16 | KiB/item int8 | compress ms/item "
        "| ms/candidate | training min |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, costs in rows:
        cells = [
            cell(costs, "positions"),
            cell(costs, "bytes_stored", 1024),
            cell(costs, "bytes_bf16", 1024),
            cell(costs, "bytes_int8", 1024),
            cell(costs, "compress_ms_per_item"),
            cell(costs, "ms_per_candidate", fmt="{:.2f}"),
            cell(costs, "training_minutes", fmt="{:.2f}"),
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def markdown_report(result: EvalResult) -> str:
    summary = result.summary

    def header(metric: str) -> str:
        return metric_header(metric, result.gain)

    hard_cols = ["hard-query " + header("recall@5"), "hard-query " + header("ndcg@10")]
    lines = [
        f"## Evaluation on split `{result.split}` ({result.queries} queries)",
        "",
        f"Reference ranking: teacher `{result.teacher}`. {gain_note(result.gain)}.",
        "",
        "| system | " + " | ".join([*map(header, METRICS), *hard_cols]) + " |",
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
    lines += ["| system | " + " | ".join(map(header, INTERVAL_METRICS)) + " |", "|---|---|---|"]
    for system, s in summary.items():
        ci = s.ci95
        cells = [f"{s.all[m]:.3f} [{ci[m][0]:.3f}, {ci[m][1]:.3f}]" for m in INTERVAL_METRICS]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    if paired := paired_differences(result.records, result.systems):
        title = (
            "Each student minus its controls, paired over queries (95% bootstrap interval; better / worse)"
        )
        columns = " | ".join(f"Δ {header(m)}" for m in PAIRED_METRICS)
        lines += ["", title + ":", "", f"| student | control | {columns} |", "|---|---|---|---|"]
        for row in paired:
            cells = [str(row.by_metric[m]) for m in PAIRED_METRICS]
            lines.append(f"| {row.student} | {row.control} | " + " | ".join(cells) + " |")
    cuts = result.length_quartile_cuts_tokens
    by_length = f"{header('recall@5').capitalize()} by item-length quartile"
    lines += ["", f"{by_length} (tokens of the query's best item):", ""]
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
