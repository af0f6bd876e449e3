"""`gistrank train-reader`: a reader trained for the store it reads.

The store is fixed — any model reference with its stored-unit settings (the default: the K/V of the base's
first 128 item tokens at 4 bits) — and so is every unit in it. Only parameters that act at query rows are
trained: the reader adapter (`core/reader_adapter.py`) and, under the head rule, the score token and head.
So

    stored units   computed once per item by the store's own compressor (`StoredUnits`), no gradient:
                   exactly the bytes serving reads, and after training still valid (same store fingerprint)
    a step         reads each list's queries over those units as serving does (`read_stored`), ℓ rows
                   per (query, item) pair, back-propagating into the adapter and head only

Objectives, per list of candidates (a query with its judged candidates, or a pseudo-query):
    labels    list-wise cross-entropy to the label gains (`listwise_loss`)
    distill   KL to the full-context reader's scores — the untouched model reading the whole item, its
              shadow — computed once per pair before the first step (`distill_loss`)
    both      their sum
Pseudo-queries (`pseudo_lists`, no judgments needed): an item's title, or a sentence of it, asked of the
item (label 1) and its BM25 neighbours among the train items (label 0, hard negatives) — InPars-style.

Choices and early stopping read the dev split (nDCG@10 of the trained reader over the stored units every
`eval_every` steps; the checkpoint keeps the best step), or the last `holdout_queries` train queries when
given (the dev split then stays for the report). Pseudo-queries come from the train split's items only.
The result is an ordinary checkpoint whose store fingerprint is the store's: a reader rollout writes
nothing to the store.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Literal, NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field
from tqdm.auto import tqdm

from reranker.core.kv import StoredUnit
from reranker.core.layout import QueryTail
from reranker.core.model import Reranker
from reranker.data.relevance_data import RelevanceSet
from reranker.data.trec import bm25_top
from reranker.ranking_metrics import ndcg_at_k
from reranker.training.frozen_reader import ItemKVCache, askable, pseudo_query, step_masters
from reranker.training.objectives import distill_loss, listwise_loss
from reranker.training.trainer import CURVE_FILE

Objective = Literal["labels", "distill", "both"]


class ReaderTrainConfig(BaseModel):
    """What a reader run trains: over which store, with which signal."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="the store read: a preset, base or checkpoint reference with settings")
    rank: int = Field(8, ge=1, description="rank of the reader adapter on every projection")
    objective: Objective = "both"
    pseudo_lists: int = Field(
        0, ge=0, description="pseudo-query lists built from the set's items (title or sentence → item)"
    )
    pseudo_negatives: int = Field(7, ge=1, description="BM25 neighbours of a pseudo-query's item asked too")
    pseudo_query: Literal["title", "sentence"] = Field(
        "title",
        description="what a pseudo-list asks: the item's title (else a sentence of it), or a sentence that "
        "begins past the tokens the store keeps verbatim (a title inside a stored prefix is read off it: "
        "the list is solved from the first step and teaches nothing)",
    )
    judged: bool = Field(True, description="train on the train split's judged lists (False: pseudo only)")
    max_item_tokens: int | None = Field(None, ge=1, description="item tokens read (default: the store's)")
    dtype: str | None = Field(None, description="storage dtype of a base store (auto: this machine's)")
    memory_items: int = Field(
        4096, ge=1, description="stored units held in RAM (~2.9 MB each at 64 float32 positions of SmolLM2)"
    )
    steps: int = Field(200, ge=1)
    max_minutes: float | None = Field(None, gt=0, description="stop after this much wall time")
    lists_per_step: int = Field(4, ge=1)
    candidates_per_list: int = Field(16, ge=2)
    temperature: float = Field(1.0, gt=0.0, description="τ of the distillation KL")
    lr: float = Field(5e-4, gt=0.0)
    seed: int = 0
    eval_every: int = Field(20, ge=1, description="steps between two dev checks")
    patience: int | None = Field(None, ge=1, description="stop after this many checks without a new best")
    holdout_queries: int = Field(
        0, ge=0, description="the last N train queries choose the step instead of the dev split"
    )
    init_from: str | None = Field(None, description="a reader checkpoint over the same store to continue")


class Example(NamedTuple):
    """One list: the query asked, its candidates' texts and their labels."""

    query: str
    texts: list[str]
    labels: list[int]


