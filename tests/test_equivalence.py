"""The core's acceptance test (DESIGN §2): for every compressor, the online path equals the full forward
its compressor names (`reference_scores`: the gist-masked training forward, the per-head-masked full
forward, the item cut to its budget), and the classic mistakes break it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from helpers import ITEMS, QUERY, forward_scores

from reranker import EmptyInputError, Reranker, RerankerConfig
from reranker.core import layout
from reranker.core.compressors import COMPRESSORS
from reranker.core.config import COMPRESSOR_SETTINGS, SETTING_OWNERS, template_for
from reranker.core.errors import KVFormatError


def assert_scores_equal(online: torch.Tensor, reference: torch.Tensor) -> None:
    torch.testing.assert_close(online, reference, rtol=1e-4, atol=1e-4 * float(reference.abs().max()))


def test_score_full_is_a_different_forward(tiny_model: Reranker) -> None:
    full = tiny_model.score_full(QUERY, ITEMS)
    masked = tiny_model.score_masked(QUERY, ITEMS)
    assert full.shape == masked.shape == (len(ITEMS),)
    assert not torch.allclose(full, masked, rtol=1e-3)


# ------------------------------------------------------------------ hybrid: keep_item_prefix = t > 0
def hybrid(base: Path, t: int, k: int = 4, max_item_tokens: int = 1024) -> Reranker:
    gist = RerankerConfig(num_gist=k, keep_item_prefix=t, max_item_tokens=max_item_tokens, dtype="float32")
    return Reranker.from_pretrained(base, gist, device="cpu")


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("t", [3, 12])
def test_hybrid_online_score_equals_masked_forward(tiny_bases: dict[str, Path], arch: str, t: int) -> None:
    model = hybrid(tiny_bases[arch], t)
    kvs = model.compress(ITEMS, batch_size=3)
    lengths = [kv.item_tokens for kv in kvs]
    assert [kv.prefix_tokens for kv in kvs] == [min(t, j) for j in lengths]
    if t == 12:
        assert min(lengths) < t, "the batch must hold an item shorter than t (padded prefix slots)"
    assert all(kv.kv.shape[3] == kv.prefix_tokens + 4 for kv in kvs)
    assert_scores_equal(model.score(QUERY, kvs), model.score_masked(QUERY, ITEMS))


def test_hybrid_prefix_is_the_items_own_first_tokens(tiny_base: Path) -> None:
    """The stored prefix columns are the K/V of a plain causal forward of the item's first t tokens."""
    t = 6
    model = hybrid(tiny_base, t)
    kvs = model.compress(ITEMS[:1])
    plain = model.with_gist_config(model.gist.model_copy(update={"compressor": "prefix"})).compress(ITEMS[:1])
    torch.testing.assert_close(kvs[0].kv[..., :t, :], plain[0].kv[..., :t, :], rtol=1e-4, atol=1e-5)
    assert not torch.allclose(kvs[0].kv[..., t:, :], plain[0].kv[..., t:, :], atol=1e-3)


def test_hybrid_query_reads_the_prefix_but_not_the_rest(tiny_base: Path) -> None:
    """With t > 0 the training mask keeps item columns 0 … t-1 for the query rows, and cuts t … j-1."""
    model = hybrid(tiny_base, t=5)
    item_lens, seq_lens = torch.tensor([9]), torch.tensor([9 + 4 + 3])
    allowed = layout.training_mask(item_lens, 4, seq_lens, 16, keep=5)[0]
    query_rows = allowed[13:]
    assert query_rows[:, :5].all() and not query_rows[:, 5:9].any() and query_rows[:, 9:13].all()
    pure = Reranker.from_pretrained(tiny_base, RerankerConfig(num_gist=4, dtype="float32"), device="cpu")
    assert not torch.allclose(model.score_masked(QUERY, ITEMS), pure.score_masked(QUERY, ITEMS), rtol=1e-3)


def test_keep_item_prefix_must_leave_room_for_the_item() -> None:
    with pytest.raises(ValueError, match="keep_item_prefix=64 must be below max_item_tokens=64"):
        RerankerConfig(keep_item_prefix=64, max_item_tokens=64)


