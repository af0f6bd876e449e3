"""Does the item reach the query through the stored positions? Layer by layer, a student's query states
(reading its gists, or t + k prefix + gists) against the teacher's (reading the whole item).

A ranking metric only says whether a student ranks; this says where item information is lost, before
a student ranks at all — the instrument behind the pure-gist findings in reports/quality.md. Per layer,
means over queries of each query's C candidates:

* item share T and S: ‖t̃‖² / ‖t‖², the part of the teacher's query state that varies with the item
  (x̃ = x minus its mean over the query's candidates), and the same for the student. Small for both:
  most of a query's state is the query itself. A student share far below the teacher's: its query
  hardly depends on the item, whatever its body.
* gap (1 − cos) and centered gap (‖s̃ − t̃‖² / ‖t̃‖²): `state_gap`, plain and centered.
  The centered gap is 1.0 for a student whose query ignores its item, 0 when it has every item's
  effect. Only meaningful for a student warm-started from this teacher (the same body, so the same
  state space): a student trained from the base uses its item in its own way, and gaps above 1 say
  nothing about whether it does.
* peak token norm, student and teacher: a query token far above the teacher's is an attention sink
  (the gist mask hides BOS from the query; `keep_item_prefix = 1` gives it back).
* gist V share: the item share of the values the gists store (the student's compressed K/V, gist
  slots only). It tells the two ways a student fails apart: gists that hardly depend on their item
  (writing) and a query that does not use them (reading). Layer 1's is 0 by construction: its gist
  values are projections of the gist embeddings alone.
* where attention goes (head-averaged weights, eager attention; second table): the gists' attention to
  BOS and to the rest of the item, and how many item tokens they effectively read (exp of the entropy
  of their attention over the item after BOS); the student's query's attention to its gists and to its
  raw prefix (t > 0); the teacher's query's attention to the item after BOS. JSON `meta.gist_top_tokens`
  has, per layer, the item tokens the gists attend to most (share of their item attention, summed over
  a token's occurrences, mean over items): a handful of tokens every item shares (a lone space, the
  first token) is attention-sink behaviour, and gists that write those write nothing item-specific.
* autoencoding, own vs another item (one number per run, not per layer): nats/token of regenerating
  each probed item's title and attributes from its own gists (`training.forwards.autoencode_loss`) and from
  the gists of an item of another query. Equal: the gists tell the decoder nothing about their item.
  And per query, own gists vs the gists of the next candidate of the same query — a one-field variant
  (256GB vs 128GB, 2023 vs 2021): what ranking needs. Only the few differing tokens can cost here,
  so the gap is small even for gists that carry the field; 0 is gists that do not.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch
from rich.console import Console
from tqdm.auto import tqdm

from reranker.core.compressors.select import eager_attention
from reranker.core.config import RerankerConfig
from reranker.core.model import Reranker
from reranker.data.relevance_data import RelevanceSet
from reranker.evaluation.tables import print_table, publish
from reranker.training.forwards import autoencode_control, autoencode_loss

# per layer: the gists' attention to item token 0 (BOS) and to the rest of the item, how many item
# tokens they effectively read, the student's query's attention to its gists and raw prefix, and the
# teacher's query's attention to the item after BOS
ATTENTION_KEYS = (
    "gist_to_bos",
    "gist_to_item",
    "gist_tokens_read",
    "query_to_gists",
    "query_to_prefix",
    "teacher_to_item",
)


def probe_states(
    data: RelevanceSet,
    teacher_path: str | Path,
    student_path: str | Path,
    out: Path,
    split: str = "test",
    queries: int = 8,
    candidates: int = 6,
    device: str | None = None,
    fresh_gists: tuple[int, int] | None = None,
) -> list[dict]:
    """One row per layer (JSON at `out`, table on the console). Each query contributes its `candidates`
    best-labelled judged items (exact matches and their one-field hard negatives first).
    `fresh_gists` = (k, t): probe the student's body and head with untrained gists of that config
    instead of its own (the teacher itself with fresh gists = step 0 of a warm-started student)."""
    if candidates < 2:
        raise ValueError("the centered gap needs at least 2 candidates per query")
    chosen = data.split(split).queries[:queries]
    if not chosen:
        raise ValueError(f"split {split!r} has no queries")
    teacher = Reranker.from_pretrained(teacher_path, device=device)
    student = Reranker.from_pretrained(student_path, device=device)
    if teacher.gist.query_reading != student.gist.query_reading:  # rows compare position by position
        teacher = teacher.with_gist_config(teacher.gist.model_copy(update=student.gist.query_reading))
    if fresh_gists is not None:
        k, t = fresh_gists
        student = student.with_gist_config(
            RerankerConfig(**(student.gist.model_dump() | {"num_gist": k, "keep_item_prefix": t}))
        )
    keys = ("share", "share_s", "gap", "centered", "peak_s", "peak_t", "gist_v_share", *ATTENTION_KEYS)
    sums: list[dict[str, float]] = []
    probed: list[str] = []
    same_query = {"own_per_query": 0.0, "same_query_candidate": 0.0}
    reads: list[Counter[int]] = []  # per layer: item token id → summed share of the gists' item attention
    for query in tqdm(chosen, desc="probe queries"):
        judged = sorted(data.candidates(query.query_id), key=lambda c: (-c[1], c[0]))[:candidates]
        texts = [data.items[item_id].text for item_id, _ in judged]
        probed += texts
        with torch.inference_mode():
            t = query_states(teacher, query.text, texts, full=True)  # (C, L, ℓ, D)
            s = query_states(student, query.text, texts, full=False)
            kvs = student.compress(texts)
        attention = _attention_shares(teacher, student, query.text, texts, reads)
        with torch.inference_mode():
            same_query["own_per_query"] += float(autoencode_loss(student, texts)) / len(chosen)
            variants = float(autoencode_control(student, texts, shift=1))
            same_query["same_query_candidate"] += variants / len(chosen)
        t, s = t.float(), s.float()
        gist_v = torch.stack([kv.kv[:, 1, :, kv.prefix_tokens :] for kv in kvs]).float()  # (C, L, H, k, h)
        sums = sums or [dict.fromkeys(keys, 0.0) for _ in range(t.shape[1])]
        for layer, acc in enumerate(sums):
            sl, tl = s[:, layer : layer + 1], t[:, layer : layer + 1]
            acc["share"] += _item_share(tl)
            acc["share_s"] += _item_share(sl)
            acc["gap"] += float(state_gap(sl, tl))
            acc["centered"] += float(state_gap(sl, tl, centered=True))
            acc["peak_s"] += float(sl.norm(dim=-1).max())
            acc["peak_t"] += float(tl.norm(dim=-1).max())
            acc["gist_v_share"] += _item_share(gist_v[:, layer])
            for key in ATTENTION_KEYS:
                acc[key] += attention[key][layer]
    rows = [
        {"layer": layer + 1} | {key: value / len(chosen) for key, value in acc.items()}
        for layer, acc in enumerate(sums)
    ]
    with torch.inference_mode():
        # each distinct item against the one half the list away: another query's, so mostly another
        # product (a query's own candidates are one-field variants of each other)
        unique = list(dict.fromkeys(probed))
        autoencode = {
            "own": float(autoencode_loss(student, unique)),
            "another_item": float(autoencode_control(student, unique)),
        } | same_query
    averaged = ("share", "share_s", "gap", "centered", "gist_v_share")
    mean = {key: sum(r[key] for r in rows) / len(rows) for key in averaged}
    cells = [
        [
            str(r["layer"]),
            f"{r['share']:.3f}",
            f"{r['share_s']:.3f}",
            f"{r['gap']:.3f}",
            f"{r['centered']:.3f}",
            f"{r['peak_s']:.0f}",
            f"{r['peak_t']:.0f}",
            f"{r['gist_v_share']:.4f}",
        ]
        for r in rows
    ]
    cells.append(
        ["mean", *(f"{mean[key]:.3f}" for key in averaged[:4]), "", "", f"{mean['gist_v_share']:.4f}"]
    )
    gist = student.gist
    title = (
        f"query states: student (t={gist.keep_item_prefix}, k={gist.num_gist}) vs teacher — "
        f"{len(chosen)} {split} queries × {candidates} candidates"
    )
    # short headers: the table has to fit an 80-column terminal (the docstring above says what each is)
    columns = ("layer", "share T", "share S", "1−cos", "centered", "peak S", "peak T", "gist V")
    meta = {"teacher": str(teacher_path), "student": str(student_path), "fresh_gists": fresh_gists}
    meta |= {"split": split, "mean": mean, "autoencode_nats_per_token": autoencode}
    meta["gist_top_tokens"] = [
        [[student.tokenizer.decode([tok]), share / len(probed)] for tok, share in layer.most_common(3)]
        for layer in reads
    ]
    console = Console()
    print_table(
        console,
        f"where attention goes: the student's gists and query, the teacher's query ({len(chosen)} queries)",
        ("layer", "gist→BOS", "gist→item", "gist reads", "q→gists", "q→prefix", "T q→item"),
        [[str(r["layer"]), *(f"{r[key]:.2f}" for key in ATTENTION_KEYS)] for r in rows],
    )
    publish(console, title, columns, cells, meta, rows, out)
    console.print(
        f"autoencoding from the gists: {autoencode['own']:.3f} nats/token from its own item's, "
        f"{autoencode['another_item']:.3f} from another item's; per query "
        f"{autoencode['own_per_query']:.3f} from its own, {autoencode['same_query_candidate']:.3f} "
        "from another candidate of the same query (a one-field variant)"
    )
    return rows


def query_states(model: Reranker, query: str, items: list[str], full: bool) -> torch.Tensor:
    """The query (+ score token)'s output at every layer in `score_full` (or `score_masked`)'s forward
    → (N, L, ℓ, D)."""
    rows, item_ids, q = model.tail_rows(query, items, full)
    out, seq_lens = model.forward_rows(
        rows, None if full else model.token_counts(item_ids), output_hidden_states=True
    )
    tail = q.embeds.shape[0]
    layers = out.hidden_states[1:]  # [0] is the input embeddings
    return torch.stack([model.tails(h, seq_lens, tail) for h in layers], dim=1)


def attention(
    model: Reranker, query: str, items: list[str], full: bool
) -> tuple[torch.Tensor, list[list[int]], int]:
    """Where every position looks in `score_full`'s (or `score_masked`'s) forward: attention weights
    averaged over heads → ((N, L, S, S) float32, each item's token ids, tail length ℓ). Runs with eager
    attention, the one implementation that returns weights."""
    rows, item_ids, q = model.tail_rows(query, items, full)
    with eager_attention(model), torch.inference_mode():
        lens = None if full else model.token_counts(item_ids)
        out, _ = model.forward_rows(rows, lens, output_attentions=True)
    weights = torch.stack([a.float().mean(1) for a in out.attentions], dim=1)
    return weights, item_ids, q.embeds.shape[0]


def state_gap(student: torch.Tensor, teacher: torch.Tensor, centered: bool = False) -> torch.Tensor:
    """How far one query's states (C, L, ℓ, D) over its C candidates are from the teacher's.

    Plain: mean over pairs, layers and tokens of 1 − cos(s, t). Cosine, not a squared error: a student
    whose query cannot see BOS grows massive "attention sink" activations (5× the teacher's norm) on a
    few query tokens, and a squared error is then about those tokens only.

    Centered: ‖s̃ − t̃‖² / ‖t̃‖² summed over everything, where x̃ = x − mean over the C candidates. Only
    a few percent of the teacher's state energy varies with the item, so the plain gap is nearly all
    about what every candidate shares; this one is 1.0 for a student that ignores its item and 0 when
    it reproduces every item's effect. Sinks, being the same for every candidate, cancel."""
    if centered:
        s, t = student - student.mean(0), teacher - teacher.mean(0)
        return (s - t).pow(2).sum() / t.pow(2).sum().clamp_min(1e-12)
    return (1.0 - torch.nn.functional.cosine_similarity(student, teacher, dim=-1)).mean()


def _item_share(x: torch.Tensor) -> float:
    """Fraction of x's energy that varies over dim 0 (a query's candidates): ‖x − mean‖² / ‖x‖²."""
    return float((x - x.mean(0)).pow(2).sum() / x.pow(2).sum())


def _attention_shares(
    teacher: Reranker, student: Reranker, query: str, texts: list[str], reads: list[Counter[int]]
) -> dict[str, list[float]]:
    """ATTENTION_KEYS → one value per layer (mean over the query's candidates) for one query; adds each
    candidate's per-layer token shares of the gists' item attention to `reads`."""
    t_attn, _, tail = attention(teacher, query, texts, full=True)  # (C, L, S, S)
    s_attn, item_ids, _ = attention(student, query, texts, full=False)
    k, t = student.gist.num_gist, student.gist.keep_item_prefix
    layers = s_attn.shape[1]
    reads.extend(Counter() for _ in range(layers - len(reads)))
    per_item = []
    for c, ids in enumerate(item_ids):
        j = len(ids)
        gists, asks = slice(j, j + k), slice(j + k, j + k + tail)
        to_item = s_attn[c, :, gists, 1:j]  # (L, k, j-1)
        mass = to_item.sum(-1, keepdim=True)
        p = to_item / mass.clamp_min(1e-12)
        entropy = -(p * p.clamp_min(1e-12).log()).sum(-1)  # (L, k)
        per_item.append(
            {
                "gist_to_bos": s_attn[c, :, gists, 0].mean(-1),
                "gist_to_item": mass.squeeze(-1).mean(-1),
                "gist_tokens_read": entropy.exp().mean(-1),
                "query_to_gists": s_attn[c, :, asks, j : j + k].sum(-1).mean(-1),
                "query_to_prefix": s_attn[c, :, asks, : min(t, j)].sum(-1).mean(-1),
                "teacher_to_item": t_attn[c, :, j : j + tail, 1:j].sum(-1).mean(-1),
            }
        )
        shares = p.mean(1)  # (L, j-1): the gists' item attention over item positions 1 … j-1
        tokens = torch.tensor(ids[1:])
        for layer in range(layers):
            by_token = torch.zeros(int(tokens.max()) + 1).index_add_(0, tokens, shares[layer])
            reads[layer].update({int(i): float(by_token[i]) for i in tokens.unique()})
    return {
        key: [float(sum(x[key][n] for x in per_item) / len(per_item)) for n in range(layers)]
        for key in ATTENTION_KEYS
    }
