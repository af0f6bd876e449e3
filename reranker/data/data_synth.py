"""Synthetic long-item relevance data whose labels hinge on exact spec fields (DESIGN.md §5).

Why synthetic: the quality risk of gist compression is that it keeps the marketing words and drops
the one field relevance hinges on ("256GB" vs "128GB", "2023" vs "2021", a part number off by a
digit), and that risk grows with item length. Public sets rarely isolate it, so this generator builds
it in on purpose, with labels that follow from a stated rule rather than from annotators.

Catalog (its vocabulary: `synth_categories`). Each *product* belongs to one of six categories (phones,
laptops, headphones, kettles, TVs, tyres) and has typed attributes: category, brand, model, part_number
and the category's spec fields (capacities, sizes, colours, years, ...). Each product has
`siblings_per_product` near-duplicate *siblings* that differ from it in exactly ONE field: either a spec
field (the sibling is then another SKU, so it also gets its own part number: part numbers identify SKUs
and never carry a spec) or only the part number, off by one digit of its body (a regional or packaging
variant with identical specs). A sibling's title and description are the product's, re-rendered with
the changed value, so the texts are near-identical; descriptions also name the values the family's
siblings come in ("Also sold with a different storage (128GB)"), so the wrong value appears in the right
item's text as a distractor.

Part numbers read `BBB-CC12345-D`: brand code, category code, a five-digit body and a check digit
(EAN-style weights 3,1,3,1,3, mod 10), so a one-digit change of the body also changes the check digit.

Descriptions are assembled from templates (marketing prose, a spec table rendered as text, in-the-box,
care, warranty, shipping, regulatory notes, Q&A, customer reviews) until the rendered item reaches a
length drawn uniformly from `length_tokens`, counted as words × `TOKENS_PER_WORD` (1.6: measured with
the SmolLM2 tokenizer on this text; prose alone is nearer 1.3, but digits and part numbers split into
many tokens). A product and its siblings share one description plan (chosen on the product's text), so
they differ only where the changed value is printed. Specs always come first in the rendered text
(title, attribute lines).

Queries and labels. A query targets one product and *states* a set of fields: always the category,
plus three or four of brand, model, part_number and spec fields, written in varied surface forms ("256GB",
"256 gb", "2023 model"). `Query.fields` keeps them. A candidate's graded label is a pure function of
the stated fields and the candidate's attributes (`label_for`), with typed equality per field:

    label 0 (irrelevant) if the candidate's category differs from the query's,
    label 2 (exact)      if every stated field matches,
    label 1 (partial)    if exactly one stated field differs,
    label 0 (irrelevant) if two or more stated fields differ.

So a sibling that differs in a field the query states is a *hard negative* with label 1: a near
miss, below every exact item, above unrelated items. That is the WANDS convention (exact / partial /
irrelevant; ESCI calls it "substitute"), so synthetic and real sets are scored alike; for a binary
objective, treat only label 2 as positive. A sibling that differs in a field the query does not state
is exact (label 2): the query cannot tell them apart, and a ranker should not pretend it can.
Queries that state a part number state brand and model with it and no spec field, so the model's
other SKUs (its siblings) are one-field near misses and every other product is irrelevant.

Candidates. With probability `hard_fraction` a query is *hard*: it states a field set that rules out
at least one sibling (if the product has such a set left). Each query gets `n_candidates` candidates
in shuffled order (the metrics break ties by index): the target; its siblings that the query does not
rule out; for a hard query also the siblings it rules out, its hard negatives (`Query.hard` is set
exactly when they are among the candidates); up to four same-category products of other families
that are exact or partial by the rule; up to six other same-category products; then products of other
categories. Other families of the target's category contribute at most one item each, so hard
negatives come only from the target's family. Every label comes from `label_for`.

Splits are by query (train/dev/test by `split_fractions`): a product may appear under queries of
several splits, but no two queries state the same constraints (category and field values), so no
query is a paraphrase of another and a split cannot leak another's query. A product runs out of fresh
constraint sets after seven queries (fewer when generic sets such as "256GB phone 2023" were already
taken by another product); further queries for it are skipped.

Determinism: every random choice comes from `random.Random` instances seeded with strings derived
from `seed` (per product, per query, for the splits), never the global generator, and no set or hash
order is relied on, so the output is identical across runs and processes. Products are generated
from their own seeds, so a larger `n_products` extends the catalog rather than reshuffling it.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from reranker.data.relevance_data import Item, Judgment, Query, RelevanceSet, Split
from reranker.data.synth_categories import (
    CATEGORIES,
    GENERIC_CARE,
    GENERIC_FAQ,
    GENERIC_INTRO,
    LEGAL,
    REVIEW_BODIES,
    REVIEW_CLOSERS,
    REVIEW_OPENERS,
    SHIPPING,
    SPEC_TABLE_STYLES,
    WARRANTY,
    Category,
    SpecField,
    Value,
)

TOKENS_PER_WORD = 1.6
_PART_WEIGHTS = (3, 1, 3, 1, 3)


# ---- the label rule ----------------------------------------------------------------------------------


def mismatches(stated: Mapping[str, Value], attributes: Mapping[str, object]) -> int:
    """Number of stated fields whose value differs from the item's (a missing attribute differs)."""
    return sum(1 for name, value in stated.items() if name not in attributes or attributes[name] != value)


