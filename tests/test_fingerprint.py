"""Fingerprints: stable across loads of one checkpoint, changed by any weight or config change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from helpers import ITEMS, QUERY

from reranker import FingerprintMismatchError, Reranker, RerankerConfig
from reranker.core.config import template_for
from reranker.core.tiny_base import build_tiny_base

FP32 = RerankerConfig(num_gist=4, dtype="float32")


@pytest.fixture(scope="module")
def checkpoint(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = Reranker.from_pretrained(tiny_base, FP32, device="cpu")
    with torch.no_grad():
        model.gist_embeddings.add_(0.5)  # a "trained" checkpoint differs from a fresh wrap
    return model.save_pretrained(tmp_path_factory.mktemp("ckpt"))


def test_fingerprint_is_stable_across_reloads(checkpoint: Path) -> None:
    a = Reranker.from_pretrained(checkpoint, device="cpu")
    b = Reranker.from_pretrained(checkpoint, device="cpu")
    assert a.fingerprint == b.fingerprint
    kvs = a.compress(ITEMS)
    torch.testing.assert_close(b.score(QUERY, kvs), a.score(QUERY, kvs), rtol=0, atol=0)


def test_fresh_wraps_of_one_base_agree(tiny_base: Path) -> None:
    a = Reranker.from_pretrained(tiny_base, FP32, device="cpu")
    b = Reranker.from_pretrained(tiny_base, FP32, device="cpu")
    assert a.fingerprint == b.fingerprint


def test_checkpoint_restores_weights(checkpoint: Path, tiny_base: Path) -> None:
    loaded = Reranker.from_pretrained(checkpoint, device="cpu")
    fresh = Reranker.from_pretrained(tiny_base, FP32, device="cpu")
    assert loaded.fingerprint != fresh.fingerprint
    torch.testing.assert_close(loaded.gist_embeddings, fresh.gist_embeddings + 0.5)


@pytest.mark.parametrize(
    ("part", "store_changes"),
    [("gist_embeddings", True), ("base", True), ("score_embedding", False), ("head", False)],
)
def test_fingerprint_changes_with_any_weight(checkpoint: Path, part: str, store_changes: bool) -> None:
    """Every weight changes the whole model's fingerprint; only those a stored unit depends on change the
    store's (the score token and head act on query rows only)."""
    model = Reranker.from_pretrained(checkpoint, device="cpu")
    store, reader = model.fingerprint, model.reader_fingerprint
    tensor = {
        "gist_embeddings": model.gist_embeddings,
        "score_embedding": model.score_embedding,
        "head": model.head.weight,
        "base": model.lm.get_decoder().layers[0].mlp.up_proj.weight,
    }[part]
    with torch.no_grad():
        tensor[0, 0] += 1e-3
    assert model.reader_fingerprint != reader
    assert (model.fingerprint != store) == store_changes


@pytest.mark.parametrize(
    ("compressor", "setting", "store_changes"),
    [
        ("gist", {"max_item_tokens": 32}, True),
        ("gist", {"max_query_tokens": 32}, False),
        ("gist", {"reader_adapter_rank": 2}, False),
        ("prefix", {"query_template": "\nAsked: {query}\nRelevant:"}, False),
        ("select", {"query_template": "\nAsked: {query}\nRelevant:"}, True),  # the lead-in observes
        ("gist", template_for("query_likelihood") | {"score_rule": "query_likelihood"}, False),
    ],
)
def test_fingerprint_changes_with_gist_config(
    tiny_base: Path, compressor: str, setting: dict, store_changes: bool
) -> None:
    """Every setting changes the whole model's fingerprint; reading settings leave the store's as it is,
    unless the compressor's own forward reads them."""
    config = FP32.model_copy(update={"compressor": compressor})
    a = Reranker.from_pretrained(tiny_base, config, device="cpu")
    b = a.with_gist_config(RerankerConfig(**(config.model_dump() | setting)), keep_gists=True)
    assert a.reader_fingerprint != b.reader_fingerprint
    assert (a.fingerprint != b.fingerprint) == store_changes


