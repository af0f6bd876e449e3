"""Where the gist mask is built and where position ids are computed — the exactness core.

Four sequence layouts, one per forward (N rows, k gists, ℓ = query tokens incl. the score token):

    training / reference (`score_masked`), right-padded:
        positions  0 … j-1 | j … j+k-1 | j+k … j+k+ℓ-1 | pad
        tokens     item    | gists     | query + score | pad
        mask       causal, minus the block (after-gist rows × item columns t … j-1): the query and the
                   score token see the item ONLY through the gists and its first t tokens

    compression (`compress`), left-padded so every row's gists are its last k slots:
        positions  pad | 0 … j-1 | j … j+k-1
        tokens     pad | item    | gists           → keep K/V of the first p and the last k real slots

    online (`score`): the item is gone; its positions are simply not in the sequence:
        cache      p prefix + k gist columns per row (keys rotated at 0 … p-1 and j … j+k-1 when
                   compressed); rows with p < P (the batch's longest prefix) get masked pad columns
        positions  j+k … j+k+ℓ-1 — a per-row offset, so every query→gist distance equals training's
        mask       every real cached column visible, causal over the query

    packed training (`score_packed`): item + gists + query 1 + query 2 + …, every query block at
        positions j+k …, seeing the item (prefix) and gists but never another block (`packed`)

t = `keep_item_prefix` (0: pure gisting) and p = min(t, j) per item: the hybrid keeps the first t item
tokens (title and key fields, rendered first) as raw K/V beside the gists so exact tokens survive.

Pooling windows (`gist_pool_windows`, GistPool, arXiv 2504.08934): in every layout that runs the gists,
gist i reads only the i-th of k equal spans of the item after the prefix (p … j-1), plus the first
max(p, 1) item tokens (the attention sink and the hybrid prefix) and the earlier gists (`pool_windows`).
Gisting's plain mask lets every gist read the whole item and, on long items, they crowd onto a few
tokens; the windows spread them over it, as average pooling does.

Masks are additive floats (0 keep / dtype-min drop): transformers uses a 4D mask as given, and eager
attention *adds* it, so a boolean mask would be silently wrong there (DESIGN §7).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import nn


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Bool `(N, S_q, S_k)` → additive `(N, 1, S_q, S_k)` mask in `dtype`; a per-head `(N, H, S_q, S_k)`
    keeps its heads."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask.unsqueeze(1) if allowed.dim() == 3 else mask


def _causal(seq_len: int, device: torch.device) -> torch.Tensor:
    idx = torch.arange(seq_len, device=device)
    return idx[None, :] <= idx[:, None]  # (S_q, S_k)


def cut_block(item_lens: torch.Tensor, num_gist: int, total: int, keep: int = 0) -> torch.Tensor:
    """The block the gist mask removes → bool `(N, total, total)`: rows after the gists × item columns
    `keep … j-1` (the first `keep` item tokens stay visible: the hybrid prefix)."""
    pos = torch.arange(total, device=item_lens.device)
    after_gists = pos[None, :, None] >= (item_lens + num_gist)[:, None, None]  # (N, S, 1) rows
    item_cols = (pos[None, None, :] < item_lens[:, None, None]) & (pos >= keep)  # (N, 1, S) columns
    return after_gists & item_cols


def training_mask(
    item_lens: torch.Tensor,
    num_gist: int,
    seq_lens: torch.Tensor,
    total: int,
    keep: int = 0,
    windows: bool = False,
) -> torch.Tensor:
    """Gist mask of the right-padded training layout → bool `(N, total, total)`.

    item_lens: (N,) j per row; seq_lens: (N,) real length per row (j + k + tail); total: padded length;
    keep: t, item tokens the tail may still read directly; windows: gists under pooling windows.
    """
    allowed = full_mask(seq_lens, total) & ~cut_block(item_lens, num_gist, total, keep)
    if windows:
        pool_windows(allowed, item_lens, num_gist, keep)
    # every row keeps its diagonal, so no softmax row is empty (padding rows' outputs are never read)
    return allowed | torch.eye(total, dtype=torch.bool, device=item_lens.device)[None]


def packed(
    item_lens: Sequence[int],
    num_gist: int,
    query_lens: Sequence[Sequence[int]],
    total: int,
    keep: int | None,
    windows: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Several queries per item sequence (training throughput: the long item runs once, not per query).

    Row r: item (j) | gists (k) | query 1 | query 2 | … | pad. Every query block is numbered from j + k,
    exactly where a lone query sits, and sees the item's first `keep` tokens, the gists and itself
    (causally) — never another query and never the rest of the item. `keep=None` is the full-context
    teacher (k = 0): each block sees the whole item. `windows`: the gists under pooling windows.

    Returns position_ids `(N, total)` and allowed `(N, total, total)`, both on the CPU.
    """
    n = len(item_lens)
    positions = torch.zeros(n, total, dtype=torch.long)
    allowed = torch.eye(total, dtype=torch.bool).repeat(n, 1, 1)
    for r, (j, lens) in enumerate(zip(item_lens, query_lens, strict=True)):
        head = j + num_gist
        positions[r, :head] = torch.arange(head)
        allowed[r, :head, :head] = _causal(head, torch.device("cpu"))
        visible = torch.zeros(total, dtype=torch.bool)
        visible[:head] = True
        if keep is not None:
            visible[min(keep, j) : j] = False
        start = head
        for q in lens:
            block = slice(start, start + q)
            positions[r, block] = torch.arange(head, head + q)
            allowed[r, block, :] = visible
            allowed[r, block, block] = _causal(q, torch.device("cpu"))
            start += q
    if windows and keep is not None:
        pool_windows(allowed, torch.tensor(list(item_lens)), num_gist, keep)
    return positions, allowed


