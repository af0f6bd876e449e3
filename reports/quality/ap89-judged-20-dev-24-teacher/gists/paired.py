"""Paired differences (95% bootstrap interval; topics better / worse) of the 64 gists trained over the LoRA
teacher (gists.sh) on the 24 judged AP89 dev topics: against prefix 64 on the teacher's body in this
evaluation, against SnapKV, KVzip and the selection hybrid at 64 of the teacher's other evaluations
(../results.json, ../kvzip/, ../hybrid/), and against the default, prefix 64 on the base (../vs-base/).
Run from the repository root:
`.venv/bin/python reports/quality/ap89-judged-20-dev-24-teacher/gists/paired.py`."""

from pathlib import Path

from reranker.evaluation.results import EvalResult, paired_row

HERE = Path(__file__).parent
GISTS = EvalResult.read(HERE)
TEACHER = HERE.parent
PAIRS = [
    ("prefix 64, teacher's body", GISTS, "prefix k=64"),
    ("SnapKV 64, teacher's body", EvalResult.read(TEACHER), "select k=64"),
    ("KVzip 64, teacher's body", EvalResult.read(TEACHER / "kvzip"), "select kvzip k=64"),
    ("hybrid 32 + KVzip 32, teacher's body", EvalResult.read(TEACHER / "hybrid"), "select kvzip t=32 k=32"),
    ("the default (prefix 64 on the base)", EvalResult.read(TEACHER / "vs-base"), "prefix k=64"),
]

print("| difference | Δ nDCG@10 | Δ recall@5 vs teacher | Δ recall@10 vs teacher |")
print("|---|---|---|---|")
for label, other, system in PAIRS:
    print(paired_row(f"gists 64 − {label}", GISTS, "gist k=64", other, system))
