"""Batched fluid scenarios: what one scenario costs in a batch of 16 against alone.

    python experiments/bench_fluid_batched.py [--batch 16] [--json PATH] [--quick]

A design-space sweep runs many fluid scenarios of one shape: here 16 DCQCN + PFC
variants (the ECN marking threshold ``K_min`` and the load, each a different run) of
an incast-plus-background workload on a leaf-spine.  Each scenario is prepared on the
host (:func:`fabric_jax.fluid.prepare`); the batch is stacked
(:func:`fabric_jax.fluid.stack`) and run as one ``vmap`` of the engine's traceable core
through :func:`fabric_jax.sweep` (``in_axes`` from ``stack``: arrays equal in every
scenario are passed once).  Against it: the same 16 scenarios each run alone
(:func:`fabric_jax.fluid.run`), the way a loop over a sweep runs them.

Figures (wall seconds on this machine, one process, no persistent compilation cache,
JAX's in-memory caches cleared before each measurement):

* ``alone_first_s``: one scenario alone, compile included; ``alone_steady_s``: one
  scenario alone, compiled;
* ``batch_first_s``: the batch of 16, compile included; ``batch_steady_s`` compiled;
* ``per_scenario_first_ratio`` = ``batch_first_s / batch / alone_first_s``: what a
  scenario costs in a cold batch against a cold run alone (compile shared);
* ``loop_over_batch`` = ``(alone_first_s + (batch - 1) alone_steady_s) /
  batch_first_s``: a loop of the 16 alone (one compile, 16 runs) against the batch, each
  from cold;
* ``per_scenario_steady_ratio`` = ``batch_steady_s / batch / alone_steady_s``: the
  compiled batch per scenario against a compiled run alone (the CPU gains nothing from
  ``vmap`` here; an accelerator shares each kernel launch).

The batch's results equal each scenario's own run (checked here on every field of the
results, to float32 round-off), so the batch is only a faster way to the same numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import fabric_jax as fj  # noqa: E402
from fabric_jax import fluid  # noqa: E402
from fabric_jax.cc.dcqcn import dcqcn_params  # noqa: E402

FIELDS = ("finish", "sent", "delivered", "dropped", "queued")


def scenarios(batch: int, quick: bool = False):
    """``batch`` prepared problems of one shape: an 8-to-1 incast plus permutation
    background on a leaf-spine (4 leaves, 4 spines, 8 hosts per leaf, 100 Gb/s), DCQCN +
    PFC, each with its own ``K_min`` (5-80 KB) and load (flow sizes x 0.5-2)."""
    topo = fj.leaf_spine(4, 4, 8, link_gbps=100.0, latency_us=1.0)
    rng = np.random.default_rng(0)
    n_hosts = 32
    inc_src = np.arange(1, 9)
    inc_dst = np.zeros(8, int)
    perm = rng.permutation(n_hosts)
    bg_src = np.arange(n_hosts)
    bg_dst = np.where(perm == bg_src, (perm + 1) % n_hosts, perm)
    src = np.concatenate([inc_src, bg_src] * (1 if quick else 2))
    dst = np.concatenate([inc_dst, bg_dst] * (1 if quick else 2))
    n = src.size
    ps = fj.shortest_paths(topo, src, dst)
    routing = fj.make_routing("ecmp", ps, seed=0)
    inc = fj.Incidence.from_paths(ps, np.asarray(routing.split), n_links=topo.n_links)
    base = rng.uniform(0.2e6, 1.0e6, n)
    arrival = rng.uniform(0, 20e-6, n)
    n_steps = 200 if quick else 400
    out = []
    for b in range(batch):
        k_min = 5e3 * 2 ** (4 * b / max(batch - 1, 1))
        load = 0.5 * 4 ** (b / max(batch - 1, 1))
        out.append(fluid.prepare(
            inc, topo.capacity, base * load, dt=1e-6, n_steps=n_steps, arrival=arrival,
            link_latency=topo.latency, nic_links=topo, routing=routing,
            cc=fluid.CongestionControl("dcqcn", dcqcn_params("paper", k_min=k_min)),
            flow_control=fluid.FlowControlConfig("pfc", buffer=topo.buffer)))
    return out, n


def _block(x):
    return jax.block_until_ready(x)


def _timed(fn):
    t0 = time.perf_counter()
    out = _block(fn())
    return time.perf_counter() - t0, out


def measure(batch: int = 16, quick: bool = False, repeats: int = 3) -> dict:
    problems, n_flows = scenarios(batch, quick)
    stacked, axes = fluid.stack(problems)

    def run_batch():
        return fj.sweep(fluid.loop.run_body, stacked, in_axes=(axes,))

    jax.clear_caches()
    alone_first, _ = _timed(lambda: fluid.run(problems[0]))
    alone = [_timed(lambda p=p: fluid.run(p)) for p in problems]
    alone_steady = float(np.median([t for t, _ in alone[1:repeats + 1]]))
    jax.clear_caches()
    batch_first, res = _timed(run_batch)
    batch_steady = float(np.median([_timed(run_batch)[0] for _ in range(repeats)]))
    worst = 0.0
    for b, (_, one) in enumerate(alone):
        for f in FIELDS:
            a, g = np.asarray(getattr(one, f), float), np.asarray(getattr(res, f), float)[b]
            fin = np.isfinite(a)
            if not np.array_equal(fin, np.isfinite(g)):
                raise AssertionError(f"scenario {b}: {f} finite in one run and not the other")
            scale = max(float(np.max(np.abs(a[fin]), initial=0.0)), 1e-30)
            worst = max(worst, float(np.max(np.abs(g[fin] - a[fin]), initial=0.0)) / scale)
    out = dict(batch=batch, flows=n_flows, n_steps=problems[0].n_steps, device=jax.devices()[0]
               .device_kind, cpus=os.cpu_count(),
               alone_first_s=alone_first, alone_steady_s=alone_steady,
               batch_first_s=batch_first, batch_steady_s=batch_steady,
               per_scenario_first_ratio=batch_first / batch / alone_first,
               loop_over_batch=(alone_first + (batch - 1) * alone_steady) / batch_first,
               per_scenario_steady_ratio=batch_steady / batch / alone_steady,
               max_rel_diff=worst)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16, help="scenarios in the batch (16)")
    ap.add_argument("--quick", action="store_true", help="half the flows and steps")
    ap.add_argument("--json", help="write the figures there")
    args = ap.parse_args(argv)
    if args.batch < 2:
        ap.error("--batch must be >= 2 (one scenario is not a batch)")
    out = measure(args.batch, args.quick)
    for key, val in out.items():
        print(f"{key:>28}: {val:.4g}" if isinstance(val, float) else f"{key:>28}: {val}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