def gist_windows(item_lens: torch.Tensor, num_gist: int, width: int, keep: int = 0) -> torch.Tensor:
    """Item columns 0 … width-1 each gist may read under pooling windows → bool `(N, k, width)`: gist i
    the span p + ⌊i(j-p)/k⌋ … p + ⌊(i+1)(j-p)/k⌋ - 1 (p = min(keep, j)), the first max(p, 1) columns,
    and every column ≥ j (not the item's: the layout's own mask decides those)."""
    cols = torch.arange(width, device=item_lens.device)[None, None, :]  # (1, 1, W)
    i = torch.arange(num_gist, device=item_lens.device)[None, :, None]  # (1, k, 1)
    j = item_lens[:, None, None]  # (N, 1, 1)
    p = j.clamp(max=keep)
    start, stop = p + i * (j - p) // num_gist, p + (i + 1) * (j - p) // num_gist
    return ((cols >= start) & (cols < stop)) | (cols < p.clamp(min=1)) | (cols >= j)


def pool_windows(
    allowed: torch.Tensor,
    item_lens: torch.Tensor,
    num_gist: int,
    keep: int = 0,
    item_starts: torch.Tensor | None = None,
) -> torch.Tensor:
    """`allowed` (N, S, S) of a layout with each row's item at columns s … s+j-1 (s = `item_starts`,
    default 0: right-padded; the left padding in compression) and its k gists right after it → the
    same mask with the gist rows held to their pooling windows (`gist_windows`), in place."""
    starts = torch.zeros_like(item_lens) if item_starts is None else item_starts
    windows = gist_windows(item_lens, num_gist, int(item_lens.max()), keep)  # (N, k, J)
    for r, (s, j) in enumerate(zip(starts.tolist(), item_lens.tolist(), strict=True)):
        allowed[r, s + j : s + j + num_gist, s : s + j] &= windows[r, :, :j]
    return allowed


def full_mask(seq_lens: torch.Tensor, total: int) -> torch.Tensor:
    """Plain causal + padding mask of a right-padded batch → bool `(N, total, total)`."""
    device = seq_lens.device
    pos = torch.arange(total, device=device)
    key_real = pos[None, None, :] < seq_lens[:, None, None]
    allowed = _causal(total, device)[None] & key_real
    return allowed | torch.eye(total, dtype=torch.bool, device=device)[None]


