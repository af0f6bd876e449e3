"""KVzip-style selection: columns chosen by a teacher-forced reconstruction of the item, not by a
query's lead-in; the same per-head-masked reference as SnapKV-style selection."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import ITEMS, QUERY

from reranker.core.compressors.select import selected_columns
from reranker.core.config import RerankerConfig, template_for
from reranker.core.model import Reranker

pytestmark = [pytest.mark.kvzip, pytest.mark.select]


def kvzip(base: Path, k: int = 4, t: int = 0, **extra: object) -> Reranker:
    gist = RerankerConfig(
        num_gist=k, keep_item_prefix=t, compressor="select", select_scorer="kvzip", dtype="float32", **extra
    )
    return Reranker.from_pretrained(base, gist, device="cpu")


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("t", [0, 5])
@pytest.mark.parametrize("rule", ["head", "query_likelihood"])
def test_kvzip_selection_equals_its_per_head_masked_forward(
    tiny_bases: dict[str, Path], arch: str, t: int, rule: str
) -> None:
    model = kvzip(tiny_bases[arch], t=t, score_rule=rule, **template_for(rule))
    kvs = model.compress(ITEMS, batch_size=3)  # mixed lengths, two batches, one item shorter than t + k
    torch.testing.assert_close(
        model.score(QUERY, kvs), model.reference_scores(QUERY, ITEMS), rtol=1e-4, atol=1e-4
    )


def test_kvzip_keeps_the_same_columns_whatever_the_query_template(tiny_base: Path) -> None:
    """Query-agnostic: the template's lead-in (what SnapKV observes) does not move KVzip's choice."""
    item_ids = kvzip(tiny_base).item_ids(ITEMS)[0]
    plain = selected_columns(kvzip(tiny_base), item_ids)
    other = selected_columns(
        kvzip(tiny_base, query_template="\nSearch request, in full: {query}\n"), item_ids
    )
    for a, b in zip(plain, other, strict=True):
        assert torch.equal(a, b)
    snap = RerankerConfig(num_gist=4, compressor="select", dtype="float32")
    snapkv = Reranker.from_pretrained(tiny_base, snap, device="cpu")
    chosen = selected_columns(snapkv, item_ids)
    assert any(not torch.equal(a, b) for a, b in zip(plain, chosen, strict=True))  # the scorer matters


def test_kvzip_is_part_of_the_fingerprint(tiny_base: Path) -> None:
    """K/V kept by one scorer must not be read as the other's (the default leaves existing fingerprints
    as they were: tests/test_fingerprint.py pins the shipped ones)."""
    snap = Reranker.from_pretrained(tiny_base, RerankerConfig(compressor="select"), device="cpu")
    assert kvzip(tiny_base).fingerprint != snap.fingerprint


def test_kvzip_refuses_more_positions_than_the_base_has(tiny_base: Path) -> None:
    """The repeat doubles what selection reads: an item cap past half the base's positions is caught
    with what to lower, not run into RoPE positions the base never saw."""
    model = kvzip(tiny_base, max_item_tokens=1500)
    long_item = " ".join(f"word{i}" for i in range(3000))
    with pytest.raises(ValueError, match="max_position_embeddings=2048: lower max_item_tokens"):
        model.compress([long_item])
