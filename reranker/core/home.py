"""Where GistRank keeps its state: one folder, $GISTRANK_HOME (default: ./var of the current folder).

The catalog (`catalog.db`), the Feast registry and SQLite online store (`feast/`), the working folders
of the demo, benchmarks and soak, and the default outputs of eval, benches and plots (`runs/`) live
there; nothing is written inside the installed package. Paths are absolute, so the processes a command
starts (tritonserver's models, consumers) find the same folder whatever their own working folder.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "GISTRANK_HOME"


def home() -> Path:
    """$GISTRANK_HOME, else ./var, as an absolute path (not created here)."""
    return Path(os.environ.get(HOME_ENV) or "var").expanduser().resolve()


def default_catalog_url() -> str:
    return f"sqlite:///{home() / 'catalog.db'}"
