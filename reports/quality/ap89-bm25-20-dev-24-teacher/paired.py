"""Paired differences (95% bootstrap interval; topics better / worse) with the shipped LoRA teacher as the
reader on BM25's top 20 for 24 AP89 dev topics (run.sh): SnapKV against prefix caching of the teacher's
K/V at 16, 32 and 64; and, on nDCG@10 (label-based, so comparable across readers), the teacher's
whole-article read and prefix 64, SnapKV 64, KVzip 64 and the selection hybrid at 64 (kvzip/, kvzip.sh)
on its body against the base's whole-article read and the default (prefix 64 on the base) of
../ap89-bm25-20-dev-24-gists-k16-k32/. Run from the repository root:
`.venv/bin/python reports/quality/ap89-bm25-20-dev-24-teacher/paired.py`."""

from pathlib import Path

from reranker.evaluation.results import EvalResult, paired_row

HERE = Path(__file__).parent
TEACHER = EvalResult.read(HERE)
KVZIP = EvalResult.read(HERE / "kvzip")
BASE = EvalResult.read(HERE.parent / "ap89-bm25-20-dev-24-gists-k16-k32")

print("| difference (teacher as the reader) | Δ nDCG@10 | Δ recall@5 vs teacher | Δ recall@10 vs teacher |")
print("|---|---|---|---|")
for k in (16, 32, 64):
    print(
        paired_row(
            f"SnapKV {k} − prefix {k}", TEACHER, f"select k={k}", TEACHER, f"prefix {k} · select k={k}"
        )
    )

print("\n| difference (across readers) | Δ nDCG@10 |")
print("|---|---|")
for label, result, system, other, other_system in (
    ("teacher, whole article − base, whole article", TEACHER, "teacher", BASE, "teacher"),
    ("teacher, whole article − the default (prefix 64 on the base)", TEACHER, "teacher", BASE, "prefix k=64"),
    ("prefix 64 on the teacher − the default", TEACHER, "prefix 64 · select k=64", BASE, "prefix k=64"),
    ("SnapKV 64 on the teacher − the default", TEACHER, "select k=64", BASE, "prefix k=64"),
    ("KVzip 64 on the teacher − the default", KVZIP, "select kvzip k=64", BASE, "prefix k=64"),
    (
        "hybrid 32 + KVzip 32 on the teacher − the default",
        KVZIP,
        "select kvzip t=32 k=32",
        BASE,
        "prefix k=64",
    ),
    (
        "hybrid 32 + KVzip 32, per-head, on the teacher − the default",
        KVZIP,
        "select kvzip per-head t=32 k=32",
        BASE,
        "prefix k=64",
    ),
):
    print(paired_row(label, result, system, other, other_system, ("ndcg@10",)))
