"""`gistrank train`: the full-context teacher and the gist student, one loop over a list of objectives.

Teacher: `score_full` (item + query), fine-tuned on graded labels.
Student: `score_masked` (item + gists + query under the gist mask — the training layout, never the
inference layout). A step draws queries with candidates, scores them once, and sums its objectives
(reranker/training/objectives.py):
    listwise / pointwise  what the labels say
    distill       KL to the teacher's scores over each query's candidates (dense, graded signal)
    autoencode    regenerate the item's first tokens from the gists alone (label-free, many targets);
                  with no ranking loss it is a pretraining stage on random train items, and a ranking
                  run with `init` = its checkpoint (same gist config) starts from its gists
Other switches:
    pack_queries  queries that share candidates drawn together, each item run once per step with all
                  its queries in one row (4D mask): more pairs per second of item compute
    warm start    `init` = a trained teacher checkpoint (same base; its gists are not reused)
    train_body    False trains only gists, score token and head (the checkpoint stays a few KB)
    lora_rank     > 0 trains LoRA adapters on the body instead of every weight (peft; the checkpoint
                  holds adapters, not a copy of the base)

Progress bar, JSONL learning curve (losses, and the batch's acc@1 and within-query score spread: a
student that has not started keeps a spread near 0; with autoencoding, `autoencode_gap`: how much
better the gists regenerate their own item than another's, ~0 until they carry the item), periodic
checkpoints and resume (`--resume`).
`plot_curves` draws several runs side by side (`gistrank curves`). Settings that were measured not to
help (read bias, mask and length curricula, hidden-state distillation) were removed in commit 6dd9ce1;
commit faba5cc is the last that has them, their findings are in reports/experiments/.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from reranker.core.base_models import DEFAULT_BASE
from reranker.core.config import RerankerConfig
from reranker.core.model import Reranker
from reranker.data.relevance_data import Query, RelevanceSet
from reranker.training.forwards import score_packed
from reranker.training.objectives import Autoencode, Batch, Distill, Listwise, Objective, Pointwise

STATE_FILE = "trainer_state.json"
OPTIM_FILE = "optimizer.safetensors"
CURVE_KEYS = ("loss", "batch_acc@1", "score_spread")
CURVE_FILE = "curve.jsonl"  # one JSON record per step, each with its wall time ("wall_seconds")
Drawn = list[tuple[Query, list[tuple[str, int]]]]  # a step's queries, each with its (item id, label)s


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["teacher", "student"] = "student"
    base: str = DEFAULT_BASE
    init: str | None = Field(None, description="checkpoint to start from (e.g. the trained teacher)")
    teacher: str | None = Field(None, description="teacher checkpoint for distillation")
    gist: RerankerConfig = RerankerConfig()
    steps: int = Field(200, ge=1)
    queries_per_step: int = Field(4, ge=1)
    candidates_per_query: int = Field(8, ge=2)
    lr_body: float = 5e-5
    lr_gist: float = 5e-4
    train_body: bool = True
    lora_rank: int = Field(0, ge=0, description="0: full fine-tuning of the body (when train_body)")
    lora_alpha: float = 16.0
    listwise: float = 1.0
    pointwise: float = 0.0
    distill: float = 0.0
    distill_temperature: float = 1.0
    autoencode: float = 0.0
    autoencode_tokens: int = 64
    autoencode_items: int = Field(8, description="items per step for the autoencoding loss")
    pack_queries: bool = Field(
        False, description="several queries per item row (training.forwards.score_packed)"
    )
    checkpoint_every: int = 50
    seed: int = 0

    @model_validator(mode="after")
    def _compatible(self) -> TrainConfig:
        if self.pointwise and self.gist.score_rule == "query_likelihood":
            raise ValueError("pointwise reads scores as logits; a query log-likelihood is not one")
        if not self.ranks and not (self.role == "student" and self.autoencode):
            raise ValueError("no loss to train: set one of listwise, pointwise, distill, autoencode")
        return self

    @property
    def ranks(self) -> bool:
        """Whether any loss scores query–item pairs; a student without one only autoencodes."""
        return any((self.listwise, self.pointwise, self.distill))


def objectives_for(cfg: TrainConfig, teacher: Reranker | None) -> list[Objective]:
    """The objectives a TrainConfig switches on, in a fixed order."""
    out: list[Objective] = []
    if cfg.listwise:
        out.append(Listwise(cfg.listwise))
    if cfg.pointwise:
        out.append(Pointwise(cfg.pointwise))
    if cfg.distill:
        if teacher is None:
            raise ValueError("distill > 0 needs a teacher checkpoint")
        out.append(Distill(cfg.distill, cfg.distill_temperature, teacher))
    if cfg.autoencode and cfg.role == "student":
        out.append(Autoencode(cfg.autoencode, cfg.autoencode_tokens, cfg.autoencode_items))
    return out


class Trainer:
    def __init__(self, cfg: TrainConfig, data: RelevanceSet, out: Path, device: str | None = None) -> None:
        self.cfg, self.data, self.out = cfg, data, Path(out)
        self.model = self._initial_model(cfg, device)
        if cfg.train_body and cfg.lora_rank and not self.model.has_lora:
            self.model.add_lora(cfg.lora_rank, cfg.lora_alpha, seed=cfg.seed)
        teacher = None
        if cfg.distill > 0:
            if cfg.teacher is None:
                raise ValueError("distill > 0 needs a teacher checkpoint")
            teacher = Reranker.from_pretrained(cfg.teacher, device=device)
        self.objectives: list[Objective] = objectives_for(cfg, teacher)
        self.optimizer = torch.optim.AdamW(self._param_groups(), weight_decay=0.0)
        self.queries = [
            q
            for q in data.split("train").queries
            if any(label > 0 for _, label in data.candidates(q.query_id))
        ]
        if not self.queries:
            raise ValueError("the train split has no query with a relevant candidate")
        self.train_items = sorted({i for q in self.queries for i, _ in data.candidates(q.query_id)})
        self.rng = random.Random(cfg.seed)
        self.step = 0

    @staticmethod
    def _initial_model(cfg: TrainConfig, device: str | None) -> Reranker:
        """`init` (a checkpoint) or `base`. A warm start takes the init's body, score token and head,
        and its gists when they have this run's layout (same k, t and windows: an autoencoding stage's
        checkpoint; the item cap and dtype may differ); else the gists start fresh."""
        if cfg.init is None:
            return Reranker.from_pretrained(cfg.base, cfg.gist, device=device)
        model = Reranker.from_pretrained(cfg.init, device=device)
        if model.gist == cfg.gist:
            return model
        return model.with_gist_config(cfg.gist, keep_gists=model.gist.slot_layout == cfg.gist.slot_layout)

    def _param_groups(self) -> list[dict]:
        m = self.model
        gist_params = [m.gist_embeddings, m.score_embedding, *m.head.parameters()]
        if not self.cfg.train_body:
            body = []
        elif m.has_lora:
            body = [p for name, p in m.lm.named_parameters() if ".lora_" in name]
        else:
            body = list(m.lm.parameters())
        trainable = {id(p) for p in gist_params + body}
        for p in m.parameters():
            p.requires_grad_(id(p) in trainable)
        groups = [{"params": gist_params, "lr": self.cfg.lr_gist}]
        if body:
            groups.append({"params": body, "lr": self.cfg.lr_body})
        return groups

    # ---------------------------------------------------------------------------------- batches
    def _sample(self, query_id: str, in_step: set[str]) -> list[tuple[str, int]]:
        """Every relevant candidate of the query (up to the budget), the rest drawn from its negatives,
        first from those already in the step (`in_step`, when packing). Drawn independently, a query's
        8 of 24 judged candidates rarely meet another query's 8: packed rows held 1.2–1.3 pairs on the
        synthetic set (2–8 queries per step), 1.2–1.7 with this preference."""
        cands = self.data.candidates(query_id)
        pos = [c for c in cands if c[1] > 0]
        n = self.cfg.candidates_per_query
        chosen = self.rng.sample(pos, min(len(pos), n - 1)) if len(pos) >= n else pos
        shared = [c for c in cands if c[1] == 0 and c[0] in in_step]
        shared = self.rng.sample(shared, min(len(shared), n - len(chosen)))
        rest = [c for c in cands if c[1] == 0 and c not in shared]
        return chosen + shared + self.rng.sample(rest, min(len(rest), n - len(chosen) - len(shared)))

    def _draw_queries(self) -> list[Query]:
        """The step's queries: a random sample; when packing, a random anchor plus the queries whose
        candidate lists overlap it most, so that items carry several queries per row."""
        n = min(self.cfg.queries_per_step, len(self.queries))
        if not self.cfg.pack_queries:
            return self.rng.sample(self.queries, n)
        anchor = self.rng.choice(self.queries)
        mine = {item_id for item_id, _ in self.data.candidates(anchor.query_id)}

        def shared(q: Query) -> int:
            return len(mine.intersection(item_id for item_id, _ in self.data.candidates(q.query_id)))

        others = (q for q in self.queries if q is not anchor)
        ranked = sorted(others, key=lambda q: (-shared(q), self.rng.random()))
        return [anchor, *ranked[: n - 1]]

    def _draw(self) -> Drawn:
        """The step's queries, each with its (item id, label) candidates."""
        drawn: Drawn = []
        in_step: set[str] = set()
        for query in self._draw_queries():
            drawn.append((query, self._sample(query.query_id, in_step)))
            if self.cfg.pack_queries:
                in_step.update(item_id for item_id, _ in drawn[-1][1])
        return drawn

    def _texts(self, drawn: Drawn) -> list[tuple[str, list[str]]]:
        return [(query.text, [self.data.items[i].text for i, _ in cands]) for query, cands in drawn]

    def scores(self, model: Reranker, picks: list[tuple[str, list[str]]], full: bool) -> list[torch.Tensor]:
        """(C_q,) scores per picked (query text, candidate texts): one row per pair, or, when packing,
        one row per distinct item holding every query it is a candidate of."""
        if not self.cfg.pack_queries:
            score = model.score_full if full else model.score_masked
            return [score(query, texts) for query, texts in picks]
        slots: dict[str, list[tuple[int, int]]] = {}
        for qi, (_, texts) in enumerate(picks):
            for ci, text in enumerate(texts):
                slots.setdefault(text, []).append((qi, ci))
        items = list(slots)
        queries = [[picks[qi][0] for qi, _ in slots[text]] for text in items]
        grid: list[list[torch.Tensor | None]] = [[None] * len(texts) for _, texts in picks]
        for text, scores in zip(items, score_packed(model, items, queries, full), strict=True):
            for (qi, ci), score in zip(slots[text], scores, strict=True):
                grid[qi][ci] = score
        return [torch.stack(row) for row in grid]  # type: ignore[arg-type]

    def _batch(self) -> Batch:
        """The step's queries and the model's scores of their candidates (none in an autoencoding stage:
        it draws random train items instead)."""
        if not self.cfg.ranks:
            n = min(self.cfg.autoencode_items, len(self.train_items))
            return Batch(texts=[], labels=[], scores=[], items=self.rng.sample(self.train_items, n))
        drawn = self._draw()
        texts = self._texts(drawn)
        labels = [
            torch.tensor([float(label) for _, label in cands], device=self.model.device) for _, cands in drawn
        ]
        scores = self.scores(self.model, texts, full=self.cfg.role == "teacher")
        items = list(dict.fromkeys(i for _, cands in drawn for i, _ in cands))
        return Batch(texts=texts, labels=labels, scores=scores, items=items)

    # ------------------------------------------------------------------------------------ steps
    def train_step(self) -> dict[str, float]:
        """Draw a batch, sum the objectives' losses, take one clipped optimizer step."""
        self.model.train()
        batch = self._batch()
        losses = {o.name: o.loss(self, batch) for o in self.objectives}
        loss = torch.stack(list(losses.values())).sum()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for g in self.optimizer.param_groups for p in g["params"]], 1.0)
        self.optimizer.step()
        self.step += 1
        self.model.eval()
        record = {"step": self.step, "loss": float(loss.detach())} | batch.signs_of_life()
        return record | {name: float(v.detach()) for name, v in losses.items()}

    def fit(self, progress: bool = True) -> list[dict[str, float]]:
        curve_path = self.out / CURVE_FILE
        self.out.mkdir(parents=True, exist_ok=True)
        curve = []
        bar = tqdm(
            total=self.cfg.steps, initial=self.step, desc=f"train {self.cfg.role}", disable=not progress
        )
        with curve_path.open("a") as log:
            while self.step < self.cfg.steps:
                start = time.perf_counter()
                record = self.train_step()
                record["wall_seconds"] = time.perf_counter() - start
                curve.append(record)
                log.write(json.dumps(record) + "\n")
                log.flush()
                bar.update(1)
                bar.set_postfix(loss=f"{record['loss']:.3f}")
                if self.step % self.cfg.checkpoint_every == 0 or self.step == self.cfg.steps:
                    self.save_checkpoint()
        bar.close()
        return curve

    # ------------------------------------------------------------------------- checkpoint/resume
    def save_checkpoint(self) -> Path:
        """`out/checkpoint` (a loadable GistRank checkpoint) + optimizer moments and trainer state."""
        ckpt = self.out / "checkpoint"
        # the body must travel with the checkpoint once it differs from the referenced base: trained
        # here, or inherited from a checkpoint that stored its own (a warm start from the teacher)
        inherited = self.cfg.init is not None and (Path(self.cfg.init) / "base").is_dir()
        full_fine_tune = self.cfg.train_body and not self.model.has_lora
        self.model.save_pretrained(ckpt, store_base=full_fine_tune or inherited)
        moments = {
            f"{index}.{key}": value.detach().cpu().contiguous()
            for index, entry in self.optimizer.state_dict()["state"].items()
            for key, value in entry.items()
        }
        save_file(moments, self.out / OPTIM_FILE)
        state = {"step": self.step, "rng": list(self.rng.getstate()[1]), "config": self.cfg.model_dump()}
        (self.out / STATE_FILE).write_text(json.dumps(state) + "\n")
        return ckpt

    @classmethod
    def resume(
        cls, out: Path, data: RelevanceSet, device: str | None = None, steps: int | None = None
    ) -> Trainer:
        """Continue the run saved in `out` exactly where it stopped; `steps`: run until this many steps
        in all instead of the saved total (extends a finished run as if it had been that long)."""
        state = json.loads((Path(out) / STATE_FILE).read_text())
        cfg = TrainConfig(**state["config"])
        if steps is not None:
            if steps <= state["step"]:
                raise ValueError(f"the run is already at step {state['step']}: give more steps")
            cfg = cfg.model_copy(update={"steps": steps})
        trainer = cls(cfg.model_copy(update={"init": str(Path(out) / "checkpoint")}), data, out, device)
        trainer.cfg = cfg
        trainer.step = state["step"]
        trainer.rng.setstate((3, tuple(state["rng"]), None))
        optim = trainer.optimizer.state_dict()
        for name, value in load_file(Path(out) / OPTIM_FILE, device=str(trainer.model.device)).items():
            index, key = name.split(".", 1)
            optim["state"].setdefault(int(index), {})[key] = value
        trainer.optimizer.load_state_dict(optim)
        return trainer


