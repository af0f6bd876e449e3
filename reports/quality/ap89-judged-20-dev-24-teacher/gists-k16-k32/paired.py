"""Paired differences (95% bootstrap interval; topics better / worse) of the plain gists at 16 and 32
positions trained over the LoRA teacher (../gists-k16-k32.sh) on the 24 judged AP89 dev topics: against
prefix caching at the same positions and at 64 on the teacher's body and the 64 gists in this evaluation,
against SnapKV, KVzip and the selection hybrid at the same positions of the teacher's other evaluations
(../results.json, ../kvzip/, ../hybrid/), and against the default, prefix 64 on the base (../vs-base/,
whose reference is the teacher too, so its recall is against the same reader). Run from the repository
root:
`.venv/bin/python reports/quality/ap89-judged-20-dev-24-teacher/gists-k16-k32/paired.py`."""

from pathlib import Path

from reranker.evaluation.results import EvalResult, paired_row

HERE = Path(__file__).parent
GISTS = EvalResult.read(HERE)
TEACHER = HERE.parent
SNAPKV = EvalResult.read(TEACHER)
KVZIP = EvalResult.read(TEACHER / "kvzip")
HYBRID = EvalResult.read(TEACHER / "hybrid")
BASE = EvalResult.read(TEACHER / "vs-base")

print("| difference | Δ nDCG@10 | Δ recall@5 vs teacher | Δ recall@10 vs teacher |")
print("|---|---|---|---|")
for k in (16, 32):
    for label, other, system in (
        (f"prefix {k}, teacher's body", GISTS, f"prefix k={k}"),
        ("prefix 64, teacher's body", GISTS, "prefix k=64"),
        ("gists 64 over the teacher", GISTS, "gist k=64"),
        (f"SnapKV {k}, teacher's body", SNAPKV, f"select k={k}"),
        (f"KVzip {k}, teacher's body", KVZIP, f"select kvzip k={k}"),
        (f"hybrid {k // 2} + KVzip {k // 2}, teacher's body", HYBRID, f"select kvzip t={k // 2} k={k // 2}"),
        ("the default (prefix 64 on the base)", BASE, "prefix k=64"),
    ):
        print(paired_row(f"gists {k} − {label}", GISTS, f"gist k={k}", other, system))
