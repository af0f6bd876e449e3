"""Paired differences over the 47 dev topics (95% bootstrap interval; topics better / worse): the
75-minute hybrid against prefix 64 in this evaluation and against the 40-minute hybrid's evaluation
(../ap89-judged-20-dev-hybrid-t48-k16/dev47/). Run from the repository root:
`.venv/bin/python reports/quality/ap89-judged-20-dev-47-hybrid-t48-k16/paired.py`."""

from pathlib import Path

from reranker.evaluation.results import EvalResult, paired_row

HERE = Path(__file__).parent
NEW = EvalResult.read(HERE)
OLD = EvalResult.read(HERE.parent / "ap89-judged-20-dev-hybrid-t48-k16" / "dev47")
HYBRID = "gist t=48 k=16"
PAIRS = [
    ("75-min hybrid − prefix 64", NEW, HYBRID, NEW, "prefix k=64"),
    ("75-min hybrid − 40-min hybrid", NEW, HYBRID, OLD, HYBRID),
    ("75-min hybrid − its untrained start", NEW, HYBRID, NEW, f"untrained gists {HYBRID[5:]}"),
    ("75-min hybrid + BM25 − prefix 64 + BM25", NEW, f"{HYBRID} + bm25", NEW, "prefix k=64 + bm25"),
]


for label, a, sa, b, sb in PAIRS:
    print(paired_row(label, a, sa, b, sb))