def label_for(stated: Mapping[str, Value], attributes: Mapping[str, object]) -> int:
    """Graded label of an item for a query stating `stated` (which includes "category"); see module doc."""
    if attributes.get("category") != stated["category"]:
        return 0
    return {0: 2, 1: 1}.get(mismatches(stated, attributes), 0)


def family_key(attributes: Mapping[str, object]) -> tuple[object, object, object]:
    """(category, brand, model): a product and its siblings share it, no two products do."""
    return attributes["category"], attributes["brand"], attributes["model"]


# ---- part numbers --------------------------------------------------------------------------------------


def check_digit(body: str) -> str:
    """EAN-style check digit of a five-digit body: weights 3,1,3,1,3; any one-digit change alters it."""
    total = sum(weight * int(digit) for weight, digit in zip(_PART_WEIGHTS, body, strict=True))
    return str(-total % 10)


def is_valid_part_number(part_number: str) -> bool:
    """True when `part_number` has the `BBB-CC12345-D` shape and a correct check digit."""
    pieces = part_number.split("-")
    if len(pieces) != 3 or len(pieces[1]) != 7 or not pieces[1][2:].isdigit():
        return False
    return pieces[2] == check_digit(pieces[1][2:])


def _part_number(brand: str, code: str, body: str) -> str:
    return f"{brand[:3].upper()}-{code}{body}-{check_digit(body)}"


def _one_digit_off(part_number: str, rng: random.Random) -> str:
    prefix, middle, _ = part_number.split("-")
    body = list(middle[2:])
    position = rng.randrange(len(body))
    body[position] = rng.choice([digit for digit in "0123456789" if digit != body[position]])
    return f"{prefix}-{middle[:2]}{''.join(body)}-{check_digit(''.join(body))}"


Paragraph = tuple[str, list[str]]  # (joiner, templates): sentences joined by " ", table rows by "\n"


def _bake(template: str, rng: random.Random, **ranges: tuple[int, int]) -> str:
    """Fix a template's random numbers (<name> markers) once per plan; {product} fields stay open."""
    for name, (low, high) in ranges.items():
        if f"<{name}>" in template:
            template = template.replace(f"<{name}>", str(rng.randint(low, high)))
    return template


