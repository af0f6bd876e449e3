"""Run the bundled `tritonserver` (PyPI nvidia-pytriton) on a runtime copy of reranker/triton_repo.

What a run needs, and why (DESIGN §7):
* A backend directory holding the Python backend plus the stub built for THIS interpreter's version
  (pytriton ships one stub per Python version beside the backend, not in it).
* `LD_LIBRARY_PATH` starting with this interpreter's own lib dir: the stub links
  `libpython3.X.so.1.0`, and the system's copy of that library (a different build) fails at start with
  `'_thread.RLock' object has no attribute '_recursion_count'`. Then pytriton's bundled libraries.
* `PYTHONPATH` = project root + this interpreter's site-packages, and `PATH` starting with its bin dir,
  so the stub's embedded Python imports the project and the pinned packages (numpy < 2) of this venv.
* Every endpoint (HTTP, gRPC, Triton metrics, the model's own exporter) bound to 127.0.0.1 by default.
* Stop with SIGTERM: Triton unloads the models (their `finalize` runs) and exits. It runs as the leader
  of its own process group, which its Python stubs join, so whatever of the group outlives it is killed
  (`stop_group`): a stub whose `finalize` never returns is left behind by a Triton that gives up waiting.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Self

from reranker.core.checkpoints import default_shadow
from reranker.core.home import default_catalog_url
from reranker.store import default_data_dir

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_REPO = PROJECT_ROOT / "reranker" / "triton_repo"
GIST_MODEL = "gist_reranker"
FULL_MODEL = "full_reranker"
DEFAULT_HOST = "127.0.0.1"


class ServerError(RuntimeError):
    """tritonserver could not be prepared, did not become ready, or exited."""


# Settings that may carry a password reach the models through these variables, never as parameter values
SECRET_ENV = {"catalog_url": "GISTRANK_SERVE_CATALOG_URL", "redis_url": "GISTRANK_SERVE_REDIS_URL"}


@dataclass
class ServerSettings:
    """One `gistrank serve` run. Ports set to 0 are picked free at start."""

    model_path: str
    catalog_url: str = field(default_factory=default_catalog_url)
    full_model_path: str | None = None  # the shadow's model; default checkpoints.default_shadow(model_path)
    feast_online: str = "sqlite"  # sqlite | redis | none
    feast_dir: str = ""  # "" = GistStore's default ($GISTRANK_FEAST_DIR or $GISTRANK_HOME/feast)
    redis_url: str = ""
    feast_config: str = ""  # a Feast feature_store.yaml used as written (replaces the three above)
    feast_retry_s: float = 5.0
    l1_bytes: int = 256 * 1024 * 1024
    l1_ttl_s: float = 300.0
    shadow_rate: float = 0.02
    max_candidates: int = 200
    kafka_bootstrap_servers: str = ""  # where recomputed items go as refresh requests; "" = nowhere
    device: str = "auto"
    num_threads: int = 0
    host: str = DEFAULT_HOST
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002  # Triton's metrics endpoint: its nv_inference_* and the models' gistrank_*
    instances: int = 1  # gist_reranker model instances (processes, each with its own L1 cache)
    workdir: str = ""  # runtime repository, backends and log; "" = a fresh temporary dir

    @classmethod
    def local(cls, model_path: str, workdir: Path, **fields: object) -> ServerSettings:
        """A server for one run of a script (demo, benchmark): every port picked free at start, the
        Feast store in `workdir/feast`, Triton's runtime files in `workdir/triton`."""
        ports = dict(http_port=0, grpc_port=0, metrics_port=0)
        paths = dict(feast_dir=str(workdir / "feast"), workdir=str(workdir / "triton"))
        return cls(model_path=model_path, **(ports | paths | fields))

    @property
    def shadow_path(self) -> str:
        """The shadow's full-context model: `full_model_path`, else `checkpoints.default_shadow`."""
        return self.full_model_path or default_shadow(self.model_path)

    def parameters(self) -> dict[str, dict[str, str]]:
        """The config.pbtxt parameter values of each model for this run. Settings that may carry a
        password are references to the environment (`secret_env`): Triton serves every model's config,
        parameters included, to anyone who asks (`/v2/models/<m>/config`)."""
        secrets = {name: f"${{{var}}}" for name, var in SECRET_ENV.items()}
        gist = {
            "model_path": self.model_path,
            "device": self.device,
            "num_threads": str(self.num_threads),
            "catalog_url": secrets["catalog_url"],
            "feast_online": self.feast_online,
            # absolute: the model processes need not share this process's working folder
            "feast_dir": self.feast_dir or str(default_data_dir()),
            "redis_url": secrets["redis_url"],
            "feast_config": self.feast_config,
            "feast_retry_s": str(self.feast_retry_s),
            "kafka_bootstrap_servers": self.kafka_bootstrap_servers,
            "l1_bytes": str(self.l1_bytes),
            "l1_ttl_s": str(self.l1_ttl_s),
            "max_candidates": str(self.max_candidates),
            "shadow_rate": str(self.shadow_rate),
        }
        full = {
            "model_path": self.shadow_path,
            "device": self.device,
            "num_threads": str(self.num_threads),
            "catalog_url": secrets["catalog_url"],
            "max_candidates": str(self.max_candidates),
        }
        return {GIST_MODEL: gist, FULL_MODEL: full}

    def secret_env(self) -> dict[str, str]:
        """The environment tritonserver (and so every model process) needs for `parameters`' references."""
        return {var: getattr(self, name) for name, var in SECRET_ENV.items()}

    def instance_counts(self) -> dict[str, int]:
        """The `instance_group` count of each model for this run."""
        if self.instances < 1:
            raise ServerError(f"instances must be >= 1, got {self.instances}")
        return {GIST_MODEL: self.instances}