class StoredUnits(ItemKVCache):
    """The store's unit of each item as serving reads it — compressed, then through the store's precision
    (`Reranker.as_stored`) — computed once."""

    desc = "stored units"
    # apart from train-gists' whole-item K/V of the same model, which a shared --cache-dir would otherwise
    # hand back for a unit (the default store's fingerprint is also its reader's)
    subfolder = "units-{fingerprint}"

    def units(self, texts: list[str], batch_size: int = 8) -> list[StoredUnit]:
        return self.reader.as_stored(self.reader.compress(texts, batch_size))


def judged_lists(data: RelevanceSet) -> list[Example]:
    """Each query of `data` with its judged candidates."""
    return [
        Example(q.text, [data.items[i].text for i, _ in cands], [label for _, label in cands])
        for q in data.queries
        if (cands := data.candidates(q.query_id))
    ]


def pseudo_lists(
    data: RelevanceSet,
    n: int,
    negatives: int,
    rng: random.Random,
    askable: Callable[[str | None], str | None],
    sentence_from: Callable[[str], int] | None = None,
) -> list[Example]:
    """`n` lists from the items alone: an item's title (else a sentence of it) as the query — or, with
    `sentence_from` (an item's text → the character its sentences may begin at), always such a sentence —
    the item (label 1) and its best BM25 neighbours among the other items (label 0)."""
    ids = rng.sample(sorted(data.items), min(n, len(data.items)))
    asked = {}
    for item_id in ids:
        item = data.items[item_id]
        if sentence_from is not None:
            query = askable(pseudo_query(item.text, rng, start=sentence_from(item.text)))
        else:
            query = askable(item.title if len(item.title.split()) >= 2 else pseudo_query(item.text, rng))
        if query is not None:
            asked[item_id] = query
    texts = {i: item.text for i, item in data.items.items()}
    top = bm25_top(texts, asked, negatives + 1)
    out = []
    for item_id, query in asked.items():
        others = [i for i in top[item_id] if i != item_id][:negatives]
        if others:
            out.append(Example(query, [texts[item_id], *(texts[i] for i in others)], [1] + [0] * len(others)))
    return out


