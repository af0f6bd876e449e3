"""Online speed-up benchmark: `score` (query vs injected gist K/V) against `score_full` (item + query).

Per candidate the full cross-encoder runs j + ℓ positions and the gist path ℓ, so the ideal speed-up is
(j + ℓ)/ℓ (DESIGN §3). Both paths score the same N candidates with one batched forward; the gist
K/V is compressed beforehand (offline work, timed apart: ms per item for the chosen compressor — gists
are one causal forward; selection adds the attention weights of an eager forward). Beside them, per
storage precision, the online path as serving runs it on a store hit: each candidate's blob decoded
(dequantized, for int8 / int4 / int2) and scored — ms per candidate, in the same run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import torch
from rich.console import Console
from tqdm.auto import tqdm

from reranker.bench.harness import model_meta, rate
from reranker.core.config import RerankerConfig, resolve_dtype
from reranker.core.kv_codec import decode, encode
from reranker.core.model import Reranker
from reranker.evaluation.tables import publish

DISTINCT_ITEMS = 10
FILLER = (
    "Stainless steel body, 1.7 litre capacity, 2200 W heating element, auto shut-off, boil-dry protection, "
    "360 degree base, limescale filter, model KT-1700-SS, year 2023, warranty 2 years. "
)


def _text_of_tokens(model: Reranker, n: int, salt: int) -> str:
    """Item text of about n tokens with BOS (decoded from n - 1 ids; BPE may re-merge one or two)."""
    text = f"Item {salt}. " + FILLER * (n // 8)
    ids = model.tokenizer(text, add_special_tokens=False)["input_ids"][: n - 1]
    return model.tokenizer.decode(ids)


def _query_of_tokens(model: Reranker, n_online: int) -> str:
    """A query whose templated ids + score token are n_online tokens (± one where BPE merges differ)."""
    words = [
        "stainless",
        "steel",
        "kettle",
        "1.7",
        "litre",
        "2200",
        "W",
        "auto",
        "shut-off",
        "2023",
        "model",
        "KT-1700-SS",
        "warranty",
    ]
    query = words[0]
    i = 1
    while model.tail_length(query) < n_online:
        query += " " + words[i % len(words)]
        i += 1
    return query


def run_score_bench(
    base: str,
    candidates: int,
    query_tokens: int,
    item_tokens: list[int],
    num_gist: int,
    dtype: str,
    repeats: int,
    out: Path,
    compressor: str = "gist",
    storages: Sequence[str] = ("bfloat16", "int8", "int4", "int2"),
) -> list[dict]:
    console = Console()
    dtype = resolve_dtype(dtype)
    gist = RerankerConfig(
        num_gist=num_gist, dtype=dtype, max_item_tokens=max(item_tokens), compressor=compressor
    )
    model = Reranker.from_pretrained(base, gist)
    query = _query_of_tokens(model, query_tokens)
    ell = model.tail_length(query)
    rows = []
    for j in tqdm(item_tokens, desc="item length", unit="j"):
        # DISTINCT_ITEMS texts repeated up to N candidates: the timed forwards cost the same, and the
        # (untimed) compression of each j stays short
        distinct = [_text_of_tokens(model, j, salt) for salt in range(min(candidates, DISTINCT_ITEMS))]
        items = [distinct[i % len(distinct)] for i in range(candidates)]
        start = time.perf_counter()
        compressed = model.compress(distinct, progress=True)
        compress_ms = 1000 * (time.perf_counter() - start) / len(distinct)
        kvs = [compressed[i % len(distinct)] for i in range(candidates)]
        mean_j = sum(kv.item_tokens for kv in kvs) / len(kvs)
        online_rate = rate(lambda kvs=kvs: model.score(query, kvs), candidates, repeats)
        from_blobs = {}
        for storage in storages:
            blobs = [encode(kv, "0" * 64, storage) for kv in compressed]
            read = [blobs[i % len(blobs)] for i in range(candidates)]

            def hit(read: list[bytes] = read) -> None:  # serving's hit path: decode, then score
                model.score(query, [decode(b, dtype=model.kv_dtype).kv for b in read])

            from_blobs[storage] = 1000 / rate(hit, candidates, repeats)
        with torch.inference_mode():
            full_rate = rate(lambda items=items: model.score_full(query, items), candidates, 1, warmup=False)
        ideal = (mean_j + ell) / ell
        rows.append(
            {
                "item_tokens": j,
                "mean_item_tokens": mean_j,
                "online_tokens": ell,
                "candidates": candidates,
                "online_candidates_per_s": online_rate,
                "full_candidates_per_s": full_rate,
                "speedup": online_rate / full_rate,
                "ideal_speedup": ideal,
                "fraction_of_ideal": online_rate / full_rate / ideal,
                "compress_ms_per_item": compress_ms,
                "stored_ms_per_candidate": from_blobs,
            }
        )
    title = (
        f"score vs score_full — {compressor}, N={candidates}, ℓ={ell}, k={num_gist}, {dtype}, {model.device}"
    )
    columns = (
        "j",
        "online cand/s",
        "full cand/s",
        "speed-up",
        "ideal (j+ℓ)/ℓ",
        "of ideal",
        "compress ms/item",
        *(f"hit ms/cand {s}" for s in storages),
    )
    cells = [
        [
            str(r["item_tokens"]),
            f"{r['online_candidates_per_s']:.1f}",
            f"{r['full_candidates_per_s']:.2f}",
            f"{r['speedup']:.1f}x",
            f"{r['ideal_speedup']:.1f}x",
            f"{r['fraction_of_ideal']:.2f}",
            f"{r['compress_ms_per_item']:.0f}",
            *(f"{r['stored_ms_per_candidate'][s]:.2f}" for s in storages),
        ]
        for r in rows
    ]
    meta = model_meta(base, model, dtype) | {"compressor": compressor, "num_gist": num_gist}
    publish(console, title, columns, cells, meta, rows, out)
    return rows
