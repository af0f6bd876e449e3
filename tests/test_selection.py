"""Training-free K/V selection (reranker/core/compressors/select.py): the online path equals the full-context
forward in which every layer's and head's query reads only the kept columns, and the pitfalls break it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import ITEMS, QUERY

from reranker import Reranker, RerankerConfig
from reranker.core import kv_codec
from reranker.core.compressors.select import (
    _chosen,
    eager_attention,
    observation_suffix,
    selected_columns,
    selected_mask_scores,
)

pytestmark = pytest.mark.select


def _kept(mass: torch.Tensor, k: int, pool: int) -> torch.Tensor:
    """The columns uniform budgets keep → (H, min(k, n)), ascending."""
    return _chosen(mass, k, pool, adaptive=False).nonzero()[:, 1].view(mass.shape[0], -1)


def select_model(base: Path, k: int = 4, t: int = 0, **extra: object) -> Reranker:
    gist = RerankerConfig(num_gist=k, keep_item_prefix=t, compressor="select", dtype="float32", **extra)
    return Reranker.from_pretrained(base, gist, device="cpu")


def reference(model: Reranker, items: list[str]) -> torch.Tensor:
    cols = selected_columns(model, model.item_ids(items)[0])
    return selected_mask_scores(model, QUERY, items, cols)


def assert_close(online: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(online, expected, rtol=1e-4, atol=1e-4 * float(expected.abs().max()))


def test_heads_and_layers_keep_their_own_columns(tiny_base: Path) -> None:
    """Selection is per layer and per KV head, and reading one head's columns for all breaks equality."""
    model = select_model(tiny_base, k=3)
    long_items = [ITEMS[0], ITEMS[2]]
    cols = selected_columns(model, model.item_ids(long_items)[0])
    assert cols[1].shape == (model.num_layers, model.num_kv_heads, 3)
    per_item = cols[1].reshape(-1, 3)
    assert len({tuple(c.tolist()) for c in per_item}) > 1  # not one choice shared by every head/layer
    kvs = model.compress(long_items)
    assert_close(model.score(QUERY, kvs), selected_mask_scores(model, QUERY, long_items, cols))
    shared = [c[:1, :1].expand_as(c) for c in cols]  # layer 0, head 0's columns everywhere
    wrong = selected_mask_scores(model, QUERY, long_items, shared)
    assert not torch.allclose(wrong, model.score(QUERY, kvs), rtol=1e-3)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("t", [0, 5])
def test_kept_columns_are_those_the_observation_rows_attend_to_most(
    tiny_bases: dict[str, Path], arch: str, t: int
) -> None:
    """Against transformers' own weights from one eager forward of the whole item + suffix: the pass
    forms weights for the observation rows only (on the cache of an SDPA forward of the rest), and
    left-pads a batch, yet keeps the same columns."""
    model = select_model(tiny_bases[arch], k=4, t=t)
    ids = model.item_ids(ITEMS)[0]
    got = selected_columns(model, ids)
    group = model.lm.config.num_attention_heads // model.num_kv_heads
    window, suffix = model.gist.select_window, observation_suffix(model)
    for item, cols in zip(ids, got, strict=True):
        j = len(item)
        with eager_attention(model), torch.inference_mode():
            out = model.decoder()(inputs_embeds=model.embed(item + suffix)[None], output_attentions=True)
        p = min(t, j)
        expected = []
        for weights in out.attentions:  # (1, H_q, S, S)
            mass = weights[0, :, max(0, j - window) :].sum(1)  # (H_q, S): paid by the observation rows
            mass = mass.view(model.num_kv_heads, group, -1).sum(1)[:, p:j]
            expected.append(_kept(mass, 4, model.gist.select_pool) + p)
        assert torch.equal(cols, torch.stack(expected))


def test_a_budget_that_keeps_every_token_is_the_full_context_model(tiny_base: Path, tmp_path: Path) -> None:
    """Any checkpoint's body works, the full-context teacher's included: with k ≥ j nothing is dropped,
    and the selected-K/V score is the teacher's own `score_full`."""
    teacher = Reranker.from_pretrained(tiny_base, RerankerConfig(num_gist=4, dtype="float32"), device="cpu")
    with torch.no_grad():
        teacher.head.weight.mul_(3.0)  # a "trained" head
    saved = teacher.save_pretrained(tmp_path / "teacher")
    loaded = Reranker.from_pretrained(saved, device="cpu")
    student = loaded.with_gist_config(
        loaded.gist.model_copy(update={"compressor": "select", "num_gist": 200})
    )
    kvs = student.compress(ITEMS)
    assert all(kv.kv.shape[3] == kv.item_tokens for kv in kvs)
    assert_close(student.score(QUERY, kvs), loaded.score_full(QUERY, ITEMS))


