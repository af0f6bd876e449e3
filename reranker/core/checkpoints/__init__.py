"""Models shipped with GistRank, by alias, usable anywhere a checkpoint folder or base is: trained
checkpoints (each folder carries its model card, README.md: the exact command, data and metrics) and
presets, a base under fixed reading settings (the default model is one: it needs no training).

A shipped checkpoint holds only what training added — gist embeddings, score token, head and LoRA
adapters (safetensors) — and names its base by alias, so it is a few MB; its fingerprint covers the
base weights, so a different base behind the alias is refused at load.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qsl, urlencode

CHECKPOINT_FILE = "gistrank.json"
HYBRID_CHECKPOINT = "gistrank-hybrid-t32-k8"  # 32 raw tokens + 8 gists, head rule
QL_CHECKPOINT = "gistrank-ql-k4"  # 4 gists read by query likelihood: beats prefix caching at 4 positions
SHADOW_CHECKPOINT = "gistrank-teacher-lora"  # full-context LoRA cross-encoder on the same base and data
SHIPPED = {
    HYBRID_CHECKPOINT: Path(__file__).parent / "hybrid-t32-k8",
    QL_CHECKPOINT: Path(__file__).parent / "ql-k4",
    SHADOW_CHECKPOINT: Path(__file__).parent / "teacher-lora",
}

# The default of `demo`, `serve`, `consume`, `materialize` and `plan`, chosen from the AP89 and synthetic
# tables (reports/quality.md): the untouched base scoring log p(query | item), its stored unit the K/V of
# the item's first 128 tokens kept as 4-bit codes (900 KiB per item: the fewest bytes whose quality on the
# judged AP89 dev lists is not below prefix caching of 64 tokens in bf16, reports/quality/bytes/), items
# read up to 1024 tokens by the full-context shadow and recompute.
DEFAULT_MODEL = "gistrank-base-ql-prefix128-int4"
# the default before the storage was chosen by bytes (64 tokens, float32 K/V): its stores and reports
PREFIX64_MODEL = "gistrank-base-ql-prefix64"


class Preset(NamedTuple):
    """A base read under fixed settings (RerankerConfig fields a model reference may set)."""

    base: str
    settings: dict[str, str]


_QUERY_LIKELIHOOD = {"score_rule": "query_likelihood", "query_template": "\nQuery: {query}"}
PRESETS = {
    DEFAULT_MODEL: Preset(
        base="smollm2-135m-instruct",
        settings=_QUERY_LIKELIHOOD
        | {
            "compressor": "prefix",  # stored unit: the K/V of the item's first num_gist tokens
            "num_gist": "128",  # the budget k: stored positions per item
            "kv_storage": "int4",  # kept as 4-bit codes, keys per channel, values per position
            "max_item_tokens": "1024",  # how far the shadow and a miss's recompute read
            # fitted on AP89 dev, BM25's top 20 (reports/quality/bytes/): no weight of this reader adds to
            # BM25 there, so a request's first-stage order is served as it came
            "fusion": "linear:0.0",
        },
    ),
    PREFIX64_MODEL: Preset(
        base="smollm2-135m-instruct",
        settings=_QUERY_LIKELIHOOD
        | {
            "compressor": "prefix",
            "num_gist": "64",
            "max_item_tokens": "1024",
            "fusion": "linear:0.4",  # fitted on AP89 dev, BM25's top 20 (reports/quality/fusion.md)
        },
    ),
}


# a model reference's budget in bytes (`?kib=360&kv_storage=int4`): not a RerankerConfig field — the loader
# turns it into the most positions (num_gist) whose K/V fits that many KiB at the reference's storage
BUDGET_KIB = "kib"

# RerankerConfig settings a model reference may override: how a model reads items and queries, not what it
# learned (score_rule=query_likelihood reads any LM zero-shot: log p(query | item) under its own head)
SPEC_SETTINGS = (
    "compressor",
    "num_gist",
    "keep_item_prefix",
    "gist_pool_windows",  # base?compressor=gist&gist_pool_windows=true: untrained pooled gists, no training
    "max_item_tokens",
    "select_window",
    "select_pool",
    "select_scorer",
    "select_head_budget",
    "score_rule",
    "query_template",
    "kv_storage",  # how the store keeps the K/V: float32 | bfloat16 | float16 | int8 | int4 | int2
    BUDGET_KIB,  # the budget in bytes: KiB per item, turned into num_gist for the storage at load
    "fusion",  # how serving fuses the reranker's scores with a request's first-stage scores
)


def split_spec(spec: str | Path) -> tuple[str | Path, dict[str, str]]:
    """A model reference with reading settings, `REF?compressor=select&num_gist=64&max_item_tokens=1024`
    → (REF, {setting: value}). One string, so every command and the Triton config that take a model
    take a variant of it too (`Reranker.from_pretrained` applies the settings). A preset expands to
    its base and settings, the reference's own settings over them."""
    ref, _, query = str(spec).partition("?")
    if ref in PRESETS:
        preset = PRESETS[ref]
        own = _settings(spec, query)
        # a budget in bytes replaces the preset's budget in positions
        inherited = {n: v for n, v in preset.settings.items() if not (BUDGET_KIB in own and n == "num_gist")}
        return preset.base, _read_by_its_compressor(spec, own, inherited | own)
    if "?" not in str(spec):  # command-line options may hand the reference over as a Path
        return spec, {}
    own = _settings(spec, query)
    return ref, _read_by_its_compressor(spec, own, own)


