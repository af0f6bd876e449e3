"""Checkpoints shipped with GistRank, by alias: the demo's default model, usable anywhere a checkpoint
folder is. Each folder carries its model card (README.md: the exact command, data and metrics).

A shipped checkpoint holds only what training added — gist embeddings, score token, head and LoRA
adapters (safetensors) — and names its base by alias, so it is a few MB; its fingerprint covers the
base weights, so a different base behind the alias is refused at load.
"""

from __future__ import annotations

from pathlib import Path

CHECKPOINT_FILE = "gistrank.json"
DEFAULT_CHECKPOINT = "gistrank-hybrid-t32-k8"
SHIPPED = {DEFAULT_CHECKPOINT: Path(__file__).parent / "hybrid-t32-k8"}


def resolve_checkpoint(ref: str | Path) -> str | Path:
    """A shipped checkpoint's folder for its alias; anything else unchanged."""
    return SHIPPED.get(str(ref), ref)


def is_checkpoint(ref: str | Path) -> bool:
    """Whether `ref` (alias or folder) is a GistRank checkpoint rather than a base model."""
    return (Path(resolve_checkpoint(ref)) / CHECKPOINT_FILE).is_file()