def test_selection_is_deterministic_and_batch_independent(tiny_base: Path) -> None:
    model = select_model(tiny_base)
    batched, again = model.compress(ITEMS, batch_size=4), model.compress(ITEMS, batch_size=4)
    alone = [model.compress([item])[0] for item in ITEMS]
    ids = model.item_ids(ITEMS)[0]
    cols_batched = selected_columns(model, ids)
    cols_alone = [selected_columns(model, [i])[0] for i in ids]
    for a, b, c, x, y in zip(batched, again, alone, cols_batched, cols_alone, strict=True):
        assert torch.equal(a.kv, b.kv)
        torch.testing.assert_close(a.kv, c.kv, rtol=1e-4, atol=1e-5)
        assert torch.equal(x, y)


def test_pooling_keeps_a_region_over_an_isolated_spike() -> None:
    mass = torch.zeros(1, 20)
    mass[0, 3] = 1.0  # one sub-token alone
    mass[0, 10:13] = 0.6  # a word of three sub-tokens
    assert 3 in _kept(mass, 3, pool=1)[0].tolist()  # unpooled, the spike wins a slot
    assert _kept(mass, 3, pool=3).tolist() == [[10, 11, 12]]
    assert _kept(mass, 30, pool=3).tolist() == [list(range(20))]  # fewer columns than k: all, in order


def test_the_fingerprint_covers_the_compressor(tiny_base: Path) -> None:
    gist = select_model(tiny_base).with_gist_config(RerankerConfig(num_gist=4, dtype="float32"))
    fingerprints = {
        gist.fingerprint,
        select_model(tiny_base).fingerprint,
        select_model(tiny_base, select_window=4).fingerprint,
        select_model(tiny_base, select_pool=3).fingerprint,
    }
    assert len(fingerprints) == 4
    plain = Reranker.from_pretrained(tiny_base, RerankerConfig(num_gist=4, dtype="float32"), device="cpu")
    assert plain.fingerprint == gist.fingerprint  # the default compressor hashes as before it existed
    with pytest.raises(ValueError, match="select_pool=4 must be odd"):
        RerankerConfig(compressor="select", select_pool=4)


@pytest.mark.parametrize("storage", ["float32", "bfloat16", "int8"])
def test_selected_entries_round_trip_the_codec(tiny_base: Path, storage: str) -> None:
    """Entries shorter than t + k (fewer selected columns) encode, decode and score like the rest."""
    model = select_model(tiny_base, k=6)
    kvs = model.compress(ITEMS)
    assert any(kv.kv.shape[3] < 6 for kv in kvs)
    decoded = [kv_codec.decode(kv_codec.encode(kv, "hash", storage), dtype=torch.float32).kv for kv in kvs]
    tol = {"float32": 1e-6, "bfloat16": 0.05, "int8": 0.05}[storage]
    torch.testing.assert_close(model.score(QUERY, decoded), model.score(QUERY, kvs), rtol=tol, atol=tol)


