"""`gistrank plan`: what a catalog costs to store, serve and backfill, from the model's own config and
the codec's real blob (DESIGN §3–4).

    K/V bytes per item     the blob `kv_codec.encode` writes for one item at the model's stored
                           positions p + k (payload 2·L·(p + k)·H_kv·h·b, plus its frame and header)
    store                  items × blob; Redis Cluster masters = store / (memory per shard × fill)
    fetch bytes/s          qps × candidates × hit ratio × blob: what the online path reads
    online FLOPs/s         qps × candidates × ℓ query tokens × FLOPs per token, plus the misses'
                           recompute (each miss compresses its item: a forward over j + k tokens for
                           gists, j for selection, its min(j, t + k) stored tokens for prefix caching)
    backfill               items / (items/s per consumer × consumers); consumers needed for a window

FLOPs per token and layer: 2 × (q, k, v, o and gated-MLP weights) + 4 × visible positions × H_q·h
(QKᵀ and AV), plus the output projection: the vocabulary for the query-likelihood rule (ℓ rows), the
hidden size for the head rule (one row). An estimate of the arithmetic, not of achieved throughput.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from reranker.core.kv import Kept
from reranker.core.kv_codec import encode
from reranker.core.model import Reranker

GIB = 1024**3


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder that cost depends on."""

    layers: int
    kv_heads: int
    head_dim: int
    hidden: int = 0
    q_heads: int = 0
    intermediate: int = 0
    vocab: int = 0

    @classmethod
    def of(cls, model: Reranker) -> ModelShape:
        cfg = model.lm.config
        return cls(
            layers=model.num_layers,
            kv_heads=model.num_kv_heads,
            head_dim=model.head_dim,
            hidden=cfg.hidden_size,
            q_heads=cfg.num_attention_heads,
            intermediate=cfg.intermediate_size,
            vocab=cfg.vocab_size,
        )

    def bytes_per_position(self, bytes_per_value: float = 2) -> float:
        """K and V of one position in every layer and KV head: 2·L·H_kv·h·b (DESIGN §4)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_value

    def flops_per_token(self, visible: int) -> float:
        """One token through every layer, attending to `visible` positions (output projection aside)."""
        q, kv = self.q_heads * self.head_dim, self.kv_heads * self.head_dim
        weights = self.hidden * (2 * q + 2 * kv) + 3 * self.hidden * self.intermediate
        return self.layers * (2 * weights + 4 * visible * q)


def blob_bytes(model: Reranker) -> int:
    """Bytes of one item's blob as the codec writes it, at the model's stored positions p + k and its
    storage (`RerankerConfig.storage`), for an item as long as the cap (its length is header metadata: other
    lengths differ by a few bytes)."""
    g = model.gist
    j, p = g.max_item_tokens, g.keep_item_prefix
    positions = p + model.compressor.tail_slots(g.num_gist, j, p)
    kv = torch.zeros(model.num_layers, 2, model.num_kv_heads, positions, model.head_dim)
    return len(encode(model.stored_unit(Kept(kv), j), content_hash="0" * 64, storage_dtype=g.storage))


@dataclass(frozen=True)
class Plan:
    items: int
    qps: float
    candidates: int
    hit_ratio: float
    stored_positions: int
    blob_bytes: int
    store_bytes: int
    shards: int
    shard_bytes: float
    fetch_bytes_per_s: float
    online_flops_per_s: float
    recompute_flops_per_s: float
    consumer_items_per_s: float | None
    consumers: int
    backfill_hours: float | None
    consumers_for_window: int | None
    window_hours: float

    def rows(self) -> list[tuple[str, str]]:
        """(quantity, value) lines for the console."""
        out = [
            ("items", f"{self.items:,}"),
            ("stored K/V positions per item", str(self.stored_positions)),
            ("K/V blob per item", f"{self.blob_bytes / 1024:.1f} KiB ({self.blob_bytes:,} B)"),
            ("store (all items)", f"{self.store_bytes / GIB:,.1f} GiB"),
            (
                f"Redis Cluster masters at {self.shard_bytes / GIB:.0f} GiB usable each",
                str(self.shards),
            ),
            (
                f"fetch at hit ratio {self.hit_ratio:.2f}",
                f"{self.fetch_bytes_per_s / 1e9:,.2f} GB/s",
            ),
            ("online compute (query tokens only)", f"{self.online_flops_per_s / 1e12:,.2f} TFLOP/s"),
            ("recompute of misses", f"{self.recompute_flops_per_s / 1e12:,.2f} TFLOP/s"),
        ]
        if self.backfill_hours is not None and self.consumer_items_per_s is not None:
            out += [
                (
                    f"backfill, {self.consumers} consumer(s) at {self.consumer_items_per_s:,.1f} items/s",
                    f"{self.backfill_hours:,.1f} h",
                ),
                (f"consumers for a {self.window_hours:g} h backfill", str(self.consumers_for_window)),
            ]
        return out


def plan(
    model: Reranker,
    items: int,
    qps: float,
    candidates: int,
    hit_ratio: float = 1.0,
    shard_gib: float = 64.0,
    shard_fill: float = 0.75,
    query_tokens: int = 32,
    item_tokens: int | None = None,
    consumer_items_per_s: float | None = None,
    consumers: int = 1,
    window_hours: float = 24.0,
) -> Plan:
    """The plan for `items` items served at `qps` queries/s of `candidates` candidates each (module
    docstring), its K/V stored at the model's storage; `shard_fill`: the share of a shard's
    memory given to K/V (Redis needs headroom); `item_tokens`: mean item length that a miss recomputes
    (default the model's cap); `consumer_items_per_s`: measured compression rate of one consumer."""
    if not 0.0 <= hit_ratio <= 1.0:
        raise ValueError(f"hit ratio {hit_ratio} is not in [0, 1]")
    if min(items, candidates, consumers) < 1 or qps < 0 or not 0 < shard_fill <= 1:
        raise ValueError("items, candidates and consumers must be ≥ 1, qps ≥ 0, shard fill in (0, 1]")
    g = model.gist
    shape = ModelShape.of(model)
    stored = g.keep_item_prefix + g.num_gist
    blob = blob_bytes(model)
    store = items * blob
    usable = shard_gib * GIB * shard_fill
    per_candidate = query_tokens * shape.flops_per_token(stored + query_tokens)
    head = shape.vocab if g.score_rule == "query_likelihood" else 1
    per_candidate += 2 * shape.hidden * head * (query_tokens if g.score_rule == "query_likelihood" else 1)
    j = item_tokens or g.max_item_tokens
    forward = model.compressor.recompute_tokens(j, g.num_gist, min(g.keep_item_prefix, j))
    recompute = forward * shape.flops_per_token(forward)
    lookups = qps * candidates
    backfill = None if consumer_items_per_s is None else items / (consumer_items_per_s * consumers) / 3600
    needed = (
        None
        if consumer_items_per_s is None
        else math.ceil(items / (consumer_items_per_s * window_hours * 3600))
    )
    result = Plan(
        items=items,
        qps=qps,
        candidates=candidates,
        hit_ratio=hit_ratio,
        stored_positions=stored,
        blob_bytes=blob,
        store_bytes=store,
        shards=max(1, math.ceil(store / usable)),
        shard_bytes=usable,
        fetch_bytes_per_s=lookups * hit_ratio * blob,
        online_flops_per_s=lookups * per_candidate,
        recompute_flops_per_s=lookups * (1 - hit_ratio) * recompute,
        consumer_items_per_s=consumer_items_per_s,
        consumers=consumers,
        backfill_hours=backfill,
        consumers_for_window=needed,
        window_hours=window_hours,
    )
    rates = (result.fetch_bytes_per_s, result.online_flops_per_s, result.recompute_flops_per_s)
    if not all(math.isfinite(rate) for rate in rates):  # inf GB/s, nan TFLOP/s: no plan at all
        raise ValueError(f"qps × candidates = {qps * candidates:g} overflows the plan's rates: give fewer")
    return result


def measure_items_per_s(model: Reranker, item_tokens: int, items: int = 16) -> float:
    """Items/s `model.compress` reaches here on made-up items of about `item_tokens` tokens (what
    one consumer process compresses, store writes aside)."""
    texts = [f"item {i}: " + "catalog detail text " * (item_tokens // 3) for i in range(items)]
    model.compress(texts[:2])  # warm-up
    start = time.perf_counter()
    model.compress(texts, progress=True)
    return items / (time.perf_counter() - start)
