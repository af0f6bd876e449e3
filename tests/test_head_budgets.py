"""Per-head budgets for selection (`select_head_budget="adaptive"`, Ada-KV): a layer's k·H_kv columns are
shared unevenly among its KV heads; online, each layer's head reads exactly its own share, which equals
the full-context forward in which that head's query rows see only those columns; the codec stores the
real columns only."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from helpers import CATALOG_ITEMS, ITEMS, QUERY, CountingStore, catalog_row, make_lookup, text_of

from reranker.core import kv_codec, layout
from reranker.core.compressors.select import _chosen
from reranker.core.config import RerankerConfig, template_for
from reranker.core.errors import FingerprintMismatchError
from reranker.core.model import Reranker
from reranker.serving.status import Status

pytestmark = [pytest.mark.select, pytest.mark.kvzip]


def adaptive(base: Path, k: int = 4, t: int = 0, scorer: str = "snapkv", **extra: object) -> Reranker:
    gist = RerankerConfig(
        num_gist=k,
        keep_item_prefix=t,
        compressor="select",
        select_scorer=scorer,
        select_head_budget="adaptive",
        dtype="float32",
        **extra,
    )
    return Reranker.from_pretrained(base, gist, device="cpu")


def assert_scores_equal(online: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(online, expected, rtol=1e-4, atol=1e-4 * float(expected.abs().max()))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("scorer", ["snapkv", "kvzip"])
@pytest.mark.parametrize("t", [0, 5])
@pytest.mark.parametrize("rule", ["head", "query_likelihood"])
def test_per_head_budgets_equal_their_per_head_masked_forward(
    tiny_bases: dict[str, Path], arch: str, scorer: str, t: int, rule: str
) -> None:
    """Mixed lengths in two batches: ragged units beside a short item every head keeps whole."""
    model = adaptive(tiny_bases[arch], t=t, scorer=scorer, score_rule=rule, **template_for(rule))
    kvs = model.compress(ITEMS, batch_size=3)
    assert any(kv.head_tails is not None for kv in kvs) and any(kv.head_tails is None for kv in kvs)
    assert_scores_equal(model.score(QUERY, kvs), model.reference_scores(QUERY, ITEMS))


def test_a_layers_heads_share_its_budget_unevenly_at_the_bytes_of_uniform(tiny_base: Path) -> None:
    k = 10
    model = adaptive(tiny_base, k=k)
    uniform = model.with_gist_config(model.gist.model_copy(update={"select_head_budget": "uniform"}))
    long_items = [ITEMS[0], ITEMS[2]]
    for kv, same_k in zip(model.compress(long_items), uniform.compress(long_items), strict=True):
        shares = kv.tail_lens()  # (L, H_kv)
        assert kv.head_tails is not None and len(set(shares.flatten().tolist())) > 1
        assert (shares.sum(1) == k * model.num_kv_heads).all()
        assert shares.min() >= k // 5  # every head keeps its own top fifth of k
        assert kv.slots == int(shares.max()) > kv.positions == same_k.positions == k
        assert kv.stored_nbytes == same_k.stored_nbytes == same_k.nbytes < kv.nbytes  # pad: memory only
        pad = ~kv.real_columns()  # (L, H_kv, S)
        assert pad.any() and not kv.kv.permute(0, 2, 3, 1, 4)[pad].any()  # pad is zeros, never read


def test_each_head_reads_only_its_own_share_online(tiny_base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Letting every head read its unit's widest share (the pad of the narrower heads) breaks exactly
    the ragged units."""
    model = adaptive(tiny_base)
    kvs = model.compress(ITEMS)
    reference = model.reference_scores(QUERY, ITEMS)
    real_mask = layout.online_mask
    monkeypatch.setattr(
        layout,
        "online_mask",
        lambda lens, slots, tails, k, q: real_mask(
            lens, slots, tails.amax((1, 2), keepdim=True).expand_as(tails), k, q
        ),
    )
    wrong = model.score(QUERY, kvs)
    ragged = [i for i, kv in enumerate(kvs) if kv.head_tails is not None]
    whole = [i for i, kv in enumerate(kvs) if kv.slots == kv.item_tokens]  # short: every column kept
    assert ragged and whole
    assert float((wrong[ragged] - reference[ragged]).abs().max()) > 1e-3 * float(reference.abs().max())
    assert_scores_equal(wrong[whole], reference[whole])