def _intro(category: Category, rng: random.Random, varied: Sequence[str]) -> list[Paragraph]:
    sentences = [*category.intro, *rng.sample(GENERIC_INTRO, 2)]
    for name in varied:
        label = category.field(name).label.lower()
        sentences.append(
            f"Also sold with a different {label} ({{{name}_alt}}); this listing is the {{{name}}} one."
        )
    return [(" ", sentences)]


def _spec_table(category: Category, rng: random.Random) -> list[Paragraph]:
    separator = rng.choice(SPEC_TABLE_STYLES)
    rows = ["Specifications", f"Brand{separator}{{brand}}", f"Model{separator}{{model}}"]
    rows += [f"{spec.label}{separator}{{{spec.name}}}" for spec in category.fields]
    rows.append(f"Part number{separator}{{part_number}}")
    rows += [f"{label}{separator}{make(rng)}" for label, make in category.extra_specs]
    return [("\n", rows)]


def _features(category: Category, rng: random.Random) -> list[Paragraph]:
    sentences = rng.sample(category.features, len(category.features))
    half = len(sentences) // 2
    return [(" ", sentences[:half]), (" ", sentences[half:])]


def _in_box(category: Category, rng: random.Random) -> list[Paragraph]:
    return [(" ", [f"In the box: {', '.join(category.in_box)}."])]


def _care(category: Category, rng: random.Random) -> list[Paragraph]:
    return [(" ", ["Care and safety:", *category.care, *GENERIC_CARE])]


def _warranty(category: Category, rng: random.Random) -> list[Paragraph]:
    ranges = {"w": (1, 5), "d": (14, 60), "r": (5, 15), "p": (5, 10)}
    return [(" ", ["Warranty:", *(_bake(sentence, rng, **ranges) for sentence in WARRANTY)])]


def _shipping(category: Category, rng: random.Random) -> list[Paragraph]:
    ranges = {"s": (1, 3), "t": (4, 7), "u": (14, 60)}
    return [(" ", ["Delivery and returns:", *(_bake(sentence, rng, **ranges) for sentence in SHIPPING)])]


def _legal(category: Category, rng: random.Random) -> list[Paragraph]:
    return [(" ", [_bake(sentence, rng, c=(60, 100)) for sentence in LEGAL])]


def _faq(category: Category, rng: random.Random) -> list[Paragraph]:
    pairs = rng.sample([*category.faq, *GENERIC_FAQ], len(category.faq) + len(GENERIC_FAQ))
    return [("\n", ["Questions and answers", *(f"Q: {question} A: {answer}" for question, answer in pairs)])]


def _review(rng: random.Random) -> str:
    parts = (rng.choice(REVIEW_OPENERS), rng.choice(REVIEW_BODIES), rng.choice(REVIEW_CLOSERS))
    stars, months = rng.randint(3, 5), rng.randint(1, 30)
    return f"{stars} out of 5 stars. {' '.join(parts)} (Verified purchase, {months} months ago.)"


_MIDDLE_SECTIONS = (_features, _in_box, _care, _warranty, _shipping, _legal, _faq)


def _paragraphs(category: Category, rng: random.Random, varied: Sequence[str]) -> Iterator[Paragraph]:
    """Description paragraphs in reading order: intro, spec table, shuffled sections, then endless reviews."""
    yield from _intro(category, rng, varied)
    yield from _spec_table(category, rng)
    for section in rng.sample(_MIDDLE_SECTIONS, len(_MIDDLE_SECTIONS)):
        yield from section(category, rng)
    while True:
        yield (" ", ["Customer reviews:", *(_review(rng) for _ in range(3))])


def _plan(
    category: Category, rng: random.Random, varied: Sequence[str], values: Mapping[str, str], budget: float
) -> list[Paragraph]:
    """Paragraph templates whose text (with `values`) first reaches `budget` words; one sentence at least."""
    plan: list[Paragraph] = []
    words = 0
    for joiner, templates in _paragraphs(category, rng, varied):
        kept = []
        for template in templates:
            if words >= budget and (plan or kept):
                break
            kept.append(template)
            words += len(template.format_map(values).split())
        if kept:
            plan.append((joiner, kept))
        if words >= budget:
            return plan
    raise AssertionError("unreachable: _paragraphs never ends")


