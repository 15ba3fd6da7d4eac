"""Convergence in ``fifo_bands`` of the ``compare`` metrics: the resolution of the FIFO queues.

The fluid model keeps each egress queue as a FIFO of ``K`` bands
(:func:`fabric_jax.fluid.simulate_fluid`, "FIFO queues"; ``[simulation] fifo_bands`` of a
scenario): the bytes that join a queue in a step enter a band at its tail, the port
serves the bands oldest first, and when a band must be freed the two adjacent bands
whose merge misplaces the fewest bytes merge (:func:`fabric_jax.links.merge_bands`).
``K`` is a numerical resolution like ``dt``: a number is only a property of the fabric
if it does not move when ``K`` grows.  This script runs the ``compare`` metrics of a
scenario (default: the reduced scenario of ``experiments/convergence.py``, every
preset, isolation runs off) at ``K`` in ``--bands`` (default 1, 2, 4, 8, 16) and prints,
per preset and metric, the relative change ``|m(K) / m(K_max) - 1|`` against the largest
``K``.  ``K = 1`` is the well-mixed standing queue of the model before 2026-12-03 (a
flow is served in proportion to its share of the queue).

Usage::

    PYTHONPATH=. python experiments/fifo_bands.py
    PYTHONPATH=. python experiments/fifo_bands.py --bands 4,8,16 --presets roce --json b.json
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
from experiments.convergence import HEADLINE, TOLERANCE, chosen_scenario, rel

from fabric_jax.compare import run_compare
from fabric_jax.links import DEFAULT_FIFO_BANDS
from fabric_jax.study.progress import Progress  # noqa: E402


def with_bands(scn, bands: int, dt_us: float | None, horizon_us: float | None):
    sim = dict(scn.simulation, fifo_bands=int(bands), isolation=False)
    if dt_us is not None:
        horizon = horizon_us or scn.simulation["dt_us"] * scn.simulation["n_steps"]
        sim.update(dt_us=float(dt_us), n_steps=int(round(horizon / dt_us)))
    elif horizon_us is not None:
        sim.update(n_steps=int(round(horizon_us / scn.simulation["dt_us"])))
    return dataclasses.replace(scn, simulation=sim)


def main(argv=None):
    started = time.time()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bands", type=str, default="1,2,4,8,16",
                    help="comma-separated band counts (default 1,2,4,8,16)")
    ap.add_argument("--dt-us", type=float, default=None,
                    help="fluid step, us (default: the scenario's dt_us)")
    ap.add_argument("--horizon-us", type=float, default=None,
                    help="simulated time, us (default: the scenario's)")
    ap.add_argument("--presets", type=str, default=None,
                    help="comma-separated presets (default: all of the scenario's)")
    ap.add_argument("--full", action="store_true", help="the built-in scenario, not reduced")
    ap.add_argument("--json", type=str, default=None, metavar="PATH",
                    help="write {bands: {preset: metrics}, relative_change: ...} here")
    args = ap.parse_args(argv)
    try:
        bands = sorted({int(b) for b in args.bands.split(",") if b.strip()})
    except ValueError:
        ap.error(f"--bands: comma-separated positive integers, e.g. 1,4,16; got {args.bands!r}")
    if len(bands) < 2 or bands[0] < 1:
        ap.error(f"--bands: at least two positive integers, e.g. 4,16; got {args.bands!r}")
    if args.dt_us is not None and not args.dt_us > 0:
        ap.error("--dt-us must be > 0")
    scn = chosen_scenario(ap, args)
    runs, wall = {}, {}
    bar = Progress(len(bands), label="fifo_bands")
    for k in bands:
        t0 = time.perf_counter()
        runs[k] = run_compare(with_bands(scn, k, args.dt_us, args.horizon_us), progress=False)
        wall[k] = time.perf_counter() - t0
        bar.update(f"{k} bands")
        print(f"fifo_bands = {k}: {wall[k]:.1f} s (compile + run)", flush=True)
    ref = runs[bands[-1]]
    change = {str(k): {p: {m: rel(float(v), float(ref[p][m])) for m, v in per.items()
                           if isinstance(v, (int, float))}
                       for p, per in runs[k].items()} for k in bands[:-1]}
    sim = with_bands(scn, bands[0], args.dt_us, args.horizon_us).simulation
    print(f"\nrelative change vs fifo_bands = {bands[-1]} (dt = {sim['dt_us']:g} us, "
          f"{sim['n_steps']} steps); headline metrics marked *")
    head = "".join(f"{'K=' + str(k):>9}" for k in bands[:-1])
    print(f"{'preset':<14}{'metric':<32}{'m(K_max)':>12}{head}")
    worst = {}
    for p, per in ref.items():
        for m, v in per.items():
            if not isinstance(v, (int, float)):
                continue
            star = "*" if m in HEADLINE else " "
            cells = "".join(f"{100 * change[str(k)][p][m]:>8.2f}%" for k in bands[:-1])
            print(f"{p:<14}{star}{m:<31}{float(v):>12.4g}{cells}")
            if m in HEADLINE:
                for k in bands[:-1]:
                    c = change[str(k)][p][m]
                    if math.isfinite(c):
                        worst[k] = max(worst.get(k, 0.0), c)
    for k in bands[:-1]:
        w = worst.get(k, float("nan"))
        print(f"worst headline change, fifo_bands = {k} vs {bands[-1]}: {100 * w:.2f} %"
              f"{'  (the default)' if k == DEFAULT_FIFO_BANDS else ''}")
    default_ok = worst.get(DEFAULT_FIFO_BANDS, 0.0) <= TOLERANCE
    out = dict(bands=bands, simulation=sim, reduced=not args.full,
               results={str(k): r for k, r in runs.items()}, relative_change=change,
               worst_headline_change={str(k): w for k, w in worst.items()},
               default=DEFAULT_FIFO_BANDS, default_converged=default_ok,
               wall_s={str(k): w for k, w in wall.items()})
    write_json(args.json, out, started=started, inputs=vars(args))
    return out


if __name__ == "__main__":
    main()
