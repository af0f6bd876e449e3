"""A reader trained for the store (`core/reader_adapter.py`): adapters that act at query rows only leave
every stored unit bit-identical, so a retrained reader reads the same store, and the online path still
equals each compressor's reference forward with a trained adapter in it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import ITEMS, QUERY

from reranker import GistConfig, GistReranker
from reranker.core.config import template_for

pytestmark = pytest.mark.reader_adapter

RANK = 2


def trained(model: GistReranker, seed: int = 0) -> GistReranker:
    """`model` with its reader adapter and head moved off their fresh values, as training would."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.reader_adapter.up.values():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
        model.head.weight.add_(torch.randn(model.head.weight.shape, generator=g) * 0.1)
    return model


def reader(base: Path, compressor: str, t: int, rule: str, rank: int = RANK) -> GistReranker:
    settings = {"score_rule": rule, **template_for(rule)}
    gist = GistConfig(
        num_gist=4,
        keep_item_prefix=t,
        compressor=compressor,
        reader_adapter_rank=rank,
        dtype="float32",
        **settings,
    )
    return GistReranker.from_pretrained(base, gist, device="cpu")


@pytest.mark.parametrize("rule", ["head", "query_likelihood"])
@pytest.mark.parametrize("t", [0, 5])
@pytest.mark.parametrize("compressor", ["gist", "select", "prefix"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_online_equals_reference_with_a_trained_reader(
    tiny_bases: dict[str, Path], arch: str, compressor: str, t: int, rule: str
) -> None:
    model = trained(reader(tiny_bases[arch], compressor, t, rule))
    kvs = model.compress(ITEMS, batch_size=3)
    online, reference = model.score(QUERY, kvs), model.reference_scores(QUERY, ITEMS)
    torch.testing.assert_close(online, reference, rtol=1e-4, atol=1e-4 * float(reference.abs().max()))
    untrained = model.with_gist_config(model.gist.model_copy(update={"reader_adapter_rank": 0}), True)
    assert not torch.allclose(online, untrained.score(QUERY, kvs), rtol=1e-3), "the adapter must act"


@pytest.mark.parametrize("compressor", ["gist", "select", "prefix"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_stored_units_are_bit_identical_with_and_without_the_reader(
    tiny_bases: dict[str, Path], arch: str, compressor: str
) -> None:
    plain = reader(tiny_bases[arch], compressor, t=3, rule="head", rank=0)
    adapted = trained(
        plain.with_gist_config(plain.gist.model_copy(update={"reader_adapter_rank": RANK}), True)
    )
    assert adapted.fingerprint == plain.fingerprint  # one store
    assert adapted.reader_fingerprint != plain.reader_fingerprint  # two readers
    for a, b in zip(adapted.compress(ITEMS), plain.compress(ITEMS), strict=True):
        assert torch.equal(a.kv, b.kv) and a.fingerprint == b.fingerprint
    # and the plain reader's units are read by the trained reader without recompression
    assert torch.isfinite(adapted.score(QUERY, plain.compress(ITEMS))).all()


def test_an_adapter_on_item_rows_would_change_every_stored_unit(tiny_base: Path) -> None:
    """The mutation the identity test guards against: the same adapter run on the item's rows too
    (compression inside `reader_adapted()`) writes other K/V."""
    model = trained(reader(tiny_base, "prefix", t=0, rule="head"))
    kept = model.compress(ITEMS)
    with model.reader_adapted():
        leaked = model.compress(ITEMS)
    assert not any(torch.allclose(a.kv, b.kv) for a, b in zip(kept, leaked, strict=True))


def test_the_whole_item_reading_has_the_adapter_at_query_rows_only(tiny_base: Path) -> None:
    """The shadow (whole item, plain causal) reads the item's K/V as stored: the same as reading a
    prefix that holds the whole item online."""
    model = trained(reader(tiny_base, "prefix", t=0, rule="head"))
    whole = model.with_gist_config(model.gist.model_copy(update={"num_gist": 256}))  # the reader kept
    torch.testing.assert_close(
        whole.score(QUERY, whole.compress(ITEMS)), model.score_full(QUERY, ITEMS), rtol=1e-4, atol=1e-4
    )


def test_a_reader_checkpoint_round_trips(tiny_base: Path, tmp_path: Path) -> None:
    model = trained(reader(tiny_base, "prefix", t=0, rule="head"))
    loaded = GistReranker.from_pretrained(model.save_pretrained(tmp_path / "ckpt"), device="cpu")
    assert (loaded.fingerprint, loaded.reader_fingerprint) == (model.fingerprint, model.reader_fingerprint)
    kvs = model.compress(ITEMS)
    torch.testing.assert_close(loaded.score(QUERY, kvs), model.score(QUERY, kvs), rtol=0, atol=0)
