"""`gistrank plan`: storage from the model's config and the codec's real blob (DESIGN §4), and the
derived serving and backfill figures."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import ITEMS
from typer.testing import CliRunner

from reranker.cli import app
from reranker.core.config import RerankerConfig
from reranker.core.kv_codec import encode, kv_nbytes_formula, payload_nbytes
from reranker.core.model import Reranker
from reranker.serving.capacity import GIB, ModelShape, blob_bytes, plan


@pytest.mark.parametrize(
    ("layers", "kv_heads", "head_dim", "kib_per_position", "kib_per_item"),
    [(24, 2, 64, 12, 96), (32, 5, 64, 40, 320), (28, 8, 128, 112, 896)],  # DESIGN §4's table, fp16, k = 8
)
def test_design_storage_figures(
    layers: int, kv_heads: int, head_dim: int, kib_per_position: int, kib_per_item: int
) -> None:
    shape = ModelShape(layers, kv_heads, head_dim)
    assert shape.bytes_per_position(2) == kib_per_position * 1024
    # the planner's per-position figure and the codec's per-item formula agree on the table's items
    assert kv_nbytes_formula(layers, 8, kv_heads, head_dim, 2) == kib_per_item * 1024
    assert payload_nbytes(layers, 8, kv_heads, head_dim, "float16") == 8 * shape.bytes_per_position(2)


@pytest.mark.parametrize("storage", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize("t", [0, 3])
def test_blob_bytes_is_the_codec_blob_of_a_real_item(tiny_base: Path, storage: str, t: int) -> None:
    model = Reranker.from_pretrained(
        tiny_base, RerankerConfig(num_gist=4, keep_item_prefix=t, dtype="float32"), device="cpu"
    )
    [kv] = model.compress(ITEMS[:1])  # longer than t: p + k positions
    # the planner's item is as long as the cap: its length is metadata, a few digits of the header
    cap = model.gist.max_item_tokens
    as_planned = replace(
        kv, item_tokens=cap, query_start=model.compressor.query_start(4, cap, kv.prefix_tokens)
    )
    stored_as = model.with_gist_config(model.gist.model_copy(update={"kv_storage": storage}))
    assert blob_bytes(stored_as) == len(encode(as_planned, "c" * 64, storage))
    assert abs(blob_bytes(stored_as) - len(encode(kv, "c" * 64, storage))) <= 16


def test_plan_figures(tiny_model: Reranker) -> None:
    blob = blob_bytes(tiny_model)  # stored as its dtype, float32
    p = plan(
        tiny_model,
        items=10_000_000,
        qps=1000,
        candidates=50,
        hit_ratio=0.9,
        shard_gib=1.0,
        shard_fill=0.5,
        consumer_items_per_s=200.0,
        consumers=2,
        window_hours=10,
    )
    assert p.blob_bytes == blob and p.store_bytes == 10_000_000 * blob
    assert p.shards == math.ceil(10_000_000 * blob / (0.5 * GIB))
    assert p.fetch_bytes_per_s == pytest.approx(1000 * 50 * 0.9 * blob)
    assert p.backfill_hours == pytest.approx(10_000_000 / 400 / 3600)
    assert p.consumers_for_window == math.ceil(10_000_000 / (200 * 10 * 3600))
    more = plan(tiny_model, items=10_000_000, qps=2000, candidates=50, hit_ratio=0.5)
    assert more.online_flops_per_s == pytest.approx(2 * p.online_flops_per_s)  # linear in qps
    assert more.recompute_flops_per_s > p.recompute_flops_per_s > 0
    assert plan(tiny_model, 1, 1, 1, hit_ratio=1.0).recompute_flops_per_s == 0
    # a miss's compression forward: item + gists; the item alone to select; its stored tokens to prefix-cache
    shape, j, k = ModelShape.of(tiny_model), 300, tiny_model.gist.num_gist
    for compressor, tokens in (("gist", j + k), ("select", j), ("prefix", k)):
        reader = tiny_model.with_gist_config(tiny_model.gist.model_copy(update={"compressor": compressor}))
        miss = plan(reader, 1, 1, 1, hit_ratio=0.0, item_tokens=j)
        assert miss.recompute_flops_per_s == tokens * shape.flops_per_token(tokens), compressor
    with pytest.raises(ValueError, match="hit ratio"):
        plan(tiny_model, 1, 1, 1, hit_ratio=1.5)


def test_flops_count_the_weights_and_the_visible_positions() -> None:
    shape = ModelShape(layers=2, kv_heads=1, head_dim=4, hidden=8, q_heads=2, intermediate=16, vocab=10)
    weights = 8 * (2 * 8 + 2 * 4) + 3 * 8 * 16  # q + o (8×8 each), k + v (8×4 each), gated MLP
    assert shape.flops_per_token(0) == 2 * (2 * weights)
    assert shape.flops_per_token(5) - shape.flops_per_token(0) == 2 * 4 * 5 * 8


def test_plan_command(tiny_base: Path, tmp_path: Path) -> None:
    model = Reranker.from_pretrained(tiny_base, RerankerConfig(num_gist=4, dtype="float32"))
    path = model.save_pretrained(tmp_path / "m")
    args = ["plan", "--items", "1000000", "--qps", "100", "--candidates", "50", "--model", str(path)]
    result = CliRunner().invoke(app, [*args, "--storage-dtype", "int8"])
    assert result.exit_code == 0, result.output
    int8 = model.with_gist_config(model.gist.model_copy(update={"kv_storage": "int8"}))
    assert f"{blob_bytes(int8) / 1024:.1f} KiB" in result.output
    assert "k=4, K/V stored as int8" in result.output
    assert "items/s" in result.output and "consumers for a 24 h backfill" in result.output  # measured
