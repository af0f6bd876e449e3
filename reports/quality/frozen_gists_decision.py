"""The frozen-reader decision table as one figure: nDCG@10 and recall@10 vs the reader against the K/V
positions stored per item (16 / 32 / 64; bytes per item in bf16 on the axis), for each reader (the
untouched base by query likelihood, the shipped LoRA teacher by its head) and list kind (judged, BM25's
top 20) on 24 AP89 dev topics. Every point is read back from the results.json of the evaluation that
measured it (SOURCES) and averaged over the topics of the panel's first source (a 47-topic run is read
on those 24); the reader's whole-article read, BM25 and the no-item floor are levels from that first
source. The default (prefix 64 on the base) is starred on every nDCG@10 panel: the issue's rule
compares every system with it; the goal (recall@10 vs the reader ≥ 0.90) is a line on the recall
panels. Gists over the reader: 10 CPU-minutes each at 16 and 32; at 64, 3.5 H200-minutes (the base) or
10 CPU-minutes (the teacher); the trained hybrid is the early-stopped 40-topic run. Prints the plotted
nDCG@10 points as a Markdown table. Run from the repository root:
`.venv/bin/python reports/quality/frozen_gists_decision.py` (writes frozen-gists-decision.png beside it).
"""

from __future__ import annotations

import functools
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from reranker.evaluation.results import EvalResult

HERE = Path(__file__).parent
KIB_PER_POSITION = 22.5  # SmolLM2-135M, bf16: 2 × 30 layers × 3 KV heads × 64 dims × 2 bytes / 1024
BUDGETS = (16, 32, 64)


def _hybrid(k: int, per_head: str = "") -> str:
    return f"select kvzip{per_head} t={k // 2} k={k // 2}"


Panel = tuple[str, dict[str, dict[int, tuple[str, str]]]]  # (first source: the levels, family → k → source)


def _teacher_panel(root: str, layouts: str, gists: str) -> Panel:
    """The teacher's panels share one shape: prefix caching and SnapKV from `root`'s evaluation, every
    KVzip layout from its `layouts` folder, the gists at every budget from its `gists` folder."""
    return (
        root,
        {
            "prefix caching": {k: (root, f"prefix {k} · select k={k}") for k in BUDGETS},
            "SnapKV": {k: (root, f"select k={k}") for k in BUDGETS},
            "KVzip": {k: (f"{root}/{layouts}", f"select kvzip k={k}") for k in BUDGETS},
            "hybrid k/2 raw + k/2 KVzip": {k: (f"{root}/{layouts}", _hybrid(k)) for k in BUDGETS},
            "hybrid, per-head budgets": {k: (f"{root}/{layouts}", _hybrid(k, " per-head")) for k in BUDGETS},
            "gists over the reader": {k: (f"{root}/{gists}", f"gist k={k}") for k in BUDGETS},
        },
    )


SOURCES: dict[str, Panel] = {
    "base reader, judged lists": (
        "ap89-judged-20-dev-24-gpu",
        {
            "prefix caching": {k: ("ap89-judged-20-dev-24-gpu", f"prefix {k} · gist k=64") for k in BUDGETS},
            "SnapKV": {
                k: ("ap89-judged-20-dev-24-gpu", f"select k={k} · checkpoint?compressor=select&num_gist={k}")
                for k in BUDGETS
            },
            "KVzip": {
                k: (
                    "ap89-judged-20-dev-24-gpu",
                    f"select k={k} · checkpoint?compressor=select&select_scorer=kvzip&num_gist={k}",
                )
                for k in BUDGETS
            },
            "hybrid k/2 raw + k/2 KVzip": {
                k: ("ap89-judged-20-dev-24-gpu", f"select t={k // 2} k={k // 2}") for k in BUDGETS
            },
            "hybrid, per-head budgets": {
                k: ("ap89-judged-20-dev-24-kvzip-layouts", _hybrid(k, " per-head")) for k in BUDGETS
            },
            "gists over the reader": {
                16: ("ap89-judged-20-dev-24-gists-k16-k32", "gist k=16"),
                32: ("ap89-judged-20-dev-24-gists-k16-k32", "gist k=32"),
                64: ("ap89-judged-20-dev-24-gpu", "gist k=64"),
            },
            "48 raw + 16 gists, trained": {64: ("ap89-judged-20-dev-47-hybrid-t48-k16-es", "gist t=48 k=16")},
        },
    ),
    "base reader, BM25's top 20": (
        "ap89-bm25-20-dev-24-selection",
        {
            "prefix caching": {
                k: ("ap89-bm25-20-dev-24-selection", f"prefix {k} · select k={k}") for k in BUDGETS
            },
            "SnapKV": {k: ("ap89-bm25-20-dev-24-selection", f"select k={k}") for k in BUDGETS},
            "KVzip": {k: ("ap89-bm25-20-dev-24-selection", f"select kvzip k={k}") for k in BUDGETS},
            "hybrid k/2 raw + k/2 KVzip": {k: ("ap89-bm25-20-dev-24-hybrid", _hybrid(k)) for k in BUDGETS},
            "hybrid, per-head budgets": {
                k: ("ap89-bm25-20-dev-24-hybrid", _hybrid(k, " per-head")) for k in BUDGETS
            },
            "gists over the reader": {
                16: ("ap89-bm25-20-dev-24-gists-k16-k32", "gist k=16"),
                32: ("ap89-bm25-20-dev-24-gists-k16-k32", "gist k=32"),
                64: ("ap89-bm25-20-dev-24-gpu-gists", "gist k=64"),
            },
            "48 raw + 16 gists, trained": {64: ("ap89-bm25-20-dev-24-hybrid-t48-k16-es", "gist t=48 k=16")},
        },
    ),
    "LoRA teacher, judged lists": _teacher_panel("ap89-judged-20-dev-24-teacher", "hybrid", "gists-k16-k32"),
    "LoRA teacher, BM25's top 20": _teacher_panel("ap89-bm25-20-dev-24-teacher", "kvzip", "gists"),
}
# the default, prefix 64 on the base, on each list kind: the level every system is compared with
DEFAULT = {
    "judged": ("ap89-judged-20-dev-24-gpu", "prefix 64 · gist k=64"),
    "BM25": ("ap89-bm25-20-dev-24-selection", "prefix 64 · select k=64"),
}
GOAL = 0.90  # the goal for recall@10 vs the reader at ≤ 64 positions
STYLE = {"marker": "o", "ms": 4, "lw": 1.2}


