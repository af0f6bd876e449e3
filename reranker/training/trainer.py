"""`gistrank train`: the full-context teacher and the gist student, one loop, each ingredient a switch.

Teacher: `score_full` (item + query), fine-tuned on graded labels.
Student: `score_masked` (item + gists + query under the gist mask — the training layout, never the
inference layout) with any mix of:
    listwise / pointwise label losses      what the labels say
    distill       KL to the teacher's scores over each query's candidates (dense, graded signal)
    hidden_distill  the query's output at every layer, reading gists, pulled towards the teacher's
                  reading the whole item (ℓ × L vectors per pair instead of one score); `centered`
                  matches only what differs between a query's candidates (the item-specific part)
    autoencode    regenerate the item's first tokens from the gists alone (label-free, many targets);
                  with no ranking loss it is a pretraining stage on random train items, and a ranking
                  run with `init` = its checkpoint (same gist config) starts from its gists
    mask curriculum    the query first reads the item with weight v, v annealed 1 → 0
    length curriculum  items capped short first, the cap grown to max_item_tokens
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
`plot_curves` draws several runs side by side (`gistrank curves`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from reranker.core.base_models import DEFAULT_BASE
from reranker.core.config import GistConfig
from reranker.core.model import GistReranker
from reranker.evaluation.ranking_metrics import accuracy_at_1
from reranker.training.relevance_data import Query, RelevanceSet

STATE_FILE = "trainer_state.json"
OPTIM_FILE = "optimizer.safetensors"
CURVE_KEYS = ("loss", "batch_acc@1", "score_spread")
Drawn = list[tuple[Query, list[tuple[str, int]]]]  # a step's queries, each with its (item id, label)s


class TrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["teacher", "student"] = "student"
    base: str = DEFAULT_BASE
    init: str | None = Field(None, description="checkpoint to start from (e.g. the trained teacher)")
    teacher: str | None = Field(None, description="teacher checkpoint for distillation")
    gist: GistConfig = GistConfig()
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
    hidden_distill: float = Field(0.0, description="weight of hidden_distill_loss (needs the teacher)")
    hidden_distill_centered: bool = Field(False, description="match only the item-specific part")
    autoencode: float = 0.0
    autoencode_tokens: int = 64
    autoencode_items: int = Field(8, description="items per step for the autoencoding loss")
    pack_queries: bool = Field(False, description="several queries per item row (GistReranker.score_packed)")
    mask_curriculum_steps: int = Field(0, description="steps over which item visibility anneals 1 → 0")
    length_curriculum_steps: int = Field(0, description="steps over which the item cap grows to max")
    min_item_tokens: int = 128
    checkpoint_every: int = 50
    seed: int = 0

    @model_validator(mode="after")
    def _compatible(self) -> TrainConfig:
        if self.hidden_distill and self.pack_queries:
            raise ValueError("hidden_distill compares one query per row: it needs pack_queries=False")
        if self.pointwise and self.gist.score_rule == "query_likelihood":
            raise ValueError("pointwise reads scores as logits; a query log-likelihood is not one")
        if not self.ranks and not (self.role == "student" and self.autoencode):
            raise ValueError(
                "no loss to train: set one of listwise, pointwise, distill, hidden_distill, autoencode"
            )
        return self

    @property
    def ranks(self) -> bool:
        """Whether any loss scores query–item pairs; a student without one only autoencodes."""
        return any((self.listwise, self.pointwise, self.distill, self.hidden_distill))


def item_visibility(cfg: TrainConfig, step: int) -> float:
    """Mask curriculum: linear 1 → 0 over `mask_curriculum_steps`, exactly 0 (the gist mask) after."""
    if cfg.role == "teacher" or step >= cfg.mask_curriculum_steps:
        return 0.0
    return 1.0 - step / cfg.mask_curriculum_steps


def item_token_cap(cfg: TrainConfig, step: int) -> int:
    """Length curriculum: linear min_item_tokens → max_item_tokens over `length_curriculum_steps`."""
    top = cfg.gist.max_item_tokens
    if step >= cfg.length_curriculum_steps:
        return top
    low = min(cfg.min_item_tokens, top)
    return low + (top - low) * step // cfg.length_curriculum_steps


def listwise_loss(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy between softmax(scores) and the label-gain distribution (2^label − 1)."""
    gains = 2.0**labels - 1.0
    return -(gains / gains.sum() * torch.log_softmax(scores, dim=0)).sum()


def distill_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(teacher ‖ student) over one query's candidates, × T² so gradients keep their scale."""
    t = torch.log_softmax(teacher / temperature, dim=0)
    s = torch.log_softmax(student / temperature, dim=0)
    return (t.exp() * (t - s)).sum() * temperature**2