def training_seconds(checkpoint: str | Path) -> float | None:
    """Wall time of the run that wrote `checkpoint` (its run folder's curve, every step timed), None when
    there is no such curve (a shipped checkpoint, a run logged before steps were timed)."""
    curve = Path(checkpoint).parent / CURVE_FILE
    if Path(checkpoint).name != "checkpoint" or not curve.is_file():
        return None
    records = [json.loads(line) for line in curve.read_text().splitlines() if line.strip()]
    if not records or any("wall_seconds" not in r for r in records):
        return None
    return sum(r["wall_seconds"] for r in records)


def plot_curves(runs: dict[str, Path], out: Path, smooth: int = 5, keys: Sequence[str] = CURVE_KEYS) -> Path:
    """Learning curves of several runs (label → run folder) in one PNG, one panel per logged field
    (default: total loss, batch acc@1 and within-query score spread), each a running mean over
    `smooth` steps. A run that did not log a field has no line in its panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {
        label: [json.loads(line) for line in (Path(run) / CURVE_FILE).read_text().splitlines()]
        for label, run in runs.items()
    }
    logged = {key for curve in curves.values() for row in curve for key in row}
    unknown = [key for key in keys if key not in logged]
    if unknown:
        raise ValueError(f"no run logged {unknown}; fields logged: {sorted(logged - {'step'})}")
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 4), squeeze=False)
    axes = axes[0]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (label, curve) in enumerate(curves.items()):
        color = colors[index % len(colors)]  # one colour per run in every panel, whatever it logged
        for ax, key in zip(axes, keys, strict=True):
            points = [(r["step"], r[key]) for r in curve if key in r]
            if not points:
                continue
            steps, values = zip(*points, strict=True)
            window = [values[max(0, i - smooth + 1) : i + 1] for i in range(len(values))]
            ax.plot(steps, [sum(w) / len(w) for w in window], color=color, label=label)
    for ax, key in zip(axes, keys, strict=True):
        ax.set_xlabel("step")
        ax.set_title(f"{key} (running mean of {smooth})")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
