"""A spine cable fails mid-transfer and recovers: ECMP, adaptive routing, spraying, static.

Units: bytes, seconds, bytes/s in every array and JSON value (keys with another unit say
so, e.g. ``_us``); throughputs are also given as fractions of the offered line rate.

Scenario.  A 1:1 leaf-spine with 2 leaves, ``--spines`` spines and as many hosts per
leaf (every link ``--link-gbps``).  Host ``i`` of leaf 0 sends ``--size-mb`` to host
``pi(i)`` of leaf 1 and host ``i`` of leaf 1 to ``sigma(i)`` of leaf 0 (random
permutations, ``--seeds`` independent copies simulated as one block-diagonal network,
:func:`experiments._common.replicate`), all at ``t = 0``, no congestion control,
infinite buffers.  The cable leaf 0 -- spine 0 (both directions) fails at
``--fail-us`` and recovers at ``--recover-us`` (``simulate_fluid(faults=)``,
:mod:`fabric_jax.faults`).  Bytes queued on the cable when it fails are dropped and
resent by their senders.

Policies (:mod:`fabric_jax.routing`):

``ecmp``
    Hashed path; flows whose path crossed the cable are rehashed over the surviving
    spines (resilient hashing), the others stay; back home after recovery.
``adaptive``
    ``--adaptive-policy`` (default Spectrum-X AR, global visibility): the dead path gets
    weight 0 at once, the rest rebalances on load.
``spray``
    Even split over the live paths.
``static``
    The ECMP-hashed path as a fixed route, no failover (``routing=None``): flows on the
    cable are stranded (``FluidInfo.stranded_time``) until it recovers.

Expectations (stated, checked by ``tests/dynamics/test_faults.py`` on a smaller case): during
the failure leaf 0 has ``(spines - 1)`` of ``spines`` uplinks and downlinks, so spraying
and adaptive routing deliver ``(spines - 1) / spines`` of the full rate; static routing
stops the stranded flows entirely.

Model artefact, stated: for a few steps right after the failure the aggregate
throughput dips below the surviving capacity: the new queues at the surviving uplinks
are served first and their bytes advance one hop per fluid step (store and forward,
:mod:`fabric_jax.fluid`), so they reach the receivers two steps later.  The throughput
window below starts ``SETTLE`` = 5 us after the failure.

Reported metrics (JSON ``policies.<name>``; means over copies):

``completion_s`` / ``baseline_completion_s``
    Completion time of the permutation (its last flow) with the failure / with the same
    schedule at factor 1 (no failure; same compiled program).
``slowdown``
    ``completion_s / baseline_completion_s``.
``throughput_during_failure``
    Aggregate delivered throughput over ``[fail + 5 us, recover)`` over the offered line
    rate (``2 n x`` line rate per copy).
``stranded_flow_s``
    Sum over flows of the time spent stranded (no live path), seconds per copy.
``dropped_bytes``
    Bytes dropped (queued on the cable when it failed), per copy.
``max_residual``
    Largest per-step conservation residual ``|sent - delivered - dqueued - dropped|``,
    bytes (float32 round-off).

Outputs: a table, ``--json PATH``, and with ``--plots DIR`` ``link_failure.png``
(aggregate throughput over time of copy 0, per policy, failure window shaded).

Usage::

    python experiments/link_failure.py                      # 4 spines, 8 seeds (< 1 min)
    python experiments/link_failure.py --json out.json --plots figs/
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments import _common as cm

from fabric_jax.plots import save_figure  # noqa: E402
from fabric_jax.fluid import simulate_fluid  # noqa: E402
from fabric_jax.fabric_sim import bind_routing  # noqa: E402
from fabric_jax.paths import shortest_paths  # noqa: E402
from fabric_jax.routing import make_routing  # noqa: E402
from fabric_jax.topology import leaf_spine  # noqa: E402
from fabric_jax.units import MB, gbps  # noqa: E402
from fabric_jax.study.progress import Progress  # noqa: E402

POLICIES = ("ecmp", "adaptive", "spray", "static")
#: Throughput window starts this long after the failure (queues re-form), seconds.
SETTLE = 5e-6


def build(spines: int, seeds: int, seed: int, link_gbps: float):
    """Topology, replicated paths (``seeds`` copies of ``2 n`` flows), capacity, and the
    failed cable's links (leaf0 <-> spine0 of every copy)."""
    n = spines
    topo = leaf_spine(2, n, n, link_gbps=link_gbps)
    rng = np.random.default_rng(seed)
    src = np.arange(n)
    blocks = []
    for _ in range(seeds):
        fwd, back = n + rng.permutation(n), rng.permutation(n)
        blocks.append(shortest_paths(topo, np.r_[src, n + src], np.r_[fwd, back], max_paths=n))
    net, paths = cm.replicate(topo, blocks)
    cable = np.array([topo.link_index("leaf0", "spine0"), topo.link_index("spine0", "leaf0")])
    failed = (cable[None, :] + topo.n_links * np.arange(seeds)[:, None]).ravel()
    return topo, paths, net.capacity, failed