def left_padded(seq_lens: torch.Tensor, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions and mask of a left-padded batch (compression layout).

    Returns position_ids `(N, total)` — each row numbered from 0 at its first real token — and a bool
    mask `(N, total, total)`: causal over real tokens.
    """
    device = seq_lens.device
    pad = (total - seq_lens)[:, None]  # (N, 1)
    pos = torch.arange(total, device=device)[None, :] - pad  # (N, S); negative on padding
    key_real = (pos >= 0)[:, None, :]  # (N, 1, S)
    allowed = _causal(total, device)[None] & key_real
    allowed = allowed | torch.eye(total, dtype=torch.bool, device=device)[None]
    return pos.clamp(min=0), allowed


def online_positions(query_start: torch.Tensor, query_len: int) -> torch.Tensor:
    """Position ids of the query (+ score token) for each candidate → `(N, ℓ)`.

    query_start: (N,) where each candidate's query starts in the layout it was compressed for: j + k
    after gists (training layout), j after selected item columns (the full-context layout). Numbering
    the query from 0 (or from the cache length) would change every query→key RoPE distance and
    silently degrade scores.
    """
    return query_start[:, None] + torch.arange(query_len, device=query_start.device)[None, :]


def online_mask(
    prefix_lens: torch.Tensor, prefix_slots: int, tail_lens: torch.Tensor, tail_slots: int, query_len: int
) -> torch.Tensor:
    """Mask of the query against injected K/V → bool `(N, ℓ, P + K + ℓ)`, or `(N, L, H_kv, ℓ, P + K + ℓ)`
    when `tail_lens` is per layer and head.

    Cache columns per row: P prefix slots of which the first p (prefix_lens, (N,)) are real, then K
    slots of which the first s are real (tail_lens, (N,): k gists, or the selected columns; or
    (N, L, H_kv): each head's share under per-head budgets, `StoredUnit.head_tails`). Real columns visible,
    pad slots never; causal over the query.
    """
    device = prefix_lens.device
    lead = tail_lens.shape  # (N,) or (N, L, H_kv)
    prefix = torch.arange(prefix_slots, device=device) < prefix_lens.view(-1, *[1] * len(lead))
    tail = torch.arange(tail_slots, device=device) < tail_lens[..., None]
    stored = torch.cat([prefix.expand(*lead, prefix_slots), tail], dim=-1)  # (*lead, P + K)
    causal = _causal(query_len, device)
    return torch.cat(
        [stored[..., None, :].expand(*lead, query_len, -1), causal.expand(*lead, -1, -1)], dim=-1
    )


class QueryTail(NamedTuple):
    """What follows the gists for one query: embeddings (ℓ, D), and targets (ℓ,) long — the token each
    position predicts where the query likelihood is summed, -1 elsewhere (all -1 under the head rule,
    whose ℓ-th row is the score token). Or one query per batch row (`QueryTail.rows`): embeds
    (N, ℓ, D), targets (N, ℓ), and each row's real length `lens` (N,)."""

    embeds: torch.Tensor
    targets: torch.Tensor
    lens: torch.Tensor | None = None

    @classmethod
    def rows(cls, tails: Sequence[QueryTail], repeats: int) -> QueryTail:
        """Each of `tails` on `repeats` consecutive rows — (Q·N) rows, query-major — right-padded to the
        longest. A pad row comes after every real row of its query, so causal attention keeps it out of
        the real rows, and its target is -1: one forward reads Q queries as Q forwards would."""
        ell = max(t.embeds.shape[0] for t in tails)
        embeds = torch.stack([nn.functional.pad(t.embeds, (0, 0, 0, ell - t.embeds.shape[0])) for t in tails])
        targets = torch.stack(
            [nn.functional.pad(t.targets, (0, ell - t.targets.shape[0]), value=-1) for t in tails]
        )
        lens = torch.tensor([t.embeds.shape[0] for t in tails], device=embeds.device)
        return cls(*(x.repeat_interleave(repeats, 0) for x in (embeds, targets, lens)))
