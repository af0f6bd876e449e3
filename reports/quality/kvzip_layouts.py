"""The KVzip layouts of one evaluation side by side: plain KVzip and the selection hybrid (k/2 raw + k/2
KVzip), every head the same number of columns or per-head budgets, at 16 / 32 / 64 positions — nDCG@10
and recall@1/5/10 vs the reader, then paired differences (95% bootstrap interval; topics better / worse)
against prefix caching at the same positions and per-head against uniform. Run from the repository
root on a folder that `kvzip_layouts.sh` wrote:
`.venv/bin/python reports/quality/kvzip_layouts.py reports/quality/ap89-bm25-20-dev-24-hybrid`."""

import sys
from pathlib import Path

from reranker.evaluation.results import EvalResult, paired_row

RESULT = EvalResult.read(Path(sys.argv[1]))
METRICS = ("ndcg@10", "recall@1", "recall@5", "recall@10")


def layout(k: int, hybrid: bool, per_head: bool) -> str:
    shape = f"t={k // 2} k={k // 2}" if hybrid else f"k={k}"
    return "select kvzip " + ("per-head " if per_head else "") + shape


def mean(system: str, metric: str) -> float:
    values = [r.metrics[metric] for r in RESULT.records if r.system == system]
    return sum(values) / len(values)


print("| system | k | " + " | ".join(METRICS) + " |")
print("|---|---|" + "---|" * len(METRICS))
for k in (16, 32, 64):
    prefix = f"prefix {k} · {layout(k, False, False)}"
    for name in (prefix, *(layout(k, h, p) for h in (False, True) for p in (False, True))):
        print(
            f"| {name.split(' · ')[0]} | {k} | " + " | ".join(f"{mean(name, m):.3f}" for m in METRICS) + " |"
        )
print()
print("| difference | k | Δ nDCG@10 | Δ recall@5 | Δ recall@10 |")
print("|---|---|---|---|---|")
for k in (16, 32, 64):
    prefix = f"prefix {k} · {layout(k, False, False)}"
    pairs = [(layout(k, h, p), prefix) for h in (False, True) for p in (False, True)]
    pairs += [(layout(k, h, True), layout(k, h, False)) for h in (False, True)]
    for student, control in pairs:
        print(paired_row(f"{student} − {control.split(' · ')[0]} | {k}", RESULT, student, RESULT, control))
