"""The synthetic catalog's vocabulary: typed spec fields, the six product categories and the prose
templates their descriptions are assembled from (the generator is `data_synth`; its module doc explains
how the pieces are used).

Everything here is data: changing a value pool or a template changes every generated set, the ones the
shipped checkpoints were trained and measured on included.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

Value = str | int | float | bool


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
