"""Benchmark: where the time of ``fabric-jax compare`` goes -- compilation against
simulation, per preset -- and what the NIC share and concurrent presets cost.

Scenario: the one ``fabric-jax compare`` runs (:func:`fabric_jax.compare.default_scenario`,
or ``--scenario FILE``), through the same calls: :func:`fabric_jax.study.case.build_case`,
then per preset :func:`fabric_jax.study.run.simulate_case` with every job and (with
``simulation.isolation``) with each job alone, and the ideal-fabric baseline
:func:`fabric_jax.study.run.simulate_ideal`.

Per preset, timed the way every benchmark here is (``experiments/_bench.py``):

* ``compile_s``: tracing + lowering + XLA compilation of the preset's fluid program
  during its first call (``jax.monitoring`` events; the alone runs reuse it);
* ``first_s``: that first call's wall time (compile + one run);
* ``steady_s``: the preset's runs of one compare (every job, then each job alone), each
  on the already compiled program -- what the preset costs besides compiling;
* ``total_s``: ``first_s`` + the alone runs: the preset's share of one compare run;
* ``compile_cpu_s``, ``cpu_s``: process CPU time of the compilation (first call less a
  steady call) and of the preset's share: on a shared machine these move less than
  wall times (which grow with the other processes' load).

Baseline in the same run (``--baseline``, :data:`VARIANTS`): the current code against
one earlier variant of the fluid step, each compiled afresh (``jax.clear_caches``);
the printed ratios are baseline / current, and the per-flow finish times of the two
are compared (same model: they differ by round-off only).

* ``fine`` (default): the step's max-min solve (:func:`fabric_jax.fairness.solve`)
  with its compaction levels (``compaction="fine"``, one while loop per level to
  compile) instead of one loop over all the entries (``STEP_COMPACTION`` of
  :mod:`fabric_jax.fluid.stages.transmit`).
* ``solve``: the host NICs' max-min share of their flows' offers
  (:func:`fabric_jax.fluid.stages.transmit.nic_send`) by the general progressive-filling solver over
  the first-hop incidence instead of the closed-form water-fill
  (:func:`fabric_jax.fairness.water_fill`).

``--end-to-end`` adds :func:`fabric_jax.compare.run_compare` (the whole command, ideal
column included) with the presets one after another (``workers=1``) against the
default concurrent presets (``workers=None``: one per core), each from cold caches.

Usage::

    python experiments/bench_compare.py                      # default scenario (~6 min)
    python experiments/bench_compare.py --end-to-end --json results/bench_compare.json
    python experiments/bench_compare.py --quick              # tiny scenario (CI)
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import block, device_info, table, write_json
from experiments._common import parser

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from fabric_jax import compare  # noqa: E402
from fabric_jax.fluid.stages import classes, transmit  # noqa: E402
from fabric_jax.fabrics import get_fabric  # noqa: E402
from fabric_jax.fairness import solve  # noqa: E402
from fabric_jax.incidence import Incidence  # noqa: E402
from fabric_jax.study.case import alone_arrival, build_case  # noqa: E402
from fabric_jax.fluid.options import save_schedule  # noqa: E402
from fabric_jax.study.run import simulate_case, simulate_ideal  # noqa: E402
from fabric_jax.study.progress import Progress  # noqa: E402

_EVENTS = collections.defaultdict(float)
#: The jax.monitoring events that make up a compilation (trace, lower, XLA compile).
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")


def _on_event(event, duration, **_):
    _EVENTS[event] += duration


jax.monitoring.register_event_duration_secs_listener(_on_event)


def compile_seconds() -> float:
    """Seconds spent compiling so far in this process (:data:`COMPILE_EVENTS`)."""
    return sum(_EVENTS[e] for e in COMPILE_EVENTS)


# The quick scenario: 4 servers x 2 rails (tests/helpers.TINY_SCENARIO), two presets.
QUICK = {
    "topology": {"kind": "rail_optimized", "n_servers": 4, "nics_per_server": 2,
                 "servers_per_leaf": 2, "link_gbps": 100},
    "workload": {"train_servers": 2, "tenant_servers": 2, "ep_servers": 2,
                 "tenant_fan_in": 1, "background_load": 0.0, "all_reduce_mb": 1.0,
                 "moe_mb": 0.5, "compute_us": 100, "tenant_incast_mb": 0.2},
    "simulation": {"dt_us": 4.0, "n_steps": 40, "isolation": True},
    "fabrics": {"presets": ["roce", "uec"]},
}


def nic_send_progressive(static, switch, inc, cap, offered, ports="check", axis_name=None):
    """The NIC share by the general solver (the baseline): max-min over the first-hop
    entries at NIC ports with :func:`fabric_jax.fairness.solve` (iterative, compacted);
    ``(rates, iterations)`` as :func:`fabric_jax.fluid.stages.transmit.nic_send`."""
    li = inc.link_idx
    nic_inc = Incidence(li, inc.flow_idx, jnp.where(switch[li] == 0, inc.weight, 0.0),
                        inc.n_links, inc.n_flows)
    sol = solve(nic_inc, cap, offered, iterations=static.solver_iterations,
                axis_name=axis_name)
    return jnp.minimum(sol.rates, offered), sol.info.iterations


#: The code as it is, saved before any variant patches it.
_CURRENT = {"nic_send": transmit.nic_send, "STEP_COMPACTION": transmit.STEP_COMPACTION}

#: Variants of the fluid step timed against each other: ``current`` (the code as it is)
#: and the baselines, each the attributes of the step's stage modules it replaces
#: (:mod:`fabric_jax.fluid.stages.transmit` and ``.classes``):
#: ``solve``, the NIC share by the general solver (:func:`nic_send_progressive`) instead
#: of the water-fill; ``fine``, the step's max-min solve with the compaction levels of
#: :func:`fabric_jax.fairness.solve` (``compaction="fine"``) instead of one loop over
#: all the entries.  Every variant computes the
#: same model (finish times equal up to float32 round-off).
VARIANTS = {"current": {},
            "solve": {"nic_send": nic_send_progressive},
            "fine": {"STEP_COMPACTION": "fine"}}


def _timed(fn):
    """``(wall_s, cpu_s, compile_s, output)`` of one blocking call."""
    c0, t0, p0 = compile_seconds(), time.perf_counter(), time.process_time()
    out = block(fn())
    return (time.perf_counter() - t0, time.process_time() - p0, compile_seconds() - c0,
            out)


def bench_preset(scn, case, name: str) -> tuple[dict, np.ndarray]:
    """One preset as ``compare`` runs it, from a cold cache: first call, then the
    steady runs.  Returns ``(row, finish of the all-jobs run)``."""
    fab = get_fabric(name, **scn.overrides.get(name, {}))
    _, save = save_schedule(scn.simulation["n_steps"], round_up=False)
    arrivals = [case.sim_arrival]
    if scn.simulation["isolation"]:
        arrivals += [alone_arrival(case, job) for job in (0, 1) if np.any(case.job_of == job)]

    def run(arr):
        return lambda: simulate_case(case, fab, scn, arr, save_every=save)
    first, cpu, comp, res = _timed(run(arrivals[0]))
    steady = [_timed(run(a)) for a in arrivals]
    steady_s = sum(s[0] for s in steady)
    row = {"preset": name, "compile_s": comp, "first_s": first,
           "compile_cpu_s": max(cpu - steady[0][1], 0.0),
           "steady_s": steady_s, "total_s": first + sum(s[0] for s in steady[1:]),
           "cpu_s": cpu + sum(s[1] for s in steady[1:]), "runs": len(arrivals),
           "us_per_step": steady[0][0] / int(scn.simulation["n_steps"]) * 1e6}
    return row, np.asarray(res.finish, float)


def bench_ideal(scn, case) -> dict:
    arrivals = [None]
    if scn.simulation["isolation"]:
        arrivals += [alone_arrival(case, job) for job in (0, 1) if np.any(case.job_of == job)]
    first, cpu, comp, _ = _timed(lambda: simulate_ideal(case, arrivals[0]))
    steady = [_timed(lambda a=a: simulate_ideal(case, a)) for a in arrivals]
    return {"preset": compare.IDEAL, "compile_s": comp, "first_s": first,
            "compile_cpu_s": max(cpu - steady[0][1], 0.0),
            "steady_s": sum(s[0] for s in steady),
            "total_s": first + sum(s[0] for s in steady[1:]),
            "cpu_s": cpu + sum(s[1] for s in steady[1:]), "runs": len(arrivals),
            "us_per_step": ""}


def bench_variant(scn, variant: str) -> tuple[list, dict]:
    """Every preset (and the ideal baseline) with the fluid step's ``variant``
    (:data:`VARIANTS`), each compiled afresh."""
    _patch(dict(_CURRENT, **VARIANTS[variant]))
    try:
        cases, rows, finish = {}, [], {}
        bar = Progress(len(scn.presets), label=f"bench_compare ({variant})")
        for name in scn.presets:
            sharp = get_fabric(name, **scn.overrides.get(name, {})).sharp
            if sharp not in cases:
                cases[sharp] = build_case(scn, sharp)
            jax.clear_caches()
            row, finish[name] = bench_preset(scn, cases[sharp], name)
            rows.append(dict(row, variant=variant))
            bar.update(name)
            print(table([rows[-1]], list(rows[-1])), flush=True)
    finally:
        _patch(_CURRENT)
    return rows, finish


def _patch(attrs: dict):
    """Sets the stage modules' attributes (both single-class and class stages)."""
    for attr, value in attrs.items():
        for mod in (transmit, classes):
            setattr(mod, attr, value)