def hidden_distill_loss(student: torch.Tensor, teacher: torch.Tensor, centered: bool = False) -> torch.Tensor:
    """How far one query's states (C, L, ℓ, D) over its C candidates are from the teacher's.

    Plain: mean over pairs, layers and tokens of 1 − cos(s, t). Cosine, not a squared error: a student
    whose query cannot see BOS grows massive "attention sink" activations (5× the teacher's norm) on a
    few query tokens, and a squared error is then about those tokens only.

    Centered: ‖s̃ − t̃‖² / ‖t̃‖² summed over everything, where x̃ = x − mean over the C candidates. Only
    ~2.5% of the teacher's state energy varies with the item (reports/quality.md), so the plain loss is
    nearly all about what every candidate shares; this one is 1.0 for a student that ignores its item
    and 0 when it reproduces every item's effect. Sinks, being the same for every candidate, cancel."""
    if centered:
        s, t = student - student.mean(0), teacher - teacher.mean(0)
        return (s - t).pow(2).sum() / t.pow(2).sum().clamp_min(1e-12)
    return (1.0 - torch.nn.functional.cosine_similarity(student, teacher, dim=-1)).mean()


class Trainer:
    def __init__(self, cfg: TrainConfig, data: RelevanceSet, out: Path, device: str | None = None) -> None:
        self.cfg, self.data, self.out = cfg, data, Path(out)
        self.model = self._initial_model(cfg, device)
        if cfg.train_body and cfg.lora_rank and not self.model.has_lora:
            self.model.add_lora(cfg.lora_rank, cfg.lora_alpha, seed=cfg.seed)
        self.teacher = None
        if cfg.distill > 0 or cfg.hidden_distill > 0:
            if cfg.teacher is None:
                raise ValueError("distill > 0 or hidden_distill > 0 needs a teacher checkpoint")
            self.teacher = GistReranker.from_pretrained(cfg.teacher, device=device)
            theirs, mine = self.teacher.gist.query_reading, cfg.gist.query_reading
            if cfg.hidden_distill and theirs != mine:
                raise ValueError(
                    "hidden_distill pairs the student's query rows with the teacher's: both need one score "
                    f"rule and query template (teacher {theirs}, student {mine})"
                )
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
        self._token_ids: dict[str, list[int]] = {}

    @staticmethod
    def _initial_model(cfg: TrainConfig, device: str | None) -> GistReranker:
        """`init` (a checkpoint) or `base`. A warm start takes the init's body, score token and head,
        and its gists when they have this run's layout (same k and t: an autoencoding stage's
        checkpoint; the read bias, item cap and dtype may differ); else the gists start fresh."""
        if cfg.init is None:
            return GistReranker.from_pretrained(cfg.base, cfg.gist, device=device)
        model = GistReranker.from_pretrained(cfg.init, device=device)
        if model.gist == cfg.gist:
            return model
        warm = model.with_gist_config(cfg.gist)
        if (model.gist.num_gist, model.gist.keep_item_prefix) == (
            cfg.gist.num_gist,
            cfg.gist.keep_item_prefix,
        ):
            with torch.no_grad():
                warm.gist_embeddings.copy_(model.gist_embeddings)
        return warm

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
    def _capped_text(self, item_id: str, cap: int) -> str:
        """Item text cut to `cap` tokens (length curriculum); the full text when the cap is the max."""
        text = self.data.items[item_id].text
        if cap >= self.cfg.gist.max_item_tokens:
            return text
        if item_id not in self._token_ids:
            self._token_ids[item_id] = self.model.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.model.tokenizer.decode(self._token_ids[item_id][: cap - 1])

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

    def _scores(
        self, model: GistReranker, picks: list[tuple[str, list[str]]], full: bool, vis: float
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """(C_q,) logits per picked (query text, candidate texts) and, for hidden_distill, the query's
        layer outputs (C_q, L, ℓ, D) — else empty. One row per pair, or, when packing, one row per
        distinct item holding every query it is a candidate of."""
        if self.cfg.hidden_distill:
            outs = [model.query_states(query, texts, full, vis) for query, texts in picks]
            return [scores for scores, _ in outs], [states for _, states in outs]
        if not self.cfg.pack_queries:
            if full:
                return [model.score_full(query, texts) for query, texts in picks], []
            return [model.score_masked(query, texts, item_visibility=vis) for query, texts in picks], []
        slots: dict[str, list[tuple[int, int]]] = {}
        for qi, (_, texts) in enumerate(picks):
            for ci, text in enumerate(texts):
                slots.setdefault(text, []).append((qi, ci))
        items = list(slots)
        queries = [[picks[qi][0] for qi, _ in slots[text]] for text in items]
        grid: list[list[torch.Tensor | None]] = [[None] * len(texts) for _, texts in picks]
        for text, scores in zip(items, model.score_packed(items, queries, full, vis), strict=True):
            for (qi, ci), score in zip(slots[text], scores, strict=True):
                grid[qi][ci] = score
        return [torch.stack(row) for row in grid], []  # type: ignore[arg-type]

    # ------------------------------------------------------------------------------------ steps
    def train_step(self) -> dict[str, float]:
        cfg, model = self.cfg, self.model
        model.train()
        vis = item_visibility(cfg, self.step)
        cap = item_token_cap(cfg, self.step)
        parts: dict[str, torch.Tensor] = {}
        record: dict[str, float] = {}
        n_queries = min(cfg.queries_per_step, len(self.queries))
        loss = torch.zeros((), device=model.device)
        drawn = self._draw() if cfg.ranks else []
        if drawn:
            loss, record = self._ranking_loss(drawn, vis, cap, parts)
        if cfg.autoencode and cfg.role == "student":
            # the step's candidates when ranking; else random train items (an autoencoding stage)
            ae_items = (
                list(dict.fromkeys(i for _, cands in drawn for i, _ in cands))[: cfg.autoencode_items]
                if drawn
                else self.rng.sample(self.train_items, min(cfg.autoencode_items, len(self.train_items)))
            )
            texts = [self._capped_text(i, cap) for i in ae_items]
            ae = model.autoencode_loss(texts, cfg.autoencode_tokens, vis)
            parts["autoencode"] = cfg.autoencode * ae * n_queries  # reported per step like the others
            loss = loss + cfg.autoencode * ae
            if len(texts) > 1:
                with torch.no_grad():
                    other = model.autoencode_control(texts, cfg.autoencode_tokens, vis)
                record["autoencode_gap"] = float(other - ae.detach())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for g in self.optimizer.param_groups for p in g["params"]], 1.0)
        self.optimizer.step()
        self.step += 1
        model.eval()
        losses = {name: float(v.detach()) / n_queries for name, v in parts.items()}
        return {"step": self.step, "loss": float(loss.detach()), "item_visibility": vis, "item_cap": cap} | (
            record | losses
        )

    def _ranking_loss(
        self, drawn: Drawn, vis: float, cap: int, parts: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The label / distillation losses of the drawn queries (summed into `parts`, averaged over
        queries) and the batch's acc@1 and within-query score spread."""
        cfg, model = self.cfg, self.model
        hits, spread = 0.0, 0.0
        picks = [(query.text, [self._capped_text(i, cap) for i, _ in cands]) for query, cands in drawn]
        all_scores, states = self._scores(model, picks, cfg.role == "teacher", vis)
        references, reference_states = [None] * len(picks), []
        if self.teacher is not None:
            with torch.no_grad():
                references, reference_states = self._scores(self.teacher, picks, True, 0.0)
        for mine, theirs in zip(states, reference_states, strict=True):
            gap = hidden_distill_loss(mine, theirs, cfg.hidden_distill_centered)
            _add(parts, "hidden_distill", cfg.hidden_distill * gap)
        for (_, cands), scores, reference in zip(drawn, all_scores, references, strict=True):
            labels = torch.tensor([float(label) for _, label in cands], device=model.device)
            # free signs of life: does the top score land on the best label, do scores differ at all
            hits += accuracy_at_1(scores.tolist(), labels.tolist())
            spread += float(scores.detach().std())
            if cfg.listwise:
                _add(parts, "listwise", cfg.listwise * listwise_loss(scores, labels))
            if cfg.pointwise:
                bce = torch.nn.functional.binary_cross_entropy_with_logits(scores, labels / labels.max())
                _add(parts, "pointwise", cfg.pointwise * bce)
            if reference is not None and cfg.distill:
                _add(parts, "distill", cfg.distill * distill_loss(scores, reference, cfg.distill_temperature))
        n = len(drawn)
        return sum(parts.values()) / n, {"batch_acc@1": hits / n, "score_spread": spread / n}

    def fit(self, progress: bool = True) -> list[dict[str, float]]:
        curve_path = self.out / "curve.jsonl"
        self.out.mkdir(parents=True, exist_ok=True)
        curve = []
        bar = tqdm(
            total=self.cfg.steps, initial=self.step, desc=f"train {self.cfg.role}", disable=not progress
        )
        with curve_path.open("a") as log:
            while self.step < self.cfg.steps:
                record = self.train_step()
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


def _add(parts: dict[str, torch.Tensor], name: str, value: torch.Tensor) -> None:
    parts[name] = parts[name] + value if name in parts else value


def plot_curves(runs: dict[str, Path], out: Path, smooth: int = 5, keys: Sequence[str] = CURVE_KEYS) -> Path:
    """Learning curves of several runs (label → run folder) in one PNG, one panel per logged field
    (default: total loss, batch acc@1 and within-query score spread), each a running mean over
    `smooth` steps. A run that did not log a field has no line in its panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {
        label: [json.loads(line) for line in (Path(run) / "curve.jsonl").read_text().splitlines()]
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
