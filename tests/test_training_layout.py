"""Training-only forwards: the mask curriculum's end points and the autoencoding objective."""

from __future__ import annotations

import pytest
import torch
from conftest import ITEMS, QUERY

from reranker import GistReranker, layout


def test_full_item_visibility_is_the_unmasked_forward(
    tiny_model: GistReranker, monkeypatch: pytest.MonkeyPatch
) -> None:
    visible = tiny_model.score_masked(QUERY, ITEMS, item_visibility=1.0)
    monkeypatch.setattr(layout, "training_mask", lambda _i, _k, lens, total: layout.full_mask(lens, total))
    unmasked = tiny_model.score_masked(QUERY, ITEMS)
    torch.testing.assert_close(visible, unmasked, rtol=1e-5, atol=1e-6)


def test_vanishing_item_visibility_anneals_to_the_gist_mask(tiny_model: GistReranker) -> None:
    exact = tiny_model.score_masked(QUERY, ITEMS)
    torch.testing.assert_close(tiny_model.score_masked(QUERY, ITEMS, item_visibility=1e-30), exact)
    halfway = tiny_model.score_masked(QUERY, ITEMS, item_visibility=0.5)
    assert not torch.allclose(halfway, exact, rtol=1e-3)


def test_item_visibility_outside_unit_interval_is_refused(tiny_model: GistReranker) -> None:
    with pytest.raises(ValueError, match="item visibility"):
        tiny_model.score_masked(QUERY, ITEMS, item_visibility=1.5)


def test_autoencode_loss_trains_the_gists(tiny_model: GistReranker) -> None:
    tiny_model.train()
    try:
        loss = tiny_model.autoencode_loss(ITEMS, num_tokens=8)
        assert loss.ndim == 0 and 0 < float(loss.detach()) < 20
        loss.backward()
        assert float(tiny_model.gist_embeddings.grad.abs().sum()) > 0
    finally:
        tiny_model.zero_grad(set_to_none=True)
        tiny_model.eval()


def test_autoencode_loss_reads_the_rest_of_the_item_through_the_gists(tiny_model: GistReranker) -> None:
    """Two items sharing their first tokens: the target (those tokens) is masked off the item, so the
    differing tails can only reach its loss through the gists."""
    with torch.no_grad():
        a = tiny_model.autoencode_loss(["Acme phone 256GB. Lots of other words here."], num_tokens=4)
        b = tiny_model.autoencode_loss(["Acme phone 256GB. Completely different tail text!"], num_tokens=4)
    assert not torch.isclose(a, b)