def run_policy(policy, paths, capacity, failed, *, size, dt, n_steps, t_fail, t_rec, seed,
               adaptive_policy, seeds, line):
    """Faulted and baseline runs of one policy; per-copy metrics."""
    name = adaptive_policy if policy == "adaptive" else policy
    # static: the ECMP-hashed path as a fixed route (no policy in the run)
    bound, inc = bind_routing(paths, "ecmp" if policy == "static" else name,
                              n_links=capacity.size, seed=seed)
    routing = None if policy == "static" else bound
    n_flows = paths.n_pairs
    out = {}
    for label, factor in (("fault", 0.0), ("base", 1.0)):
        faults = [(t_fail, failed, factor), (t_rec, failed, 1.0)]
        t0 = time.perf_counter()
        res = simulate_fluid(inc, capacity, np.full(n_flows, size), dt=dt, n_steps=n_steps,
                             routing=routing, faults=faults, save_every=1,
                             latency=np.zeros(n_flows))
        finish = np.asarray(res.finish, float).reshape(seeds, -1)
        wall = time.perf_counter() - t0
        out[label] = dict(res=res, finish=finish, wall=wall)
    res, finish = out["fault"]["res"], out["fault"]["finish"]
    t = np.asarray(res.trajectory.t, float)
    thr = np.asarray(res.trajectory.throughput, float).reshape(t.size, seeds, -1).sum(axis=2)
    win = (t > t_fail + SETTLE) & (t <= t_rec)
    offered = finish.shape[1] * line
    comp = finish.max(axis=1)
    base = out["base"]["finish"].max(axis=1)
    return dict(
        completion_s=float(comp.mean()), baseline_completion_s=float(base.mean()),
        slowdown=float(np.mean(comp / base)),
        throughput_during_failure=float(thr[win].mean() / offered),
        stranded_flow_s=float(np.asarray(res.info.stranded_time).sum() / seeds),
        dropped_bytes=float(np.asarray(res.dropped).sum() / seeds),
        max_residual=float(res.info.max_residual),
        unfinished_flows=int(np.sum(~np.isfinite(finish))),
        wall_s=out["fault"]["wall"] + out["base"]["wall"],
    ), (t, thr[:, 0] / offered)


