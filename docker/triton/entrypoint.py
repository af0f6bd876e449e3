"""Entry point of the compose stack's Triton container (docker/triton.Dockerfile).

Does for NVIDIA's tritonserver image what `gistrank serve` does with pytriton's bundled binary: writes
the model repository (reranker/triton_repo with this deployment's parameter values, see
`reranker.serving.server.write_repository`) and replaces itself with tritonserver, in an environment in
which the Python backend's stub imports the project and the image's virtualenv.

Settings are the fields of `ServerSettings`, read from GISTRANK_SERVE_<FIELD> variables
(GISTRANK_SERVE_MODEL_PATH, GISTRANK_SERVE_FEAST_ONLINE, GISTRANK_SERVE_HOST, ...); unset ones keep
their defaults. An unknown GISTRANK_SERVE_* name or a value of the wrong type stops the container with
a message, so that a typo in the compose file is not silently served as a default.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Mapping
from pathlib import Path

from reranker.serving.server import PROJECT_ROOT, ServerSettings, tritonserver_args, write_repository

PREFIX = "GISTRANK_SERVE_"


class SettingsError(ValueError):
    """A GISTRANK_SERVE_* variable that names no setting or does not parse."""


def settings_from_env(env: Mapping[str, str]) -> ServerSettings:
    fields = {f.name: f for f in dataclasses.fields(ServerSettings)}
    values: dict[str, object] = {}
    for key, raw in env.items():
        if not key.startswith(PREFIX):
            continue
        name = key.removeprefix(PREFIX).lower()
        field = fields.get(name)
        if field is None:
            raise SettingsError(f"{key} names no setting; known: {', '.join(sorted(fields))}")
        # Every field is a str, an int or a float (full_model_path: str | None, default None).
        kind = type(field.default) if isinstance(field.default, int | float) else str
        try:
            values[name] = kind(raw)
        except ValueError:
            raise SettingsError(f"{key}={raw!r} is not a valid {kind.__name__}") from None
    if "model_path" not in values:
        raise SettingsError(f"{PREFIX}MODEL_PATH is required")
    return ServerSettings(**values)


def tritonserver_command(settings: ServerSettings, repository: Path) -> list[str]:
    # The image's tritonserver is on PATH and finds its own backends (Python backend and stub included),
    # unlike pytriton's, for which `gistrank serve` assembles a backend directory.
    return tritonserver_args(settings, repository, backends=None, binary="tritonserver")


def stub_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The stub's embedded interpreter processes no .pth files of the virtualenv: name its paths."""
    paths = [str(PROJECT_ROOT), sysconfig.get_paths()["purelib"], env.get("PYTHONPATH", "")]
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def exec_environment(settings: ServerSettings, env: Mapping[str, str]) -> dict[str, str]:
    """tritonserver's environment: the stub's paths, and the settings the model configs only reference
    (`ServerSettings.secret_env`: passwords never appear in a config Triton serves)."""
    return stub_environment(env) | settings.secret_env()


def main() -> None:
    try:
        settings = settings_from_env(os.environ)
    except SettingsError as e:
        sys.exit(f"triton entrypoint: {e}")
    workdir = Path(settings.workdir or tempfile.mkdtemp(prefix="gistrank-triton-"))
    # A restarted container keeps its files: replace the previous run's repository.
    shutil.rmtree(workdir / "models", ignore_errors=True)
    repository = write_repository(workdir / "models", settings.parameters(), settings.instance_counts())
    command = tritonserver_command(settings, repository)
    print("exec", " ".join(command), flush=True)
    # exec: tritonserver becomes PID 1 and receives `docker stop`'s SIGTERM itself, so it unloads the
    # models (their finalize runs) before the container exits.
    os.execvpe(command[0], command, exec_environment(settings, os.environ))


if __name__ == "__main__":
    main()
