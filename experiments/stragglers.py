"""Stragglers: how one slow GPU or one slow NIC stretches a data-parallel training step.

Units: bytes, seconds, bytes/s inside; flags carry their unit (``_mb``, ``_ms``,
``_gbps``); JSON values are SI except keys ending in ``_hours`` (GPU-hours).

Scenario.  A 1:1 leaf-spine (``--gpus`` hosts, ``--hosts-per-leaf`` per leaf, as many
spines, every link ``--link-gbps``) runs one data-parallel job on every host (packed
placement, ring order = host order).  Each step every GPU computes ``--compute-ms``
and then all-reduces ``--grad-mb`` of gradients in a ring (in-order sends per channel,
:func:`fabric_jax.workloads.in_order_sends`), no overlap; ``--sim-steps`` steps are
simulated exactly (:func:`fabric_jax.simulate_flows_batched`: every scenario of the
sweep in one batched event loop, ECMP routing seeded by ``--seed``).  The straggler is
one rank drawn with ``--seed``.

Sweep: slowdown factor ``f`` in ``--factors`` (1 = no straggler) for two kinds:

``compute``  the straggler's compute takes ``f`` times longer
             (:func:`fabric_jax.workloads.scale_compute`);
``nic``      its NIC runs at ``1/f`` of line rate, both directions
             (:func:`fabric_jax.workloads.nic_capacity`).

Closed forms (no overlap, bandwidth-bound ring, ``C`` compute, ``T`` the baseline
communication time): a compute straggler delays its entry into the ring by
``(f - 1) C`` and the ring's dependency chain passes the delay to every rank, so the
step is ``f C + T``; a slow NIC carries each ring step's bytes at ``B/f``, so the ring
runs at the straggler's speed and the step is ``C + f T``.  Either way every rank waits
(blast radius 1) and the job loses ``gpus * (step - step_0)`` GPU-seconds per step.
These hold for one step from a cold start (the default ``--sim-steps 1``).  Over several
steps there is no global barrier: a rank starts its next compute once it has received
everything, while the straggler's last sends still drain, so the mean step drifts below
``C + f T`` (e.g. 16 GPUs, f = 3: 9.2 ms for one step, 8.6 ms mean over three).

Reported (JSON): ``factors``, ``compute_time``, ``baseline_comm_time``,
``baseline_step_time``, ``straggler_rank``, ``straggler_host`` and per kind (``compute``,
``nic``) a list of rows with ``factor``, ``step_time``, ``model_step_time`` (closed form
above), ``slowdown``, ``blast_radius``, ``ranks_delayed``, ``gpu_seconds_lost_per_step``
and ``gpu_hours_lost`` (over ``--run-steps`` training steps).  ``--plots DIR`` writes
``stragglers.png`` (step time and GPU-hours lost versus factor).

Usage::

    python experiments/stragglers.py                   # 32 GPUs, 7 factors (< 1 min CPU)
    python experiments/stragglers.py --quick --json s.json --plots figs/
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments import _common as cm

from fabric_jax.plots import save_figure  # noqa: E402
import fabric_jax as fj  # noqa: E402
from fabric_jax.workloads import (  # noqa: E402
    in_order_sends, nic_capacity, ring_all_reduce, scale_compute, straggler_impact,
    training_step,
)

KINDS = ("compute", "nic")


def run(*, gpus: int, hosts_per_leaf: int, grad_mb: float, compute_ms: float,
        link_gbps: float, factors, sim_steps: int, run_steps: float, seed: int) -> dict:
    """Runs the sweep (see the module docstring); returns the results dict."""
    if gpus % hosts_per_leaf or gpus // hosts_per_leaf < 2:
        raise ValueError(f"gpus ({gpus}) must be a multiple of hosts_per_leaf "
                         f"({hosts_per_leaf}) with at least 2 leaves")
    topo = fj.leaf_spine(gpus // hosts_per_leaf, hosts_per_leaf, hosts_per_leaf,
                         link_gbps=link_gbps)
    rng = np.random.default_rng(seed)
    hosts = np.arange(gpus)
    rank = int(rng.integers(gpus))
    C = compute_ms * 1e-3
    ring = in_order_sends(ring_all_reduce(hosts, grad_mb * 1e6, job="dp"))
    base_w, base_spec = training_step(hosts, C, [ring], n_steps=sim_steps, job="dp")
    paths = fj.shortest_paths(topo, base_w.src, base_w.dst, seed=seed)
    routing = fj.make_routing("ecmp", paths, seed=seed)
    inc = fj.Incidence.from_paths(paths, np.asarray(routing.split), n_links=topo.n_links)

    scen = [("base", 1.0, base_w, base_spec, topo.capacity)]  # (kind, f, w, spec, cap)
    for kind in KINDS:
        for f in factors:
            if kind == "compute":
                w, spec = training_step(hosts, scale_compute(C, [rank], f, n_ranks=gpus),
                                        [ring], n_steps=sim_steps, job="dp")
                cap = topo.capacity
            else:
                w, spec, cap = base_w, base_spec, nic_capacity(topo, [hosts[rank]], f)
            scen.append((kind, float(f), w, spec, cap))
    res = fj.simulate_flows_batched(
        inc, np.stack([s[4] for s in scen]), np.stack([s[2].arrival for s in scen]),
        np.stack([s[2].size for s in scen]), deps=base_w.deps,
        delay=np.stack([s[2].delay for s in scen]))
    finish = np.asarray(res.finish, np.float64)
    if np.any(np.asarray(res.stalled)):
        raise RuntimeError("a scenario stalled; this should not happen on a connected fabric")
    f_base = finish[0]
    step0 = float(base_spec.step_times(base_w, f_base).mean())
    T = step0 - C
    out = dict(factors=[float(f) for f in factors], compute_time=C, baseline_comm_time=T,
               baseline_step_time=step0, straggler_rank=rank, straggler_host=int(hosts[rank]),
               gpus=gpus, sim_steps=sim_steps, run_steps=run_steps)
    for kind in KINDS:
        out[kind] = []
    for i, (kind, f, w, spec, _) in enumerate(scen[1:], start=1):
        imp = straggler_impact(w, finish[i], f_base, baseline_workload=base_w, spec=spec,
                               baseline_spec=base_spec)
        per_step = imp.gpu_seconds_lost / sim_steps
        out[kind].append(dict(
            factor=f, step_time=imp.step_time / sim_steps,
            model_step_time=(f * C + T) if kind == "compute" else (C + f * T),
            slowdown=imp.slowdown, blast_radius=imp.blast_radius,
            ranks_delayed=imp.ranks_delayed, gpu_seconds_lost_per_step=per_step,
            gpu_hours_lost=per_step * run_steps / 3600.0))
    return out


def plot(res: dict, out_dir: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for kind, c in zip(KINDS, ("C0", "C1")):
        rows = res[kind]
        f = [r["factor"] for r in rows]
        a1.plot(f, [r["step_time"] * 1e3 for r in rows], "o-", color=c, label=f"{kind} (sim)")
        a1.plot(f, [r["model_step_time"] * 1e3 for r in rows], "--", color=c,
                label=f"{kind} (closed form)")
        a2.plot(f, [r["gpu_hours_lost"] for r in rows], "o-", color=c, label=kind)
    a1.set_xlabel("straggler slowdown factor")
    a1.set_ylabel("step time (ms)")
    a1.legend(fontsize=8)
    a2.set_xlabel("straggler slowdown factor")
    a2.set_ylabel(f"GPU-hours lost over {res['run_steps']:.0f} steps")
    a2.legend(fontsize=8)
    fig.suptitle(f"One straggler in a {res['gpus']}-GPU data-parallel job "
                 f"(C = {res['compute_time'] * 1e3:.2f} ms, "
                 f"T_comm = {res['baseline_comm_time'] * 1e3:.2f} ms)", fontsize=10)
    return [save_figure(fig, out_dir / "stragglers.png")]


def main(argv=None) -> dict:
    started = time.time()
    ap = cm.parser(__doc__)
    ap.add_argument("--gpus", type=int, default=None, help="hosts = GPUs (default 32; "
                    "--quick: 16)")
    ap.add_argument("--hosts-per-leaf", type=int, default=None,
                    help="hosts per leaf = spines (default 8; --quick: 4)")
    ap.add_argument("--grad-mb", type=float, default=64.0, help="all-reduce per GPU, MB")
    ap.add_argument("--compute-ms", type=float, default=2.0, help="compute per step, ms")
    ap.add_argument("--link-gbps", type=float, default=400.0, help="every link, Gb/s")
    ap.add_argument("--factors", type=float, nargs="*", default=None,
                    help="slowdown factors (default 1 1.25 1.5 2 2.5 3; --quick: 1 1.5 2 3)")
    ap.add_argument("--sim-steps", type=int, default=1,
                    help="training steps simulated (default 1; see the docstring)")
    ap.add_argument("--run-steps", type=float, default=1e5,
                    help="training steps of the run, for GPU-hours (default 1e5)")
    a = ap.parse_args(argv)
    gpus = a.gpus or (16 if a.quick else 32)
    hpl = a.hosts_per_leaf or (4 if a.quick else 8)
    factors = a.factors or ([1.0, 1.5, 2.0, 3.0] if a.quick
                            else [1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0])
    cm.check_positive(ap, gpus=gpus, hosts_per_leaf=hpl, grad_mb=a.grad_mb,
                      compute_ms=a.compute_ms, link_gbps=a.link_gbps, factors=list(factors),
                      sim_steps=a.sim_steps, run_steps=a.run_steps)
    if gpus % hpl or gpus // hpl < 2:
        ap.error(f"--gpus ({gpus}) must be a multiple of --hosts-per-leaf ({hpl}), >= 2 leaves")
    res = run(gpus=gpus, hosts_per_leaf=hpl, grad_mb=a.grad_mb, compute_ms=a.compute_ms,
              link_gbps=a.link_gbps, factors=sorted(factors), sim_steps=a.sim_steps,
              run_steps=a.run_steps, seed=a.seed)
    out = cm.plots_dir(a)
    if out is not None:
        res["plots"] = plot(res, out)
    rows = [dict(kind=k, factor=r["factor"], step_ms=r["step_time"] * 1e3,
                 model_ms=r["model_step_time"] * 1e3, slowdown=r["slowdown"],
                 blast_radius=r["blast_radius"], gpu_hours_lost=r["gpu_hours_lost"])
            for k in KINDS for r in res[k]]
    title = (f"Straggler rank {res['straggler_rank']} of {gpus} GPUs: C = "
             f"{res['compute_time'] * 1e3:.3f} ms, T_comm = "
             f"{res['baseline_comm_time'] * 1e3:.3f} ms")
    return cm.finish(res, a, rows, list(rows[0]), title, started=started)


if __name__ == "__main__":
    main()
