"""A local run of the server from a script (the pipeline demo, the serving benchmark): the one checkpoint
that every component loads, and the numbered steps the run prints. `ServerSettings.local` is its server."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from reranker.core.checkpoints import is_checkpoint, model_spec
from reranker.core.model import Reranker


class Steps:
    """Numbered steps of a long run: each a console rule with the seconds since the start."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def __call__(self, text: str) -> None:
        self.console.rule(f"[bold]{text}[/]  [dim]{self.elapsed():.0f}s[/]")


@dataclass(frozen=True)
class ServingModel:
    """The one checkpoint that every component of a run loads, so writer and server share a fingerprint."""

    model: Reranker
    checkpoint: str  # what the server loads: a checkpoint folder, with reading settings if any
    trained: bool  # a GistRank checkpoint (else a base wrapped with untrained gists and head)


def serving_checkpoint(
    model: str,
    workdir: Path,
    dtype: str | None = None,
    compressor: str | None = None,
    num_gist: int | None = None,
    max_item_tokens: int | None = None,
) -> ServingModel:
    """`Reranker.read`, a wrapped base saved to `workdir/model` so that the server can load it."""
    spec = model_spec(model, compressor=compressor, num_gist=num_gist, max_item_tokens=max_item_tokens)
    gist_model = Reranker.read(spec, dtype)
    if not is_checkpoint(spec):
        return ServingModel(gist_model, str(gist_model.save_pretrained(workdir / "model")), False)
    return ServingModel(gist_model, spec, True)
