"""The package layout's import directions (docs/layout.md), read from the source: every import, also
the lazy ones inside functions and those under TYPE_CHECKING.

Each package imports only itself and the packages ALLOWED lists for it, all below it, each a whole
package (never one module of another, nor of an entry point):

    monitoring            the metrics the stages count into: nothing of the project
    localservices         throwaway Kafka and Redis for tests, demo, benchmarks: nothing of the project
    reranker.core         the model and its stored unit: nothing of the project (the `reranker` facade
                          only re-exports the core's names, so it counts as the core)
    reranker.ranking_metrics
                          recall@K against a reference, nDCG, accuracy@1, slices, bootstrap intervals
                          (numpy only: serving's Triton backend imports it): nothing of the project
    reranker.store        the Feast facade: core
    reranker.catalog      catalog database, change events, Kafka settings, publisher, sample catalog:
                          core, monitoring
    streaming             catalog → Kafka → Feast rows: core, store, catalog, monitoring
    reranker.data         relevance sets, TREC collections, the synthetic set: core
    reranker.serving      core, store, catalog (recompute, refresh requests), ranking metrics, monitoring
    reranker.training     core, store, data, ranking metrics
    reranker.evaluation   core, store, data, ranking metrics, training
    entry points          reranker.cli, reranker.demo, reranker.bench, reranker.triton_repo: anything

Neither these packages, nor the top-level ones (reranker, streaming, monitoring, localservices), nor any
two modules (inside a package too: the core's compressors see the model through a protocol) import each
other in a cycle. The entry points sit on top and are left out of that graph; nothing else is.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("reranker", "streaming", "monitoring", "localservices")
ENTRY_POINTS = ("reranker.bench", "reranker.demo", "reranker.cli", "reranker.triton_repo")
FACADE = "reranker"  # reranker/__init__.py: lazy re-exports of the core's names

# package → the project packages it may import (a prefix matches its submodules)
ALLOWED: dict[str, tuple[str, ...]] = {
    "monitoring": ("monitoring",),
    "localservices": ("localservices",),
    "reranker.core": ("reranker.core",),
    "reranker.store": ("reranker.core", "reranker.store"),
    "reranker.catalog": ("reranker.core", "reranker.catalog", "monitoring"),
    "reranker.ranking_metrics": ("reranker.ranking_metrics",),
    "reranker.data": ("reranker.core", "reranker.data"),
    "streaming": ("reranker.core", "reranker.store", "reranker.catalog", "streaming", "monitoring"),
    "reranker.serving": (
        "reranker.core",
        "reranker.store",
        "reranker.catalog",
        "reranker.serving",
        "reranker.ranking_metrics",
        "monitoring",
    ),
    "reranker.training": (
        "reranker.core",
        "reranker.store",
        "reranker.data",
        "reranker.ranking_metrics",
        "reranker.training",
    ),
    "reranker.evaluation": (
        "reranker.core",
        "reranker.store",
        "reranker.data",
        "reranker.ranking_metrics",
        "reranker.training",
        "reranker.evaluation",
    ),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports(path: Path) -> set[str]:
    """Every project module `path` imports; `from pkg import name` counts as pkg.name when that is a
    module, else as pkg; the facade counts as the core."""
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
    return {"reranker.core" if m == FACADE else m for m in found if m.split(".")[0] in PROJECT}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def is_entry_point(module: str) -> bool:
    return any(_within(module, entry) for entry in ENTRY_POINTS)


def owner(module: str) -> str | None:
    """The package of ALLOWED that `module` belongs to; None for an entry point (or a module no rule
    covers, which test_every_source_module_has_a_rule reports)."""
    if is_entry_point(module):
        return None
    module = "reranker.core" if module == FACADE else module
    return next((pkg for pkg in sorted(ALLOWED, key=len, reverse=True) if _within(module, pkg)), None)


def top_level(module: str) -> str | None:
    """The top-level package of `module`; None for an entry point."""
    return None if is_entry_point(module) else module.split(".")[0]


SOURCES = sorted(p for pkg in PROJECT for p in (ROOT / pkg).rglob("*.py"))


def test_every_source_module_has_a_rule() -> None:
    unruled = [module_name(p) for p in SOURCES if owner(module_name(p)) is None]
    assert all(is_entry_point(m) for m in unruled), unruled


def test_every_rule_names_a_package_of_the_tree() -> None:
    names = {module_name(p) for p in SOURCES}
    stale = [pkg for pkg in ALLOWED if pkg not in names]
    stale += [a for allowed in ALLOWED.values() for a in allowed if not any(_within(n, a) for n in names)]
    assert not stale, stale


def test_rules_allow_whole_packages_only() -> None:
    """No package may import one module of another package (nor of an entry point): what it imports is
    a whole package with a rule of its own, so the layers above are all the exceptions there are."""
    exceptions = [(pkg, a) for pkg, allowed in ALLOWED.items() for a in allowed if a not in ALLOWED]
    assert not exceptions, exceptions


def wrong_way(path: Path, module: str) -> list[str]:
    """The project modules `path` (the source of `module`) imports against its package's rule."""
    pkg = owner(module)
    if pkg is None:
        return []  # an entry point may import anything
    allowed = ALLOWED[pkg]
    return sorted(m for m in project_imports(path) if not any(_within(m, a) for a in allowed))


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


