"""The package layout's import directions (README "Layout"), read from the source: every import, also
the lazy ones inside functions and those under TYPE_CHECKING.

    reranker.core         the model and its stored unit: imports no other stage
    reranker.store        the Feast facade: core only
    streaming             catalog → Kafka → Feast rows: core, store, monitoring
    reranker.training     core, store, and the ranking metrics
    reranker.evaluation   core, store, training, and the benchmark harness's table printer
    reranker.serving      core, store, the catalog, event schema and publisher (recompute, refresh
                          requests), metrics
    monitoring            nothing of the project
    reranker.bench / demo / cli   entry points on top: anything
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("reranker", "streaming", "monitoring", "localservices")
ENTRY_POINTS = ("reranker.bench", "reranker.demo", "reranker.cli", "reranker.triton_repo")

# package → the project packages it may import (a prefix matches its submodules)
ALLOWED: dict[str, tuple[str, ...]] = {
    "reranker.core": ("reranker.core",),
    "reranker.store": ("reranker.core", "reranker.store"),
    "reranker.catalog": ("reranker.core", "reranker.catalog", "monitoring"),
    "streaming": ("reranker.core", "reranker.store", "reranker.catalog", "streaming", "monitoring"),
    "reranker.training": (
        "reranker.core",
        "reranker.store",
        "reranker.training",
        "reranker.evaluation.ranking_metrics",
    ),
    "reranker.evaluation": (
        "reranker.core",
        "reranker.store",
        "reranker.training",
        "reranker.evaluation",
        "reranker.bench.harness",
    ),
    "reranker.serving": (
        "reranker.core",
        "reranker.store",
        "reranker.serving",
        "reranker.evaluation.ranking_metrics",
        "reranker.catalog",
        "monitoring",
    ),
    "monitoring": ("monitoring",),
    "localservices": ("localservices",),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports(path: Path) -> set[str]:
    """Every project module `path` imports; `from pkg import name` counts as pkg.name when that is a
    module, else as pkg (the `reranker` facade re-exports the core's names)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                as_path = ROOT.joinpath(*sub.split("."))
                is_module = as_path.with_suffix(".py").is_file() or (as_path / "__init__.py").is_file()
                found.add(sub if is_module else node.module)
    return {m for m in found if m.split(".")[0] in PROJECT}


def owner(module: str) -> str | None:
    if module == "reranker" or module.startswith(ENTRY_POINTS):
        return None  # the facade (lazy re-exports of the core) and the entry points
    return next((pkg for pkg in sorted(ALLOWED, key=len, reverse=True) if _within(module, pkg)), None)


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


SOURCES = sorted(p for pkg in PROJECT for p in (ROOT / pkg).rglob("*.py"))


def test_every_source_module_has_a_rule() -> None:
    unruled = [module_name(p) for p in SOURCES if owner(module_name(p)) is None]
    expected = {"reranker", "reranker.cli"}
    assert all(m in expected or m.startswith(ENTRY_POINTS) for m in unruled), unruled


def wrong_way(path: Path, module: str) -> list[str]:
    """The project modules `path` (the source of `module`) imports against its package's rule."""
    pkg = owner(module)
    if pkg is None:
        return []  # an entry point may import anything
    allowed = ALLOWED[pkg]
    return sorted(
        m for m in project_imports(path) if m != "reranker" and not any(_within(m, a) for a in allowed)
    )


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_one_way(path: Path) -> None:
    assert not wrong_way(path, module_name(path)), module_name(path)


def test_the_rule_catches_a_wrong_way_import(tmp_path: Path) -> None:
    """Lazy imports inside functions count: a core module importing serving, or streaming importing
    training, is caught; the same imports from an entry point are not."""
    source = tmp_path / "m.py"
    source.write_text(
        "def f():\n    from reranker.serving.lookup import KVLookup\n    import reranker.training.trainer\n"
    )
    assert project_imports(source) == {"reranker.serving.lookup", "reranker.training.trainer"}
    assert wrong_way(source, "reranker.core.m") == ["reranker.serving.lookup", "reranker.training.trainer"]
    assert wrong_way(source, "streaming.m") == ["reranker.serving.lookup", "reranker.training.trainer"]
    assert wrong_way(source, "reranker.evaluation.m") == ["reranker.serving.lookup"]
    assert wrong_way(source, "reranker.bench.m") == []
