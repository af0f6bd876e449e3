"""The core's acceptance test (DESIGN §2): the online path equals the gist-masked training forward."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import ITEMS, QUERY

from reranker import EmptyInputError, GistConfig, GistReranker


def assert_scores_equal(online: torch.Tensor, reference: torch.Tensor) -> None:
    torch.testing.assert_close(online, reference, rtol=1e-4, atol=1e-4 * float(reference.abs().max()))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("k", [1, 4, 8, 16])
def test_online_score_equals_masked_forward(tiny_bases: dict[str, Path], arch: str, k: int) -> None:
    model = GistReranker.from_pretrained(
        tiny_bases[arch], GistConfig(num_gist=k, dtype="float32"), device="cpu"
    )
    lengths = {len(ids) for ids in model._item_ids(ITEMS)[0]}
    assert len(lengths) == len(ITEMS), "the batch must mix item lengths"
    kvs = model.compress(ITEMS, batch_size=3)  # two batches, so padding differs between them
    assert_scores_equal(model.score(QUERY, kvs), model.score_masked(QUERY, ITEMS))


def test_equivalence_holds_for_truncated_items(tiny_base: Path) -> None:
    model = GistReranker.from_pretrained(
        tiny_base, GistConfig(num_gist=4, max_item_tokens=24, dtype="float32"), device="cpu"
    )
    kvs = model.compress(ITEMS)
    assert [kv.truncated for kv in kvs] == [True, False, True, True]
    assert max(kv.item_tokens for kv in kvs) == 24
    assert_scores_equal(model.score(QUERY, kvs), model.score_masked(QUERY, ITEMS))


def test_compressed_kv_does_not_depend_on_batch_neighbours(tiny_model: GistReranker) -> None:
    alone = [tiny_model.compress([item])[0] for item in ITEMS]
    batched = tiny_model.compress(ITEMS)
    for a, b in zip(alone, batched, strict=True):
        assert a.item_tokens == b.item_tokens
        torch.testing.assert_close(a.kv, b.kv, rtol=1e-4, atol=1e-5)


def test_online_sequence_holds_only_query_and_score_token(tiny_model: GistReranker) -> None:
    """No item token and no placeholder position reaches the online forward."""
    seen: list[tuple[int, ...]] = []
    hook = tiny_model.lm.get_decoder().register_forward_pre_hook(
        lambda _mod, _args, kwargs: seen.append(tuple(kwargs["inputs_embeds"].shape)), with_kwargs=True
    )
    try:
        kvs = tiny_model.compress(ITEMS)
        seen.clear()
        tiny_model.score(QUERY, kvs)
    finally:
        hook.remove()
    query_len = len(tiny_model.query_ids(QUERY)) + 1
    assert seen == [(len(ITEMS), query_len, tiny_model.lm.config.hidden_size)]


def test_score_full_is_a_different_forward(tiny_model: GistReranker) -> None:
    full = tiny_model.score_full(QUERY, ITEMS)
    masked = tiny_model.score_masked(QUERY, ITEMS)
    assert full.shape == masked.shape == (len(ITEMS),)
    assert not torch.allclose(full, masked, rtol=1e-3)


def test_prefix_baseline_is_plain_prefix_caching(tiny_model: GistReranker) -> None:
    """The matched-budget baseline equals a plain causal forward of (first k item tokens + query)."""
    k = tiny_model.gist.num_gist
    items = [item for item in ITEMS if item != "kettle"]  # at least k tokens each
    kvs = tiny_model.compress_prefix(items)
    assert all(kv.item_tokens == 0 and kv.num_gist == k for kv in kvs)
    item_ids, _ = tiny_model._item_ids(items)
    q = tiny_model._query_tail(QUERY)
    rows = [torch.cat([tiny_model._embed(ids[:k]), q]) for ids in item_ids]
    with torch.no_grad():
        reference = tiny_model._score_last(*tiny_model._forward_rows(rows, None))
    assert_scores_equal(tiny_model.score(QUERY, kvs), reference)


def test_prefix_baseline_needs_k_tokens(tiny_model: GistReranker) -> None:
    with pytest.raises(EmptyInputError, match=r"items \[1\] have fewer than k=4 tokens"):
        tiny_model.compress_prefix(ITEMS)