def test_a_model_reference_carries_reading_settings(tiny_base: Path, tmp_path: Path) -> None:
    """`REF?compressor=select&num_gist=6&max_item_tokens=512`: one string that every command and the
    Triton config take; a checkpoint keeps its trained weights, and its gists while k is unchanged."""
    from reranker.core.checkpoints import default_shadow, model_spec, split_spec

    trained = Reranker.from_pretrained(tiny_base, RerankerConfig(num_gist=4, dtype="float32"), device="cpu")
    with torch.no_grad():
        trained.gist_embeddings.add_(0.5)
    ckpt = trained.save_pretrained(tmp_path / "ckpt")
    spec = model_spec(ckpt, compressor="select", num_gist=6, max_item_tokens=512, select_pool=None)
    assert split_spec(Path(spec))[1] == split_spec(spec)[1]  # as a Path from a command-line option
    assert split_spec(spec) == (
        str(ckpt),
        {"compressor": "select", "num_gist": "6", "max_item_tokens": "512"},
    )
    model = Reranker.from_pretrained(spec, device="cpu")
    assert (model.gist.compressor, model.gist.num_gist, model.gist.max_item_tokens) == ("select", 6, 512)
    torch.testing.assert_close(model.score_full(QUERY, ITEMS), trained.score_full(QUERY, ITEMS))
    longer = Reranker.from_pretrained(model_spec(ckpt, max_item_tokens=512), device="cpu")
    assert torch.equal(longer.gist_embeddings, trained.gist_embeddings)  # same gists, longer cap
    assert longer.fingerprint != trained.fingerprint
    with pytest.raises(ValueError, match="trained with k=4"):
        Reranker.from_pretrained(model_spec(ckpt, num_gist=8), device="cpu")
    with pytest.raises(ValueError, match="another k, t or windows"):
        Reranker.from_pretrained(model_spec(ckpt, keep_item_prefix=3), device="cpu")
    hybrid = Reranker.from_pretrained(model_spec(ckpt, compressor="select", keep_item_prefix=3), device="cpu")
    assert (hybrid.gist.keep_item_prefix, hybrid.gist.num_gist) == (3, 4)  # t raw tokens + k selected
    assert [kv.prefix_tokens for kv in hybrid.compress(ITEMS)] == [
        min(3, len(i)) for i in hybrid.item_ids(ITEMS)[0]
    ]
    with pytest.raises(ValueError, match="unknown settings"):
        Reranker.from_pretrained(f"{ckpt}?dtype=float16", device="cpu")
    # a setting only another compressor reads would be ignored, yet change the fingerprint: refused
    with pytest.raises(ValueError, match=r"reads compressor=prefix, .* select_scorer by compressor=select"):
        split_spec(f"{ckpt}?compressor=prefix&select_scorer=kvzip")
    with pytest.raises(ValueError, match="gist_pool_windows by compressor=gist"):
        model_spec("gistrank-base-ql-prefix64", gist_pool_windows=True)  # the preset reads prefix caching
    pooled = split_spec("gistrank-base-ql-prefix64?compressor=gist&gist_pool_windows=true")[1]
    assert (pooled["compressor"], pooled["gist_pool_windows"]) == ("gist", "true")
    shadow = default_shadow(model_spec("gistrank-hybrid-t32-k8", max_item_tokens=1024))
    assert shadow == "gistrank-teacher-lora?max_item_tokens=1024"


def test_read_puts_a_commands_settings_over_the_models_own(tiny_base: Path, tmp_path: Path) -> None:
    """`Reranker.read`, the loader of demo, consume, materialize and bench-serving: a command's
    --compressor / --num-gist / --max-item-tokens go over a checkpoint's, a preset's or a reference's
    own settings (None keeps them), for trained checkpoints too."""
    from reranker.core.checkpoints import DEFAULT_MODEL, split_spec

    base, preset = split_spec(DEFAULT_MODEL)
    assert base == "smollm2-135m-instruct"
    assert {
        k: preset[k] for k in ("compressor", "num_gist", "kv_storage", "max_item_tokens", "score_rule")
    } == {
        "compressor": "prefix",
        "num_gist": "128",
        "kv_storage": "int4",
        "max_item_tokens": "1024",
        "score_rule": "query_likelihood",
    }
    assert split_spec(f"{DEFAULT_MODEL}?num_gist=32") == (base, preset | {"num_gist": "32"})
    config = RerankerConfig(num_gist=4, max_item_tokens=64, dtype="float32")
    ckpt = Reranker.from_pretrained(tiny_base, config, device="cpu").save_pretrained(tmp_path / "ckpt")

    def reading(model: Reranker) -> tuple[str, int, int]:
        return model.gist.compressor, model.gist.num_gist, model.gist.max_item_tokens

    assert reading(Reranker.read(ckpt, "auto")) == ("gist", 4, 64)
    assert reading(Reranker.read(ckpt, "auto", max_item_tokens=128)) == ("gist", 4, 128)
    pruned = Reranker.read(f"{ckpt}?max_item_tokens=100", compressor="prefix", num_gist=6)
    assert reading(pruned) == ("prefix", 6, 100)
    with pytest.raises(ValueError, match="trained with dtype=float32, not bfloat16"):
        Reranker.read(ckpt, "bfloat16")
    wrapped = Reranker.read(f"{tiny_base}?num_gist=3", "float32", compressor="select", num_gist=5)
    assert (
        reading(wrapped) == ("select", 5, RerankerConfig().max_item_tokens)
        and wrapped.gist.dtype == "float32"
    )


