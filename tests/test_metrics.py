"""IR metrics against hand-computed cases (reranker.ranking_metrics)."""

from __future__ import annotations

import math

import pytest

from reranker.ranking_metrics import (
    accuracy_at_1,
    bootstrap_ci,
    length_quartiles,
    mean_by_slice,
    ndcg_at_k,
    ranking,
    recall_at_k_vs_reference,
    top_k,
    top_k_overlap,
)

LOG2_3 = math.log2(3)  # discount of rank 2


def test_ranking_is_score_descending_then_index_ascending() -> None:
    assert ranking([0.2, 0.9, 0.2, 0.5]) == [1, 3, 0, 2]


def test_top_k_breaks_ties_by_position() -> None:
    assert top_k([0.5, 0.9, 0.5, 0.1], 2) == [1, 0]
    assert top_k([1.0, 1.0, 1.0], 2) == [0, 1]
    assert top_k([3.0], 5) == [0]


def test_top_k_overlap_is_recall_before_dividing() -> None:
    system, reference = [0.9, 0.8, 0.1, 0.7], [0.9, 0.1, 0.8, 0.7]
    assert top_k_overlap(system, reference, 2) == (1, 2)  # {0, 1} vs {0, 2}
    assert top_k_overlap(system, reference, 10) == (4, 4)  # fewer candidates than k
    assert recall_at_k_vs_reference(system, reference, 2) == 0.5


@pytest.mark.parametrize("k", [1, 5, 10])
def test_recall_perfect_agreement_is_one(k: int) -> None:
    scores = [0.3, 2.0, -1.0, 0.7, 0.1, 5.0, 0.0, 1.5, 0.2, 0.9, 0.4, 0.8]
    assert recall_at_k_vs_reference(scores, scores, k) == 1.0


def test_recall_reversed_ranking() -> None:
    system, reference = [5, 4, 3, 2, 1], [1, 2, 3, 4, 5]
    assert recall_at_k_vs_reference(system, reference, 2) == 0.0  # {0, 1} vs {4, 3}
    assert recall_at_k_vs_reference(system, reference, 3) == pytest.approx(1 / 3)  # shares only 2


def test_recall_partial_overlap() -> None:
    # system top-2 = {0, 1}, reference top-2 = {0, 2}
    assert recall_at_k_vs_reference([0.9, 0.8, 0.1, 0.7], [0.9, 0.1, 0.8, 0.7], 2) == 0.5


def test_recall_ties_break_by_index() -> None:
    # all-equal system scores rank as 0, 1, 2, 3; the reference's top-2 is {2, 3}
    assert recall_at_k_vs_reference([1, 1, 1, 1], [0, 0, 1, 1], 2) == 0.0
    assert recall_at_k_vs_reference([1, 1, 1, 1], [1, 1, 0, 0], 2) == 1.0
    # a tie at the cut: reference [3, 2, 2] keeps {0, 1}; the system keeps {0, 2}
    assert recall_at_k_vs_reference([3, 0, 2], [3, 2, 2], 2) == 0.5


@pytest.mark.parametrize("k", [3, 5, 10])
def test_recall_with_fewer_candidates_than_k_is_one(k: int) -> None:
    assert recall_at_k_vs_reference([0.1, 0.2, 0.3], [0.3, 0.2, 0.1], k) == 1.0


def test_recall_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="entries"):
        recall_at_k_vs_reference([1, 2], [1, 2, 3], 1)
    with pytest.raises(ValueError, match="k must be"):
        recall_at_k_vs_reference([1, 2], [1, 2], 0)
    with pytest.raises(ValueError, match="finite"):
        recall_at_k_vs_reference([1, float("nan")], [1, 2], 1)
    with pytest.raises(ValueError, match="empty"):
        recall_at_k_vs_reference([], [], 1)


def test_ndcg_graded_labels_by_hand() -> None:
    # ranking: index 1 (label 0), 2 (label 1), 3 (label 2), 0 (label 2)
    # DCG@3 = 0/1 + (2^1-1)/log2(3) + (2^2-1)/log2(4) = 1/log2(3) + 3/2
    # ideal labels 2, 2, 1: IDCG@3 = 3/1 + 3/log2(3) + 1/2
    value = ndcg_at_k([0.1, 0.9, 0.5, 0.3], [2, 0, 1, 2], 3, gain="exponential")
    assert value == pytest.approx((1 / LOG2_3 + 1.5) / (3 + 3 / LOG2_3 + 0.5), abs=1e-9)
    assert value == pytest.approx(0.3951442658987156, abs=1e-9)
    # the default, trec_eval's gain = label: DCG@3 = 1/log2(3) + 2/2, IDCG@3 = 2 + 2/log2(3) + 1/2
    linear = ndcg_at_k([0.1, 0.9, 0.5, 0.3], [2, 0, 1, 2], 3)
    assert linear == pytest.approx((1 / LOG2_3 + 1) / (2 + 2 / LOG2_3 + 0.5), abs=1e-9)