def plot(traces, t_fail, t_rec, out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.axvspan(t_fail * 1e6, t_rec * 1e6, color="0.9", label="cable down")
    for i, (policy, (t, frac)) in enumerate(traces.items()):
        ax.plot(t * 1e6, 100 * frac, color=f"C{i}", label=policy, lw=1.3)
    ax.set_xlabel("time (us)")
    ax.set_ylabel("aggregate throughput (% of offered)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8)
    ax.set_title("Leaf0-spine0 cable fails and recovers (copy 0)")
    return [save_figure(fig, out / "link_failure.png")]


def main(argv=None) -> dict:
    started = time.time()
    ap = cm.parser(__doc__)
    ap.add_argument("--spines", type=int, default=4, help="spines = hosts per leaf (default 4)")
    ap.add_argument("--seeds", type=int, default=8, help="random permutations (default 8)")
    ap.add_argument("--size-mb", type=float, default=4.0, help="bytes per flow, MB (default 4)")
    ap.add_argument("--link-gbps", type=float, default=400.0, help="every link, Gb/s")
    ap.add_argument("--fail-us", type=float, default=20.0, help="failure time, us")
    ap.add_argument("--recover-us", type=float, default=60.0, help="recovery time, us")
    ap.add_argument("--dt-us", type=float, default=1.0, help="fluid step, us")
    ap.add_argument("--adaptive-policy", default="spectrum_x_ar",
                    choices=("ib_ar", "spectrum_x_ar", "adaptive"),
                    help="policy reported as 'adaptive' (default spectrum_x_ar)")
    a = ap.parse_args(argv)
    if a.quick:
        a.seeds = min(a.seeds, 2)
    cm.check_positive(ap, spines=a.spines, seeds=a.seeds, size_mb=a.size_mb,
                      link_gbps=a.link_gbps, recover_us=a.recover_us, dt_us=a.dt_us)
    if a.spines < 2:
        ap.error("--spines must be >= 2 (one must survive)")
    if not (0 <= a.fail_us < a.recover_us):
        ap.error("--fail-us must be >= 0 and < --recover-us")
    topo, paths, capacity, failed = build(a.spines, a.seeds, a.seed, a.link_gbps)
    line = gbps(a.link_gbps)
    size = a.size_mb * MB
    dt = a.dt_us * 1e-6
    t_fail, t_rec = a.fail_us * 1e-6, a.recover_us * 1e-6
    ideal = size / line
    # horizon: the worst ECMP/static spine load, plus the outage, plus slack
    split = np.asarray(make_routing("ecmp", paths, seed=a.seed).split)
    load = np.bincount(paths.links[:, :, 1].ravel(), weights=split.ravel(),
                       minlength=capacity.size)
    horizon = (float(load.max()) + 1.0) * ideal + (t_rec - t_fail) + 20 * dt
    n_steps = int(math.ceil(horizon / dt))
    rows, traces, results = [], {}, {}
    bar = Progress(len(POLICIES), label="link_failure")
    for policy in POLICIES:
        r, trace = run_policy(policy, paths, capacity, failed, size=size, dt=dt,
                              n_steps=n_steps, t_fail=t_fail, t_rec=t_rec, seed=a.seed,
                              adaptive_policy=a.adaptive_policy, seeds=a.seeds, line=line)
        bar.update(policy)
        results[policy] = r
        traces[policy] = trace
        rows.append(dict(policy=policy, completion_us=r["completion_s"] * 1e6,
                         baseline_us=r["baseline_completion_s"] * 1e6, slowdown=r["slowdown"],
                         thr_fail=r["throughput_during_failure"],
                         stranded_us=r["stranded_flow_s"] * 1e6,
                         dropped_MB=r["dropped_bytes"] / MB, unfinished=r["unfinished_flows"]))
    results = dict(spines=a.spines, seeds=a.seeds, size_bytes=size, line_rate=line,
                   fail_s=t_fail, recover_s=t_rec, dt_s=dt, n_steps=n_steps,
                   adaptive_policy=a.adaptive_policy,
                   surviving_fraction=(a.spines - 1) / a.spines, policies=results)
    out = cm.plots_dir(a)
    if out is not None:
        results["plots"] = plot(traces, t_fail, t_rec, out)
    cols = ["policy", "completion_us", "baseline_us", "slowdown", "thr_fail", "stranded_us",
            "dropped_MB", "unfinished"]
    title = (f"leaf0-spine0 cable down in [{a.fail_us:g}, {a.recover_us:g}) us; "
             f"{a.spines} spines, {a.seeds} permutations x 2 directions, "
             f"{a.size_mb:g} MB/flow.\n  thr_fail: throughput during the failure / offered "
             f"(spray/adaptive expect {(a.spines - 1) / a.spines:.3g})")
    return cm.finish(results, a, rows, cols, title, started=started)


if __name__ == "__main__":
    main()
