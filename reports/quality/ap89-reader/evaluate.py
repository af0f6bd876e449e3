"""A trained reader against BM25 and the default on one AP89 dev list kind, on the same stored units.

Each dev list is compressed once by the store (the default: each article's first 64 tokens) and read by
the default reader and by the trained one (the same store fingerprint: the very units serving would hold),
beside BM25 (the eval's baseline: Okapi over the rendered article, the collection's statistics); each
reranker also fused with BM25 (min-max per list, weight fitted leave-one-query-out: `evaluation/fusion.py`).
`--whole-article` pairs with an earlier evaluation's whole-article zero-shot reader (its `teacher` rows).
Prints the Markdown table of the report and writes per-query nDCG@10 to `--out`.

    .venv/bin/python reports/quality/ap89-reader/evaluate.py --data data/ap89-bm25-20 \
        --reader runs/ap89-reader/labels-pseudo/checkpoint --out reports/quality/ap89-reader/bm25-20.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tqdm.auto import tqdm

from reranker import Reranker
from reranker.core.checkpoints import PREFIX64_MODEL
from reranker.core.fusion import interpolate
from reranker.data.relevance_data import RelevanceSet
from reranker.evaluation.baselines import bm25_scores
from reranker.evaluation.fusion import fit_weight
from reranker.evaluation.results import Difference
from reranker.ranking_metrics import bootstrap_ci, ndcg_at_k


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a relevance set folder (its dev split is read)")
    parser.add_argument("--reader", required=True, help="the trained reader's checkpoint")
    parser.add_argument("--store", default=PREFIX64_MODEL, help="the store (and the default reader)")
    parser.add_argument("--whole-article", help="results.json of an eval whose teacher read whole articles")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()

    torch.set_num_threads(2)
    dev = RelevanceSet.load_jsonl(args.data).split("dev")
    store = Reranker.read(args.store, device="cpu")
    reader = Reranker.read(args.reader, device="cpu")
    if reader.fingerprint != store.fingerprint:
        raise SystemExit(f"{args.reader} reads another store than {args.store}")
    scores: dict[str, dict[str, list[float]]] = {"bm25": {}, "default": {}, "reader": {}}
    labels, ids = {}, {}
    for q in tqdm(dev.queries, desc="dev lists"):
        cands = dev.candidates(q.query_id)
        ids[q.query_id], labels[q.query_id] = [i for i, _ in cands], [label for _, label in cands]
        texts = [dev.items[i].text for i, _ in cands]
        units = store.as_stored(store.compress(texts))  # once, as served: both readers read these units
        scores["bm25"][q.query_id] = bm25_scores(q.text, texts, collection=dev.collection)
        scores["default"][q.query_id] = store.score(q.text, units).tolist()
        scores["reader"][q.query_id] = reader.score(q.text, units).tolist()

    def ndcg(system_scores: dict[str, list[float]]) -> dict[str, float]:
        return {q: ndcg_at_k(s, labels[q], 10, ids[q]) for q, s in system_scores.items()}

    per_query = {name: ndcg(s) for name, s in scores.items()}
    weights = {}
    for name in ("default", "reader"):
        fitted = fit_weight(scores[name], scores["bm25"], labels, ids)
        weights[name] = fitted.weight
        fused = {q: interpolate(scores[name][q], scores["bm25"][q], fitted.held_out[q]) for q in scores[name]}
        per_query[f"{name} + bm25"] = ndcg(fused)
    if args.whole_article:
        records = json.loads(Path(args.whole_article).read_text())["records"]
        whole = {r["query_id"]: r["ndcg@10"] for r in records if r["system"] == "teacher"}
        if whole.keys() == per_query["bm25"].keys():
            per_query["whole article (zero-shot)"] = whole

    queries = list(per_query["bm25"])
    print(f"{args.data} dev: {len(queries)} topics; fusion weights (all topics): {weights}")
    print("| system | nDCG@10 [95% CI] | − BM25 | − default |")
    print("|---|---|---|---|")
    for name, values in per_query.items():
        mean = sum(values.values()) / len(values)
        lo, hi = bootstrap_ci(list(values.values()))
        vs = [
            str(Difference.of([values[q] - per_query[base][q] for q in queries])) if name != base else "–"
            for base in ("bm25", "default")
        ]
        print(f"| {name} | {mean:.3f} [{lo:.3f}, {hi:.3f}] | {vs[0]} | {vs[1]} |")
    args.out.write_text(json.dumps({"fusion_weights": weights, "ndcg@10": per_query}, indent=1) + "\n")


if __name__ == "__main__":
    main()
