"""`gistrank probe`: per-layer gaps between a student's query states and the teacher's, checked on
students whose answer is known (one that reads the whole item, one whose query ignores its item)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny import GIST, tiny_relevance_set, train_config

from reranker import Reranker
from reranker.evaluation import probe
from reranker.evaluation.probe import attention, probe_states, query_states, state_gap
from reranker.training.trainer import Trainer


@pytest.fixture
def checkpoint(tiny_base: Path, tmp_path: Path) -> Path:
    return Reranker.from_pretrained(str(tiny_base), GIST, device="cpu").save_pretrained(tmp_path / "ckpt")


def test_probe_scores_a_perfect_and_an_item_blind_student(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tiny_relevance_set()
    real = probe.query_states
    # teacher and student are the same checkpoint; the student's read of its stored positions is
    # replaced by a known answer: the whole item (perfect), or every candidate's mean (item-blind)
    student_view = {"perfect": lambda states: states, "blind": lambda s: s.mean(0, keepdim=True).expand_as(s)}
    rows = {}
    for name, view in student_view.items():

        def states(model, query, items, full, view=view):
            tail = real(model, query, items, True)
            return tail if full else view(tail)

        monkeypatch.setattr(probe, "query_states", states)
        out = tmp_path / f"{name}.json"
        rows[name] = probe_states(data, checkpoint, checkpoint, out, queries=2, candidates=3, device="cpu")
        assert json.loads(out.read_text())["rows"] == rows[name]
    layers = Reranker.from_pretrained(checkpoint, device="cpu").lm.config.num_hidden_layers
    assert [r["layer"] for r in rows["perfect"]] == list(range(1, layers + 1))
    for perfect, blind in zip(rows["perfect"], rows["blind"], strict=True):
        assert 0.0 < perfect["share"] < 1.0 and perfect["share"] == pytest.approx(blind["share"])
        assert perfect["gap"] == pytest.approx(0.0, abs=1e-6) and perfect["centered"] == pytest.approx(0.0)
        assert perfect["peak_s"] == pytest.approx(perfect["peak_t"])
        assert perfect["share_s"] == pytest.approx(perfect["share"])
        assert blind["centered"] == pytest.approx(1.0, rel=1e-5)  # knows nothing about its item
        assert blind["share_s"] == pytest.approx(0.0, abs=1e-10)
        assert blind["gap"] > 0.0


def test_probe_refuses_one_candidate(checkpoint: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 2 candidates"):
        probe_states(tiny_relevance_set(), checkpoint, checkpoint, tmp_path / "p.json", candidates=1)


def test_probe_on_an_untrained_gist_student(checkpoint: Path, tmp_path: Path) -> None:
    rows = probe_states(tiny_relevance_set(), checkpoint, checkpoint, tmp_path / "p.json", device="cpu")
    for r in rows:
        assert all(torch.isfinite(torch.tensor(v)) for v in r.values())
        assert 0.0 < r["share"] < 1.0 and r["centered"] > 0.0 and r["peak_s"] > 0.0
    # layer 1's gist values are projections of the gist embeddings: the same for every item; deeper
    # layers' have attended to the item
    assert rows[0]["gist_v_share"] == pytest.approx(0.0, abs=1e-10)
    assert all(0.0 < r["gist_v_share"] < 1.0 for r in rows[1:])


def test_probe_with_fresh_gists(checkpoint: Path, tmp_path: Path) -> None:
    """`fresh_gists` probes the body and head with untrained gists: for the checkpoint's own (untrained)
    config that is the checkpoint itself; another config changes what the query reads."""
    data = tiny_relevance_set()
    own = probe_states(data, checkpoint, checkpoint, tmp_path / "own.json", device="cpu")
    same = probe_states(
        data, checkpoint, checkpoint, tmp_path / "same.json", device="cpu", fresh_gists=(2, 0)
    )
    other = probe_states(
        data, checkpoint, checkpoint, tmp_path / "other.json", device="cpu", fresh_gists=(3, 1)
    )
    assert same == own and other != own
    assert json.loads((tmp_path / "other.json").read_text())["meta"]["fresh_gists"] == [3, 1]


def test_probe_autoencoding_control_sees_what_the_gists_tell(tiny_base: Path, tmp_path: Path) -> None:
    """Trained to regenerate its items from the gists, a student does it better from its own item's
    gists than from another item's, and than from a one-field variant's (the same query's next
    candidate); untrained, it cannot tell them apart."""
    data = tiny_relevance_set()
    untrained = Reranker.from_pretrained(str(tiny_base), GIST, device="cpu").save_pretrained(tmp_path / "u")
    cfg = train_config(tiny_base, steps=40, listwise=0.0, autoencode=1.0, autoencode_tokens=12)
    Trainer(cfg, data, tmp_path / "ae", device="cpu").fit(progress=False)
    gaps, variants = {}, {}
    for name, ckpt in (("untrained", untrained), ("trained", tmp_path / "ae" / "checkpoint")):
        probe_states(data, ckpt, ckpt, tmp_path / f"{name}.json", candidates=4, device="cpu")
        ae = json.loads((tmp_path / f"{name}.json").read_text())["meta"]["autoencode_nats_per_token"]
        gaps[name] = ae["another_item"] - ae["own"]
        variants[name] = ae["same_query_candidate"] - ae["own_per_query"]
    # measured: 0.14 nats/token trained (40 steps on 4 items; tiny learns this slowly), 0.003 untrained;
    # against a candidate of the same query (one field differs): 0.10 trained, -0.002 untrained
    assert gaps["trained"] > 0.05 and gaps["trained"] > 10 * abs(gaps["untrained"]), gaps
    assert variants["trained"] > 0.05 and variants["trained"] > 10 * abs(variants["untrained"]), variants


def test_attention_weights_obey_each_layout(tiny_base: Path) -> None:
    """`attention` returns the weights the forward used: rows are distributions over the columns the
    mask allows, exactly 0 elsewhere (the query never reads hidden item tokens), and the model keeps
    its own attention implementation afterwards."""
    model = Reranker.from_pretrained(
        str(tiny_base), GIST.model_copy(update={"keep_item_prefix": 3}), device="cpu"
    )
    before = model.lm.config._attn_implementation
    items = [i.text for i in list(tiny_relevance_set().items.values())[:3]]
    k, t = model.gist.num_gist, model.gist.keep_item_prefix
    masked, ids, tail = attention(model, "256GB phone", items, full=False)
    full, full_ids, full_tail = attention(model, "256GB phone", items, full=True)
    assert model.lm.config._attn_implementation == before
    assert ids == full_ids and tail == full_tail == len(model.query_ids("256GB phone")) + 1
    layers = model.lm.config.num_hidden_layers
    for c, item in enumerate(ids):
        j = len(item)
        n = j + k + tail
        assert masked.shape[1] == layers and masked[c, :, :n, :n].sum(-1) == pytest.approx(
            torch.ones(layers, n)
        )
        assert masked[c, :, :n, n:].abs().sum() == 0.0  # padding (none on the longest row)
        assert masked[c, :, j + k :, t:j].abs().max() == 0.0  # the gist mask: hidden item columns
        assert masked[c, :, j + k :, :t].min() > 0.0  # the hybrid prefix stays visible
        assert full[c, :, j:, 1:j].min() > 0.0  # full context: the query reads the whole item
        assert torch.triu(full[c, :, : j + tail, : j + tail], diagonal=1).abs().max() == 0.0  # causal


def test_probe_says_where_attention_goes(checkpoint: Path, tmp_path: Path) -> None:
    rows = probe_states(tiny_relevance_set(), checkpoint, checkpoint, tmp_path / "p.json", device="cpu")
    meta = json.loads((tmp_path / "p.json").read_text())["meta"]
    for r in rows:
        assert r["query_to_prefix"] == 0.0  # pure gisting: no raw item token for the query to read
        assert 0.0 < r["query_to_gists"] < 1.0 and 0.0 < r["teacher_to_item"] < 1.0
        assert min(r["gist_to_bos"], r["gist_to_item"]) > 0.0
        assert r["gist_to_bos"] + r["gist_to_item"] < 1.0  # the rest: the gists before and at each gist
        assert 1.0 <= r["gist_tokens_read"] <= GIST.max_item_tokens
    assert len(meta["gist_top_tokens"]) == len(rows)
    for top in meta["gist_top_tokens"]:
        shares = [share for _, share in top]
        assert len(top) == 3 and shares == sorted(shares, reverse=True) and 0.0 < sum(shares) <= 1.0 + 1e-6


def test_probe_reads_a_likelihood_student_with_the_teachers_body_on_its_query(
    tiny_base: Path, checkpoint: Path, tmp_path: Path
) -> None:
    """A query-likelihood student writes its query differently (another template, no score token); the
    teacher is probed on the same query rows, so every layer still compares position by position."""
    ql = GIST.model_copy(update={"score_rule": "query_likelihood", "query_template": "\nAsked:\n{query}"})
    student = Reranker.from_pretrained(str(tiny_base), ql, device="cpu").save_pretrained(tmp_path / "ql")
    rows = probe_states(
        tiny_relevance_set(), checkpoint, student, tmp_path / "p.json", queries=2, device="cpu"
    )
    assert all(0.0 < r["share"] < 1.0 and r["centered"] > 0.0 for r in rows)


@pytest.mark.parametrize("full", [False, True])
def test_query_states_are_the_scored_forward(checkpoint: Path, full: bool) -> None:
    """The tail states the probe compares are the query's own: their last layer at the score token,
    through the final norm and the head, is exactly the score."""
    model = Reranker.from_pretrained(checkpoint, device="cpu")
    items = [i.text for i in list(tiny_relevance_set().items.values())[:4]]
    states = query_states(model, "256GB phone", items, full)
    reference = model.score_full("256GB phone", items) if full else model.score_masked("256GB phone", items)
    ell = len(model.query_ids("256GB phone")) + 1
    assert states.shape == (len(items), model.num_layers, ell, model.lm.config.hidden_size)
    rescored = model.head(model.decoder().norm(states[:, -1, -1])).squeeze(-1)
    torch.testing.assert_close(rescored, reference, rtol=1e-5, atol=1e-6)
    # the query's states depend on the item (through the gists or directly)
    assert not torch.allclose(states[0, -1], states[1, -1], rtol=1e-3)


def test_state_gap_is_a_bounded_direction_distance() -> None:
    teacher = torch.randn(3, 2, 4, 8)
    assert float(state_gap(teacher, teacher)) == pytest.approx(0.0, abs=1e-6)
    assert float(state_gap(-teacher, teacher)) == pytest.approx(2.0)
    huge = teacher.clone()
    huge[0, 0, 0] *= -1e4  # one outlier token costs at most its share, not the whole gap
    assert float(state_gap(huge, teacher)) == pytest.approx(2.0 / (3 * 2 * 4))


def test_centered_state_gap_counts_only_item_specific_differences() -> None:
    teacher = torch.randn(4, 2, 3, 8)  # 4 candidates
    shared = torch.randn(2, 3, 8) * 100  # e.g. a sink: the same for every candidate
    assert float(state_gap(teacher + shared, teacher, centered=True)) == pytest.approx(0.0, abs=1e-6)
    ignores_item = teacher.mean(0, keepdim=True).expand_as(teacher)
    assert float(state_gap(ignores_item, teacher, centered=True)) == pytest.approx(1.0)
    assert float(state_gap(teacher + shared, teacher)) > 0.1  # the plain gap does see it
