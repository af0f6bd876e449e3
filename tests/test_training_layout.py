"""Training-only forwards: the mask curriculum's end points and the autoencoding objective."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import ITEMS, QUERY

from reranker import EmptyInputError, GistConfig, GistReranker
from reranker.core import layout


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


def test_autoencode_targets_of_another_item(tiny_model: GistReranker) -> None:
    """The control: item A's gists, item B's tokens as the target — the same as B's own loss only if
    the gists said nothing; a count mismatch is refused."""
    a, b = "Acme phone 256GB blue 2023.", "Steel kettle 1.7 L, 2200 W."
    with torch.no_grad():
        crossed = tiny_model.autoencode_loss([a], num_tokens=4, targets_of=[b])
        own_b = tiny_model.autoencode_loss([b], num_tokens=4)
        assert torch.equal(
            tiny_model.autoencode_loss([a], num_tokens=4, targets_of=[a]),
            tiny_model.autoencode_loss([a], num_tokens=4),
        )
    assert not torch.isclose(crossed, own_b)
    with pytest.raises(ValueError, match="1 texts for 2 items"):
        tiny_model.autoencode_loss([a, b], num_tokens=4, targets_of=[a])


def test_autoencode_control_regenerates_the_item_half_the_list_away(tiny_model: GistReranker) -> None:
    """Item i's gists regenerate item i + N/2's text; over identical items it is the own loss."""
    items = ["Acme phone 256GB blue 2023.", "Steel kettle 1.7 L.", "Oak desk 120 cm.", "Wool scarf, red."]
    with torch.no_grad():
        control = tiny_model.autoencode_control(items, num_tokens=4)
        assert torch.equal(control, tiny_model.autoencode_loss(items, 4, targets_of=[*items[2:], *items[:2]]))
        assert not torch.isclose(control, tiny_model.autoencode_loss(items, num_tokens=4))
        shifted = tiny_model.autoencode_control(items, num_tokens=4, shift=1)
        assert torch.equal(shifted, tiny_model.autoencode_loss(items, 4, targets_of=[*items[1:], items[0]]))
        twins = [items[0], items[0]]
        assert torch.equal(tiny_model.autoencode_control(twins, 4), tiny_model.autoencode_loss(twins, 4))


def test_hybrid_autoencode_target_starts_after_the_kept_prefix(
    tiny_base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With t raw tokens kept, regenerating them would be copying; the target is the next tokens."""
    model = GistReranker.from_pretrained(
        tiny_base, GistConfig(num_gist=4, keep_item_prefix=4, dtype="float32"), device="cpu"
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
        model.autoencode_loss([item], num_tokens=3)
    assert targets == [ids[4:7]]
    with pytest.raises(EmptyInputError, match="no token after the first 4"):
        model.autoencode_loss(["kettle"], num_tokens=3)


QUERIES = ["256GB phone 2023", "kettle 1.7 L", "black headphones 2021 over-ear wireless"]


@pytest.mark.parametrize(("t", "read_bias"), [(0, 0.0), (5, 0.0), (0, 2.0), (5, 2.0)])
def test_packed_queries_equal_each_query_alone(tiny_base: Path, t: int, read_bias: float) -> None:
    """Several queries in one item row score exactly as each query alone: no query sees another."""
    gist = GistConfig(num_gist=4, keep_item_prefix=t, gist_read_bias=read_bias, dtype="float32")
    model = GistReranker.from_pretrained(tiny_base, gist, device="cpu")
    packs = [QUERIES, QUERIES[1:2], QUERIES[::-1], QUERIES[:2]]  # differing counts and lengths per row
    for full in (False, True):
        packed = model.score_packed(ITEMS, packs, full=full)
        for i, (item, queries) in enumerate(zip(ITEMS, packs, strict=True)):
            alone = torch.stack(
                [(model.score_full if full else model.score_masked)(q, [item])[0] for q in queries]
            )
            torch.testing.assert_close(packed[i], alone, rtol=1e-4, atol=1e-5)


def test_packed_queries_must_not_see_each_other(
    tiny_model: GistReranker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Letting each query block read the earlier ones (plain causal over the query region) changes
    every query but the first: the test would catch a packing mask that forgot the block structure."""
    real = layout.packed
    head = len(tiny_model.item_ids(ITEMS[:1])[0][0]) + tiny_model.gist.num_gist

    def leaky(*args: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        positions, allowed, cut = real(*args)
        allowed = allowed.clone()
        allowed[:, head:, head:] |= torch.tril(torch.ones_like(allowed[0, head:, head:]))
        return positions, allowed, cut

    reference = tiny_model.score_packed(ITEMS[:1], [QUERIES])[0]
    monkeypatch.setattr(layout, "packed", leaky)
    leaked = tiny_model.score_packed(ITEMS[:1], [QUERIES])[0]
    torch.testing.assert_close(leaked[0], reference[0])
    assert float((leaked[1:] - reference[1:]).abs().max()) > 1e-3 * float(reference.abs().max())


def test_packed_item_visibility_matches_the_single_query_curriculum(tiny_model: GistReranker) -> None:
    packed = tiny_model.score_packed(ITEMS, [[QUERY]] * len(ITEMS), item_visibility=0.5)
    alone = tiny_model.score_masked(QUERY, ITEMS, item_visibility=0.5)
    torch.testing.assert_close(torch.cat(packed), alone, rtol=1e-4, atol=1e-5)
    with pytest.raises(EmptyInputError, match="at least one query"):
        tiny_model.score_packed(ITEMS[:1], [[]])


@pytest.mark.parametrize("full", [False, True])
def test_query_states_are_the_scored_forward(tiny_model: GistReranker, full: bool) -> None:
    """The tail states gathered for hidden-state distillation are the query's own: their last layer at
    the score token, through the final norm and the head, is exactly the score."""
    scores, states = tiny_model.query_states(QUERY, ITEMS, full)
    reference = tiny_model.score_full(QUERY, ITEMS) if full else tiny_model.score_masked(QUERY, ITEMS)
    torch.testing.assert_close(scores, reference)
    ell = len(tiny_model.query_ids(QUERY)) + 1
    assert states.shape == (len(ITEMS), tiny_model.num_layers, ell, tiny_model.lm.config.hidden_size)
    rescored = tiny_model.head(tiny_model._decoder().norm(states[:, -1, -1])).squeeze(-1)
    torch.testing.assert_close(rescored, reference, rtol=1e-5, atol=1e-6)
    # every item is a different length, so a gather off by one row position would not pass above;
    # and the query's states do depend on the item (through the gists or directly)
    assert not torch.allclose(states[0, -1], states[1, -1], rtol=1e-3)
