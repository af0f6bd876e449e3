"""The baselines a trained gist student is measured against (DESIGN §5), at matched storage and cost.

* `bm25_scores`: lexical ranking of the rendered item text (Okapi BM25, IDF over the candidate list).
* `compress_prefix` with `prefix_reader`: prefix caching cut to the same budget — the K/V of each
  item's first B tokens in place of the (hybrid prefix +) gists, read by a model's body and head.
* `untrained_gists`: the same model with its initial gist embeddings (what training the gists added).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import torch

from reranker.core.config import GistConfig
from reranker.core.errors import EmptyInputError
from reranker.core.kv import GistKV
from reranker.core.model import GistReranker

_WORD = re.compile(r"[a-z0-9]+(?:\.[0-9]+)?")


def bm25_scores(query: str, docs: Sequence[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Okapi BM25 of `query` against `docs`, IDF over those docs (the candidate list)."""
    tokenized = [_WORD.findall(d.lower()) for d in docs]
    avg_len = sum(map(len, tokenized)) / len(tokenized) or 1.0
    df = Counter(term for doc in tokenized for term in set(doc))
    n = len(docs)
    scores = []
    for doc in tokenized:
        tf = Counter(doc)
        score = 0.0
        for term in set(_WORD.findall(query.lower())):
            if tf[term]:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * tf[term] * (k1 + 1) / (tf[term] + k1 * (1 - b + b * len(doc) / avg_len))
        scores.append(score)
    return scores


def untrained_gists(model: GistReranker) -> GistReranker:
    """`model`'s body and head with its initial gist embeddings (its fingerprint rightly differs: K/V of
    one set of gists must not be read by a model holding the other)."""
    return model.with_gist_config(model.gist)


def prefix_reader(model: GistReranker, budget: int) -> GistReranker:
    """`model`'s body and head set up to read `compress_prefix` K/V of `budget` positions per item: a
    pure gist layout (t = 0) of k = `budget` "gists" that are item tokens."""
    plain = GistConfig(**(model.gist.model_dump() | {"num_gist": budget, "keep_item_prefix": 0}))
    return model.with_gist_config(plain)


@torch.inference_mode()
def compress_prefix(model: GistReranker, items: Sequence[str], batch_size: int = 16) -> list[GistKV]:
    """Baseline at the same budget: the K/V of each item's first t + k tokens in place of the hybrid
    prefix + gists — plain prefix caching cut to t + k positions. Stored like a hybrid entry whose
    "gists" are item tokens t … t+k-1 (item_tokens = t, so the query follows at t + k), and `score`
    serves it unchanged. Items shorter than t + k tokens raise `EmptyInputError`."""
    item_ids, _ = model.item_ids(items)
    t, n = model.gist.keep_item_prefix, model.gist.keep_item_prefix + model.gist.num_gist
    short = [i for i, ids in enumerate(item_ids) if len(ids) < n]
    if short:
        raise EmptyInputError(f"items {short} have fewer than t + k = {n} tokens: no prefix that long")
    out: list[GistKV] = []
    for start in range(0, len(item_ids), batch_size):
        rows = [model.embed(ids[:n]) for ids in item_ids[start : start + batch_size]]
        kvs = model.causal_kv(rows, [torch.arange(n, device=model.device)] * len(rows))
        out += [GistKV(kv, model.fingerprint, item_tokens=t, prefix_tokens=t) for kv in kvs]
    return out
