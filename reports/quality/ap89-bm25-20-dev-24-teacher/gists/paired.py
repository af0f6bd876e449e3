"""Paired differences (95% bootstrap interval; topics better / worse) of the plain gists at 16, 32 and 64
positions trained over the LoRA teacher (../gists.sh) on BM25's top 20 for 24 AP89 dev topics: against
prefix caching at the same positions and at 64 on the teacher's body in this evaluation, against SnapKV,
KVzip and the selection hybrid at the same positions of the teacher's other evaluations of these lists
(../results.json, ../kvzip/), and, on nDCG@10, against the default, prefix 64 on the base
(../../ap89-bm25-20-dev-24-gists-k16-k32/). Run from the repository root:
`.venv/bin/python reports/quality/ap89-bm25-20-dev-24-teacher/gists/paired.py`."""

from pathlib import Path

from reranker.evaluation.results import EvalResult, paired_row

HERE = Path(__file__).parent
GISTS = EvalResult.read(HERE)
TEACHER = HERE.parent
SNAPKV = EvalResult.read(TEACHER)
KVZIP = EvalResult.read(TEACHER / "kvzip")
BASE = EvalResult.read(TEACHER.parent / "ap89-bm25-20-dev-24-gists-k16-k32")

print("| difference | Δ nDCG@10 | Δ recall@5 vs teacher | Δ recall@10 vs teacher |")
print("|---|---|---|---|")
for k in (16, 32, 64):
    gists = f"gist k={k}"
    budgets = sorted({k, 64})  # prefix at the gists' own positions and at 64
    for label, other, system in (
        *((f"prefix {b}, teacher's body", GISTS, f"prefix {b} · {gists}") for b in budgets),
        (f"SnapKV {k}, teacher's body", SNAPKV, f"select k={k}"),
        (f"KVzip {k}, teacher's body", KVZIP, f"select kvzip k={k}"),
        (f"hybrid {k // 2} + KVzip {k // 2}, teacher's body", KVZIP, f"select kvzip t={k // 2} k={k // 2}"),
    ):
        print(paired_row(f"gists {k} − {label}", GISTS, gists, other, system))

print("\n| difference (across readers) | Δ nDCG@10 |")
print("|---|---|")
for k in (16, 32, 64):
    print(
        paired_row(
            f"gists {k} − the default (prefix 64 on the base)",
            GISTS,
            f"gist k={k}",
            BASE,
            "prefix k=64",
            ("ndcg@10",),
        )
    )
