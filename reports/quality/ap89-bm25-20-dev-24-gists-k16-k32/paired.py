"""Paired differences (95% bootstrap interval; topics better / worse) of the plain gists at 16 and 32
positions on BM25's top 20 for 24 AP89 dev topics: against prefix caching at the same positions and at
64 (the default) in this evaluation, each other, and — on the same lists, read by the same frozen base
on this CPU — SnapKV, KVzip and the selection hybrid (../ap89-bm25-20-dev-24-selection/,
../ap89-bm25-20-dev-24-hybrid/), the GPU-trained gists at 64 (../ap89-bm25-20-dev-24-gpu-gists/) and
the early-stopped hybrid of 48 raw tokens + 16 gists (../ap89-bm25-20-dev-24-hybrid-t48-k16-es/). Run
from the repository root: `.venv/bin/python reports/quality/ap89-bm25-20-dev-24-gists-k16-k32/paired.py`."""

from pathlib import Path

from reranker.evaluation.results import EvalResult, paired_row

HERE = Path(__file__).parent
GISTS = EvalResult.read(HERE)
SELECTION = EvalResult.read(HERE.parent / "ap89-bm25-20-dev-24-selection")
HYBRIDS = EvalResult.read(HERE.parent / "ap89-bm25-20-dev-24-hybrid")
GPU = EvalResult.read(HERE.parent / "ap89-bm25-20-dev-24-gpu-gists")
TRAINED_HYBRID = EvalResult.read(HERE.parent / "ap89-bm25-20-dev-24-hybrid-t48-k16-es")

PAIRS = [
    ("gist k=16", "prefix 16", GISTS, "prefix k=16"),
    ("gist k=32", "prefix 32", GISTS, "prefix k=32"),
    ("gist k=16", "prefix 64 (the default)", GISTS, "prefix k=64"),
    ("gist k=32", "prefix 64 (the default)", GISTS, "prefix k=64"),
    ("gist k=32", "gists 16", GISTS, "gist k=16"),
    ("gist k=16", "SnapKV 16", SELECTION, "select k=16"),
    ("gist k=16", "KVzip 16", SELECTION, "select kvzip k=16"),
    ("gist k=16", "hybrid 8 + KVzip 8", HYBRIDS, "select kvzip t=8 k=8"),
    ("gist k=32", "SnapKV 32", SELECTION, "select k=32"),
    ("gist k=32", "KVzip 32", SELECTION, "select kvzip k=32"),
    ("gist k=32", "hybrid 16 + KVzip 16", HYBRIDS, "select kvzip t=16 k=16"),
    ("gist k=32", "gists 64, trained 3.5 GPU-min", GPU, "gist k=64"),
    ("gist k=32", "48 raw + 16 gists, early-stopped", TRAINED_HYBRID, "gist t=48 k=16"),
]

print("| difference | Δ nDCG@10 | Δ recall@5 vs reader | Δ recall@10 vs reader |")
print("|---|---|---|---|")
for system, label, other, other_system in PAIRS:
    print(paired_row(f"gists {system[-2:]} − {label}", GISTS, system, other, other_system))
