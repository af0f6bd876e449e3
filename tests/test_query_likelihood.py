"""The query-likelihood score rule: log p(query | item) under the LM's own head, on every path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import ITEMS, QUERY
from test_equivalence import assert_scores_equal
from tiny import GIST, tiny_relevance_set, train_config

from reranker import Reranker, RerankerConfig
from reranker.training.forwards import score_packed
from reranker.training.trainer import Trainer

TEMPLATE = "\nAsked:\n{query}"  # nothing after the query: every scored token is the query's own
QL = RerankerConfig(num_gist=4, score_rule="query_likelihood", query_template=TEMPLATE, dtype="float32")
QL_TINY = GIST.model_copy(update=QL.query_reading)  # the tiny training runs' gisting, read by likelihood


def ql_model(base: Path, **update: object) -> Reranker:
    return Reranker.from_pretrained(base, QL.model_copy(update=update), device="cpu")


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("t", [0, 5])
def test_online_score_equals_masked_forward(tiny_bases: dict[str, Path], arch: str, t: int) -> None:
    model = ql_model(tiny_bases[arch], keep_item_prefix=t)
    kvs = model.compress(ITEMS, batch_size=3)
    online = model.score(QUERY, kvs)
    assert_scores_equal(online, model.score_masked(QUERY, ITEMS))
    assert (online < 0).all(), "a sum of log-probabilities"


def test_score_is_the_log_probability_of_the_query_tokens(tiny_base: Path) -> None:
    """score_full is Σ log p(query token | item, lead-in, earlier query tokens), computed here from the
    base LM's own logits over token ids, one unpadded row per item."""
    model = ql_model(tiny_base)
    tok = model.tokenizer
    lead = tok("\nAsked:\n", add_special_tokens=False)["input_ids"]
    asked = tok(QUERY, add_special_tokens=False)["input_ids"]
    expected = []
    for ids in model.item_ids(ITEMS)[0]:
        row = torch.tensor([ids + lead + asked])
        with torch.no_grad():
            logp = torch.log_softmax(model.lm(input_ids=row).logits[0].float(), dim=-1)  # (S, V)
        start = len(ids) + len(lead)
        expected.append(sum(float(logp[start + i - 1, token]) for i, token in enumerate(asked)))
    torch.testing.assert_close(model.score_full(QUERY, ITEMS), torch.tensor(expected), rtol=1e-4, atol=1e-4)


def test_online_sequence_holds_only_the_query(tiny_base: Path) -> None:
    """No score token: ℓ is the templated query's own length."""
    model = ql_model(tiny_base)
    assert model.tail_length(QUERY) == len(model.query_ids(QUERY))
    head = Reranker.from_pretrained(tiny_base, GIST, device="cpu")
    assert head.tail_length(QUERY) == len(head.query_ids(QUERY)) + 1


def test_packed_rows_score_each_query_as_alone(tiny_base: Path) -> None:
    model = ql_model(tiny_base)
    queries = [QUERY, "kettle 1.7 L", "black headphones"]
    packed = score_packed(model, ITEMS, [queries] * len(ITEMS))
    for i, query in enumerate(queries):
        alone = model.score_masked(query, ITEMS)
        assert_scores_equal(torch.stack([scores[i] for scores in packed]), alone)


def test_rule_changes_the_fingerprint_only_when_set(tiny_base: Path) -> None:
    head = Reranker.from_pretrained(tiny_base, GIST, device="cpu")
    explicit = Reranker.from_pretrained(
        tiny_base, GIST.model_copy(update={"score_rule": "head"}), device="cpu"
    )
    ql = Reranker.from_pretrained(
        tiny_base, GIST.model_copy(update={"score_rule": "query_likelihood"}), device="cpu"
    )
    assert head.reader_fingerprint == explicit.reader_fingerprint != ql.reader_fingerprint
    assert head.fingerprint == ql.fingerprint  # the rule reads the stored units, it does not change them


def test_rule_needs_a_lead_in_and_refuses_pointwise(tiny_base: Path) -> None:
    with pytest.raises(ValueError, match="needs template text before"):
        RerankerConfig(score_rule="query_likelihood", query_template="{query} is relevant")
    with pytest.raises(ValueError, match="pointwise reads scores as logits"):
        train_config(tiny_base, gist=QL, pointwise=1.0)


def test_student_trains_saves_and_serves_the_rule(tiny_base: Path, tmp_path: Path) -> None:
    """A query-likelihood student learns to rank from the listwise loss, and its checkpoint scores the
    same way after loading (the rule travels in the saved RerankerConfig)."""
    cfg = train_config(tiny_base, gist=QL_TINY, steps=40, autoencode=0.5, autoencode_tokens=8)
    trainer = Trainer(cfg, tiny_relevance_set(), tmp_path, device="cpu")
    curve = trainer.fit(progress=False)
    first = sum(r["listwise"] for r in curve[:5]) / 5
    last = sum(r["listwise"] for r in curve[-5:]) / 5
    assert last < first - 0.2, (first, last)
    loaded = Reranker.from_pretrained(tmp_path / "checkpoint", device="cpu")
    assert loaded.gist.score_rule == "query_likelihood"
    assert_scores_equal(loaded.score(QUERY, loaded.compress(ITEMS)), trainer.model.score_masked(QUERY, ITEMS))
