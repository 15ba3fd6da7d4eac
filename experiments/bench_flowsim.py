"""Benchmark: the event-driven flow-level simulator (exact, warm-started; merged events;
batched) against the NumPy oracle, the from-scratch engine, and optionally SimGrid.

Scenarios (issue #13; issue #3 for the Poisson case):

* ``coupled``: SimGrid-style random coupled instances -- 1,000 links of random capacity
  (1-10 GB/s), ``N`` flows on 4 random distinct links each, all starting at t = 0,
  random sizes (1-100 MB).  Every flow shares links with many others, so every
  completion changes rates across the fabric.
* ``poisson``: ``fat_tree(8)`` (128 hosts, 100 Gb/s), Poisson arrivals at 50% access
  load with web-search sizes (DCTCP CDF), one random ECMP path per flow.

For each scenario and size, in one run: the event-driven NumPy oracle
(``fabric_jax/reference/flowsim_numpy.py``; only up to ``--oracle-max`` flows), the engine
solving every event from scratch (``warm_start=False``, the engine before issue #13;
only up to ``--old-max``), the exact warm-started engine (default), the merged-event
engine (``tolerance=--tolerance``) with its max relative FCT error against the exact
run, and ``simulate_flows_batched`` over ``--batch`` seeds against the same seeds run
one by one (per-scenario cost; only up to ``--batched-max``).  First call (trace +
compile + run) and steady state are reported separately.  float64 (x64) unless
``--f32``: exactness is the point of this benchmark.

``--simgrid`` adds SimGrid 4.1's LMM max-min model, configured as pure max-min (CM02,
latency/bandwidth/weight factors 1, weight-S 0, TCP-gamma 0, no cross traffic, zero
latencies, ``network/optim:Full``) on the same coupled instances, if ``simgrid`` is
importable.  It is a benchmark-only dependency; install recipe (about 15 min on 2
cores)::

    apt-get install libboost-dev cmake && pip install "pybind11<3" wheel &&
    pip install --no-build-isolation simgrid==4.1

Usage::

    python experiments/bench_flowsim.py                       # small: coupled 1k, 3k
    python experiments/bench_flowsim.py --coupled 1000 3000 10000 30000 --poisson 10000 \\
        --json results/bench_flowsim.json [--simgrid]
    # with SimGrid installed in a separate venv (e.g. /tmp/simgrid-venv), run the script
    # with that venv's python; it sees the project through PYTHONPATH

Each row reports wall and process CPU time (``exact_cpu_s``, ``simgrid_cpu_s``): on
the shared 2-core machine the wall time of a process waiting for a core is inflated
many-fold, its CPU time much less.  ``growth`` in the JSON is the cost factor and
exponent between the smallest and the largest coupled size of the run.  SimGrid's
flows share hosts (one ordered host pair per flow): a Full zone's routing table has
hosts^2 entries, and two hosts per flow ran out of memory at 30k flows.

Measured (2026-12-03 08:25-09:00 UTC, load average 10-15 on 2 cores, x64;
``--coupled 1000 3000 10000 30000 --old-max 3000 --oracle-max 1000 --batched-max 1000
--simgrid``; the 30k SimGrid process of that run ran out of memory (2 hosts per flow)
and the 30k row was redone at 09:02-09:23 UTC with shared hosts,
``--coupled 1000 30000 --old-max 0 --oracle-max 0 --batched-max 0 --simgrid``: exact
179 s wall / 119 s CPU vs SimGrid 760 / 452 s (4.3x / 3.8x), FCTs equal to 3.9e-13,
merged 4,291 events, error 2.2e-3; growth 1k -> 30k in CPU time x1,900 (~N^2.22) for
both)::

    flows  exact wall / CPU   SimGrid wall / CPU   ratio wall / CPU   merged (events, err)
    1k     0.100 / 0.049 s    3.61 / 0.35 s        36x / 7.1x         771, 5.7e-4
    3k     2.35 / 0.63 s      7.47 / 2.23 s        3.2x / 3.5x        1685, 1.0e-3
    10k    16.1 / 7.7 s       67.1 / 26.0 s        4.2x / 3.4x        3006, 1.7e-3

FCTs equal SimGrid's to 6.4e-14 and the oracle's (140 s at 1k) to 1.1e-14; from
scratch (``warm_start=False``) 3.78 / 20.8 s at 1k / 3k; batched (4 seeds, 1k) 1.09 s
per scenario warm, 3.08 s from scratch, 0.24 s in a loop.  Growth 1k -> 10k in CPU
time: exact x158 (~N^2.2), SimGrid x75 (~N^1.9).  Where the time goes:
``fabric_jax.sim._events``, "Cost per event".  Earlier runs (before the slot table carried its
rows), for comparison: 07:27 UTC, quieter: exact 0.085 / 0.79 / 8.7 s vs SimGrid
0.41 / 1.38 / 22.9 s wall at 1k / 3k / 10k.  CPU/GPU crossover: not measured, no GPU
lent (``experiments/bench_gpu.py`` is ready).
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import device_info, table, time_host, write_json

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import fabric_jax as fj  # noqa: E402
from fabric_jax.workloads import poisson_background  # noqa: E402
from fabric_jax.reference.flowsim_numpy import simulate_flows_reference  # noqa: E402


def coupled_instance(n_flows: int, seed: int, n_links: int = 1000, hops: int = 4):
    """SimGrid-style random coupled instance (see the module docstring)."""
    rng = np.random.default_rng(seed)
    links = np.argsort(rng.random((n_flows, n_links)), axis=1)[:, :hops]
    inc = fj.Incidence.from_coo(links.reshape(-1), np.repeat(np.arange(n_flows), hops),
                                None, n_links=n_links, n_flows=n_flows)
    capacity = rng.uniform(1e9, 1e10, n_links)
    size = np.round(rng.uniform(1e6, 1e8, n_flows))  # whole bytes (SimGrid takes ints)
    return inc, capacity, np.zeros(n_flows), size


def poisson_instance(n_flows: int, seed: int, k: int = 8, load: float = 0.5,
                     link_gbps: float = 100.0):
    """``n_flows`` Poisson web-search flows on ``fat_tree(k)``, one random ECMP path each."""
    topo = fj.fat_tree(k, link_gbps=link_gbps)
    rate = fj.units.gbps(link_gbps)
    cdf = fj.workloads.FlowSizeCDF.builtin("web_search")
    per_host = load * rate / cdf.mean()                  # flows per second per host
    duration = 1.2 * n_flows / (per_host * topo.n_hosts)  # enough arrivals, then trim
    w = poisson_background(topo.n_hosts, load, rate, cdf, duration, seed)
    take = np.arange(min(n_flows, w.n_flows))
    src, dst, size, arrival = w.src[take], w.dst[take], w.size[take], w.arrival[take]
    paths = fj.shortest_paths(topo, src, dst, max_paths=(k // 2) ** 2, seed=seed)
    rng = np.random.default_rng(seed)
    choice = (rng.random(take.size) * paths.n_paths).astype(np.int64)
    inc = fj.Incidence.from_paths(paths.select(choice), n_links=topo.n_links)
    return inc, np.asarray(topo.capacity, float), np.asarray(arrival, float), \
        np.asarray(size, float)


def _timed(fn, *args, **kwargs):
    """``(first_s, steady_s, result)``: first call, then one steady-state call."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    out.finish.block_until_ready()
    first = time.perf_counter() - t0
    steady, _, out = _timed_once(fn, *args, **kwargs)
    return first, steady, out


