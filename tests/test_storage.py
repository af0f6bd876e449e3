"""How the store keeps a unit's K/V (`RerankerConfig.kv_storage`) and budgets in bytes (`?kib=`): the online
path reads a dequantized unit exactly as a plain forward over those values does, for every compressor;
the storage is a setting of the stored unit, so every writer and reader of one view agrees on it on any
machine; a budget in KiB buys the most positions that fit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlencode

import pytest
import torch
from helpers import ITEMS, QUERY
from transformers import DynamicCache
from typer.testing import CliRunner

from reranker import Reranker, RerankerConfig
from reranker.catalog.events import ItemFields
from reranker.cli import app
from reranker.core import config as core_config
from reranker.core.checkpoints import DEFAULT_MODEL, PRESETS, split_spec
from reranker.core.compressors import COMPRESSORS
from reranker.core.config import template_for
from reranker.core.kv import StoredUnit
from reranker.core.kv_codec import decode, payload_nbytes
from reranker.serving.capacity import blob_bytes
from reranker.serving.local_run import serving_checkpoint
from streaming.materialize import compress_rows

pytestmark = pytest.mark.lowbit


def _reader(base: Path, compressor: str, storage: str | None, rule: str = "head") -> Reranker:
    gist = RerankerConfig(
        num_gist=4, compressor=compressor, kv_storage=storage, score_rule=rule, **template_for(rule)
    )
    return Reranker.from_pretrained(base, gist, device="cpu")


def _plain_forward(model: Reranker, query: str, unit: StoredUnit) -> torch.Tensor:
    """One candidate's score by the body's own cached forward over `unit`'s K/V, as it is: no batch, no
    padded column, no hand-built mask (the body's causal mask after a past of the unit's columns), the
    query numbered from the unit's query start."""
    tail = model.query_tail(query)
    cache = [(unit.kv[i, 0][None], unit.kv[i, 1][None]) for i in range(model.num_layers)]
    ell = tail.embeds.shape[0]
    with torch.no_grad():
        hidden = model.decoder()(
            inputs_embeds=tail.embeds[None],
            position_ids=unit.query_start + torch.arange(ell)[None],
            cache=DynamicCache(cache),
            use_cache=True,
        ).last_hidden_state
        return model.tail_scores(hidden, tail.targets)


