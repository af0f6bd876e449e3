"""Bad input gets a precise, typed error; K/V size is exactly 2·L·k·H_kv·h·b."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from helpers import ITEMS, QUERY

from monitoring.metrics import ITEMS_TRUNCATED
from reranker import EmptyInputError, KVFormatError, QueryTooLongError, Reranker, RerankerConfig
from reranker.catalog.events import ItemFields
from streaming.materialize import compress_rows


@pytest.mark.parametrize("dtype,bytes_per_elem", [("float32", 4), ("bfloat16", 2), ("float16", 2)])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_kv_bytes_match_formula(
    tiny_bases: dict[str, Path], arch: str, dtype: str, bytes_per_elem: int
) -> None:
    model = Reranker.from_pretrained(tiny_bases[arch], RerankerConfig(num_gist=8, dtype=dtype), device="cpu")
    cfg = model.lm.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads  # both tiny configs use the default head size
    kv = model.compress(ITEMS[:1])[0]
    expected = 2 * cfg.num_hidden_layers * 8 * cfg.num_key_value_heads * head_dim * bytes_per_elem
    assert kv.nbytes == expected
    assert kv.kv.shape == (cfg.num_hidden_layers, 2, cfg.num_key_value_heads, 8, head_dim)


@pytest.mark.parametrize("query", ["", "   \n"])
def test_empty_query(tiny_model: Reranker, query: str) -> None:
    kvs = tiny_model.compress(ITEMS[:1])
    for call in (lambda: tiny_model.score(query, kvs), lambda: tiny_model.score_masked(query, ITEMS[:1])):
        with pytest.raises(EmptyInputError, match="query is empty"):
            call()


def test_empty_candidates_and_items(tiny_model: Reranker) -> None:
    with pytest.raises(EmptyInputError, match="no candidates"):
        tiny_model.score(QUERY, [])
    with pytest.raises(EmptyInputError, match="no items"):
        tiny_model.compress([])
    with pytest.raises(EmptyInputError, match="item 1 has no text"):
        tiny_model.compress(["ok", " "])


def test_query_over_limit_is_rejected(tiny_model: Reranker) -> None:
    kvs = tiny_model.compress(ITEMS[:1])
    with pytest.raises(QueryTooLongError, match="over the limit max_query_tokens=64"):
        tiny_model.score("phone " * 200, kvs)


def test_item_over_limit_is_truncated_and_counted(tiny_base: Path) -> None:
    """The core flags truncation on the StoredUnit; the pipeline that compresses counts it."""
    model = Reranker.from_pretrained(
        tiny_base, RerankerConfig(num_gist=4, max_item_tokens=16, dtype="float32"), device="cpu"
    )
    kvs = model.compress(["a short one", ITEMS[2]])
    assert [kv.truncated for kv in kvs] == [False, True]
    assert kvs[1].item_tokens == 16
    before = ITEMS_TRUNCATED._value.get()
    items = [
        ("a", ItemFields(title="short", attributes={}, description=""), 1),
        ("b", ItemFields(title="kettle", attributes={}, description=ITEMS[2]), 1),
    ]
    rows = compress_rows(model, items)
    assert [r.item_id for r in rows] == ["a", "b"]
    assert ITEMS_TRUNCATED._value.get() == before + 1


def test_malformed_kv_is_refused(tiny_model: Reranker) -> None:
    kv = tiny_model.compress(ITEMS[:1])[0]
    bad = {
        "dtype": dataclasses.replace(kv, kv=kv.kv.to(torch.bfloat16)),
        "shape": dataclasses.replace(kv, kv=kv.kv[:, :, :, :2]),
        "positions": dataclasses.replace(kv, item_tokens=-1),
        "too far": dataclasses.replace(kv, item_tokens=tiny_model.gist.max_item_tokens + 1),
    }
    expected = {"dtype": "dtype", "shape": "shape", "positions": "item_tokens=-1", "too far": "item_tokens="}
    for what, wrong in bad.items():
        with pytest.raises(KVFormatError, match=f"candidate 1: .*{expected[what]}"):
            tiny_model.score(QUERY, [kv, wrong])
    assert tiny_model.score(QUERY, [kv]).shape == (1,)  # still serving
