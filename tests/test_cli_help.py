"""Every command's `-h`, as a user reads it, stays what `tests/data/cli_help.txt` holds: moving commands
between modules or sharing option definitions changes no name, default or help line. An intended
change rewrites the file (`GISTRANK_WRITE_CLI_HELP=1 pytest tests/test_cli_help.py`), a diff in review."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import typer.main
from typer.testing import CliRunner

from reranker.cli import app

GOLDEN = Path(__file__).parent / "data" / "cli_help.txt"


def _paths(command: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and group below `command`, in name order."""
    out = [path]
    if hasattr(command, "commands"):  # a group
        for name in sorted(command.commands):
            out += _paths(command.commands[name], (*path, name))
    return out


def _render() -> str:
    runner = CliRunner()
    texts = []
    for path in _paths(typer.main.get_command(app)):
        result = runner.invoke(app, [*path, "-h"], prog_name="gistrank", terminal_width=100)
        assert result.exit_code == 0, (path, result.output)
        name = " ".join(("gistrank", *path))
        texts.append(f"=== {name}\n{result.output}")
    return "".join(texts)


def _render_at_a_fixed_home() -> str:
    """Defaults name $GISTRANK_HOME's absolute path (default ./var): rendered in a process whose home is
    fixed, the record reads the same in any clone."""
    env = {**os.environ, "GISTRANK_HOME": "/gistrank-home"}
    code = "import test_cli_help; print(test_cli_help._render(), end='')"
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).parent, env=env, capture_output=True
    )
    assert run.returncode == 0, run.stderr.decode()
    return run.stdout.decode()


def test_every_commands_help_is_the_recorded_one() -> None:
    text = _render_at_a_fixed_home()
    if os.environ.get("GISTRANK_WRITE_CLI_HELP") == "1":
        GOLDEN.write_text(text)
    assert text.count("=== ") >= 30  # every command and group, not an empty tree
    assert text == GOLDEN.read_text()
