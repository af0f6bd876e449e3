"""Paired differences (95% bootstrap interval; topics better / worse) of the 20-step hybrid of seed 2 on the
47 dev topics' judged lists: against prefix 64 and its untrained start in this evaluation, against seed 1's
step 20 and step 140 (../ap89-judged-20-dev-47-hybrid-t48-k16-es-seed1/) and against seed 0's early-stopped
run (../ap89-judged-20-dev-47-hybrid-t48-k16-es/). Run from the repository root:
`.venv/bin/python reports/quality/ap89-judged-20-dev-47-hybrid-t48-k16-20-steps-seed2/paired.py`."""

from pathlib import Path

from reranker.evaluation.results import EvalResult, paired_row

HERE = Path(__file__).parent
SEED2 = EvalResult.read(HERE)
SEED1 = HERE.parent / "ap89-judged-20-dev-47-hybrid-t48-k16-es-seed1"
SEED1_STEP20, SEED1_STEP140 = EvalResult.read(SEED1 / "step20"), EvalResult.read(SEED1)
SEED0 = EvalResult.read(HERE.parent / "ap89-judged-20-dev-47-hybrid-t48-k16-es")
HYBRID = "gist t=48 k=16"
PAIRS = [
    ("seed 2, 20 steps − prefix 64", SEED2, "prefix k=64"),
    ("seed 2, 20 steps − its untrained start", SEED2, f"untrained gists {HYBRID[5:]}"),
    ("seed 2, 20 steps − seed 1, 20 steps", SEED1_STEP20, HYBRID),
    ("seed 2, 20 steps − seed 1, step 140", SEED1_STEP140, HYBRID),
    ("seed 2, 20 steps − seed 0, step 120", SEED0, HYBRID),
]

for label, b, sb in PAIRS:
    print(paired_row(label, SEED2, HYBRID, b, sb))
