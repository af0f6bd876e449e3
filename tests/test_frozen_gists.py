"""Gists over a frozen reader: the gist adapter acts at gist rows only, the training path reads exactly
as serving does, no reader weight moves, and a few steps of list-wise distillation beat untrained gists."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from helpers import ITEMS, QUERY, mean_test_kl, toy_set, unboxed

from reranker.core.config import LIKELIHOOD_TEMPLATE, RerankerConfig
from reranker.core.model import Reranker
from reranker.core.tiny_base import build_tiny_base
from reranker.data.relevance_data import RelevanceSet
from reranker.training.frozen_reader import (
    FrozenGistConfig,
    FrozenGistTrainer,
    ItemKVCache,
    gist_kv,
    pseudo_query,
    reader_read,
    reader_scores,
    stack_items,
    step_masters,
    student_read,
    student_scores,
    token_kl,
)

pytestmark = pytest.mark.frozen_gists
QUERIES = [QUERY, "kettle", "a steel kettle that boils water fast and ships in two days"]  # ℓ differs
RULES = {
    "head": {},
    "query_likelihood": {"score_rule": "query_likelihood", "query_template": LIKELIHOOD_TEMPLATE},
}


def _with_adapter(
    reader: Reranker, t: int = 0, rank: int = 4, seed: int = 0, windows: bool = False
) -> Reranker:
    """`reader` + k = 3 gists and a gist adapter whose up-projection is random (a fresh one is zero, the
    reader itself): what a trained student looks like; `windows`: the gists under pooling windows."""
    layout = {"num_gist": 3, "keep_item_prefix": t, "gist_adapter_rank": rank, "gist_pool_windows": windows}
    gist = RerankerConfig(**(reader.gist.model_dump() | layout))
    model = reader.with_gist_config(gist)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.gist_adapter.up.copy_(torch.randn(model.gist_adapter.up.shape, generator=g) * 0.3)
    return model


@pytest.fixture(params=list(RULES))
def reader(request: pytest.FixtureRequest, tiny_base: Path) -> Reranker:
    gist = RerankerConfig(num_gist=3, max_item_tokens=64, dtype="float32", **RULES[request.param])
    return Reranker.from_pretrained(tiny_base, gist, device="cpu")


@pytest.mark.parametrize("windows", [False, True])
@pytest.mark.parametrize("t", [0, 2])
def test_online_path_equals_the_masked_forward_with_a_trained_adapter(
    reader: Reranker, t: int, windows: bool
) -> None:
    """`score(compress)` equals the reference (item + gists + query under the gist mask, the adapter at
    gist rows only), and the training path (gists over cached item K/V, read by `read_stored`) equals
    both — training optimises exactly what serving computes, with pooling windows too."""
    model = _with_adapter(reader, t, windows=windows)
    online = model.score(QUERY, model.compress(ITEMS))
    reference = model.reference_scores(QUERY, ITEMS)
    torch.testing.assert_close(online, reference, rtol=1e-4, atol=1e-4)
    items, lens = stack_items(ItemKVCache(reader).get(ITEMS), model.device)
    with torch.no_grad():
        trained = student_scores(model, QUERIES, items, lens, gist_kv(model, items, lens))
    for query, row in zip(QUERIES, trained, strict=True):  # queries of unequal length share a forward
        torch.testing.assert_close(row, model.score(query, model.compress(ITEMS)), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(trained[0], online, rtol=1e-4, atol=1e-4)
    plain = reader.with_gist_config(model.gist)  # the same gists' layout, a fresh (zero) adapter
    assert not torch.allclose(plain.score(QUERY, plain.compress(ITEMS)), online, atol=1e-3)


def test_the_target_is_the_readers_full_context_score(reader: Reranker) -> None:
    items, lens = stack_items(ItemKVCache(reader).get(ITEMS), reader.device)
    with torch.no_grad():
        targets = reader_scores(reader, QUERIES, items, lens)
        for query, row in zip(QUERIES, targets, strict=True):
            torch.testing.assert_close(row, reader.score_full(query, ITEMS), rtol=1e-4, atol=1e-4)


def test_item_kv_is_the_readers_whatever_the_gist_parameters(reader: Reranker) -> None:
    """The reader is really frozen on item rows: in compression's forward (item + gists) the item
    columns' K/V are the reader's own, with a trained adapter or none; the gists' are not."""
    adapted = _with_adapter(reader)
    plain = reader.with_gist_config(adapted.gist)  # the same layout, a fresh (zero) adapter
    item_ids, _ = reader.item_ids(ITEMS)
    k = adapted.gist.num_gist
    rows = [torch.cat([adapted.embed(ids), adapted.gist_embeddings]) for ids in item_ids]
    every = [torch.arange(len(ids) + k) for ids in item_ids]
    with torch.no_grad():
        kv_adapted = adapted.causal_kv(rows, every, gist_rows=k)
        kv_plain = plain.causal_kv(rows, every, gist_rows=k)
        alone = reader.causal_kv(
            [reader.embed(ids) for ids in item_ids], [torch.arange(len(i)) for i in item_ids]
        )
    for a, b, item, ids in zip(kv_adapted, kv_plain, alone, item_ids, strict=True):
        j = len(ids)
        torch.testing.assert_close(a[..., :j, :], item, rtol=0, atol=1e-6)
        torch.testing.assert_close(b[..., :j, :], item, rtol=0, atol=1e-6)
        assert not torch.allclose(a[..., j:, :], b[..., j:, :], atol=1e-4)  # the adapter acts on gists