# ------------------------------------------------------------------------------------ the repository
_PARAM = re.compile(
    r'(parameters\s*\{\s*key:\s*"(?P<key>[^"]+)"\s*value:\s*\{\s*string_value:\s*)"(?P<value>(?:[^"\\]|\\.)*)"'
)


def _pbtxt_string(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def read_parameters(config_text: str) -> dict[str, str]:
    """The `parameters` of a config.pbtxt as {key: value} (values unescaped)."""
    return {
        m["key"]: re.sub(r"\\(.)", lambda e: "\n" if e[1] == "n" else e[1], m["value"])
        for m in _PARAM.finditer(config_text)
    }


def set_parameters(config_text: str, values: Mapping[str, str]) -> str:
    """Replace the values of listed parameters; a key the config does not list is an error."""
    unknown = sorted(set(values) - set(read_parameters(config_text)))
    if unknown:
        raise ServerError(f"parameters {unknown} are not listed in the model's config.pbtxt")

    def substitute(m: re.Match[str]) -> str:
        value = values.get(m["key"])
        return m[0] if value is None else f'{m[1]}"{_pbtxt_string(value)}"'

    return _PARAM.sub(substitute, config_text)


_INSTANCE_COUNT = re.compile(r"(instance_group\s*\[\s*\{\s*count:\s*)\d+")


def write_repository(
    dest: Path, parameters: Mapping[str, Mapping[str, str]], instances: Mapping[str, int] | None = None
) -> Path:
    """Copy reranker/triton_repo to `dest` with the given parameter values and instance counts filled in."""
    shutil.copytree(TEMPLATE_REPO, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for model in {*parameters, *(instances or {})}:
        config = dest / model / "config.pbtxt"
        if not config.is_file():
            raise ServerError(f"no model {model!r} in {TEMPLATE_REPO}")
        text = set_parameters(config.read_text(), parameters.get(model, {}))
        if instances and model in instances:
            text, found = _INSTANCE_COUNT.subn(rf"\g<1>{instances[model]}", text)
            if found != 1:
                raise ServerError(f"{config}: no single instance_group count to set")
        config.write_text(text)
    return dest


# ---------------------------------------------------------------------------- binaries and environment
def _pytriton_dir() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or spec.origin is None:
        raise ServerError("nvidia-pytriton is not installed: it provides the tritonserver binary")
    return Path(spec.origin).parent


def tritonserver_binary() -> Path:
    return _pytriton_dir() / "tritonserver" / "bin" / "tritonserver"


def write_backends(dest: Path) -> Path:
    """A backend directory: pytriton's Python backend plus the stub for this interpreter's version."""
    dist = _pytriton_dir() / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = dist / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise ServerError(f"pytriton has no Python backend stub for Python {version} ({stub})")
    shutil.copytree(dist / "backends", dest)
    shutil.copy2(stub, dest / "python" / "triton_python_backend_stub")
    return dest


def server_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for tritonserver and its Python stubs (see the module docstring)."""
    env = dict(os.environ if base is None else base)
    env.setdefault("HF_HUB_OFFLINE", "1")  # model names resolve offline (reranker.core.base_models)
    libdir = sysconfig.get_config_var("LIBDIR")
    libpython = f"libpython{sys.version_info.major}.{sys.version_info.minor}.so.1.0"
    if not libdir or not (Path(libdir) / libpython).is_file():
        raise ServerError(
            f"{sys.executable} has no shared {libpython} in {libdir}: the backend stub needs one"
        )
    pytriton_libs = _pytriton_dir().parent / "nvidia_pytriton.libs"
    env["LD_LIBRARY_PATH"] = _join(libdir, str(pytriton_libs), env.get("LD_LIBRARY_PATH", ""))
    env["PYTHONPATH"] = _join(str(PROJECT_ROOT), sysconfig.get_paths()["purelib"], env.get("PYTHONPATH", ""))
    env["PATH"] = _join(str(Path(sys.executable).parent), env.get("PATH", ""))
    return env


def _join(*parts: str) -> str:
    return os.pathsep.join(p for p in parts if p)


def tritonserver_args(
    settings: ServerSettings, repository: Path, backends: Path | None, binary: str
) -> list[str]:
    """The tritonserver command line of a run, here and in the compose image (docker/triton/entrypoint.py).

    `backends` None leaves out --backend-directory: the binary's own backend directory is used (the NVIDIA
    image's, which holds the Python backend and its stub already).
    """
    backend_directory = [] if backends is None else [f"--backend-directory={backends}"]
    return [
        binary,
        f"--model-repository={repository}",
        *backend_directory,
        f"--http-address={settings.host}",
        f"--http-port={settings.http_port}",
        f"--grpc-address={settings.host}",
        f"--grpc-port={settings.grpc_port}",
        f"--metrics-address={settings.host}",
        f"--metrics-port={settings.metrics_port}",
        "--exit-timeout-secs=20",
        # The configs are complete; auto-complete would start every Python stub one extra time
        # (importing torch, transformers and feast twice per model) before the real one.
        "--disable-auto-complete-config",
    ]


def free_port(host: str = DEFAULT_HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------- the server
def start_group(command: list[str], log: IO[bytes], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """`command` started as the leader of a new process group (and session), output into `log`: what it
    starts — Triton's Python stubs — stays in that group, for `stop_group` to end."""
    return subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=dict(env),
        start_new_session=True,
    )


def stop_group(process: subprocess.Popen[bytes], timeout_s: float) -> int:
    """SIGTERM the leader started by `start_group` and wait up to `timeout_s` (SIGKILL after), then SIGKILL
    whatever of its group is left → the leader's exit code.

    Triton stops after its exit timeout even when a model's `finalize` has not returned, and that model's
    stub then lives on as an orphan (ignoring SIGTERM, holding the model's memory): the group kill is what
    guarantees nothing of a stopped server keeps running."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            logger.error("tritonserver ignored SIGTERM for %.0f s; killing it", timeout_s)
            process.kill()
            process.wait()
    try:
        os.killpg(process.pid, signal.SIGKILL)  # the group's id is the leader's pid
    except ProcessLookupError:
        pass  # the usual case: every stub ended with its model
    else:
        logger.warning("killed what outlived tritonserver in its process group (a model's stub)")
    return process.returncode


class TritonServer:
    """tritonserver running the GistRank repository; a context manager (start on enter, stop on exit)."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self._process: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.workdir: Path | None = None
        self.log_path: Path | None = None

    @property
    def http_url(self) -> str:
        return f"{self.settings.host}:{self.settings.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.settings.host}:{self.settings.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.metrics_port}/metrics"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout_s: float = 300.0) -> Self:
        """Prepare the run directory, start tritonserver and wait until every model is ready."""
        s = self.settings
        for name in ("http_port", "grpc_port", "metrics_port"):
            if getattr(s, name) == 0:
                setattr(s, name, free_port(s.host))
        if s.workdir:
            self.workdir = Path(s.workdir)
            self.workdir.mkdir(parents=True, exist_ok=True)
            for stale in ("models", "backends"):
                shutil.rmtree(self.workdir / stale, ignore_errors=True)
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="gistrank-triton-")
            self.workdir = Path(self._tmp.name)
        repo = write_repository(self.workdir / "models", s.parameters(), s.instance_counts())
        backends = write_backends(self.workdir / "backends")
        self.log_path = self.workdir / "tritonserver.log"
        command = tritonserver_args(s, repo, backends, str(tritonserver_binary()))
        logger.info("starting %s (log %s)", " ".join(command), self.log_path)
        with open(self.log_path, "wb") as log:
            self._process = start_group(command, log, server_env() | s.secret_env())
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        url = f"http://{self.http_url}/v2/health/ready"
        while time.monotonic() < deadline:
            if not self.running:
                raise ServerError(f"tritonserver exited while starting:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass  # not listening yet, or models still loading (400)
            time.sleep(0.5)
        raise ServerError(f"tritonserver not ready after {timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM, wait for Triton to unload the models and exit (SIGKILL only if it does not in time), then
        kill what is left of its process group (`stop_group`)."""
        process, self._process = self._process, None
        code = None if process is None else stop_group(process, timeout_s)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        return code

    def __enter__(self) -> Self:
        return self.start() if self._process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