def test_a_reference_can_read_a_base_zero_shot_by_likelihood(tiny_base: Path) -> None:
    """score_rule and query_template travel in the reference too: an untouched LM scores
    log p(query | item) under its own head, with no trained parameter."""
    from reranker.core.checkpoints import model_spec

    spec = model_spec(tiny_base, score_rule="query_likelihood", query_template="\nQuery: {query}")
    model = Reranker.from_pretrained(spec, RerankerConfig(dtype="float32"), device="cpu")
    assert (model.gist.score_rule, model.gist.query_template) == ("query_likelihood", "\nQuery: {query}")
    ids = model.item_ids(ITEMS[:1])[0][0]
    lead = model.tokenizer("\nQuery: ", add_special_tokens=False)["input_ids"]  # the template's lead-in
    query_ids = model.tokenizer("256GB phone", add_special_tokens=False)["input_ids"]  # tokenized apart
    with torch.no_grad():
        logits = model.lm(torch.tensor([ids + lead + query_ids])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    start = len(ids) + len(lead)
    expected = sum(float(logp[start - 1 + i, t]) for i, t in enumerate(query_ids))
    assert float(model.score_full("256GB phone", ITEMS[:1])[0]) == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("compressor", ["select", "prefix"])
@pytest.mark.parametrize("t", [0, 5])
def test_one_pass_serves_every_layout(tiny_base: Path, compressor: str, t: int) -> None:
    """A training-free compressor gives, for each layout it sweeps (budget k, hybrid prefix t, and for
    selection the per-head rule), exactly what the reader set up that way compresses (same tensors up
    to fp32 rounding — a prefix forward over more tokens sums in another order —, short items kept
    whole), from one forward over the items."""
    model = Reranker.from_pretrained(
        tiny_base,
        RerankerConfig(num_gist=4, keep_item_prefix=t, compressor=compressor, dtype="float32"),
        device="cpu",
    )
    layouts = [model.gist.model_copy(update={"num_gist": k}) for k in (2, 4, 9)]
    layouts.append(model.gist.model_copy(update={"num_gist": 3, "keep_item_prefix": 7 - t}))
    if compressor == "select":
        layouts.append(model.gist.model_copy(update={"num_gist": 6, "select_head_budget": "adaptive"}))
    item_ids = model.item_ids(ITEMS)[0]
    many = model.compressor.compress(model, item_ids, layouts)
    assert all(list(per) == layouts for per in many)
    for layout in layouts:
        at = model.with_gist_config(layout)
        alone = at.compress(ITEMS, batch_size=3)
        units = [at.stored_unit(per[layout], len(ids)) for per, ids in zip(many, item_ids, strict=True)]
        for got, want in zip(units, alone, strict=True):
            assert (got.fingerprint, got.query_start, got.prefix_tokens, got.head_tails) == (
                want.fingerprint,
                want.query_start,
                want.prefix_tokens,
                want.head_tails,
            )
            torch.testing.assert_close(got.kv, want.kv, rtol=1e-5, atol=1e-5)
            # stored K/V carries no autograd graph (one would hold the whole forward's activations)
            assert got.kv.grad_fn is None and not got.kv.requires_grad
        at.check_kv(units)
    if compressor == "select":  # the per-head layout really shares columns unevenly on some item
        assert any(per[layouts[-1]].head_tails is not None for per in many)


def test_one_pass_refuses_a_layout_it_cannot_serve(tiny_base: Path) -> None:
    """A selection pass observes with one scorer and window: a layout asking for another is refused by
    name, not silently compressed with the model's."""
    model = Reranker.from_pretrained(
        tiny_base, RerankerConfig(num_gist=4, compressor="select", dtype="float32"), device="cpu"
    )
    other = model.gist.model_copy(update={"select_scorer": "kvzip"})
    with pytest.raises(ValueError, match="asked select_scorer='kvzip', the model has 'snapkv'"):
        model.compressor.compress(model, model.item_ids(ITEMS[:1])[0], [model.gist, other])


def test_trained_gists_have_one_budget(tiny_model: Reranker) -> None:
    ids = tiny_model.item_ids(ITEMS[:1])[0]
    own = tiny_model.gist
    assert tiny_model.compressor.compress(tiny_model, ids, [own])[0][own].kv.shape[3] == 4
    with pytest.raises(ValueError, match="trained gists have one layout: asked num_gist=2, the model has 4"):
        tiny_model.compressor.compress(tiny_model, ids, [own.model_copy(update={"num_gist": 2}), own])
