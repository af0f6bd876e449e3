"""Paired differences (95% bootstrap interval; topics better / worse) of the early-stopped hybrid (40
train topics, 5 held out): on the 47 dev topics' judged lists against prefix 64 in this evaluation,
against its untrained start, and against the 24-topic runs of ../ap89-judged-20-dev-47-hybrid-t48-k16/
(75 minutes) and ../ap89-judged-20-dev-hybrid-t48-k16/dev47/ (40 minutes); on BM25's top 20 for 24 dev
topics (../ap89-bm25-20-dev-24-hybrid-t48-k16-es/) against prefix 64 and its untrained start. Run from
the repository root: `.venv/bin/python reports/quality/ap89-judged-20-dev-47-hybrid-t48-k16-es/paired.py`."""

from pathlib import Path

from reranker.evaluation.results import EvalResult, paired_row

HERE = Path(__file__).parent
NEW = EvalResult.read(HERE)
M75 = EvalResult.read(HERE.parent / "ap89-judged-20-dev-47-hybrid-t48-k16")
M40 = EvalResult.read(HERE.parent / "ap89-judged-20-dev-hybrid-t48-k16" / "dev47")
BM25 = EvalResult.read(HERE.parent / "ap89-bm25-20-dev-24-hybrid-t48-k16-es")
HYBRID = "gist t=48 k=16"
PAIRS = [
    ("early-stopped hybrid − prefix 64", NEW, HYBRID, NEW, "prefix k=64"),
    ("early-stopped hybrid − its untrained start", NEW, HYBRID, NEW, f"untrained gists {HYBRID[5:]}"),
    ("early-stopped hybrid − 24-topic hybrid, 40 min", NEW, HYBRID, M40, HYBRID),
    ("early-stopped hybrid − 24-topic hybrid, 75 min", NEW, HYBRID, M75, HYBRID),
    ("early-stopped hybrid + BM25 − prefix 64 + BM25", NEW, f"{HYBRID} + bm25", NEW, "prefix k=64 + bm25"),
    ("BM25's top 20: early-stopped hybrid − prefix 64", BM25, HYBRID, BM25, "prefix k=64"),
    (
        "BM25's top 20: early-stopped hybrid − its untrained start",
        BM25,
        HYBRID,
        BM25,
        f"untrained gists {HYBRID[5:]}",
    ),
]


for label, a, sa, b, sb in PAIRS:
    print(paired_row(label, a, sa, b, sb))
