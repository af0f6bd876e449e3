"""Selection (training-free): keep, per layer and per KV head, the K/V of the k item positions that an
observation window attends to most (SnapKV / H2O style), instead of learned gist K/V.

Compression (`select_kv`): one causal forward of item + observation suffix, left-padded; the
observation rows run last, with eager attention, so their weights exist (and no others: the pass
costs about 1.2 SDPA forwards, the whole forward in eager attention 1.5). The observation rows are
the item's last `select_window` tokens and the query template's lead-in (e.g. "\\nQuery: "), appended
after the item at positions j, j+1, … as a query would be: they stand in for "what a query reads".
Per layer, their attention to each candidate column (item positions p … j-1, after the hybrid
prefix) is summed over rows and over the query heads of each KV head, average-pooled over
`select_pool` neighbouring positions (so whole words survive, not single sub-tokens), and the top k
columns are kept in position order. The suffix never changes the item's K/V (causal), so it is not
stored.

`select_scorer="kvzip"` (KVzip, arXiv 2505.23416) observes with a teacher-forced reconstruction instead:
the suffix is a repeat prompt and the item's tokens again, and a column's importance is the most
attention any reconstruction row (in any query head of its KV head) pays it. It asks what the item
needs to be restated, not what one query reads, so the kept columns serve queries nobody has asked
yet — the stored unit's situation. It costs a forward of about 2j positions, j of them eager.

Per-head budgets (`select_head_budget="adaptive"`, Ada-KV, arXiv 2407.11550): a layer's heads do not
need the same number of columns — one head's attention is spread over the item, another's sits on a
few tokens. The layer's k·H_kv columns go, after each head's own top max(1, k/5) (Ada-KV's safeguard),
to the layer's most important columns whatever head they are in; the stored unit records each head's
share (`StoredUnit.head_tails`) and the bytes stay those of k columns a head.

Stored unit, as for gists: `(L, 2, H_kv, p + s, h)` with p = min(t, j) raw prefix columns and
s = min(k, j - p) selected columns; keys keep the rotation of their original positions. An item no
longer than t + k keeps every position. Online, the query is numbered from the item's end, j + i,
exactly as in the full-context forward it approximates; the reference (`selected_mask_scores`) is
that full forward with each layer's and head's query rows seeing only the kept columns.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from reranker.core import layout
from reranker.core.compressors.base import Compressor, Reader
from reranker.core.config import RerankerConfig
from reranker.core.kv import Kept, held_columns

REPEAT_PROMPT = "\n\nRepeat the previous context exactly.\n"  # KVzip's reconstruction prompt
HEAD_FLOOR = 0.2  # per-head budgets: the share of k every head keeps of its own (Ada-KV's safeguard α)


def observation_suffix(model: nn.Module) -> list[int]:
    """Token ids appended after the item to observe it: the query template's text before {query}."""
    lead = model.gist.query_template.partition("{query}")[0]
    return model.tokenizer(lead, add_special_tokens=False)["input_ids"]


@contextmanager
def eager_attention(model: nn.Module) -> Iterator[None]:
    """Run `model` with eager attention (the one implementation that returns weights), then restore."""
    base = model.base_lm()
    before = base.config._attn_implementation
    base.set_attn_implementation("eager")
    try:
        yield
    finally:
        base.set_attn_implementation(before)


def _repeat_suffix(model: nn.Module, item_ids: list[int]) -> list[int]:
    """KVzip's observation rows: a repeat prompt, then the item's tokens again (BOS dropped)."""
    prompt = model.tokenizer(REPEAT_PROMPT, add_special_tokens=False)["input_ids"]
    bos = model.tokenizer.bos_token_id
    return prompt + (item_ids[1:] if bos is not None and item_ids[:1] == [bos] else item_ids)


def select_kv(
    model: nn.Module, item_ids: Sequence[list[int]], layouts: Sequence[RerankerConfig] | None = None
) -> list[dict[RerankerConfig, Kept]]:
    """Per item and per layout (default: the model's own settings), the kept K/V → {layout:
    Kept((L, 2, H_kv, p + S, h), head shares)} in the storage dtype (module docstring). The attention
    scores do not depend on k, t or the per-head rule, so every layout comes out of the same forward: one
    pass serves a sweep over budgets, hybrid prefixes and per-head shares."""
    return [{c: kept for c, (kept, _) in per.items()} for per in _select(model, item_ids, layouts)]


def selected_columns(model: nn.Module, item_ids: Sequence[list[int]]) -> list[torch.Tensor]:
    """The item positions `select_kv` keeps after the prefix → per item (L, H_kv, S), ascending; under
    per-head budgets a head with fewer than S repeats its first column to fill its row."""
    return [per[model.gist][1] for per in _select(model, item_ids, [model.gist])]


