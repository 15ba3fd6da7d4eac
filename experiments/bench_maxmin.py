"""Benchmark: the vectorised max-min solver against sequential NumPy progressive filling.

Scenario (issue #2): ``fat_tree(16)`` (1,024 hosts, 6,144 links), 100,000 random host
pairs, each on one equal-cost path drawn at random (ECMP).  Reports compile time,
steady-state time per solve, bottleneck-structure iterations, the ratio against the
textbook NumPy oracle (``tests/reference/maxmin_numpy.py``, one bottleneck level per
iteration, scipy.sparse) timed in the same run, and a batch of 64 solves under
``vmap`` (random per-link degradations).  ``--large`` adds 1,000,000 flows on
``fat_tree(32)`` (meant for a GPU).

Usage::

    python experiments/bench_maxmin.py [--flows 100000] [--k 16] [--json PATH] [--large]
"""

from __future__ import annotations

import argparse

import numpy as np

from _bench import ROOT, device_info, table, time_host, time_jax, write_json  # noqa: F401

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import fabric_jax as fj  # noqa: E402
from fabric_jax.paths import shortest_paths  # noqa: E402
from fabric_jax.topology import fat_tree  # noqa: E402
from tests.reference.maxmin_numpy import progressive_filling  # noqa: E402


def ecmp_instance(k: int, n_flows: int, seed: int):
    """Random host pairs on ``fat_tree(k)``, each on one random equal-cost path."""
    topo = fat_tree(k)
    rng = np.random.default_rng(seed)
    src = rng.integers(0, topo.n_hosts, n_flows)
    dst = (src + rng.integers(1, topo.n_hosts, n_flows)) % topo.n_hosts
    paths = shortest_paths(topo, src, dst, max_paths=(k // 2) ** 2, seed=seed)
    choice = (rng.random(n_flows) * paths.n_paths).astype(np.int64)
    inc = fj.Incidence.from_paths(paths.select(choice), n_links=topo.n_links)
    return topo, inc


def run(k: int, n_flows: int, seed: int, batch: int, oracle: bool) -> dict:
    topo, inc = ecmp_instance(k, n_flows, seed)
    capacity = jnp.asarray(topo.capacity, jnp.float32)
    first, steady, res = time_jax(fj.max_min_fair, inc, capacity, repeats=5)
    row = dict(k=k, flows=n_flows, links=topo.n_links, nnz=inc.nnz, compile_s=first - steady,
               solve_s=steady, iterations=int(res.info.iterations),
               max_violation=float(res.info.max_violation))
    if oracle:
        A = inc.to_scipy().tocsc()
        oracle_s, (rates_np, oracle_iters) = time_host(
            progressive_filling, A, np.asarray(topo.capacity, float))
        row.update(oracle_s=oracle_s, oracle_iterations=oracle_iters,
                   speedup=oracle_s / steady,
                   max_rel_err=float(np.max(np.abs(np.asarray(res.rates) - rates_np)
                                            / rates_np)))
    if batch:
        rng = np.random.default_rng(seed + 1)
        caps = capacity[None, :] * jnp.asarray(rng.uniform(0.5, 1.0, (batch, topo.n_links)),
                                               jnp.float32)
        b_first, b_steady, _ = time_jax(fj.max_min_fair, inc, caps, repeats=3)
        row.update(batch=batch, batch_s=b_steady, per_solve_batched_s=b_steady / batch,
                   batch_gain=steady / (b_steady / batch))
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--flows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-oracle", action="store_true")
    parser.add_argument("--large", action="store_true",
                        help="also 1,000,000 flows on fat_tree(32) (GPU)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rows = [run(args.k, args.flows, args.seed, args.batch, not args.no_oracle)]
    if args.large:
        rows.append(run(32, 1_000_000, args.seed, 0, False))
    cols = ["k", "flows", "nnz", "compile_s", "solve_s", "iterations", "oracle_s",
            "oracle_iterations", "speedup", "max_rel_err", "per_solve_batched_s", "batch_gain"]
    print(f"device: {device_info()}")
    print(table(rows, cols))
    write_json(args.json, {"device": device_info(), "rows": rows})
    return rows


if __name__ == "__main__":
    main()