def _describe(plan: Sequence[Paragraph], values: Mapping[str, str]) -> str:
    return "\n\n".join(joiner.join(t.format_map(values) for t in templates) for joiner, templates in plan)


# ---- products and their siblings -------------------------------------------------------------------


@dataclass(frozen=True)
class _Family:
    """A product and its siblings (each differing from the product in one field)."""

    category: Category
    members: tuple[Item, ...]  # the product first, then its siblings

    @property
    def product(self) -> Item:
        return self.members[0]

    @property
    def siblings(self) -> tuple[Item, ...]:
        return self.members[1:]


@dataclass
class _Registry:
    """Catalog-wide uniqueness: (category, brand, model) names a family, a part number one SKU."""

    models: set[tuple[str, str, str]]
    parts: set[str]

    def claim_part(self, part_number: str) -> bool:
        if part_number in self.parts:
            return False
        self.parts.add(part_number)
        return True


def _rng(seed: int, *path: object) -> random.Random:
    """An independent generator per purpose, seeded by a string (str seeds hash identically everywhere)."""
    return random.Random("/".join(map(str, ("gistrank-synth", seed, *path))))


def _item_id(category: Category, seed: int, family: int, variant: int) -> str:
    digest = hashlib.sha256(f"{seed}/{family}/{variant}".encode()).hexdigest()[:10]
    return f"{category.name}-{digest}"


def _new_model(category: Category, rng: random.Random, registry: _Registry) -> tuple[str, str, str]:
    while True:
        brand, series = rng.choice(category.brands), rng.choice(category.series)
        model = f"{series} {rng.randint(2, 99)}{rng.choice(category.suffixes)}"
        if (category.name, brand, model) not in registry.models:
            registry.models.add((category.name, brand, model))
            return brand, series, model


def _new_part(category: Category, brand: str, rng: random.Random, registry: _Registry) -> str:
    while True:
        part_number = _part_number(brand, category.code, f"{rng.randrange(100000):05d}")
        if registry.claim_part(part_number):
            return part_number


def _sibling(
    category: Category, product: Mapping[str, Value], changed: str, rng: random.Random, registry: _Registry
) -> dict[str, Value]:
    """The product with `changed` set to another value; a spec change is another SKU (new part number)."""
    sibling = dict(product)
    if changed == "part_number":
        while not registry.claim_part(sibling["part_number"]):
            sibling["part_number"] = _one_digit_off(str(product["part_number"]), rng)
        return sibling
    spec = category.field(changed)
    sibling[changed] = rng.choice([value for value in spec.values if value != product[changed]])
    sibling["part_number"] = _new_part(category, str(product["brand"]), rng, registry)
    return sibling


def _display_values(
    category: Category, attributes: Mapping[str, Value], series: str, family: Sequence[Mapping[str, Value]]
) -> dict[str, str]:
    """Template values of one member; `<field>_alt` lists the family's other values of each spec field."""
    values = {
        "brand": str(attributes["brand"]),
        "model": str(attributes["model"]),
        "name": f"{attributes['brand']} {attributes['model']}",
        "noun": category.nouns[0],
        "series": series,
        "part_number": str(attributes["part_number"]),
    }
    for spec in category.fields:
        values[spec.name] = spec.show(attributes[spec.name])
        others = sorted({spec.show(member[spec.name]) for member in family} - {values[spec.name]})
        values[f"{spec.name}_alt"] = " or ".join(others)
    return values


