"""Synthetic long-item relevance data whose labels hinge on exact spec fields (DESIGN.md §5).

Why synthetic: the quality risk of gist compression is that it keeps the marketing words and drops
the one field relevance hinges on ("256GB" vs "128GB", "2023" vs "2021", a part number off by a
digit), and that risk grows with item length. Public sets rarely isolate it, so this generator builds
it in on purpose, with labels that follow from a stated rule rather than from annotators.

Catalog. Each *product* belongs to one of six categories (phones, laptops, headphones, kettles, TVs,
tyres) and has typed attributes: category, brand, model, part_number and the category's spec fields
(capacities, sizes, colours, years, ...). Each product has `siblings_per_product` near-duplicate
*siblings* that differ from it in exactly ONE field: either a spec field (the sibling is then another
SKU, so it also gets its own part number: part numbers identify SKUs and never carry a spec) or only the
part number, off by one digit of its body (a regional or packaging variant with identical specs). A
sibling's title and description are the product's, re-rendered with the changed value, so the texts are
near-identical; descriptions also name the values the family's siblings come in ("Also sold with a
different storage (128GB)"), so the wrong value appears in the right item's text as a distractor.

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from reranker.data.relevance_data import Item, Judgment, Query, RelevanceSet, Split

TOKENS_PER_WORD = 1.6
Value = str | int | float | bool
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


# ---- spec fields and categories --------------------------------------------------------------------


@dataclass(frozen=True)
class SpecField:
    """A typed spec field: its value pool, its display in titles/prose, and its surface forms in queries."""

    name: str
    label: str
    values: tuple[Value, ...]
    show: Callable[[Value], str] = str
    forms: tuple[Callable[[Value], str], ...] = (str, lambda value: str(value).lower())


def _num(value: Value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _gb_forms() -> tuple[Callable[[Value], str], ...]:
    return (str, lambda v: str(v).lower(), lambda v: str(v).replace("GB", " GB").replace("TB", " TB"))


def _unit(unit: str, *more: str) -> tuple[Callable[[Value], str], ...]:
    units = (unit, *more)
    return tuple((lambda v, u=u: f"{_num(v)}{u}") for u in units)


YEAR = SpecField(
    "year", "Model year", (2019, 2020, 2021, 2022, 2023, 2024), forms=(str, lambda v: f"{v} model")
)


@dataclass(frozen=True)
class Category:
    """One product category: its spec fields, which of them siblings vary, query shapes and prose."""

    name: str
    code: str
    nouns: tuple[str, ...]
    brands: tuple[str, ...]
    series: tuple[str, ...]
    suffixes: tuple[str, ...]
    fields: tuple[SpecField, ...]
    variant_fields: tuple[str, ...]
    query_fields: tuple[tuple[str, ...], ...]
    title: str
    intro: tuple[str, ...]
    features: tuple[str, ...]
    in_box: tuple[str, ...]
    care: tuple[str, ...]
    faq: tuple[tuple[str, str], ...]
    extra_specs: tuple[tuple[str, Callable[[random.Random], str]], ...]

    def field(self, name: str) -> SpecField:
        return next(spec for spec in self.fields if spec.name == name)


PHONES = Category(
    name="phones",
    code="PH",
    nouns=("phone", "smartphone", "mobile phone"),
    brands=("Acme", "Nova", "Zentra", "Orbit", "Kestrel"),
    series=("UltraPhone", "Pulse", "Aero", "Vista", "Edge"),
    suffixes=("", " Pro", " Lite", " Max", " Plus"),
    fields=(
        SpecField("storage", "Storage", ("64GB", "128GB", "256GB", "512GB", "1TB"), forms=_gb_forms()),
        SpecField("ram", "Memory", ("4GB", "6GB", "8GB", "12GB"), forms=(lambda v: f"{v} RAM",)),
        SpecField(
            "color", "Colour", ("Black", "White", "Titanium Blue", "Sage Green", "Coral Red", "Graphite")
        ),
        SpecField("screen_in", "Screen size", (5.8, 6.1, 6.4, 6.7), show=lambda v: f"{_num(v)}-inch"),
        YEAR,
    ),
    variant_fields=("storage", "ram", "color", "year"),
    query_fields=(
        ("brand", "model", "storage"),
        ("brand", "model", "storage", "color"),
        ("brand", "storage", "year"),
        ("storage", "color", "year"),
        ("brand", "model", "year"),
        ("brand", "model", "ram"),
    ),
    title="{brand} {model} {storage} {color} ({year})",
    intro=(
        "The {name} is the {year} edition of the {series} line, for people who want a {noun} that keeps up.",
        "This listing is the {storage} model in {color}, with {ram} of memory.",
        "Its {screen_in} OLED display is bright enough for maps and photos in direct sun.",
    ),
    features=(
        "The {storage} of storage holds thousands of photos and hours of 4K video before you need the cloud.",
        "With {ram} of RAM, switching between camera, maps and messaging stays smooth all day.",
        "The {color} finish is applied over an aluminium frame that resists fingerprints.",
        "A 50 MP main camera pairs with a 12 MP ultra-wide lens and a 10 MP selfie camera.",
        "Night mode stacks several exposures so low-light shots stay sharp and natural.",
        "The battery is rated for a full day of mixed use and charges to 50 percent in about 30 minutes.",
        "Dual SIM with eSIM support makes travel and separate work numbers simple.",
        "The {screen_in} panel refreshes at up to 120 Hz for smooth scrolling.",
        "Stereo speakers tuned for voice make calls on speaker clear even in a busy room.",
        "An in-display fingerprint reader and face unlock keep the {noun} secure.",
        "Software updates for the {year} {series} models are promised for five years.",
        "Wi-Fi 6, Bluetooth 5.3 and NFC for contactless payments are built in.",
        "The frame is rated IP68 against dust and water immersion.",
    ),
    in_box=("the {name}", "a USB-C to USB-C cable", "a SIM ejector tool", "quick start guide"),
    care=(
        "Use a soft, lint-free cloth to clean the screen; avoid household cleaners and abrasive pads.",
        "Keep the {noun} away from extreme heat, such as a car dashboard in summer.",
    ),
    faq=(
        (
            "Does the {name} have a memory card slot?",
            "No, storage is fixed at {storage}, so choose the size.",
        ),
        ("Which year is this model?", "This is the {year} model of the {series} line."),
        ("Is a charger included?", "Only a USB-C cable is included; any USB-C PD charger works."),
    ),
    extra_specs=(
        ("Weight", lambda rng: f"{rng.randrange(160, 230)} g"),
        ("Battery", lambda rng: f"{rng.randrange(38, 55) * 100} mAh"),
        ("Main camera", lambda rng: f"{rng.choice((48, 50, 64, 108))} MP"),
    ),
)

LAPTOPS = Category(
    name="laptops",
    code="LT",
    nouns=("laptop", "notebook"),
    brands=("Corvid", "Flint", "Lumen", "Stratos", "Halcyon"),
    series=("Book", "Air", "Studio", "Swift", "Forge"),
    suffixes=("", " Pro", " Plus", " X"),
    fields=(
        SpecField(
            "cpu",
            "Processor",
            ("Intel Core i5", "Intel Core i7", "Intel Core Ultra 7", "AMD Ryzen 5", "AMD Ryzen 7"),
        ),
        SpecField(
            "ram",
            "Memory",
            ("8GB", "16GB", "32GB", "64GB"),
            forms=(lambda v: f"{v} RAM", lambda v: f"{v} ram"),
        ),
        SpecField("storage", "Storage", ("256GB SSD", "512GB SSD", "1TB SSD", "2TB SSD"), forms=_gb_forms()),
        SpecField(
            "screen_in",
            "Screen size",
            (13.3, 14.0, 15.6, 16.0),
            show=lambda v: f"{_num(v)}-inch",
            forms=_unit(" inch", '"', "in"),
        ),
        SpecField("color", "Colour", ("Silver", "Space Grey", "Black", "Midnight Blue")),
        YEAR,
    ),
    variant_fields=("cpu", "ram", "storage", "screen_in", "year"),
    query_fields=(
        ("brand", "model", "ram"),
        ("brand", "model", "storage"),
        ("brand", "ram", "storage"),
        ("cpu", "ram", "screen_in"),
        ("brand", "model", "year"),
        ("brand", "model", "cpu"),
    ),
    title="{brand} {model} {screen_in} Laptop, {cpu}, {ram} RAM, {storage} ({year})",
    intro=(
        "The {name} is a {screen_in} {noun} from {brand}'s {year} range.",
        "This configuration pairs an {cpu} processor with {ram} of memory and a {storage}.",
        "It is light enough for a daily commute and has the ports to replace a desktop at home.",
    ),
    features=(
        "The {cpu} handles spreadsheets, photo edits and dozens of browser tabs without slowing down.",
        "{ram} of memory leaves headroom for virtual machines and large exports.",
        "The {storage} boots the system in seconds and loads large projects quickly.",
        "The {screen_in} display covers 100 percent of sRGB and reaches 400 nits.",
        "A backlit keyboard with 1.5 mm key travel makes long typing sessions comfortable.",
        "Two USB-C ports with Thunderbolt support drive an external monitor and charge the {noun}.",
        "The precision glass touchpad supports multi-finger gestures.",
        "A 1080p webcam with a privacy shutter and dual microphones keeps video calls clear.",
        "Battery life is rated at up to 14 hours of video playback.",
        "The {color} aluminium chassis is machined from a single block for rigidity.",
        "Wi-Fi 6E and Bluetooth 5.3 keep connections fast and stable.",
        "Dual fans stay quiet under light load and ramp up only for sustained work.",
    ),
    in_box=("the {name}", "a 65 W USB-C power adapter", "a USB-C cable", "setup guide"),
    care=(
        "Shut the lid gently and never carry the {noun} by the screen.",
        "Clean the keyboard with compressed air; do not spray liquid onto the keys.",
    ),
    faq=(
        ("Can the memory be upgraded later?", "No, the {ram} is soldered, so pick the amount you need now."),
        ("Which processor does this configuration have?", "It has the {cpu}."),
        (
            "Does it come with an operating system?",
            "Yes, it ships ready to use with the operating system installed.",
        ),
    ),
    extra_specs=(
        ("Weight", lambda rng: f"{rng.randrange(110, 210) / 100:.2f} kg"),
        ("Battery", lambda rng: f"{rng.randrange(50, 100)} Wh"),
        ("Ports", lambda rng: f"{rng.randrange(2, 4)} x USB-C, 1 x USB-A, HDMI 2.1"),
    ),
)

HEADPHONES = Category(
    name="headphones",
    code="HP",
    nouns=("headphones", "wireless headphones", "earphones"),
    brands=("Sonora", "Fieldtone", "Arcwave", "Tempo", "Quill"),
    series=("QC", "Buds", "Studio", "Wave", "Aria"),
    suffixes=("", " II", " Pro", " Sport"),
    fields=(
        SpecField(
            "type", "Type", ("over-ear", "on-ear", "in-ear"), forms=(str, lambda v: str(v).replace("-", " "))
        ),
        SpecField(
            "anc",
            "Noise cancelling",
            (True, False),
            show=lambda v: "active noise cancelling" if v else "passive noise isolation",
        ),
        SpecField(
            "battery_h",
            "Battery life",
            (20, 24, 30, 40, 60),
            show=lambda v: f"{v} hours",
            forms=(lambda v: f"{v}h battery", lambda v: f"{v} hour battery"),
        ),
        SpecField("bluetooth", "Bluetooth", ("Bluetooth 5.0", "Bluetooth 5.2", "Bluetooth 5.3")),
        SpecField("color", "Colour", ("Black", "White", "Midnight Blue", "Sand", "Rose")),
        YEAR,
    ),
    variant_fields=("battery_h", "bluetooth", "color", "year"),
    query_fields=(
        ("brand", "model", "color"),
        ("brand", "model", "year"),
        ("brand", "type", "battery_h"),
        ("brand", "type", "color"),
        ("brand", "model", "bluetooth"),
        ("type", "battery_h", "year"),
    ),
    title="{brand} {model} {type} Wireless Headphones, {color} ({year})",
    intro=(
        "The {name} are {type} {noun} from {brand}'s {year} line-up, finished in {color}.",
        "They offer {anc} and up to {battery_h} of playback on a charge.",
        "Pairing is instant over {bluetooth}, and multipoint keeps a laptop and a phone connected.",
    ),
    features=(
        "Custom 40 mm drivers deliver deep bass without muddying vocals.",
        "The {anc} keeps engine hum and office chatter in the background.",
        "A {battery_h} battery covers a long-haul flight, and ten minutes of charging adds three hours.",
        "{bluetooth} with AAC and LDAC codecs keeps audio in sync with video.",
        "Memory-foam cushions and a light headband keep the {noun} comfortable for hours.",
        "Touch controls handle playback, calls and volume without reaching for the phone.",
        "Six beamforming microphones isolate your voice on calls, even outdoors.",
        "An app lets you tune the equaliser and update the firmware.",
        "The {color} finish is matched with a fabric carry case.",
        "Wear detection pauses music when you take the {noun} off.",
        "A transparency mode lets in announcements without removing the {noun}.",
    ),
    in_box=("the {name}", "a carry case", "a USB-C charging cable", "a 3.5 mm audio cable"),
    care=(
        "Wipe the ear cushions with a slightly damp cloth and let them dry fully before storing.",
        "Store the {noun} in the case to protect the hinges and cushions.",
    ),
    faq=(
        ("How long does the battery last?", "Up to {battery_h} with noise cancelling on."),
        ("Which Bluetooth version is used?", "They use {bluetooth}."),
        ("Can I use them wired?", "Yes, with the included 3.5 mm cable, also when the battery is flat."),
    ),
    extra_specs=(
        ("Weight", lambda rng: f"{rng.randrange(5, 32) * 10} g"),
        ("Driver", lambda rng: f"{rng.choice((10, 11, 30, 40, 45))} mm"),
        ("Charging time", lambda rng: f"{rng.randrange(1, 4)} hours"),
    ),
)

KETTLES = Category(
    name="kettles",
    code="KT",
    nouns=("kettle", "electric kettle"),
    brands=("BrewMaster", "Hearth", "Copperline", "Kelda", "Morrow"),
    series=("Classic", "Vario", "Dome", "Pour", "Lumi"),
    suffixes=("", " Plus", " Digital", " Mini"),
    fields=(
        SpecField(
            "capacity_l",
            "Capacity",
            (1.0, 1.2, 1.5, 1.7, 1.8),
            show=lambda v: f"{_num(v)} L",
            forms=_unit("L", " litre", " liter"),
        ),
        SpecField(
            "power_w", "Power", (1800, 2200, 2400, 3000), show=lambda v: f"{v} W", forms=_unit("W", " watt")
        ),
        SpecField(
            "material", "Material", ("stainless steel", "borosilicate glass", "brushed aluminium", "plastic")
        ),
        SpecField("color", "Colour", ("Black", "Cream", "Red", "Silver", "Sage Green")),
        SpecField(
            "plug", "Plug", ("UK", "EU", "US"), show=lambda v: f"{v} plug", forms=(lambda v: f"{v} plug",)
        ),
        YEAR,
    ),
    variant_fields=("capacity_l", "power_w", "color", "plug"),
    query_fields=(
        ("brand", "model", "capacity_l"),
        ("capacity_l", "material", "color"),
        ("brand", "capacity_l", "power_w"),
        ("brand", "model", "plug"),
        ("material", "capacity_l", "plug"),
        ("brand", "model", "color"),
    ),
    title="{brand} {model} {capacity_l} Electric Kettle, {power_w}, {material}, {color}",
    intro=(
        "The {name} is a {capacity_l} {noun} in {material}, finished in {color}.",
        "Its {power_w} element brings a full jug to the boil in a few minutes.",
        "This version comes with a {plug} and was introduced in {year}.",
    ),
    features=(
        "The {capacity_l} capacity fills six to seven mugs in one boil.",
        "A {power_w} concealed element heats quickly and is easy to wipe clean.",
        "The {material} body keeps water tasting clean, with no plastic taste.",
        "Automatic shut-off and boil-dry protection switch the {noun} off safely.",
        "A removable, washable limescale filter keeps flakes out of your cup.",
        "The 360-degree base lets you lift and replace the {noun} from any angle.",
        "A wide lid opens at the touch of a button for easy filling and descaling.",
        "The illuminated water window shows the level from across the kitchen.",
        "A soft-grip handle stays cool while the water boils.",
        "The {color} finish is designed to match the rest of the {brand} range.",
        "Cord storage in the base keeps the worktop tidy.",
    ),
    in_box=("the {name}", "the power base with {plug}", "a limescale filter", "instructions"),
    care=(
        "Descale the {noun} every four weeks in hard-water areas with a citric acid solution.",
        "Never immerse the {noun} or its base in water; wipe the outside with a damp cloth.",
    ),
    faq=(
        ("How much water does it hold?", "It holds {capacity_l}, minimum fill is 0.5 L."),
        ("What power does it draw?", "It is rated at {power_w}."),
        ("Which plug does it have?", "This version has a {plug}; other plugs are sold as separate SKUs."),
    ),
    extra_specs=(
        ("Weight", lambda rng: f"{rng.randrange(8, 16) / 10:.1f} kg"),
        ("Cord length", lambda rng: f"{rng.randrange(70, 110)} cm"),
        ("Boil time (1 L)", lambda rng: f"{rng.randrange(150, 260)} s"),
    ),
)

TVS = Category(
    name="tvs",
    code="TV",
    nouns=("TV", "smart TV", "television"),
    brands=("Lumen", "Vireo", "Sentry", "Polaris", "Kaito"),
    series=("Vision", "Cinema", "Frame", "Aurora", "Prism"),
    suffixes=("", " Pro", " Plus", " Ultra"),
    fields=(
        SpecField(
            "screen_in",
            "Screen size",
            (43, 50, 55, 65, 75, 85),
            show=lambda v: f'{v}"',
            forms=_unit(" inch", '"', "in"),
        ),
        SpecField("resolution", "Resolution", ("4K", "8K", "Full HD")),
        SpecField("panel", "Panel", ("OLED", "QLED", "LED", "Mini-LED")),
        SpecField(
            "refresh_hz",
            "Refresh rate",
            (60, 100, 120, 144),
            show=lambda v: f"{v} Hz",
            forms=_unit("Hz", " Hz"),
        ),
        SpecField("hdmi_ports", "HDMI ports", (3, 4), forms=(lambda v: f"{v} HDMI",)),
        YEAR,
    ),
    variant_fields=("screen_in", "panel", "refresh_hz", "year"),
    query_fields=(
        ("brand", "model", "screen_in"),
        ("screen_in", "panel", "year"),
        ("brand", "screen_in", "resolution"),
        ("brand", "model", "year"),
        ("panel", "refresh_hz", "screen_in"),
        ("brand", "model", "panel"),
    ),
    title="{brand} {model} {screen_in} {resolution} {panel} Smart TV, {refresh_hz} ({year})",
    intro=(
        "The {name} is a {screen_in} {resolution} {panel} {noun} from {brand}'s {year} range.",
        "A {refresh_hz} panel keeps sport and games fluid.",
        "It has {hdmi_ports} HDMI inputs and a built-in streaming platform.",
    ),
    features=(
        "The {panel} panel delivers deep blacks and precise highlights in dark rooms.",
        "The {screen_in} screen suits a living room viewed from two to three metres.",
        "{resolution} upscaling sharpens broadcast and streamed content.",
        "At {refresh_hz}, fast motion stays clear and variable refresh rate removes tearing in games.",
        "Dolby Vision, HDR10 and HLG are supported.",
        "A 40 W speaker system with Dolby Atmos fills the room without a soundbar.",
        "Voice control and a backlit remote make finding shows quick.",
        "A slim bezel and a central stand fit narrow media units.",
        "The {year} processor adapts picture settings to the content and the room's light.",
        "eARC passes lossless audio to an external sound system.",
        "Game mode cuts input lag to under 10 ms.",
    ),
    in_box=("the {name}", "a stand", "a voice remote with batteries", "a power cable"),
    care=(
        "Dust the screen with a dry microfibre cloth; never spray cleaner directly onto the panel.",
        "Leave 10 cm of space around the {noun} for ventilation.",
    ),
    faq=(
        ("What size is the screen?", "The screen is {screen_in} measured diagonally."),
        ("Is this the {year} model?", "Yes, this is the {year} model."),
        ("Can it be wall mounted?", "Yes, it takes a standard VESA mount, sold separately."),
    ),
    extra_specs=(
        ("Weight without stand", lambda rng: f"{rng.randrange(9, 40)} kg"),
        ("VESA", lambda rng: rng.choice(("200x200", "300x300", "400x300"))),
        ("Power consumption", lambda rng: f"{rng.randrange(70, 220)} W"),
    ),
)

TYRES = Category(
    name="tyres",
    code="TY",
    nouns=("tyre", "tyres", "tire"),
    brands=("Roadline", "Grippa", "Tervo", "Mistral", "Caldera"),
    series=("Sport", "Eco", "Terra", "Alpine", "Touring"),
    suffixes=("", " Plus", " Evo", " HP"),
    fields=(
        SpecField(
            "size",
            "Size",
            ("195/65 R15", "205/55 R16", "215/60 R16", "225/45 R17", "235/40 R18"),
            forms=(str, lambda v: str(v).replace(" ", ""), lambda v: str(v).lower()),
        ),
        SpecField(
            "load_index", "Load index", (88, 91, 94, 97, 100), forms=(str, lambda v: f"load index {v}")
        ),
        SpecField(
            "speed_rating",
            "Speed rating",
            ("H", "V", "W", "Y"),
            forms=(lambda v: f"{v} rated", lambda v: f"speed rating {v}"),
        ),
        SpecField("season", "Season", ("summer", "winter", "all-season")),
        YEAR,
    ),
    variant_fields=("size", "load_index", "speed_rating", "season"),
    query_fields=(
        ("brand", "model", "size"),
        ("brand", "size", "season"),
        ("size", "load_index", "speed_rating"),
        ("brand", "model", "season"),
        ("size", "speed_rating", "season"),
        ("brand", "model", "load_index"),
    ),
    title="{brand} {model} {size} {load_index}{speed_rating} {season} Tyre",
    intro=(
        "The {name} is a {season} {noun} in size {size}, load index {load_index}, speed {speed_rating}.",
        "It was developed for the {year} season for hatchbacks, saloons and compact SUVs.",
        "Check your vehicle handbook or the door sticker to confirm size {size} before ordering.",
    ),
    features=(
        "The {season} compound stays flexible across its temperature range for reliable grip.",
        "Load index {load_index} and speed rating {speed_rating} meet most family-car requirements.",
        "Wide circumferential grooves channel water away to resist aquaplaning.",
        "A stiff shoulder block improves steering response in corners.",
        "Optimised tread blocks reduce road noise on motorways.",
        "Low rolling resistance helps save fuel over the life of the {noun}.",
        "Tread-wear indicators show when the {noun} needs replacing.",
        "The casing is reinforced to resist impacts from potholes and kerbs.",
        "EU label ratings: fuel efficiency C, wet grip B, external noise 70 dB.",
        "Each {noun} is produced in a {year} batch and stamped with its DOT code.",
    ),
    in_box=("one {name} (sold individually; rims not included)",),
    care=(
        "Check pressures monthly when the tyres are cold and before long journeys.",
        "Rotate tyres every 10,000 km for even wear, and have the alignment checked yearly.",
    ),
    faq=(
        ("Is this price for one tyre?", "Yes, the price is for a single {noun} of size {size}."),
        (
            "What do {load_index} and {speed_rating} mean?",
            "Load index {load_index} and speed rating {speed_rating}.",
        ),
        ("Is it suitable for winter?", "This is a {season} tyre; choose accordingly for your climate."),
    ),
    extra_specs=(
        ("Tread depth", lambda rng: f"{rng.randrange(70, 95) / 10:.1f} mm"),
        ("Noise", lambda rng: f"{rng.randrange(68, 73)} dB"),
        ("Wet grip", lambda rng: rng.choice(("A", "B", "C"))),
    ),
)

CATEGORIES: tuple[Category, ...] = (PHONES, LAPTOPS, HEADPHONES, KETTLES, TVS, TYRES)

GENERIC_INTRO = (
    "Designed in-house by {brand}, the {name} balances performance, build quality and price.",
    "Every {brand} product is tested for durability before it leaves the factory.",
    "Whether it is a gift or an upgrade, the {name} is built to be used every day.",
    "Independent reviewers praised the {series} range for its attention to detail.",
)
WARRANTY = (
    "The {name} comes with a <w>-year manufacturer's warranty covering defects in materials and workmanship.",
    "Register the product within <d> days of purchase to extend the warranty by a further year.",
    "The warranty does not cover accidental damage, misuse, unauthorised repairs or normal wear and tear.",
    "To make a claim, keep your proof of purchase and contact {brand} customer care quoting {part_number}.",
    "Repairs under warranty take up to <r> working days, or the unit is replaced with an equivalent.",
    "Your statutory rights as a consumer are not affected by this warranty.",
    "Spare parts remain available for at least <p> years after the product is discontinued.",
)
SHIPPING = (
    "Orders placed before 2 pm ship the same working day from our warehouse.",
    "Standard delivery takes <s> to <t> working days; express delivery is available at checkout.",
    "You may return the product within <u> days if it is unused and in its original packaging.",
    "Returns are free for faulty items; change-of-mind returns carry a small collection fee.",
    "Refunds go back to the original payment method within 5 working days of the return arriving.",
    "Business customers can request volume pricing and invoices with VAT shown separately.",
)
LEGAL = (
    "Where applicable, it complies with Directive 2014/53/EU and the Radio Equipment Regulations 2017.",
    "Dispose of this product separately from household waste in line with the WEEE Directive 2012/19/EU.",
    "The packaging is made from <c> percent recycled cardboard and can be recycled with paper.",
    "Safety information is provided in accordance with the General Product Safety Regulation 2023/988.",
    "Specifications and appearance may change without notice; images are for illustration only.",
    "Manufactured for {brand} by an ISO 9001 certified partner.",
)
GENERIC_CARE = (
    "Read the safety instructions before first use and keep them for future reference.",
    "Keep packaging materials away from small children.",
    "If the product is damaged, stop using it and contact customer care.",
)
GENERIC_FAQ = (
    ("What is the part number?", "The part number is {part_number}; quote it when ordering spares."),
    ("Who makes the {name}?", "It is designed and sold by {brand}."),
)
REVIEW_OPENERS = (
    "Bought this to replace an older model.",
    "Ordered on a Monday, arrived on Wednesday.",
    "I did a lot of research before choosing this one.",
    "This is the second one I have bought for the family.",
    "Bought as a gift for my partner.",
    "Upgraded from a cheaper brand.",
)
REVIEW_BODIES = (
    "The build quality is excellent and it feels solid.",
    "It does exactly what the listing says.",
    "Setup took five minutes and it has worked perfectly since.",
    "Performance is great, though the instructions could be clearer.",
    "It looks smarter in person than in the photos.",
    "Good value for the price, no complaints so far.",
    "It is a little heavier than I expected but well made.",
    "Customer service answered my question within a day.",
)
REVIEW_CLOSERS = (
    "Would recommend.",
    "Happy with the purchase.",
    "Four stars only because of the packaging.",
    "Will buy {brand} again.",
    "Exactly what I needed.",
    "Time will tell how it holds up.",
)
SPEC_TABLE_STYLES = (": ", " | ", " - ")

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
