"""The import graph of ``fabric_jax`` points one way.

Layers, bottom to top (README, "Architecture"): base (units, smoothing, checkpoints,
results files) -> topology -> paths / incidence / routing -> fairness -> dynamics (links,
queues, flow control, congestion control) -> simulation (event and fluid engines) ->
collectives, workloads and fabric presets -> study, scale, optimisation -> plots and CLI.

The graph is read from the source with :mod:`ast` (nothing is imported), counting every
import, also those inside functions (a lazy import still ties two modules together),
and the package ``__init__`` of every module imported from outside its package (Python
runs it first).  Two checks: no module imports one of a higher layer, and there is no
cycle at all (also within a layer).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = "fabric_jax"

#: Layer of each top-level module or subpackage of ``fabric_jax`` (0 = bottom).  A name
#: also covers ``name_*`` modules and everything inside a package of that name.
LAYERS = {
    # base
    "units": 0, "smooth": 0, "checkpoint": 0, "reference": 0, "metrics": 0, "segments": 0,
    "compiling": 0, "results": 0,
    # topology
    "topology": 1, "systems": 1, "ns3": 1,
    # paths / incidence (routing policies split flows over paths)
    "paths": 2, "incidence": 2, "routing": 2,
    # fairness (max-min solvers) and their sharded / batched drivers
    "fairness": 3,
    # dynamics
    "links": 4, "qos": 4, "flowcontrol": 4, "receiver": 4, "queueing": 4, "cc": 4,
    "faults": 4,
    # simulation
    "sim": 5, "fluid": 5, "distributed": 5,
    # collectives, workloads, fabric presets and a preset's run on paths
    "workloads": 6, "collectives": 6, "fabrics": 6, "fabric_sim": 6, "economics": 6,
    # scenario, study, scale (the training step at scale, the all-reduce sweep), optimisation
    "scenario": 7, "study": 7, "compare": 7, "scale": 7, "optimize": 7, "serve": 7,
    # plots and the command line
    "plots": 8, "cli": 8, "__main__": 8, PKG: 9,
}

#: A package's ``cli`` module (``optimize.cli``, ``scale.cli``: its subcommand's
#: parser, runner and figures) belongs to the command-line layer.

#: Edges allowed to close a cycle, each with its reason (none today).
ALLOWED_CYCLE_EDGES: dict[tuple[str, str], str] = {}


def _modules() -> dict:
    """``{dotted name: (path, is_package)}`` of every module of the package."""
    mods = {}
    for path in (ROOT / PKG).rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        mods[".".join(parts)] = (path, is_pkg)
    return mods


def _targets(mod: str, is_pkg: bool, node, mods) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == PKG]
    if node.level:
        base = mod.split(".") if is_pkg else mod.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)] + ([node.module] if node.module else [])
        base = ".".join(base)
    else:
        base = node.module or ""
    if base.split(".")[0] != PKG:
        return []
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]


def import_graph() -> dict[str, set[str]]:
    """``{module: {modules it imports}}`` inside the package (see the module docstring)."""
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, (path, is_pkg) in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(mod, is_pkg, node, mods):
                while target not in mods and "." in target:
                    target = target.rsplit(".", 1)[0]
                parts = target.split(".")
                for i in range(2, len(parts) + 1):      # the target and its packages
                    anc = ".".join(parts[:i])
                    if anc != mod and not mod.startswith(anc + "."):
                        edges[mod].add(anc)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def layer(mod: str) -> int:
    parts = mod.split(".")
    if len(parts) == 1:
        return LAYERS[PKG]
    if parts[-1] == "cli" and len(parts) > 2:   # a package's command-line block sits with the CLI
        return LAYERS["cli"]
    first = parts[1]
    for key in sorted(LAYERS, key=len, reverse=True):
        if first == key or first.startswith(key + "_"):
            return LAYERS[key]
    raise KeyError(f"{mod} has no layer: add it to LAYERS in tests/test_imports.py")


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_the_graph_sees_lazy_imports_and_packages(graph):
    # known edges of the source: a module-level, a function-level and a package import
    assert "fabric_jax.fairness" in graph["fabric_jax.sim._events"]
    assert "fabric_jax.sim" in graph["fabric_jax.collectives._plan"]     # inside a function
    assert "fabric_jax.study" in graph["fabric_jax.compare"]
    assert "fabric_jax.workloads" in graph["fabric_jax.economics"]        # the package init


def test_cycle_finder_finds_a_planted_cycle():
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(planted) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_every_module_has_a_layer_and_imports_point_down(graph):
    up = [(m, t) for m, ts in graph.items() for t in ts if layer(t) > layer(m)]
    assert not up, "imports from a lower layer into a higher one: " + ", ".join(
        f"{m} ({layer(m)}) -> {t} ({layer(t)})" for m, t in sorted(up))


def test_no_import_cycles(graph):
    pruned = {m: {t for t in ts if (m, t) not in ALLOWED_CYCLE_EDGES}
              for m, ts in graph.items()}
    found = cycles(pruned)
    assert not found, f"import cycles: {found}"