@pytest.fixture
def reader_path(tiny_base: Path, tmp_path: Path) -> Path:
    """The tiny base saved as a float32 reader (items up to 64 tokens), as `train-gists --reader` takes it."""
    return Reranker.from_pretrained(
        tiny_base, RerankerConfig(dtype="float32", max_item_tokens=64)
    ).save_pretrained(tmp_path / "reader")


def test_a_few_steps_of_distillation_beat_untrained_gists_and_move_no_reader_weight(
    reader_path: Path, tmp_path: Path
) -> None:
    data = toy_set()
    cfg = FrozenGistConfig(
        reader=str(reader_path),
        num_gist=4,
        adapter_rank=4,
        steps=80,
        lists_per_step=4,
        candidates_per_list=6,
        lr=2e-2,
    )
    trainer = FrozenGistTrainer(cfg, data, tmp_path / "run", device="cpu")
    body_before = {n: p.detach().clone() for n, p in trainer.reader.named_parameters()}
    untrained = mean_test_kl(trainer.model, trainer.reader, data)
    record = trainer.train_step()
    trained_names = {"gist_embeddings", "gist_adapter.down", "gist_adapter.up"}
    for name, p in trainer.model.named_parameters():
        assert (p.grad is not None) == (name in trained_names), name  # no reader weight gets a gradient
    curve = [record, *trainer.fit(progress=False)]
    assert len(curve) == cfg.steps
    assert trainer.items.computed == len(trainer.items.held) <= 16  # each item's forward ran once
    for name, p in trainer.reader.named_parameters():
        torch.testing.assert_close(p, body_before[name], rtol=0, atol=0)
    trained = Reranker.from_pretrained(tmp_path / "run" / "checkpoint", device="cpu")
    assert trained.gist.gist_adapter_rank == 4 and trained.fingerprint == trainer.model.fingerprint
    after = mean_test_kl(trained, trainer.reader, data)
    # measured: 0.118 → 0.053; at lr 1e-6 (no learning) it stays at 0.117
    assert after < 0.6 * untrained, (untrained, after)


def _mean_token_kl(trainer: FrozenGistTrainer, data: RelevanceSet) -> float:
    """Mean per-token KL to the reader over the test split's lists, queries read as in training."""
    test, kls = data.split("test"), []
    with torch.no_grad():
        for q in test.queries:
            texts = [test.items[i].text for i, _ in test.candidates(q.query_id)]
            items, lens = stack_items(trainer.items.get(texts), trainer.model.device)
            tails, hidden = student_read(
                trainer.model, [q.text], items, lens, gist_kv(trainer.model, items, lens)
            )
            _, reader_hidden = reader_read(trainer.reader, [q.text], items, lens)
            reader_logp, picked = trainer.reader.query_logprobs(reader_hidden, tails.targets)
            kls.append(
                float(token_kl(reader_logp, trainer.model.query_logprobs(hidden, tails.targets)[0], picked))
            )
    return sum(kls) / len(kls)