class ReaderTrainer:
    """One run: the store's model loaded, a reader adapter added and trained; `fit` writes `curve.jsonl`,
    `checkpoint/` and `config.json` into `out`."""

    def __init__(
        self,
        cfg: ReaderTrainConfig,
        data: RelevanceSet,
        out: Path,
        device: str | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        self.cfg, self.out = cfg, Path(out)
        self.store = Reranker.read(cfg.model, cfg.dtype, max_item_tokens=cfg.max_item_tokens, device=device)
        if cfg.init_from:
            start = Reranker.read(cfg.init_from, device=device)
            if start.fingerprint != self.store.fingerprint or start.gist.reader_adapter_rank != cfg.rank:
                raise ValueError(f"init_from {cfg.init_from} reads another store or has another rank")
            self.model = start
        else:
            gist = self.store.gist.model_copy(update={"reader_adapter_rank": cfg.rank})
            self.model = self.store.with_gist_config(gist, keep_gists=True)  # the body shared
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.trained = list(self.model.reader_adapter.parameters())
        if self.model.gist.score_rule == "head":
            self.trained += [self.model.score_embedding, *self.model.head.parameters()]
        for p in self.trained:
            p.requires_grad_(True)
        # fp32 masters: the step computes in the compute dtype, a bf16 weight would round small updates away
        self.master = [p.detach().float().clone() for p in self.trained]
        self.optimizer = torch.optim.AdamW(self.master, lr=cfg.lr, weight_decay=0.0)
        self.units = StoredUnits(self.model, cache_dir, cfg.memory_items)
        # the full-context reader's scores depend on the untouched model alone, not on its store: kept beside
        # the units, one line per pair as it is computed, so a later run (another objective, a resumed one,
        # another budget, compressor or storage over the same reader) reads them back
        targets = f"targets-{self.store.full_context_fingerprint}.jsonl"
        self.targets_file = None if cache_dir is None else Path(cache_dir) / targets
        self.rng = random.Random(cfg.seed)

        train, dev = judged_lists(data.split("train")), judged_lists(data.split("dev"))
        if cfg.holdout_queries:  # the choice made on train queries no step draws, the dev split left alone
            if cfg.holdout_queries >= len(train) and cfg.judged:
                raise ValueError(
                    f"holdout_queries={cfg.holdout_queries} leaves none of {len(train)} to train on"
                )
            cut = max(len(train) - cfg.holdout_queries, 0)
            train, dev = train[:cut], train[cut:]
        self.dev = dev  # empty: no choice, the last step is kept
        lists = train if cfg.judged else []
        if cfg.pseudo_lists:  # from the train split's items: no dev text is asked of itself
            train_items = data.split("train")
            lists += pseudo_lists(
                train_items,
                cfg.pseudo_lists,
                cfg.pseudo_negatives,
                self.rng,
                lambda q: askable(self.model, q, min_words=2),  # a product title may be two words
                self.past_verbatim if cfg.pseudo_query == "sentence" else None,
            )
        if not lists:
            raise ValueError("nothing to train on: no judged train list and no pseudo-query list")
        self.lists = [x for x in lists if cfg.objective != "labels" or any(x.labels)]
        self.targets: dict[tuple[str, str], float] = {}
        self.step, self.pairs, self.cpu_seconds, self.fill_seconds = 0, 0, 0.0, 0.0
        self.best: tuple[float, int, list[torch.Tensor]] | None = None  # (dev nDCG@10, step, masters)

    # ---------------------------------------------------------------------------------- reading
    def past_verbatim(self, text: str) -> int:
        """The character of `text` where the item tokens its stored unit keeps verbatim end
        (`Compressor.verbatim_tokens`: t + k under prefix caching, t otherwise; BOS counted there)."""
        bos = self.store.tokenizer.bos_token_id is not None
        kept = self.store.compressor.verbatim_tokens(self.store.gist) - bos
        if kept <= 0:
            return 0
        encoded = self.store.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        spans = encoded["offset_mapping"]
        return spans[kept - 1][1] if len(spans) > kept else len(text)

    def read(self, queries: Sequence[str], texts: Sequence[str]) -> torch.Tensor:
        """Scores (Q, N) of each query over each candidate's stored unit, as serving reads them."""
        units = self.model.stack_units(self.units.get(list(texts)))
        tails = QueryTail.rows([self.model.query_tail(q) for q in queries], len(texts))
        return self.model.read_stored(tails, *units.tiled(len(queries))).view(len(queries), -1)

    def _fill(self, progress: bool) -> None:
        """Every list's stored units, and the full-context reader's score of every pair (distillation),
        before the clock starts: both are computed once per run."""
        start = time.perf_counter()
        texts = list(dict.fromkeys(t for x in [*self.lists, *self.dev] for t in x.texts))
        self.units.fill(texts, progress)
        if self.cfg.objective != "labels":
            self._fill_targets(progress)
        self.fill_seconds = time.perf_counter() - start

    def _fill_targets(self, progress: bool) -> None:
        """The full-context reader's score of every training pair: read back from `targets_file` where an
        earlier run over the same untouched model computed it, else computed (one forward over each list's
        missing items) and appended there, keyed by the SHA-256 of query and item (no text written)."""
        key = ItemKVCache.text_key
        known: dict[tuple[str, str], float] = {}
        if self.targets_file is not None and self.targets_file.exists():
            for line in self.targets_file.read_text().splitlines():
                row = json.loads(line)
                known[(row["query"], row["item"])] = row["score"]
        with self.targets_file.open("a") if self.targets_file is not None else nullcontext() as log:
            for x in tqdm(self.lists, desc="full-context targets", disable=not progress):
                q, items = key(x.query), {t: key(t) for t in x.texts}
                missing = [t for t, k in items.items() if (q, k) not in known]
                if missing:
                    with torch.inference_mode():
                        scores = self.store.score_full(x.query, missing).tolist()
                    rows = [
                        {"query": q, "item": items[t], "score": v}
                        for t, v in zip(missing, scores, strict=True)
                    ]
                    known.update(((q, r["item"]), r["score"]) for r in rows)
                    if log is not None:
                        log.writelines(json.dumps(r) + "\n" for r in rows)
                        log.flush()
                self.targets.update(((x.query, t), known[(q, k)]) for t, k in items.items())

    # --------------------------------------------------------------------------------- training
    def train_step(self) -> dict[str, float]:
        start = time.process_time()
        losses = []
        for _ in range(self.cfg.lists_per_step):
            x = self.lists[self.rng.randrange(len(self.lists))]
            at = self._draw(x)
            texts, labels = [x.texts[i] for i in at], torch.tensor([float(x.labels[i]) for i in at])
            scores = self.read([x.query], texts)[0]
            loss = scores.new_zeros(())
            if self.cfg.objective != "distill" and labels.any():
                loss = loss + listwise_loss(scores, labels.to(scores.device))
            if self.cfg.objective != "labels":
                target = torch.tensor([self.targets[(x.query, t)] for t in texts], device=scores.device)
                loss = loss + distill_loss(scores, target, self.cfg.temperature)
            losses.append(loss)
            self.pairs += len(texts)
        loss = torch.stack(losses).mean()
        for p in self.trained:
            p.grad = None
        loss.backward()
        step_masters(self.optimizer, self.master, self.trained)
        self.step += 1
        cpu = time.process_time() - start
        self.cpu_seconds += cpu
        return {"step": self.step, "loss": float(loss.detach()), "cpu_seconds": cpu}

    def _draw(self, x: Example) -> list[int]:
        """`candidates_per_list` of the list's candidates, one relevant among them where it has one: a
        drawn list without one would give the labels nothing to rank."""
        n = min(self.cfg.candidates_per_list, len(x.texts))
        relevant = [i for i, label in enumerate(x.labels) if label > 0]
        if not relevant:
            return self.rng.sample(range(len(x.texts)), n)
        first = self.rng.choice(relevant)
        return [first, *self.rng.sample([i for i in range(len(x.texts)) if i != first], n - 1)]

    def _set(self, masters: Sequence[torch.Tensor]) -> None:
        with torch.no_grad():
            for master, p in zip(masters, self.trained, strict=True):
                p.copy_(master)

    def check_dev(self) -> dict[str, float]:
        """nDCG@10 of the reader as it is now on the dev lists (their own queries, stored units)."""
        with torch.inference_mode():
            ndcgs = [ndcg_at_k(self.read([x.query], x.texts)[0].tolist(), x.labels, 10) for x in self.dev]
        ndcg = sum(ndcgs) / max(len(ndcgs), 1)
        if self.best is None or ndcg > self.best[0]:
            self.best = (ndcg, self.step, [m.detach().clone() for m in self.master])
        return {"step": self.step, "dev_ndcg@10": ndcg, "best_step": self.best[1]}

    def fit(self, progress: bool = True) -> list[dict[str, float]]:
        self.out.mkdir(parents=True, exist_ok=True)
        self._fill(progress)
        curve: list[dict[str, float]] = []
        deadline = None if self.cfg.max_minutes is None else time.monotonic() + 60 * self.cfg.max_minutes
        with (
            (self.out / CURVE_FILE).open("w") as log,
            tqdm(total=self.cfg.steps, desc="train reader", disable=not progress) as bar,
        ):

            def log_row(record: dict[str, float]) -> None:
                curve.append(record)
                log.write(json.dumps(record) + "\n")
                log.flush()

            if self.dev:
                log_row(self.check_dev())  # the untrained reader: the level to beat
            while self.step < self.cfg.steps and (deadline is None or time.monotonic() < deadline):
                log_row(self.train_step())
                bar.update(1)
                bar.set_postfix(
                    loss=f"{curve[-1]['loss']:.4f}", pairs_per_cpu_s=f"{self.pairs_per_cpu_s:.1f}"
                )
                if self.dev and self.step % self.cfg.eval_every == 0:
                    log_row(self.check_dev())
                    patience = self.cfg.patience
                    if patience and self.step - self.best[1] >= patience * self.cfg.eval_every:
                        break
            if self.dev and self.step % self.cfg.eval_every:
                log_row(self.check_dev())
        if self.best is not None:
            self._set(self.best[2])
        self.model.eval().save_pretrained(self.out / "checkpoint")
        (self.out / "config.json").write_text(self.cfg.model_dump_json(indent=2) + "\n")
        return curve

    @property
    def pairs_per_cpu_s(self) -> float:
        return self.pairs / max(self.cpu_seconds, 1e-9)
