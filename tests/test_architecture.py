"""The package's floors: every import (lazy ones inside functions too) goes to a module of the
same floor or one below, and no modules import each other in a circle. The floors are the
architecture's (docs/architecture.md); a new module takes its place in FLOORS."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "knoblab"

# Lowest first. A name stands for the module and, with a trailing dot, for a package's modules.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("foundations", ("knoblab", "knoblab.errors", "knoblab.units", "knoblab.literal",
                     "knoblab.vocabulary", "knoblab.words", "knoblab.section", "knoblab.places",
                     "knoblab.terminal", "knoblab.machine", "knoblab.connection", "knoblab.admin",
                     "knoblab.catalog", "knoblab.safety", "knoblab.stopping", "knoblab.judging",
                     "knoblab.owners", "knoblab.codec", "knoblab.keys", "knoblab.seconds",
                     # pure functions on samples
                     "knoblab.stats", "knoblab.timeseries", "knoblab.evidence",
                     "knoblab.classes")),
    ("records", ("knoblab.records",)),
    ("rooms", ("knoblab.store", "knoblab.store.", "knoblab.spec", "knoblab.observe",
               "knoblab.recommend", "knoblab.server", "knoblab.server.", "knoblab.workloads",
               "knoblab.workloads.", "knoblab.datasets", "knoblab.datasets.", "knoblab.capture",
               "knoblab.capture.")),
    ("experiments", ("knoblab.results", "knoblab.runner", "knoblab.runner.", "knoblab.compare",
                     "knoblab.search", "knoblab.search.")),
    ("reports", ("knoblab.report", "knoblab.report.", "knoblab.studies")),
    ("commands", ("knoblab.capturing", "knoblab.verifying", "knoblab.consoles",
                  "knoblab.commands", "knoblab.listings", "knoblab.cli", "knoblab.manual")),
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The package's modules that `name` imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from package import module` imports the module; `from module import name`
            # the module
            targets = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
            if len(targets) < len(node.names):
                targets.append(base)
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def floor(module: str) -> int | None:
    for number, (_, names) in enumerate(FLOORS):
        if any(module == n or (n.endswith(".") and module.startswith(n)) for n in names):
            return number
    return None


def test_every_module_has_a_floor() -> None:
    assert [m for m in sorted(MODULES) if floor(m) is None] == []


def test_no_import_goes_up_a_floor() -> None:
    up = [f"{m} ({FLOORS[floor(m) or 0][0]}) imports {t} ({FLOORS[floor(t) or 0][0]})"
          for m, targets in sorted(GRAPH.items()) for t in sorted(targets)
          if (floor(t) or 0) > (floor(m) or 0)]
    assert up == []


def test_records_import_only_foundations() -> None:
    assert {t for t in GRAPH["knoblab.records"] if floor(t) != 0} == set()


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of modules that reach each other (strongly connected, more than one)."""
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[start] = seen
    groups = {frozenset({m} | {o for o in reach[m] if m in reach[o]}) for m in graph}
    return sorted(sorted(g) for g in groups if len(g) > 1)


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert _circles(GRAPH) == []


def test_a_circle_is_found_when_there_is_one() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []
