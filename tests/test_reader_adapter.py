"""A reader trained for the store (`core/reader_adapter.py`): adapters that act at query rows only leave
every stored unit bit-identical, so a retrained reader reads the same store, and the online path still
equals each compressor's reference forward with a trained adapter in it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import ITEMS, QUERY, mean_test_kl, toy_set

from reranker import Reranker, RerankerConfig
from reranker.core.config import template_for
from reranker.training.frozen_reader import ItemKVCache
from reranker.training.reader_training import ReaderTrainConfig, ReaderTrainer, StoredUnits

pytestmark = pytest.mark.reader_adapter

RANK = 2


def trained(model: Reranker, seed: int = 0) -> Reranker:
    """`model` with its reader adapter and head moved off their fresh values, as training would."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.reader_adapter.up.values():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
        model.head.weight.add_(torch.randn(model.head.weight.shape, generator=g) * 0.1)
    return model


def reader(base: Path, compressor: str, t: int, rule: str, rank: int = RANK) -> Reranker:
    settings = {"score_rule": rule, **template_for(rule)}
    gist = RerankerConfig(
        num_gist=4,
        keep_item_prefix=t,
        compressor=compressor,
        reader_adapter_rank=rank,
        dtype="float32",
        **settings,
    )
    return Reranker.from_pretrained(base, gist, device="cpu")


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
    loaded = Reranker.from_pretrained(model.save_pretrained(tmp_path / "ckpt"), device="cpu")
    assert (loaded.fingerprint, loaded.reader_fingerprint) == (model.fingerprint, model.reader_fingerprint)
    kvs = model.compress(ITEMS)
    torch.testing.assert_close(loaded.score(QUERY, kvs), model.score(QUERY, kvs), rtol=0, atol=0)


# ------------------------------------------------------------------------------- gistrank train-reader
def test_a_shared_cache_dir_keeps_stored_units_apart_from_train_gists_whole_item_kv(
    tiny_base: Path, tmp_path: Path
) -> None:
    """train-reader's units (here 4 prefix tokens) and train-gists' whole-item K/V of the same model share
    its fingerprint; one --cache-dir for both must not hand one back for the other."""
    model = reader(tiny_base, "prefix", 0, "query_likelihood")
    units = StoredUnits(model, tmp_path).get(ITEMS)
    items = ItemKVCache(model, tmp_path)
    whole = items.get(ITEMS)
    assert items.computed == len(ITEMS)  # none read from the units' blobs
    lengths = [len(ids) for ids in model.item_ids(ITEMS)[0]]
    assert [u.positions for u in units] == [min(4, j) for j in lengths] != lengths
    assert [u.positions for u in whole] == lengths
    assert StoredUnits(model, tmp_path).folder != items.folder