@torch.inference_mode()
def _select(
    model: nn.Module, item_ids: Sequence[list[int]], layouts: Sequence[RerankerConfig] | None
) -> list[dict[RerankerConfig, tuple[Kept, torch.Tensor]]]:
    window = model.gist.select_window
    layouts = list(dict.fromkeys(layouts or [model.gist]))
    kvzip = model.gist.select_scorer == "kvzip"
    lens = [len(ids) for ids in item_ids]
    # the rows that observe each item, appended after it: its last `window` tokens + the query's lead-in
    # (SnapKV: what a query reads), or a repeat prompt + the item again, teacher-forced (KVzip: what
    # reconstructing the item needs, whatever the query)
    suffixes = [_repeat_suffix(model, ids) if kvzip else observation_suffix(model) for ids in item_ids]
    rows = [model.embed(ids + suffix) for ids, suffix in zip(item_ids, suffixes, strict=True)]
    seq_lens = torch.tensor([r.shape[0] for r in rows], device=model.device)
    total = int(seq_lens.max())
    if total > model.lm.config.max_position_embeddings:  # KVzip reads ~2j positions
        raise ValueError(
            f"selection needs {total} positions, over the base's max_position_embeddings="
            f"{model.lm.config.max_position_embeddings}: lower max_item_tokens"
        )
    pads = (total - seq_lens).tolist()
    observers = torch.zeros(len(lens), total, device=model.device)  # (N, S): 1 on observation rows
    for i, (j, pad) in enumerate(zip(lens, pads, strict=True)):
        observers[i, pad + (j if kvzip else max(0, j - window)) :] = 1.0
    group = model.lm.config.num_attention_heads // model.num_kv_heads
    # every observation row lies in the last `observed` slots (rows end in the last slot): only those
    # run with eager attention and form weights (`left_padded_forward`)
    observed = min(max(len(s) for s in suffixes) + (0 if kvzip else window), total)
    mass: list[torch.Tensor] = []  # per layer (N, H_kv, S): attention the observers pay each column

    def observe(_module: nn.Module, _args: object, output: tuple) -> tuple:
        if output[1] is None:  # the part before the observation rows: no weights formed
            return output
        weights = output[1].float()  # (N, H_q, observed, S)
        rows_of = observers[:, total - observed :]  # (N, observed)
        if kvzip:  # a column matters if any reconstruction row, in any head of the group, needs it
            per_head = (weights * rows_of[:, None, :, None]).amax(2)  # (N, H_q, S)
            mass.append(per_head.view(len(lens), -1, group, total).amax(2))
        else:  # SnapKV: the attention mass the window pays a column, summed over the group
            per_head = torch.einsum("nhqs,nq->nhs", weights, rows_of)  # (N, H_q, S)
            mass.append(per_head.view(len(lens), -1, group, total).sum(2))
        return (output[0], None)  # drop the weights at once

    # no output_attentions: eager attention modules return their weights anyway, and asking for them
    # makes transformers' own capture hook keep every layer's weights until the forward ends
    hooks = [a.register_forward_hook(observe) for a in model.attention_modules()]
    try:
        result, _ = model.left_padded_forward(rows, observed, lambda: eager_attention(model))
    finally:
        for h in hooks:
            h.remove()
    if len(mass) != model.num_layers:
        raise RuntimeError(f"observed {len(mass)} of {model.num_layers} layers' attention weights")
    out = []
    for i, (j, pad) in enumerate(zip(lens, pads, strict=True)):
        per_layout = {}
        for asked in layouts:
            p, k = min(asked.keep_item_prefix, j), asked.num_gist
            adaptive = asked.select_head_budget == "adaptive"
            prefix = torch.arange(pad, pad + p, device=model.device)
            chosen = torch.stack(
                [_chosen(m[i, :, pad + p : pad + j], k, model.gist.select_pool, adaptive) for m in mass]
            )  # (L, H_kv, j - p)
            counts = chosen.sum(-1)  # (L, H_kv) columns each head keeps
            widest = int(counts.max())
            # each head's kept columns in position order, then (past its count) a repeat of its first
            # one: a repeat changes no visible set (the reference's scatter), and its K/V is zeroed below
            cols = (~chosen).to(torch.int8).argsort(dim=-1, stable=True)[..., :widest]
            real = held_columns(0, counts)  # (L, H_kv, S)
            cols = torch.where(real, cols, cols[..., :1]) + p
            layers = []
            for cache, at, keep in zip(result.cache.layers, cols + pad, real, strict=True):  # at: (H_kv, S)
                both = torch.stack([cache.keys[i], cache.values[i]])  # (2, H_kv, total, h)
                chosen_kv = torch.stack([_gather(x, at) for x in both]) * keep[..., None]  # (2, H_kv, S, h)
                layers.append(torch.cat([both[:, :, prefix], chosen_kv], dim=2))  # (2, H_kv, p + S, h)
            shares = None if bool(real.all()) else tuple(tuple(row) for row in counts.tolist())
            per_layout[asked] = (Kept(torch.stack(layers).to(model.kv_dtype), shares), cols)
        out.append(per_layout)
    return out


