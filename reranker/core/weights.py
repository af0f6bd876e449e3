"""A Reranker's weights: checkpoint I/O, LoRA adapters, the fingerprint, and the compute dtype.

A checkpoint folder:
    gistrank.json      format, base reference, RerankerConfig, fingerprint
    gist.safetensors   gist embeddings, score token, head (+ the gist adapter, when it has one)
    adapter/           LoRA adapters (peft format), when trained with `add_lora`
    base/              the whole body, when fully fine-tuned (`store_base`)

Two dtypes. `RerankerConfig.dtype` is the **storage** dtype: the dtype of the stored K/V and the precision
the weights are fingerprinted at, so it is part of the K/V contract. The **compute** dtype is chosen
per machine at load (`compute_dtype="auto"`: the storage dtype where this machine computes it natively,
fp32 where it would be emulated — `config.compute_dtype_for`), because emulated bf16 matmuls run ~30×
slower than fp32 on an AVX2-only CPU. The fingerprint is taken in the storage dtype before the cast,
so a checkpoint has one fingerprint on every machine, and K/V compressed anywhere is valid everywhere.
How the store keeps that K/V (`RerankerConfig.kv_storage`: bf16, or int8 / int4 / int2 codes) is a third
setting, of the stored unit, in the store fingerprint: never chosen by the machine.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer

from reranker.core.base_models import DEFAULT_BASE, resolve_base
from reranker.core.checkpoints import (
    BUDGET_KIB,
    CHECKPOINT_FILE,
    budget_kib,
    is_checkpoint,
    model_spec,
    resolve_checkpoint,
    split_spec,
)
from reranker.core.compressors import compressor_for
from reranker.core.config import RerankerConfig, compute_dtype_for, resolve_dtype
from reranker.core.fusion import DEFAULT_FUSION
from reranker.core.kv_codec import payload_nbytes, positions_within

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

GIST_WEIGHTS_FILE = "gist.safetensors"
ADAPTER_DIR = "adapter"
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
CHECKPOINT_FORMAT = 1
# RerankerConfig fields newer than format 1: hashed only off these defaults, so older checkpoints keep theirs
_LATER_FIELDS = {
    "score_rule": "head",
    "compressor": "gist",
    "select_window": 16,
    "select_pool": 7,
    "gist_adapter_rank": 0,
    "select_scorer": "snapkv",
    "gist_pool_windows": False,
    "select_head_budget": "uniform",
    "reader_adapter_rank": 0,
    "fusion": DEFAULT_FUSION,
    "kv_storage": None,
}
# what only the query reads (`ReaderAdapter`, head, score token): outside the store's fingerprint
_READER_TENSORS = ("reader_adapter.", "head.", "score_embedding")
# what a full-context forward (item and query in one causal pass) never reads: the compressor, its budget
# and storage, its gists — and the fusion, which changes no score
_STORE_ONLY_FIELDS = {
    "compressor",
    "num_gist",
    "keep_item_prefix",
    "gist_adapter_rank",
    "gist_pool_windows",
    "select_scorer",
    "select_head_budget",
    "select_window",
    "select_pool",
    "kv_storage",
    "fusion",
}
_GIST_TENSORS = ("gist_embeddings", "gist_adapter.")
# RerankerConfig fields removed since format 1 (experiments that did not help; last commit: faba5cc):
# a checkpoint that has one at this value loads as if it had never existed; any other value is refused
_REMOVED_FIELDS = {"gist_read_bias": 0.0}


def migrate_gist_fields(fields: dict[str, Any], source: str | Path) -> dict[str, Any]:
    """A saved `gist` config → today's RerankerConfig fields (drops removed fields at their old defaults)."""
    fields = dict(fields)
    for name, default in _REMOVED_FIELDS.items():
        if name in fields and fields.pop(name) != default:
            raise ValueError(
                f"{source}: trained with {name}, a setting removed from GistRank; load it with the "
                "code of commit faba5cc (the last that has it)"
            )
    return fields


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class RerankerWeights(nn.Module):
    """Weights and their persistence, mixed into `Reranker` (reranker/core/model.py)."""

    lm: nn.Module
    tokenizer: PreTrainedTokenizerBase
    gist: RerankerConfig
    base_ref: str
    gist_embeddings: nn.Parameter
    score_embedding: nn.Parameter
    head: nn.Linear
    _fingerprint: tuple[int, str] | None
    _reader_fingerprint: tuple[int, str] | None

    # ----------------------------------------------------------------------------------- loading
    @classmethod
    @torch.inference_mode(False)  # real parameters even when a server loads under inference_mode
    def from_pretrained(
        cls,
        base: str | Path = DEFAULT_BASE,
        gist: RerankerConfig | None = None,
        device: str | torch.device | None = None,
        compute_dtype: str = "auto",
    ) -> Self:
        """Wrap a base LM (alias, local HF folder or Hub id) or load a GistRank checkpoint folder.

        For a checkpoint, `gist` may be omitted; if given it must equal the saved config. `base` may
        carry reading settings (`REF?compressor=select&num_gist=64&max_item_tokens=1024`,
        `checkpoints.split_spec`): a checkpoint is then read under them (its trained gists kept while
        their layout is unchanged), a base wrapped with them.
        `compute_dtype`: "auto" (`config.compute_dtype_for`) or a dtype name.
        """
        device = torch.device(device) if device is not None else _default_device()
        ref, settings = split_spec(base)
        kib = budget_kib(ref, settings)
        settings.pop(BUDGET_KIB, None)
        base = resolve_checkpoint(ref)
        ckpt = Path(base) / CHECKPOINT_FILE
        if not ckpt.is_file():
            config = RerankerConfig(**((gist or RerankerConfig()).model_dump() | settings))
            model = cls._wrap(base, str(base), config, device)
            if kib is not None:  # untrained slots: any budget is read the same way
                model = model.with_gist_config(
                    RerankerConfig(**(config.model_dump() | model._budget_for(kib)))
                )
            return model.to_compute(compute_dtype)
        meta = json.loads(ckpt.read_text())
        if meta.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{ckpt}: unsupported checkpoint format {meta.get('format')!r}")
        saved = RerankerConfig(**migrate_gist_fields(meta["gist"], ckpt))
        if gist is not None and gist != saved:
            raise ValueError(f"{base} was trained with {saved}, not {gist}")
        base_ref = meta["base"]
        base_dir = Path(base) / "base" if meta.get("base_stored") else base_ref
        model = cls._wrap(base_dir, base_ref, saved, device)
        if (Path(base) / ADAPTER_DIR).is_dir():
            model.lm = PeftModel.from_pretrained(model.lm, Path(base) / ADAPTER_DIR).eval()
        model._load_gist_state(load_file(Path(base) / GIST_WEIGHTS_FILE, device=str(device)))
        if meta.get("fingerprint") not in (None, model.reader_fingerprint):
            raise ValueError(
                f"{base}: loaded weights have fingerprint {model.reader_fingerprint}, the checkpoint was "
                f"saved as {meta['fingerprint']} — the base behind {base_ref!r} is not the one it was "
                "trained on"
            )
        if kib is not None:
            settings |= model._budget_for(kib, RerankerConfig(**(model.gist.model_dump() | settings)))
        if settings:
            model = model._read_with(settings, ckpt)
        return model.to_compute(compute_dtype)

    def _budget_for(self, kib: float, config: RerankerConfig | None = None) -> dict[str, int]:
        """num_gist: the most positions after the hybrid prefix whose K/V fits `kib` KiB per item at
        `config`'s storage (default this model's settings)."""
        config = config or self.gist
        fits = positions_within(kib * 1024, self.num_layers, self.num_kv_heads, self.head_dim, config.storage)
        k = fits - config.keep_item_prefix
        if k < 1:
            one = payload_nbytes(
                self.num_layers, config.keep_item_prefix + 1, self.num_kv_heads, self.head_dim, config.storage
            )
            raise ValueError(
                f"{BUDGET_KIB}={kib:g} holds {fits} positions at {config.storage}; "
                f"t={config.keep_item_prefix} raw tokens and one more need {one / 1024:.1f} KiB"
            )
        return {"num_gist": k}

    @classmethod
    def read(
        cls,
        ref: str | Path,
        dtype: str | None = None,
        compressor: str | None = None,
        num_gist: int | None = None,
        max_item_tokens: int | None = None,
        device: str | None = None,
        kv_storage: str | None = None,
    ) -> Self:
        """The model a command's `--model` names — checkpoint, preset or base (alias, folder,
        `REF?settings`) — read with the settings given over its own (None keeps the model's): the one
        loader of the demo, the consumer and the backfill; `serve` hands Triton the same reference with
        the same settings (`model_spec`), so their K/V fingerprints agree. A base is wrapped with
        storage dtype `dtype` (`auto`: bf16 where the CPU computes it natively; None: RerankerConfig's
        default); a checkpoint keeps the dtype it was trained with, and naming another is an error."""
        spec = model_spec(
            ref,
            compressor=compressor,
            num_gist=num_gist,
            max_item_tokens=max_item_tokens,
            kv_storage=kv_storage,
        )
        if not is_checkpoint(spec):
            gist = RerankerConfig(**({"dtype": resolve_dtype(dtype)} if dtype else {}))
            return cls.from_pretrained(spec, gist, device=device)
        model = cls.from_pretrained(spec, device=device)
        if dtype not in (None, "auto") and model.gist.dtype != dtype:
            raise ValueError(f"{ref} was trained with dtype={model.gist.dtype}, not {dtype}")
        return model

    def _read_with(self, settings: dict[str, str], source: Path) -> Self:
        """This checkpoint under other reading settings (a longer item cap, another compressor)."""
        config = RerankerConfig(**(self.gist.model_dump() | settings))
        same_layout = config.slot_layout == self.gist.slot_layout
        if not same_layout and compressor_for(config.compressor).learned:
            raise ValueError(
                f"{source}: its gists were trained with k={self.gist.num_gist}, "
                f"t={self.gist.keep_item_prefix}, gist_pool_windows={self.gist.gist_pool_windows}; read it "
                "with another k, t or windows only through compressor=select or prefix"
            )
        return self.with_gist_config(config, keep_gists=same_layout)  # type: ignore[attr-defined]

    @classmethod
    def _wrap(cls, base: str | Path, base_ref: str, gist: RerankerConfig, device: torch.device) -> Self:
        path = resolve_base(base)
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=gist.torch_dtype).to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
        return cls(lm, tokenizer, gist, base_ref).eval()  # type: ignore[call-arg]

    @torch.inference_mode(False)
    def to_compute(self, compute_dtype: str = "auto") -> Self:
        """Cast every floating weight to the compute dtype, keeping the storage-dtype fingerprint: the
        weights are still those of the checkpoint, and their K/V still leaves in the storage dtype."""
        target = getattr(torch, compute_dtype_for(self.gist.dtype, compute_dtype, self.device))
        if target == self.dtype:
            return self
        fingerprints = self.fingerprint, self.reader_fingerprint
        self.to(target)
        version = self._version_sum()
        self._fingerprint, self._reader_fingerprint = ((version, f) for f in fingerprints)
        return self

    # ------------------------------------------------------------------------------------- LoRA
    @property
    def has_lora(self) -> bool:
        return isinstance(self.lm, PeftModel)

    def add_lora(self, rank: int, alpha: float, seed: int = 0) -> None:
        """Wrap the body with fresh LoRA adapters on every attention and MLP projection. B starts at
        zero, so the wrapped model scores exactly as before until it is trained; A is drawn from
        `seed`, so a run is reproducible."""
        config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(LORA_TARGETS))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.lm = get_peft_model(self.lm, config)
        self._fingerprint = self._reader_fingerprint = (
            None  # the parameter set changed; versions could collide
        )

    # ----------------------------------------------------------------------------------- saving
    def save_pretrained(self, directory: str | Path, store_base: bool = False) -> Path:
        """Write `gistrank.json` + `gist.safetensors` (+ `adapter/` when LoRA-trained, + `base/` when
        `store_base`, e.g. after full fine-tuning). Without `store_base` the checkpoint refers to the
        base by `base_ref`; the fingerprint still covers the base weights, so a different base behind
        that reference is caught. Weights are written in the storage dtype."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        storage = self.gist.torch_dtype
        state = {n: t.detach().to(storage).contiguous().cpu() for n, t in self._gist_state().items()}
        save_file(state, directory / GIST_WEIGHTS_FILE, metadata={"fingerprint": self.reader_fingerprint})
        if self.has_lora:
            # name the base as this checkpoint does (not a machine's cache path); embeddings are never
            # adapted, and saying so keeps peft from looking the base up on the Hub; peft's generated
            # card stub would sit beside the real model card, so it goes
            self.lm.peft_config["default"].base_model_name_or_path = self.base_ref
            self.lm.save_pretrained(directory / ADAPTER_DIR, save_embedding_layers=False)
            (directory / ADAPTER_DIR / "README.md").unlink(missing_ok=True)
        if store_base:
            state = {n: t.to(storage) if t.is_floating_point() else t for n, t in self._base_state().items()}
            self.base_lm().save_pretrained(directory / "base", state_dict=state)
            self.tokenizer.save_pretrained(directory / "base")
        meta = {
            "format": CHECKPOINT_FORMAT,
            "base": self.base_ref,
            "base_stored": store_base,
            "gist": self.gist.model_dump(),
            "fingerprint": self.reader_fingerprint,  # the whole model's: checked at load
            "store_fingerprint": self.fingerprint,  # what its stored units are stamped with
        }
        (directory / CHECKPOINT_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        return directory

    def base_lm(self) -> nn.Module:
        return self.lm.get_base_model() if self.has_lora else self.lm

    def _base_state(self) -> dict[str, torch.Tensor]:
        """The body's own weights, without adapters, under the names the base model loads."""
        state = self.base_lm().state_dict()
        if not self.has_lora:
            return state
        return {name.replace(".base_layer", ""): t for name, t in state.items() if ".lora_" not in name}

    def _gist_state(self) -> dict[str, torch.Tensor]:
        state = {
            "gist_embeddings": self.gist_embeddings,
            "score_embedding": self.score_embedding,
            "head.weight": self.head.weight,
            "head.bias": self.head.bias,
        }
        if self.gist_adapter is not None:
            state |= {"gist_adapter.down": self.gist_adapter.down, "gist_adapter.up": self.gist_adapter.up}
        if self.reader_adapter is not None:
            state |= {f"reader_adapter.{n}": t for n, t in self.reader_adapter.named_parameters()}
        return state

    def _load_gist_state(self, state: dict[str, torch.Tensor]) -> None:
        own = self._gist_state()
        if set(state) != set(own):
            raise ValueError(f"gist weights have tensors {sorted(state)}, expected {sorted(own)}")
        with torch.no_grad():
            for name, param in own.items():
                if state[name].shape != param.shape:
                    raise ValueError(f"gist weight {name}: shape {tuple(state[name].shape)} != {param.shape}")
                param.copy_(state[name])

    # ------------------------------------------------------------------------------- fingerprint
    def _version_sum(self) -> int:
        return sum(p._version for p in self.parameters())

    @property
    def fingerprint(self) -> str:
        """The store's fingerprint: blake2b over every weight and setting a stored unit depends on — the
        body, gists and gist adapter, `RerankerConfig.store_settings` — in the storage dtype. Stamped on
        every stored unit and naming the Feast view: units are valid exactly for the models that share
        it, and a reader retrained on query rows only (`reader_adapter`, head, score rule, template)
        keeps it, so it reads the same store. Recomputed whenever a parameter was modified in place
        (optimizer steps bump tensor versions), so K/V compressed before a step never passes as current.
        """
        version = self._version_sum()
        if self._fingerprint is None or self._fingerprint[0] != version:
            settings = self.gist.store_settings
            unset = {n for n, default in _LATER_FIELDS.items() if n in settings and settings[n] == default}
            config = json.dumps({k: v for k, v in settings.items() if k not in unset}, sort_keys=True)
            self._fingerprint = (version, self._digest(config, reader=False))
        return self._fingerprint[1]

    @property
    def reader_fingerprint(self) -> str:
        """The whole model's fingerprint — store and reader: every weight and every setting, the fusion
        with first-stage scores included. What a served ranking was read with (a shadow comparison never
        mixes two) and what a checkpoint is checked against at load. Equal to the single fingerprint of
        models saved before the split."""
        version = self._version_sum()
        if self._reader_fingerprint is None or self._reader_fingerprint[0] != version:
            self._reader_fingerprint = (version, self._digest(self._reading_config(), reader=True))
        return self._reader_fingerprint[1]

    @property
    def scores_fingerprint(self) -> str:
        """The reader fingerprint without `fusion`, which changes the ranking served after a first stage
        but never a score: what caches of scores (evaluation, distillation targets) are keyed by, so a
        new fusion weight reuses them. Equal to `reader_fingerprint` under the default fusion."""
        if self.gist.fusion == DEFAULT_FUSION:
            return self.reader_fingerprint
        return self._digest(self._reading_config(exclude={"fusion"}), reader=True)

    @property
    def full_context_fingerprint(self) -> str:
        """The fingerprint of this model's full-context scores (`score_full`): the reader fingerprint
        without what only a stored unit depends on (compressor, budget, storage, gists) or only serving
        (fusion). What caches of the full-context reader's scores are keyed by (distillation targets), so
        a store of another budget, compressor or precision over the same reader reuses them."""
        return self._digest(self._reading_config(exclude=_STORE_ONLY_FIELDS), reader=True, gists=False)

    def _reading_config(self, exclude: set[str] | None = None) -> str:
        """Every setting as JSON, but the later fields at their defaults (older checkpoints keep their
        fingerprints) and `exclude`."""
        unset = {name for name, value in _LATER_FIELDS.items() if getattr(self.gist, name) == value}
        return self.gist.model_dump_json(exclude=unset | (exclude or set()))

    def _digest(self, config: str, reader: bool, gists: bool = True) -> str:
        """blake2b of `config` and the weights (those only the query reads too when `reader`; the gists
        and gist adapter unless not `gists`), each as saved: in the storage dtype."""
        h = hashlib.blake2b(digest_size=16)
        h.update(config.encode())
        seen: set[int] = set()
        skipped = (() if reader else _READER_TENSORS) + (() if gists else _GIST_TENSORS)
        for name, t in sorted(self.state_dict(keep_vars=True).items()):
            if t.data_ptr() in seen or name.startswith(skipped):
                continue  # tied weights (embeddings / lm_head) hash once
            seen.add(t.data_ptr())
            if t.is_floating_point() and ".lora_" not in name:
                # as saved: a model computing wider than it stores hashes what save_pretrained
                # writes (peft keeps adapters in fp32 under a bf16 body, so they hash as they are)
                t = t.detach().to(self.gist.torch_dtype)
            h.update(name.encode())
            h.update(str(t.dtype).encode())
            h.update(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
        return h.hexdigest()

    @property
    def dtype(self) -> torch.dtype:
        """The compute dtype (see the module docstring); the K/V's is `kv_dtype`."""
        return self.gist_embeddings.dtype

    @property
    def kv_dtype(self) -> torch.dtype:
        """The storage dtype of the K/V this model compresses and accepts (`RerankerConfig.dtype`)."""
        return self.gist.torch_dtype
