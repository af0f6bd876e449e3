"""TREC run and qrels files of an evaluation (`gistrank eval --run-dir DIR`), so that any IR tool
(trec_eval, ir_measures, ranx) can score, fuse or compare the systems.

    DIR/<tag>.run   one per system that finished: `qid Q0 docno rank score tag`, the standard 6
                    columns, every candidate of every query, rank 1 = best
    DIR/qrels.txt   the evaluated split's labels: `qid 0 docno label`, every candidate (label 0
                    included; in a `bm25:N` set an unjudged candidate is 0)
    DIR/runs.json   system name → run file (tags are the names with anything but [A-Za-z0-9._=+-]
                    replaced by `_`)
    DIR/cache.json  system name → {run, key, costs}: what produced the run (model fingerprints and
                    settings) and its measured costs, so that a rerun into the same DIR reuses every
                    query a system's run holds under an unchanged key (`load_cached`) and scores only
                    the rest — an evaluation sized to a CPU grows topic by topic

Writing loses no cached score (`save_runs`): a system's run also keeps the queries its previous run
held under the same key that this evaluation did not score (a trial on fewer queries, or a stop
part-way), and a system left out of this evaluation keeps its run and cache entry. So a run file may
hold more queries than qrels.txt, which holds the evaluated slice's; trec_eval and ir_measures score
the queries of the qrels.

Rank follows trec_eval's rule (score descending, ties by docno descending), which the project's metrics
share when given the item ids, so ties (e.g. `no item`'s constant scores) score the same everywhere.

Agreement with the project's metrics (checked in tests/test_trec.py with ir_measures/pytrec_eval, ties
and graded labels included):
* nDCG@10: gain the label, discount 1/log2(rank + 1), ideal from the list's labels (trec_eval takes it
  from the qrels — here exactly the list's labels): ir_measures' `nDCG@10`; with
  `gain="exponential"`, `nDCG(gains={l: 2**l - 1})@10`.
* overlap@K with the reference ("recall@K" in results.json): R@K of the system's run against qrels
  holding the reference run's top K (label 1): |top-K(system) ∩ top-K(reference)| / min(K, N).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reranker.data.relevance_data import RelevanceSet
from reranker.ranking_metrics import ranking

_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]+")


def run_tag(system: str) -> str:
    """A run tag (one whitespace-free token, also the file name) for a system name."""
    return _UNSAFE.sub("_", system).strip("_") or "run"


def run_lines(tag: str, ranked: Mapping[str, tuple[Sequence[str], Sequence[float]]]) -> list[str]:
    """Lines of a run: per query id, (candidate docnos, their scores) in candidate order."""
    lines = []
    for qid, (docnos, scores) in ranked.items():
        for rank, i in enumerate(ranking(scores, docnos), start=1):
            lines.append(f"{qid} Q0 {docnos[i]} {rank} {float(scores[i])!r} {tag}")
    return lines


def write_qrels(path: Path, relevance: RelevanceSet) -> None:
    lines = [
        f"{query.query_id} 0 {item_id} {label}"
        for query in relevance.queries
        for item_id, label in relevance.candidates(query.query_id)
    ]
    path.write_text("\n".join(lines) + "\n")


def write_runs(
    run_dir: Path,
    relevance: RelevanceSet,
    scores: Mapping[str, Mapping[str, Sequence[float]]],
    carried: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Path]:
    """One run file per system in `scores` (system → query id → one score per candidate, in the set's
    candidate order) followed by its `carried` lines (other queries' run lines), qrels.txt and
    runs.json in `run_dir` → system → its run file."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_qrels(run_dir / "qrels.txt", relevance)
    docnos = {q.query_id: [item for item, _ in relevance.candidates(q.query_id)] for q in relevance.queries}
    files: dict[str, Path] = {}
    taken: set[str] = set()
    for system, by_query in scores.items():
        tag = base = run_tag(system)
        n = 1
        while tag in taken:  # two names that sanitize alike
            n += 1
            tag = f"{base}_{n}"
        taken.add(tag)
        ranked = {qid: (docnos[qid], values) for qid, values in by_query.items()}
        files[system] = run_dir / f"{tag}.run"
        lines = run_lines(tag, ranked) + list((carried or {}).get(system, ()))
        files[system].write_text("\n".join(lines) + "\n")
    index = {system: path.name for system, path in files.items()}
    (run_dir / "runs.json").write_text(json.dumps(index, indent=2, ensure_ascii=False) + "\n")
    return files


def read_run(path: Path) -> dict[str, dict[str, float]]:
    """A run file → query id → docno → score (the score column read back exactly as written)."""
    out: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            qid, _q0, docno, _rank, score, _tag = line.split()
            out.setdefault(qid, {})[docno] = float(score)
    return out


def save_runs(
    run_dir: Path,
    relevance: RelevanceSet,
    scores: Mapping[str, Mapping[str, Sequence[float]]],
    keys: Mapping[str, str | None],
    costs: Mapping[str, Mapping[str, float]],
) -> dict[str, Path]:
    """`write_runs` and cache.json (each system with a key: its run, key and costs; derived systems,
    re-fitted each run, have none), losing no cached score (module docstring) → system → its run file."""
    before = _cache_index(run_dir)
    carried = {}
    for system, by_query in scores.items():
        entry = before.get(system)
        if keys.get(system) and isinstance(entry, dict) and entry.get("key") == keys[system]:
            try:
                lines = (run_dir / entry["run"]).read_text().splitlines()
            except (OSError, KeyError):
                continue
            carried[system] = [line for line in lines if line.strip() and line.split()[0] not in by_query]
    files = write_runs(run_dir, relevance, scores, carried)
    written = {path.name for path in files.values()}
    index = {
        system: entry
        for system, entry in before.items()
        if system not in files
        and isinstance(entry, dict)
        and entry.get("run") not in written
        and (run_dir / str(entry.get("run"))).is_file()
    }
    index |= {
        system: {"run": path.name, "key": keys[system], "costs": dict(costs.get(system, {}))}
        for system, path in files.items()
        if keys.get(system)
    }
    (run_dir / "cache.json").write_text(json.dumps(index, indent=2, ensure_ascii=False) + "\n")
    return files


def _cache_index(run_dir: Path) -> dict[str, Any]:
    """cache.json; a missing or unreadable one is no cache."""
    try:
        index = json.loads((run_dir / "cache.json").read_text())
    except (OSError, ValueError):
        return {}
    return index if isinstance(index, dict) else {}


def load_cached(
    run_dir: Path, relevance: RelevanceSet, keys: Mapping[str, str | None]
) -> tuple[dict[str, dict[str, list[float]]], dict[str, dict[str, Any]]]:
    """Scores a previous evaluation left in `run_dir` for the systems whose key is unchanged → (system →
    query id → scores in `relevance`'s candidate order, for every query whose candidates the run holds
    all of; system → its saved costs). A missing or unreadable cache is no cache."""
    index = _cache_index(run_dir)
    scores: dict[str, dict[str, list[float]]] = {}
    costs: dict[str, dict[str, Any]] = {}
    for system, key in keys.items():
        entry = index.get(system)
        if not key or not isinstance(entry, dict) or entry.get("key") != key:
            continue
        try:
            run = read_run(run_dir / entry["run"])
        except (OSError, ValueError, KeyError):
            continue
        by_query = {}
        for query in relevance.queries:
            held = run.get(query.query_id, {})
            docnos = [item for item, _ in relevance.candidates(query.query_id)]
            if all(d in held for d in docnos):
                by_query[query.query_id] = [held[d] for d in docnos]
        scores[system] = by_query
        costs[system] = dict(entry.get("costs", {}))
    return scores, costs
