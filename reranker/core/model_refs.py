"""The one check of a model reference that every command runs before anything heavy (loading weights,
reading data, starting a server): a typo or a missing checkpoint folder is one line naming the close
known names, not a traceback from deep inside a load a minute later."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from reranker.core.base_models import (
    DEFAULT_BASE,
    BaseModelUnavailableError,
    resolve_base,
    smollm2_gguf_path,
)
from reranker.core.checkpoints import (
    BUDGET_KIB,
    CHECKPOINT_FILE,
    PRESETS,
    SHIPPED,
    resolve_checkpoint,
    split_spec,
)
from reranker.core.errors import GistRankError, one_line


class ModelReferenceError(GistRankError):
    """A model reference that names no model here, or reading settings that do not validate."""


def check_model_ref(ref: str | Path) -> None:
    """`ref` (preset, shipped alias, checkpoint folder, base alias, HF folder or Hub id, each possibly with
    `?settings`) resolves to a model and its settings validate, else `ModelReferenceError`. Reads only
    names, folders and a checkpoint's `gistrank.json`: no weights."""
    from pydantic import ValidationError

    from reranker.core.config import RerankerConfig  # imports torch: only once the name is known to be fine

    try:
        name, settings = split_spec(ref)
    except ValueError as exc:
        raise ModelReferenceError(one_line(exc)) from None
    target = Path(resolve_checkpoint(name)).expanduser()
    saved: dict[str, object] = {}
    if str(name) == DEFAULT_BASE:
        try:
            smollm2_gguf_path()
        except BaseModelUnavailableError as exc:
            raise ModelReferenceError(str(exc)) from None
    elif (target / CHECKPOINT_FILE).is_file():
        saved = json.loads((target / CHECKPOINT_FILE).read_text()).get("gist", {})
    elif target.is_dir():
        if not (target / "config.json").is_file():
            raise ModelReferenceError(
                f"model {str(name)!r}: the folder holds neither a GistRank checkpoint ({CHECKPOINT_FILE}) "
                "nor a Hugging Face model (config.json)"
            )
    else:
        try:
            resolve_base(name)  # a Hub id passes only where the Hub is on
        except BaseModelUnavailableError as exc:
            close = difflib.get_close_matches(str(name), [*PRESETS, *SHIPPED, DEFAULT_BASE], n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ModelReferenceError(f"{exc}{hint}") from None
    # a checkpoint is read under its saved settings with the reference's over them; a base under the
    # defaults with them (fields a newer GistRank removed are the loader's to judge)
    fields = {key: value for key, value in saved.items() if key in RerankerConfig.model_fields}
    settings.pop(BUDGET_KIB, None)  # checked by split_spec; the positions it buys need the weights' shapes
    try:
        RerankerConfig.model_validate(fields | settings)
    except (ValidationError, ValueError) as exc:
        raise ModelReferenceError(f"{ref}: {one_line(exc)}") from None
