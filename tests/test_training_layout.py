"""Training-only forwards (reranker/training/forwards.py): the autoencoding objective and packed queries."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import ITEMS

from reranker import EmptyInputError, Reranker, RerankerConfig
from reranker.core import layout
from reranker.training.forwards import autoencode_control, autoencode_loss, score_packed


def test_autoencode_loss_trains_the_gists(tiny_model: Reranker) -> None:
    tiny_model.train()
    try:
        loss = autoencode_loss(tiny_model, ITEMS, num_tokens=8)
        assert loss.ndim == 0 and 0 < float(loss.detach()) < 20
        loss.backward()
        assert float(tiny_model.gist_embeddings.grad.abs().sum()) > 0
    finally:
        tiny_model.zero_grad(set_to_none=True)
        tiny_model.eval()


def test_autoencode_loss_reads_the_rest_of_the_item_through_the_gists(tiny_model: Reranker) -> None:
    """Two items sharing their first tokens: the target (those tokens) is masked off the item, so the
    differing tails can only reach its loss through the gists."""
    with torch.no_grad():
        a = autoencode_loss(tiny_model, ["Acme phone 256GB. Lots of other words here."], num_tokens=4)
        b = autoencode_loss(tiny_model, ["Acme phone 256GB. Completely different tail text!"], num_tokens=4)
    assert not torch.isclose(a, b)


def test_autoencode_targets_of_another_item(tiny_model: Reranker) -> None:
    """The control: item A's gists, item B's tokens as the target — the same as B's own loss only if
    the gists said nothing; a count mismatch is refused."""
    a, b = "Acme phone 256GB blue 2023.", "Steel kettle 1.7 L, 2200 W."
    with torch.no_grad():
        crossed = autoencode_loss(tiny_model, [a], num_tokens=4, targets_of=[b])
        own_b = autoencode_loss(tiny_model, [b], num_tokens=4)
        assert torch.equal(
            autoencode_loss(tiny_model, [a], num_tokens=4, targets_of=[a]),
            autoencode_loss(tiny_model, [a], num_tokens=4),
        )
    assert not torch.isclose(crossed, own_b)
    with pytest.raises(ValueError, match="1 texts for 2 items"):
        autoencode_loss(tiny_model, [a, b], num_tokens=4, targets_of=[a])


def test_autoencode_control_regenerates_the_item_half_the_list_away(tiny_model: Reranker) -> None:
    """Item i's gists regenerate item i + N/2's text; over identical items it is the own loss."""
    items = ["Acme phone 256GB blue 2023.", "Steel kettle 1.7 L.", "Oak desk 120 cm.", "Wool scarf, red."]
    with torch.no_grad():
        control = autoencode_control(tiny_model, items, num_tokens=4)
        assert torch.equal(
            control, autoencode_loss(tiny_model, items, 4, targets_of=[*items[2:], *items[:2]])
        )
        assert not torch.isclose(control, autoencode_loss(tiny_model, items, num_tokens=4))
        shifted = autoencode_control(tiny_model, items, num_tokens=4, shift=1)
        assert torch.equal(shifted, autoencode_loss(tiny_model, items, 4, targets_of=[*items[1:], items[0]]))
        twins = [items[0], items[0]]
        assert torch.equal(autoencode_control(tiny_model, twins, 4), autoencode_loss(tiny_model, twins, 4))


def test_hybrid_autoencode_target_starts_after_the_kept_prefix(
    tiny_base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With t raw tokens kept, regenerating them would be copying; the target is the next tokens."""
    model = Reranker.from_pretrained(
        tiny_base, RerankerConfig(num_gist=4, keep_item_prefix=4, dtype="float32"), device="cpu"
    )
    item = "Acme phone 256GB titanium blue, red 2023."
    ids = model.item_ids([item])[0][0]  # BOS + item tokens
    targets: list[list[int]] = []
    real_ce = torch.nn.functional.cross_entropy

    def spy(logits: torch.Tensor, target: torch.Tensor, **kwargs: object) -> torch.Tensor:
        targets.append(target.tolist())
        return real_ce(logits, target, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "cross_entropy", spy)
    with torch.no_grad():
        autoencode_loss(model, [item], num_tokens=3)
    assert targets == [ids[4:7]]
    with pytest.raises(EmptyInputError, match="no token after the first 4"):
        autoencode_loss(model, ["kettle"], num_tokens=3)


QUERIES = ["256GB phone 2023", "kettle 1.7 L", "black headphones 2021 over-ear wireless"]


@pytest.mark.parametrize("windows", [False, True])
@pytest.mark.parametrize("t", [0, 5])
def test_packed_queries_equal_each_query_alone(tiny_base: Path, t: int, windows: bool) -> None:
    """Several queries in one item row score exactly as each query alone: no query sees another (with
    the gists under pooling windows too)."""
    gist = RerankerConfig(num_gist=4, keep_item_prefix=t, dtype="float32", gist_pool_windows=windows)
    model = Reranker.from_pretrained(tiny_base, gist, device="cpu")
    packs = [QUERIES, QUERIES[1:2], QUERIES[::-1], QUERIES[:2]]  # differing counts and lengths per row
    for full in (False, True):
        packed = score_packed(model, ITEMS, packs, full=full)
        for i, (item, queries) in enumerate(zip(ITEMS, packs, strict=True)):
            alone = torch.stack(
                [(model.score_full if full else model.score_masked)(q, [item])[0] for q in queries]
            )
            torch.testing.assert_close(packed[i], alone, rtol=1e-4, atol=1e-5)


def test_packed_queries_must_not_see_each_other(
    tiny_model: Reranker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Letting each query block read the earlier ones (plain causal over the query region) changes
    every query but the first: the test would catch a packing mask that forgot the block structure."""
    real = layout.packed
    head = len(tiny_model.item_ids(ITEMS[:1])[0][0]) + tiny_model.gist.num_gist

    def leaky(*args: object) -> tuple[torch.Tensor, torch.Tensor]:
        positions, allowed = real(*args)
        allowed = allowed.clone()
        allowed[:, head:, head:] |= torch.tril(torch.ones_like(allowed[0, head:, head:]))
        return positions, allowed

    reference = score_packed(tiny_model, ITEMS[:1], [QUERIES])[0]
    monkeypatch.setattr(layout, "packed", leaky)
    leaked = score_packed(tiny_model, ITEMS[:1], [QUERIES])[0]
    torch.testing.assert_close(leaked[0], reference[0])
    assert float((leaked[1:] - reference[1:]).abs().max()) > 1e-3 * float(reference.abs().max())


def test_packed_item_needs_a_query(tiny_model: Reranker) -> None:
    with pytest.raises(EmptyInputError, match="at least one query"):
        score_packed(tiny_model, ITEMS[:1], [[]])
