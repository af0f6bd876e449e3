"""Gists over a frozen reader: the training recipe that fits two CPU cores.

The reader — the untouched base read by query likelihood, or the LoRA teacher read by its head — is
the full-context system the compressed one must match, and it never changes. So what it computes over
an item is computed once:

    item K/V   the reader's K/V of every item token (L, 2, H_kv, j, h), no gradient
               (`ItemKVCache`; on disk through the project's codec when given a folder)
    target     the reader's full-context score of (query, item): the query read over that K/V, once per
               pair — exactly `score_full` (the query sits at j, after the whole item)

A step runs only the positions trained parameters act on:

    gists      k rows at positions j … j+k-1 over the cached item K/V, the gist adapter on (grad)
    query      ℓ rows at j+k … over [the item's first p columns | the gists' K/V], read by the reader as
               serving reads it (`Reranker.read_stored`); the gradient reaches the gists through
               their K/V, and no reader weight is trainable — unless `reader_rank` > 0: then a reader
               adapter at the query rows only (`core/reader_adapter.py`) trains with the gists, the
               gisting recipe with the item encoding frozen, and the targets stay the untouched reader's

and distils the reader list-wise: KL(softmax(target/τ) ‖ softmax(student/τ)) over each list of
candidates (KV-Distill, PISCO: no labels needed) — and, for a query-likelihood reader, optionally the
KL of its next-token distributions at every query token (`token_kl_weight`: V numbers a token to
match instead of one score a pair). Lists are the train split's queries with their
candidates, and pseudo-queries: a sentence of one candidate asked of its whole list (label-free, many
per item). Back-propagation covers k + ℓ positions per pair instead of j + k + ℓ, and the item forward
is paid once per item instead of once per step.

With `holdout_queries`, the last train queries are never drawn: their whole lists score the gists every
`holdout_every` steps (list-wise KL to the reader), and the checkpoint keeps the lowest's gists — the
number of steps chosen without the dev split, which decides defaults.

The result is an ordinary gist checkpoint (the reader's body, head and LoRA, untouched, plus gists and
the gist adapter); its shadow is the reader's own full-context forward.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from tqdm.auto import tqdm
from transformers import DynamicCache

from reranker.core import kv_codec, layout
from reranker.core.config import RerankerConfig
from reranker.core.errors import QueryTooLongError
from reranker.core.kv import StoredUnit
from reranker.core.layout import QueryTail
from reranker.core.model import Reranker, likelihood
from reranker.data.relevance_data import RelevanceSet
from reranker.ranking_metrics import ndcg_at_k, recall_at_k_vs_reference
from reranker.training.objectives import distill_loss
from reranker.training.trainer import CURVE_FILE


class FrozenGistConfig(BaseModel):
    """What a frozen-reader gist run trains: the reader, the gist layout, and the distillation."""

    model_config = ConfigDict(extra="forbid")

    reader: str = Field(description="the frozen full-context reader: a base, preset or checkpoint reference")
    num_gist: int = Field(16, ge=1, le=256, description="k gists per item")
    keep_item_prefix: int = Field(0, ge=0, description="t raw item tokens stored before the gists")
    adapter_rank: int = Field(8, ge=0, description="rank of the gist adapter (0: gist embeddings only)")
    reader_rank: int = Field(
        0,
        ge=0,
        description="rank of a reader adapter trained jointly with the gists, at query rows only (0: the "
        "reader reads them as it is): the gisting recipe with the item encoding frozen",
    )
    pool_windows: bool = Field(
        False, description="each gist reads only its own span of the item (GistPool; core/layout.py)"
    )
    max_item_tokens: int | None = Field(None, ge=1, description="item tokens read (default: the reader's)")
    steps: int = Field(200, ge=1)
    max_minutes: float | None = Field(
        None, gt=0, description="stop after this much wall time, whatever `steps` says (a fixed GPU slot)"
    )
    lists_per_step: int = Field(4, ge=1, description="candidate lists per step")
    candidates_per_list: int = Field(8, ge=2)
    queries_per_list: int = Field(
        4,
        ge=1,
        description="queries each drawn list is asked: its own, then sentences of its candidates "
        "(pseudo-queries); the gists of a list's items run once for all of them",
    )
    dtype: str | None = Field(None, description="storage dtype of a base reader (auto: this machine's)")
    temperature: float = Field(1.0, gt=0.0, description="τ of the list-wise KL")
    token_kl_weight: float = Field(
        0.0,
        ge=0.0,
        description="weight of the per-token KL to the reader's next-token distributions at the query's "
        "tokens (a query-likelihood reader only), added to the list-wise KL",
    )
    lr: float = Field(1e-3, gt=0.0)
    seed: int = 0
    holdout_queries: int = Field(
        0,
        ge=0,
        description="the last N train queries are never drawn: every `holdout_every` steps their whole "
        "lists, each asked its own query, measure the list-wise KL to the reader, and the checkpoint "
        "keeps the gists of the lowest (early stopping within the train split; dev stays for choices)",
    )
    holdout_pseudo_queries: int = Field(
        0,
        ge=0,
        description="pseudo-queries each held-out list is also asked (sentences of its articles, drawn "
        "once from the seed): more (list, query) pairs for the held-out KL and overlap, whose 1-query "
        "reading moves a lot between checks; nDCG stays on the topic's own query (the one with labels)",
    )
    holdout_every: int = Field(20, ge=1, description="steps between two held-out checks")
    holdout_patience: int | None = Field(
        None, ge=1, description="stop after this many held-out checks without a new lowest KL"
    )
    init_from: str | None = Field(
        None,
        description="a gist checkpoint over the same reader, same k, t and adapter rank: its gists and "
        "adapter are the starting point (training continued, e.g. on another machine)",
    )

    @model_validator(mode="after")
    def _patience_needs_a_holdout(self) -> FrozenGistConfig:
        if self.holdout_patience is not None and not self.holdout_queries:
            raise ValueError("holdout_patience needs holdout_queries > 0: nothing would be checked")
        return self


# ------------------------------------------------------------------------------------ the item's K/V
def ram_budget() -> int:
    """A quarter of the memory available now: what a unit cache may hold, the rest left to the steps
    (whole-item units run to ~40 MB each in float32, and a step of 64 pairs over them took ~10 GB more on
    AP89; with half of the available memory held, the first step met the OOM killer)."""
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4


def _nbytes(unit: StoredUnit) -> int:
    return unit.kv.numel() * unit.kv.element_size()


class ItemKVCache:
    """The reader's K/V of each item's tokens, computed once (no gradient) and kept in memory, or in
    `folder`/<reader fingerprint>/ as codec blobs stamped with that fingerprint (checked on read).
    RAM holds the most recently used, at most `memory_items` of them (~2·L·H_kv·h·j·b bytes an item)
    and at most `memory_bytes` (default `ram_budget()`); the rest are read back from `folder`."""

    desc = "item K/V (frozen reader)"  # what the progress bar of `fill` counts
    subfolder = "{fingerprint}"  # where in `folder` this kind of unit lives, one reader's apart

    def __init__(
        self,
        reader: Reranker,
        folder: Path | None = None,
        memory_items: int = 256,
        memory_bytes: int | None = None,
    ) -> None:
        self.reader, self.memory_items = reader, memory_items
        self.memory_bytes = ram_budget() if memory_bytes is None else memory_bytes
        self.fingerprint = reader.fingerprint
        self.folder = None if folder is None else folder / self.subfolder.format(fingerprint=self.fingerprint)
        self.held: OrderedDict[str, StoredUnit] = OrderedDict()
        self.held_bytes = 0
        self.computed = 0  # item forwards run (what the cache saves on every later step)
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)

    def get(self, texts: Sequence[str]) -> list[StoredUnit]:
        """Each text's unit: all j item columns, the query at j (compressor "prefix" at budget j)."""
        missing = [t for t in dict.fromkeys(texts) if t not in self.held and not self._load(t)]
        if missing:
            self._compute(missing)
        out = [self.held[t] for t in texts]
        for t in texts:
            self.held.move_to_end(t)
        while len(self.held) > self.memory_items or (
            self.held_bytes > self.memory_bytes and len(self.held) > 1
        ):
            self.held_bytes -= _nbytes(self.held.popitem(last=False)[1])
        return out

    def _hold(self, text: str, unit: StoredUnit) -> None:
        self.held[text] = unit
        self.held_bytes += _nbytes(unit)

    @torch.inference_mode()
    def _compute(self, texts: list[str]) -> None:
        for text, unit in zip(texts, self.units(texts), strict=True):
            self._hold(text, unit)
            if self.folder is not None:
                self._path(text).write_bytes(kv_codec.encode(unit, self.text_key(text)))
        self.computed += len(texts)

    def units(self, texts: list[str], batch_size: int = 4) -> list[StoredUnit]:
        """Each text's unit: every item column kept, the query right after them (prefix caching at
        budget j)."""
        reader, out = self.reader, []
        item_ids, truncated = reader.item_ids(texts)
        for start in range(0, len(texts), batch_size):
            batch = slice(start, start + batch_size)
            ids = item_ids[batch]
            rows = [reader.embed(i) for i in ids]
            kvs = reader.causal_kv(rows, [torch.arange(len(i), device=reader.device) for i in ids])
            for i, kv, cut in zip(ids, kvs, truncated[batch], strict=True):
                j = len(i)
                out.append(
                    StoredUnit(
                        kv, self.fingerprint, "prefix", budget=j, item_tokens=j, query_start=j, truncated=cut
                    )
                )
        return out

    def fill(self, texts: Sequence[str], progress: bool = True, chunk: int = 16) -> None:
        """Compute every text's unit not yet held or on disk, `chunk` at a time (so that RAM holds at
        most `memory_items` of them), with a progress bar."""
        todo = [t for t in dict.fromkeys(texts) if t not in self.held and not self._exists(t)]
        with tqdm(total=len(todo), desc=self.desc, disable=not progress) as bar:
            for start in range(0, len(todo), chunk):
                part = todo[start : start + chunk]
                self.get(part)
                bar.update(len(part))

    def _exists(self, text: str) -> bool:
        return self.folder is not None and self._path(text).is_file()

    def _load(self, text: str) -> bool:
        if not self._exists(text):
            return False
        decoded = kv_codec.decode(
            self._path(text).read_bytes(), expected_fingerprint=self.fingerprint, dtype=self.reader.kv_dtype
        )
        self._hold(text, decoded.kv)
        return True

    @staticmethod
    def text_key(text: str) -> str:
        """A text's name on disk: its SHA-256 (the text itself is never written)."""
        return hashlib.sha256(text.encode()).hexdigest()

    def _path(self, text: str) -> Path:
        assert self.folder is not None
        return self.folder / f"{self.text_key(text)}.kv"


