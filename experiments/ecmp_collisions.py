"""ECMP hash collisions versus balls-into-bins theory; adaptive routing and spraying.

Units: bytes, seconds, bytes/s; every reported efficiency is a fraction of line rate.

Scenario.  A 1:1 leaf-spine with 2 leaves, ``n`` spines and ``n`` hosts per leaf
(every link at ``--link-gbps``): host ``i`` of leaf 0 sends ``--size-mb`` to host
``pi(i)`` of leaf 1 and host ``i`` of leaf 1 to ``sigma(i)`` of leaf 0 (two random
permutations per seed), all at ``t = 0``, no congestion control, infinite buffers
(:func:`fabric_jax.fluid.simulate_fluid` with the routing policy in the loop).

Theory.  Under ECMP each flow's 5-tuple hash (random RoCEv2 source port, distinct
per-tier seeds: :func:`fabric_jax.routing.ecmp_choice`) picks one of the ``n`` spines
independently: ``n`` balls into ``n`` bins.  The spine's uplink and downlink carry
exactly the flows that picked it, so with max-min sharing the aggregate throughput is
(used spines) x line rate, and its expectation over hashes is

    E[used spines] / n = 1 - (1 - 1/n)^n      (-> 1 - 1/e = 63.2 %)

Packet spraying (even split) and adaptive routing (InfiniBand AR with local queue
visibility by default, ``--adaptive-policy``) use every spine: line rate.

Reported metrics (JSON keys; means over ``--seeds`` seeds, each seed one block of the
same simulation, see :func:`experiments._common.replicate`):

``theory``
    ``1 - (1 - 1/n)^n``.
``<policy>_effective_bandwidth``
    Throughput-averaged: aggregate delivered throughput of all ``2n`` flows, averaged
    over the window ``[0.1, 0.9] x`` ideal time (all flows still active), over
    ``2 n x`` line rate.  This is the quantity the theory predicts.
``<policy>_completion_efficiency``
    Completion-time-based: ideal completion time (``size / line rate``) over the
    actual completion time of the permutation (its last flow).  Under ECMP the last
    flow shares its spine with the most loaded bin, so this is ``E[1 / max load]``
    (about 0.4 for n = 8), well below the throughput figure: collisions hurt
    collectives (which wait for their last flow) more than average throughput.
``<policy>_effective_bandwidth_stderr``
    Standard error of the mean over seeds.
``ecmp_uplinks_used``
    Fraction of spines chosen, counted on the host from the hash (no simulation).

Usage::

    python experiments/ecmp_collisions.py                     # n = 16, sweep 4..32
    python experiments/ecmp_collisions.py --quick --json out.json --plots figs/
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

from fabric_jax import metrics as mx  # noqa: E402
from fabric_jax.plots import save_figure  # noqa: E402
from fabric_jax.fluid import simulate_fluid  # noqa: E402
from fabric_jax.fabric_sim import bind_routing  # noqa: E402
from fabric_jax.paths import shortest_paths  # noqa: E402
from fabric_jax.routing import make_routing, weighted_ecmp_params  # noqa: E402
from fabric_jax.topology import leaf_spine  # noqa: E402
from fabric_jax.units import MB, gbps  # noqa: E402
from fabric_jax.study.progress import Progress  # noqa: E402

#: Fluid steps per ideal completion time (dt = ideal / STEPS_PER_IDEAL).
STEPS_PER_IDEAL = 20
#: Throughput window, as fractions of the ideal completion time: after the
#: store-and-forward start-up of queued bytes (one fluid step per hop), before the first
#: flow can finish.
WINDOW = (0.3, 0.9)
#: Policies whose split never changes after ``init`` (ECMP; spraying without REPS).
STATIC = ("ecmp", "spray")


def routing_for(policy: str, paths, seed: int):
    """The policy bound to ``paths``; static policies as an equivalent weighted ECMP.

    ECMP's ``step`` is the identity and plain spraying's is the even split, so both are
    run as :data:`fabric_jax.routing.WEIGHTED_ECMP` with logits ``0`` on the paths the
    policy uses and ``-1e4`` elsewhere (softmax gives the same split exactly in
    float32).  Same fluid program for both: one compilation instead of two.
    """
    routing = make_routing(policy, paths, seed=seed)
    if policy not in STATIC:
        return routing
    logits = np.where(np.asarray(routing.split) > 0, 0.0, -1e4).astype(np.float32)
    return make_routing("weighted_ecmp", paths, weighted_ecmp_params(logits))


def theory(n: int) -> float:
    """Expected fraction of ``n`` bins hit by ``n`` balls: ``1 - (1 - 1/n)^n``."""
    return 1.0 - (1.0 - 1.0 / n) ** n


def build(n: int, seeds: int, seed: int, link_gbps: float):
    """Topology, replicated path set (``seeds`` blocks of ``2n`` flows), capacity."""
    topo = leaf_spine(2, n, n, link_gbps=link_gbps)
    rng = np.random.default_rng(seed)
    src = np.arange(n)
    blocks = []
    for _ in range(seeds):
        fwd, back = n + rng.permutation(n), rng.permutation(n)
        blocks.append(shortest_paths(topo, np.r_[src, n + src], np.r_[fwd, back], max_paths=n))
    net, paths = cm.replicate(topo, blocks)
    return topo, paths, net.capacity


def horizon(paths, capacity, seed: int) -> int:
    """Fluid steps that cover the slowest block under ECMP (the worst policy here).

    The most loaded spine finishes last, after ``max_load`` ideal times; ECMP's split is
    static, so its load is counted on the host.  Every policy runs this many steps, so
    the static ones share one compiled program.
    """
    split = np.asarray(make_routing("ecmp", paths, seed=seed).split)
    load = np.bincount(paths.links[:, :, 1].ravel(), weights=split.ravel(),
                       minlength=capacity.size)
    return int(math.ceil(max(1.0, float(load.max())) + 1.0)) * STEPS_PER_IDEAL


def run_policy(policy: str, topo, paths, capacity, *, n: int, seeds: int, size: float,
               seed: int, n_steps: int) -> dict:
    """One fluid run of every seed block under ``policy``; per-seed efficiencies."""
    line = float(topo.capacity[0])
    ideal = size / line
    dt = ideal / STEPS_PER_IDEAL
    routing, inc = bind_routing(paths, routing_for(policy, paths, seed),
                                n_links=capacity.size)
    split = np.asarray(routing.split)
    t0 = time.perf_counter()
    res = simulate_fluid(inc, capacity, np.full(paths.n_pairs, size), dt=dt, n_steps=n_steps,
                         routing=routing, save_every=1)
    finish = np.asarray(res.finish, float).reshape(seeds, 2 * n)
    wall = time.perf_counter() - t0
    t = np.asarray(res.trajectory.t, float)
    win = (t > WINDOW[0] * ideal) & (t <= WINDOW[1] * ideal)
    thr = np.asarray(res.trajectory.throughput, float)[win].reshape(-1, seeds, 2 * n)
    # metrics.effective_bandwidth: bytes delivered per second at the window's mean
    # throughput over 2n x line rate; and the permutation's size over its completion
    # time at line rate (the collective definition, one collective per seed block)
    eff_thr = np.asarray(mx.effective_bandwidth(thr.sum(axis=2).mean(axis=0), 1.0,
                                                2 * n * line), float)  # [seeds]
    eff_ct = np.asarray(mx.effective_bandwidth(size, finish.max(axis=1), line),
                        float)                                         # [seeds] (0 if inf)
    out = dict(effective_bandwidth=float(eff_thr.mean()),
               effective_bandwidth_stderr=float(eff_thr.std(ddof=1) / math.sqrt(seeds))
               if seeds > 1 else 0.0,
               completion_efficiency=float(eff_ct.mean()),
               completion_efficiency_stderr=float(eff_ct.std(ddof=1) / math.sqrt(seeds))
               if seeds > 1 else 0.0,
               unfinished_flows=int(np.sum(~np.isfinite(finish))), n_steps=n_steps,
               wall_s=wall)
    if policy == "ecmp":
        # distinct spines per (block, direction): uplinks leaf -> spine are hop 1
        up = paths.links[np.arange(paths.n_pairs), np.argmax(split, axis=1), 1]
        used = [np.unique(u).size / n for u in up.reshape(seeds * 2, n)]
        out["uplinks_used"] = float(np.mean(used))
    return out


def run(n: int, *, seeds: int, seed: int = 0, size_mb: float = 1.0, link_gbps: float = 400.0,
        adaptive_policy: str = "ib_ar") -> dict:
    """Every policy on ``seeds`` random permutations of the ``n``-spine leaf-spine."""
    topo, paths, capacity = build(n, seeds, seed, link_gbps)
    size = size_mb * MB
    row = dict(n=n, seeds=seeds, theory=theory(n), adaptive_policy=adaptive_policy,
               size_bytes=size, line_rate=gbps(link_gbps))
    n_steps = horizon(paths, capacity, seed)
    for label, policy in (("ecmp", "ecmp"), ("adaptive", adaptive_policy), ("spray", "spray")):
        r = run_policy(policy, topo, paths, capacity, n=n, seeds=seeds, size=size, seed=seed,
                       n_steps=n_steps)
        if "uplinks_used" in r:
            row["ecmp_uplinks_used"] = r.pop("uplinks_used")
        for k, v in r.items():
            row[f"{label}_{k}"] = v
    return row


def plot(sweep: list, out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ns = np.array([r["n"] for r in sweep])
    fig, ax = plt.subplots(figsize=(6, 4))
    grid = np.arange(2, max(ns.max(), 4) + 1)
    ax.plot(grid, [100 * theory(int(k)) for k in grid], "k--", label="theory 1-(1-1/n)^n")
    for label, color in (("ecmp", "C1"), ("adaptive", "C0"), ("spray", "C2")):
        ax.errorbar(ns, [100 * r[f"{label}_effective_bandwidth"] for r in sweep],
                    yerr=[200 * r[f"{label}_effective_bandwidth_stderr"] for r in sweep],
                    marker="o", color=color, label=f"{label} (throughput)")
        ax.plot(ns, [100 * r[f"{label}_completion_efficiency"] for r in sweep], marker="x",
                ls=":", color=color, label=f"{label} (completion time)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("hosts per leaf = spines (n)")
    ax.set_ylabel("% of line rate")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=7)
    ax.set_title("Permutation across a 1:1 leaf-spine")
    return [save_figure(fig, out / "ecmp_collisions.png")]


def main(argv=None) -> dict:
    started = time.time()
    ap = cm.parser(__doc__)
    ap.add_argument("--n", type=int, default=16,
                    help="hosts per leaf = spines = uplinks (default 16; --quick: 8)")
    ap.add_argument("--sweep", type=int, nargs="*", default=None,
                    help="also run these n for the plot (default 4 8 16 32; --quick: none)")
    ap.add_argument("--seeds", type=int, default=None,
                    help="random permutations / hash seeds per n (default max(32, 2048/n); "
                         "--quick: 48)")
    ap.add_argument("--size-mb", type=float, default=1.0, help="bytes per flow, MB")
    ap.add_argument("--link-gbps", type=float, default=400.0, help="every link, Gb/s")
    ap.add_argument("--adaptive-policy", default="ib_ar",
                    choices=("ib_ar", "spectrum_x_ar", "adaptive", "flowlet"),
                    help="policy reported as 'adaptive' (default ib_ar: local visibility)")
    a = ap.parse_args(argv)
    if a.quick and a.n == 16 and "--n" not in (argv or sys.argv[1:]):
        a.n = 8
    sweep = a.sweep if a.sweep is not None else ([] if a.quick else [4, 8, 16, 32])
    cm.check_positive(ap, n=a.n, size_mb=a.size_mb, link_gbps=a.link_gbps,
                      seeds=a.seeds, sweep=sweep or None)
    if a.n < 2 or any(k < 2 for k in sweep):
        ap.error("--n and --sweep values must be >= 2 (n spines)")
    ns = sorted(set(sweep) | {a.n})
    rows = []
    bar = Progress(len(ns), label="ecmp_collisions")
    for n in ns:
        seeds = a.seeds or (48 if a.quick else max(32, 2048 // n))
        rows.append(run(n, seeds=seeds, seed=a.seed, size_mb=a.size_mb, link_gbps=a.link_gbps,
                        adaptive_policy=a.adaptive_policy))
        bar.update(f"n = {n}")
    main_row = next(r for r in rows if r["n"] == a.n)
    results = dict(main_row)
    results["sweep"] = rows
    results["definitions"] = {
        "effective_bandwidth": "aggregate delivered throughput over 2n x line rate, averaged "
                               f"over t in {list(WINDOW)} x ideal time and over seeds",
        "completion_efficiency": "ideal completion time (size / line rate) over the "
                                 "permutation's completion time (last flow), mean over seeds",
        "theory": "1 - (1 - 1/n)^n (balls into bins)"}
    cols = ["n", "seeds", "theory", "ecmp_uplinks_used", "ecmp_effective_bandwidth",
            "adaptive_effective_bandwidth", "spray_effective_bandwidth",
            "ecmp_completion_efficiency", "adaptive_completion_efficiency",
            "spray_completion_efficiency"]
    short = [dict((c.replace("_effective_bandwidth", "_bw").replace(
        "_completion_efficiency", "_ct"), r[c]) for c in cols) for r in rows]
    scols = [c.replace("_effective_bandwidth", "_bw").replace("_completion_efficiency", "_ct")
             for c in cols]
    title = (f"Permutation on a 1:1 leaf-spine (2 leaves, n spines), fractions of line rate;"
             f" adaptive = {a.adaptive_policy}.\n  *_bw: throughput-averaged effective "
             f"bandwidth; *_ct: ideal / actual completion time")
    out = cm.plots_dir(a)
    if out is not None:
        results["plots"] = plot(rows, out)
    return cm.finish(results, a, short, scols, title, started=started)


if __name__ == "__main__":
    main()