def _make_family(
    seed: int, index: int, siblings: int, length_tokens: tuple[int, int], registry: _Registry
) -> _Family:
    rng = _rng(seed, "family", index)
    category = CATEGORIES[index % len(CATEGORIES)]
    brand, series, model = _new_model(category, rng, registry)
    product: dict[str, Value] = {"category": category.name, "brand": brand, "model": model}
    product |= {spec.name: rng.choice(spec.values) for spec in category.fields}
    product["part_number"] = _new_part(category, brand, rng, registry)
    changes = rng.sample([*category.variant_fields, "part_number"], siblings)
    variants = [product, *(_sibling(category, product, field, rng, registry) for field in changes)]
    values = [_display_values(category, attributes, series, variants) for attributes in variants]
    titles = [category.title.format_map(value) for value in values]
    header_words = len(" ".join([titles[0], *(f"{key} {product[key]}" for key in product)]).split())
    budget = rng.uniform(*length_tokens) / TOKENS_PER_WORD - header_words
    varied = [field for field in changes if field != "part_number"]
    plan = _plan(category, rng, varied, values[0], budget)
    members = tuple(
        Item(
            item_id=_item_id(category, seed, index, variant),
            title=titles[variant],
            attributes=variants[variant],
            description=_describe(plan, values[variant]),
        )
        for variant in range(len(variants))
    )
    return _Family(category, members)


# ---- queries and candidates ------------------------------------------------------------------------

_PART_QUERY = ("brand", "model", "part_number")
_DRAW = 48  # items drawn at random from a pool to find a few from families not yet among the candidates
_HEAD_FIELDS = ("brand", "model")


@dataclass(frozen=True)
class _Catalog:
    """The catalog indexed for candidate drawing: by category, and by (category, field, value)."""

    items: dict[str, Item]
    same: dict[str, list[Item]]
    other: dict[str, list[Item]]
    by_value: dict[tuple[str, str, Value], list[str]]
    position: dict[str, int]

    @classmethod
    def of(cls, families: Sequence[_Family]) -> _Catalog:
        items = {item.item_id: item for family in families for item in family.members}
        same: dict[str, list[Item]] = {category.name: [] for category in CATEGORIES}
        other: dict[str, list[Item]] = {category.name: [] for category in CATEGORIES}
        by_value: dict[tuple[str, str, Value], list[str]] = {}
        for item in items.values():
            category = str(item.attributes["category"])
            for name in same:
                (same if name == category else other)[name].append(item)
            for field, value in item.attributes.items():
                by_value.setdefault((category, field, value), []).append(item.item_id)
        return cls(items, same, other, by_value, {item_id: rank for rank, item_id in enumerate(items)})

    def relevant(self, stated: Mapping[str, Value]) -> list[Item]:
        """Items labelled exact or partial for `stated`, in catalog order.

        Such an item matches all stated fields but at most one. With two or more stated fields besides
        the category it is therefore listed under at least n − 1 of the n stated values: counting
        bucket hits finds it without scanning the whole category for every query.
        """
        category = str(stated["category"])
        specs = [(name, value) for name, value in stated.items() if name != "category"]
        if len(specs) < 2:
            pool = self.same[category]
        else:
            keys = [(category, name, value) for name, value in specs]
            hits = Counter(item_id for key in keys for item_id in self.by_value.get(key, ()))
            pool = [self.items[item_id] for item_id, count in hits.items() if count >= len(specs) - 1]
            pool.sort(key=lambda item: self.position[item.item_id])
        return [item for item in pool if label_for(stated, item.attributes) > 0]


def _stated(category: Category, product: Mapping[str, Value], names: Sequence[str]) -> dict[str, Value]:
    return {"category": category.name, **{name: product[name] for name in names}}


def _rules_out_a_sibling(family: _Family, names: Sequence[str]) -> bool:
    stated = _stated(family.category, family.product.attributes, names)
    return any(label_for(stated, sibling.attributes) < 2 for sibling in family.siblings)


