"""The codebase's size and shape, as issue 51 counts them (one command, no simulation).

    python experiments/code_metrics.py [--json PATH]

Prints, for ``fabric_jax/``, ``experiments/`` and ``tests/``: lines (every line of
every ``.py`` file), functions over 100 lines, modules over 600 lines, and private names
used across modules (``from x import _y``, or ``x._y`` on a module imported from
another file; a private module imported from outside its own package counts too);
and the positional and keyword parameters of the fluid engine's device core (the
function ``simulate_fluid`` hands its prepared run to).
"""

from __future__ import annotations

import argparse
import ast
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import write_json

ROOT = Path(__file__).resolve().parents[1]
TREES = ("fabric_jax", "experiments", "tests")


def _files(tree: str):
    return sorted(p for p in (ROOT / tree).rglob("*.py") if "__pycache__" not in p.parts)


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve(mod: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = mod.split(".")
    base = base[:len(base) - node.level]
    return ".".join(base + ([node.module] if node.module else []))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _package(mod: str) -> str:
    return mod.rsplit(".", 1)[0] if "." in mod else ""


def _own_submodule(mod: str, src: str, name: str) -> bool:
    """``src.name`` is a module of the package ``mod`` belongs to (or below it)."""
    base = ROOT.joinpath(*src.split("."))
    is_module = (base / f"{name}.py").exists() or (base / name / "__init__.py").exists()
    return is_module and mod.startswith(src + ".")


def _cross_private(path: Path) -> list[str]:
    """Private names this file takes from other modules of this repository."""
    mod = _module_name(path)
    if path.name == "__init__.py":
        mod = mod + ".__init__"
    tree = ast.parse(path.read_text())
    hits, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = _resolve(mod, node)
            if not src.split(".")[0] in TREES:
                continue
            # a private module taken from outside its own package
            parts = src.split(".")
            for i, part in enumerate(parts):
                if _private(part) and not mod.startswith(".".join(parts[:i]) + "."):
                    hits.append(f"{src}")
                    break
            for a in node.names:
                if _private(a.name) and not _own_submodule(mod, src, a.name):
                    hits.append(f"{src}.{a.name}")
                aliases[a.asname or a.name] = f"{src}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in TREES:
                    aliases[a.asname or a.name.split(".")[0]] = a.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr)
                and isinstance(node.value, ast.Name) and node.value.id in aliases):
            target = aliases[node.value.id]
            if target != mod and not _own_submodule(mod, target, node.attr):
                hits.append(f"{target}.{node.attr}")
    return sorted(set(hits))


def _long_functions(path: Path, limit: int = 100) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > limit:
                out.append((f"{path.relative_to(ROOT)}:{node.name}", n))
    return out


def engine_core_arguments() -> dict:
    """The device core of the fluid engine and its parameter count."""
    import inspect

    import fabric_jax as fj
    fluid = getattr(fj, "fluid", None)
    if fluid is not None and hasattr(fluid, "run") and callable(fluid.run):
        core, name = fluid.run, "fabric_jax.fluid.run"
    else:   # before the engine contract: the private core simulate_fluid called
        from fabric_jax import fluid_step
        core, name = fluid_step._run_body, "fabric_jax.fluid_step._run"
    core = inspect.unwrap(getattr(core, "__wrapped__", core))
    params = inspect.signature(core).parameters
    return dict(core=name, arguments=len(params), names=list(params))


def metrics() -> dict:
    out = {}
    for tree in TREES:
        files = _files(tree)
        lines = sum(len(p.read_text().splitlines()) for p in files)
        long_fn = [x for p in files for x in _long_functions(p)]
        big = [(str(p.relative_to(ROOT)), len(p.read_text().splitlines())) for p in files
               if len(p.read_text().splitlines()) > 600]
        private = [f"{p.relative_to(ROOT)}: {h}" for p in files for h in _cross_private(p)]
        out[tree] = dict(files=len(files), lines=lines,
                         functions_over_100_lines=len(long_fn),
                         long_functions=sorted(long_fn, key=lambda x: -x[1]),
                         modules_over_600_lines=len(big),
                         big_modules=sorted(big, key=lambda x: -x[1]),
                         private_names_across_modules=len(private),
                         private_uses=private)
    out["engine_core"] = engine_core_arguments()
    return out


def main(argv=None) -> int:
    started = time.time()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures there as JSON")
    ap.add_argument("--verbose", action="store_true", help="list every long function, "
                    "big module and private use")
    args = ap.parse_args(argv)
    m = metrics()
    print(f"{'tree':<12}{'files':>7}{'lines':>9}{'fn>100':>8}{'mod>600':>9}{'private':>9}")
    for tree in TREES:
        r = m[tree]
        print(f"{tree:<12}{r['files']:>7}{r['lines']:>9}{r['functions_over_100_lines']:>8}"
              f"{r['modules_over_600_lines']:>9}{r['private_names_across_modules']:>9}")
        if args.verbose:
            for name, n in r["big_modules"]:
                print(f"    module {name}: {n} lines")
            for name, n in r["long_functions"]:
                print(f"    function {name}: {n} lines")
            for use in r["private_uses"]:
                print(f"    private {use}")
    core = m["engine_core"]
    print(f"fluid engine core: {core['core']} takes {core['arguments']} arguments")
    write_json(args.json, m, started=started, inputs=vars(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