@functools.cache
def _read(folder: str) -> EvalResult:
    return EvalResult.read(HERE / folder)


def _mean(folder: str, system: str, metric: str, topics: frozenset[str]) -> float:
    """`system`'s mean `metric` over `topics`, from `folder`'s per-topic records."""
    values = [r.metrics[metric] for r in _read(folder).records if r.system == system and r.query_id in topics]
    if len(values) != len(topics):
        raise KeyError(f"{folder}/results.json has {len(values)} of {len(topics)} topics for {system!r}")
    return sum(values) / len(values)


def main() -> None:
    families = list(SOURCES["base reader, judged lists"][1])
    colors = dict(zip(families, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
    fig, axes = plt.subplots(2, len(SOURCES), figsize=(4.2 * len(SOURCES), 7.6), sharex=True)
    rows = ["| panel | system | 16 | 32 | 64 |", "|---|---|---|---|---|"]
    for col, (panel, (levels, panel_families)) in enumerate(SOURCES.items()):
        topics = frozenset(r.query_id for r in _read(levels).records if r.system == "teacher")
        for row, (metric, label) in enumerate((("ndcg@10", "nDCG@10"), ("recall@10", "recall@10 vs reader"))):
            ax = axes[row][col]
            for name, family in panel_families.items():
                ks = sorted(family)
                ys = [_mean(*family[k], metric, topics) for k in ks]
                style = STYLE if len(ks) > 1 else {"marker": "D", "ms": 7}  # a lone point stands out
                ax.plot(ks, ys, color=colors[name], label=name, **style)
                if metric == "ndcg@10":
                    cells = {k: f"{y:.3f}" for k, y in zip(ks, ys, strict=True)}
                    rows.append(
                        f"| {panel} | {name} | " + " | ".join(cells.get(k, "–") for k in BUDGETS) + " |"
                    )
            if metric == "ndcg@10":
                reader = _mean(levels, "teacher", metric, topics)
                ax.axhline(reader, color="black", ls="-.", lw=1, label="reader, whole article")
                default = _mean(*DEFAULT["judged" if "judged" in panel else "BM25"], metric, topics)
                ax.plot(
                    [64], [default], "*", color="crimson", ms=12, label="the default (prefix 64 on the base)"
                )
            else:
                ax.axhline(GOAL, color="crimson", ls="-", lw=1, label="the goal: recall@10 vs reader 0.90")
            for name, style in (("bm25", "--"), ("no item", ":")):
                level = _mean(levels, name, metric, topics)
                ax.axhline(level, color="gray", ls=style, lw=1, label="BM25" if name == "bm25" else name)
            ax.set_xscale("log", base=2)
            ax.set_xticks(BUDGETS, [f"{k}\n{k * KIB_PER_POSITION:,.0f} KiB" for k in BUDGETS])
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(panel, fontsize=10)
            if col == 0:
                ax.set_ylabel(label)
            if row == 1:
                ax.set_xlabel("stored positions per item (bf16 bytes)")
    handles: dict[str, object] = {}
    for ax in axes.flat:
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(name, handle)
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle("AP89 dev, 24 topics: compressed readings at ≤ 64 stored positions, by reader and lists")
    fig.tight_layout(rect=(0, 0.08, 1, 0.97))
    out = HERE / "frozen-gists-decision.png"
    fig.savefig(out, dpi=110)
    print("\n".join(rows))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