def _timed_once(fn, *args, **kwargs):
    """``(wall_s, cpu_s, result)`` of one call (already compiled).  ``cpu_s`` is this
    process's CPU time (all threads): on a shared machine it is less inflated by other
    jobs than the wall time."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    out.finish.block_until_ready()
    return time.perf_counter() - t0, time.process_time() - c0, out


def _rel_err(finish, ref_finish, ref_fct):
    ok = np.isfinite(ref_finish)
    return float(np.max(np.abs(np.asarray(finish, float)[ok] - ref_finish[ok])
                        / np.maximum(ref_fct[ok], 1e-12), initial=0.0))


def run(scenario: str, n: int, args) -> dict:
    make = coupled_instance if scenario == "coupled" else poisson_instance
    inc, cap, arrival, size = make(n, args.seed)
    dt = jnp.result_type(float)
    c, a, s = (jnp.asarray(x, dt) for x in (cap, arrival, size))
    row = dict(scenario=scenario, flows=n)
    t0 = time.perf_counter()
    fj.simulate_flows(inc, c, a, s, max_active=n).finish.block_until_ready()
    first = time.perf_counter() - t0
    wall, cpu, exact = _timed_once(fj.simulate_flows, inc, c, a, s, max_active=n)
    fin = np.asarray(exact.finish, float)
    fct = np.asarray(exact.fct, float)
    row.update(events=int(exact.n_events), exact_compile_s=max(first - wall, 0.0),
               exact_s=wall, exact_cpu_s=cpu, stalled=bool(exact.stalled))
    if n <= args.oracle_max:
        ref_s, ref = time_host(simulate_flows_reference, inc.to_scipy().tocsc(), cap,
                               arrival, size)
        row.update(oracle_s=ref_s, exact_vs_oracle_err=_rel_err(fin, ref["finish"],
                                                                ref["fct"]))
    if n <= args.old_max:
        _, old_s, old = _timed(fj.simulate_flows, inc, c, a, s, max_active=n,
                               warm_start=False)
        row.update(old_s=old_s, speedup_vs_old=old_s / wall,
                   old_vs_exact_err=_rel_err(old.finish, fin, fct))
    # ``tolerance`` is traced: the exact run's compiled loop is reused, one call suffices.
    merged_s, _, merged = _timed_once(fj.simulate_flows, inc, c, a, s, max_active=n,
                                      tolerance=args.tolerance)
    row.update(merged_s=merged_s, merged_events=int(merged.n_events),
               merged_max_fct_err=_rel_err(merged.finish, fin, fct))
    if n <= args.batched_max and args.batch > 1:
        b = args.batch
        sizes = np.stack([make(n, args.seed + i)[3][:inc.n_flows] for i in range(b)])
        if sizes.shape[1] == n:  # same incidence pattern, B seeds of sizes
            bs = jnp.asarray(sizes, dt)
            caps = jnp.broadcast_to(c, (b, c.shape[0]))
            arrs = jnp.broadcast_to(a, (b, n))
            for warm in (False, True):
                first_b, batch_s, _ = _timed(fj.simulate_flows_batched, inc, caps, arrs, bs,
                                             max_active=n, warm_start=warm)
                row[f"batched{'_warm' if warm else ''}_per_scenario_s"] = batch_s / b
            t0 = time.perf_counter()
            for i in range(b):
                fj.simulate_flows(inc, c, a, bs[i], max_active=n).finish.block_until_ready()
            row["loop_per_scenario_s"] = (time.perf_counter() - t0) / b
    if args.simgrid and scenario == "coupled":
        print("before SimGrid:", row, flush=True)  # kept even if SimGrid never returns
        row.update(simgrid_run(inc, cap, size, fin))
    return row


# ------------------------------------------------------------------ SimGrid side
def _import_simgrid():
    """SimGrid's Python module, after loading ``libsimgrid.so`` with ``RTLD_GLOBAL``."""
    import importlib.util
    spec = importlib.util.find_spec("simgrid")
    if spec is None:
        raise ImportError("simgrid is not installed (see the module docstring)")
    here = os.path.dirname(spec.origin)
    for lib in glob.glob(os.path.join(here, "**", "libsimgrid.so*"), recursive=True) + \
            glob.glob(os.path.join(os.path.dirname(here), "**", "libsimgrid.so*"),
                      recursive=True):
        ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
        break
    import simgrid
    return simgrid


