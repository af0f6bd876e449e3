"""Reranker: a decoder-only RoPE LM (Llama, Qwen2, …) read as a cross-encoder over stored K/V.

One reader = body + score rule + compressor. The compressor (`reranker/core/compressors/`) says what an
item's fixed budget of stored positions holds — its prefix, selected columns or learned gists — where
the query starts and which full forward the online path must equal; this module runs the forwards.

Parameters added to the base LM (all in `gist.safetensors` of a checkpoint):
    gist_embeddings  (k, D)  k distinct learned inputs appended after the item
    score_embedding  (1, D)  the final token whose last hidden state is scored
    head             D → 1   relevance logit
    reader_adapter           low-rank adapters at query rows only (`reader_adapter_rank` > 0;
                             `core/reader_adapter.py`): a trained reader over any store
(with `score_rule="query_likelihood"` neither is used: the score is log p(query | gists) under the LM's
own head, which an autoencoding stage has already taught to read gists — `tail_scores`)
plus, when trained with `add_lora`, LoRA adapters on the body (`adapter/` of a checkpoint, peft format).
Loading, saving, LoRA, the fingerprint and the compute dtype: `weights.py`.

The inference forwards (sequence layouts, masks and position ids in `layout.py`):
    compress(items)            the compressor's stored unit per item           → list[StoredUnit]
    score(query, kvs)          query (+ score token) against injected K/V      → (N,) online path
    rank(query, items)         score, sorted                                   → [(index, score)]
    reference_scores(q, items) the compressor's full forward, items present    → (N,) equivalence
    score_masked(query, items) item + gists + query (+ score), gist mask       → (N,) gists' reference
    score_full(query, items)   item + query (+ score), plain causal            → (N,) shadow/teacher
Training forwards (packed scoring, autoencoding) live in `reranker/training/forwards.py`, the
baselines in `reranker/evaluation/baselines.py`, attention capture in the probe.

`score(q, compress(items)) == reference_scores(q, items)` (fp32, ≤ 1e-4 relative) for every
compressor is the core's acceptance test: tests/test_equivalence.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import NamedTuple

import torch
from torch import nn
from tqdm.auto import tqdm
from transformers import DynamicCache, PreTrainedTokenizerBase
from transformers.modeling_outputs import BaseModelOutputWithPast

from reranker.core import kv_codec, layout
from reranker.core.compressors import Compressor, compressor_for
from reranker.core.config import RerankerConfig
from reranker.core.errors import (
    EmptyInputError,
    FingerprintMismatchError,
    KVFormatError,
    QueryTooLongError,
)
from reranker.core.fusion import Fusion
from reranker.core.gist_adapter import GistAdapter
from reranker.core.kv import Kept, StoredUnit
from reranker.core.layout import QueryTail
from reranker.core.reader_adapter import ReaderAdapter
from reranker.core.weights import RerankerWeights

_INIT_SEED = 0  # gist/head init is seeded so two fresh wraps of one base share a fingerprint


class StackedUnits(NamedTuple):
    """Stored units batched for `read_stored`: K/V (N, L, 2, H_kv, P + K, h), prefix lengths p (N,), tail
    lengths s (N,) or (N, L, H_kv), query starts (N,)."""

    stacked: torch.Tensor
    prefix_lens: torch.Tensor
    tail_lens: torch.Tensor
    starts: torch.Tensor

    def tiled(self, q: int) -> StackedUnits:
        """Each unit once per query, query-major like `QueryTail.rows` (Q·N rows)."""
        return StackedUnits(*(x.repeat(q, *([1] * (x.dim() - 1))) for x in self))


class Reranker(RerankerWeights):
    def __init__(
        self,
        lm: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        gist: RerankerConfig,
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
        dtype = lm.get_input_embeddings().weight.dtype  # the storage dtype at load, compute after to_compute
        longest = gist.max_item_tokens + gist.num_gist + gist.max_query_tokens + 1
        if longest > cfg.max_position_embeddings:
            raise ValueError(
                f"max_item_tokens + num_gist + max_query_tokens + 1 = {longest} exceeds the base model's "
                f"max_position_embeddings={cfg.max_position_embeddings}"
            )

        self.gist_embeddings = nn.Parameter(self.initial_gist_embeddings(lm, gist.num_gist))  # (k, D)
        self.gist_adapter = (
            GistAdapter(self.num_layers, hidden, gist.gist_adapter_rank, dtype, lm.device)
            if gist.gist_adapter_rank
            else None
        )
        self.reader_adapter = (
            ReaderAdapter(lm.get_decoder().layers, gist.reader_adapter_rank, dtype, lm.device)
            if gist.reader_adapter_rank
            else None
        )
        g = torch.Generator().manual_seed(_INIT_SEED + 1)
        self.score_embedding = nn.Parameter(self._mean_plus_noise(lm, 1, g))  # (1, D)
        self.head = nn.Linear(hidden, 1, device=lm.device, dtype=dtype)
        with torch.no_grad():
            self.head.weight.copy_(torch.randn(1, hidden, generator=g) / hidden**0.5)
            self.head.bias.zero_()
        self._fingerprint: tuple[int, str] | None = None
        self._reader_fingerprint: tuple[int, str] | None = None

    @staticmethod
    def _mean_plus_noise(lm: nn.Module, n: int, g: torch.Generator) -> torch.Tensor:
        """n rows of mean input embedding + a small distinct offset each: on-distribution, yet
        distinguishable before any training."""
        emb = lm.get_input_embeddings().weight.detach().float().cpu()  # the seeded noise is drawn on CPU
        noise = torch.randn(n, emb.shape[1], generator=g) * (0.1 * emb.std(0))
        weight = lm.get_input_embeddings().weight
        return (emb.mean(0) + noise).to(weight.device, weight.dtype)

    @classmethod
    def initial_gist_embeddings(cls, lm: nn.Module, num_gist: int) -> torch.Tensor:
        """The seeded untrained gists of `lm` — also the "untrained gists" baseline of the evaluation."""
        g = torch.Generator().manual_seed(_INIT_SEED)
        return cls._mean_plus_noise(lm, num_gist, g)

    @torch.inference_mode(False)
    def with_gist_config(self, gist: RerankerConfig, keep_gists: bool = False) -> Reranker:
        """The same body (shared, not copied), score token and head under `gist`, with that config's
        untrained gists (a warm start for a student, the "untrained gists" baseline) — or with these
        trained gists when `keep_gists` and the gist layout (k, t, windows) is unchanged: the same model read
        with other settings, e.g. a longer item cap or another compressor."""
        other = Reranker(self.lm, self.tokenizer, gist, self.base_ref)
        if keep_gists and gist.slot_layout != self.gist.slot_layout:
            raise ValueError(
                f"trained gists have k={self.gist.num_gist}, t={self.gist.keep_item_prefix}, "
                f"gist_pool_windows={self.gist.gist_pool_windows}"
            )
        if keep_gists and gist.gist_adapter_rank != self.gist.gist_adapter_rank:
            raise ValueError(f"trained gists have gist_adapter_rank={self.gist.gist_adapter_rank}")
        with torch.no_grad():
            other.score_embedding.copy_(self.score_embedding)
            other.head.load_state_dict(self.head.state_dict())
            if self.reader_adapter is not None and gist.reader_adapter_rank == self.gist.reader_adapter_rank:
                other.reader_adapter.load_state_dict(self.reader_adapter.state_dict())  # the same reader
            if keep_gists:
                other.gist_embeddings.copy_(self.gist_embeddings)
                if self.gist_adapter is not None:  # same rank (checked above): both have one
                    other.gist_adapter.load_state_dict(self.gist_adapter.state_dict())
        return other.eval()

    @property
    def compressor(self) -> Compressor:
        """What this reader's stored positions are (`gist.compressor`)."""
        return compressor_for(self.gist.compressor)

    # ------------------------------------------------------------------------------ tokenization
    @property
    def device(self) -> torch.device:
        return self.gist_embeddings.device

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
        return len(self._query_tokens(query)[0]) + (self.gist.score_rule == "head")

    def embed(self, ids: list[int]) -> torch.Tensor:
        """Input embeddings of token ids → (len(ids), D)."""
        return self.lm.get_input_embeddings()(torch.tensor(ids, dtype=torch.long, device=self.device))

    def query_tail(self, query: str) -> QueryTail:
        """What follows the gists for `query`: its templated tokens (+ the score token) and their targets."""
        ids, start = self._query_tokens(query)
        embeds = self.embed(ids)  # (ℓ, D)
        targets = torch.full((len(ids),), -1, dtype=torch.long, device=self.device)
        if self.gist.score_rule == "head":
            return QueryTail(torch.cat([embeds, self.score_embedding]), torch.cat([targets, targets[:1]]))
        targets[start - 1 : -1] = torch.tensor(ids[start:], device=self.device)
        return QueryTail(embeds, targets)

    def token_counts(self, item_ids: list[list[int]]) -> torch.Tensor:
        """Item token counts j (N,): what the gist mask needs of each row."""
        return torch.tensor([len(ids) for ids in item_ids], device=self.device)

    # ------------------------------------------------------------------------------- the forwards
    def decoder(self) -> nn.Module:
        """The transformer body without its LM head (through the LoRA wrapper when there is one)."""
        return self.lm.get_decoder()

    def attention_modules(self) -> list[nn.Module]:
        return [layer.self_attn for layer in self.decoder().layers]

    @contextmanager
    def layer_masks(self, masks: Sequence[torch.Tensor]) -> Iterator[None]:
        """Within the block, layer i attends under `masks[i]` (additive, (N, H_q, S_q, S_k)) whatever mask
        the forward is given: the one way to let each layer's heads see different columns."""

        def swap(index: int) -> Callable:
            return lambda _module, args, kwargs: (args, kwargs | {"attention_mask": masks[index]})

        layers = self.attention_modules()
        hooks = [a.register_forward_pre_hook(swap(i), with_kwargs=True) for i, a in enumerate(layers)]
        try:
            yield
        finally:
            for h in hooks:
                h.remove()

    def gists_adapted(self, rows: torch.Tensor | None = None) -> AbstractContextManager:
        """Within the block, forwards run the gist adapter at `rows` (bool (N, S); None: every row) —
        a no-op for a model without one (`core/gist_adapter.py`)."""
        if self.gist_adapter is None:
            return nullcontext()
        return self.gist_adapter.on_rows(self.decoder().layers, rows)

    def reader_adapted(self, rows: torch.Tensor | None = None) -> AbstractContextManager:
        """Within the block, forwards run the reader adapter at `rows` (bool (N, S); None: every row, as
        online where only the query runs) — a no-op for a model without one (`core/reader_adapter.py`)."""
        if self.reader_adapter is None:
            return nullcontext()
        return self.reader_adapter.on_rows(self.decoder().layers, rows)

    def gist_rows(self, item_lens: torch.Tensor, total: int) -> torch.Tensor:
        """The gist slots j … j+k-1 of rows laid out item + gists + … → bool (N, total)."""
        pos = torch.arange(total, device=item_lens.device)[None]
        return (pos >= item_lens[:, None]) & (pos < item_lens[:, None] + self.gist.num_gist)

    def forward_rows(
        self, rows: list[torch.Tensor], item_lens: torch.Tensor | None, tail_len: int = 0, **outputs: bool
    ) -> tuple[BaseModelOutputWithPast, torch.Tensor]:
        """Right-pad rows of embeddings and run the decoder → (its output, seq_lens (N,)).

        rows: N tensors (S_i, D). item_lens None: plain causal (full context); else (N,) item token
        counts j of rows laid out item + gists + tail, under the gist mask. `tail_len`: ℓ, the query's
        rows at the end of every row, where the reader adapter acts (as it does online). `outputs`:
        extra decoder outputs (output_hidden_states, output_attentions) for diagnostics."""
        seq_lens = torch.tensor([r.shape[0] for r in rows], device=self.device)
        total = int(seq_lens.max())
        embeds = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)  # (N, S, D); pad never attended
        positions = torch.arange(total, device=self.device).expand(len(rows), -1)  # (N, S)
        if item_lens is None:
            allowed = layout.full_mask(seq_lens, total)
        else:
            k, t = self.gist.num_gist, self.gist.keep_item_prefix
            windows = self.gist.gist_pool_windows
            allowed = layout.training_mask(item_lens, k, seq_lens, total, t, windows)  # (N, S, S)
        mask = layout.additive(allowed, self.dtype)  # (N, 1, S, S)
        adapted = nullcontext() if item_lens is None else self.gists_adapted(self.gist_rows(item_lens, total))
        pos = torch.arange(total, device=self.device)[None]
        query_rows = (pos >= seq_lens[:, None] - tail_len) & (pos < seq_lens[:, None])  # (N, S)
        with adapted, self.reader_adapted(query_rows):
            out = self.decoder()(inputs_embeds=embeds, position_ids=positions, attention_mask=mask, **outputs)
        return out, seq_lens

    def tail_scores(
        self, tail: torch.Tensor, targets: torch.Tensor, lens: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The score rule: the query's last-layer outputs (N, ℓ, D) → relevance scores (N,) float32.
        `targets`: (ℓ,) shared by every row, or (N, ℓ) with each row's real length in `lens`.

        head: a linear logit of the score token (the last real row). query_likelihood: Σ log p(token)
        over the query's tokens (`targets` ≥ 0), each predicted from the row before it — log p(query |
        item), i.e. how well what the gists hold predicts what was asked; ranking candidates by it is
        ranking by p(item | query) under a uniform prior."""
        if self.gist.score_rule == "head":
            n = tail.shape[0]
            last = tail[:, -1] if lens is None else tail[torch.arange(n, device=tail.device), lens - 1]
            return self.head(last).squeeze(-1).float()
        return likelihood(*self.query_logprobs(tail, targets))

    def query_logprobs(self, tail: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The next-token distributions where query tokens are predicted: log-probabilities (N, n, V)
        float32 at the n positions with a target in some row, and those targets (N, n), -1 where a row
        has none (its padding)."""
        targets = targets.expand(tail.shape[0], -1)  # (N, ℓ)
        scored = (targets >= 0).any(0).nonzero().squeeze(-1)  # (n,)
        logits = self.lm.get_output_embeddings()(tail[:, scored]).float()  # (N, n, V)
        return torch.log_softmax(logits, dim=-1), targets[:, scored]

    @staticmethod
    def tails(hidden: torch.Tensor, seq_lens: torch.Tensor, tail_len: int) -> torch.Tensor:
        """The last `tail_len` real positions of each right-padded row: (N, S, …) → (N, ℓ, …)."""
        tail = seq_lens[:, None] - tail_len + torch.arange(tail_len, device=hidden.device)  # (N, ℓ)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device)[:, None], tail]

    def tail_rows(
        self, query: str, items: Sequence[str], full: bool
    ) -> tuple[list[torch.Tensor], list[list[int]], QueryTail]:
        """Rows of item (+ gists unless `full`) + query (+ score token) → (rows, each item's token ids,
        the query's tail)."""
        return self._rows(query, self.item_ids(items)[0], full)

    def _rows(
        self, query: str, item_ids: list[list[int]], full: bool
    ) -> tuple[list[torch.Tensor], list[list[int]], QueryTail]:
        q = self.query_tail(query)
        gists = [] if full else [self.gist_embeddings]
        rows = [torch.cat([self.embed(ids), *gists, q.embeds]) for ids in item_ids]
        return rows, item_ids, q

    def _score_rows(self, query: str, item_ids: list[list[int]], full: bool) -> torch.Tensor:
        rows, item_ids, q = self._rows(query, item_ids, full)
        with torch.set_grad_enabled(self.training and torch.is_grad_enabled()):
            ell = q.embeds.shape[0]
            out, seq_lens = self.forward_rows(rows, None if full else self.token_counts(item_ids), ell)
            tail = self.tails(out.last_hidden_state, seq_lens, ell)  # (N, ℓ, D)
            return self.tail_scores(tail, q.targets)

    def score_masked(self, query: str, items: Sequence[str]) -> torch.Tensor:
        """Training-layout reference: item + gists + query (+ score token) under the gist mask → (N,)."""
        return self._score_rows(query, self.item_ids(items)[0], full=False)

    def score_full(self, query: str, items: Sequence[str]) -> torch.Tensor:
        """Full-context cross-encoder (no gists): item + query (+ score token), plain causal → (N,)."""
        return self.score_full_ids(query, self.item_ids(items)[0])

    def score_full_ids(self, query: str, item_ids: list[list[int]]) -> torch.Tensor:
        """`score_full` of items given as token ids (e.g. cut to a budget) → (N,)."""
        return self._score_rows(query, item_ids, full=True)

    def reference_scores(self, query: str, items: Sequence[str]) -> torch.Tensor:
        """The forward, items present, that `score(query, compress(items))` equals (the compressor's)."""
        return self.compressor.reference_scores(self, query, items)

    def left_padded_forward(
        self,
        rows: list[torch.Tensor],
        tail_rows: int = 0,
        tail_mode: Callable[[], AbstractContextManager] = nullcontext,
        gist_tail: bool = False,
    ) -> tuple[BaseModelOutputWithPast, list[int]]:
        """Run rows of embeddings (S_i, D) causally, left-padded so every row ends in the last slot →
        (the decoder's output with its cache, each row's left padding). `tail_rows`: the last that
        many slots run in a second forward on the first one's cache, inside `tail_mode` — eager
        attention, the one implementation that returns attention weights ((N, H_q, tail_rows, S) of
        them, not (N, H_q, S, S), so observing a few rows costs about one ordinary forward), or the
        gist adapter on the gist slots. The output's hidden states then cover those slots only; its
        cache covers all. `gist_tail`: the tail rows are the gists after the item, under this model's
        gist mask (pooling windows when configured)."""
        seq_lens = torch.tensor([r.shape[0] for r in rows], device=self.device)
        total = int(seq_lens.max())
        embeds = torch.stack([torch.nn.functional.pad(r, (0, 0, total - r.shape[0], 0)) for r in rows])
        positions, allowed = layout.left_padded(seq_lens, total)  # (N, S), (N, S, S)
        if gist_tail and self.gist.gist_pool_windows:
            item_lens = seq_lens - tail_rows
            layout.pool_windows(allowed, item_lens, tail_rows, self.gist.keep_item_prefix, total - seq_lens)
        mask = layout.additive(allowed, self.dtype)  # (N, 1, S, S)
        split = total - min(tail_rows, total)
        result = None
        for start, stop, mode in ((0, split, nullcontext), (split, total, tail_mode)):
            if start == stop:
                continue
            with mode():
                result = self.decoder()(
                    inputs_embeds=embeds[:, start:stop],
                    position_ids=positions[:, start:stop],
                    attention_mask=mask[:, :, start:stop, :stop],
                    cache=None if result is None else result.cache,
                    use_cache=True,
                )
        return result, (total - seq_lens).tolist()

    def causal_kv(
        self, rows: list[torch.Tensor], slots: list[torch.Tensor], gist_rows: int = 0
    ) -> list[torch.Tensor]:
        """Run rows of embeddings causally, left-padded (the last `gist_rows` slots of each under the
        gist adapter); per row, the K/V at `slots` (positions counted from the row's first real token)
        → [(L, 2, H_kv, len(slots[i]), h)] in the storage dtype."""
        result, pads = self.left_padded_forward(rows, gist_rows, self.gists_adapted, gist_tail=gist_rows > 0)
        layers = result.cache.layers  # each: keys / values (B, H_kv, S, h)
        out = []
        for i, (idx, pad) in enumerate(zip(slots, pads, strict=True)):
            at = idx + pad
            kv = torch.stack([torch.stack([c.keys[i, :, at], c.values[i, :, at]]) for c in layers])
            out.append(kv.to(self.kv_dtype))
        return out

    @torch.inference_mode()
    def compress(
        self, items: Sequence[str], batch_size: int = 16, progress: bool = False
    ) -> list[StoredUnit]:
        """Compress items into their stored units (the compressor's K/V of the budget k = num_gist),
        `batch_size` items per forward, sorted by length so a batch pads little. Truncated items are
        flagged on their StoredUnit; the caller counts them."""
        item_ids, truncated = self.item_ids(items)
        order = sorted(range(len(item_ids)), key=lambda i: len(item_ids[i]))
        out: list[StoredUnit | None] = [None] * len(item_ids)
        batches = range(0, len(order), batch_size)
        for start in tqdm(batches, desc="compress", unit="batch", disable=not progress):
            idx = order[start : start + batch_size]
            per_item = self.compressor.compress(self, [item_ids[i] for i in idx], [self.gist])
            for i, kvs in zip(idx, per_item, strict=True):
                out[i] = self.stored_unit(kvs[self.gist], len(item_ids[i]), truncated[i])
        return out  # type: ignore[return-value]

    def stored_unit(self, kept: Kept, item_tokens: int, truncated: bool = False) -> StoredUnit:
        """K/V (L, 2, H_kv, p + s, h) of an item of j tokens, compressed under this reader's settings,
        as the stored unit: stamped with this reader's fingerprint, compressor, budget and query start."""
        k, p = self.gist.num_gist, min(self.gist.keep_item_prefix, item_tokens)
        return StoredUnit(
            kept.kv.contiguous(),
            self.fingerprint,
            compressor=self.compressor.name,
            budget=k,
            item_tokens=item_tokens,
            query_start=self.compressor.query_start(k, item_tokens, p),
            prefix_tokens=p,
            truncated=truncated,
            head_tails=kept.head_tails,
        )

    def as_stored(self, units: Sequence[StoredUnit]) -> list[StoredUnit]:
        """`units` as a reader of the store gets them back: encoded at this model's storage
        (`RerankerConfig.storage`) and decoded — what an evaluation must score to measure what is served.
        A float storage equal to the K/V's dtype is lossless, so those are returned as they are."""
        storage = self.gist.storage
        if storage == str(self.kv_dtype).removeprefix("torch."):
            return list(units)
        blobs = (kv_codec.encode(u, content_hash="0" * 64, storage_dtype=storage) for u in units)
        return [
            kv_codec.decode(b, expected_fingerprint=self.fingerprint, dtype=self.kv_dtype).kv for b in blobs
        ]

    def check_kv(self, kvs: Sequence[StoredUnit]) -> None:
        """Refuse K/V that this model did not produce or that does not fit its layout, dtype or limits."""
        if not kvs:
            raise EmptyInputError("no candidates given")
        t, k = self.gist.keep_item_prefix, self.gist.num_gist
        fingerprint, compressor = self.fingerprint, self.compressor
        for i, x in enumerate(kvs):
            if x.fingerprint != fingerprint:
                raise FingerprintMismatchError(fingerprint, x.fingerprint, index=i)
            if (x.compressor, x.budget) != (compressor.name, k):
                held, read = f"{x.compressor} k={x.budget}", f"{compressor.name} k={k}"
                raise KVFormatError(f"candidate {i}: holds {held}, this model reads {read}")
            if not 0 <= x.item_tokens <= self.gist.max_item_tokens:
                raise KVFormatError(
                    f"candidate {i}: item_tokens={x.item_tokens} outside 0..{self.gist.max_item_tokens}"
                )
            if x.prefix_tokens != min(t, x.item_tokens):
                raise KVFormatError(
                    f"candidate {i}: prefix_tokens={x.prefix_tokens}, expected min(t={t}, j={x.item_tokens})"
                )
            start = compressor.query_start(k, x.item_tokens, x.prefix_tokens)
            if x.query_start != start:
                raise KVFormatError(f"candidate {i}: query_start={x.query_start}, expected {start}")
            stored = x.prefix_tokens + compressor.tail_slots(k, x.item_tokens, x.prefix_tokens)
            if x.positions != stored:
                held = f"K/V shape {tuple(x.kv.shape)} holds {x.positions} positions a head"
                raise KVFormatError(f"candidate {i}: {held}, expected {stored}")
            expected = (self.num_layers, 2, self.num_kv_heads, x.slots, self.head_dim)
            if tuple(x.kv.shape) != expected:
                raise KVFormatError(f"candidate {i}: K/V shape {tuple(x.kv.shape)}, expected {expected}")
            if x.kv.dtype != self.kv_dtype:
                raise KVFormatError(f"candidate {i}: K/V dtype {x.kv.dtype}, expected {self.kv_dtype}")

    def read_kv(self, blob: bytes) -> StoredUnit:
        """A stored blob as K/V this model can score: decoded (its fingerprint must be this model's) in
        the model's K/V dtype and checked (`check_kv`). Raises `GistRankError` (`ForeignFingerprintError`
        for another model's blob) when it cannot be used."""
        kv = kv_codec.decode(blob, expected_fingerprint=self.fingerprint, dtype=self.kv_dtype).kv
        self.check_kv([kv])
        return kv

    @property
    def fusion(self) -> Fusion:
        """How first-stage scores are combined with this model's (`RerankerConfig.fusion`)."""
        return Fusion.parse(self.gist.fusion)

    def rank(
        self,
        query: str,
        items: Sequence[str] | Sequence[StoredUnit],
        top_k: int | None = None,
        batch_size: int = 16,
        first_stage_scores: Sequence[float] | None = None,
    ) -> list[tuple[int, float]]:
        """Rank candidates for `query`, best first → [(index into `items`, score)], the `top_k` best
        (all when None). `items`: texts (compressed here) or stored K/V (scored as they are). With
        `first_stage_scores` (one per item) the scores are fused with them by `fusion`, as served."""
        if not items:
            raise EmptyInputError("no candidates given")
        texts = all(isinstance(x, str) for x in items)
        kvs = self.compress(items, batch_size) if texts else list(items)  # type: ignore[arg-type]
        scores = self.score(query, kvs).tolist()  # type: ignore[arg-type]
        if first_stage_scores is not None:
            scores = self.fusion.fuse(scores, first_stage_scores)
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        return [(i, scores[i]) for i in order[:top_k]]

    def predict(
        self,
        pairs: Sequence[tuple[str, str]],
        batch_size: int = 16,
        first_stage_scores: Sequence[float] | None = None,
    ) -> list[float]:
        """CrossEncoder-style: one score per (query, item text) pair, in input order, read as the system
        reads it — each distinct item compressed once, each query scored over its items' stored K/V.
        With `first_stage_scores` (one per pair) each query's pairs are one candidate list, fused by
        `fusion` as served."""
        if not pairs:
            raise EmptyInputError("no (query, item) pairs given")
        if first_stage_scores is not None and len(first_stage_scores) != len(pairs):
            raise ValueError(f"{len(first_stage_scores)} first-stage scores for {len(pairs)} pairs")
        texts = list(dict.fromkeys(text for _, text in pairs))
        kv_of = dict(zip(texts, self.compress(texts, batch_size), strict=True))
        rows: dict[str, list[int]] = {}
        for i, (query, _) in enumerate(pairs):
            rows.setdefault(query, []).append(i)
        out = [0.0] * len(pairs)
        for query, at in rows.items():
            values = self.score(query, [kv_of[pairs[i][1]] for i in at]).tolist()
            if first_stage_scores is not None:
                values = self.fusion.fuse(values, [first_stage_scores[i] for i in at])
            for i, value in zip(at, values, strict=True):
                out[i] = value
        return out

    @torch.inference_mode()
    def score(self, query: str, kvs: Sequence[StoredUnit]) -> torch.Tensor:
        """Online path: ONE forward of the query (+ score token) for all N candidates against their
        injected K/V → (N,) float32 scores. No item token and no placeholder is in the sequence."""
        self.check_kv(kvs)
        return self.read_stored(self.query_tail(query), *self.stack_units(kvs))

    def stack_units(self, kvs: Sequence[StoredUnit]) -> StackedUnits:
        """Stored units as one batch for `read_stored` (padded columns are masked there)."""
        prefix_lens = torch.tensor([x.prefix_tokens for x in kvs], device=self.device)  # (N,) p
        if all(x.head_tails is None for x in kvs):
            tail_lens = torch.tensor([x.tail_slots for x in kvs], device=self.device)  # (N,) s
        else:  # per-head budgets: each layer's head its own share
            tail_lens = torch.stack([x.tail_lens() for x in kvs]).to(self.device)  # (N, L, H_kv)
        p_slots, s_slots = int(prefix_lens.max()), max(x.slots - x.prefix_tokens for x in kvs)
        stacked = torch.stack([_pad(x, p_slots, s_slots) for x in kvs])  # (N, L, 2, H_kv, P+K, h)
        starts = torch.tensor([x.query_start for x in kvs], device=self.device)  # (N,)
        return StackedUnits(stacked, prefix_lens, tail_lens, starts)

    def read_stored(
        self,
        q: QueryTail,
        stacked: torch.Tensor,
        prefix_lens: torch.Tensor,
        tail_lens: torch.Tensor,
        starts: torch.Tensor,
    ) -> torch.Tensor:
        """The query's forward against stored K/V → (N,) float32 scores: the online path's arithmetic,
        which training with a frozen reader runs with gradients into the gists' K/V.

        stacked: (N, L, 2, H_kv, P + K, h), each row's p prefix columns then its s tail columns, padded
        to P and K (masked); prefix_lens, tail_lens: (N,) p and s (or s per layer and head, (N, L, H_kv));
        starts: (N,) each query_start.
        `q`: one query for every row, or one a row (`QueryTail.rows`)."""
        return self.tail_scores(
            self.read_stored_hidden(q, stacked, prefix_lens, tail_lens, starts), q.targets, q.lens
        )

    def read_stored_hidden(
        self,
        q: QueryTail,
        stacked: torch.Tensor,
        prefix_lens: torch.Tensor,
        tail_lens: torch.Tensor,
        starts: torch.Tensor,
    ) -> torch.Tensor:
        """`read_stored`'s forward → the query rows' last-layer outputs (N, ℓ, D), before the score rule."""
        n, ell = stacked.shape[0], q.embeds.shape[-2]
        p_slots = int(prefix_lens.max())
        s_slots = stacked.shape[4] - p_slots
        stacked = stacked.to(self.device, self.dtype)
        cache = DynamicCache([(stacked[:, i, 0], stacked[:, i, 1]) for i in range(self.num_layers)])
        positions = layout.online_positions(starts, ell)  # (N, ℓ)
        allowed = self.compressor.online_mask(prefix_lens, p_slots, tail_lens, s_slots, ell)  # (N, ℓ, P+K+ℓ)
        if allowed.dim() == 3:  # one mask for every layer
            masks = [layout.additive(allowed, self.dtype)]  # (N, 1, ℓ, P+K+ℓ)
            per_layer: AbstractContextManager = nullcontext()
        else:  # (N, L, H_kv, ℓ, P+K+ℓ): per-head budgets, a mask per layer and query head
            group = self.lm.config.num_attention_heads // self.num_kv_heads
            masks = [layout.additive(a.repeat_interleave(group, 1), self.dtype) for a in allowed.unbind(1)]
            per_layer = self.layer_masks(masks)
        with per_layer, self.reader_adapted():
            result = self.decoder()(
                inputs_embeds=q.embeds.expand(n, -1, -1),  # (N, ℓ, D)
                position_ids=positions,
                attention_mask=masks[0],
                cache=cache,
                use_cache=True,
            )
        return result.last_hidden_state


def likelihood(logp: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Σ log p(target) over each row's query tokens: log-probabilities (N, n, V), targets (N, n) with -1
    where a row has none → (N,)."""
    picked = logp.gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)
    return (picked * (targets >= 0)).sum(-1)


def _pad(x: StoredUnit, prefix_slots: int, tail_slots: int) -> torch.Tensor:
    """(L, 2, H_kv, p + s, h) → (L, 2, H_kv, P + K, h): pad columns after the prefix and after the
    tail, which the online mask hides, so entries of different lengths share one batch (items
    shorter than t, or than t + k under selection)."""
    p = x.prefix_tokens
    prefix, tail = x.kv[..., :p, :], x.kv[..., p:, :]

    def padded(part: torch.Tensor, slots: int) -> torch.Tensor:
        missing = slots - part.shape[-2]
        return (
            part
            if missing == 0
            else torch.cat([part, part.new_zeros(*part.shape[:-2], missing, part.shape[-1])], -2)
        )

    return torch.cat([padded(prefix, prefix_slots), padded(tail, tail_slots)], dim=-2)
