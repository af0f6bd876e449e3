"""The distance to the goal, measured on the reader itself (47 AP89 dev topics, judged lists): how much
of its own top K the full-context reader keeps when it reads only an article's first 64 … 768 tokens
(prefix caching at 64 and 128 stored positions; full-context reads of the first 256 … 768 tokens, which
prefix caching equals), and when only its arithmetic changes (float32 against the bfloat16 it is
evaluated in), beside the score gap at the top-10 boundary that decides recall@10. Prints both tables
and draws `recall_vs_positions.png`. Run from the repository root after run.sh:
`.venv/bin/python reports/quality/ap89-judged-20-dev-47-reader-cuts/distance.py`."""

import statistics
from pathlib import Path

import matplotlib.pyplot as plt

from reranker.data.trec import read_qrels
from reranker.evaluation.results import EvalResult, paired_across, paired_row
from reranker.evaluation.run_files import read_run
from reranker.ranking_metrics import bootstrap_ci, ndcg_at_k, ranking, recall_at_k_vs_reference

HERE = Path(__file__).parent
BF16 = Path("runs/ap89-reader-cuts/eval-dev47/runs")
FP32 = Path("runs/ap89-reader-fp32/eval-dev47/runs")
CUT = "full context · runs/ap89-hybrid-q45-s1/t48k16/checkpoint?max_item_tokens={}"
KS = (1, 5, 10)


def cell(values: list[float]) -> str:
    low, high = bootstrap_ci(values)
    return f"{statistics.fmean(values):.3f} [{low:.3f}, {high:.3f}]"


# ------------------------------------------------------------------ float32 against bfloat16, per topic
GAP = "score gap, 10th − 11th candidate (bfloat16, nats)"
bf16, fp32, labels = (
    read_run(BF16 / "teacher.run"),
    read_run(FP32 / "teacher.run"),
    read_qrels(BF16 / "qrels.txt"),
)
rows: dict[str, list[float]] = {}
for qid, scores in bf16.items():
    docs = sorted(scores)
    ref, other = [scores[d] for d in docs], [fp32[qid][d] for d in docs]
    for k in KS:
        recall = recall_at_k_vs_reference(other, ref, k, docs)
        rows.setdefault(f"recall@{k} of float32 vs bfloat16", []).append(recall)
    graded = [labels[qid].get(d, 0) for d in docs]
    rows.setdefault("nDCG@10, bfloat16", []).append(ndcg_at_k(ref, graded, 10, docs))
    rows.setdefault("nDCG@10, float32", []).append(ndcg_at_k(other, graded, 10, docs))
    order = ranking(ref, docs)
    rows.setdefault(GAP, []).append(ref[order[9]] - ref[order[10]])
    diff = statistics.fmean(abs(a - b) for a, b in zip(ref, other, strict=True))
    rows.setdefault("mean |float32 − bfloat16| score (nats)", []).append(diff)
print(f"Float32 against bfloat16, {len(bf16)} topics; mean [95% bootstrap interval over topics]\n")
print("| measure | value |\n|---|---|")
for name, values in rows.items():
    print(f"| {name} | {cell(values)} |")
gaps = rows[GAP]
print(
    f"\nMedian top-10 boundary gap {statistics.median(gaps):.3f} nats; under 0.1 nats on "
    f"{sum(g < 0.1 for g in gaps)} of {len(gaps)} topics."
)

# ------------------------------------------------------------------ positions read
cuts, prefix128 = EvalResult.read(HERE), EvalResult.read(HERE / "prefix128")
seed1 = EvalResult.read(HERE.parent / "ap89-judged-20-dev-47-hybrid-t48-k16-es-seed1")
points = [(64, seed1, "prefix k=64"), (128, prefix128, "prefix k=128")]
points += [(n, cuts, CUT.format(n)) for n in (256, 512, 768)] + [(1024, cuts, "teacher")]
print(
    "\n| tokens read | recall@1 / 5 / 10 vs reader | nDCG@10 [95% CI] | Δ nDCG@10 vs prefix 64 "
    "| Δ recall@10 vs prefix 64 |\n|---|---|---|---|---|"
)
for n, result, system in points:
    summary = result.summary[system]
    recalls = " / ".join(f"{summary.all[f'recall@{k}']:.2f}" for k in KS)
    low, high = summary.ci95["ndcg@10"]
    deltas = ["–", "–"]
    if n > 64:
        deltas = [
            str(paired_across(result, system, seed1, "prefix k=64", m)) for m in ("ndcg@10", "recall@10")
        ]
    print(
        f"| {n} | {recalls} | {summary.all['ndcg@10']:.3f} [{low:.3f}, {high:.3f}] | {' | '.join(deltas)} |"
    )

tokens = [n for n, _, _ in points]
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
for k, marker in zip(KS, "os^", strict=True):
    recalls = [r.summary[s].all[f"recall@{k}"] for _, r, s in points]
    (line,) = left.plot(tokens, recalls, marker=marker, label=f"recall@{k}")
    fp = statistics.fmean(rows[f"recall@{k} of float32 vs bfloat16"])
    left.axhline(fp, linestyle=":", color=line.get_color(), linewidth=1)
left.axhline(0.90, color="black", linestyle="--", linewidth=1, label="goal at ≤ 64 positions (recall@10)")
left.plot([], [], ":", color="grey", label="whole article, float32 (same weights)")
left.set(ylabel="share of the whole-article reader's top K", title="Agreement with the whole-article reader")
ndcg = [r.summary[s].all["ndcg@10"] for _, r, s in points]
ci = [r.summary[s].ci95["ndcg@10"] for _, r, s in points]
errors = [
    [v - c[0] for v, c in zip(ndcg, ci, strict=True)],
    [c[1] - v for v, c in zip(ndcg, ci, strict=True)],
]
right.errorbar(tokens, ndcg, yerr=errors, marker="o", capsize=3, label="reader, first N tokens")
right.axhline(cuts.summary["bm25"].all["ndcg@10"], color="grey", linestyle="--", linewidth=1, label="BM25")
right.set(ylabel="nDCG@10 (gain = label), 95% CI", title="Quality against the judgments")
for ax in (left, right):
    ax.set(xscale="log", xlabel="item tokens read (64, 128: prefix caching)")
    ax.set_xticks(tokens, [str(n) for n in tokens])
    ax.legend(fontsize=8, loc="lower right")
fig.suptitle(
    "AP89 dev, 47 topics × 20 judged articles; reader: SmolLM2-135M-Instruct, query likelihood", fontsize=9
)
fig.tight_layout()
fig.savefig(HERE / "recall_vs_positions.png", dpi=120)

# ------------------------------------------------------------------ BM25's top 20 of the same topics
bm25_lists = EvalResult.read(HERE / "bm25-lists")
print(
    "\nBM25's top 20, the same 47 topics (nDCG@10): "
    + "; ".join(
        f"{name} {bm25_lists.summary[name].all['ndcg@10']:.3f}"
        for name in ("teacher", "bm25", "prefix k=64", "prefix k=128")
    )
)
print("\n| BM25's top 20, paired | nDCG@10 | recall@10 vs reader |\n|---|---|---|")
for label, first, second in [
    ("prefix 128 − prefix 64", "prefix k=128", "prefix k=64"),
    ("prefix 128 − the reader", "prefix k=128", "teacher"),
    ("the reader − BM25", "teacher", "bm25"),
]:
    print(paired_row(label, bm25_lists, first, bm25_lists, second, ("ndcg@10", "recall@10")))
