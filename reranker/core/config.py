"""`RerankerConfig`: everything about gisting that changes the stored K/V or how it is scored."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from reranker.core.fusion import DEFAULT_FUSION, canonical_fusion

if TYPE_CHECKING:  # torch is imported where a dtype is resolved: a settings check (every command's first
    import torch  # step, reranker.core.model_refs) must not pay for it

DType = Literal["float32", "bfloat16", "float16"]
# how a stored unit keeps its K/V (reranker/core/kv_codec.py): a float dtype, or integer codes with scales
KVStorage = Literal["float32", "bfloat16", "float16", "int8", "int4", "int2"]
# each compressor (reranker/core/compressors/) → the RerankerConfig settings only it reads (a model reference
# naming another compressor refuses them): here, not in the registry, which imports torch — checking a
# model reference, every command's first step, must stay cheap
COMPRESSOR_SETTINGS: dict[str, tuple[str, ...]] = {
    "gist": ("gist_pool_windows",),
    "select": ("select_scorer", "select_window", "select_pool", "select_head_budget"),
    "prefix": (),
}
SETTING_OWNERS = {setting: name for name, own in COMPRESSOR_SETTINGS.items() for setting in own}


def known_compressor(name: str) -> str:
    """`name` if it names a compressor, else a `ValueError` naming the known ones."""
    if name not in COMPRESSOR_SETTINGS:
        raise ValueError(f"unknown compressor {name!r}; known: {', '.join(COMPRESSOR_SETTINGS)}")
    return name


ScoreRule = Literal["head", "query_likelihood"]
AE_PROMPT = "\nThe item, repeated:\n"  # separates the gists from the autoencoding target
# settings that only change how the query reads a stored unit, never the unit (RerankerConfig.store_settings)
READING_FIELDS = ("score_rule", "query_template", "max_query_tokens", "reader_adapter_rank", "fusion")
# ... unless the compressor's own forward reads one: selection observes the item with the query
# template's lead-in (compressors/select.py: observation_suffix), so its units depend on the template
STORE_READS: dict[str, tuple[str, ...]] = {"select": ("query_template",)}
# query likelihood reads the query where the autoencoding stage taught the LM to spell out the item
LIKELIHOOD_TEMPLATE = AE_PROMPT + "{query}"


class RerankerConfig(BaseModel):
    """Compression and reading settings: everything that changes the stored K/V or how it is scored.

    Position scheme (gists): the item keeps its natural positions `0 … j-1`, the gists sit at
    `j … j+k-1` and the query at `j+k …` (training layout). Online, each candidate's query is numbered
    from the `query_start` its stored unit carries, so query→key distances are exactly those of the
    reference forward (RoPE depends only on differences); each compressor says where that is.

    Hybrid (`keep_item_prefix` = t > 0): the K/V of the item's first p = min(t, j) tokens (title and
    key fields, rendered first) is stored in front of the gists at its own positions 0 … p-1, and the
    gist mask lets the query read those columns, so exact title/spec tokens survive compression.
    Stored positions become p + k.

    Score rule: `head` scores the query by a trained linear head on an appended score token;
    `query_likelihood` by log p(query | gists) under the LM's own output head, read where an
    autoencoding stage taught the LM to spell the item out of its gists (`LIKELIHOOD_TEMPLATE`). The
    rule does not change the stored K/V, only what the query's forward is turned into.

    Token-limit policy: items longer than `max_item_tokens` are truncated (counted in
    `gistrank_items_truncated_total` and flagged on the `StoredUnit`), because long catalog text is
    normal and its head carries the title and key attributes. Queries longer than
    `max_query_tokens` are rejected with `QueryTooLongError`: silently cutting a query changes what
    is asked.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_gist: int = Field(
        8,
        ge=1,
        le=1024,
        description="k: the budget, stored positions per item after the prefix (gist tokens, "
        "selected columns or prefix tokens, as the compressor says)",
    )
    max_item_tokens: int = Field(
        1024, ge=1, description="item tokens kept (BOS included); longer items truncate"
    )
    keep_item_prefix: int = Field(
        0, ge=0, description="t: first item tokens kept as raw K/V beside the gists (0 = pure gisting)"
    )
    compressor: str = Field(
        "gist",
        description="what the k stored positions are (reranker/core/compressors/): 'gist' = the K/V of k "
        "learned gist tokens after the item; 'select' = per layer and KV head, the K/V of the k item "
        "positions an observation window attends to most (no training); 'prefix' = the K/V of the item's "
        "first t + k tokens, read as if the item ended there (plain prefix caching at the same budget)",
    )
    gist_adapter_rank: int = Field(
        0,
        ge=0,
        description="gist: rank of the residual adapter that acts at gist rows only (core/gist_adapter.py); "
        "0 = none, the gists are read by the body exactly as it reads any token",
    )
    reader_adapter_rank: int = Field(
        0,
        ge=0,
        description="reader: rank of the low-rank adapters on every attention and MLP projection that act "
        "at query rows only (core/reader_adapter.py); they never touch an item row, so the stored K/V is "
        "the same with or without them; 0 = none, the query is read by the body as it is",
    )
    gist_pool_windows: bool = Field(
        False,
        description="gist: gist i reads only the i-th of k equal spans of the item after the prefix, plus "
        "its first max(t, 1) tokens and the earlier gists (GistPool's pooling windows, core/layout.py); "
        "False = every gist reads the whole item",
    )
    select_scorer: Literal["snapkv", "kvzip"] = Field(
        "snapkv",
        description="select: what decides a column's importance — 'snapkv' = the attention the item's last "
        "select_window tokens and the query's lead-in pay it (query-aware); 'kvzip' = the most attention "
        "any row of a teacher-forced repeat of the item pays it (query-agnostic, KVzip)",
    )
    select_head_budget: Literal["uniform", "adaptive"] = Field(
        "uniform",
        description="select: how a layer's k·H_kv columns are shared among its KV heads — 'uniform' = k "
        "each; 'adaptive' = by importance across the layer's heads, each keeping at least a fifth of k "
        "(Ada-KV's per-head budgets)",
    )
    select_window: int = Field(16, ge=0, description="select: the item's last tokens that observe it")
    select_pool: int = Field(
        7, ge=1, description="select: odd window of positions whose attention is averaged"
    )
    score_rule: ScoreRule = Field(
        "head",
        description="how the query's outputs become a relevance score: 'head' = a linear head on the "
        "appended score token; 'query_likelihood' = log p(query | item) under the LM's own head, summed "
        "over the tokens from {query} on (Reranker.tail_scores)",
    )
    max_query_tokens: int = Field(64, ge=1, description="query tokens allowed (template included)")
    dtype: DType = Field(
        "float32",
        description="the weights' dtype as saved and fingerprinted, and the K/V's as compressed (stored so "
        "unless kv_storage says otherwise); the compute dtype is chosen per machine at load "
        "(compute_dtype_for)",
    )
    kv_storage: KVStorage | None = Field(
        None,
        description="how a stored unit keeps its K/V (core/kv_codec.py): float32, bfloat16 or float16 "
        "values, or int8 / int4 / int2 codes with per-group scales; None = `dtype`. A setting of the stored "
        "unit (it is in the store fingerprint), so every writer and reader of one Feast view agrees on it "
        "whatever machine it runs on",
    )
    query_template: str = Field(
        "\nQuery: {query}\nRelevant:",
        description="how the query is written after the gists; must contain {query}",
    )
    fusion: str = Field(
        DEFAULT_FUSION,
        description="how serving combines the reranker's scores with first-stage scores a request brings "
        "(core/fusion.py): 'linear:W' = W · minmax(reranker) + (1 − W) · minmax(first stage) per request, "
        "'rrf:W[:K]' = weighted reciprocal-rank fusion, 'none' = the reranker's scores as they are",
    )

    @model_validator(mode="before")
    @classmethod
    def _storage_as_dtype_is_the_default(cls, data: object) -> object:
        """kv_storage equal to the dtype is what None means: one setting, one fingerprint."""
        if isinstance(data, dict) and data.get("kv_storage") == data.get(
            "dtype", cls.model_fields["dtype"].default
        ):
            return {**data, "kv_storage": None}
        return data

    @field_validator("fusion")
    @classmethod
    def _known_fusion(cls, text: str) -> str:
        return canonical_fusion(text)

    @field_validator("compressor")
    @classmethod
    def _known_compressor(cls, name: str) -> str:
        return known_compressor(name)

    def model_post_init(self, _context: object) -> None:
        if "{query}" not in self.query_template:
            raise ValueError("query_template must contain '{query}'")
        if self.score_rule == "query_likelihood" and not self.query_template.partition("{query}")[0]:
            raise ValueError("query_likelihood needs template text before '{query}' to predict it from")
        if self.select_pool % 2 == 0:
            raise ValueError(f"select_pool={self.select_pool} must be odd")
        if self.keep_item_prefix >= self.max_item_tokens:
            raise ValueError(
                f"keep_item_prefix={self.keep_item_prefix} must be below "
                f"max_item_tokens={self.max_item_tokens}"
            )

    @property
    def slot_layout(self) -> tuple[int, int, bool]:
        """(k, t, pooling windows): the shape of learned gists and what each reads — trained gists are
        only read back under the same one."""
        return self.num_gist, self.keep_item_prefix, self.gist_pool_windows

    @property
    def store_settings(self) -> dict[str, object]:
        """The settings a stored unit depends on: all but those that only say how the query reads it
        (`READING_FIELDS`), unless this compressor's forward reads one (selection observes the item
        with the query template's lead-in). Two configs that agree here write the same K/V."""
        kept = set(STORE_READS.get(self.compressor, ()))
        return {k: v for k, v in self.model_dump().items() if k not in READING_FIELDS or k in kept}

    @property
    def query_reading(self) -> dict[str, str]:
        """What lays out and scores the query's rows after the gists: two models whose readings match
        have query rows that compare position by position (probe, hidden-state distillation)."""
        return {"score_rule": self.score_rule, "query_template": self.query_template}

    @property
    def torch_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.dtype)

    @property
    def storage(self) -> KVStorage:
        """What the store keeps of a unit's K/V: `kv_storage`, else the model's `dtype`."""
        return self.kv_storage or self.dtype