def test_foreign_kv_is_refused(checkpoint: Path, tiny_base: Path) -> None:
    trained = Reranker.from_pretrained(checkpoint, device="cpu")
    fresh = Reranker.from_pretrained(tiny_base, FP32, device="cpu")
    kvs = fresh.compress(ITEMS)
    with pytest.raises(FingerprintMismatchError, match="fingerprint mismatch") as err:
        trained.score(QUERY, kvs)
    assert err.value.got == fresh.fingerprint and err.value.expected == trained.fingerprint


def test_checkpoint_refuses_a_different_gist_config(checkpoint: Path) -> None:
    with pytest.raises(ValueError, match="was trained with"):
        Reranker.from_pretrained(checkpoint, RerankerConfig(num_gist=8, dtype="float32"), device="cpu")


def test_checkpoint_over_a_different_base_is_refused(tiny_bases: dict[str, Path], tmp_path: Path) -> None:
    """A checkpoint that references its base must not silently load over other weights at that path."""
    base = tmp_path / "base"
    shutil.copytree(tiny_bases["llama"], base)
    ckpt = Reranker.from_pretrained(base, FP32, device="cpu").save_pretrained(tmp_path / "ckpt")
    build_tiny_base(base, "llama", seed=1)  # same path, other weights
    with pytest.raises(ValueError, match="not the one it was trained on"):
        Reranker.from_pretrained(ckpt, device="cpu")


def test_loads_under_inference_mode(checkpoint: Path, tiny_base: Path) -> None:
    """Serving code loads under torch.inference_mode(): the fingerprint reads parameter versions, so
    the parameters must be real tensors, and K/V compressed there must pass for the same model."""
    outside = Reranker.from_pretrained(checkpoint, device="cpu")
    with torch.inference_mode():
        inside = Reranker.from_pretrained(checkpoint, device="cpu")
        fresh = Reranker.from_pretrained(tiny_base, FP32, device="cpu")
        assert inside.fingerprint == outside.fingerprint
        scores = inside.score(QUERY, inside.compress(ITEMS))
    assert not any(p.is_inference() for p in (*inside.parameters(), *fresh.parameters()))
    torch.testing.assert_close(scores, outside.score(QUERY, outside.compress(ITEMS)), rtol=0, atol=0)