def end_to_end(scn, workers) -> dict:
    jax.clear_caches()
    t0, p0 = time.perf_counter(), time.process_time()
    results = compare.run_compare(scn, progress=False, ideal=True, workers=workers)
    return {"workers": "default" if workers is None else workers,
            "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - p0,
            "results": results}


def _max_rel_diff(a: dict, b: dict) -> float:
    """Largest relative difference between two compare results (finite numbers)."""
    worst = 0.0
    for preset in a:
        for key, va in a[preset].items():
            vb = b[preset].get(key)
            if isinstance(va, float) and isinstance(vb, float) and np.isfinite(va) \
                    and np.isfinite(vb):
                worst = max(worst, abs(va - vb) / max(abs(va), abs(vb), 1e-300))
    return worst


def main(argv=None) -> dict:
    started = time.time()
    ap = parser(__doc__)
    ap.add_argument("--scenario", metavar="FILE", help="TOML scenario (default: built-in)")
    ap.add_argument("--presets", default=None,
                    help="comma-separated presets (default: the scenario's)")
    ap.add_argument("--baseline", choices=("fine", "solve", "none"), default="fine",
                    help="variant of the fluid step to time beside the current code "
                         "(VARIANTS: fine = the step's max-min solve with compaction "
                         "levels, solve = the NIC share by the general solver; default "
                         "fine; none: current code only)")
    ap.add_argument("--end-to-end", action="store_true",
                    help="also time run_compare with workers=1 against the default")
    args = ap.parse_args(argv)
    if args.quick:
        scn = compare.scenario_from_dict(QUICK)
    elif args.scenario:
        scn = compare.load_scenario(args.scenario)
    else:
        scn = compare.default_scenario()
    if args.presets:
        names = tuple(p.strip() for p in args.presets.split(",") if p.strip())
        bad = [p for p in names if p not in scn.presets]
        if not names or bad:
            ap.error(f"--presets must name presets of the scenario {list(scn.presets)}; "
                     f"got {args.presets!r}")
        scn = dataclasses.replace(scn, presets=names)
    out = {"device": device_info(), "scenario": "quick" if args.quick
           else (args.scenario or "default"), "presets": list(scn.presets),
           "n_steps": int(scn.simulation["n_steps"]),
           "isolation": bool(scn.simulation["isolation"])}
    variants = ["current"] + ([] if args.baseline == "none" else [args.baseline])
    rows, finish = [], {}
    for v in variants:
        r, finish[v] = bench_variant(scn, v)
        rows += r
    jax.clear_caches()
    ideal = dict(bench_ideal(scn, build_case(scn, False)), variant="")
    rows.append(ideal)
    cols = ["preset", "variant", "compile_s", "compile_cpu_s", "first_s", "steady_s",
            "total_s", "cpu_s", "runs", "us_per_step"]
    print(table(rows, cols))
    cur = [r for r in rows if r["variant"] == "current"] + [ideal]
    total = {k: float(sum(r[k] for r in cur))
             for k in ("compile_s", "compile_cpu_s", "steady_s", "total_s", "cpu_s")}
    print(f"compare, presets one after another: compile {total['compile_s']:.1f} s, "
          f"steady {total['steady_s']:.1f} s, total {total['total_s']:.1f} s wall "
          f"({total['cpu_s']:.1f} s CPU)")
    out.update(rows=rows, total=total)
    if len(variants) > 1:
        base = {r["preset"]: r for r in rows if r["variant"] == variants[1]}
        ratios = []
        for r in rows:
            if r["variant"] != "current":
                continue
            b = base[r["preset"]]
            f0, f1 = finish["current"][r["preset"]], finish[variants[1]][r["preset"]]
            both = np.isfinite(f0) & np.isfinite(f1)
            ratios.append({"preset": r["preset"],
                           "compile_ratio": b["compile_s"] / max(r["compile_s"], 1e-9),
                           "compile_cpu_ratio": b["compile_cpu_s"]
                           / max(r["compile_cpu_s"], 1e-9),
                           "steady_ratio": b["steady_s"] / max(r["steady_s"], 1e-9),
                           "cpu_ratio": b["cpu_s"] / max(r["cpu_s"], 1e-9),
                           "total_ratio": b["total_s"] / max(r["total_s"], 1e-9),
                           "max_rel_finish_diff": float(np.max(
                               np.abs(f0[both] - f1[both]) / f1[both], initial=0.0)),
                           "same_finished": bool(np.array_equal(np.isfinite(f0),
                                                                np.isfinite(f1)))})
        print(f"baseline {variants[1]} / current:")
        print(table(ratios, list(ratios[0])))
        out["baseline"] = {"name": variants[1], "ratios": ratios}
    if args.end_to_end:
        seq, par = end_to_end(scn, 1), end_to_end(scn, None)
        diff = _max_rel_diff(seq["results"], par["results"])
        e2e = [{k: v for k, v in d.items() if k != "results"} for d in (seq, par)]
        print(table(e2e, list(e2e[0])))
        print(f"run_compare: workers=1 / default wall {seq['wall_s'] / par['wall_s']:.2f}x; "
              f"results max relative difference {diff:.3g}")
        out["end_to_end"] = {"runs": e2e, "speedup": seq["wall_s"] / par["wall_s"],
                             "max_rel_diff": diff}
    write_json(args.json, out, started=started, inputs=vars(args))
    return out


if __name__ == "__main__":
    main()
