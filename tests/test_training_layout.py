"""Training-only forwards: the mask curriculum's end points and the autoencoding objective."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import ITEMS, QUERY

from reranker import EmptyInputError, GistConfig, GistReranker, layout


def test_full_item_visibility_is_the_unmasked_forward(
    tiny_model: GistReranker, monkeypatch: pytest.MonkeyPatch
) -> None:
    visible = tiny_model.score_masked(QUERY, ITEMS, item_visibility=1.0)
    monkeypatch.setattr(
        layout, "training_mask", lambda _i, _k, lens, total, *_: layout.full_mask(lens, total)
    )
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


def test_hybrid_autoencode_target_starts_after_the_kept_prefix(
    tiny_base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With t raw tokens kept, regenerating them would be copying; the target is the next tokens."""
    model = GistReranker.from_pretrained(
        tiny_base, GistConfig(num_gist=4, keep_item_prefix=4, dtype="float32"), device="cpu"
    )
    item = "Acme phone 256GB titanium blue, red 2023."
    ids = model._item_ids([item])[0][0]  # BOS + item tokens
    targets: list[list[int]] = []
    real_ce = torch.nn.functional.cross_entropy

    def spy(logits: torch.Tensor, target: torch.Tensor, **kwargs: object) -> torch.Tensor:
        targets.append(target.tolist())
        return real_ce(logits, target, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "cross_entropy", spy)
    with torch.no_grad():
        model.autoencode_loss([item], num_tokens=3)
    assert targets == [ids[4:7]]
    with pytest.raises(EmptyInputError, match="no token after the first 4"):
        model.autoencode_loss(["kettle"], num_tokens=3)
