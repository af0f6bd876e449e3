"""One state folder: $GISTRANK_HOME (default ./var of the current folder) holds the catalog and Feast."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_catalog_and_feast_default_into_gistrank_home_not_the_install_tree(tmp_path: Path) -> None:
    code = (
        "from reranker.catalog.database import DEFAULT_URL\n"
        "from reranker.store import default_data_dir\n"
        "from reranker.serving.server import ServerSettings\n"
        "s = ServerSettings(model_path='m')\n"
        "print(DEFAULT_URL); print(default_data_dir()); print(s.catalog_url)\n"
        "print(s.parameters()['gist_reranker']['feast_dir'])\n"
    )
    for env, cwd, expected in (
        ({"GISTRANK_HOME": str(tmp_path / "state")}, ROOT, tmp_path / "state"),
        ({}, tmp_path, tmp_path / "var"),  # ./var of the current folder
    ):
        result = subprocess.run(
            [sys.executable, "-c", code],
            cwd=cwd,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
            capture_output=True,
            text=True,
            check=True,
        )
        catalog, feast, served_catalog, served_feast = result.stdout.splitlines()
        assert catalog == served_catalog == f"sqlite:///{expected / 'catalog.db'}"
        assert feast == served_feast == str(expected / "feast")
        assert not expected.exists()  # reading the defaults creates nothing