def _chosen(mass: torch.Tensor, k: int, pool: int, adaptive: bool) -> torch.Tensor:
    """(H, n) attention mass over n candidate columns → (H, n) bool, the columns kept: every column when
    n ≤ k; else k per head (uniform), or (adaptive, Ada-KV) k·H in all, each head first its own top
    max(1, k/5) and the rest to the layer's most important columns whichever head they are in."""
    heads, n = mass.shape
    chosen = torch.zeros(heads, n, dtype=torch.bool, device=mass.device)
    if n <= k:
        return chosen.fill_(True)
    pooled = torch.nn.functional.avg_pool1d(
        mass[:, None], pool, stride=1, padding=pool // 2, count_include_pad=False
    )[:, 0, :n]
    own = max(1, int(HEAD_FLOOR * k)) if adaptive else k
    chosen.scatter_(1, pooled.topk(own, dim=-1).indices, True)
    if own < k:
        shared = pooled.masked_fill(chosen, float("-inf")).flatten().topk(heads * (k - own)).indices
        chosen.view(-1)[shared] = True
    return chosen


def _gather(x: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """x (H, S, h), at (H, s) → (H, s, h): each head its own columns."""
    return x.gather(1, at[..., None].expand(-1, -1, x.shape[-1]))


def selected_mask_scores(
    model: nn.Module, query: str, items: Sequence[str], kept: Sequence[torch.Tensor]
) -> torch.Tensor:
    """Reference for selection: the full-context forward of item + query (+ score token) in which, at
    every layer and head, the query rows see only the item's first p tokens and its kept columns
    `kept[i]` (L, H_kv, s), plus the query causally; item rows stay causal → (N,) scores."""
    rows, item_ids, q = model.tail_rows(query, items, full=True)
    lens = [len(ids) for ids in item_ids]
    seq_lens = torch.tensor([r.shape[0] for r in rows], device=model.device)
    total = int(seq_lens.max())
    base = layout.full_mask(seq_lens, total)  # (N, S, S)
    group = model.lm.config.num_attention_heads // model.num_kv_heads
    masks = []
    for layer in range(model.num_layers):
        allowed = base[:, None].repeat(1, model.num_kv_heads, 1, 1)  # (N, H_kv, S, S)
        for i, j in enumerate(lens):
            p = min(model.gist.keep_item_prefix, j)
            visible = torch.zeros(model.num_kv_heads, total, dtype=torch.bool, device=model.device)
            visible[:, :p] = True
            visible.scatter_(1, kept[i][layer].to(model.device), True)
            allowed[i, :, j:, :j] = visible[:, None, :j]  # query rows × item columns
        allowed = allowed.repeat_interleave(group, dim=1)  # (N, H_q, S, S)
        masks.append(layout.additive(allowed, model.dtype))

    with torch.inference_mode(), model.layer_masks(masks):
        ell = q.embeds.shape[0]
        out, seq_lens = model.forward_rows(rows, None, ell)
        return model.tail_scores(model.tails(out.last_hidden_state, seq_lens, ell), q.targets)


class SelectCompressor(Compressor):
    name = "select"
    sweepable = ("num_gist", "keep_item_prefix", "select_head_budget")

    @torch.inference_mode()
    def compress(
        self, model: Reader, item_ids: Sequence[list[int]], layouts: Sequence[RerankerConfig]
    ) -> list[dict[RerankerConfig, Kept]]:
        return select_kv(model, item_ids, self.check_layouts(model, layouts))

    def tail_slots(self, budget: int, item_tokens: int, prefix_tokens: int) -> int:
        return min(budget, item_tokens - prefix_tokens)

    def query_start(self, budget: int, item_tokens: int, prefix_tokens: int) -> int:
        return item_tokens  # kept columns keep their positions: the query follows the whole item

    def reference_scores(self, model: Reader, query: str, items: Sequence[str]) -> torch.Tensor:
        kept = selected_columns(model, model.item_ids(items)[0])
        return selected_mask_scores(model, query, items, kept)

    def recompute_tokens(self, item_tokens: int, budget: int, prefix_tokens: int) -> int:
        return item_tokens