def test_ndcg_perfect_and_reversed() -> None:
    labels = [2, 1, 0, 0]
    assert ndcg_at_k([4, 3, 2, 1], labels, 10) == pytest.approx(1.0, abs=1e-12)
    # reversed: ranks 3 and 4 hold labels 1 and 2 -> DCG = 1/log2(4) + 3/log2(5); IDCG = 3 + 1/log2(3)
    expected = (1 / 2 + 3 / math.log2(5)) / (3 + 1 / LOG2_3)
    assert ndcg_at_k([1, 2, 3, 4], labels, 10, gain="exponential") == pytest.approx(expected, abs=1e-9)


def test_ndcg_ties_break_by_index() -> None:
    # equal scores rank index 0 (label 0) first: DCG = 3/log2(3), IDCG = 3
    assert ndcg_at_k([0.5, 0.5], [0, 2], 2) == pytest.approx(1 / LOG2_3, abs=1e-9)


def test_ndcg_cut_at_k_and_no_relevant_label() -> None:
    # the only relevant item sits at rank 3: outside the top-2, so NDCG@2 is 0
    assert ndcg_at_k([3, 2, 1], [0, 0, 1], 2) == 0.0
    assert ndcg_at_k([3, 2, 1], [0, 0, 0], 10) == 0.0
    with pytest.raises(ValueError, match=">= 0"):
        ndcg_at_k([1, 2], [0, -1], 2)


def test_accuracy_at_1() -> None:
    assert accuracy_at_1([0.2, 0.9], [2, 1]) == 0.0
    assert accuracy_at_1([0.2, 0.9], [1, 2]) == 1.0
    assert accuracy_at_1([0.9, 0.1], [1, 0]) == 1.0  # the best label present is partial
    assert accuracy_at_1([0.9, 0.1], [0, 0]) == 0.0  # nothing relevant
    assert accuracy_at_1([0.5, 0.5], [0, 2]) == 0.0  # tie goes to index 0


def test_mean_by_slice_sorted_keys() -> None:
    means = mean_by_slice([1.0, 2.0, 3.0, 4.0], ["b", "a", "b", "a"])
    assert means == {"a": 3.0, "b": 2.0}
    assert list(means) == ["a", "b"]
    assert mean_by_slice([0.5, 1.0, 0.0], [True, False, True]) == {False: 1.0, True: 0.25}


@pytest.mark.parametrize(
    ("lengths", "quartiles"),
    [
        ([1, 2, 3, 4], [0, 1, 2, 3]),
        ([1, 2, 3, 4, 5, 6, 7, 8], [0, 0, 1, 1, 2, 2, 3, 3]),
        ([40, 10, 30, 20], [3, 0, 2, 1]),
        ([7, 7, 7], [0, 0, 0]),
        ([5, 5, 5, 10], [0, 0, 0, 3]),  # cuts 5, 5, 6.25: equal lengths share a quartile
        ([100], [0]),
    ],
)
def test_length_quartiles(lengths: list[int], quartiles: list[int]) -> None:
    assert length_quartiles(lengths) == quartiles


def test_length_quartiles_rejects_empty() -> None:
    with pytest.raises(ValueError):
        length_quartiles([])


def test_bootstrap_ci_brackets_the_mean_and_narrows_with_more_queries() -> None:
    few = [0.0, 1.0] * 5
    many = few * 20
    lo_few, hi_few = bootstrap_ci(few)
    lo_many, hi_many = bootstrap_ci(many)
    assert lo_few < 0.5 < hi_few and lo_many < 0.5 < hi_many
    assert hi_many - lo_many < hi_few - lo_few
    assert bootstrap_ci([0.75] * 8) == (0.75, 0.75)  # no spread, no interval (0.75 sums exactly)
    assert bootstrap_ci(few) == bootstrap_ci(few)  # seeded
    with pytest.raises(ValueError, match="no values"):
        bootstrap_ci([])
