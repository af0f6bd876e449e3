"""The forwards only training needs, over a `Reranker`'s parameters (layouts in core/layout.py):

score_packed(model, items, queries)   item (+ gists) + many queries per row → training throughput
autoencode_loss(model, items)         item + gists + prompt + item head, gist mask → label-free loss
autoencode_control(model, items)      the same, each item's gists regenerating another item's text
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext

import torch

from reranker.core import layout
from reranker.core.config import AE_PROMPT
from reranker.core.errors import EmptyInputError
from reranker.core.model import Reranker


def score_packed(
    model: Reranker, items: Sequence[str], queries: Sequence[Sequence[str]], full: bool = False
) -> list[torch.Tensor]:
    """All of `queries[i]` against `items[i]` in ONE row (`layout.packed`), so the long item runs once
    for many queries → per item, (Q_i,) scores, each equal to `score_masked` (or `score_full` when
    `full`) of that query alone."""
    if any(not qs for qs in queries):
        raise EmptyInputError("every packed item needs at least one query")
    item_ids, _ = model.item_ids(items)
    tails = [[model.query_tail(q) for q in qs] for qs in queries]
    gists = [] if full else [model.gist_embeddings]
    rows = [
        torch.cat([model.embed(ids), *gists, *(t.embeds for t in ts)])
        for ids, ts in zip(item_ids, tails, strict=True)
    ]
    query_lens = [[t.embeds.shape[0] for t in ts] for ts in tails]
    k = 0 if full else model.gist.num_gist
    total = max(r.shape[0] for r in rows)
    keep = None if full else model.gist.keep_item_prefix
    windows = model.gist.gist_pool_windows
    positions, allowed = layout.packed([len(i) for i in item_ids], k, query_lens, total, keep, windows)
    item_lens = model.token_counts(item_ids)
    adapted = nullcontext() if full else model.gists_adapted(model.gist_rows(item_lens, total))
    with torch.set_grad_enabled(model.training and torch.is_grad_enabled()), adapted:
        hidden = model.decoder()(
            inputs_embeds=torch.nn.utils.rnn.pad_sequence(rows, batch_first=True),  # (N, S, D)
            position_ids=positions.to(model.device),
            attention_mask=layout.additive(allowed.to(model.device), model.dtype),
        ).last_hidden_state
        out = []
        for r, (ids, ts) in enumerate(zip(item_ids, tails, strict=True)):
            start, scores = len(ids) + k, []
            for t in ts:
                block = hidden[r, start : start + t.embeds.shape[0]]  # (ℓ, D)
                scores.append(model.tail_scores(block[None], t.targets))
                start += t.embeds.shape[0]
            out.append(torch.cat(scores))
    return out


def autoencode_loss(
    model: Reranker,
    items: Sequence[str],
    num_tokens: int = 64,
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
    prompt = model.embed(model.tokenizer(AE_PROMPT, add_special_tokens=False)["input_ids"])  # (P, D)
    if targets_of is not None and len(targets_of) != len(items):
        raise ValueError(f"targets_of has {len(targets_of)} texts for {len(items)} items")
    item_ids, _ = model.item_ids(items)
    target_ids = item_ids if targets_of is None else model.item_ids(targets_of)[0]
    start = max(int(model.tokenizer.bos_token_id is not None), model.gist.keep_item_prefix)
    targets = [ids[start : start + num_tokens] for ids in target_ids]
    if not all(targets):
        raise EmptyInputError(f"an item has no token after the first {start} to regenerate")
    rows = [
        torch.cat([model.embed(ids), model.gist_embeddings, prompt, model.embed(t)])
        for ids, t in zip(item_ids, targets, strict=True)
    ]
    item_lens = model.token_counts(item_ids)
    hidden = model.forward_rows(rows, item_lens)[0].last_hidden_state  # (N, S, D)
    k, p = model.gist.num_gist, prompt.shape[0]
    losses = []
    for row, (j, t) in enumerate(zip(item_lens.tolist(), targets, strict=True)):
        first = j + k + p - 1  # the last prompt position predicts target[0]
        logits = model.lm.get_output_embeddings()(hidden[row, first : first + len(t)]).float()  # (T, V)
        target = torch.tensor(t, device=model.device)
        losses.append(torch.nn.functional.cross_entropy(logits, target, reduction="sum"))
    return torch.stack(losses).sum() / sum(len(t) for t in targets)


def autoencode_control(
    model: Reranker, items: Sequence[str], num_tokens: int = 64, shift: int | None = None
) -> torch.Tensor:
    """`autoencode_loss` with each item's gists regenerating the text of the item `shift` places on
    (default: half the list away). Minus the own-gists loss on the same items (the same targets,
    other gists), it is what the gists tell about their own item in nats per token: ~0 while they
    carry nothing item-specific, whatever the decoder has learned about the format."""
    n = len(items) // 2 if shift is None else shift
    return autoencode_loss(model, items, num_tokens, [*items[n:], *items[:n]])
