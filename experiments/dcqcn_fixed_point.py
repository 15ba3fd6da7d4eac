"""DCQCN fluid simulation against the CoNEXT 2016 fixed point (Zhu et al. [ZHU16]).

Scenario ([ZHU16] sec. 4, "dcqcn-stability.tex"): ``N`` long DCQCN flows, each from its
own 40 Gb/s NIC, share one 40 Gb/s bottleneck; the paper's defaults (K_min 5 KB,
K_max 200 KB, P_max 1 %, g 1/256, tau 50 us, tau' 55 us, T 55 us, B 10 MB, F 5,
R_AI 40 Mb/s, packet 1 KB; :func:`fabric_jax.cc.dcqcn_params` ``"paper"``) and a
feedback delay tau* = 4 us (the paper's low-delay time-domain case).  The fluid
simulation (:func:`fabric_jax.fluid.simulate_fluid`) runs ``--duration`` seconds and
averages the last quarter; the fixed point solves the paper's equation

    a^2 alpha* / ((b+d)(c+e)) = tau^2 R_AI R_C*,   R_C* = C/N,
    alpha* = 1 - (1-p*)^(tau' R_C*),   q* = p*/P_max (K_max - K_min) + K_min

(:func:`fabric_jax.cc.dcqcn.fixed_point`).  Compared quantities, each averaged over
the steady window: the bottleneck queue, every flow's **rate trajectory** ``R_C(t)`` and
target ``R_T(t)`` (the law's state, not the link's throughput: the throughput equals
``C/N`` for any law while the link is busy), and ``alpha``.  Expected: all equal the
fixed point within ``--rtol`` (default 2 %) for every N; the per-flow errors reported
are the worst flow's.

``--variant hpcc_ns3 --link-gbps 100`` runs the line-rate-scaled set of
:func:`fabric_jax.cc.params_for` instead (hyper increase, unclamped target; its fixed
point includes both terms, see :func:`fabric_jax.cc.dcqcn.fixed_point`).

Usage::

    python experiments/dcqcn_fixed_point.py --flows 4 --json out.json
    python experiments/dcqcn_fixed_point.py --sweep 2 10 --json sweep.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import write_json

from fabric_jax.cc import dcqcn  # noqa: E402
from fabric_jax.fluid import simulate_fluid  # noqa: E402
from fabric_jax.incidence import Incidence  # noqa: E402
from fabric_jax.units import KB, gbps, to_gbps  # noqa: E402
from fabric_jax.study.progress import Progress  # noqa: E402


def dumbbell(n_flows: int, link_gbps: float):
    """Flow i crosses its NIC link ``1 + i`` then the shared bottleneck link 0."""
    li = np.stack([1 + np.arange(n_flows), np.zeros(n_flows, int)], axis=1).ravel()
    fi = np.repeat(np.arange(n_flows), 2)
    inc = Incidence.from_coo(li, fi, n_links=n_flows + 1, n_flows=n_flows)
    return inc, np.full(n_flows + 1, gbps(link_gbps))


def run(n_flows: int, *, link_gbps: float = 40.0, duration: float = 0.2, dt: float = 2e-6,
        delay_us: float = 4.0, rtol: float = 0.02, variant: str = "paper") -> dict:
    """Simulates ``n_flows`` DCQCN flows on one bottleneck and compares with the fixed point.

    Returns:
      dict with the simulated and fixed-point queue (KB), per-flow rate and target
      (Gb/s, ``[flows]`` lists), alpha, their relative errors (worst flow) and
      ``match``.
    """
    inc, cap = dumbbell(n_flows, link_gbps)
    if variant == "paper":
        params = dcqcn.dcqcn_params("paper")
        if link_gbps != 40.0:
            raise ValueError("--variant paper is the [ZHU16] 40 Gb/s set; use --link-gbps 40")
    else:
        params = dcqcn.dcqcn_params(variant, link_gbps=link_gbps)
    n_steps = int(round(duration / dt))
    save_every = 100
    n_steps -= n_steps % save_every
    if n_steps < 4 * save_every:
        raise ValueError(f"--duration must cover at least {4 * save_every} steps of --dt")
    t0 = time.perf_counter()
    res = simulate_fluid(inc, cap, np.full(n_flows, 1e15), dt=dt, n_steps=n_steps,
                         law="dcqcn", params=params, base_rtt=np.full(n_flows, delay_us * 1e-6),
                         save_every=save_every)
    tr = res.trajectory
    queue = np.asarray(tr.queue[:, 0])
    wall = time.perf_counter() - t0
    tail = slice(3 * queue.size // 4, None)
    law = tr.law_state
    rate = np.asarray(law.rate)[tail].mean(axis=0)          # [flows] mean R_C(t)
    target = np.asarray(law.target)[tail].mean(axis=0)      # [flows] mean R_T(t)
    alpha = float(np.asarray(law.alpha)[tail].mean())
    fp = dcqcn.fixed_point(n_flows, float(cap[0]), params)
    q_sim = float(queue[tail].mean())
    out = dict(
        flows=n_flows, link_gbps=link_gbps, variant=variant, duration_s=n_steps * dt, dt_s=dt,
        feedback_delay_us=delay_us, wall_s=wall,
        sim_queue_kb=q_sim / KB, fixed_point_queue_kb=fp["queue"] / KB,
        sim_rate_gbps=[to_gbps(float(x)) for x in rate],
        fixed_point_rate_gbps=to_gbps(fp["rate"]),
        sim_target_gbps=[to_gbps(float(x)) for x in target],
        fixed_point_target_gbps=to_gbps(fp["target"]),
        sim_alpha=alpha, fixed_point_alpha=fp["alpha"], fixed_point_p=fp["p"],
        queue_std_kb=float(queue[tail].std() / KB),
        bottleneck_throughput_gbps=to_gbps(
            float(np.asarray(tr.throughput)[tail].sum(axis=1).mean())),
        max_conservation_residual_bytes=float(res.info.max_residual))
    rel = lambda x, ref: float(np.max(np.abs(np.asarray(x) - ref)) / abs(ref))  # noqa: E731
    errs = dict(queue=rel(q_sim, fp["queue"]), rate=rel(rate, fp["rate"]),
                target=rel(target, fp["target"]), alpha=rel(alpha, fp["alpha"]))
    out["rel_error"] = errs
    out["match"] = bool(all(e <= rtol for e in errs.values()))
    return out


def main(argv=None):
    started = time.time()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flows", type=int, default=2, help="number of flows N")
    ap.add_argument("--sweep", type=int, nargs=2, metavar=("N_MIN", "N_MAX"),
                    help="run every N in [N_MIN, N_MAX] (JSON gets a list under 'runs')")
    ap.add_argument("--duration", type=float, default=0.2, help="simulated seconds")
    ap.add_argument("--dt", type=float, default=2e-6, help="fluid step, seconds")
    ap.add_argument("--delay-us", type=float, default=4.0, help="feedback delay tau*, us")
    ap.add_argument("--rtol", type=float, default=0.02, help="match tolerance (relative)")
    ap.add_argument("--variant", choices=("paper", "hpcc_ns3", "nvidia"), default="paper",
                    help="DCQCN parameter set (fabric_jax.cc.dcqcn_params)")
    ap.add_argument("--link-gbps", type=float, default=40.0,
                    help="link and NIC rate, Gb/s (the paper set is 40 Gb/s)")
    ap.add_argument("--json", type=str, default=None, help="write results here")
    a = ap.parse_args(argv)
    if a.flows < 1:
        ap.error("--flows must be >= 1")
    if not a.link_gbps > 0 or not a.duration > 0 or not a.dt > 0 or not a.rtol > 0:
        ap.error("--link-gbps, --duration, --dt and --rtol must be > 0")
    if a.variant == "paper" and a.link_gbps != 40.0:
        ap.error("--variant paper is the [ZHU16] 40 Gb/s set; use --link-gbps 40")
    kw = dict(duration=a.duration, dt=a.dt, delay_us=a.delay_us, rtol=a.rtol,
              link_gbps=a.link_gbps, variant=a.variant)
    counts = range(a.sweep[0], a.sweep[1] + 1) if a.sweep else [a.flows]
    bar = Progress(len(counts), label="dcqcn_fixed_point")
    runs = []
    for n in counts:
        runs.append(run(n, **kw))
        bar.update(f"N = {n}")
    result = dict(runs=runs, match=all(r["match"] for r in runs)) if a.sweep else runs[0]
    print(f"{'N':>3} {'q_sim KB':>9} {'q_fp KB':>9} {'R_C Gb/s (min..max)':>21} {'fp':>7} "
          f"{'R_T Gb/s (min..max)':>21} {'fp':>7} {'alpha':>7} {'fp':>7} match")
    for r in runs:
        rc, rt = r["sim_rate_gbps"], r["sim_target_gbps"]
        print(f"{r['flows']:>3} {r['sim_queue_kb']:9.2f} {r['fixed_point_queue_kb']:9.2f} "
              f"{min(rc):10.3f}..{max(rc):<9.3f} {r['fixed_point_rate_gbps']:7.3f} "
              f"{min(rt):10.3f}..{max(rt):<9.3f} {r['fixed_point_target_gbps']:7.3f} "
              f"{r['sim_alpha']:7.4f} {r['fixed_point_alpha']:7.4f} {r['match']}")
    write_json(a.json, result, started=started, inputs=vars(a))
    return 0 if result["match"] else 1


if __name__ == "__main__":
    sys.exit(main())
