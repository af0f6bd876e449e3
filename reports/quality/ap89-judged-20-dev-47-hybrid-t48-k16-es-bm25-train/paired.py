"""Paired differences (95% bootstrap interval; topics better / worse) of the hybrid trained on judged +
BM25 lists: on the 47 dev topics' judged lists (results.json) against prefix 64, against its untrained
start and against the same recipe trained on judged lists only (../ap89-judged-20-dev-47-hybrid-t48-k16-es/);
on BM25's top 20 for 24 dev topics (bm25-dev24/) against the same three. Run from the repository root:
`.venv/bin/python reports/quality/ap89-judged-20-dev-47-hybrid-t48-k16-es-bm25-train/paired.py`."""

from pathlib import Path

from reranker.evaluation.results import EvalResult, paired_row

HERE = Path(__file__).parent
JUDGED, BM25 = EvalResult.read(HERE), EvalResult.read(HERE / "bm25-dev24")
JUDGED_ONLY = EvalResult.read(HERE.parent / "ap89-judged-20-dev-47-hybrid-t48-k16-es")
BM25_JUDGED_ONLY = EvalResult.read(HERE.parent / "ap89-bm25-20-dev-24-hybrid-t48-k16-es")
HYBRID = "gist t=48 k=16"
UNTRAINED = f"untrained gists {HYBRID[5:]}"
for lists, new, old in (("judged", JUDGED, JUDGED_ONLY), ("BM25's top 20", BM25, BM25_JUDGED_ONLY)):
    for label, b, sb in (
        ("prefix 64", new, "prefix k=64"),
        ("its untrained start", new, UNTRAINED),
        ("the hybrid trained on judged lists only", old, HYBRID),
    ):
        print(paired_row(f"{lists}: hybrid (judged + BM25 lists) − {label}", new, HYBRID, b, sb))
