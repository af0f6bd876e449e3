"""The wrong variants of DESIGN §2, built on purpose: each must break equivalence, or the guard is blind."""

from __future__ import annotations

import pytest
import torch
from helpers import ITEMS, QUERY, forward_scores

from reranker import Reranker
from reranker.core import layout


def clearly_differ(a: torch.Tensor, b: torch.Tensor) -> bool:
    """At least 10x the equivalence tolerance (1e-4 relative) apart."""
    return float((a - b).abs().max()) > 1e-3 * float(b.abs().max())


def test_gist_mask_matters(tiny_model: Reranker, monkeypatch: pytest.MonkeyPatch) -> None:
    masked = tiny_model.score_masked(QUERY, ITEMS)
    monkeypatch.setattr(
        layout, "training_mask", lambda _items, _k, lens, total, *_: layout.full_mask(lens, total)
    )
    unmasked = tiny_model.score_masked(QUERY, ITEMS)
    assert clearly_differ(unmasked, masked)


@pytest.mark.parametrize(
    "wrong_positions",
    [
        # the query numbered from 0 once the item is removed
        lambda start, n: torch.arange(n)[None].expand(len(start), -1),
        # what a framework derives from the cache length: k, k+1, … for every row (tiny_model: k = 4)
        lambda start, n: (4 + torch.arange(n))[None].expand(len(start), -1),
        # off by one either way: the query starting on the last gist, or one slot after the gists
        lambda start, n: start[:, None] - 1 + torch.arange(n)[None],
        lambda start, n: start[:, None] + 1 + torch.arange(n)[None],
    ],
    ids=["from-zero", "from-cache-length", "one-early", "one-late"],
)
def test_renumbered_query_positions_break_equivalence(
    tiny_model: Reranker, monkeypatch: pytest.MonkeyPatch, wrong_positions
) -> None:
    reference = tiny_model.score_masked(QUERY, ITEMS)
    kvs = tiny_model.compress(ITEMS)
    torch.testing.assert_close(tiny_model.score(QUERY, kvs), reference, rtol=1e-4, atol=1e-5)
    monkeypatch.setattr(layout, "online_positions", wrong_positions)
    assert clearly_differ(tiny_model.score(QUERY, kvs), reference)


def test_zero_filled_item_placeholders_break_equivalence(tiny_model: Reranker) -> None:
    """Zeros in place of the item 'because they are masked': the gists then summarise nothing."""
    reference = tiny_model.score_masked(QUERY, ITEMS)
    q = tiny_model.query_tail(QUERY)
    item_ids, _ = tiny_model.item_ids(ITEMS)
    gists = tiny_model.gist_embeddings
    rows = [torch.cat([torch.zeros(len(ids), gists.shape[1]), gists, q.embeds]) for ids in item_ids]
    placeholders = forward_scores(tiny_model, rows, torch.tensor([len(ids) for ids in item_ids]), q)
    assert clearly_differ(placeholders, reference)