def test_the_per_token_kl_trains_a_likelihood_readers_gists_and_is_refused_for_a_head(
    tiny_base: Path, tmp_path: Path
) -> None:
    data = toy_set()
    ql = RerankerConfig(dtype="float32", max_item_tokens=64, **RULES["query_likelihood"])
    reader_path = Reranker.from_pretrained(tiny_base, ql).save_pretrained(tmp_path / "ql")
    cfg = FrozenGistConfig(
        reader=str(reader_path),
        num_gist=4,
        adapter_rank=4,
        steps=40,
        lists_per_step=4,
        candidates_per_list=6,
        lr=2e-2,
        token_kl_weight=1.0,
    )
    trainer = FrozenGistTrainer(cfg, data, tmp_path / "run", device="cpu")
    before = _mean_token_kl(trainer, data)
    curve = trainer.fit(progress=False)
    after = _mean_token_kl(trainer, data)
    assert curve[0]["token_kl"] > 0
    # measured: 0.292 → 0.209; with token_kl_weight 0 (the list-wise KL alone) 0.292 → 0.331
    assert after < 0.85 * before, (before, after)
    head = Reranker.from_pretrained(tiny_base, RerankerConfig(dtype="float32")).save_pretrained(
        tmp_path / "h"
    )
    with pytest.raises(ValueError, match="query-likelihood reader"):
        FrozenGistTrainer(cfg.model_copy(update={"reader": str(head)}), data, tmp_path / "x", device="cpu")


def test_a_run_continues_from_a_checkpoint_over_the_same_reader_only(
    reader_path: Path, tmp_path: Path
) -> None:
    first = FrozenGistConfig(reader=str(reader_path), num_gist=4, adapter_rank=4, steps=3, lr=2e-2)
    FrozenGistTrainer(first, toy_set(), tmp_path / "first", device="cpu").fit(progress=False)
    ckpt = Reranker.from_pretrained(tmp_path / "first" / "checkpoint", device="cpu")
    again = first.model_copy(update={"init_from": str(tmp_path / "first" / "checkpoint")})
    trainer = FrozenGistTrainer(again, toy_set(), tmp_path / "again", device="cpu")
    torch.testing.assert_close(trainer.model.gist_embeddings, ckpt.gist_embeddings, rtol=0, atol=0)
    torch.testing.assert_close(trainer.model.gist_adapter.up, ckpt.gist_adapter.up, rtol=0, atol=0)
    assert trainer.model.lm is trainer.reader.lm  # one body, the frozen reader's
    other_base = build_tiny_base(tmp_path / "other-base", seed=1)  # another body
    other = Reranker.from_pretrained(
        other_base, RerankerConfig(dtype="float32", max_item_tokens=64)
    ).save_pretrained(tmp_path / "other")
    with pytest.raises(ValueError, match="another reader"):
        FrozenGistTrainer(again.model_copy(update={"reader": str(other)}), toy_set(), tmp_path / "x")
    with pytest.raises(ValueError, match="k=4"):
        FrozenGistTrainer(again.model_copy(update={"num_gist": 3}), toy_set(), tmp_path / "y", device="cpu")


def test_every_training_items_kv_is_computed_before_the_clock_starts(
    reader_path: Path, tmp_path: Path
) -> None:
    """`max_minutes` counts training steps: with a cache folder (or room for every item in memory) the
    reader's item forwards all run before the first step, and a later run over the folder runs none;
    where memory would not hold them all, a step computes what it draws."""
    cfg = FrozenGistConfig(
        reader=str(reader_path), num_gist=4, adapter_rank=2, steps=2, candidates_per_list=3
    )
    train = toy_set().split("train")
    train_items = {i for q in train.queries for i, _ in train.candidates(q.query_id)}
    cache = tmp_path / "kv"

    first = FrozenGistTrainer(cfg, toy_set(), tmp_path / "a", device="cpu", cache_dir=cache)
    curve = first.fit(progress=False)
    assert first.items.computed == len(train_items) and first.fill_seconds > 0
    assert [r["items_computed"] for r in curve] == [len(train_items)] * 2  # none within a step
    assert len(list(cache.glob("*/*.kv"))) == len(train_items)

    again = FrozenGistTrainer(cfg, toy_set(), tmp_path / "b", device="cpu", cache_dir=cache)
    again.fit(progress=False)
    assert again.items.computed == 0  # read back from the folder

    in_memory = FrozenGistTrainer(cfg, toy_set(), tmp_path / "m", device="cpu")  # room for them all
    curve = in_memory.fit(progress=False)
    assert [r["items_computed"] for r in curve] == [len(train_items)] * 2

    small = FrozenGistTrainer(cfg, toy_set(), tmp_path / "c", device="cpu", memory_items=4)
    curve = small.fit(progress=False)
    assert small.fill_seconds == 0 and 0 < curve[0]["items_computed"] < len(train_items)