def _query_text(
    category: Category, product: Mapping[str, Value], names: Sequence[str], rng: random.Random
) -> str:
    """Brand and model first, then the category noun and the spec phrases in random order and forms."""
    head = [str(product[name]) for name in _HEAD_FIELDS if name in names]
    specs = [_surface(category, name, product[name], rng) for name in names if name not in _HEAD_FIELDS]
    rng.shuffle(specs)
    noun = rng.choice(category.nouns)
    words = [*head, noun, *specs] if rng.random() < 0.5 else [*head, *specs, noun]
    text = " ".join(words)
    return text.lower() if rng.random() < 0.3 else text


def _surface(category: Category, name: str, value: Value, rng: random.Random) -> str:
    if name == "part_number":
        return str(value)
    return rng.choice(category.field(name).forms)(value)


def _constraint_key(stated: Mapping[str, Value]) -> str:
    """Canonical form of a query's stated constraints: two queries with the same key are paraphrases."""
    return repr(sorted((name, type(value).__name__, value) for name, value in stated.items()))


@dataclass(frozen=True)
class _QueryDraft:
    text: str
    stated: dict[str, Value]
    hard: bool


def _draft_query(
    family: _Family, rng: random.Random, hard_fraction: float, taken: set[str]
) -> _QueryDraft | None:
    """A query for the family's product with constraints no earlier query stated; None when none are left.

    A query meant to be hard picks among the field sets that rule out a sibling; if none is left unused
    it becomes an easy query, so `hard_fraction` is an upper bound on the share of hard queries.
    """
    product = family.product.attributes
    fresh = [
        names
        for names in (*family.category.query_fields, _PART_QUERY)
        if _constraint_key(_stated(family.category, product, names)) not in taken
    ]
    touching = [names for names in fresh if _rules_out_a_sibling(family, names)]
    hard = rng.random() < hard_fraction and bool(touching)
    if not fresh:
        return None
    names = rng.choice(touching if hard else fresh)
    stated = _stated(family.category, product, names)
    taken.add(_constraint_key(stated))
    return _QueryDraft(_query_text(family.category, product, names, rng), stated, hard)


def _candidates(
    draft: _QueryDraft, family: _Family, catalog: _Catalog, rng: random.Random, size: int
) -> list[tuple[str, int]]:
    """Target, siblings (ruled-out ones only for hard queries), near misses, same category, then others.

    Other families of the category contribute at most one item each, so only the target's family can
    put a near-duplicate next to an exact item, and `Query.hard` says exactly whether one is there.
    """
    stated, category = draft.stated, family.category.name
    chosen = [family.product]
    chosen += [item for item in family.siblings if draft.hard or label_for(stated, item.attributes) == 2]
    near = catalog.relevant(stated)
    chosen += _new_families(rng.sample(near, min(len(near), _DRAW)), chosen, 4)
    same = catalog.same[category]
    chosen += _new_families(rng.sample(same, min(len(same), _DRAW)), chosen, 6)
    others = catalog.other[category]
    taken = {item.item_id for item in chosen}
    extra = rng.sample(others, min(len(others), size + len(taken)))
    chosen += [item for item in extra if item.item_id not in taken][: size - len(chosen)]
    chosen = chosen[:size]
    rng.shuffle(chosen)
    return [(item.item_id, label_for(stated, item.attributes)) for item in chosen]


def _new_families(pool: Sequence[Item], chosen: Sequence[Item], count: int) -> list[Item]:
    """Up to `count` items of `pool`, in order, one per family not yet represented in `chosen`."""
    seen = {family_key(item.attributes) for item in chosen}
    picked = []
    for item in pool:
        key = family_key(item.attributes)
        if len(picked) == count:
            break
        if key not in seen:
            seen.add(key)
            picked.append(item)
    return picked