def stack_items(units: Sequence[StoredUnit], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Item units → (K/V (N, L, 2, H_kv, J, h) right-padded with zeros, item lengths j (N,))."""
    lens = torch.tensor([u.item_tokens for u in units], device=device)
    width = int(lens.max())
    padded = [torch.nn.functional.pad(u.kv, (0, 0, 0, width - u.positions)) for u in units]
    return torch.stack(padded).to(device), lens


def _tiled(x: torch.Tensor, q: int) -> torch.Tensor:
    """(N, …) → (Q·N, …): the rows once per query, query-major like `QueryTail.rows`."""
    return x.repeat(q, *([1] * (x.dim() - 1)))


def reader_read(
    reader: Reranker, queries: Sequence[str], items: torch.Tensor, lens: torch.Tensor
) -> tuple[QueryTail, torch.Tensor]:
    """The reader's full-context read of each query against item K/V from `stack_items` — the query
    at position j after all j item columns, `score_full`'s arithmetic without re-running the item —
    every (query, item) pair one row of one forward → (the rows' tails, their outputs (Q·N, ℓ, D))."""
    tails = QueryTail.rows([reader.query_tail(x) for x in queries], items.shape[0])
    lens = _tiled(lens, len(queries))
    return tails, reader.read_stored_hidden(
        tails, _tiled(items, len(queries)), lens, torch.zeros_like(lens), lens
    )


def reader_scores(
    reader: Reranker, queries: Sequence[str], items: torch.Tensor, lens: torch.Tensor
) -> torch.Tensor:
    """The reader's full-context scores (Q, N) of each query against each item (`reader_read`)."""
    tails, hidden = reader_read(reader, queries, items, lens)
    return reader.tail_scores(hidden, tails.targets, tails.lens).view(len(queries), -1)


def gist_kv(model: Reranker, items: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """The gists' K/V over cached item K/V → (N, L, 2, H_kv, k, h), with gradients into the gist
    embeddings and adapter: k rows at positions j … j+k-1 (the compression layout), every real item
    column (or, under pooling windows, each gist's own) and the earlier gists visible, the gist adapter
    on every row (they are all gists)."""
    n, width, k = items.shape[0], items.shape[4], model.gist.num_gist
    items = items.to(model.dtype)
    cache = DynamicCache([(items[:, i, 0], items[:, i, 1]) for i in range(model.num_layers)])
    positions = lens[:, None] + torch.arange(k, device=model.device)[None]  # (N, k)
    cols = torch.arange(width, device=model.device)
    item_cols = (cols[None, None, :] < lens[:, None, None]).expand(-1, k, -1)  # (N, k, J)
    if model.gist.gist_pool_windows:
        item_cols = item_cols & layout.gist_windows(lens, k, width, model.gist.keep_item_prefix)
    causal = torch.ones(k, k, dtype=torch.bool, device=model.device).tril()[None].expand(n, -1, -1)
    allowed = torch.cat([item_cols, causal], dim=2)  # (N, k, J + k)
    with model.gists_adapted():
        model.decoder()(
            inputs_embeds=model.gist_embeddings[None].expand(n, -1, -1),
            position_ids=positions,
            attention_mask=layout.additive(allowed, model.dtype),
            cache=cache,
            use_cache=True,
        )
    return torch.stack(
        [torch.stack([c.keys[:, :, width:], c.values[:, :, width:]], 1) for c in cache.layers], 1
    )


def student_read(
    model: Reranker, queries: Sequence[str], items: torch.Tensor, lens: torch.Tensor, gists: torch.Tensor
) -> tuple[QueryTail, torch.Tensor]:
    """Each query read by the reader over each item's stored unit — its first p = min(t, j) columns,
    then its gists' K/V (N, L, 2, H_kv, k, h) — as serving reads it, gradients kept; every (query,
    item) pair one row of one forward → (the rows' tails, their outputs (Q·N, ℓ, D))."""
    q, k = len(queries), model.gist.num_gist
    prefix_lens = lens.clamp(max=model.gist.keep_item_prefix)
    p_slots = int(prefix_lens.max())  # a row with p < P shows padding there, which the online mask hides
    stacked = torch.cat([items[..., :p_slots, :].to(gists.dtype), gists], dim=-2)  # (N, L, 2, H_kv, P+k, h)
    tails = QueryTail.rows([model.query_tail(x) for x in queries], items.shape[0])
    hidden = model.read_stored_hidden(
        tails,
        _tiled(stacked, q),
        _tiled(prefix_lens, q),
        _tiled(torch.full_like(lens, k), q),
        _tiled(lens + k, q),
    )
    return tails, hidden


def student_scores(
    model: Reranker, queries: Sequence[str], items: torch.Tensor, lens: torch.Tensor, gists: torch.Tensor
) -> torch.Tensor:
    """Scores (Q, N) of each query against each item's stored unit (`student_read`)."""
    tails, hidden = student_read(model, queries, items, lens, gists)
    return model.tail_scores(hidden, tails.targets, tails.lens).view(len(queries), -1)


def token_kl(reader_logp: torch.Tensor, student_logp: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """KL(reader ‖ student) of the next-token distributions (…, n, V) at query tokens, averaged over
    the positions with a target (`targets` ≥ 0; padding rows have none)."""
    kl = (reader_logp.exp() * (reader_logp - student_logp)).sum(-1)
    real = targets >= 0
    return (kl * real).sum() / real.sum()


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def pseudo_query(
    text: str, rng: random.Random, min_words: int = 5, max_words: int = 20, start: int = 0
) -> str | None:
    """A sentence of the item that begins at or after character `start`, cut to `max_words` words, as a
    query it should answer (None: none)."""
    gaps = list(_SENTENCE.finditer(text))
    begins, ends = [0, *(m.end() for m in gaps)], [*(m.start() for m in gaps), len(text)]
    sentences = [text[b:e].split() for b, e in zip(begins, ends, strict=True) if b >= start]
    usable = [s for s in sentences if len(s) >= min_words]
    return " ".join(rng.choice(usable)[:max_words]) if usable else None


def askable(model: Reranker, query: str | None, min_words: int = 3) -> str | None:
    """`query`, its last words dropped until `model` takes it (max_query_tokens); None when fewer than
    `min_words` would be left."""
    words = (query or "").split()
    while len(words) >= min_words:
        try:
            model.query_ids(" ".join(words))
            return " ".join(words)
        except QueryTooLongError:
            words.pop()
    return None


def step_masters(
    optimizer: torch.optim.Optimizer, masters: Sequence[torch.Tensor], params: Sequence[torch.Tensor]
) -> None:
    """One optimizer step on fp32 master copies of `params` (their gradients widened, clipped to norm 1),
    then `params` set from them: the step's arithmetic runs in the compute dtype (bf16 on a GPU or an AMX
    CPU), but a bf16 weight would round away an Adam update below 2^-8 of its magnitude."""
    for master, p in zip(masters, params, strict=True):
        master.grad = p.grad.float() if p.grad is not None else torch.zeros_like(master)
    torch.nn.utils.clip_grad_norm_(masters, 1.0)
    optimizer.step()
    with torch.no_grad():
        for master, p in zip(masters, params, strict=True):
            p.copy_(master)


# ------------------------------------------------------------------------------------------ training
class HeldOutBest(NamedTuple):
    """The held-out check with the lowest KL so far: its step and the fp32 masters of that step."""

    kl: float
    step: int
    masters: list[torch.Tensor]


class FrozenGistTrainer:
    """One run: the reader loaded and frozen, the student (reader + gists + adapter) trained by
    list-wise distillation; `fit` writes `curve.jsonl` and `checkpoint/` into `out`."""

    def __init__(
        self,
        cfg: FrozenGistConfig,
        data: RelevanceSet,
        out: Path,
        device: str | None = None,
        cache_dir: Path | None = None,
        memory_items: int = 256,
    ) -> None:
        self.cfg, self.out = cfg, Path(out)
        self.reader = Reranker.read(cfg.reader, cfg.dtype, max_item_tokens=cfg.max_item_tokens, device=device)
        update = {
            "compressor": "gist",
            "num_gist": cfg.num_gist,
            "keep_item_prefix": cfg.keep_item_prefix,
            "gist_adapter_rank": cfg.adapter_rank,
            "gist_pool_windows": cfg.pool_windows,
            "reader_adapter_rank": cfg.reader_rank,
        }
        gist = RerankerConfig(**(self.reader.gist.model_dump() | update))
        self.model = self.reader.with_gist_config(gist)  # the reader's body, head and score token, shared
        if cfg.token_kl_weight and self.reader.gist.score_rule != "query_likelihood":
            raise ValueError(
                f"token_kl_weight needs a query-likelihood reader; {cfg.reader} scores by "
                f"{self.reader.gist.score_rule!r}"
            )
        if cfg.init_from:
            self._start_from(Reranker.read(cfg.init_from, device=device))
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.trained = [self.model.gist_embeddings]
        if self.model.gist_adapter is not None:
            self.trained += list(self.model.gist_adapter.parameters())
        if self.model.reader_adapter is not None:  # in the student's read only: the targets stay the reader's
            self.trained += list(self.model.reader_adapter.parameters())
        for p in self.trained:
            p.requires_grad_(True)
        # fp32 master copies: the step's arithmetic runs in the compute dtype (bf16 on a GPU or an AMX
        # CPU), but a bf16 weight rounds away an Adam update below 2^-8 of its magnitude
        self.master = [p.detach().float().clone() for p in self.trained]
        self.optimizer = torch.optim.AdamW(self.master, lr=cfg.lr, weight_decay=0.0)
        self.items = ItemKVCache(self.reader, cache_dir, memory_items)
        self.targets: dict[tuple[str, str], float] = {}
        train = data.split("train")
        if not train.queries:
            raise ValueError("the train split has no query")
        drawn = len(train.queries) - cfg.holdout_queries
        if drawn < 1:
            raise ValueError(
                f"holdout_queries={cfg.holdout_queries} leaves none of the {len(train.queries)} train "
                "queries to train on"
            )
        judged = [
            (q.text, [(train.items[i].text, label) for i, label in train.candidates(q.query_id)])
            for q in train.queries
        ]
        self.queries = [query for query, _ in judged[:drawn]]
        self.lists = [[text for text, _ in cands] for _, cands in judged[:drawn]]
        self.holdout = judged[drawn:]  # (query, [(candidate text, label)]): never drawn by a step
        asker = random.Random(f"{cfg.seed}:holdout")  # its own stream: the steps draw as without it
        self.holdout_asked = [  # each held-out list's queries: its own first, then fixed pseudo-queries
            [query, *self._pseudo_queries([t for t, _ in cands], cfg.holdout_pseudo_queries, asker)]
            for query, cands in self.holdout
        ]
        self.best: HeldOutBest | None = None
        self.rng = random.Random(cfg.seed)
        self.step = 0
        self.pairs = 0
        self.cpu_seconds = 0.0
        self.fill_seconds = 0.0  # wall time of the item K/V computed before the first step

    def _start_from(self, trained: Reranker) -> None:
        """This run's student takes `trained`'s gists and adapter — refused unless `trained` reads
        with this reader's body and head, and has the student's gist layout and adapter rank."""
        if trained.with_gist_config(self.reader.gist).reader_fingerprint != self.reader.reader_fingerprint:
            raise ValueError(
                f"init_from {self.cfg.init_from} was trained over another reader than {self.cfg.reader}"
            )
        self.model = trained.with_gist_config(self.model.gist, keep_gists=True)
        self.model.lm = self.reader.lm  # one body in memory: the reader's (identical, checked above)

    def _draw(self) -> list[tuple[list[str], list[str]]]:
        """The step's lists: (candidate texts, the queries asked of them) — its own query, then
        pseudo-queries, a sentence of one of its candidates each."""
        drawn = []
        for _ in range(self.cfg.lists_per_step):
            index = self.rng.randrange(len(self.lists))
            cands = self.rng.sample(
                self.lists[index], min(self.cfg.candidates_per_list, len(self.lists[index]))
            )
            pseudo = self._pseudo_queries(cands, self.cfg.queries_per_list - 1, self.rng)
            drawn.append((cands, [self.queries[index], *pseudo]))
        return drawn

    def _pseudo_queries(self, cands: list[str], n: int, rng: random.Random) -> list[str]:
        """Up to n pseudo-queries: a sentence each of n of the candidates, as the reader takes them."""
        sources = rng.sample(cands, min(n, len(cands)))
        asked = (askable(self.model, pseudo_query(source, rng)) for source in sources)
        return [q for q in asked if q is not None]

    def _targets(
        self, queries: list[str], cands: list[str], items: torch.Tensor, lens: torch.Tensor
    ) -> torch.Tensor:
        """The reader's scores (Q, N), each pair read once per run."""
        missing = [q for q in queries if any((q, c) not in self.targets for c in cands)]
        if missing:
            with torch.inference_mode():
                scores = reader_scores(self.reader, missing, items, lens).tolist()
            for query, row in zip(missing, scores, strict=True):
                self.targets.update(((query, c), s) for c, s in zip(cands, row, strict=True))
        return torch.tensor(
            [[self.targets[(q, c)] for c in cands] for q in queries], device=self.model.device
        )

    def train_step(self) -> dict[str, float]:
        start = time.process_time()
        drawn = self._draw()
        texts = list(dict.fromkeys(c for cands, _ in drawn for c in cands))
        units = dict(zip(texts, self.items.get(texts), strict=True))
        items, lens = stack_items([units[t] for t in texts], self.model.device)
        gists = gist_kv(self.model, items, lens)  # every item of the step once
        row = {t: i for i, t in enumerate(texts)}
        losses, token_losses, agree = [], [], []
        for cands, queries in drawn:
            idx = torch.tensor([row[c] for c in cands], device=self.model.device)
            list_items, list_lens, list_gists = items[idx], lens[idx], gists[idx]  # once for its queries
            tails, hidden = student_read(self.model, queries, list_items, list_lens, list_gists)
            students = self.model.tail_scores(hidden, tails.targets, tails.lens).view(len(queries), -1)
            if self.cfg.token_kl_weight:
                # one reader read gives both targets: its next-token distributions and, summed at the
                # query's tokens, its scores (a query-likelihood reader's score rule)
                with torch.no_grad():  # not inference mode: its outputs enter the loss's graph
                    _, reader_hidden = reader_read(self.reader, queries, list_items, list_lens)
                    reader_logp, picked = self.reader.query_logprobs(reader_hidden, tails.targets)
                targets = likelihood(reader_logp, picked).view(len(queries), -1)
                student_logp, _ = self.model.query_logprobs(hidden, tails.targets)
                token_losses.append(token_kl(reader_logp, student_logp, picked))
            else:
                targets = self._targets(queries, cands, list_items, list_lens)  # (Q, N), cached per pair
            for student, target in zip(students, targets, strict=True):
                losses.append(distill_loss(student, target, self.cfg.temperature))
                agree.append(float(student.argmax() == target.argmax()))
        loss = torch.stack(losses).mean()
        token = torch.stack(token_losses).mean() if token_losses else torch.zeros(())
        if token_losses:
            loss = loss + self.cfg.token_kl_weight * token
        for p in self.trained:
            p.grad = None
        loss.backward()
        step_masters(self.optimizer, self.master, self.trained)
        self.step += 1
        pairs = sum(len(cands) * len(queries) for cands, queries in drawn)
        cpu = time.process_time() - start
        self.pairs, self.cpu_seconds = self.pairs + pairs, self.cpu_seconds + cpu
        return {
            "step": self.step,
            "loss": float(loss.detach()),
            "token_kl": float(token.detach()),
            "top1_agreement": sum(agree) / len(agree),
            "pairs": pairs,
            "cpu_seconds": cpu,
            "items_computed": self.items.computed,
        }

    def check_holdout(self) -> dict[str, float]:
        """The gists as they are now on the held-out train queries' whole lists, each asked its own
        query and its fixed pseudo-queries: mean list-wise KL to the reader over those (list, query)
        pairs (what early stopping minimises) and over the own queries alone, overlap@10 with the
        reader's ranking, and nDCG@10 by the judgments of each list's own query; the lowest KL's gists
        are kept for the checkpoint."""
        start = time.perf_counter()
        kls, own_kls, overlaps, ndcgs = [], [], [], []
        with torch.inference_mode():
            for asked, (_, cands) in zip(self.holdout_asked, self.holdout, strict=True):
                texts, labels = [t for t, _ in cands], [label for _, label in cands]
                items, lens = stack_items(self.items.get(texts), self.model.device)
                students = student_scores(self.model, asked, items, lens, gist_kv(self.model, items, lens))
                targets = self._targets(asked, texts, items, lens)  # (Q, N), the list's own query first
                for student, target in zip(students.float(), targets.float(), strict=True):
                    kls.append(float(distill_loss(student, target, self.cfg.temperature)))
                    overlaps.append(recall_at_k_vs_reference(student.tolist(), target.tolist(), 10))
                own_kls.append(kls[-len(asked)])
                ndcgs.append(ndcg_at_k(students[0].tolist(), labels, 10))
        kl = sum(kls) / len(kls)
        if self.best is None or kl < self.best.kl:
            self.best = HeldOutBest(kl, self.step, [m.detach().clone() for m in self.master])
        return {
            "step": self.step,
            "holdout_kl": kl,
            "holdout_kl_own_query": sum(own_kls) / len(own_kls),  # what the check read before pseudo-queries
            "holdout_overlap@10": sum(overlaps) / len(overlaps),
            "holdout_ndcg@10": sum(ndcgs) / len(ndcgs),
            "best_step": self.best.step,
            "wall_seconds": time.perf_counter() - start,
        }

    def _keep_best(self) -> None:
        """The trained parameters set back to the held-out check's best (no-op without a holdout)."""
        if self.best is None:
            return
        with torch.no_grad():
            for master, best, p in zip(self.master, self.best.masters, self.trained, strict=True):
                master.copy_(best)
                p.copy_(best)

    def _fill_items(self, progress: bool) -> None:
        """Every training item's K/V before the clock starts — where they all stay (on disk, or within
        `memory_items`), so that `max_minutes` counts training steps, not the once-per-item forwards."""
        held_out = ([t for t, _ in cands] for _, cands in self.holdout)
        texts = list(dict.fromkeys(t for texts in [*self.lists, *held_out] for t in texts))
        if self.items.folder is None and len(texts) > self.items.memory_items:
            return  # they would not all stay: each is computed when a step first draws it
        start = time.perf_counter()
        self.items.fill(texts, progress)
        self.fill_seconds = time.perf_counter() - start

    def fit(self, progress: bool = True) -> list[dict[str, float]]:
        self.out.mkdir(parents=True, exist_ok=True)
        curve = []
        self._fill_items(progress)
        deadline = None if self.cfg.max_minutes is None else time.monotonic() + 60 * self.cfg.max_minutes
        with (
            (self.out / CURVE_FILE).open("a" if self.step else "w") as log,  # a fresh run: its curve alone
            tqdm(total=self.cfg.steps, desc="train gists (frozen reader)", disable=not progress) as bar,
        ):

            def log_row(record: dict[str, float]) -> None:
                curve.append(record)
                log.write(json.dumps(record) + "\n")
                log.flush()

            patience = self.cfg.holdout_patience
            if self.holdout:
                log_row(self.check_holdout())  # the gists before this fit's steps: the level to beat
            while self.step < self.cfg.steps and (deadline is None or time.monotonic() < deadline):
                start = time.perf_counter()
                record = self.train_step()
                record["wall_seconds"] = time.perf_counter() - start
                log_row(record)
                bar.update(1)
                bar.set_postfix(
                    loss=f"{record['loss']:.4f}", pairs_per_cpu_s=f"{self.pairs / self.cpu_seconds:.1f}"
                )
                if self.holdout and self.step % self.cfg.holdout_every == 0:
                    log_row(self.check_holdout())
                    bar.set_postfix(holdout_kl=f"{curve[-1]['holdout_kl']:.4f}", best_step=self.best.step)
                    if patience and self.step - self.best.step >= patience * self.cfg.holdout_every:
                        break  # no new lowest held-out KL in `patience` checks
            if self.holdout and self.step % self.cfg.holdout_every:
                log_row(self.check_holdout())  # the last steps, which no periodic check saw
        self._keep_best()
        self.model.eval().save_pretrained(self.out / "checkpoint")
        (self.out / "config.json").write_text(self.cfg.model_dump_json(indent=2) + "\n")
        return curve
