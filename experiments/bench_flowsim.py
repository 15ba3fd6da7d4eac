"""Benchmark: the event-driven flow-level simulator against the NumPy reference.

Scenario (issue #3): ``fat_tree(8)`` (128 hosts, 100 Gb/s links), Poisson arrivals at
50% access-link load with web-search flow sizes (DCTCP CDF, linear interpolation), each
flow on one random equal-cost path (ECMP), simulated to completion.  Reports compile
time, wall time, events per second and the ratio against the event-driven NumPy
reference simulator (``tests/reference/flowsim_numpy.py``) timed in the same run, then
how the cost grows from 1k to 100k flows (the reference is only run up to
``--oracle-max`` flows; it needs a dense ``[links, flows]`` matrix).

Usage::

    python experiments/bench_flowsim.py [--flows 10000] [--sweep 1000 10000 100000] [--json PATH]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _bench import device_info, table, time_host, write_json

import jax.numpy as jnp  # noqa: E402

import fabric_jax as fj  # noqa: E402
from fabric_jax.workloads import poisson_background  # noqa: E402
from tests.reference.flowsim_numpy import simulate_flows_reference  # noqa: E402


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
    return topo, inc, arrival, size


def run(n_flows: int, seed: int, oracle: bool) -> dict:
    topo, inc, arrival, size = poisson_instance(n_flows, seed)
    capacity = jnp.asarray(topo.capacity, jnp.float32)
    t0 = time.perf_counter()
    res = fj.simulate_flows(inc, capacity, arrival, size)
    res.finish.block_until_ready()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = fj.simulate_flows(inc, capacity, arrival, size)
    res.finish.block_until_ready()
    wall = time.perf_counter() - t0
    events = int(res.n_events)
    row = dict(flows=n_flows, events=events, compile_s=max(first - wall, 0.0), wall_s=wall,
               events_per_s=events / wall, stalled=bool(res.stalled))
    if oracle:
        A = inc.to_scipy().tocsc()
        ref_s, ref = time_host(simulate_flows_reference, A, np.asarray(topo.capacity, float),
                               np.asarray(arrival, float), np.asarray(size, float))
        fin = np.asarray(res.finish, float)
        row.update(reference_s=ref_s, speedup=ref_s / wall,
                   max_rel_err_fct=float(np.max(np.abs(fin - ref["finish"])
                                                / np.maximum(ref["fct"], 1e-12))))
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flows", type=int, default=10_000)
    parser.add_argument("--sweep", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    parser.add_argument("--oracle-max", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    sizes = sorted(set([args.flows] + list(args.sweep)))
    rows = []
    for n in sizes:
        rows.append(run(n, args.seed, n <= args.oracle_max))
        print(table(rows[-1:], list(rows[-1].keys())), flush=True)
    print(f"device: {device_info()}")
    print(table(rows, ["flows", "events", "compile_s", "wall_s", "events_per_s", "reference_s",
                       "speedup", "max_rel_err_fct", "stalled"]))
    write_json(args.json, {"device": device_info(), "rows": rows})
    return rows


if __name__ == "__main__":
    main()