# ------------------------------------------------------------------------------------------- cycles
Graph = dict[str, dict[str, str]]  # package → imported package → one import that makes the edge


def import_graph(modules: Iterable[tuple[str, Path]], package: Callable[[str], str | None]) -> Graph:
    """The graph of `package(module)` over every import of `modules` (name, source); modules and
    imports for which `package` gives None (the entry points) are left out."""
    graph: Graph = {}
    for module, path in modules:
        source = package(module)
        if source is None:
            continue
        edges = graph.setdefault(source, {})
        for imported in sorted(project_imports(path)):
            target = package(imported)
            if target is not None and target != source:
                edges.setdefault(target, f"{module} imports {imported}")
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def _explain(graph: Graph, component: list[str]) -> list[str]:
    return [graph[a][b] for a in component for b in component if b in graph.get(a, {})]


def module(name: str) -> str | None:
    """The module itself; None for an entry point."""
    return None if is_entry_point(name) else name


# no cycle between top-level packages, between packages, nor between two modules anywhere (a package's
# __init__ is a module too): no module imports, at any depth, one that imports it back
LEVELS = {"package": owner, "top-level package": top_level, "module": module}


@pytest.mark.parametrize("level", LEVELS)
def test_no_import_cycle(level: str) -> None:
    graph = import_graph(((module_name(p), p) for p in SOURCES), LEVELS[level])
    found = cycles(graph)
    assert not found, [_explain(graph, component) for component in found]


@pytest.mark.parametrize("level", LEVELS)
def test_the_rules_allow_no_cycle(level: str) -> None:
    """ALLOWED describes layers: what it lets a package import never leads back to it."""
    package = LEVELS[level]
    graph: dict[str, set[str]] = {}
    for pkg, allowed in ALLOWED.items():
        source = package(pkg)
        assert source is not None
        graph.setdefault(source, set()).update(
            target for a in allowed if (target := package(a)) is not None and target != source
        )
    assert not cycles(graph)


def test_the_cycle_check_catches_a_cycle(tmp_path: Path) -> None:
    """A lazy import is enough to close a cycle. Serving reading the catalog from streaming while
    streaming uses the core closes one between the top-level packages, though none between the packages;
    an entry point importing anything closes none."""

    def write(name: str, text: str) -> tuple[str, Path]:
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        return name, path

    streaming = write("streaming.m", "import reranker.core.render\n")
    serving = write("reranker.serving.m", "def f():\n    import streaming.catalog\n")
    cli = write("reranker.cli", "import streaming.cli\n")
    core = write("reranker.core.m", "from reranker.store import GistStore\n")
    store = write("reranker.store", "def f():\n    from reranker.core import kv_codec\n")

    top = import_graph([streaming, serving, cli], top_level)
    assert cycles(top) == [["reranker", "streaming"]]
    assert sorted(_explain(top, ["reranker", "streaming"])) == [
        "reranker.serving.m imports streaming.catalog",
        "streaming.m imports reranker.core.render",
    ]
    assert cycles(import_graph([streaming, serving], owner)) == []
    assert cycles(import_graph([streaming, cli], top_level)) == []
    assert cycles(import_graph([core, store], owner)) == [["reranker.core", "reranker.store"]]
    # inside one package: a compressor typing its argument as the model that imports the compressors
    model = write("reranker.core.model", "from reranker.core.compressors import compressor_for\n")
    compressors = write(
        "reranker.core.compressors",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from reranker.core.model import Model\n",
    )
    assert cycles(import_graph([model, compressors], owner)) == []
    assert cycles(import_graph([model, compressors], module)) == [
        ["reranker.core.compressors", "reranker.core.model"]
    ]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
