"""Synthetic relevance data: determinism, one-field siblings, the label rule, splits, item lengths."""

from __future__ import annotations

import hashlib
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from reranker.data.data_synth import (
    CATEGORIES,
    check_digit,
    family_key,
    generate,
    is_valid_part_number,
    label_for,
    mismatches,
)
from reranker.data.relevance_data import Item, RelevanceSet

ROOT = Path(__file__).resolve().parents[1]
ARGS = (11, 36, 3)  # seed, products (six per category), queries per product


@pytest.fixture(scope="module")
def data() -> RelevanceSet:
    return generate(*ARGS)


def digest(relevance: RelevanceSet) -> str:
    return hashlib.sha256(relevance.model_dump_json().encode()).hexdigest()


# ---- determinism ------------------------------------------------------------------------------------


def test_same_seed_same_data_other_seed_other_data(data: RelevanceSet) -> None:
    assert digest(generate(*ARGS)) == digest(data)
    assert digest(generate(12, *ARGS[1:])) != digest(data)


def test_identical_in_another_process(data: RelevanceSet) -> None:
    code = (
        "import hashlib; from reranker.data.data_synth import generate; "
        f"print(hashlib.sha256(generate(*{ARGS!r}).model_dump_json().encode()).hexdigest())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "4321"}  # string hashing differs from this process
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == digest(data)


def test_more_products_extend_the_catalog() -> None:
    small, large = generate(5, 6, 0), generate(5, 12, 0)
    assert all(large.items[item_id] == item for item_id, item in small.items.items())


# ---- catalog ----------------------------------------------------------------------------------------


def test_categories_and_typed_attributes(data: RelevanceSet) -> None:
    categories = {item.attributes["category"] for item in data.items.values()}
    assert categories == {category.name for category in CATEGORIES}
    assert len(categories) >= 4
    for item in data.items.values():
        assert type(item.attributes["year"]) is int
        assert item.title and item.description
    phones = [item for item in data.items.values() if item.attributes["category"] == "phones"]
    assert all(type(item.attributes["screen_in"]) is float for item in phones)


def test_part_numbers_are_unique_and_carry_a_check_digit(data: RelevanceSet) -> None:
    parts = [str(item.attributes["part_number"]) for item in data.items.values()]
    assert len(set(parts)) == len(parts)
    assert all(is_valid_part_number(part) for part in parts)
    assert check_digit("00000") == "0"
    assert check_digit("10000") == "7"  # 3·1 = 3 -> 10 − 3
    assert not is_valid_part_number("ACM-PH12345-0")  # 3+2+9+4+15 = 33 -> check digit 7


def spec_difference(a: Item, b: Item) -> set[str]:
    keys = set(a.attributes) | set(b.attributes)
    return {key for key in keys if a.attributes.get(key) != b.attributes.get(key)}


def one_digit_apart(a: str, b: str) -> bool:
    body_a, body_b = a.split("-")[1], b.split("-")[1]
    return sum(x != y for x, y in zip(body_a, body_b, strict=True)) == 1


def is_one_field_sibling(product: Item, sibling: Item) -> bool:
    """A spec change (plus the sibling's own part number), or only the part number, off by one digit."""
    differing = spec_difference(product, sibling)
    if differing == {"part_number"}:
        return one_digit_apart(str(product.attributes["part_number"]), str(sibling.attributes["part_number"]))
    return len(differing - {"part_number"}) == 1 and "part_number" in differing


def families(data: RelevanceSet) -> dict[tuple[object, ...], list[Item]]:
    grouped: dict[tuple[object, ...], list[Item]] = defaultdict(list)
    for item in data.items.values():
        grouped[family_key(item.attributes)].append(item)
    return grouped


def test_each_family_is_a_product_and_siblings_one_field_away(data: RelevanceSet) -> None:
    grouped = families(data)
    assert len(grouped) == ARGS[1]
    part_only = 0
    for members in grouped.values():
        assert len(members) == 4  # the product and three siblings
        product = next(m for m in members if all(is_one_field_sibling(m, o) for o in members if o is not m))
        siblings = [member for member in members if member is not product]
        part_only += sum(spec_difference(product, sibling) == {"part_number"} for sibling in siblings)
        for sibling in siblings:  # same description plan: only the printed values differ
            assert sibling.text != product.text
            assert sibling.description.count("\n") == product.description.count("\n")
    assert part_only > 0


# ---- labels and candidates ------------------------------------------------------------------------


def test_label_rule_by_hand() -> None:
    item = {"category": "phones", "brand": "Acme", "storage": "256GB", "year": 2023}
    assert label_for({"category": "kettles", "brand": "Acme"}, item) == 0
    assert label_for({"category": "phones", "brand": "Acme", "storage": "256GB"}, item) == 2
    assert label_for({"category": "phones", "brand": "Acme", "storage": "128GB"}, item) == 1
    assert label_for({"category": "phones", "brand": "Nova", "storage": "128GB", "year": 2023}, item) == 0
    assert label_for({"category": "phones", "brand": "Acme", "color": "Black"}, item) == 1  # missing field
    assert label_for({"category": "phones", "year": 2023.0}, item) == 2  # numeric equality
    assert mismatches({"category": "phones", "brand": "Nova", "year": 2021}, item) == 2


def test_every_label_follows_the_rule(data: RelevanceSet) -> None:
    fields = {query.query_id: query.fields for query in data.queries}
    for judgment in data.judgments:
        assert judgment.label == label_for(fields[judgment.query_id], data.items[judgment.item_id].attributes)


def test_candidate_lists(data: RelevanceSet) -> None:
    assert len(data.queries) == ARGS[1] * ARGS[2]
    for query in data.queries:
        candidates = data.candidates(query.query_id)
        labels = [label for _, label in candidates]
        assert len(candidates) == 24
        assert len({item_id for item_id, _ in candidates}) == 24
        assert 2 in labels and 0 in labels
        assert labels != sorted(labels, reverse=True)  # shuffled: the target is not always first
        assert len(query.fields) >= 3 and "category" in query.fields


def test_query_text_states_its_fields(data: RelevanceSet) -> None:
    for query in data.queries:
        category = next(c for c in CATEGORIES if c.name == query.fields["category"])
        text = query.text.lower()
        for name, value in query.fields.items():
            if name in ("brand", "model", "part_number"):
                assert str(value).lower() in text
            elif name != "category":
                assert any(form(value).lower() in text for form in category.field(name).forms), (name, text)


def test_hard_flag_means_a_one_field_near_duplicate_of_an_exact_item(data: RelevanceSet) -> None:
    hard_seen = easy_seen = 0
    for query in data.queries:
        candidates = [(data.items[item_id], label) for item_id, label in data.candidates(query.query_id)]
        by_family: dict[tuple[object, ...], list[tuple[Item, int]]] = defaultdict(list)
        for item, label in candidates:
            by_family[family_key(item.attributes)].append((item, label))
        shared = [
            group for group in by_family.values() if len(group) > 1 and any(lab == 2 for _, lab in group)
        ]
        assert len(shared) <= 1  # only the target's family brings near-duplicates of an exact item
        exact = [item for group in shared for item, label in group if label == 2]
        negatives = [item for group in shared for item, label in group if label < 2]
        assert query.hard == (bool(exact) and bool(negatives))
        for negative in negatives:
            assert mismatches(query.fields, negative.attributes) == 1
            stated = set(query.fields)
            assert any(len(spec_difference(e, negative) & stated) == 1 for e in exact)
        hard_seen += query.hard
        easy_seen += not query.hard
    assert hard_seen > 0 and easy_seen > 0


@pytest.mark.parametrize(("fraction", "expected"), [(0.0, False), (1.0, True)])
def test_hard_fraction_extremes(fraction: float, expected: bool) -> None:
    data = generate(2, 12, 1, hard_fraction=fraction)
    assert {query.hard for query in data.queries} == {expected}


# ---- splits -------------------------------------------------------------------------------------------


def test_splits_partition_the_queries_and_never_repeat_constraints(data: RelevanceSet) -> None:
    ids = {name: {q.query_id for q in data.split(name).queries} for name in ("train", "dev", "test")}
    assert not (ids["train"] & ids["dev"] or ids["train"] & ids["test"] or ids["dev"] & ids["test"])
    assert set().union(*ids.values()) == {query.query_id for query in data.queries}
    n = len(data.queries)
    assert (len(ids["dev"]), len(ids["test"])) == (round(n * 0.1), round(n * 0.1))
    constraints = [repr(sorted(query.fields.items())) for query in data.queries]
    assert len(set(constraints)) == len(constraints)
    texts = [" ".join(query.text.lower().split()) for query in data.queries]
    assert len(set(texts)) == len(texts)


# ---- lengths ------------------------------------------------------------------------------------------


def words(item: Item) -> int:
    return len(item.text.split())


def test_rendered_length_spans_short_to_long(data: RelevanceSet) -> None:
    lengths = [words(item) for item in data.items.values()]
    assert min(lengths) >= 60 and max(lengths) <= 1000
    quartiles = statistics.quantiles(lengths, n=4)
    assert quartiles[0] < 400 < 600 < quartiles[2]


def test_length_knob() -> None:
    short = generate(1, 12, 0, length_tokens=(100, 100))
    long = generate(1, 12, 0, length_tokens=(1500, 1500))
    assert max(words(item) for item in short.items.values()) < 100
    assert min(words(item) for item in long.items.values()) > 850


def test_argument_validation() -> None:
    with pytest.raises(ValueError, match="siblings_per_product"):
        generate(0, 6, 1, siblings_per_product=9)
    with pytest.raises(ValueError, match="n_candidates"):
        generate(0, 6, 1, n_candidates=3)
    with pytest.raises(ValueError, match="split_fractions"):
        generate(0, 6, 1, split_fractions=(0.5, 0.2, 0.2))
    with pytest.raises(ValueError, match="length_tokens"):
        generate(0, 6, 1, length_tokens=(800, 100))
