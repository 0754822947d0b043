"""Imports between headrace's modules run downward only.

Every ``import`` and ``from ... import`` of a ``headrace`` module counts, wherever it
stands: at module level, under ``if TYPE_CHECKING:``, inside a function. The modules are
read with ``ast`` (nothing is imported), so the test sees what the source says, not what
happened to be loaded.

Two rules:

- no cycles between modules, however long;
- each unit (a sub-package of ``headrace``, or a module directly under it) imports only the
  units ``LAYERS`` places below it.

``LAYERS`` names, for each unit, the units it may import directly; it may also import
whatever those may (the order is transitive). In short::

    protocol < storage < broker
    storage, jvm < spark < savepoints < streaming < realtime < pipelines
    spark, fencing, settling < eventsourcing < pipelines
    fencing, settling < registry < pipelines;  cdc < pipelines;  jvm < testing < pipelines
    testing, protocol < ops < console
    broker, console, pipelines < cli < __main__

with ``errors`` and the package's own ``__init__`` (``HeadraceError``, ``__version__``)
below everything.

Only ``cli`` reaches ``broker``: everything from ``spark`` up talks to a broker through
the Kafka protocol alone (DESIGN.md). ``spark`` reads ``storage`` for one thing: the
tiered segments a backfill takes straight from the object store (``spark.cold``);
storage knows nothing of the broker.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "src" / "headrace"

# Each unit and the units it may import directly (beyond itself).
LAYERS: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "headrace": frozenset({"errors"}),  # headrace/__init__.py: HeadraceError, __version__
    "fencing": frozenset({"headrace"}),
    "settling": frozenset({"headrace"}),
    "jvm": frozenset({"headrace"}),
    "protocol": frozenset({"headrace"}),
    "storage": frozenset({"protocol"}),
    "broker": frozenset({"storage"}),
    "testing": frozenset({"jvm"}),
    "cluster": frozenset({"testing"}),
    "spark": frozenset({"protocol", "storage", "jvm"}),
    "savepoints": frozenset({"spark"}),
    "streaming": frozenset({"spark", "savepoints"}),
    "realtime": frozenset({"streaming"}),
    "registry": frozenset({"fencing", "settling"}),
    "cdc": frozenset({"headrace"}),
    "eventsourcing": frozenset({"spark", "fencing", "settling"}),
    "pipelines": frozenset({"realtime", "eventsourcing", "registry", "cdc", "testing"}),
    "ops": frozenset({"protocol", "testing"}),
    "console": frozenset({"ops"}),
    "cli": frozenset({"broker", "console", "pipelines", "cluster"}),
    "__main__": frozenset({"cli"}),
}


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``line`` of ``path``."""

    source: str
    target: str
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.path.relative_to(ROOT.parent)}:{self.line})"


def modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package's ``__init__``)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def _resolve(name: str, known: dict[str, tuple[Path, bool]]) -> str | None:
    """The longest prefix of ``name`` that is a module of ours (``headrace.x.Name`` is
    ``headrace.x``)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(source: str, name: str, is_package: bool,
            known: dict[str, tuple[Path, bool]]) -> list[tuple[str, int]]:
    """The headrace modules that module ``name`` (whose text is ``source``) imports, with
    the line of each import, wherever the import stands."""
    package = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            # ``import a.b.c`` counts as an import of ``a.b.c`` alone: the parents' inits
            # Python runs on the way are not edges (else every package that re-exports a
            # submodule would be in a cycle with it).
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # ``from pkg import sub`` imports the module ``pkg.sub``; ``from pkg import
            # name`` imports ``pkg`` itself.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        for target in targets:
            if target != "headrace" and not target.startswith("headrace."):
                continue
            resolved = _resolve(target, known)
            if resolved is not None and resolved != name \
                    and (resolved, node.lineno) not in found:
                found.append((resolved, node.lineno))
    return found


def edges() -> list[Edge]:
    """Every import of one headrace module by another."""
    known = modules()
    return [Edge(name, target, path, line)
            for name, (path, is_package) in known.items()
            for target, line in imports(path.read_text(), name, is_package, known)]


def unit(module: str) -> str:
    """``headrace.broker.handlers.fetch`` -> ``broker``; ``headrace`` -> ``headrace``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def below(start: str) -> set[str]:
    """The units ``start`` may import: ``LAYERS``' entries, transitively."""
    seen: set[str] = set()
    todo = list(LAYERS[start])
    while todo:
        u = todo.pop()
        if u not in seen:
            seen.add(u)
            todo.extend(LAYERS[u])
    return seen


def cycles(graph: dict[str, list[Edge]]) -> list[list[Edge]]:
    """One cycle (as its edges) per strongly connected component of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graph is a few hundred modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for e in graph.get(v, []):
            if e.target not in index:
                visit(e.target)
                low[v] = min(low[v], low[e.target])
            elif e.target in on_stack:
                low[v] = min(low[v], index[e.target])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    found = []
    for component in components:
        start = min(component)
        # Shortest way back to ``start`` inside the component (breadth first).
        paths: dict[str, list[Edge]] = {start: []}
        frontier = [start]
        cycle: list[Edge] | None = None
        while frontier and cycle is None:
            nxt = []
            for v in frontier:
                for e in graph.get(v, []):
                    if e.target == start:
                        cycle = [*paths[v], e]
                        break
                    if e.target in component and e.target not in paths:
                        paths[e.target] = [*paths[v], e]
                        nxt.append(e.target)
                if cycle is not None:
                    break
            frontier = nxt
        assert cycle is not None
        found.append(cycle)
    return found


def test_every_unit_has_a_layer() -> None:
    units = {unit(m) for m in modules()}
    assert units <= LAYERS.keys(), f"place {sorted(units - LAYERS.keys())} in LAYERS"
    for u in LAYERS:
        assert u not in below(u), f"LAYERS is circular: {u} is below itself"


def test_no_import_cycles() -> None:
    graph: dict[str, list[Edge]] = {}
    for e in edges():
        graph.setdefault(e.source, []).append(e)
    found = cycles(graph)
    if found:
        pytest.fail("import cycles (break each by moving what both sides need down):\n"
                    + "\n".join("  " + "\n    ".join(map(str, cycle)) for cycle in found),
                    pytrace=False)


def test_imports_run_down_the_layers() -> None:
    wrong = [e for e in edges()
             if unit(e.source) != unit(e.target) and unit(e.target) not in below(unit(e.source))]
    if wrong:
        pytest.fail("imports that run up (or across) the layers of LAYERS:\n" + "\n".join(
            f"  {e}: {unit(e.source)} may import only {', '.join(sorted(below(unit(e.source))))}"
            for e in wrong), pytrace=False)


def test_every_kind_of_import_counts() -> None:
    known = {m: (Path(), False) for m in ("headrace", "headrace.a", "headrace.a.low",
                                          "headrace.b", "headrace.b.mid", "headrace.c")}
    known["headrace.a"] = known["headrace"] = (Path(), True)
    source = """
from typing import TYPE_CHECKING
import json
import headrace.b.mid
from headrace.a import low, Thing
from . import low as again
from ..c import name
from headrace import __version__
if TYPE_CHECKING:
    from headrace.c import Typed

def later():
    from headrace.b.mid import thing
"""
    found = imports(source, "headrace.a.top", False, known)
    assert found == [("headrace.b.mid", 4), ("headrace.a.low", 5), ("headrace.a", 5),
                     ("headrace.a.low", 6), ("headrace.c", 7), ("headrace", 8),
                     ("headrace.c", 10), ("headrace.b.mid", 13)]