@pytest.mark.parametrize("compressor", COMPRESSORS)
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("storage", ["int8", "int4", "int2"])
def test_online_equals_a_plain_forward_at_the_dequantized_values(
    tiny_bases: dict[str, Path], compressor: str, arch: str, storage: str
) -> None:
    """Items of mixed length in one batch (padded columns), both score rules: the online path over the
    units as the store returns them equals the body's own forward over exactly those values."""
    for rule in ("head", "query_likelihood"):
        model = _reader(tiny_bases[arch], compressor, storage, rule)
        exact = model.compress(ITEMS, batch_size=3)
        stored = model.as_stored(exact)
        assert all(not torch.equal(s.kv, e.kv) for s, e in zip(stored, exact, strict=True))  # lossy
        online = model.score(QUERY, stored)
        plain = torch.cat([_plain_forward(model, QUERY, u) for u in stored])
        torch.testing.assert_close(online, plain, rtol=1e-4, atol=1e-4 * float(plain.abs().max()))
        assert not torch.allclose(online, model.score(QUERY, exact), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_the_plain_forward_is_the_compressors_reference_at_float32(tiny_base: Path, compressor: str) -> None:
    """The reference above, anchored: over float32 units it is the full forward each compressor names."""
    model = _reader(tiny_base, compressor, None)
    units = model.compress(ITEMS, batch_size=3)
    assert model.as_stored(units) == units  # a float32 model's float32 storage is lossless: kept as is
    plain = torch.cat([_plain_forward(model, QUERY, u) for u in units])
    reference = model.reference_scores(QUERY, ITEMS)
    torch.testing.assert_close(plain, reference, rtol=1e-4, atol=1e-4 * float(reference.abs().max()))


def test_the_storage_is_a_setting_of_the_stored_unit(tiny_base: Path) -> None:
    """Each storage has its own store fingerprint (one Feast view holds one precision); storing as the
    model's own dtype is the default, with the default's fingerprint; reading settings stay outside."""
    prints = {
        s: _reader(tiny_base, "prefix", s).fingerprint for s in (None, "bfloat16", "int8", "int4", "int2")
    }
    assert len(set(prints.values())) == 5
    assert RerankerConfig(kv_storage="float32") == RerankerConfig()  # a float32 model stored as float32
    assert (
        RerankerConfig(dtype="bfloat16").storage == "bfloat16"
        and RerankerConfig(kv_storage="int4").storage == "int4"
    )
    assert "kv_storage" in RerankerConfig().store_settings


def test_writers_encode_at_the_models_storage(tiny_base: Path) -> None:
    """The consumer's and the backfill's one encoder (`compress_rows`) writes the model's storage."""
    model = _reader(tiny_base, "prefix", "int4")
    items = [
        (f"item-{i}", ItemFields(title=t[:40], attributes={}, description=t), 1) for i, t in enumerate(ITEMS)
    ]
    rows = compress_rows(model, items[:2])
    for row in rows:
        decoded = decode(row.kv, expected_fingerprint=model.fingerprint)
        assert decoded.storage_dtype == "int4" and row.fingerprint == model.fingerprint
        assert (
            len(row.kv)
            - payload_nbytes(
                model.num_layers, decoded.kv.positions, model.num_kv_heads, model.head_dim, "int4"
            )
            < 2048
        )  # frame and metadata


@pytest.mark.parametrize("storage", ["bfloat16", "int8", "int4", "int2"])
@pytest.mark.parametrize("t", [0, 3])
def test_a_budget_in_kib_buys_the_most_positions_that_fit(tiny_base: Path, storage: str, t: int) -> None:
    kib = 3.0
    ref = f"{tiny_base}?compressor=prefix&keep_item_prefix={t}&kib={kib}&kv_storage={storage}"
    model = Reranker.from_pretrained(ref, device="cpu")
    g = model.gist
    dims = (model.num_layers, model.num_kv_heads, model.head_dim)
    positions = t + g.num_gist
    assert g.storage == storage
    assert payload_nbytes(dims[0], positions, dims[1], dims[2], storage) <= kib * 1024
    assert payload_nbytes(dims[0], positions + 1, dims[1], dims[2], storage) > kib * 1024
    assert blob_bytes(model) - payload_nbytes(dims[0], positions, dims[1], dims[2], storage) < 2048


def test_a_budget_in_kib_is_refused_in_words(tiny_base: Path) -> None:
    with pytest.raises(ValueError, match=r"kib=0\.01 holds 0 positions at int4"):
        Reranker.from_pretrained(f"{tiny_base}?compressor=prefix&kib=0.01&kv_storage=int4", device="cpu")
    for bad in ("0", "-3", "abc", "nan", "inf"):
        with pytest.raises(ValueError, match="is not a positive number of KiB"):
            split_spec(f"{tiny_base}?kib={bad}")
    with pytest.raises(ValueError, match="sets both num_gist and kib"):
        Reranker.from_pretrained(f"{tiny_base}?kib=3&num_gist=4", device="cpu")
    # a preset's budget in positions gives way to one in bytes
    assert "num_gist" not in split_spec(f"{DEFAULT_MODEL}?kib=360")[1]


def test_trained_gists_keep_their_budget_whatever_the_kib(tiny_base: Path, tmp_path: Path) -> None:
    path = _reader(tiny_base, "gist", None).save_pretrained(tmp_path / "gists")
    assert Reranker.from_pretrained(f"{path}?kib=3", device="cpu").gist.num_gist == 4  # 3 KiB: 4 fit
    with pytest.raises(ValueError, match="gists were trained with k=4"):
        Reranker.from_pretrained(f"{path}?kib=6", device="cpu")  # 8 would fit


def test_plan_takes_a_budget_in_kib(tiny_base: Path, tmp_path: Path) -> None:
    path = _reader(tiny_base, "prefix", None).save_pretrained(tmp_path / "m")
    args = ["plan", "--items", "1000", "--qps", "1", "--candidates", "5", "--consumer-items-per-s", "10"]
    result = CliRunner().invoke(app, [*args, "--model", f"{path}?kib=3", "--kv-storage", "int4"])
    assert result.exit_code == 0, result.output
    model = Reranker.from_pretrained(f"{path}?kib=3&kv_storage=int4", device="cpu")
    assert f"k={model.gist.num_gist}, K/V stored as int4" in result.output
    assert f"{blob_bytes(model) / 1024:.1f} KiB" in result.output


_FINGERPRINTS = """
import json, sys, tempfile
from pathlib import Path
from reranker import Reranker
from reranker.core.checkpoints import model_spec
from reranker.serving.local_run import serving_checkpoint
ref = sys.argv[1]
consumer = Reranker.read(ref, None)  # consume / materialize with their defaults
server = Reranker.from_pretrained(model_spec(ref))  # what Triton loads for `serve --model REF`
demo = serving_checkpoint(ref, Path(tempfile.mkdtemp())).model  # the demo's consumer and server
print(json.dumps([consumer.fingerprint, server.fingerprint, demo.fingerprint]))
"""


def _default_settings_on(base: Path) -> str:
    """The default model's settings (compressor, budget, storage, template) over a tiny base."""
    return f"{base}?{urlencode(PRESETS[DEFAULT_MODEL].settings)}"


def test_consumer_server_and_demo_agree_on_the_fingerprint_across_cpus(tiny_base: Path) -> None:
    """Started with defaults on CPUs of different capability (ATEN_CPU_CAPABILITY=avx2 hides AVX-512
    and AMX from PyTorch, as on an AVX2-only machine), the consumer, the server and the demo stamp the
    same fingerprint."""
    ref = _default_settings_on(tiny_base)
    prints = []
    for capability in ({}, {"ATEN_CPU_CAPABILITY": "avx2"}):
        env = os.environ | capability
        run = subprocess.run(
            [sys.executable, "-c", _FINGERPRINTS, ref], capture_output=True, text=True, env=env, check=False
        )
        assert run.returncode == 0, run.stderr[-2000:]
        prints += json.loads(run.stdout.strip().splitlines()[-1])
    assert len(set(prints)) == 1, prints


@pytest.mark.parametrize("native", [True, False])
def test_no_default_depends_on_native_bf16(
    tiny_base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    """The same, on any machine: whether bf16 is native changes compute, never what is stored."""
    ref = _default_settings_on(tiny_base)
    expected = Reranker.from_pretrained(ref, device="cpu").fingerprint
    monkeypatch.setattr(core_config, "native_bf16", lambda device="cpu": native)
    assert Reranker.read(ref, None, device="cpu").fingerprint == expected
    assert serving_checkpoint(ref, tmp_path).model.fingerprint == expected