@pytest.fixture(scope="module")
def bf16_checkpoint(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # "trained" while computing wider than it stores, as on a CPU without native bf16: what it saves
    # (bf16 weights) must carry the fingerprint those weights have when loaded anywhere
    gist = RerankerConfig(num_gist=4, dtype="bfloat16")
    model = Reranker.from_pretrained(tiny_base, gist, device="cpu", compute_dtype="float32")
    with torch.no_grad():
        model.gist_embeddings.add_(0.5)
    return model.save_pretrained(tmp_path_factory.mktemp("bf16"))


def test_compute_dtype_is_chosen_at_load_and_storage_stays(bf16_checkpoint: Path) -> None:
    """A bf16 checkpoint computes in fp32 where asked (what `auto` picks on a CPU without native bf16):
    same fingerprint, K/V still bf16 and interchangeable with the bf16-computed model's."""
    native = Reranker.from_pretrained(bf16_checkpoint, device="cpu", compute_dtype="bfloat16")
    wide = Reranker.from_pretrained(bf16_checkpoint, device="cpu", compute_dtype="float32")
    assert native.dtype == torch.bfloat16 and wide.dtype == torch.float32
    assert wide.kv_dtype == native.kv_dtype == torch.bfloat16
    assert wide.fingerprint == native.fingerprint
    assert all(p.dtype == torch.float32 for p in wide.parameters())
    kvs = wide.compress(ITEMS)
    assert all(kv.kv.dtype == torch.bfloat16 for kv in kvs)
    # the narrower model accepts the wider one's K/V and reads it within bf16 precision
    torch.testing.assert_close(native.score(QUERY, kvs), wide.score(QUERY, kvs), rtol=0.05, atol=0.05)
    saved = wide.save_pretrained(bf16_checkpoint.parent / "resaved")  # written back in the storage dtype
    assert Reranker.from_pretrained(saved, device="cpu").fingerprint == native.fingerprint
    with pytest.raises(ValueError, match="compute dtype 'int8'"):
        Reranker.from_pretrained(bf16_checkpoint, device="cpu", compute_dtype="int8")


def test_auto_compute_dtype_never_narrows_and_widens_emulated_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    from reranker.core import config

    monkeypatch.setattr(config, "native_bf16", lambda device="cpu": False)  # an AVX2-only CPU
    assert config.compute_dtype_for("bfloat16") == "float32"
    assert config.compute_dtype_for("float16") == "float32"
    assert config.compute_dtype_for("float32") == "float32"
    assert config.compute_dtype_for("bfloat16", "bfloat16") == "bfloat16"  # asked for explicitly
    monkeypatch.setattr(config, "native_bf16", lambda device="cpu": True)  # AVX512-BF16 / AMX
    assert config.compute_dtype_for("bfloat16") == "bfloat16"
    assert config.compute_dtype_for("float32") == "float32"


def test_removed_config_fields_migrate_at_their_old_default(checkpoint: Path, tmp_path: Path) -> None:
    """A checkpoint saved while the read bias existed (at 0.0) loads with its fingerprint; one trained
    with a bias is refused with a pointer to the tag that still has it."""
    import json

    for bias, ok in ((0.0, True), (2.0, False)):
        copy = Path(shutil.copytree(checkpoint, tmp_path / f"bias-{bias}"))
        meta = json.loads((copy / "gistrank.json").read_text())
        meta["gist"]["gist_read_bias"] = bias
        (copy / "gistrank.json").write_text(json.dumps(meta))
        if ok:
            loaded = Reranker.from_pretrained(copy, device="cpu")
            assert loaded.reader_fingerprint == meta["fingerprint"]
        else:
            with pytest.raises(ValueError, match=r"gist_read_bias.*commit faba5cc"):
                Reranker.from_pretrained(copy, device="cpu")


FORMAT_1_FIELDS = {
    "dtype",
    "keep_item_prefix",
    "max_item_tokens",
    "max_query_tokens",
    "num_gist",
    "query_template",
}


def test_a_new_config_field_keeps_every_older_checkpoints_fingerprint(tiny_base: Path) -> None:
    """A RerankerConfig field added after format 1 is hashed only off its default (`_LATER_FIELDS`): else
    every saved checkpoint, the shipped ones included, would stop loading. A new field must be listed
    there at its default, and setting it must still change the fingerprint."""
    from reranker.core.weights import _LATER_FIELDS

    assert set(RerankerConfig.model_fields) == FORMAT_1_FIELDS | set(_LATER_FIELDS)
    assert all(RerankerConfig.model_fields[name].default == value for name, value in _LATER_FIELDS.items())
    plain = Reranker.from_pretrained(tiny_base, FP32, device="cpu")
    pooled = plain.with_gist_config(FP32.model_copy(update={"gist_pool_windows": True}))
    assert pooled.fingerprint != plain.fingerprint


@pytest.mark.parametrize(
    ("old", "new"), [("GistReranker", "Reranker"), ("GistConfig", "RerankerConfig"), ("GistKV", "StoredUnit")]
)
def test_the_former_class_names_still_import_with_a_deprecation_line(old: str, new: str) -> None:
    import reranker

    with pytest.warns(DeprecationWarning, match=f"reranker.{old} is now reranker.{new}"):
        cls = getattr(reranker, old)
    assert cls is getattr(reranker, new)