# ---------------------------------------------- prefix compressor: the item's first t + k tokens only
@pytest.mark.parametrize("t", [0, 6])
def test_prefix_compressor_is_the_item_cut_to_its_budget(tiny_base: Path, t: int) -> None:
    """The stored K/V of the first min(t + k, j) tokens, the query right after them: exactly the
    full-context forward of the cut item + query, short items (fewer than t + k tokens) included."""
    gist = RerankerConfig(num_gist=4, keep_item_prefix=t, compressor="prefix", dtype="float32")
    model = Reranker.from_pretrained(tiny_base, gist, device="cpu")
    kvs = model.compress(ITEMS, batch_size=3)
    item_ids, _ = model.item_ids(ITEMS)
    assert [kv.kv.shape[3] for kv in kvs] == [min(len(ids), t + 4) for ids in item_ids]
    assert any(len(ids) < t + 4 for ids in item_ids)  # "kettle": stored whole
    q = model.query_tail(QUERY)
    rows = [torch.cat([model.embed(ids[: t + 4]), q.embeds]) for ids in item_ids]
    assert_scores_equal(model.score(QUERY, kvs), forward_scores(model, rows, None, q))


def test_rank_orders_candidates_by_score(tiny_model: Reranker) -> None:
    scores = tiny_model.score(QUERY, tiny_model.compress(ITEMS)).tolist()
    ranked = tiny_model.rank(QUERY, ITEMS)
    assert [i for i, _ in ranked] == sorted(range(len(ITEMS)), key=lambda i: -scores[i])
    assert [s for _, s in ranked] == pytest.approx(sorted(scores, reverse=True))
    kvs = tiny_model.compress(ITEMS)
    assert tiny_model.rank(QUERY, kvs, top_k=2) == ranked[:2]  # stored K/V rank the same
    with pytest.raises(EmptyInputError):
        tiny_model.rank(QUERY, [])


def test_predict_scores_query_item_pairs_in_input_order(tiny_model: Reranker) -> None:
    """CrossEncoder-style pairs, two queries interleaved and an item repeated: each pair's score is the
    online score of its query over its item's stored K/V."""
    other = "steel kettle"
    pairs = [(QUERY, ITEMS[0]), (other, ITEMS[1]), (QUERY, ITEMS[2]), (other, ITEMS[0]), (QUERY, ITEMS[0])]
    got = tiny_model.predict(pairs)
    kvs = dict(zip(ITEMS, tiny_model.compress(ITEMS), strict=True))
    expected = [tiny_model.score(q, [kvs[text]]).item() for q, text in pairs]
    assert got == pytest.approx(expected, rel=1e-5)
    assert got[0] == got[4]  # the same pair, the same score
    with pytest.raises(EmptyInputError):
        tiny_model.predict([])


def test_reconfiguring_keeps_trained_gists_only_for_the_same_layout(tiny_model: Reranker) -> None:
    longer = tiny_model.gist.model_copy(update={"max_item_tokens": 512})
    same = tiny_model.with_gist_config(longer, keep_gists=True)
    assert torch.equal(same.gist_embeddings, tiny_model.gist_embeddings)
    assert same.fingerprint != tiny_model.fingerprint  # another config: its K/V is not interchangeable
    with pytest.raises(ValueError, match="trained gists have k=4"):
        tiny_model.with_gist_config(longer.model_copy(update={"num_gist": 8}), keep_gists=True)
    with pytest.raises(ValueError, match="gist_pool_windows=False"):  # windows change what a gist reads
        tiny_model.with_gist_config(longer.model_copy(update={"gist_pool_windows": True}), keep_gists=True)


# ------------------------------------------- every compressor: one equivalence test, the same pitfalls
def reader(base: Path, compressor: str, k: int = 4, t: int = 0, **extra: object) -> Reranker:
    gist = RerankerConfig(num_gist=k, keep_item_prefix=t, compressor=compressor, dtype="float32", **extra)
    return Reranker.from_pretrained(base, gist, device="cpu")


@pytest.mark.parametrize("compressor", COMPRESSORS)
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("t", [0, 5])
@pytest.mark.parametrize("rule", ["head", "query_likelihood"])
def test_every_compressor_equals_its_reference_forward(
    tiny_bases: dict[str, Path], compressor: str, arch: str, t: int, rule: str
) -> None:
    """Items of mixed length in two batches (one shorter than t + k: padded columns), both score rules."""
    model = reader(tiny_bases[arch], compressor, t=t, score_rule=rule, **template_for(rule))
    kvs = model.compress(ITEMS, batch_size=3)
    assert {(kv.compressor, kv.budget) for kv in kvs} == {(compressor, 4)}
    assert any(kv.positions < t + 4 for kv in kvs) or compressor == "gist"
    assert_scores_equal(model.score(QUERY, kvs), model.reference_scores(QUERY, ITEMS))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("t", [0, 5])