def native_bf16(device: torch.device | str = "cpu") -> bool:
    """Whether `device` computes bf16 natively: CUDA, or a CPU with avx512_bf16/AMX that PyTorch's
    kernels use (its CPU capability, which ATEN_CPU_CAPABILITY=avx2 lowers, is AVX512 or above)."""
    import torch

    if torch.device(device).type == "cuda":
        return True
    cpuinfo = Path("/proc/cpuinfo")
    flags = cpuinfo.read_text() if cpuinfo.exists() else ""
    has_flag = "avx512_bf16" in flags or "amx_bf16" in flags
    return has_flag and torch.backends.cpu.get_cpu_capability().startswith("AVX512")


def preferred_dtype() -> DType:
    """bfloat16 where it is fast (CUDA, or a CPU with native bf16 dot products), else float32.

    Without avx512_bf16/AMX, PyTorch emulates bf16 matmuls on CPU: measured 6–30× slower than fp32 on
    AVX2-only machines, so "auto" must not assume bf16 helps.
    """
    import torch

    return "bfloat16" if native_bf16("cuda" if torch.cuda.is_available() else "cpu") else "float32"


def resolve_dtype(dtype: str) -> DType:
    """`auto` → `preferred_dtype()`; anything else is validated by RerankerConfig."""
    return preferred_dtype() if dtype == "auto" else dtype  # type: ignore[return-value]


def compute_dtype_for(storage: DType, requested: str = "auto", device: torch.device | str = "cpu") -> DType:
    """The dtype a model whose K/V is stored as `storage` computes in on `device`. `auto` keeps the
    storage dtype where the device computes it natively and widens to float32 where it would be
    emulated (a bf16 checkpoint on an AVX2-only CPU; fp16 on any CPU); it never narrows."""
    import torch

    if requested != "auto":
        if requested not in get_args(DType):
            raise ValueError(f"compute dtype {requested!r} is not 'auto' or one of {get_args(DType)}")
        return requested  # type: ignore[return-value]
    if storage == "float32" or torch.device(device).type == "cuda":
        return storage
    return storage if storage == "bfloat16" and native_bf16(device) else "float32"


def template_for(score_rule: str) -> dict[str, str]:
    """The query template a score rule reads best with, as RerankerConfig overrides: {} keeps the default."""
    return {"query_template": LIKELIHOOD_TEMPLATE} if score_rule == "query_likelihood" else {}
