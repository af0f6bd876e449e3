"""Quality per byte: the untouched reader over prefix caching of 16 to 512 positions, each stored at
float32 / bfloat16 / int8 / int4 / int2, against the whole-article reader — on the dev lists of one or
more relevance sets (the reader: `gistrank-base-ql-prefix64`'s, SmolLM2-135M by query likelihood).
Writes every system's per-candidate scores to `--out` (the table: `table.py`).

Each candidate is compressed once, its whole item (up to the default's 1,024-token cap) as prefix
caching of 1,024 positions: read back by that reader it is the whole-article reader (the
equivalence test: prefix caching of the whole item reads as the full forward), and its first T columns
are prefix caching of T positions (a causal body's first T keys and values do not depend on later
tokens; checked below against compressing at T). Each (T, storage) unit then goes through the codec
(`Reranker.as_stored`: encoded at that storage and decoded) and is read by the default reader under
that setting — the units serving would hold, with their fingerprints.

    .venv/bin/python reports/quality/bytes/evaluate.py --data judged-20=data/ap89-judged-20 \\
        --data bm25-20=data/ap89-bm25-20 --out runs/bytes/ap89.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from reranker import Reranker
from reranker.core.checkpoints import PREFIX64_MODEL
from reranker.core.config import RerankerConfig
from reranker.core.kv import Kept, StoredUnit
from reranker.core.kv_codec import decode, encode, payload_nbytes
from reranker.data.relevance_data import RelevanceSet
from reranker.evaluation.baselines import bm25_scores, prefix_config

WHOLE = 1024  # the default's item cap: prefix caching of this many positions is the whole item
# (positions, storage): equal bytes in columns — ~1,440 KiB, ~720, ~360 — plus float32 and 2× bf16 above
SETTINGS = [
    (64, "float32"),
    (128, "bfloat16"),
    (64, "bfloat16"),
    (128, "int8"),
    (256, "int4"),
    (512, "int2"),
    (32, "bfloat16"),
    (64, "int8"),
    (128, "int4"),
    (256, "int2"),
    (16, "bfloat16"),
    (32, "int8"),
    (64, "int4"),
    (128, "int2"),
    (32, "int4"),
    (64, "int2"),
]


def name(positions: int, storage: str) -> str:
    return f"prefix {positions} {storage}"


def readers(store: Reranker) -> dict[str, Reranker]:
    """The default reader under each setting (its store fingerprint says positions and storage)."""
    out = {}
    for positions, storage in SETTINGS:
        config = RerankerConfig(
            **(prefix_config(store.gist, positions).model_dump() | {"kv_storage": storage})
        )
        out[name(positions, storage)] = store.with_gist_config(config)
    return out


def cut(unit: StoredUnit, reader: Reranker) -> StoredUnit:
    """Prefix caching of `reader`'s budget, cut from the whole item's unit, as the store returns it."""
    kept = Kept(unit.kv[..., : reader.gist.num_gist, :].clone())
    return reader.as_stored([reader.stored_unit(kept, unit.item_tokens, unit.truncated)])[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", action="append", required=True, help="NAME=FOLDER of a relevance set")
    parser.add_argument("--max-queries", type=int, help="the first N dev queries of each set")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()

    torch.set_num_threads(2)
    store = Reranker.read(PREFIX64_MODEL, device="cpu")
    whole = store.with_gist_config(prefix_config(store.gist, WHOLE))
    by_setting = readers(store)
    dims = (store.num_layers, store.num_kv_heads, store.head_dim)
    out: dict[str, object] = {
        "model": PREFIX64_MODEL,
        "compute_dtype": str(store.dtype).removeprefix("torch."),
        "kib": {
            n: payload_nbytes(dims[0], p, dims[1], dims[2], s) / 1024
            for n, (p, s) in zip(by_setting, SETTINGS, strict=True)
        },
        "sets": {},
    }
    sets, queries = {}, {}
    for spec in args.data:
        set_name, _, folder = spec.partition("=")
        sets[set_name] = RelevanceSet.load_jsonl(folder).split("dev", args.max_queries)
        queries[set_name] = {q.query_id: q for q in sets[set_name].queries}
        out["sets"][set_name] = {}  # type: ignore[index]
    query_ids = list(dict.fromkeys(q for by_id in queries.values() for q in by_id))
    first_texts: list[str] = []
    for query_id in tqdm(query_ids, desc="dev queries", unit="query"):
        # an item in several sets' lists of this query (judged and BM25's top 20) is compressed once
        texts = {
            i: dev.items[i].text
            for set_name, dev in sets.items()
            if query_id in queries[set_name]
            for i, _ in dev.candidates(query_id)
        }
        units = dict(zip(texts, whole.compress(list(texts.values()), batch_size=4), strict=True))
        for set_name, dev in sets.items():
            if query_id not in queries[set_name]:
                continue
            q = queries[set_name][query_id]
            cands = dev.candidates(query_id)
            listed = [units[i] for i, _ in cands]
            first_texts = first_texts or [texts[i] for i, _ in cands]
            scores = {
                "bm25": bm25_scores(q.text, [texts[i] for i, _ in cands], collection=dev.collection),
                "whole article": whole.score(q.text, listed).tolist(),
            }
            for n, reader in by_setting.items():
                scores[n] = reader.score(q.text, [cut(u, reader) for u in listed]).tolist()
            out["sets"][set_name][query_id] = {  # type: ignore[index]
                "ids": [i for i, _ in cands],
                "labels": [label for _, label in cands],
                "fields": sorted(q.fields),
                "hard": q.hard,
                "positions": [u.positions for u in listed],
                "scores": scores,
            }

    # cutting equals compressing at T (checked on the first list), then the costs on that list
    units = whole.compress(first_texts, batch_size=4)
    timing: dict[str, dict[str, float]] = {}
    for n, reader in tqdm(by_setting.items(), desc="timing", unit="setting"):
        start = time.perf_counter()
        own = reader.compress(first_texts, batch_size=4)
        compress_s = time.perf_counter() - start
        cuts = [cut(u, reader) for u in units]
        if reader.gist.storage == "float32":
            gap = max(float((a.kv - b.kv).abs().max()) for a, b in zip(own, cuts, strict=True))
            assert gap < 1e-3, f"{n}: cutting the whole item's unit differs from compressing by {gap}"
        blobs = [encode(c, "0" * 64, reader.gist.storage) for c in cuts]
        start = time.perf_counter()
        for _ in range(3):
            reader.score("economic sanctions", [decode(b, dtype=reader.kv_dtype).kv for b in blobs])
        online_s = (time.perf_counter() - start) / 3
        n_items = len(first_texts)
        timing[n] = {
            "compress_ms_per_item": 1e3 * compress_s / n_items,
            "ms_per_candidate": 1e3 * online_s / n_items,
        }
    start = time.perf_counter()
    store.score_full("economic sanctions", first_texts)
    timing["whole article"] = {"ms_per_candidate": 1e3 * (time.perf_counter() - start) / len(first_texts)}
    out["timing"] = timing
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
