"""Checkpoints shipped with GistRank, by alias: the demo's default model, usable anywhere a checkpoint
folder is. Each folder carries its model card (README.md: the exact command, data and metrics).

A shipped checkpoint holds only what training added — gist embeddings, score token, head and LoRA
adapters (safetensors) — and names its base by alias, so it is a few MB; its fingerprint covers the
base weights, so a different base behind the alias is refused at load.
"""

from __future__ import annotations

from pathlib import Path

CHECKPOINT_FILE = "gistrank.json"
DEFAULT_CHECKPOINT = "gistrank-hybrid-t32-k8"  # 32 raw tokens + 8 gists, head rule
QL_CHECKPOINT = "gistrank-ql-k4"  # 4 gists read by query likelihood: beats prefix caching at 4 positions
SHADOW_CHECKPOINT = "gistrank-teacher-lora"  # full-context LoRA cross-encoder on the same base and data
SHIPPED = {
    DEFAULT_CHECKPOINT: Path(__file__).parent / "hybrid-t32-k8",
    QL_CHECKPOINT: Path(__file__).parent / "ql-k4",
    SHADOW_CHECKPOINT: Path(__file__).parent / "teacher-lora",
}


def resolve_checkpoint(ref: str | Path) -> str | Path:
    """A shipped checkpoint's folder for its alias; anything else unchanged."""
    return SHIPPED.get(str(ref), ref)


def is_checkpoint(ref: str | Path) -> bool:
    """Whether `ref` (alias or folder) is a GistRank checkpoint rather than a base model."""
    return (Path(resolve_checkpoint(ref)) / CHECKPOINT_FILE).is_file()


def default_shadow(model: str | Path) -> str:
    """The full-context model that checks `model` online when none is named: the shipped teacher for a
    shipped student (all trained on the same data and base), else `model`'s own full-context forward."""
    students = (SHIPPED[DEFAULT_CHECKPOINT], SHIPPED[QL_CHECKPOINT])
    shipped_student = Path(resolve_checkpoint(model)).resolve() in {s.resolve() for s in students}
    return SHADOW_CHECKPOINT if shipped_student else str(model)
