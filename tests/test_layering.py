"""The package's layering rule, computed from the code itself (docs/architecture.md).

Layers, bottom to top: core < world < ingest < models < representation < decoder < engine < training < game
< evaluation < recipes < cli. A module may import its own layer and the layers below, never one
above; no two modules import each other, directly or through others; imports sit at module top,
except in the two lazy entry points (the CLI and ``animegamer.Game``) and where an optional
dependency is tried (``try: import ... except ImportError``).
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "animegamer"
LAYERS = ["core", "world", "ingest", "models", "representation", "decoder", "engine", "training", "game", "evaluation",
          "recipes", "cli"]
LAZY_ENTRY_POINTS = {"animegamer", "animegamer.cli"}  # they import by name, on demand


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _layer(module: str) -> int:
    parts = module.split(".")
    if module in ("animegamer", "animegamer.__main__") or parts[-1].endswith("cli"):
        return LAYERS.index("cli")
    if parts[1] not in LAYERS:
        raise AssertionError(f"{module}: package {parts[1]!r} has no layer; add it to LAYERS and docs/architecture.md")
    return LAYERS.index(parts[1])


def _imports(mods: dict[str, Path]) -> tuple[dict[str, set[str]], list[str]]:
    """(module -> project modules it imports, 'module:line' of imports that are not at module top)."""
    edges: dict[str, set[str]] = defaultdict(set)
    nested = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        # an optional dependency is looked up where it is needed, inside try / except ImportError
        optional = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try)
                    and any("ImportError" in ast.unparse(h.type or ast.Name("ImportError")) for h in t.handlers)
                    for n in t.body}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if id(node) not in top and id(node) not in optional:
                nested.append(f"{name}:{node.lineno}")
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                targets = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            for t in targets:
                while t and t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name and t.startswith("animegamer."):
                    edges[name].add(t)
    return edges, nested


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(u: str) -> list[str] | None:
        state[u] = 1
        stack.append(u)
        for v in sorted(edges.get(u, ())):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state and (found := visit(v)):
                return found
        stack.pop()
        state[u] = 2
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m)):
            return found
    return None


@pytest.fixture(scope="module")
def graph():
    mods = _modules()
    return mods, *_imports(mods)


def test_every_package_has_a_layer(graph):
    mods, _, _ = graph
    for m in mods:
        _layer(m)


def test_no_upward_imports(graph):
    _, edges, _ = graph
    upward = [f"{u} -> {v}" for u, vs in edges.items() for v in vs if _layer(v) > _layer(u)]
    assert not upward, "lower layers import upper ones:\n" + "\n".join(sorted(upward))


def test_no_import_cycles(graph):
    _, edges, _ = graph
    cycle = _cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_at_module_top(graph):
    _, _, nested = graph
    nested = [n for n in nested if n.split(":")[0] not in LAZY_ENTRY_POINTS]
    assert not nested, "imports inside functions or blocks (move them to the module top):\n" + "\n".join(nested)


def test_the_checker_sees_a_cycle_and_an_upward_import():
    edges = {"animegamer.core.a": {"animegamer.game.b"}, "animegamer.game.b": {"animegamer.core.a"}}
    assert _cycle(edges) == ["animegamer.core.a", "animegamer.game.b", "animegamer.core.a"]
    assert _layer("animegamer.game.b") > _layer("animegamer.core.a")
    assert _layer("animegamer.world.cli") == _layer("animegamer.game.sessions_cli") == _layer("animegamer.cli")
