"""Paired differences (95% bootstrap interval; topics better / worse) of the plain gists at 16 and 32
positions on the 24 judged AP89 dev topics: against their untrained start, prefix caching at the same
positions and at 64 (the default) in this evaluation, each other, and the training-free selections and the
GPU-trained gists at 64 of ../ap89-judged-20-dev-24-gpu/ (the same topics and lists, read by the same
frozen base on one H200). Run from the repository root:
`.venv/bin/python reports/quality/ap89-judged-20-dev-24-gists-k16-k32/paired.py`."""

from pathlib import Path

from reranker.evaluation.results import EvalResult, paired_row

HERE = Path(__file__).parent
GISTS = EvalResult.read(HERE)
GPU = EvalResult.read(HERE.parent / "ap89-judged-20-dev-24-gpu")


def snapkv(k: int) -> str:
    return f"select k={k} · checkpoint?compressor=select&num_gist={k}"


def kvzip(k: int) -> str:
    return f"select k={k} · checkpoint?compressor=select&select_scorer=kvzip&num_gist={k}"


PAIRS = [
    ("gist k=16", "its untrained start", GISTS, "untrained gists k=16"),
    ("gist k=32", "its untrained start", GISTS, "untrained gists k=32"),
    ("gist k=16", "prefix 16", GISTS, "prefix k=16"),
    ("gist k=32", "prefix 32", GISTS, "prefix k=32"),
    ("gist k=16", "prefix 64 (the default)", GISTS, "prefix k=64"),
    ("gist k=32", "prefix 64 (the default)", GISTS, "prefix k=64"),
    ("gist k=32", "gists 16", GISTS, "gist k=16"),
    ("gist k=16", "SnapKV 16", GPU, snapkv(16)),
    ("gist k=16", "KVzip 16", GPU, kvzip(16)),
    ("gist k=16", "hybrid 8 + KVzip 8", GPU, "select t=8 k=8"),
    ("gist k=32", "SnapKV 32", GPU, snapkv(32)),
    ("gist k=32", "KVzip 32", GPU, kvzip(32)),
    ("gist k=32", "hybrid 16 + KVzip 16", GPU, "select t=16 k=16"),
    ("gist k=32", "gists 64, trained 3.5 GPU-min", GPU, "gist k=64"),
]

print("| difference | Δ nDCG@10 | Δ recall@5 vs reader | Δ recall@10 vs reader |")
print("|---|---|---|---|")
for system, label, other, other_system in PAIRS:
    print(paired_row(f"gists {system[-2:]} − {label}", GISTS, system, other, other_system))