def test_gists_under_pooling_windows_equal_their_reference_forward(
    tiny_bases: dict[str, Path], arch: str, t: int
) -> None:
    """GistPool's windows hold in compression and in the reference alike (items of mixed length, one
    shorter than t + k: empty windows), and they change what the gists hold."""
    model = reader(tiny_bases[arch], "gist", t=t, gist_pool_windows=True)
    online = model.score(QUERY, model.compress(ITEMS, batch_size=3))
    assert_scores_equal(online, model.reference_scores(QUERY, ITEMS))
    plain = reader(tiny_bases[arch], "gist", t=t)
    assert not torch.allclose(online, plain.score(QUERY, plain.compress(ITEMS)), atol=1e-3)


def test_a_reference_reads_a_base_with_untrained_pooled_gists(tiny_base: Path, tmp_path: Path) -> None:
    """`BASE?compressor=gist&gist_pool_windows=true` is the base with its seeded gists under pooling
    windows (a compressor that needs no training; RerankerConfig fingerprints it), while a trained checkpoint
    is not read back under windows it was not trained with."""
    spec = f"{tiny_base}?compressor=gist&num_gist=4&gist_pool_windows=true"
    by_reference = Reranker.from_pretrained(spec, RerankerConfig(dtype="float32"), device="cpu")
    built = reader(tiny_base, "gist", gist_pool_windows=True)
    assert by_reference.gist.gist_pool_windows and by_reference.fingerprint == built.fingerprint
    for got, want in zip(by_reference.compress(ITEMS), built.compress(ITEMS), strict=True):
        assert torch.equal(got.kv, want.kv)
    plain = reader(tiny_base, "gist")
    assert plain.fingerprint != built.fingerprint
    saved = plain.save_pretrained(tmp_path / "plain")
    with pytest.raises(ValueError, match="gist_pool_windows=False"):
        Reranker.from_pretrained(f"{saved}?gist_pool_windows=true", device="cpu")


def test_the_first_gist_reads_only_its_window(tiny_base: Path) -> None:
    """Under pooling windows, gist 0's K/V (every layer) depends on the item's first span only: other
    last tokens (same length, so the same spans) leave it exactly as it was, and move it without the
    windows; the last gist, whose span they are in, moves either way."""
    for windows in (True, False):
        model = reader(tiny_base, "gist", k=4, gist_pool_windows=windows)
        (ids,), _ = model.item_ids(ITEMS[:1])
        vocab = model.lm.config.vocab_size
        other_tail = ids[:-3] + [(x + 1) % vocab for x in ids[-3:]]
        rows = [torch.cat([model.embed(x), model.gist_embeddings]) for x in (ids, other_tail)]
        gists = torch.arange(len(ids), len(ids) + 4)
        a, b = model.causal_kv(rows, [gists, gists], gist_rows=4)  # (L, 2, H_kv, 4, h) each
        assert torch.equal(a[..., 0, :], b[..., 0, :]) == windows
        assert not torch.equal(a[..., 3, :], b[..., 3, :])


@pytest.mark.parametrize("compressor", COMPRESSORS)
@pytest.mark.parametrize("k", [1, 16])
def test_every_compressor_equals_its_reference_at_any_budget(
    tiny_base: Path, compressor: str, k: int
) -> None:
    model = reader(tiny_base, compressor, k=k)
    assert_scores_equal(model.score(QUERY, model.compress(ITEMS)), model.reference_scores(QUERY, ITEMS))


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_every_compressor_holds_for_truncated_items(tiny_base: Path, compressor: str) -> None:
    model = reader(tiny_base, compressor, t=3, max_item_tokens=24)
    kvs = model.compress(ITEMS)
    assert [kv.truncated for kv in kvs] == [True, False, True, True]
    assert_scores_equal(model.score(QUERY, kvs), model.reference_scores(QUERY, ITEMS))


