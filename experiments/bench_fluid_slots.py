"""Benchmark: the fluid slot table (cost follows concurrency) against the plain engine.

Scenario: the HPCC paper's setting (``experiments/_hpcc.py``, ``hpcc_fct.py``): the
320-host fat-tree (:func:`fabric_jax.hpcc_fat_tree`: 100 Gb/s hosts, 400 Gb/s fabric,
1 us links), per-flow ECMP, PFC, open-loop Poisson flows between random hosts with the
FB_Hadoop (default) or WebSearch sizes at ``--load`` of the host links, law ``--cc``
(default ``hpcc``), ``dt = --dt-us``.  Flows arrive during the window and the run lasts
the window plus ``--drain-ms``.

Two engines on the same flows:

* **plain**: :func:`fabric_jax.simulate_fluid`, every flow of the run in every step;
* **slots**: :func:`fabric_jax.simulate_fluid_windowed` with ``--max-active`` slots and
  windows of ``--window`` steps (only the flows in the fabric, plus those about to
  start, are carried).

Both are timed the same way (``experiments/_bench.py``): the first call (trace +
compile + run) and the steady state (a second call on the same shapes); compile =
first - steady.  The per-flow results of the two engines are compared (finish times).

``--big`` adds the run that the plain engine cannot do in reasonable time:
``--big-ms`` (default 10) of arrivals, at least 100,000 flows at the default load, on
the slot table alone.  Its plain-engine cost is **extrapolated** from the plain run
measured here on the short window: the plain step costs in proportion to the number
of flows of the run (every flow's hops, queues, rings and max-min entries are carried
each step; measured per step on the short window), so ``plain_big ~ plain_short x
(flows_big / flows_short) x (steps_big / steps_short)``.  The printed speed-up of the
big run is against that extrapolation, and says so.

Usage::

    python experiments/bench_fluid_slots.py                   # short window (~1 min)
    python experiments/bench_fluid_slots.py --big --json out.json   # + >= 100k flows
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import block, device_info, table, write_json
from experiments._common import check_positive, parser
from experiments._hpcc import ecmp_incidence, law_params, pfc_pool
from experiments.hpcc_fct import build_flows

import jax  # noqa: E402

import fabric_jax as fj  # noqa: E402

_COMPILE_S = [0.0]


def _on_event(event, duration, **_):
    if event.endswith("backend_compile_duration"):
        _COMPILE_S[0] += duration


jax.monitoring.register_event_duration_secs_listener(_on_event)


def scenario(topo, *, workload: str, load: float, window_s: float, seed: int):
    """Poisson background flows (no incast) and their ECMP incidence."""
    flows = build_flows(topo, workload, load, window_s, incast=False, incast_senders=1,
                        incast_bytes=1.0, incast_load=0.0, host_gbps=100.0, seed=seed)
    inc, latency = ecmp_incidence(topo, flows["src"], flows["dst"], seed=seed)
    return flows, inc, latency


def run(engine: str, topo, flows, inc, latency, *, law: str, dt: float, n_steps: int,
        max_active: int, window: int):
    """One run in the HPCC setting (PFC, per-flow latency and base RTT)."""
    kw = dict(dt=dt, n_steps=int(n_steps), law=law, params=law_params(law, 100.0),
              arrival=flows["arrival"], latency=latency,
              base_rtt=np.maximum(2.0 * latency, dt), flow_control="pfc",
              buffer=pfc_pool(topo))
    size = np.asarray(flows["size"], float)
    if engine == "plain":
        return fj.simulate_fluid(inc, topo.capacity, size, **kw)
    return fj.simulate_fluid_windowed(inc, topo.capacity, size, max_active=max_active,
                                      window=window, **kw)


def timed(engine, *args, repeats: int = 1, **kwargs):
    """``(first_call_s, steady_s, result, xla_compile_s)``: the first call, then
    ``repeats`` more (median), and the XLA compile time of the first call
    (``jax.monitoring``)."""
    c0 = _COMPILE_S[0]
    t0 = time.perf_counter()
    res = block(run(engine, *args, **kwargs))
    first = time.perf_counter() - t0
    compiled = _COMPILE_S[0] - c0
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = block(run(engine, *args, **kwargs))
        runs.append(time.perf_counter() - t0)
    steady = float(np.median(runs)) if runs else first
    return first, steady, res, compiled


def main(argv=None) -> dict:
    started = time.time()
    ap = parser(__doc__)
    ap.add_argument("--workload", choices=("fb_hadoop", "web_search"), default="fb_hadoop")
    ap.add_argument("--load", type=float, default=0.3, help="host-link load (default 0.3)")
    ap.add_argument("--cc", default="hpcc", help="law (default hpcc)")
    ap.add_argument("--ms", type=float, default=0.5,
                    help="arrival window of the short run, both engines, ms (default 0.5)")
    ap.add_argument("--drain-ms", type=float, default=0.2,
                    help="simulated time after the arrivals, ms (default 0.2)")
    ap.add_argument("--dt-us", type=float, default=1.0, help="fluid step, us (default 1)")
    ap.add_argument("--max-active", type=int, default=2500,
                    help="flow slots of the slot table (default 2500)")
    ap.add_argument("--window", type=int, default=32, help="steps per window (default 32)")
    ap.add_argument("--big", action="store_true",
                    help="also run --big-ms of arrivals (>= 100k flows) on the slot table")
    ap.add_argument("--big-ms", type=float, default=10.0,
                    help="arrival window of the big run, ms (default 10)")
    args = ap.parse_args(argv)
    check_positive(ap, load=args.load, ms=args.ms, drain_ms=args.drain_ms, dt_us=args.dt_us,
                   max_active=args.max_active, window=args.window, big_ms=args.big_ms)
    if args.quick:
        args.ms, args.drain_ms, args.big = 0.1, 0.05, False
    topo = fj.hpcc_fat_tree(host_gbps=100.0)
    dt = args.dt_us * 1e-6
    common = dict(law=args.cc, dt=dt, max_active=args.max_active, window=args.window)

    def steps_for(window_ms):
        n = int(math.ceil((window_ms + args.drain_ms) * 1e-3 / dt))
        return int(math.ceil(n / args.window) * args.window)   # whole windows

    # ---- short window: both engines, same flows
    flows, inc, lat = scenario(topo, workload=args.workload, load=args.load,
                               window_s=args.ms * 1e-3, seed=args.seed)
    n_short = steps_for(args.ms)
    rows, out = [], {"device": device_info(), "workload": args.workload, "load": args.load,
                     "cc": args.cc, "dt_us": args.dt_us, "window": args.window,
                     "max_active": args.max_active, "topology": topo.name}
    res = {}
    for engine in ("plain", "slots"):
        first, steady, r, xla = timed(engine, topo, flows, inc, lat, n_steps=n_short,
                                      **common)
        res[engine] = r
        rows.append({"run": "short", "engine": engine, "flows": int(flows["size"].size),
                     "steps": n_short, "compile_s": max(first - steady, 0.0),
                     "xla_compile_s": xla,
                     "steady_s": steady, "us_per_step": steady / n_short * 1e6,
                     "peak_slots": getattr(r, "peak_active", "")})
    fin_p = np.asarray(res["plain"].finish, float)
    fin_s = np.asarray(res["slots"].finish, float)
    both = np.isfinite(fin_p) & np.isfinite(fin_s)
    agree = {"finished_plain": int(np.isfinite(fin_p).sum()),
             "finished_slots": int(np.isfinite(fin_s).sum()),
             "max_rel_finish_diff": float(np.max(np.abs(fin_s[both] - fin_p[both])
                                                 / fin_p[both], initial=0.0)),
             "median_rel_finish_diff": float(np.median(np.abs(fin_s[both] - fin_p[both])
                                                       / fin_p[both])) if both.any() else 0.0}
    speedup = rows[0]["steady_s"] / rows[1]["steady_s"]
    out.update(short={"rows": rows[:2], "agreement": agree, "speedup_steady": speedup,
                      "arrival_ms": args.ms, "drain_ms": args.drain_ms})
    print(table(rows, list(rows[0])))
    print(f"short run: slots / plain finish times: {agree}; steady-state speed-up "
          f"{speedup:.2f}x")

    if args.big:
        bflows, binc, blat = scenario(topo, workload=args.workload, load=args.load,
                                      window_s=args.big_ms * 1e-3, seed=args.seed)
        n_big = steps_for(args.big_ms)
        wall, _, rb, xla = timed("slots", topo, bflows, binc, blat, n_steps=n_big, repeats=0,
                                 **common)
        n_flows = int(bflows["size"].size)
        fin = np.asarray(rb.finish, float)
        extrap = (rows[0]["steady_s"] * (n_flows / rows[0]["flows"]) * (n_big / n_short))
        big = {"run": "big", "engine": "slots", "flows": n_flows, "steps": n_big,
               "compile_s": "", "xla_compile_s": xla, "steady_s": wall, "us_per_step": wall / n_big * 1e6,
               "peak_slots": rb.peak_active}
        rows.append(big)
        out["big"] = {"row": big, "arrival_ms": args.big_ms,
                      "simulated_ms": n_big * dt * 1e3, "wall_s": wall,
                      "finished": int(np.isfinite(fin).sum()),
                      "n_windows": rb.n_windows,
                      "plain_extrapolated_s": extrap,
                      "speedup_vs_extrapolated_plain": extrap / wall,
                      "extrapolation": "plain steady time of the short run x flows ratio x "
                                       "steps ratio (plain step cost grows with the run's "
                                       "flows)"}
        print(table([big], list(big)))
        print(f"big run: {n_flows} flows, {n_big * dt * 1e3:g} ms simulated, wall "
              f"{wall:.1f} s (of which XLA compile {xla:.1f} s: shapes not seen in the "
              "short run), "
              f"{out['big']['finished']} finished, peak {rb.peak_active} slots; plain "
              f"engine extrapolated from the short run: {extrap:.0f} s -> speed-up "
              f"{extrap / wall:.0f}x")
    write_json(args.json, out, started=started, inputs=vars(args))
    return out


if __name__ == "__main__":
    main()