def _assign_splits(n_queries: int, fractions: tuple[float, float, float], rng: random.Random) -> list[Split]:
    """Split per query index: a seeded shuffle; test and dev take their rounded shares, train the rest."""
    order = rng.sample(range(n_queries), n_queries)
    n_test, n_dev = round(n_queries * fractions[2]), round(n_queries * fractions[1])
    splits: list[Split] = ["train"] * n_queries
    for rank, index in enumerate(order):
        splits[index] = "test" if rank < n_test else "dev" if rank < n_test + n_dev else "train"
    return splits


# ---- the generator ---------------------------------------------------------------------------------


def generate(
    seed: int,
    n_products: int,
    queries_per_product: int,
    *,
    siblings_per_product: int = 3,
    n_candidates: int = 24,
    hard_fraction: float = 0.6,
    length_tokens: tuple[int, int] = (100, 1500),
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
) -> RelevanceSet:
    """A deterministic synthetic relevance set; the module docstring states the catalog and label rules.

    The catalog has `n_products × (1 + siblings_per_product)` items; there are up to
    `n_products × queries_per_product` queries (fewer when a product runs out of fresh constraints),
    each with `n_candidates` judged candidates (fewer when the catalog is smaller).
    """
    _check_arguments(n_products, queries_per_product, siblings_per_product, n_candidates, length_tokens)
    _check_fractions(hard_fraction, split_fractions)
    registry = _Registry(set(), set())
    families = [
        _make_family(seed, i, siblings_per_product, length_tokens, registry) for i in range(n_products)
    ]
    catalog = _Catalog.of(families)
    drafts, taken = [], set()
    for index, family in enumerate(families):
        for number in range(queries_per_product):
            rng = _rng(seed, "query", index, number)
            draft = _draft_query(family, rng, hard_fraction, taken)
            if draft is not None:
                drafts.append((draft, _candidates(draft, family, catalog, rng, n_candidates)))
    splits = _assign_splits(len(drafts), split_fractions, _rng(seed, "splits"))
    queries, judgments = [], []
    for number, ((draft, candidates), split) in enumerate(zip(drafts, splits, strict=True)):
        query_id = f"q{number:06d}"
        queries.append(
            Query(query_id=query_id, text=draft.text, split=split, hard=draft.hard, fields=draft.stated)
        )
        judgments += [Judgment(query_id=query_id, item_id=item, label=label) for item, label in candidates]
    items = {item.item_id: item for family in families for item in family.members}
    return RelevanceSet(items=items, queries=queries, judgments=judgments)


def _check_arguments(
    n_products: int,
    queries_per_product: int,
    siblings: int,
    n_candidates: int,
    length_tokens: tuple[int, int],
) -> None:
    if n_products < 1 or queries_per_product < 0:
        raise ValueError("n_products must be >= 1 and queries_per_product >= 0")
    most = min(len(category.variant_fields) for category in CATEGORIES) + 1
    if not 0 <= siblings <= most:
        raise ValueError(f"siblings_per_product must be in 0..{most} (one per field a sibling can change)")
    if n_candidates <= siblings:
        raise ValueError(
            "n_candidates must exceed siblings_per_product: the target and its siblings come first"
        )
    if not 0 < length_tokens[0] <= length_tokens[1]:
        raise ValueError(f"length_tokens must be (low, high) with 0 < low <= high, got {length_tokens}")


def _check_fractions(hard_fraction: float, split_fractions: tuple[float, float, float]) -> None:
    if not 0.0 <= hard_fraction <= 1.0:
        raise ValueError(f"hard_fraction must be in [0, 1], got {hard_fraction}")
    if min(split_fractions) < 0 or not math.isclose(sum(split_fractions), 1.0):
        raise ValueError(
            f"split_fractions (train, dev, test) must be >= 0 and sum to 1, got {split_fractions}"
        )


__all__ = [
    "CATEGORIES",
    "TOKENS_PER_WORD",
    "Category",
    "SpecField",
    "check_digit",
    "family_key",
    "generate",
    "is_valid_part_number",
    "label_for",
    "mismatches",
]