def test_early_stopping_keeps_the_gists_of_the_lowest_held_out_kl(reader_path: Path, tmp_path: Path) -> None:
    """The last train queries are held out (never drawn); their lists' KL to the reader is checked every
    few steps, the checkpoint holds the gists of the lowest, and patience ends a run that stopped
    improving — here a learning rate too high, so the held-out KL rises again after its lowest."""
    data = toy_set()
    train_queries = [q.text for q in data.split("train").queries]
    cfg = FrozenGistConfig(
        reader=str(reader_path),
        num_gist=4,
        adapter_rank=4,
        steps=30,
        lists_per_step=4,
        candidates_per_list=6,
        lr=0.1,
        holdout_queries=2,
        holdout_every=3,
    )
    trainer = FrozenGistTrainer(cfg, data, tmp_path / "run", device="cpu")
    assert trainer.queries == train_queries[:-2] and [q for q, _ in trainer.holdout] == train_queries[-2:]
    curve = trainer.fit(progress=False)
    checks = [row for row in curve if "holdout_kl" in row]
    assert [row["step"] for row in checks] == list(range(0, 31, 3))  # the untrained gists first
    best = min(checks, key=lambda row: row["holdout_kl"])
    assert trainer.best is not None and trainer.best.step == best["step"] == checks[-1]["best_step"]
    # measured: 0.176 untrained, lowest 0.129 at step 15, 0.182 at step 30
    assert best["step"] < cfg.steps and checks[-1]["holdout_kl"] > 1.2 * best["holdout_kl"]
    kept = FrozenGistTrainer(
        cfg.model_copy(update={"init_from": str(tmp_path / "run" / "checkpoint")}), data, tmp_path / "k"
    )
    assert kept.check_holdout()["holdout_kl"] == pytest.approx(best["holdout_kl"], rel=1e-4)

    patient = FrozenGistTrainer(
        cfg.model_copy(update={"holdout_patience": 2}), data, tmp_path / "p", device="cpu"
    )
    curve = patient.fit(progress=False)
    assert patient.step < cfg.steps and patient.step - patient.best.step == 2 * cfg.holdout_every
    with pytest.raises(ValueError, match="leaves none of the 8 train queries"):
        FrozenGistTrainer(cfg.model_copy(update={"holdout_queries": 8}), data, tmp_path / "x")
    with pytest.raises(ValueError, match="holdout_patience needs holdout_queries"):
        FrozenGistConfig(reader=str(reader_path), holdout_patience=2)


def test_held_out_pseudo_queries_are_fixed_and_average_into_the_held_out_kl(
    reader_path: Path, tmp_path: Path
) -> None:
    """Each held-out list is also asked fixed pseudo-queries (sentences of its own articles, the same in
    every run of a seed) without changing what the steps draw; the held-out KL is the mean over every
    (list, query) pair, nDCG is read on the lists' own queries."""
    data = toy_set()
    cfg = FrozenGistConfig(
        reader=str(reader_path), num_gist=4, adapter_rank=4, candidates_per_list=6, holdout_queries=2
    )
    asked_cfg = cfg.model_copy(update={"holdout_pseudo_queries": 2})
    trainer = FrozenGistTrainer(asked_cfg, data, tmp_path / "a", device="cpu")
    again = FrozenGistTrainer(asked_cfg, data, tmp_path / "b", device="cpu")
    plain = FrozenGistTrainer(cfg, data, tmp_path / "c", device="cpu")
    assert trainer.holdout_asked == again.holdout_asked
    assert plain.holdout_asked == [[query] for query, _ in plain.holdout]
    for asked, (query, cands) in zip(trainer.holdout_asked, trainer.holdout, strict=True):
        words = {w for text, _ in cands for w in text.split()}
        assert asked[0] == query and len(asked) == 3 and all(set(q.split()) <= words for q in asked[1:])
    assert [trainer._draw() for _ in range(3)] == [plain._draw() for _ in range(3)]
    both = trainer.check_holdout()
    full = trainer.holdout_asked
    alone = []
    for j in range(3):
        trainer.holdout_asked = [[asked[j]] for asked in full]
        alone.append(trainer.check_holdout())
    assert both["holdout_kl"] == pytest.approx(sum(r["holdout_kl"] for r in alone) / 3, rel=1e-5)
    assert both["holdout_overlap@10"] == pytest.approx(sum(r["holdout_overlap@10"] for r in alone) / 3)
    assert both["holdout_ndcg@10"] == pytest.approx(alone[0]["holdout_ndcg@10"])
    assert both["holdout_kl_own_query"] == pytest.approx(alone[0]["holdout_kl"], rel=1e-5)
    assert all(r["holdout_kl_own_query"] == r["holdout_kl"] for r in alone)
    assert len({round(r["holdout_kl"], 6) for r in alone}) == 3  # three different readings averaged


