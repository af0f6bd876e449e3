"""GistReranker: a decoder-only RoPE LM (Llama, Qwen2, …) turned into a gist-compressed cross-encoder.

Parameters added to the base LM (all in `gist.safetensors` of a checkpoint):
    gist_embeddings  (k, D)  k distinct learned inputs appended after the item
    score_embedding  (1, D)  the final token whose last hidden state is scored
    head             D → 1   relevance logit
(with `score_rule="query_likelihood"` neither is used: the score is log p(query | gists) under the LM's
own head, which an autoencoding stage has already taught to read gists — `tail_scores`)
plus, when trained with `add_lora`, LoRA adapters on the body (`adapter/` of a checkpoint, peft format).

The forwards sharing those parameters (sequence layouts in `layout.py`):
    compress(items)            item + gists, keep per-layer (prefix +) gist K/V → list[GistKV]
    score(query, kvs)          query (+ score token) against injected gist K/V → (N,) online path
    score_masked(query, items) item + gists + query (+ score), gist mask       → (N,) reference path
    score_full(query, items)   item + query (+ score), plain causal            → (N,) shadow/teacher
    query_states(query, items) either of the two, plus the query's output at every layer (distillation)
    attention(query, items)    either of the two, its head-averaged attention weights (probe)
    score_packed(items, qs)    item (+ gists) + many queries per row           → training throughput
    compress_prefix(items)     K/V of the item's first t + k tokens: the matched-budget baseline
    autoencode_loss(items)     item + gists + prompt + item head, gist mask    → training objective

`score(q, compress(items)) == score_masked(q, items)` (fp32, ≤ 1e-4 relative) is the core's
acceptance test: tests/test_equivalence.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from torch import nn
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache, PreTrainedTokenizerBase
from transformers.modeling_outputs import BaseModelOutputWithPast

from monitoring.metrics import ITEMS_TRUNCATED
from reranker.core import layout
from reranker.core.base_models import DEFAULT_BASE, resolve_base
from reranker.core.checkpoints import CHECKPOINT_FILE, resolve_checkpoint
from reranker.core.config import AE_PROMPT, GistConfig
from reranker.core.errors import (
    EmptyInputError,
    FingerprintMismatchError,
    KVFormatError,
    QueryTooLongError,
)
from reranker.core.kv import GistKV

GIST_WEIGHTS_FILE = "gist.safetensors"
ADAPTER_DIR = "adapter"
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
CHECKPOINT_FORMAT = 1
_LATER_FIELDS = {"gist_read_bias": 0.0, "score_rule": "head"}  # GistConfig fields newer than format 1
_INIT_SEED = 0  # gist/head init is seeded so two fresh wraps of one base share a fingerprint


class QueryTail(NamedTuple):
    """What follows the gists for one query: embeddings (ℓ, D), and targets (ℓ,) long — the token each
    position predicts where the query likelihood is summed, -1 elsewhere (all -1 under the head rule,
    whose ℓ-th row is the score token)."""

    embeds: torch.Tensor
    targets: torch.Tensor


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class GistReranker(nn.Module):
    def __init__(
        self,
        lm: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        gist: GistConfig,
        base_ref: str,
    ) -> None:
        super().__init__()
        self.lm = lm
        self.tokenizer = tokenizer
        self.gist = gist
        self.base_ref = base_ref  # how save_pretrained refers to the base when it does not store it
        cfg = lm.config
        self.num_layers: int = cfg.num_hidden_layers
        self.num_kv_heads: int = cfg.num_key_value_heads
        self.head_dim: int = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        hidden = cfg.hidden_size
        longest = gist.max_item_tokens + gist.num_gist + gist.max_query_tokens + 1
        if longest > cfg.max_position_embeddings:
            raise ValueError(
                f"max_item_tokens + num_gist + max_query_tokens + 1 = {longest} exceeds the base model's "
                f"max_position_embeddings={cfg.max_position_embeddings}"
            )

        self.gist_embeddings = nn.Parameter(self.initial_gist_embeddings(lm, gist))  # (k, D)
        g = torch.Generator().manual_seed(_INIT_SEED + 1)
        self.score_embedding = nn.Parameter(self._mean_plus_noise(lm, 1, g).to(gist.torch_dtype))  # (1, D)
        self.head = nn.Linear(hidden, 1, device=lm.device, dtype=gist.torch_dtype)
        with torch.no_grad():
            self.head.weight.copy_(torch.randn(1, hidden, generator=g) / hidden**0.5)
            self.head.bias.zero_()
        self._fingerprint: tuple[int, str] | None = None

    @staticmethod
    def _mean_plus_noise(lm: nn.Module, n: int, g: torch.Generator) -> torch.Tensor:
        """n rows of mean input embedding + a small distinct offset each: on-distribution, yet
        distinguishable before any training."""
        emb = lm.get_input_embeddings().weight.detach().float()
        noise = torch.randn(n, emb.shape[1], generator=g) * (0.1 * emb.std(0))
        return (emb.mean(0) + noise).to(emb.device)

    @classmethod
    def initial_gist_embeddings(cls, lm: nn.Module, gist: GistConfig) -> torch.Tensor:
        """The seeded untrained gists of `lm` — also the "untrained gists" baseline of the evaluation."""
        g = torch.Generator().manual_seed(_INIT_SEED)
        return cls._mean_plus_noise(lm, gist.num_gist, g).to(gist.torch_dtype)

    # ----------------------------------------------------------------------------------- loading
    @classmethod
    def from_pretrained(
        cls,
        base: str | Path = DEFAULT_BASE,
        gist: GistConfig | None = None,
        device: str | torch.device | None = None,
    ) -> GistReranker:
        """Wrap a base LM (alias, local HF folder or Hub id) or load a GistRank checkpoint folder.

        For a checkpoint, `gist` may be omitted; if given it must equal the saved config.
        """
        device = torch.device(device) if device is not None else _default_device()
        base = resolve_checkpoint(base)
        ckpt = Path(base) / CHECKPOINT_FILE
        if ckpt.is_file():
            meta = json.loads(ckpt.read_text())
            if meta.get("format") != CHECKPOINT_FORMAT:
                raise ValueError(f"{ckpt}: unsupported checkpoint format {meta.get('format')!r}")
            saved = GistConfig(**meta["gist"])
            if gist is not None and gist != saved:
                raise ValueError(f"{base} was trained with {saved}, not {gist}")
            base_ref = meta["base"]
            base_dir = Path(base) / "base" if meta.get("base_stored") else base_ref
            model = cls._wrap(base_dir, base_ref, saved, device)
            if (Path(base) / ADAPTER_DIR).is_dir():
                model.lm = PeftModel.from_pretrained(model.lm, Path(base) / ADAPTER_DIR).eval()
            state = load_file(Path(base) / GIST_WEIGHTS_FILE, device=str(device))
            model._load_gist_state(state)
            if meta.get("fingerprint") not in (None, model.fingerprint):
                raise ValueError(
                    f"{base}: loaded weights have fingerprint {model.fingerprint}, the checkpoint was "
                    f"saved as {meta['fingerprint']} — the base behind {base_ref!r} is not the one it was "
                    "trained on"
                )
            return model
        return cls._wrap(base, str(base), gist or GistConfig(), device)

    @classmethod
    def _wrap(cls, base: str | Path, base_ref: str, gist: GistConfig, device: torch.device) -> GistReranker:
        path = resolve_base(base)
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=gist.torch_dtype).to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
        return cls(lm, tokenizer, gist, base_ref).eval()

    def with_gist_config(self, gist: GistConfig) -> GistReranker:
        """The same body (shared, not copied), score token and head under `gist`, with that config's
        untrained gists: a warm start for a student, the "untrained gists" and prefix baselines."""
        other = GistReranker(self.lm, self.tokenizer, gist, self.base_ref)
        with torch.no_grad():
            other.score_embedding.copy_(self.score_embedding)
            other.head.load_state_dict(self.head.state_dict())
        return other.eval()

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
        self._fingerprint = None  # the parameter set changed; version sums alone could collide

    def save_pretrained(self, directory: str | Path, store_base: bool = False) -> Path:
        """Write `gistrank.json` + `gist.safetensors` (+ `adapter/` when LoRA-trained, + `base/` when
        `store_base`, e.g. after full fine-tuning). Without `store_base` the checkpoint refers to the
        base by `base_ref`; the fingerprint still covers the base weights, so a different base behind
        that reference is caught."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {name: t.detach().contiguous().cpu() for name, t in self._gist_state().items()}
        save_file(state, directory / GIST_WEIGHTS_FILE, metadata={"fingerprint": self.fingerprint})
        if self.has_lora:
            # name the base as this checkpoint does (not a machine's cache path); embeddings are never
            # adapted, and saying so keeps peft from looking the base up on the Hub; peft's generated
            # card stub would sit beside the real model card, so it goes
            self.lm.peft_config["default"].base_model_name_or_path = self.base_ref
            self.lm.save_pretrained(directory / ADAPTER_DIR, save_embedding_layers=False)
            (directory / ADAPTER_DIR / "README.md").unlink(missing_ok=True)
        if store_base:
            self._base_lm().save_pretrained(directory / "base", state_dict=self._base_state())
            self.tokenizer.save_pretrained(directory / "base")
        meta = {
            "format": CHECKPOINT_FORMAT,
            "base": self.base_ref,
            "base_stored": store_base,
            "gist": self.gist.model_dump(),
            "fingerprint": self.fingerprint,
        }
        (directory / CHECKPOINT_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        return directory

    def _base_lm(self) -> nn.Module:
        return self.lm.get_base_model() if self.has_lora else self.lm

    def _base_state(self) -> dict[str, torch.Tensor]:
        """The body's own weights, without adapters, under the names the base model loads."""
        state = self._base_lm().state_dict()
        if not self.has_lora:
            return state
        return {name.replace(".base_layer", ""): t for name, t in state.items() if ".lora_" not in name}

    def _gist_state(self) -> dict[str, torch.Tensor]:
        return {
            "gist_embeddings": self.gist_embeddings,
            "score_embedding": self.score_embedding,
            "head.weight": self.head.weight,
            "head.bias": self.head.bias,
        }

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
    @property
    def fingerprint(self) -> str:
        """blake2b over base weights, gist embeddings, head and gist config.

        Recomputed whenever any parameter was modified in place (optimizer steps bump tensor
        versions), so K/V compressed before a training step can never pass as current.
        """
        params = list(self.parameters())
        version = sum(p._version for p in params)
        if self._fingerprint is None or self._fingerprint[0] != version:
            h = hashlib.blake2b(digest_size=16)
            # fields added later hash only off their defaults: saved checkpoints keep their fingerprint
            unset = {name for name, value in _LATER_FIELDS.items() if getattr(self.gist, name) == value}
            h.update(self.gist.model_dump_json(exclude=unset).encode())
            seen: set[int] = set()
            for name, t in sorted(self.state_dict(keep_vars=True).items()):
                if t.data_ptr() in seen:  # tied weights (embeddings / lm_head) hash once
                    continue
                seen.add(t.data_ptr())
                h.update(name.encode())
                h.update(str(t.dtype).encode())
                h.update(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
            self._fingerprint = (version, h.hexdigest())
        return self._fingerprint[1]

    # ------------------------------------------------------------------------------ tokenization
    @property
    def device(self) -> torch.device:
        return self.gist_embeddings.device

    @property
    def dtype(self) -> torch.dtype:
        return self.gist_embeddings.dtype

    def item_ids(self, items: Sequence[str]) -> tuple[list[list[int]], list[bool]]:
        """Token ids of each item (BOS first when the tokenizer has one), truncated to max_item_tokens."""
        if not items:
            raise EmptyInputError("no items given")
        for i, text in enumerate(items):
            if not isinstance(text, str) or not text.strip():
                raise EmptyInputError(f"item {i} has no text")
        bos = [self.tokenizer.bos_token_id] if self.tokenizer.bos_token_id is not None else []
        encoded = self.tokenizer(list(items), add_special_tokens=False)["input_ids"]
        limit = self.gist.max_item_tokens
        ids = [(bos + e)[:limit] for e in encoded]
        truncated = [len(bos) + len(e) > limit for e in encoded]
        return ids, truncated

    def query_ids(self, query: str) -> list[int]:
        """Token ids of the templated query; raises on empty or over-long queries (never truncates)."""
        return self._query_tokens(query)[0]

    def _query_tokens(self, query: str) -> tuple[list[int], int]:
        """(token ids of the templated query, index of its first scored token). Under query_likelihood
        the template's lead-in is tokenized apart from the rest, so the scored tokens are the query's
        own whatever the lead-in ends with; under the head rule nothing is scored token by token (0)."""
        if not isinstance(query, str) or not query.strip():
            raise EmptyInputError("query is empty")
        text = self.gist.query_template.format(query=query)
        if self.gist.score_rule == "head":
            ids, start = self.tokenizer(text, add_special_tokens=False)["input_ids"], 0
        else:
            lead = self.gist.query_template.partition("{query}")[0]
            ids = self.tokenizer(lead, add_special_tokens=False)["input_ids"]
            start = len(ids)
            ids = ids + self.tokenizer(text[len(lead) :], add_special_tokens=False)["input_ids"]
        if len(ids) > self.gist.max_query_tokens:
            raise QueryTooLongError(len(ids), self.gist.max_query_tokens)
        return ids, start

    def tail_length(self, query: str) -> int:
        """ℓ: positions the query occupies online (its tokens, + the score token under the head rule)."""
        return self._query_tail(query).embeds.shape[0]

    def _embed(self, ids: list[int]) -> torch.Tensor:
        return self.lm.get_input_embeddings()(torch.tensor(ids, dtype=torch.long, device=self.device))

    # ------------------------------------------------------------------------------- the forwards
    def _decoder(self) -> nn.Module:
        return self.lm.get_decoder()

    def _forward_rows(
        self,
        rows: list[torch.Tensor],
        item_lens: torch.Tensor | None,
        item_visibility: float = 0.0,
        all_layers: bool = False,
        attentions: bool = False,
    ) -> tuple[BaseModelOutputWithPast, torch.Tensor]:
        """Right-pad rows of embeddings and run the decoder → (its output: last hidden (N, S, D), plus
        every layer's when `all_layers` and attention weights when `attentions`; seq_lens (N,)).

        item_lens None: plain causal (full context). Otherwise the gist mask over rows laid out as
        item + gists + tail, optionally softened by `item_visibility` (mask curriculum)."""
        seq_lens = torch.tensor([r.shape[0] for r in rows], device=self.device)
        total = int(seq_lens.max())
        embeds = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)  # (N, S, D); pad never attended
        positions = torch.arange(total, device=self.device).expand(len(rows), -1)
        k, t = self.gist.num_gist, self.gist.keep_item_prefix
        if item_lens is None:
            mask = layout.additive(layout.full_mask(seq_lens, total), self.dtype)
        else:
            mask = layout.additive(layout.training_mask(item_lens, k, seq_lens, total, t), self.dtype)
            if item_visibility > 0:
                leak = layout.cut_block(item_lens, k, total, t) & layout.full_mask(seq_lens, total)
                mask = layout.with_item_visibility(mask, leak, item_visibility)
            mask = layout.with_read_bias(
                mask, layout.read_block(item_lens, k, total), self.gist.gist_read_bias
            )
        out = self._decoder()(
            inputs_embeds=embeds,
            position_ids=positions,
            attention_mask=mask,
            output_hidden_states=all_layers,
            output_attentions=attentions,
        )
        return out, seq_lens

    def tail_scores(self, tail: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The score rule: the query's last-layer outputs (N, ℓ, D) → relevance scores (N,) float32.

        head: a linear logit of the score token (the last row). query_likelihood: Σ log p(token) over
        the query's tokens (`targets` ≥ 0), each predicted from the row before it — log p(query | item),
        i.e. how well what the gists hold predicts what was asked; ranking candidates by it is ranking
        by p(item | query) under a uniform prior."""
        if self.gist.score_rule == "head":
            return self.head(tail[:, -1]).squeeze(-1).float()
        scored = (targets >= 0).nonzero().squeeze(-1)  # (n,)
        logits = self.lm.get_output_embeddings()(tail[:, scored]).float()  # (N, n, V)
        picked = targets[scored].expand(tail.shape[0], -1).unsqueeze(-1)  # (N, n, 1)
        return torch.log_softmax(logits, dim=-1).gather(-1, picked).squeeze(-1).sum(-1)

    @staticmethod
    def _tails(hidden: torch.Tensor, seq_lens: torch.Tensor, tail_len: int) -> torch.Tensor:
        """The last `tail_len` real positions of each right-padded row: (N, S, …) → (N, ℓ, …)."""
        tail = seq_lens[:, None] - tail_len + torch.arange(tail_len, device=hidden.device)  # (N, ℓ)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device)[:, None], tail]

    def _query_tail(self, query: str) -> QueryTail:
        ids, start = self._query_tokens(query)
        embeds = self._embed(ids)  # (ℓ, D)
        targets = torch.full((len(ids),), -1, dtype=torch.long, device=self.device)
        if self.gist.score_rule == "head":
            return QueryTail(torch.cat([embeds, self.score_embedding]), torch.cat([targets, targets[:1]]))
        targets[start - 1 : -1] = torch.tensor(ids[start:], device=self.device)
        return QueryTail(embeds, targets)

    def score_masked(self, query: str, items: Sequence[str], item_visibility: float = 0.0) -> torch.Tensor:
        """Training-layout reference: item + gists + query (+ score token) under the gist mask → (N,).

        `item_visibility` > 0 lets the query partly read the item (mask curriculum, training only)."""
        return self._score_tail(query, items, False, item_visibility)[0]

    def score_full(self, query: str, items: Sequence[str]) -> torch.Tensor:
        """Full-context cross-encoder (no gists): item + query (+ score token), plain causal → (N,)."""
        return self._score_tail(query, items, True)[0]

    def query_states(
        self, query: str, items: Sequence[str], full: bool, item_visibility: float = 0.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`score_full` (or `score_masked`) scores (N,) and the query + score token's output of every
        layer (N, L, ℓ, D): what hidden-state distillation compares between a student reading only
        gists and a teacher reading the whole item."""
        return self._score_tail(query, items, full, item_visibility, all_layers=True)

    def _tail_rows(
        self, query: str, items: Sequence[str], full: bool
    ) -> tuple[list[torch.Tensor], list[list[int]], QueryTail]:
        """Rows of item (+ gists unless `full`) + query (+ score token) → (rows, each item's token ids,
        the query's tail)."""
        q = self._query_tail(query)
        item_ids, _ = self.item_ids(items)
        gists = [] if full else [self.gist_embeddings]
        rows = [torch.cat([self._embed(ids), *gists, q.embeds]) for ids in item_ids]
        return rows, item_ids, q

    def _score_tail(
        self,
        query: str,
        items: Sequence[str],
        full: bool,
        item_visibility: float = 0.0,
        all_layers: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows of `_tail_rows` → (scores (N,), the tail's layer outputs (N, L, ℓ, D) when `all_layers`,
        else an empty tensor)."""
        rows, item_ids, q = self._tail_rows(query, items, full)
        tail_len = q.embeds.shape[0]
        with torch.set_grad_enabled(self.training and torch.is_grad_enabled()):
            out, seq_lens = self._forward_rows(
                rows, None if full else self._lens(item_ids), item_visibility, all_layers
            )
            scores = self.tail_scores(self._tails(out.last_hidden_state, seq_lens, tail_len), q.targets)
            if not all_layers:
                return scores, scores.new_empty(0)
            layers = out.hidden_states[1:]  # [0] is the input embeddings
            return scores, torch.stack([self._tails(h, seq_lens, tail_len) for h in layers], dim=1)

    @torch.inference_mode()
    def attention(
        self, query: str, items: Sequence[str], full: bool
    ) -> tuple[torch.Tensor, list[list[int]], int]:
        """Where every position looks in `score_full`'s (or `score_masked`'s) forward: attention
        weights averaged over heads → ((N, L, S, S) float32, each item's token ids, tail length ℓ).
        Diagnostics only (`gistrank probe`): run with eager attention, the one implementation that
        returns weights."""
        rows, item_ids, q = self._tail_rows(query, items, full)
        base = self._base_lm()
        before = base.config._attn_implementation
        base.set_attn_implementation("eager")
        try:
            out, _ = self._forward_rows(rows, None if full else self._lens(item_ids), attentions=True)
        finally:
            base.set_attn_implementation(before)
        weights = torch.stack([a.float().mean(1) for a in out.attentions], dim=1)
        return weights, item_ids, q.embeds.shape[0]

    def _lens(self, item_ids: list[list[int]]) -> torch.Tensor:
        """Item token counts j (N,): what the gist mask needs of each row."""
        return torch.tensor([len(ids) for ids in item_ids], device=self.device)

    def score_packed(
        self,
        items: Sequence[str],
        queries: Sequence[Sequence[str]],
        full: bool = False,
        item_visibility: float = 0.0,
    ) -> list[torch.Tensor]:
        """Training throughput: all of `queries[i]` against `items[i]` in ONE row (`layout.packed`), so
        the long item runs once for many queries → per item, (Q_i,) logits, each equal to
        `score_masked` (or `score_full` when `full`) of that query alone."""
        if any(not qs for qs in queries):
            raise EmptyInputError("every packed item needs at least one query")
        item_ids, _ = self.item_ids(items)
        tails = [[self._query_tail(q) for q in qs] for qs in queries]
        gists = [] if full else [self.gist_embeddings]
        rows = [
            torch.cat([self._embed(ids), *gists, *(t.embeds for t in ts)])
            for ids, ts in zip(item_ids, tails, strict=True)
        ]
        query_lens = [[t.embeds.shape[0] for t in ts] for ts in tails]
        k = 0 if full else self.gist.num_gist
        total = max(r.shape[0] for r in rows)
        keep = None if full else self.gist.keep_item_prefix
        positions, allowed, cut = layout.packed([len(i) for i in item_ids], k, query_lens, total, keep)
        mask = layout.additive(allowed.to(self.device), self.dtype)
        if item_visibility > 0:
            mask = layout.with_item_visibility(mask, cut.to(self.device), item_visibility)
        if not full:
            mask = layout.with_read_bias(
                mask, layout.read_block(self._lens(item_ids), k, total), self.gist.gist_read_bias
            )
        with torch.set_grad_enabled(self.training and torch.is_grad_enabled()):
            hidden = self._decoder()(
                inputs_embeds=torch.nn.utils.rnn.pad_sequence(rows, batch_first=True),
                position_ids=positions.to(self.device),
                attention_mask=mask,
            ).last_hidden_state
            out = []
            for r, (ids, ts) in enumerate(zip(item_ids, tails, strict=True)):
                start, scores = len(ids) + k, []
                for t in ts:
                    block = hidden[r, start : start + t.embeds.shape[0]]  # (ℓ, D)
                    scores.append(self.tail_scores(block[None], t.targets))
                    start += t.embeds.shape[0]
                out.append(torch.cat(scores))
        return out

    def autoencode_loss(
        self,
        items: Sequence[str],
        num_tokens: int = 64,
        item_visibility: float = 0.0,
        targets_of: Sequence[str] | None = None,
    ) -> torch.Tensor:
        """ICAE-style objective: after the gists, regenerate the item's first `num_tokens` tokens (title
        and key attributes, rendered first) from the gists alone → mean token cross-entropy (nats).
        With a hybrid prefix of t raw tokens the target starts after it: what the prefix shows verbatim
        teaches the gists nothing. `targets_of[i]`: regenerate that text behind item i's gists instead —
        with another item's text, the control for how much the own item's gists actually tell.

        Layout per row: item + gists + AE prompt + target, under the same gist mask as scoring, so the
        target can reach the item only through the gists. The prompt keeps the first target token from
        being predicted by a gist position (gists read the item directly)."""
        prompt = self._embed(self.tokenizer(AE_PROMPT, add_special_tokens=False)["input_ids"])  # (P, D)
        if targets_of is not None and len(targets_of) != len(items):
            raise ValueError(f"targets_of has {len(targets_of)} texts for {len(items)} items")
        item_ids, _ = self.item_ids(items)
        target_ids = item_ids if targets_of is None else self.item_ids(targets_of)[0]
        start = max(int(self.tokenizer.bos_token_id is not None), self.gist.keep_item_prefix)
        targets = [ids[start : start + num_tokens] for ids in target_ids]
        if not all(targets):
            raise EmptyInputError(f"an item has no token after the first {start} to regenerate")
        rows = [
            torch.cat([self._embed(ids), self.gist_embeddings, prompt, self._embed(t)])
            for ids, t in zip(item_ids, targets, strict=True)
        ]
        item_lens = self._lens(item_ids)
        hidden = self._forward_rows(rows, item_lens, item_visibility)[0].last_hidden_state
        k, p = self.gist.num_gist, prompt.shape[0]
        losses = []
        for row, (j, t) in enumerate(zip(item_lens.tolist(), targets, strict=True)):
            start = j + k + p - 1  # the last prompt position predicts target[0]
            logits = self.lm.get_output_embeddings()(hidden[row, start : start + len(t)]).float()
            target = torch.tensor(t, device=self.device)
            losses.append(torch.nn.functional.cross_entropy(logits, target, reduction="sum"))
        return torch.stack(losses).sum() / sum(len(t) for t in targets)

    def autoencode_control(
        self,
        items: Sequence[str],
        num_tokens: int = 64,
        item_visibility: float = 0.0,
        shift: int | None = None,
    ) -> torch.Tensor:
        """`autoencode_loss` with each item's gists regenerating the text of the item `shift` places on
        (default: half the list away). Minus the own-gists loss on the same items (the same targets,
        other gists), it is what the gists tell about their own item in nats per token: ~0 while they
        carry nothing item-specific, whatever the decoder has learned about the format."""
        n = len(items) // 2 if shift is None else shift
        return self.autoencode_loss(items, num_tokens, item_visibility, [*items[n:], *items[:n]])

    def _causal_kv(self, rows: list[torch.Tensor], slots: list[torch.Tensor]) -> list[torch.Tensor]:
        """Run rows of embeddings causally, left-padded; per row, the K/V at `slots` (positions counted
        from the row's first real token) → [(L, 2, H_kv, len(slots[i]), h)]."""
        seq_lens = torch.tensor([r.shape[0] for r in rows], device=self.device)
        total = int(seq_lens.max())
        embeds = torch.stack([torch.nn.functional.pad(r, (0, 0, total - r.shape[0], 0)) for r in rows])
        positions, allowed = layout.left_padded(seq_lens, total)
        result = self._decoder()(
            inputs_embeds=embeds,
            position_ids=positions,
            attention_mask=layout.additive(allowed, self.dtype),
            use_cache=True,
        )
        pads = (total - seq_lens).tolist()
        layers = result.cache.layers  # each: keys / values (B, H_kv, S, h)
        out = []
        for i, (idx, pad) in enumerate(zip(slots, pads, strict=True)):
            at = idx + pad
            out.append(torch.stack([torch.stack([c.keys[i, :, at], c.values[i, :, at]]) for c in layers]))
        return out

    @torch.inference_mode()
    def compress(self, items: Sequence[str], batch_size: int = 16, progress: bool = False) -> list[GistKV]:
        """Compress items into per-layer K/V of their first p = min(t, j) tokens (hybrid prefix; none
        when t = 0) and the k gists, `batch_size` items per forward (sorted by length so a batch pads
        little)."""
        item_ids, truncated = self.item_ids(items)
        ITEMS_TRUNCATED.inc(sum(truncated))
        order = sorted(range(len(item_ids)), key=lambda i: len(item_ids[i]))
        out: list[GistKV | None] = [None] * len(item_ids)
        t = self.gist.keep_item_prefix
        fingerprint = self.fingerprint
        batches = range(0, len(order), batch_size)
        for start in tqdm(batches, desc="compress", unit="batch", disable=not progress):
            idx = order[start : start + batch_size]
            rows = [torch.cat([self._embed(item_ids[i]), self.gist_embeddings]) for i in idx]
            slots = [self._stored_slots(len(item_ids[i])) for i in idx]
            for i, kv in zip(idx, self._causal_kv(rows, slots), strict=True):
                j = len(item_ids[i])
                out[i] = GistKV(kv, fingerprint, j, truncated[i], prefix_tokens=min(t, j))
        return out  # type: ignore[return-value]

    def _stored_slots(self, j: int) -> torch.Tensor:
        """Positions an item of j tokens keeps: its first min(t, j) tokens, then the gists j … j+k-1."""
        p = min(self.gist.keep_item_prefix, j)
        return torch.cat([torch.arange(p), torch.arange(j, j + self.gist.num_gist)]).to(self.device)

    @torch.inference_mode()
    def compress_prefix(self, items: Sequence[str], batch_size: int = 16) -> list[GistKV]:
        """Baseline at the same budget: the K/V of each item's first t + k tokens in place of the
        hybrid prefix + gists — plain prefix caching cut to t + k positions. Stored like a hybrid
        entry whose "gists" are item tokens t … t+k-1 (item_tokens = t, so the query follows at t + k)
        and `score` serves it unchanged (with a read bias b, on those k columns too: they stand in for the
        gists)."""
        item_ids, _ = self.item_ids(items)
        t, n = self.gist.keep_item_prefix, self.gist.keep_item_prefix + self.gist.num_gist
        short = [i for i, ids in enumerate(item_ids) if len(ids) < n]
        if short:
            raise EmptyInputError(f"items {short} have fewer than t + k = {n} tokens: no prefix that long")
        out: list[GistKV] = []
        for start in range(0, len(item_ids), batch_size):
            rows = [self._embed(ids[:n]) for ids in item_ids[start : start + batch_size]]
            kvs = self._causal_kv(rows, [torch.arange(n, device=self.device)] * len(rows))
            out += [GistKV(kv, self.fingerprint, item_tokens=t, prefix_tokens=t) for kv in kvs]
        return out

    def check_kv(self, kvs: Sequence[GistKV]) -> None:
        """Refuse K/V that this model did not produce or that does not fit its shape, dtype or limits."""
        if not kvs:
            raise EmptyInputError("no candidates given")
        k, t = self.gist.num_gist, self.gist.keep_item_prefix
        fingerprint = self.fingerprint
        for i, x in enumerate(kvs):
            if x.fingerprint != fingerprint:
                raise FingerprintMismatchError(fingerprint, x.fingerprint, index=i)
            if not 0 <= x.item_tokens <= self.gist.max_item_tokens:
                raise KVFormatError(
                    f"candidate {i}: item_tokens={x.item_tokens} outside 0..{self.gist.max_item_tokens}"
                )
            if x.prefix_tokens != min(t, x.item_tokens):
                raise KVFormatError(
                    f"candidate {i}: prefix_tokens={x.prefix_tokens}, expected min(t={t}, j={x.item_tokens})"
                )
            expected = (self.num_layers, 2, self.num_kv_heads, x.prefix_tokens + k, self.head_dim)
            if tuple(x.kv.shape) != expected:
                raise KVFormatError(f"candidate {i}: K/V shape {tuple(x.kv.shape)}, expected {expected}")
            if x.kv.dtype != self.dtype:
                raise KVFormatError(f"candidate {i}: K/V dtype {x.kv.dtype}, expected {self.dtype}")

    @torch.inference_mode()
    def score(self, query: str, kvs: Sequence[GistKV]) -> torch.Tensor:
        """Online path: ONE forward of the query (+ score token) for all N candidates against their
        injected K/V → (N,) float32 scores. No item token and no placeholder is in the sequence."""
        self.check_kv(kvs)
        n, k = len(kvs), self.gist.num_gist
        q = self._query_tail(query)
        embeds = q.embeds[None].expand(n, -1, -1)  # (N, ℓ, D)
        prefix_lens = torch.tensor([x.prefix_tokens for x in kvs], device=self.device)  # (N,)
        slots = int(prefix_lens.max())
        stacked = torch.stack([_pad_prefix(x, slots) for x in kvs]).to(self.device)  # (N, L, 2, H_kv, P+k, h)
        cache = DynamicCache([(stacked[:, i, 0], stacked[:, i, 1]) for i in range(self.num_layers)])
        gist_start = torch.tensor([x.gist_start for x in kvs], device=self.device)  # (N,)
        ell = q.embeds.shape[0]
        positions = layout.online_positions(gist_start, k, ell)  # (N, ℓ)
        mask = layout.additive(layout.online_mask(prefix_lens, slots, k, ell), self.dtype)
        reads = layout.online_read_block(n, slots, k, ell, self.device)
        mask = layout.with_read_bias(mask, reads, self.gist.gist_read_bias)
        result = self._decoder()(
            inputs_embeds=embeds, position_ids=positions, attention_mask=mask, cache=cache, use_cache=True
        )
        return self.tail_scores(result.last_hidden_state, q.targets)


def _pad_prefix(x: GistKV, slots: int) -> torch.Tensor:
    """(L, 2, H_kv, p + k, h) → (L, 2, H_kv, slots + k, h): pad columns after the prefix, which the
    online mask hides, so rows with shorter prefixes (items shorter than t) share one batch."""
    missing = slots - x.prefix_tokens
    if missing == 0:
        return x.kv
    prefix, gists = x.kv[..., : x.prefix_tokens, :], x.kv[..., x.prefix_tokens :, :]
    pad = prefix.new_zeros(*prefix.shape[:-2], missing, prefix.shape[-1])
    return torch.cat([prefix, pad, gists], dim=-2)
