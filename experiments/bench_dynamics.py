"""Benchmark: fluid DCQCN + PFC dynamics on a fat tree.

Scenario (issue #4): ``fat_tree(k)`` (k = 8: 128 hosts), a random 128-flow permutation
(every host sends to another host, ECMP path drawn at random) plus a 16-to-1 incast
onto host 0, all long-lived, under DCQCN (paper defaults) with PFC, for ``--ms``
milliseconds at ``dt = 1 us``.  Reports compile time, steady-state wall time, flow-steps
per second, simulated seconds per wall second, and the cost of the per-step max-min
solve (the same run with ``law="none"``, ``flow_control="none"`` and a step whose solve
is skipped is not possible without changing the model, so the solve is timed alone:
``solve`` called ``n_steps`` times inside a ``lax.scan`` on the same incidence).

Usage::

    python experiments/bench_dynamics.py [--k 8] [--ms 10] [--incast 16] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import device_info, time_jax, write_json

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from fabric_jax.fairness import solve  # noqa: E402
from fabric_jax.fluid import simulate_fluid  # noqa: E402
from fabric_jax.incidence import Incidence  # noqa: E402
from fabric_jax.paths import shortest_paths  # noqa: E402
from fabric_jax.topology import fat_tree  # noqa: E402


def workload(k: int, n_incast: int, seed: int, n_flows: int | None = None):
    topo = fat_tree(k)
    rng = np.random.default_rng(seed)
    n = topo.n_hosts
    if n_flows is None:
        src = np.arange(n)
        dst = (src + rng.integers(1, n, n)) % n          # permutation-like pairs
        perm = rng.permutation(n)
        src, dst = perm, np.roll(perm, 1)                # a true permutation
    else:
        src = rng.integers(0, n, n_flows)
        dst = (src + rng.integers(1, n, n_flows)) % n
    isrc = rng.choice(np.arange(1, n), n_incast, replace=False)
    src = np.concatenate([src, isrc])
    dst = np.concatenate([dst, np.zeros(n_incast, int)])
    paths = shortest_paths(topo, src, dst, max_paths=(k // 2) ** 2, seed=seed)
    npaths = np.asarray(paths.path_mask).sum(axis=1)
    choice = (rng.random(src.size) * npaths).astype(np.int64)
    split = np.zeros(np.asarray(paths.path_mask).shape)
    split[np.arange(src.size), choice] = 1.0
    inc = Incidence.from_paths(paths, split, n_links=topo.n_links)
    lat = np.asarray(paths.latency(topo))[np.arange(src.size), choice]
    return topo, inc, np.asarray(topo.capacity, float), lat


def main(argv=None):
    started = time.time()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--ms", type=float, default=10.0)
    ap.add_argument("--dt-us", type=float, default=1.0)
    ap.add_argument("--incast", type=int, default=16)
    ap.add_argument("--flows", type=int, default=None,
                    help="random pairs instead of the permutation (e.g. 100000 at k=16)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=str, default=None)
    a = ap.parse_args(argv)
    topo, inc, cap, lat = workload(a.k, a.incast, a.seed, a.flows)
    dt = a.dt_us * 1e-6
    n_steps = int(round(a.ms * 1e-3 / dt))
    n_flows = inc.n_flows
    buf = np.where(np.isfinite(np.asarray(topo.buffer, float)), np.asarray(topo.buffer, float),
                   1e6) if hasattr(topo, "buffer") else 1e6
    # path latency and base RTT (2 x path latency) from the links; NICs from the hosts
    kw = dict(dt=dt, n_steps=n_steps, law="dcqcn", flow_control="pfc", buffer=buf,
              link_latency=np.asarray(topo.latency, float), nic_links=topo)
    size = np.full(n_flows, 1e12)
    first, steady, res = time_jax(lambda: simulate_fluid(inc, cap, size, **kw),
                                  repeats=a.repeats)

    capj = jnp.asarray(cap, jnp.float32)
    dem = jnp.full((n_flows,), 1e10, jnp.float32)

    @jax.jit
    def solves(c, d):
        def body(carry, i):
            r = solve(inc, c * (1 + 1e-3 * jnp.sin(i.astype(c.dtype))), d).rates
            return carry + r.sum(), None
        return jax.lax.scan(body, jnp.zeros((), c.dtype), jnp.arange(n_steps))[0]

    s_first, s_steady, _ = time_jax(solves, capj, dem, repeats=a.repeats)
    out = dict(
        scenario=f"fat_tree({a.k}) {topo.n_hosts} hosts, {n_flows} flows "
                 f"(permutation/random + {a.incast}-to-1 incast), DCQCN + PFC",
        n_links=topo.n_links, n_flows=n_flows, n_steps=n_steps, dt_s=dt,
        simulated_s=n_steps * dt, compile_plus_first_run_s=first, wall_s=steady,
        flow_steps_per_s=n_flows * n_steps / steady,
        simulated_s_per_wall_s=n_steps * dt / steady,
        solve_only_wall_s=s_steady, solve_fraction=s_steady / steady,
        paused_link_us_total=float(np.sum(np.asarray(res.info.paused_time)) * 1e6),
        max_residual_bytes=float(res.info.max_residual),
        device=device_info())
    for key, v in out.items():
        print(f"{key:28s} {v}")
    if a.json:
        write_json(a.json, out, started=started, inputs=vars(a))


if __name__ == "__main__":
    main()
