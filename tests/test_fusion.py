"""Fusion with the first stage (reranker/core/fusion.py) where it is decided and served: the rules, the
setting in a model's reading fingerprint, FIRST_STAGE_SCORES decoding, the gist service's fused and own
scores, the shadow's fused recall, `rank` / `predict`, and the fusion file from `eval` to `serve`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import typer
from helpers import QUERY, bytes_array, make_lookup, metric, text_of
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from reranker import Reranker, RerankerConfig
from reranker.core.checkpoints import DEFAULT_MODEL, PREFIX64_MODEL, split_spec
from reranker.core.fusion import Fusion, interpolate, reciprocal_rank_fusion, served_fusion
from reranker.core.model_refs import ModelReferenceError, check_model_ref
from reranker.serving.cli import _fusion_setting
from reranker.serving.requests import FIRST_STAGE_SCORES, RequestError, decode_request
from reranker.serving.service import FullService, GistService
from reranker.serving.shadow import ShadowSampler, overlap_at_k

pytestmark = pytest.mark.fusion


# ------------------------------------------------------------------------------------------- the rules
def test_settings_parse_to_one_canonical_form_and_bad_ones_say_why() -> None:
    assert str(Fusion.parse("linear:.40")) == "linear:0.4"
    assert Fusion.parse("rrf:0.5") == Fusion("rrf", 0.5, 60)
    assert str(Fusion.parse(" rrf:1:10 ")) == "rrf:1:10"
    assert Fusion.parse("none").fuse([3.0, 1.0], [0.0, 9.0]) == [3.0, 1.0]
    for bad, why in {
        "linear": "linear:WEIGHT",
        "linear:0.5:60": "linear:WEIGHT",
        "mean:0.5": "linear:WEIGHT",
        "linear:x": "must be a number",
        "linear:1.5": "within [0, 1]",
        "linear:nan": "within [0, 1]",
        "rrf:0.5:0": "k must be at least 1",
        "rrf:0.5:2.5": "must be a number and k an integer",
    }.items():
        with pytest.raises(ValueError, match=why.replace("[", r"\[")):
            Fusion.parse(bad)


def test_linear_and_rrf_by_hand() -> None:
    reranker, bm25 = [2.0, 0.0, 1.0], [10.0, 30.0, 20.0]
    # min-max: reranker [1, 0, .5], bm25 [0, 1, .5]; 0.4 · reranker + 0.6 · bm25
    assert Fusion.parse("linear:0.4").fuse(reranker, bm25) == pytest.approx([0.4, 0.6, 0.5])
    # ranks: reranker [1, 3, 2], bm25 [3, 1, 2]; k = 1: 0.5/(1+r) + 0.5/(1+f)
    assert Fusion.parse("rrf:0.5:1").fuse(reranker, bm25) == pytest.approx(
        [0.5 / 2 + 0.5 / 4, 0.5 / 4 + 0.5 / 2, 0.5 / 3 + 0.5 / 3]
    )
    assert Fusion.parse("linear:1").fuse([5.0, 5.0], [1.0, 2.0]) == [0.0, 0.0]  # a flat list: all 0
    with pytest.raises(ValueError, match="2 reranker scores but 1 first-stage"):
        Fusion.parse("linear:0.5").fuse([1.0, 2.0], [1.0])


_scores = st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=25)


@settings(max_examples=200, deadline=None)
@given(st.data(), st.sampled_from([0.0, 0.3, 1.0]))
def test_weight_one_keeps_the_rerankers_order_and_zero_the_first_stages(data, weight) -> None:
    reranker = data.draw(_scores)
    first = data.draw(st.lists(st.floats(-1e3, 1e3), min_size=len(reranker), max_size=len(reranker)))
    for rule in (f"linear:{weight}", f"rrf:{weight}"):
        fused = Fusion.parse(rule).fuse(reranker, first)
        assert len(fused) == len(reranker) and all(math.isfinite(x) for x in fused)
        if weight in (0.0, 1.0):
            own = reranker if weight == 1.0 else first
            # every strict order of the followed list is kept (ties may be re-ordered by the other)
            for i in range(len(own)):
                for j in range(len(own)):
                    if own[i] > own[j]:
                        assert fused[i] >= fused[j]
    assert Fusion.parse(f"linear:{weight}").fuse(reranker, first) == interpolate(reranker, first, weight)
    assert Fusion.parse(f"rrf:{weight}:7").fuse(reranker, first) == reciprocal_rank_fusion(
        reranker, first, weight, 7
    )


# --------------------------------------------------------------------------------- the model's setting
def test_fusion_is_a_reading_setting_in_the_reader_fingerprint_only(tiny_base: Path) -> None:
    one = Reranker.from_pretrained(tiny_base, RerankerConfig(num_gist=4, dtype="float32"), device="cpu")
    other = one.with_gist_config(one.gist.model_copy(update={"fusion": "rrf:0.7"}))
    assert one.fusion == Fusion("linear", 0.5) and other.fusion == Fusion("rrf", 0.7, 60)
    assert other.fingerprint == one.fingerprint  # the same stored units serve both
    assert other.reader_fingerprint != one.reader_fingerprint  # a shadow never mixes two fusions
    # no score depends on it: score caches (evaluation, distillation targets) survive a new weight
    assert other.scores_fingerprint == one.scores_fingerprint == one.reader_fingerprint
    rescored = other.with_gist_config(other.gist.model_copy(update={"query_template": "Q: {query}"}))
    assert rescored.scores_fingerprint != other.scores_fingerprint
    check_model_ref(f"{tiny_base}?fusion=linear:0.3")
    with pytest.raises(ModelReferenceError, match="within"):
        check_model_ref(f"{tiny_base}?fusion=linear:3")
    # fitted on AP89 dev, BM25's top 20: for the default no weight adds to BM25 (reports/quality/bytes/)
    assert split_spec(DEFAULT_MODEL)[1]["fusion"] == "linear:0.0"
    assert split_spec(PREFIX64_MODEL)[1]["fusion"] == "linear:0.4"


def test_rank_and_predict_fuse_as_served(tiny_model: Reranker) -> None:
    texts = ["acme phone 256GB", "blue kettle", "usb cable", "phone case"]
    first = [1.0, 9.0, 3.0, 2.0]
    own = tiny_model.score(QUERY, tiny_model.compress(texts)).tolist()
    fused = tiny_model.fusion.fuse(own, first)
    ranked = tiny_model.rank(QUERY, texts, first_stage_scores=first)
    assert [i for i, _ in ranked] == sorted(range(4), key=lambda i: -fused[i])
    assert [s for _, s in ranked] == pytest.approx(sorted(fused, reverse=True), abs=1e-6)
    pairs = [(QUERY, t) for t in texts] + [("kettle", texts[1])]
    predicted = tiny_model.predict(pairs, first_stage_scores=[*first, 5.0])
    assert predicted[:4] == pytest.approx(fused, abs=1e-6)
    assert predicted[4] == 0.0  # a one-candidate list min-max normalises to 0 on both sides
    with pytest.raises(ValueError, match="4 first-stage scores for 5 pairs"):
        tiny_model.predict(pairs, first_stage_scores=first)


# ---------------------------------------------------------------------------------- the request tensor
IDS = bytes_array([b"item-0", b"item-1"])


@pytest.mark.parametrize(
    ("first_stage", "message"),
    [
        (np.array([1.0], dtype=np.float32), "must have shape [2] (one score per ITEM_IDS element), got [1]"),
        (np.array([[1.0, 2.0]], dtype=np.float32), "must have shape [2]"),
        (np.array([1.0, np.nan], dtype=np.float32), "FIRST_STAGE_SCORES[1] is nan"),
        (np.array([np.inf, 1.0], dtype=np.float32), "FIRST_STAGE_SCORES[0] is inf"),
        (np.array([1.0, 2.0]), "must be FP32, got float64"),
        (bytes_array([b"1", b"2"]), "must be FP32, got object"),
        ([1.0, 2.0], "must be a tensor, got list"),
    ],
)
def test_bad_first_stage_scores_get_one_precise_error(first_stage, message: str) -> None:
    with pytest.raises(RequestError) as err:
        decode_request(bytes_array([b"q"]), IDS, first_stage=first_stage)
    assert str(err.value).startswith(FIRST_STAGE_SCORES) and message in str(err.value)


@settings(max_examples=300, deadline=None)
@given(
    hnp.arrays(
        st.sampled_from([np.float32, np.float64, np.int32]),
        hnp.array_shapes(min_dims=0, max_dims=2, max_side=3),
    )  # each dtype's own elements, nan and inf included
)
def test_any_first_stage_tensor_decodes_or_gets_a_request_error(array: np.ndarray) -> None:
    try:
        request = decode_request(bytes_array([b"q"]), IDS, first_stage=array)
    except RequestError as e:
        assert str(e).startswith(FIRST_STAGE_SCORES)
    else:
        assert array.dtype == np.float32 and array.shape == (2,) and np.isfinite(array).all()
        assert request.first_stage == tuple(float(x) for x in array)


def test_the_full_context_model_refuses_first_stage_scores(tiny_model, catalog) -> None:
    with pytest.raises(RequestError, match="takes no FIRST_STAGE_SCORES"):
        FullService(tiny_model, catalog).handle(
            bytes_array([b"q"]), IDS, np.array([1.0, 2.0], dtype=np.float32)
        )


# -------------------------------------------------------------------------------- service and shadow
def test_service_serves_fused_scores_beside_its_own_and_counts_both_kinds(
    tiny_model, catalog, feast_store
) -> None:
    lookup, _ = make_lookup(tiny_model, catalog, feast_store)

    def score_full(query, ids):
        return tiny_model.score_full(query, [text_of(catalog, i) for i in ids]).tolist()

    shadow = ShadowSampler(1.0, score_full, fusion=tiny_model.fusion)
    service = GistService(tiny_model, lookup, shadow)
    ids = ["item-2", "nope", "item-0", "item-1", "item-3"]
    first = np.array([4.0, 100.0, 1.0, 3.0, 2.0], dtype=np.float32)
    given_, absent = (
        metric("gistrank_rerank_first_stage_requests_total", first_stage=f) for f in ("given", "absent")
    )
    fused_ref = metric("gistrank_shadow_fused_topk_reference_total", k="10")
    fused_overlap = metric("gistrank_shadow_fused_topk_overlap_total", k="10")

    plain = service.handle(bytes_array([QUERY.encode()]), bytes_array([i.encode() for i in ids]))
    result = service.handle(bytes_array([QUERY.encode()]), bytes_array([i.encode() for i in ids]), first)
    np.testing.assert_array_equal(plain.scores, plain.rerank_scores)  # nothing to fuse with
    np.testing.assert_allclose(result.rerank_scores, plain.scores, rtol=1e-5, equal_nan=True)
    assert math.isnan(result.scores[1]) and math.isnan(result.rerank_scores[1])  # the unknown id
    scored = [0, 2, 3, 4]  # the unknown id's first-stage score takes no part in the normalisation
    expected = tiny_model.fusion.fuse(result.rerank_scores[scored].tolist(), first[scored].tolist())
    np.testing.assert_allclose(result.scores[scored], expected, rtol=1e-6)
    assert metric("gistrank_rerank_first_stage_requests_total", first_stage="given") == given_ + 1
    assert metric("gistrank_rerank_first_stage_requests_total", first_stage="absent") == absent + 1
    assert shadow.drain(30)
    full = score_full(QUERY, [ids[n] for n in scored])
    fused_full = tiny_model.fusion.fuse(full, first[scored].tolist())
    overlap, reference = overlap_at_k(expected, fused_full, (10,))[10]
    assert (
        metric("gistrank_shadow_fused_topk_reference_total", k="10") == fused_ref + reference == fused_ref + 4
    )
    assert metric("gistrank_shadow_fused_topk_overlap_total", k="10") == fused_overlap + overlap
    shadow.close()
    lookup.refresh.close()


def test_shadow_compares_the_fused_rankings_only_where_first_stage_scores_came() -> None:
    full_scores = {"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.0}
    sampler = ShadowSampler(
        1.0, lambda q, ids: [full_scores[i] for i in ids], fusion=Fusion.parse("linear:0.5")
    )
    before = {
        name: metric(f"gistrank_shadow_{name}_total", k="1")
        for name in ("fused_topk_overlap", "fused_topk_reference")
    }
    # unfused the gist ranking (d first) disagrees with the full one (a first) at 1; the first stage
    # strongly favours a, so both fused rankings put a first: fused recall@1 is 1 where unfused is 0
    sampler.offer("q", ["a", "b", "c", "d"], [0.0, 1.0, 2.0, 3.0], [100.0, 0.0, 0.0, 0.0])
    sampler.offer("q", ["a", "b"], [0.0, 1.0])  # no first stage: no fused comparison
    assert sampler.drain(10)
    assert metric("gistrank_shadow_fused_topk_overlap_total", k="1") == before["fused_topk_overlap"] + 1
    assert metric("gistrank_shadow_fused_topk_reference_total", k="1") == before["fused_topk_reference"] + 1
    sampler.close()


# ----------------------------------------------------------------------------------- eval → serve file
def test_serve_reads_the_fusion_fitted_for_its_model_and_refuses_what_it_cannot_use(tmp_path: Path) -> None:
    path = tmp_path / "fusion.json"
    path.write_text(json.dumps({"split": "dev", "models": {"ckpt?num_gist=4": {"fusion": "linear:0.30"}}}))
    assert served_fusion(path, "ckpt?num_gist=4") == "linear:0.3"
    assert _fusion_setting(str(path), "ckpt?num_gist=4") == "linear:0.3"
    assert _fusion_setting(str(tmp_path), "ckpt?num_gist=4") == "linear:0.3"  # the eval folder
    assert _fusion_setting("rrf:0.5", "anything") == "rrf:0.5:60"
    for value, model, message in [
        (str(path), "other", "fitted no fusion for 'other'; it holds ['ckpt?num_gist=4']"),
        (
            str(tmp_path / "missing.json"),
            "ckpt",
            "is not a fusion.json written by `gistrank eval --fit-fusion`",
        ),
        ("linear:2", "ckpt", "within [0, 1]"),
    ]:
        with pytest.raises(typer.BadParameter, match=message.replace("[", r"\[").replace("?", r"\?")):
            _fusion_setting(value, model)
