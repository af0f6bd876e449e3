"""The plots of an evaluation: each metric against the K/V positions a system stores per item (`plot`),
and quality against the bytes it stores (`plot_vs_bytes`), one line per family of compressed systems,
the others as levels; matplotlib is imported only when a plot is drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from reranker.evaluation.results import EvalResult, Means, SystemFacts, SystemSummary, metric_header

_LEVELS = {"bm25": {"color": "gray", "ls": "--"}, "no item": {"color": "gray", "ls": ":"}}


def _level_styles(names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The horizontal line of each system with no stored positions: BM25 and the no-item floor grey,
    the reference black, every other full-context model a colour of its own (its BM25 interpolation
    dotted), so that several of them stay apart in the legend."""
    import matplotlib

    dark = matplotlib.colormaps["Dark2"]
    others = [n for n in names if n not in _LEVELS and n != "teacher"]
    styles = {
        n: {"color": dark(i % 8), "ls": ":" if n.endswith(" + bm25") else "-."} for i, n in enumerate(others)
    }
    return styles | {"teacher": {"color": "black", "ls": "-."}} | _LEVELS


def _palette(n: int) -> list:
    """n colours for n plotted families: the default cycle while it lasts (10), then tab20's 20, so
    that two families do not share a colour in a wide sweep."""
    import matplotlib

    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    return colors if n <= len(colors) else [matplotlib.colormaps["tab20"](i % 20) for i in range(n)]


def plot(summary: Mapping[str, SystemSummary], systems: Mapping[str, SystemFacts], out: Path) -> list[Path]:
    """One PNG per metric: metric vs stored K/V positions per item (k, or t + k for a hybrid), one panel
    for all queries and one per item-length quartile, one colour per system family — trained gists vs
    prefix caching (scored by the same student) vs untrained gists — with BM25, the no-item floor and
    other full-context models as horizontal lines. No students, no plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = sorted({f.family for f in systems.values() if f.positions})
    if not families:  # only full-context models and baselines: nothing varies with k
        return []
    colors = _palette(len(families))
    quartiles = sorted({q for s in summary.values() for q in s.by_length_quartile})
    panels: list[tuple[str, Callable[[SystemSummary], Means | None]]] = [("all queries", lambda s: s.all)]
    panels += [(f"item-length quartile Q{q}", lambda s, q=q: s.by_length_quartile.get(q)) for q in quartiles]
    paths = []
    for metric in ("recall@5", "recall@10", "ndcg@10"):
        fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 4), sharey=True, squeeze=False)
        for ax, (title, part) in zip(axes[0], panels, strict=True):
            for index, family in enumerate(families):
                runs = sorted(
                    (f.positions, means[metric])
                    for name, f in systems.items()
                    if f.family == family and (means := part(summary[name]))
                )
                xs, ys = zip(*runs, strict=True)
                ax.plot(xs, ys, marker="o", color=colors[index % len(colors)], label=family)
            levels = _level_styles([n for n, f in systems.items() if not f.positions])
            for name, facts in systems.items():
                if facts.positions or name == "teacher" or not (means := part(summary[name])):
                    continue
                ax.axhline(means[metric], **levels[name], label=name)
            ax.set_xscale("log", base=2)
            ax.set_title(title)
            ax.set_xlabel("stored K/V positions per item")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(metric)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
        fig.suptitle(f"{metric} vs stored positions (k, or t + k)")
        path = out / f"{metric.replace('@', '_at_')}_vs_k.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


def plot_vs_bytes(result: EvalResult, out: Path) -> Path | None:
    """quality_vs_bytes.png: nDCG@10 and recall@10 against the K/V bytes each compressed system stores
    per item in int8 (log scale), one line per family; full-context models and BM25 as levels. None
    when no system stored K/V."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sized = {
        name: costs["bytes_int8"] / 1024
        for name, costs in result.costs.items()
        if "bytes_int8" in costs and name in result.summary
    }
    if not sized:
        return None
    families = sorted({result.systems[name].family for name in sized})
    colors = _palette(len(families))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), squeeze=False)
    for ax, metric in zip(axes[0], ("ndcg@10", "recall@10"), strict=True):
        for index, family in enumerate(families):
            points = sorted(
                (kib, result.summary[name].all[metric])
                for name, kib in sized.items()
                if result.systems[name].family == family
            )
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", color=colors[index % len(colors)], label=family)
        levels = _level_styles([n for n, f in result.systems.items() if f.positions is None])
        for name, facts in result.systems.items():
            if (
                facts.positions is None
                and name in result.summary
                and (metric != "recall@10" or name != "teacher")
            ):
                ax.axhline(result.summary[name].all[metric], **levels[name], lw=1, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("stored K/V per item, KiB (int8)")
        ax.set_ylabel(metric_header(metric, result.gain))
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle(f"Quality vs stored bytes ({result.queries} queries of split {result.split})")
    path = out / "quality_vs_bytes.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
