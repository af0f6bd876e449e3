"""Fingerprints: stable across loads of one checkpoint, changed by any weight or config change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from helpers import ITEMS, QUERY
from tiny import build_tiny_base

from reranker import FingerprintMismatchError, GistConfig, GistReranker
from reranker.core.config import template_for

FP32 = GistConfig(num_gist=4, dtype="float32")


@pytest.fixture(scope="module")
def checkpoint(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = GistReranker.from_pretrained(tiny_base, FP32, device="cpu")
    with torch.no_grad():
        model.gist_embeddings.add_(0.5)  # a "trained" checkpoint differs from a fresh wrap
    return model.save_pretrained(tmp_path_factory.mktemp("ckpt"))


def test_fingerprint_is_stable_across_reloads(checkpoint: Path) -> None:
    a = GistReranker.from_pretrained(checkpoint, device="cpu")
    b = GistReranker.from_pretrained(checkpoint, device="cpu")
    assert a.fingerprint == b.fingerprint
    kvs = a.compress(ITEMS)
    torch.testing.assert_close(b.score(QUERY, kvs), a.score(QUERY, kvs), rtol=0, atol=0)


def test_fresh_wraps_of_one_base_agree(tiny_base: Path) -> None:
    a = GistReranker.from_pretrained(tiny_base, FP32, device="cpu")
    b = GistReranker.from_pretrained(tiny_base, FP32, device="cpu")
    assert a.fingerprint == b.fingerprint


def test_checkpoint_restores_weights(checkpoint: Path, tiny_base: Path) -> None:
    loaded = GistReranker.from_pretrained(checkpoint, device="cpu")
    fresh = GistReranker.from_pretrained(tiny_base, FP32, device="cpu")
    assert loaded.fingerprint != fresh.fingerprint
    torch.testing.assert_close(loaded.gist_embeddings, fresh.gist_embeddings + 0.5)


@pytest.mark.parametrize("part", ["gist_embeddings", "score_embedding", "head", "base"])
def test_fingerprint_changes_with_any_weight(checkpoint: Path, part: str) -> None:
    model = GistReranker.from_pretrained(checkpoint, device="cpu")
    before = model.fingerprint
    tensor = {
        "gist_embeddings": model.gist_embeddings,
        "score_embedding": model.score_embedding,
        "head": model.head.weight,
        "base": model.lm.get_decoder().layers[0].mlp.up_proj.weight,
    }[part]
    with torch.no_grad():
        tensor[0, 0] += 1e-3
    assert model.fingerprint != before


def test_fingerprint_changes_with_gist_config(tiny_base: Path) -> None:
    a = GistReranker.from_pretrained(tiny_base, FP32, device="cpu")
    b = GistReranker.from_pretrained(
        tiny_base, FP32.model_copy(update={"max_query_tokens": 32}), device="cpu"
    )
    assert a.fingerprint != b.fingerprint
    likelihood = GistReranker.from_pretrained(
        tiny_base,
        FP32.model_copy(update=template_for("query_likelihood") | {"score_rule": "query_likelihood"}),
        device="cpu",
    )
    assert likelihood.fingerprint not in (a.fingerprint, b.fingerprint)


def test_foreign_kv_is_refused(checkpoint: Path, tiny_base: Path) -> None:
    trained = GistReranker.from_pretrained(checkpoint, device="cpu")
    fresh = GistReranker.from_pretrained(tiny_base, FP32, device="cpu")
    kvs = fresh.compress(ITEMS)
    with pytest.raises(FingerprintMismatchError, match="fingerprint mismatch") as err:
        trained.score(QUERY, kvs)
    assert err.value.got == fresh.fingerprint and err.value.expected == trained.fingerprint


def test_checkpoint_refuses_a_different_gist_config(checkpoint: Path) -> None:
    with pytest.raises(ValueError, match="was trained with"):
        GistReranker.from_pretrained(checkpoint, GistConfig(num_gist=8, dtype="float32"), device="cpu")


def test_checkpoint_over_a_different_base_is_refused(tiny_bases: dict[str, Path], tmp_path: Path) -> None:
    """A checkpoint that references its base must not silently load over other weights at that path."""
    base = tmp_path / "base"
    shutil.copytree(tiny_bases["llama"], base)
    ckpt = GistReranker.from_pretrained(base, FP32, device="cpu").save_pretrained(tmp_path / "ckpt")
    build_tiny_base(base, "llama", seed=1)  # same path, other weights
    with pytest.raises(ValueError, match="not the one it was trained on"):
        GistReranker.from_pretrained(ckpt, device="cpu")
