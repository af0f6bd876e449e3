"""Paired differences (95% bootstrap interval; topics better / worse) of the early-stopped hybrid's second
seed on the 47 dev topics' judged lists: the step its 20-pair held-out rule kept (140; results.json) and
the step a 5-pair rule would have kept (20; step20/), each against prefix 64, against its untrained start
and against seed 0 (../ap89-judged-20-dev-47-hybrid-t48-k16-es/, step picked on 5 pairs), and the two
steps against each other. Run from the repository root:
`.venv/bin/python reports/quality/ap89-judged-20-dev-47-hybrid-t48-k16-es-seed1/paired.py`."""

from pathlib import Path

from reranker.evaluation.results import EvalResult, paired_row

HERE = Path(__file__).parent
STEP140, STEP20 = EvalResult.read(HERE), EvalResult.read(HERE / "step20")
SEED0 = EvalResult.read(HERE.parent / "ap89-judged-20-dev-47-hybrid-t48-k16-es")
HYBRID = "gist t=48 k=16"
UNTRAINED = f"untrained gists {HYBRID[5:]}"
PAIRS = [
    ("seed 1, step 140 − prefix 64", STEP140, HYBRID, STEP140, "prefix k=64"),
    ("seed 1, step 140 − its untrained start", STEP140, HYBRID, STEP140, UNTRAINED),
    ("seed 1, step 140 − seed 0", STEP140, HYBRID, SEED0, HYBRID),
    (
        "seed 1, step 140 + BM25 − prefix 64 + BM25",
        STEP140,
        f"{HYBRID} + bm25",
        STEP140,
        "prefix k=64 + bm25",
    ),
    ("seed 1, step 20 − prefix 64", STEP20, HYBRID, STEP20, "prefix k=64"),
    ("seed 1, step 20 − its untrained start", STEP20, HYBRID, STEP20, UNTRAINED),
    ("seed 1, step 20 − seed 0", STEP20, HYBRID, SEED0, HYBRID),
    ("seed 1: step 140 − step 20", STEP140, HYBRID, STEP20, HYBRID),
]

for label, a, sa, b, sb in PAIRS:
    print(paired_row(label, a, sa, b, sb))
