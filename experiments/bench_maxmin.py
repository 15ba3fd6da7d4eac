"""Benchmark: the vectorised max-min solver against sequential NumPy progressive filling.

Scenario (issue #2): ``fat_tree(16)`` (1,024 hosts, 6,144 links), 100,000 random host
pairs, each on one equal-cost path drawn at random (ECMP).  Reports compile time,
steady-state time per solve, bottleneck-structure iterations, the ratio against the
textbook NumPy oracle (``fabric_jax/reference/maxmin_numpy.py``, one bottleneck level per
iteration, scipy.sparse) timed in the same run, and a batch of 64 solves under
``vmap`` (random per-link degradations).  ``--large`` adds 1,000,000 flows on
``fat_tree(32)`` (meant for a GPU).

``--devices N`` (CPU) splits the host into ``N`` XLA devices
(``--xla_force_host_platform_device_count``; XLA runs one device's ops on one thread,
so this is how a solve uses more than one core) and adds
:func:`fabric_jax.max_min_fair_sharded` (flows split over the devices) and the batch
sharded over the devices (:func:`fabric_jax.sweep` of the block-diagonal batched
solve), timed in the same run as the single-device solve.

Usage::

    python experiments/bench_maxmin.py [--flows 100000] [--k 16] [--json PATH] [--large]
                                       [--devices 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def _devices_from_argv(argv) -> int:
    for i, a in enumerate(argv):
        if a == "--devices" and i + 1 < len(argv):
            return int(argv[i + 1])
        if a.startswith("--devices="):
            return int(a.split("=", 1)[1])
    return 1


# XLA reads the host device count when jax initialises: set it before jax is imported.
_N_DEV = _devices_from_argv(sys.argv[1:])
if _N_DEV > 1 and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + f" --xla_force_host_platform_device_count={_N_DEV}").strip()

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import device_info, table, time_host, time_jax, write_json

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import fabric_jax as fj  # noqa: E402
from fabric_jax.paths import shortest_paths  # noqa: E402
from fabric_jax.topology import fat_tree  # noqa: E402
from fabric_jax.reference.maxmin_numpy import progressive_filling  # noqa: E402


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


def _batched_solve(inc, caps):
    """``[batch, links]`` capacities -> rates: one block-diagonal solve (per device)."""
    return fj.max_min_fair(inc, caps).rates


def run(k: int, n_flows: int, seed: int, batch: int, oracle: bool, devices: int = 1) -> dict:
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
    if devices > 1:
        n_dev = min(devices, jax.device_count())
        mesh = fj.distributed.device_mesh(fj.distributed.FLOW_AXIS, jax.devices()[:n_dev])
        s_first, s_steady, s_res = time_jax(fj.max_min_fair_sharded, inc, capacity, mesh=mesh,
                                            repeats=5)
        row.update(devices=n_dev, sharded_compile_s=s_first - s_steady, sharded_s=s_steady,
                   sharded_gain=steady / s_steady,
                   sharded_max_rel_diff=float(np.max(
                       np.abs(np.asarray(s_res.rates) - np.asarray(res.rates))
                       / np.asarray(res.rates))))
        if oracle:
            row.update(sharded_speedup=row["oracle_s"] / s_steady)
        if batch:
            bmesh = fj.distributed.device_mesh(devices=jax.devices()[:n_dev])
            sb_first, sb_steady, _ = time_jax(
                fj.sweep, _batched_solve, inc, caps, in_axes=(None, 0), mesh=bmesh,
                batched=True, per_device=True, repeats=3)
            row.update(per_solve_batched_sharded_s=sb_steady / batch,
                       batch_sharded_gain=steady / (sb_steady / batch))
    return row


def main(argv=None):
    started = time.time()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--flows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-oracle", action="store_true")
    parser.add_argument("--large", action="store_true",
                        help="also 1,000,000 flows on fat_tree(32) (GPU)")
    parser.add_argument("--devices", type=int, default=1,
                        help="CPU: split the host into this many XLA devices and add the "
                             "flow-sharded solve and the device-sharded batch")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rows = [run(args.k, args.flows, args.seed, args.batch, not args.no_oracle, args.devices)]
    if args.large:
        rows.append(run(32, 1_000_000, args.seed, 0, False))
    cols = ["k", "flows", "nnz", "compile_s", "solve_s", "iterations", "oracle_s",
            "oracle_iterations", "speedup", "max_rel_err", "per_solve_batched_s", "batch_gain"]
    if args.devices > 1:
        cols += ["devices", "sharded_s", "sharded_gain", "sharded_speedup",
                 "sharded_max_rel_diff", "per_solve_batched_sharded_s", "batch_sharded_gain"]
    print(f"device: {device_info()}")
    print(table(rows, cols))
    write_json(args.json, {"device": device_info(), "rows": rows}, started=started,
               inputs=vars(args))
    return rows


if __name__ == "__main__":
    main()
