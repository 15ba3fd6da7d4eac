"""Kernel counts from compiled XLA programs: the CPU proxy of GPU kernel launches.

XLA compiles a program into *fusions*; on a GPU each fusion is (about) one kernel launch,
about 5 us whatever its size, so a time step made of hundreds of small fusions is
launch-bound long before it is memory-bound.  ``compiled.as_text()`` (the optimised HLO)
shows them on any backend: this module counts the fusions of a program, of each of its
loops, and the launches one step of the outer time loop costs given the trip counts of
the loops inside it (measured, e.g. :attr:`fabric_jax.FluidInfo.solver_iterations`).

The counts are XLA-version and backend dependent (the CPU backend fuses less than the
GPU's: no multi-output sibling fusion, reductions handed to YNNPACK stand alone), so they
are compared within one run, before and after a change.
"""

from __future__ import annotations

import re

__all__ = ["kernel_counts", "compiled_text", "compiled_fluid_run", "launches_per_step"]

_FUSION = re.compile(r"^\s*%\S+ = .*? fusion\(", re.M)
_WHILE = re.compile(r"^\s*%\S+ = .*? while\(.*?condition=(%[\w.\-]+), body=(%[\w.\-]+)", re.M)


def compiled_text(fn, *args, **kwargs) -> str:
    """The optimised HLO of ``jax.jit(fn)(*args, **kwargs)`` (``fn`` may be jitted)."""
    import jax
    lowered = (fn if hasattr(fn, "lower") else jax.jit(fn)).lower(*args, **kwargs)
    return lowered.compile().as_text()


def compiled_fluid_run(*args, **kwargs):
    """``(compiled, result)``: :func:`fabric_jax.simulate_fluid` run with these arguments,
    and its jitted core (``fabric_jax.fluid_step._run``) compiled for the arguments it got
    (caught on the way in: the public function prepares them on the host)."""
    import fabric_jax.fluid as fl
    import fabric_jax.fluid_step as fs
    captured = {}
    orig = fs._run

    def spy(*a):
        captured["a"] = a
        return orig(*a)
    fs._run = spy
    try:
        res = fl.simulate_fluid(*args, **kwargs)
    finally:
        fs._run = orig
    return orig.lower(*captured["a"]).compile(), res


def _computations(text: str) -> dict:
    comps = {}
    for block in re.split(r"\n(?=\S)", text):
        head = block.split(" ", 1)[0]
        if head.startswith("%") or head == "ENTRY":
            comps[head] = block
    return comps


def kernel_counts(text: str) -> dict:
    """Fusions of an optimised HLO module, in all and per loop.

    Returns:
      ``{"fusions": int, "entry": int, "loops": [{"body", "cond", "fusions",
      "cond_fusions", "parent", "depth"}], "step": the loop whose body holds the most
      fusions among the innermost time loops (see :func:`launches_per_step`)}``.
    """
    comps = _computations(text)
    total = len(_FUSION.findall(text))
    loops = []
    parent_of = {}
    for name, block in comps.items():
        for cond, body in _WHILE.findall(block):
            parent_of[body] = name
            loops.append(dict(body=body, cond=cond, text=comps.get(body, ""),
                              fusions=len(_FUSION.findall(comps.get(body, ""))),
                              cond_fusions=len(_FUSION.findall(comps.get(cond, "")))))
    for lp in loops:
        lp["parent"] = parent_of.get(lp["body"])
        depth, p = 0, lp["parent"]
        while p in parent_of:
            depth, p = depth + 1, parent_of[p]
        lp["depth"] = depth
    entry = len(_FUSION.findall(comps.get("ENTRY", "")))
    return dict(fusions=total, entry=entry, loops=loops)


def launches_per_step(counts: dict, trips: dict | None = None) -> dict:
    """Kernel launches of one step of the time loop: the fusions of the step loop's body
    plus, for each loop directly inside it, ``trips x (body + condition)`` plus one
    condition (``trips`` maps a name scope found in a loop's body, e.g. ``"allocate"``,
    to that loop's mean trip count; a loop without one counts one trip).

    The step loop is the loop with the most fusions in its body (the time step).

    Returns:
      ``{"step_fusions", "inner": [{"fusions", "cond_fusions", "trips"}],
      "launches_per_step"}``.
    """
    loops = counts["loops"]
    if not loops:
        return dict(step_fusions=0, inner=[], launches_per_step=0.0)
    step = max(loops, key=lambda lp: lp["fusions"])
    inner = [lp for lp in loops if lp["parent"] == step["body"]]
    trips = trips or {}
    total = float(step["fusions"])
    out = []
    for lp in inner:
        names = [k for k in trips if k in lp["text"]]
        n = float(trips[names[0]]) if names else 1.0
        total += n * (lp["fusions"] + lp["cond_fusions"]) + lp["cond_fusions"]
        out.append(dict(fusions=lp["fusions"], cond_fusions=lp["cond_fusions"], trips=n,
                        scope=names[0] if names else None))
    return dict(step_fusions=step["fusions"], inner=out, launches_per_step=total)