def test_adaptive_budget_follows_where_attention_concentrates() -> None:
    """Head 0 attends to 8 columns, head 1 thinly to all: uniform gives each 5; adaptive gives each its
    own top 1 (a fifth of k) and the other 8 to the layer's heaviest columns — head 0's."""
    mass = torch.full((2, 20), 0.1)
    mass[0] = 0.0
    mass[0, :8] = 1.0
    assert _chosen(mass, 5, 1, adaptive=False).sum(1).tolist() == [5, 5]
    chosen = _chosen(mass, 5, 1, adaptive=True)
    assert chosen.sum(1).tolist() == [8, 2]
    assert chosen[0].nonzero().flatten().tolist() == list(range(8))
    assert _chosen(mass, 30, 1, adaptive=True).all()  # fewer columns than k: every head keeps all


def test_the_codec_stores_only_each_heads_real_columns(tiny_base: Path) -> None:
    model = adaptive(tiny_base, t=5)
    for kv in (u for u in model.compress(ITEMS) if u.head_tails is not None):
        decoded = kv_codec.decode(kv_codec.encode(kv, "h")).kv
        assert_scores_equal(model.score(QUERY, [decoded]), model.score(QUERY, [kv]))
        for storage in ("float32", "float16", "int8", "int4", "int2"):
            blob = kv_codec.encode(kv, "h", storage)
            back = kv_codec.decode(blob).kv
            assert back.head_tails == kv.head_tails and back.slots == kv.slots
            if storage in ("int8", "int4", "int2"):
                # half a step of the widest group: max|x| / 254 symmetric; (max − min) / 2(2^b − 1) asymmetric
                step = {"int8": 254, "int4": 15, "int2": 3}[storage]
                assert (back.kv - kv.kv).abs().max() <= kv.kv.abs().max() / step * (1 + 1e-3)
                assert not back.kv.permute(0, 2, 3, 1, 4)[~kv.real_columns()].any()
            else:
                assert torch.equal(back.kv, kv.kv.to(getattr(torch, storage)).float())
        dense = dataclasses.replace(kv, kv=kv.kv[..., : kv.positions, :], head_tails=None)
        uniform = kv_codec.encode(dense, "h")  # a uniform unit of the same s
        table = (model.num_layers * model.num_kv_heads) * 4  # the head_tails tensor, int32
        assert 0 < len(kv_codec.encode(kv, "h")) - len(uniform) <= table + 128  # + its header entry


def test_a_unit_whose_heads_do_not_share_a_layer_budget_is_refused(tiny_base: Path) -> None:
    kv = next(u for u in adaptive(tiny_base).compress(ITEMS) if u.head_tails is not None)
    shares = [list(layer) for layer in kv.head_tails]
    shares[0][0] -= 1  # layer 0 one column short
    with pytest.raises(ValueError, match="every layer the same"):
        dataclasses.replace(kv, head_tails=tuple(tuple(layer) for layer in shares))
    with pytest.raises(ValueError, match="like the K/V's layers and heads"):
        dataclasses.replace(kv, head_tails=kv.head_tails[:1])


def test_per_head_budgets_are_part_of_the_fingerprint(tiny_base: Path) -> None:
    model = adaptive(tiny_base)
    uniform = model.with_gist_config(model.gist.model_copy(update={"select_head_budget": "uniform"}))
    assert model.fingerprint != uniform.fingerprint
    kvs = model.compress(ITEMS[:1])
    with pytest.raises(FingerprintMismatchError):
        uniform.score(QUERY, kvs)


def test_ragged_units_travel_through_the_feature_store_to_the_online_score(
    tiny_base: Path, catalog, tmp_path: Path
) -> None:
    """Written to a real Feast store (SQLite) as blobs, read back by serving's lookup, scored as made."""
    model = adaptive(tiny_base)
    ids = sorted(CATALOG_ITEMS)[:6]
    kvs = model.compress([text_of(catalog, i) for i in ids])
    assert any(kv.head_tails is not None for kv in kvs)
    store = CountingStore(tmp_path / "feast", fingerprint=model.fingerprint)
    store.apply()
    store.write([catalog_row(catalog, i, kv) for i, kv in zip(ids, kvs, strict=True)])
    lookup, _ = make_lookup(model, catalog, store)
    try:
        got = lookup.fetch(ids)
    finally:
        lookup.refresh.close()
    assert all(got[i].status is Status.FEAST for i in ids)
    served = [got[i].kv for i in ids]
    assert [kv.head_tails for kv in served] == [kv.head_tails for kv in kvs]
    assert_scores_equal(model.score(QUERY, served), model.score(QUERY, kvs))