def _settings(spec: str | Path, query: str) -> dict[str, str]:
    pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    twice = sorted({name for name, _ in pairs if [n for n, _ in pairs].count(name) > 1})
    if twice:
        raise ValueError(f"{spec}: {twice} set more than once; give each setting once")
    settings = dict(pairs)
    unknown = sorted(set(settings) - set(SPEC_SETTINGS))
    if unknown:
        raise ValueError(
            f"{spec}: unknown settings {unknown}; a model reference may set {list(SPEC_SETTINGS)}"
        )
    if BUDGET_KIB in settings:
        budget_kib(spec, settings)
    return settings


def budget_kib(spec: str | Path, settings: dict[str, str]) -> float | None:
    """The reference's budget in KiB per item (None: none given), refused unless a positive number
    given instead of num_gist (two budgets would contradict each other)."""
    if BUDGET_KIB not in settings:
        return None
    if "num_gist" in settings:
        raise ValueError(f"{spec}: sets both num_gist and {BUDGET_KIB}; give the budget one way")
    try:
        kib = float(settings[BUDGET_KIB])
    except ValueError:
        kib = math.nan
    if not (math.isfinite(kib) and kib > 0):
        raise ValueError(f"{spec}: {BUDGET_KIB}={settings[BUDGET_KIB]!r} is not a positive number of KiB")
    return kib


def _read_by_its_compressor(
    spec: str | Path, own: dict[str, str], settings: dict[str, str]
) -> dict[str, str]:
    """`settings`, refused when the reference names a compressor and sets (in `own`, its own settings) one
    that only another compressor reads: it would be ignored, yet give the model another fingerprint."""
    compressor = settings.get("compressor")
    if compressor is None:  # a checkpoint's own compressor: known only once it is loaded
        return settings
    from reranker.core.config import SETTING_OWNERS  # here: every command imports this module (DEFAULT_MODEL)

    foreign = sorted(name for name in own if SETTING_OWNERS.get(name, compressor) != compressor)
    if foreign:
        owners = ", ".join(f"{name} by compressor={SETTING_OWNERS[name]}" for name in foreign)
        raise ValueError(f"{spec}: reads compressor={compressor}, but sets settings read only {owners}")
    return settings


def model_spec(ref: str | Path, **settings: object) -> str:
    """`ref` (itself possibly with settings) with the reading settings that are not None added."""
    ref, existing = split_spec(ref)
    added = {name: str(value) for name, value in settings.items() if value is not None}
    given = existing | added
    unknown = sorted(set(given) - set(SPEC_SETTINGS))
    if unknown:
        raise ValueError(f"unknown settings {unknown}; a model reference may set {list(SPEC_SETTINGS)}")
    _read_by_its_compressor(ref, given, given)
    return f"{ref}?{urlencode(given)}" if given else str(ref)


def resolve_checkpoint(ref: str | Path) -> str | Path:
    """A shipped checkpoint's folder for its alias; anything else unchanged."""
    return SHIPPED.get(str(ref), ref)


def is_checkpoint(ref: str | Path) -> bool:
    """Whether `ref` (alias, folder, or either with reading settings) is a GistRank checkpoint rather
    than a base model."""
    return (Path(resolve_checkpoint(split_spec(ref)[0])) / CHECKPOINT_FILE).is_file()


def default_shadow(model: str | Path) -> str:
    """The full-context model that checks `model` online when none is named: the shipped teacher for a
    shipped student (all trained on the same data and base), else `model`'s own full-context forward."""
    ref, settings = split_spec(model)
    students = (SHIPPED[HYBRID_CHECKPOINT], SHIPPED[QL_CHECKPOINT])
    shipped_student = Path(resolve_checkpoint(ref)).resolve() in {s.resolve() for s in students}
    if not shipped_student:
        return str(model)
    # the shadow reads items as far as the student does
    return model_spec(SHADOW_CHECKPOINT, max_item_tokens=settings.get("max_item_tokens"))
