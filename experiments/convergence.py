"""Convergence in dt of the ``compare`` metrics: the same scenario at dt, dt/2 and dt/4.

The fluid model (:func:`fabric_jax.fluid.simulate_fluid`) is a time-stepped
discretisation: queues, wires and feedback rings advance by ``dt`` (wire and feedback
delays are fractional, bytes leaving a queue cross the hops below it in their step);
the laws integrate their ODEs with explicit Euler and threshold marking switches at
step boundaries.  A number is only a property of the fabric if it does not move when
``dt`` shrinks.  This script runs the ``compare`` metrics of a scenario
(:func:`fabric_jax.compare.run_compare`, every preset) at ``dt``, ``dt/2`` and
``dt/4`` over the same simulated horizon and prints, per preset and metric, the
relative change ``|m(dt) / m(dt/4) - 1|`` (and ``|m(dt/2) / m(dt/4) - 1|``).  The
issue-11 criterion: the default ``dt`` of ``compare`` is one whose headline metrics
(effective bandwidth, collective completion time, all-to-all completion time, training
step time) move by at most 3 % when ``dt`` is quartered.

Default run: the built-in scenario *reduced* (8 servers x 4 rails, the same workload
mix; ``--full`` runs the built-in 256-GPU scenario, which takes 4 + 8 + 16 times one
``compare`` run), isolation runs off (``--isolation`` turns them on).

Measured (reduced scenario, 1000 us horizon, quiet 2-core CPU, 2026-12-03, merged
code): at ``--dt-us 1`` every headline metric of every preset moves <= 1.87 % when dt
is quartered (all-to-all IB / RoCE / Spectrum-X / UEC 0.89 / 1.87 / 0.02 / 0.42 %).
Before the NIC's per-flow send share the all-to-all moved 18.7 / 20.4 % for IB /
Spectrum-X (24.0 / 26.5 / 29.5 / 30.0 us for IB at dt = 1, 1/2, 1/4, 1/8 us:
``--extra-halvings 1`` prints dt/4 against dt/8).  The cause was the sender NIC, not
the other jobs (the training job alone gives the same numbers): bytes a NIC could not
send waited in a backlog served in proportion to its content, so an all-to-all flow
sharing its NIC with its rank's all-reduce flow drained its last bytes geometrically at
a rate that depends on dt.  With the NIC's per-flow share it was 3.7 %; the last O(dt)
was the flow's last step, which now ends at its fair share of the NIC
(:func:`fabric_jax.fairness.joining_share`), not at the step's end: the IB all-to-all
reads 20.25 / 20.11 / 20.07 / 20.02 us.  See the README's "Fidelity" section.

Usage::

    PYTHONPATH=. python experiments/convergence.py --dt-us 4 --json conv.json
    PYTHONPATH=. python experiments/convergence.py --dt-us 2 --presets roce,infiniband
    PYTHONPATH=. python experiments/convergence.py --dt-us 1 --presets infiniband --extra-halvings 1
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import write_json

from fabric_jax.compare import default_scenario, run_compare
from fabric_jax.study.progress import Progress  # noqa: E402

#: Metrics whose convergence decides the default dt (issue 11, "Convergence").
HEADLINE = ("effective_bandwidth", "collective_completion_time",
            "all_to_all_completion_time", "training_step_time")
TOLERANCE = 0.03


def reduced_scenario(scn):
    """The built-in scenario on 8 servers x 4 rails (same workload kinds, smaller)."""
    topo = dict(scn.topology, n_servers=8, nics_per_server=4, servers_per_leaf=4)
    work = dict(scn.workload, train_servers=6, tenant_servers=2, ep_servers=2,
                tenant_fan_in=1)
    return dataclasses.replace(scn, topology=topo, workload=work)


def chosen_scenario(ap, args):
    """The scenario of ``--full`` / ``--presets`` (the built-in one, reduced unless
    ``--full``); a bad preset name exits through ``ap.error``."""
    scn = default_scenario()
    if not args.full:
        scn = reduced_scenario(scn)
    if args.presets:
        names = tuple(p.strip() for p in args.presets.split(",") if p.strip())
        unknown = sorted(set(names) - set(scn.presets))
        if unknown:
            ap.error(f"--presets: unknown {unknown}; choose from {list(scn.presets)}")
        scn = dataclasses.replace(scn, presets=names)
    return scn


def with_dt(scn, dt_us: float, horizon_us: float, isolation: bool):
    sim = dict(scn.simulation, dt_us=float(dt_us),
               n_steps=int(round(horizon_us / dt_us)), isolation=bool(isolation))
    return dataclasses.replace(scn, simulation=sim)


def rel(a, b):
    if not (isinstance(a, float) and isinstance(b, float)) or not (
            math.isfinite(a) and math.isfinite(b)) or b == 0:
        return float("nan") if a != b else 0.0
    return abs(a / b - 1.0)


def main(argv=None):
    started = time.time()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dt-us", type=float, default=None,
                    help="coarsest step, us (default: the scenario's dt_us)")
    ap.add_argument("--horizon-us", type=float, default=None,
                    help="simulated time, us (default: the scenario's dt_us x n_steps)")
    ap.add_argument("--presets", type=str, default=None,
                    help="comma-separated presets (default: all of the scenario's)")
    ap.add_argument("--full", action="store_true", help="the built-in scenario, not reduced")
    ap.add_argument("--isolation", action="store_true", help="also run the isolation runs")
    ap.add_argument("--extra-halvings", type=int, default=0, metavar="N",
                    help="also run dt/8, ..., dt/2^(2+N) and print how far m(dt/4) is from "
                         "the finest (is dt/4 itself converged?); default 0")
    ap.add_argument("--json", type=str, default=None, metavar="PATH",
                    help="write {dt_us: {preset: metrics}, relative_change: ...} here")
    args = ap.parse_args(argv)
    scn = chosen_scenario(ap, args)
    dt0 = float(args.dt_us if args.dt_us is not None else scn.simulation["dt_us"])
    horizon = float(args.horizon_us if args.horizon_us is not None
                    else scn.simulation["dt_us"] * scn.simulation["n_steps"])
    if not (dt0 > 0 and horizon >= 4 * dt0):
        ap.error("--dt-us must be > 0 and --horizon-us at least 4 dt")
    if not 0 <= args.extra_halvings <= 3:
        ap.error("--extra-halvings must be 0, 1, 2 or 3")
    divs = [2 ** k for k in range(3 + args.extra_halvings)]
    runs, wall = {}, {}
    bar = Progress(sum(divs), label="convergence")      # a run's cost grows with 1 / dt
    for div in divs:
        dt = dt0 / div
        t0 = time.perf_counter()
        runs[dt] = run_compare(with_dt(scn, dt, horizon, args.isolation), progress=False)
        wall[dt] = time.perf_counter() - t0
        bar.update(f"dt = {dt:g} us", div)
        print(f"dt = {dt:g} us: {wall[dt]:.1f} s", flush=True)
    fine = runs[dt0 / 4]
    finest = runs[dt0 / divs[-1]]
    change = {}
    for preset, metrics in runs[dt0].items():
        change[preset] = {}
        for m, v in metrics.items():
            if not isinstance(v, (int, float)):   # e.g. isolation_per_class (a list)
                continue
            c = dict(dt=rel(float(v), float(fine[preset][m])),
                     dt_half=rel(float(runs[dt0 / 2][preset][m]), float(fine[preset][m])))
            if args.extra_halvings:   # dt/4 against the finest step
                c["dt_quarter_vs_finest"] = rel(float(fine[preset][m]),
                                                float(finest[preset][m]))
            change[preset][m] = c
    extra = f"{'dt/4 vs dt/' + str(divs[-1]):>16}" if args.extra_halvings else ""
    print(f"\nrelative change vs dt/4 = {dt0 / 4:g} us (horizon {horizon:g} us); "
          f"headline metrics marked *")
    print(f"{'preset':<14}{'metric':<32}{'m(dt)':>12}{'m(dt/4)':>12}{'dt':>8}{'dt/2':>8}{extra}")
    worst = 0.0
    for preset, per in change.items():
        for m, c in per.items():
            star = "*" if m in HEADLINE else " "
            if m in HEADLINE and math.isfinite(c["dt"]):
                worst = max(worst, c["dt"])
            tail = (f"{100 * c['dt_quarter_vs_finest']:>15.2f}%" if args.extra_halvings
                    else "")
            print(f"{preset:<14}{star}{m:<31}{float(runs[dt0][preset][m]):>12.4g}"
                  f"{float(fine[preset][m]):>12.4g}{100 * c['dt']:>7.2f}%"
                  f"{100 * c['dt_half']:>7.2f}%{tail}")
    ok = worst <= TOLERANCE
    print(f"\nworst headline change dt -> dt/4: {100 * worst:.2f} % "
          f"({'<=' if ok else '>'} {100 * TOLERANCE:.0f} %: dt = {dt0:g} us "
          f"{'converged' if ok else 'NOT converged'})")
    out = dict(dt_us=[dt0 / d for d in divs], horizon_us=horizon, reduced=not args.full,
               results={str(dt): r for dt, r in runs.items()}, relative_change=change,
               worst_headline_change=worst, converged=ok,
               wall_s={str(dt): w for dt, w in wall.items()})
    write_json(args.json, out, started=started, inputs=vars(args))
    return out


if __name__ == "__main__":
    main()