@pytest.fixture(scope="module")
def store_path(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prefix store of 4 positions over the tiny base, read by a head."""
    gist = RerankerConfig(num_gist=4, compressor="prefix", max_item_tokens=64, dtype="float32")
    return Reranker.from_pretrained(tiny_base, gist, device="cpu").save_pretrained(
        tmp_path_factory.mktemp("store")
    )


def test_training_lowers_the_held_out_loss_and_rewrites_no_stored_unit(
    store_path: Path, tmp_path: Path
) -> None:
    data = toy_set()
    cfg = ReaderTrainConfig(
        model=str(store_path),
        rank=4,
        objective="distill",
        steps=16,
        lr=2e-2,
        holdout_queries=2,
        eval_every=8,
    )
    trainer = ReaderTrainer(cfg, data, tmp_path / "run", device="cpu")
    store = trainer.store
    before = mean_test_kl(trainer.model, store, data)
    trainer._fill(progress=False)
    trainer.train_step()
    trained_names = {"score_embedding", "head.weight", "head.bias"}
    for name, p in trainer.model.named_parameters():
        assert (p.grad is not None) == (name in trained_names or name.startswith("reader_adapter.")), name
    trainer.fit(progress=False)
    assert trainer.units.computed == len({t for x in [*trainer.lists, *trainer.dev] for t in x.texts})
    reader = Reranker.from_pretrained(tmp_path / "run" / "checkpoint", device="cpu")
    assert reader.fingerprint == store.fingerprint != "" and reader.gist.reader_adapter_rank == 4
    texts = [item.text for item in data.items.values()]
    for a, b in zip(reader.compress(texts), store.compress(texts), strict=True):
        assert torch.equal(a.kv, b.kv)  # the store as it was: a reader rollout writes nothing
    after = mean_test_kl(reader, store, data)
    # measured: 0.355 → 0.097; at lr 1e-7 (no learning) it stays at 0.355
    assert after < 0.5 * before, (before, after)


def test_full_context_targets_are_computed_once_per_reader_and_read_back_by_later_runs_over_any_store(
    store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = toy_set()
    cfg = ReaderTrainConfig(model=str(store_path), rank=2, objective="distill", holdout_queries=2)
    first = ReaderTrainer(cfg, data, tmp_path / "a", device="cpu", cache_dir=tmp_path / "cache")
    first._fill(progress=False)
    written = first.targets_file.read_text()
    assert len(written.splitlines()) == len(first.targets) > 0
    assert not any(t in written for x in first.lists for t in [x.query, *x.texts])  # hashes, no text

    def refuse(*_: object) -> None:
        raise AssertionError("a target computed again")

    again = ReaderTrainer(
        cfg.model_copy(update={"objective": "both"}),
        data,
        tmp_path / "b",
        device="cpu",
        cache_dir=tmp_path / "cache",
    )
    monkeypatch.setattr(type(again.store), "score_full", refuse)
    again._fill(progress=False)
    assert again.targets == first.targets and again.targets_file.read_text() == written
    # another store over the same reader (its K/V kept at 8 bits: another store fingerprint) reads whole
    # items alike, so it reads the same targets back; a reader that reads items shorter does not
    other_store = ReaderTrainer(
        cfg.model_copy(update={"model": f"{store_path}?kv_storage=int8"}),
        data,
        tmp_path / "c",
        device="cpu",
        cache_dir=tmp_path / "cache",
    )
    assert other_store.store.fingerprint != first.store.fingerprint
    assert other_store.targets_file == first.targets_file
    other_store._fill(progress=False)
    assert other_store.targets == first.targets
    shorter = f"{store_path}?max_item_tokens=32"
    assert Reranker.read(shorter, device="cpu").full_context_fingerprint not in first.targets_file.name


def test_pseudo_query_lists_ask_an_items_title_of_it_and_its_bm25_neighbours(store_path: Path) -> None:
    data = toy_set()
    cfg = ReaderTrainConfig(
        model=str(store_path), judged=False, pseudo_lists=5, pseudo_negatives=3, holdout_queries=1
    )
    trainer = ReaderTrainer(cfg, data, Path("unused"), device="cpu")
    assert len(trainer.lists) == 5
    titles = {item.text: item.title for item in data.items.values()}
    for x in trainer.lists:
        assert x.labels == [1, 0, 0, 0][: len(x.texts)] and titles[x.texts[0]] == x.query
        # the negatives share a word with the query (BM25 found them), and are other items
        assert all(set(x.query.split()) & set(titles[t].split()) for t in x.texts[1:])
        assert x.texts[0] not in x.texts[1:]
    trainer.cfg.candidates_per_list = 2  # every draw keeps a relevant candidate for the labels to rank
    assert all(0 in trainer._draw(x) for x in trainer.lists for _ in range(10))


def test_sentence_pseudo_queries_begin_past_what_the_store_keeps_verbatim(store_path: Path) -> None:
    """A title sits inside a stored prefix (the list is solved from the first step): a sentence pseudo-query
    is one that begins after the store's verbatim tokens, so the reader must infer it from what is kept."""
    data = toy_set()
    cfg = ReaderTrainConfig(
        model=str(store_path), judged=False, pseudo_lists=8, pseudo_negatives=3, pseudo_query="sentence"
    )
    trainer = ReaderTrainer(cfg, data, Path("unused"), device="cpu")
    assert trainer.lists
    for x in trainer.lists:
        item = x.texts[0]
        kept = trainer.past_verbatim(item)
        ids = trainer.store.item_ids([item[:kept]])[0][0]
        assert len(ids) == 4  # BOS and the 3 item tokens of the 4 stored positions
        assert x.query in " ".join(item[kept:].split()) and x.labels[0] == 1
    titles = {item.title for item in data.items.values()}
    assert not {x.query for x in trainer.lists} & titles


def test_cli_trains_a_reader_for_the_store(store_path: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from reranker.cli import app

    out = tmp_path / "run"
    args = ["train-reader", "--out", str(out), "--model", str(store_path), "--products", "4", "--steps", "3"]
    pseudo = ["--pseudo-lists", "4", "--pseudo-query", "sentence"]
    result = CliRunner().invoke(app, [*args, "--objective", "both", *pseudo, "--rank", "2"])
    assert result.exit_code == 0, result.output
    assert "store fingerprint" in result.output and "pairs per CPU-second" in result.output
    reader = Reranker.from_pretrained(out / "checkpoint", device="cpu")
    store = Reranker.from_pretrained(store_path, device="cpu")
    assert reader.fingerprint == store.fingerprint and reader.reader_fingerprint != store.reader_fingerprint
    saved = json.loads((out / "config.json").read_text())
    assert (saved["pseudo_lists"], saved["pseudo_query"]) == (4, "sentence")
    bad = CliRunner().invoke(app, [*args, "--objective", "bogus"])
    assert bad.exit_code == 2 and "objective" in bad.output
