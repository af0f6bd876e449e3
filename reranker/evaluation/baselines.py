"""The baselines a trained gist student is measured against (DESIGN §5), at matched storage and cost.

* `bm25_scores`: lexical ranking of the rendered item text (Okapi BM25, k1 = 0.9, b = 0.4 — Anserini's
  defaults —, IDF and mean length over the whole collection: `CollectionStats`).
* `prefix_reader`: prefix caching cut to the same budget — the K/V of each item's first B tokens in
  place of the (hybrid prefix +) gists, read by a model's body and head; an item shorter than B is
  stored whole.
* `untrained_gists`: the same model with its initial gist embeddings (what training the gists added).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import torch

from reranker.core.config import SETTING_OWNERS, RerankerConfig
from reranker.core.model import Reranker
from reranker.data.relevance_data import CollectionStats, bm25_terms, collection_stats

BM25_K1, BM25_B = 0.9, 0.4  # Anserini's defaults (TREC newswire); also the import's bm25:N first stage


def bm25_scores(
    query: str,
    docs: Sequence[str],
    k1: float = BM25_K1,
    b: float = BM25_B,
    collection: CollectionStats | None = None,
) -> list[float]:
    """Okapi BM25 of `query` against `docs` over `bm25_terms`:
    Σ_{t ∈ q} idf(t) · tf (k1 + 1) / (tf + k1 (1 − b + b · |d| / avgdl)), idf(t) = ln(1 + (N − df + 0.5) /
    (df + 0.5)) (Lucene's, never negative), each distinct query term once. N, df and avgdl are the
    `collection`'s — a baseline must not learn IDF from the candidate list it ranks (a term frequent in
    this list but rare in the collection would count for nothing). Without `collection` the docs are
    taken as the whole collection."""
    tokenized = [bm25_terms(doc) for doc in docs]
    stats = collection or collection_stats(docs)
    n, avg_len = stats.documents, stats.avg_length or 1.0
    terms = set(bm25_terms(query))
    idf = {t: math.log(1 + (n - stats.doc_freq(t) + 0.5) / (stats.doc_freq(t) + 0.5)) for t in terms}
    scores = []
    for doc in tokenized:
        tf = Counter(doc)
        norm = k1 * (1 - b + b * len(doc) / avg_len)
        scores.append(math.fsum(idf[t] * tf[t] * (k1 + 1) / (tf[t] + norm) for t in terms if tf[t]))
    return scores


def untrained_gists(model: Reranker) -> Reranker:
    """`model`'s body and head with its initial gist embeddings (its fingerprint rightly differs: K/V of
    one set of gists must not be read by a model holding the other)."""
    return model.with_gist_config(model.gist)


def gists_untrained(model: Reranker) -> bool:
    """`model`'s gists are its seeded initial ones and its gist adapter adds nothing: a base read with
    `compressor=gist` (e.g. untrained pooled gists), which is its own untrained-gists control."""
    initial = model.initial_gist_embeddings(model.lm, model.gist.num_gist).to(model.gist_embeddings)
    adapter = model.gist_adapter
    return torch.equal(model.gist_embeddings, initial) and (adapter is None or not adapter.up.any())


def prefix_config(gist: RerankerConfig, budget: int) -> RerankerConfig:
    """`gist` set up to store prefix caching of `budget` positions per item: the "prefix" compressor with
    t = 0, k = `budget` — the K/V of the item's first min(budget, j) tokens, the query right after them
    (an item shorter than the budget is stored whole)."""
    update = {"num_gist": budget, "keep_item_prefix": 0, "compressor": "prefix"}
    # settings only another compressor reads go back to their defaults, so the controls of students that
    # differ only there (a SnapKV and a KVzip student of one body) are one system, scored once
    defaults = {name: RerankerConfig.model_fields[name].default for name in SETTING_OWNERS}
    return RerankerConfig(**(gist.model_dump() | defaults | update))


def prefix_reader(model: Reranker, budget: int) -> Reranker:
    """`model`'s body and head reading prefix caching of `budget` positions (`prefix_config`): the
    baseline at the same budget, read by the same body and head."""
    return model.with_gist_config(prefix_config(model.gist, budget))