SIMGRID_CONFIG = ["network/model:CM02", "network/latency-factor:1",
                  "network/bandwidth-factor:1", "network/weight-S:0",
                  "network/TCP-gamma:0", "network/crosstraffic:0", "network/optim:Full"]


def simgrid_run(inc, capacity, size, fin_exact) -> dict:
    """Same coupled instance in SimGrid: one ordered host pair per flow, routed over the
    flow's 4 links (zero latency), all communications started at t = 0.  Runs in a
    fresh (spawned) process: SimGrid's engine is a per-process singleton.  If that
    process dies (e.g. out of memory), the row reports ``simgrid_error`` instead."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    links = np.asarray(inc.link_idx).reshape(inc.n_flows, inc.row_width)
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
            return ex.submit(_simgrid_child, links, np.asarray(capacity), np.asarray(size),
                             np.asarray(fin_exact)).result()
    except BrokenProcessPool as exc:
        return dict(simgrid_error=f"SimGrid process died: {exc}")


def _simgrid_child(links, capacity, size, fin_exact) -> dict:
    sg = _import_simgrid()
    n_flows = links.shape[0]
    t0 = time.perf_counter()
    e = sg.Engine(["bench"] + [f"--cfg={c}" for c in SIMGRID_CONFIG]
                  + ["--log=root.thres:critical"])
    zone = e.netzone_root.add_netzone_full("world")
    sg_links = [zone.add_link(f"l{i}", float(c)).set_latency(0).seal()
                for i, c in enumerate(capacity)]
    # A Full zone's routing table has hosts^2 entries: 2 hosts per flow ran out of
    # memory at 30k flows (3.6e9 entries), so flows share hosts, one ordered pair
    # (i, j), i != j, per flow.  Hosts hold no network resource here (only links do).
    n_hosts = int(np.ceil((1 + np.sqrt(1 + 4 * n_flows)) / 2)) + 1
    hosts = [zone.add_host(f"h{i}", 1e9).seal() for i in range(n_hosts)]
    first, second = np.divmod(np.arange(n_flows), n_hosts - 1)
    second = second + (second >= first)
    src = [hosts[i] for i in first]
    dst = [hosts[j] for j in second]
    for f in range(n_flows):
        zone.add_route(src[f], dst[f], [sg.LinkInRoute(sg_links[int(i)]) for i in links[f]],
                       False)
    zone.seal()
    finish = np.full(n_flows, np.nan)

    def launcher():
        comms = [sg.Comm.sendto_async(src[f], dst[f], int(size[f])) for f in range(n_flows)]
        for cm in comms:  # all already running: waiting in order changes nothing
            cm.wait()
        finish[:] = [cm.finish_time for cm in comms]

    sg.Actor.create("launcher", hosts[0], launcher)
    setup = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    e.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    ok = np.isfinite(finish)
    err = float(np.max(np.abs(finish[ok] - fin_exact[ok]) / fin_exact[ok], initial=0.0)
                if ok.all() else np.inf)
    return dict(simgrid_s=wall, simgrid_cpu_s=cpu, simgrid_setup_s=setup,
                simgrid_vs_exact_err=err)


def growth_exponents(rows) -> list[dict]:
    """Cost growth between the smallest and largest coupled sizes: factor and exponent
    ``log(t_max / t_min) / log(N_max / N_min)``, for every timing both ends have."""
    coupled = sorted((r for r in rows if r["scenario"] == "coupled"), key=lambda r: r["flows"])
    out = []
    if len(coupled) < 2:
        return out
    lo, hi = coupled[0], coupled[-1]
    for key in ("exact_s", "exact_cpu_s", "simgrid_s", "simgrid_cpu_s", "oracle_s"):
        if key in lo and key in hi and lo[key] > 0:
            factor = hi[key] / lo[key]
            out.append(dict(what=key, **{"from": lo["flows"], "to": hi["flows"]},
                            factor=factor,
                            exponent=float(np.log(factor) / np.log(hi["flows"] / lo["flows"]))))
    return out


def main(argv=None):
    started = time.time()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--coupled", type=int, nargs="*", default=[1_000, 3_000])
    parser.add_argument("--poisson", type=int, nargs="*", default=[])
    parser.add_argument("--oracle-max", type=int, default=1_000)
    parser.add_argument("--old-max", type=int, default=3_000)
    parser.add_argument("--batched-max", type=int, default=3_000)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--tolerance", type=float, default=1e-3)
    parser.add_argument("--simgrid", action="store_true")
    parser.add_argument("--f32", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    jax.config.update("jax_enable_x64", not args.f32)
    rows = []
    for scenario, sizes in (("coupled", args.coupled), ("poisson", args.poisson)):
        for n in sizes:
            rows.append(run(scenario, n, args))
            print(rows[-1], flush=True)
    cols = ["scenario", "flows", "events", "oracle_s", "old_s", "exact_s", "exact_cpu_s",
            "exact_compile_s",
            "speedup_vs_old", "exact_vs_oracle_err", "merged_s", "merged_events",
            "merged_max_fct_err", "batched_per_scenario_s", "batched_warm_per_scenario_s",
            "loop_per_scenario_s", "simgrid_s", "simgrid_cpu_s", "simgrid_vs_exact_err"]
    print(f"device: {device_info()}")
    print(table(rows, [c for c in cols if any(c in r for r in rows)]))
    growth = growth_exponents(rows)
    for line in growth:
        print(line["what"], f"{line['from']} -> {line['to']} flows: x{line['factor']:.3g}, "
              f"~N^{line['exponent']:.2f}")
    write_json(args.json, {"device": device_info(), "args": vars(args), "rows": rows,
                           "growth": growth, "load_average": os.getloadavg(),
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
               started=started)
    return rows


if __name__ == "__main__":
    main()