def test_updates_below_bf16_resolution_accumulate_in_fp32_masters(reader_path: Path, tmp_path: Path) -> None:
    """Where the step computes in bf16, an Adam step smaller than half a bf16 ulp would leave a bf16
    weight unchanged forever; the fp32 master keeps it, and the weight moves once the sum is large."""
    cfg = FrozenGistConfig(reader=str(reader_path), num_gist=4, adapter_rank=0, lr=1e-4)
    trainer = FrozenGistTrainer(cfg, toy_set(), tmp_path / "run", device="cpu")
    gists = trainer.trained[0]
    gists.data = torch.full_like(gists.data, 0.5).bfloat16()  # bf16 ulp at 0.5: 2^-8 ≈ 0.0039
    trainer.master[0].copy_(gists.data.float())
    assert torch.equal(gists.data - 1e-4, gists.data)  # one step of lr is lost in bf16
    for _ in range(30):
        gists.grad = torch.ones_like(gists)
        step_masters(trainer.optimizer, trainer.master, trainer.trained)
    assert trainer.master[0].dtype == torch.float32
    assert bool((gists.detach().float() < 0.5).all())  # 30 steps of 1e-4 crossed half an ulp


def test_pseudo_queries_are_sentences_of_the_item() -> None:
    text = "Red kettle. It boils water in two minutes flat, quietly. Short one."
    assert pseudo_query(text, random.Random(0)) == "It boils water in two minutes flat, quietly."
    assert pseudo_query("Too short.", random.Random(0)) is None