@pytest.mark.parametrize("compressor", COMPRESSORS)
@pytest.mark.parametrize("shift", ["from zero", -1, 1])
def test_every_compressor_breaks_when_query_positions_move(
    tiny_base: Path, monkeypatch: pytest.MonkeyPatch, compressor: str, shift: str | int
) -> None:
    """RoPE pitfall: numbering the query from 0 (what a framework does once the item is gone), or one
    off, silently changes every score. The stored query start is what keeps them exact."""
    model = reader(tiny_base, compressor)
    kvs = model.compress(ITEMS)
    expected = model.reference_scores(QUERY, ITEMS)
    real = layout.online_positions
    moved = (lambda s: torch.zeros_like(s)) if shift == "from zero" else (lambda s: s + shift)
    monkeypatch.setattr(layout, "online_positions", lambda start, n: real(moved(start), n))
    assert not torch.allclose(model.score(QUERY, kvs), expected, rtol=1e-3)


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_every_compressor_keeps_pad_slots_masked(
    tiny_base: Path, monkeypatch: pytest.MonkeyPatch, compressor: str
) -> None:
    """Rows with fewer stored columns than the batch's longest carry pad slots online; a mask that lets
    the query see them breaks exactly those rows."""
    model = reader(tiny_base, compressor, t=12)
    kvs = model.compress(ITEMS)
    reference = model.reference_scores(QUERY, ITEMS)
    assert_scores_equal(model.score(QUERY, kvs), reference)
    real_mask = layout.online_mask
    monkeypatch.setattr(
        layout,
        "online_mask",
        lambda lens, slots, tails, k, q: real_mask(
            torch.full_like(lens, slots), slots, torch.full_like(tails, k), k, q
        ),
    )
    wrong = model.score(QUERY, kvs)
    padded = [i for i, kv in enumerate(kvs) if kv.positions < max(x.positions for x in kvs)]
    assert padded
    assert float((wrong[padded] - reference[padded]).abs().max()) > 1e-3 * float(reference.abs().max())


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_every_compressor_runs_only_the_query_online(tiny_base: Path, compressor: str) -> None:
    """No item token and no placeholder position reaches the online forward."""
    model = reader(tiny_base, compressor, t=2)
    kvs = model.compress(ITEMS)
    seen: list[tuple[int, ...]] = []
    hook = model.lm.get_decoder().register_forward_pre_hook(
        lambda _mod, _args, kwargs: seen.append(tuple(kwargs["inputs_embeds"].shape)), with_kwargs=True
    )
    try:
        model.score(QUERY, kvs)
    finally:
        hook.remove()
    assert seen == [(len(ITEMS), model.tail_length(QUERY), model.lm.config.hidden_size)]


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_every_compressor_is_batch_independent(tiny_base: Path, compressor: str) -> None:
    model = reader(tiny_base, compressor, t=2)
    batched = model.compress(ITEMS)
    for item, b in zip(ITEMS, batched, strict=True):
        (alone,) = model.compress([item])
        assert (alone.item_tokens, alone.query_start, alone.prefix_tokens) == (
            b.item_tokens,
            b.query_start,
            b.prefix_tokens,
        )
        torch.testing.assert_close(alone.kv, b.kv, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_a_unit_says_what_it_holds_and_a_reader_of_another_layout_refuses_it(
    tiny_base: Path, compressor: str
) -> None:
    """The unit names its compressor, budget and query start; a unit whose fields disagree with the
    reader's (same fingerprint, so only these fields can catch it) is refused, never misread."""
    model = reader(tiny_base, compressor)
    (kv,) = model.compress(ITEMS[:1])
    kind = COMPRESSORS[compressor]
    assert (kv.compressor, kv.budget) == (compressor, 4)
    assert kv.query_start == kind.query_start(4, kv.item_tokens, kv.prefix_tokens)
    others = [name for name in COMPRESSORS if name != compressor]
    for wrong in [
        dataclasses.replace(kv, compressor=others[0]),
        dataclasses.replace(kv, budget=5),
        dataclasses.replace(kv, query_start=kv.query_start + 1),
    ]:
        with pytest.raises(KVFormatError):
            model.check_kv([wrong])


def test_the_config_knows_exactly_the_registered_compressors() -> None:
    """The torch-free table a model reference is checked against (config.COMPRESSOR_SETTINGS) names
    exactly the registered compressors; a setting no compressor's forward reads would be a dead knob."""
    assert list(COMPRESSOR_SETTINGS) == list(COMPRESSORS)
    assert set(SETTING_OWNERS) <= set(RerankerConfig.model_fields)
    for name in COMPRESSORS:
        assert RerankerConfig(compressor=name).compressor == name
    with pytest.raises(ValueError, match="unknown compressor 'bogus'; known: gist, select, prefix"):
        RerankerConfig(compressor="bogus")