def test_cli_trains_gists_over_a_frozen_reader_and_benches_both_recipes(
    tiny_base: Path, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from reranker.cli import app

    runner = CliRunner()
    out = tmp_path / "run"
    args = [
        "train-gists",
        "--out",
        str(out),
        "--reader",
        str(tiny_base),
        "--products",
        "4",
        "--num-gist",
        "2",
    ]
    args += [
        "--adapter-rank",
        "2",
        "--max-item-tokens",
        "48",
        "--steps",
        "3",
        "--cache-dir",
        str(tmp_path / "kv"),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    model = Reranker.from_pretrained(out / "checkpoint", device="cpu")
    assert (model.gist.compressor, model.gist.num_gist, model.gist.gist_adapter_rank) == ("gist", 2, 2)
    assert len(list((tmp_path / "kv").glob("*/*.kv"))) > 0  # the reader's item K/V, kept as codec blobs
    assert len((out / "curve.jsonl").read_text().splitlines()) == 3
    rerun = runner.invoke(app, [*args, "--steps", "2"])  # the last --steps counts
    assert rerun.exit_code == 0, rerun.output
    assert "item K/V: 0 items computed" in rerun.output  # read back from --cache-dir
    assert len((out / "curve.jsonl").read_text().splitlines()) == 2  # a fresh run's curve, not appended
    held_out = ["--holdout-queries", "1", "--holdout-pseudo-queries", "2", "--holdout-every", "1"]
    held = runner.invoke(app, [*args, "--steps", "2", *held_out])
    assert held.exit_code == 0, held.output
    assert "checkpoint (the gists of step " in held.output  # the held-out check's pick, said
    assert json.loads((out / "config.json").read_text())["holdout_pseudo_queries"] == 2
    everything = runner.invoke(app, [*args, "--holdout-queries", "10000"])
    assert everything.exit_code != 0 and "leavesnoneofthe" in unboxed(everything.output)

    bench = tmp_path / "bench.json"
    args = [
        "bench-training",
        "--base",
        str(tiny_base),
        "--num-gist",
        "2",
        "--item-tokens",
        "40",
        "--dtype",
        "float32",
    ]
    args += ["--steps", "1", "--workdir", str(tmp_path / "w"), "--out", str(bench)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    every, *frozen, reader = json.loads(bench.read_text())["rows"]
    assert every["speedup"] == 1.0 and every["backprop_positions_per_pair"] == "42 + ℓ"  # j + k
    assert [r["backprop_positions_per_pair"] for r in frozen] == ["2 + ℓ", "2 + ℓ"]  # k
    for row in frozen:
        assert row["pairs"] > 0 and row["speedup"] == row["pairs_per_cpu_s"] / every["pairs_per_cpu_s"]
    assert frozen[1]["pairs"] > frozen[0]["pairs"]  # pseudo-queries: more pairs from the same lists
    assert reader["backprop_positions_per_pair"] == "0 + ℓ" and reader["pairs"] > 0  # query rows only
    assert "pairs/CPU-s" in result.output


@pytest.mark.reader_adapter
def test_a_reader_adapter_trains_with_the_gists_and_acts_at_query_rows_only(
    reader_path: Path, tmp_path: Path
) -> None:
    """`reader_rank`: the gists and a reader adapter distilled jointly over the frozen item K/V. The adapter
    gets gradients with the gists and moves, the targets stay the untouched reader's, and the stored unit
    (item columns and gists alike) is what the checkpoint compresses without its reader adapter: one
    store fingerprint, another reader fingerprint."""
    data = toy_set()
    cfg = FrozenGistConfig(
        reader=str(reader_path),
        num_gist=4,
        adapter_rank=4,
        reader_rank=4,
        steps=40,
        lists_per_step=4,
        candidates_per_list=6,
        lr=2e-2,
    )
    trainer = FrozenGistTrainer(cfg, data, tmp_path / "run", device="cpu")
    assert trainer.reader.reader_adapter is None  # the reader the targets come from has none
    untrained = mean_test_kl(trainer.model, trainer.reader, data)
    trainer.train_step()
    for name, p in trainer.model.named_parameters():
        trained = name.startswith(("gist_embeddings", "gist_adapter.", "reader_adapter."))
        assert (p.grad is not None) == trained, name
    trainer.fit(progress=False)
    joint = Reranker.from_pretrained(tmp_path / "run" / "checkpoint", device="cpu")
    assert joint.gist.reader_adapter_rank == 4
    assert any(float(up.detach().abs().max()) > 0 for up in joint.reader_adapter.up.values())  # moved from 0
    plain = joint.with_gist_config(joint.gist.model_copy(update={"reader_adapter_rank": 0}), keep_gists=True)
    texts = [data.items[i].text for i in sorted(data.items)[:5]]
    for a, b in zip(joint.compress(texts), plain.compress(texts), strict=True):
        torch.testing.assert_close(a.kv, b.kv, rtol=0, atol=0)
    assert joint.fingerprint == plain.fingerprint and joint.reader_fingerprint != plain.reader_fingerprint
    assert mean_test_kl(joint, trainer.reader, data) < 0.6 * untrained


def test_the_unit_cache_holds_at_most_its_byte_budget_and_reads_the_rest_back(
    reader: Reranker, tmp_path: Path
) -> None:
    """Whole-item units run to ~40 MB each: RAM keeps the most recent within `memory_bytes` (by default a
    quarter of the memory available), the others come back from the folder bit for bit, none recomputed."""
    first = ItemKVCache(reader, tmp_path).get(ITEMS)
    one = first[0].kv.numel() * first[0].kv.element_size()
    cache = ItemKVCache(reader, tmp_path, memory_items=1000, memory_bytes=2 * one)
    assert cache.memory_bytes == 2 * one and ItemKVCache(reader).memory_bytes > 0
    again = cache.get(ITEMS)
    assert cache.computed == 0 and len(cache.held) < len(ITEMS)
    assert cache.held_bytes == sum(u.kv.numel() * u.kv.element_size() for u in cache.held.values())
    for a, b in zip(first, again, strict=True):
        torch.testing.assert_close(a.kv, b.kv, rtol=0, atol=0)
