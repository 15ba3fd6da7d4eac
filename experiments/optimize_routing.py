"""Experiment: learned routing weights vs ECMP, spraying, adaptive routing and the LP optimum.

Issue #6.  For every scenario, on the same candidate equal-cost paths:

* ECMP (per-flow hash), spraying (even split), adaptive routing (approximated by
  congestion-aware greedy placement of flowlets, see ``fabric_jax.optimize._baselines``),
  the learned split (Adam on softmax logits, smooth-MLU objective, warm start from
  ECMP) and the exact min-MLU LP (scipy HiGHS);
* the time the learned routing needs to reach a stopping rule that does not know the
  optimum (the best MLU improved by less than 0.1 % over the last 100 steps,
  ``PLATEAU``), its compilation time separately, and its gap to the LP at that point,
  next to the LP wall time (matrix build + solve), all from one run;
* for a collective job on the same fabric, its completion time under max-min sharing
  (exact event-driven simulator) with each routing, plus the learned CCT objective
  (unrolled max-min event loop) and the LP lower bound (min over routings of the largest
  link drain time).

Scenarios:

``moe_hot_experts``   MoE all-to-all with Zipf(1.2) expert popularity on a 4:1
                      oversubscribed fat-tree (k = 8; 4 with --quick).
``failures``          uniform all-to-all on a fat-tree with 25% of the fabric cables
                      degraded to 1/4 speed and two cables down (asymmetric capacity).
``multi_tenant``      MoE all-to-all (half the hosts), ring all-reduce (other half) and
                      a permutation background tenant on a 4:1 fat-tree; also a
                      per-tenant objective that protects the two training tenants.
``meta_rack_{a,b,c}`` Meta rack-to-rack matrices (Parsimon's clusters A/B/C, 32 racks)
                      on a four-plane pod fabric with one plane at 40% speed
                      (mixed-generation) and one fabric-spine cable down; plus a
                      DOTE-style policy trained on perturbed matrices and evaluated on
                      held-out ones (``generalisation`` in the JSON).
``fat_tree_k16``      MoE all-to-all on the 1,024-host fat-tree (k = 16; k = 8 with
                      --quick), 8:1 oversubscribed with 64 degraded cables: time to
                      quality vs the LP, and a batch of traffic matrices optimised at
                      once with vmap.

Usage::

    python experiments/optimize_routing.py [--quick] [--json PATH] [--plots DIR]
        [--seed 0] [--shared DIR] [--only name,name]

``--json`` writes, per scenario name, ``lp_mlu``, ``learned_mlu``, ``ecmp_mlu``,
``spray_mlu``, ``learned_seconds`` (to the stopping rule, compilation excluded),
``learned_compile_seconds``, ``learned_stop_step``, ``learned_gap_at_stop``,
``lp_seconds`` (and more).  ``--plots`` writes loss
curves and link-utilisation histograms (PNG, matplotlib Agg) and text reports.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import ROOT, device_info, table, write_json

os.environ.setdefault("MPLBACKEND", "Agg")

import jax.numpy as jnp  # noqa: E402

from fabric_jax import Incidence, simulate_flows  # noqa: E402
from fabric_jax import optimize as fo  # noqa: E402
from fabric_jax.optimize._tm import (load_rack_matrix, meta_fabric,  # noqa: E402
                                     perturbed_matrices)
from fabric_jax.paths import PathSet  # noqa: E402
from fabric_jax.topology import fat_tree  # noqa: E402
from fabric_jax.units import gbps  # noqa: E402
from fabric_jax.workloads import (all_to_all, permutation, ring_all_reduce,  # noqa: E402
                                  zipf_expert_load)

#: Relative distance to the LP optimum used by the batched block's target.
QUALITY = 0.02
#: Stopping rule that needs no optimum: (window in steps, relative improvement of the
#: best MLU over that window), checked every CHECK_EVERY steps.
PLATEAU = (100, 1e-3)
CHECK_EVERY = 10
SPATIALS = Path("reference/workloads/parsimon-eval/spatials")


# ------------------------------------------------------------------ fabrics
def fabric_cables(topo, tiers=None):
    """Link ids of switch-to-switch links, one per cable (the lower-id direction);
    ``tiers=(a, b)`` keeps cables between those tiers."""
    sw = ~topo.node_is_host
    keep = sw[topo.link_src] & sw[topo.link_dst]
    keep &= np.arange(topo.n_links) < topo.link_reverse
    if tiers is not None:
        t = np.sort(np.stack([topo.node_tier[topo.link_src], topo.node_tier[topo.link_dst]]), 0)
        keep &= (t[0] == min(tiers)) & (t[1] == max(tiers))
    return np.flatnonzero(keep)


def degrade(topo, rng, n_degraded, factor, n_failed=0):
    """Scales ``n_degraded`` random fabric cables by ``factor``; fails ``n_failed``
    aggregation-core cables on distinct aggregation switches (connectivity kept)."""
    cables = fabric_cables(topo)
    failed = np.zeros(0, np.int64)
    if n_failed:
        core = fabric_cables(topo, tiers=(2, 3))
        agg = np.where(topo.node_tier[topo.link_src[core]] == 2, topo.link_src[core],
                       topo.link_dst[core])
        _, first = np.unique(agg[rng.permutation(core.size)], return_index=True)
        failed = rng.choice(core[rng.permutation(core.size)][first], n_failed, replace=False)
        cables = np.setdiff1d(cables, failed)
    pick = rng.choice(cables, n_degraded, replace=False)
    if n_degraded:
        topo = topo.with_capacity_scaled(pick, factor, bidirectional=True)
    if n_failed:
        topo = topo.with_failed_links(failed, bidirectional=True)
    return topo


def spread_hosts(n_hosts, n):
    return np.arange(n) * (n_hosts // n)


# ------------------------------------------------------------------ routing runs
def mlu_block(prob, *, steps, seed, lp_method="highs", time_limit=None):
    """Baselines, LP and learned MLU on one (aggregated) problem.

    The learned routing's time is measured to a stopping rule that does not know the
    optimum (:data:`PLATEAU`: the best MLU improved by less than ``PLATEAU[1]``,
    relative, over the last ``PLATEAU[0]`` steps), with its compilation reported
    separately, and its gap to the LP is taken at that point; the LP time is matrix
    build plus HiGHS solve, in the same run.
    """
    base = fo.baseline_splits(prob, seed=seed)
    # First, so that its compilation is measured (not taken from the cache).
    stop = fo.optimize_routing(prob, steps=steps, seed=seed, plateau=PLATEAU,
                               check_every=CHECK_EVERY)
    lp = fo.solve_mlu_lp(prob, method=lp_method, time_limit=time_limit)
    full = fo.optimize_routing(prob, steps=steps, seed=seed)
    row = dict(
        lp_mlu=lp.mlu, learned_mlu=full.mlu, ecmp_mlu=prob.mlu(base["ecmp"]),
        spray_mlu=prob.mlu(base["spray"]), adaptive_mlu=prob.mlu(base["adaptive"]),
        learned_seconds=stop.seconds, learned_compile_seconds=stop.compile_seconds,
        learned_stop_step=int(stop.steps), learned_stop_mlu=stop.mlu,
        learned_gap_at_stop=stop.mlu / lp.mlu - 1,
        lp_seconds=lp.seconds, lp_solve_seconds=lp.solve_seconds, lp_method=lp_method,
        learned_gap=full.mlu / lp.mlu - 1, learned_total_seconds=full.seconds,
        learned_steps=full.steps, learned_best_step=int(full.best_step),
        compile_seconds=full.compile_seconds,
        speedup_vs_lp=lp.seconds / stop.seconds if stop.seconds > 0 else float("inf"),
        speedup_vs_lp_with_compile=lp.seconds / (stop.seconds + stop.compile_seconds),
        n_pairs=prob.n_pairs, n_links=prob.n_links, lp_variables=lp.n_variables)
    splits = dict(base, learned=full.split, lp=lp.split)
    return row, full, lp, splits


def exact_cct(prob, split, size):
    ps = PathSet(src=prob.pair_src, dst=prob.pair_dst, links=prob.links,
                 path_mask=prob.path_mask, hop_mask=prob.hop_mask, n_paths=prob.n_paths)
    inc = Incidence.from_paths(ps, split.astype(np.float32), n_links=prob.n_links)
    res = simulate_flows(inc, jnp.asarray(prob.capacity, jnp.float32),
                         np.zeros(prob.n_pairs), size)
    return np.asarray(res.finish, np.float64)


def cct_block(job, size, *, steps, cct_steps, events, seed, tenant_names=None):
    """Completion time of one collective job (flow level, exact simulator)."""
    prob = job.with_demand(size)            # demand in bytes: MLU = drain time, s
    base = fo.baseline_splits(prob, seed=seed)
    lp = fo.solve_mlu_lp(prob)
    mlu_run = fo.optimize_routing(prob, steps=steps, seed=seed)
    splits = {"ecmp": base["ecmp"], "spray": base["spray"], "adaptive": base["adaptive"],
              "lp_split": lp.split, "learned_mlu": mlu_run.split}
    finish = {k: exact_cct(prob, s, size) for k, s in splits.items()}
    # Warm start of the CCT objective: the best routing known so far (by exact CCT).
    start = min(("spray", "adaptive", "learned_mlu"), key=lambda k: finish[k].max())
    init = np.log(np.maximum(splits[start], 1e-6)) if start != "learned_mlu" else \
        mlu_run.logits
    cct_run = fo.optimize_routing(prob, objective="cct", size=size, steps=cct_steps,
                                  events=events, init=np.where(prob.path_mask, init, 0.0),
                                  learning_rate=0.05, seed=seed)
    splits["learned"] = cct_run.split
    finish["learned"] = exact_cct(prob, cct_run.split, size)
    out = {"cct_lower_bound": lp.mlu, "cct_flows": prob.n_pairs, "cct_events": events,
           "cct_learned_seconds": cct_run.seconds, "cct_warm_start": start}
    for name, fin in finish.items():
        out[f"cct_{name}"] = float(fin.max())
        if tenant_names is not None and len(tenant_names) > 1:
            for t, tn in enumerate(tenant_names):
                sel = prob.tenant == t
                out[f"cct_{name}_{tn}"] = float(fin[sel].max())
    return out, cct_run


# ------------------------------------------------------------------ scenarios
def scenario_moe(q, seed):
    k = 4 if q else 8
    topo = fat_tree(k, link_gbps=400, fabric_gbps=100)          # 4:1 at the edge
    n = topo.n_hosts
    load = zipf_expert_load(n, 1.2, seed)
    w = all_to_all(np.arange(n), 256e6, expert_load=load)
    rate = gbps(400)
    # demand = bytes / ideal time at host-link speed: MLU = slowdown vs the NIC bound.
    prob = fo.routing_problem(topo, w.src, w.dst, w.size * rate / 256e6, aggregate=True)
    ranks = spread_hosts(n, 8 if q else 16)
    jw = all_to_all(ranks, 64e6, expert_load=zipf_expert_load(ranks.size, 1.2, seed))
    job = fo.routing_problem(topo, jw.src, jw.dst, np.ones(jw.n_flows))
    return dict(prob=prob, job=job, size=jw.size, topo=topo,
                desc=f"MoE all-to-all, Zipf 1.2, fat_tree(k={k}) 400G hosts / 100G fabric")


def scenario_failures(q, seed):
    k = 4 if q else 8
    rng = np.random.default_rng(seed)
    topo = fat_tree(k, link_gbps=400)
    n_cab = fabric_cables(topo).size
    topo = degrade(topo, rng, n_cab // 4, 0.25, n_failed=2)
    n = topo.n_hosts
    src, dst = np.nonzero(~np.eye(n, dtype=bool))
    prob = fo.routing_problem(topo, src, dst, np.full(src.size, gbps(400) / (n - 1)),
                              aggregate=True)
    ranks = spread_hosts(n, 8 if q else 16)
    jw = all_to_all(ranks, 64e6)
    job = fo.routing_problem(topo, jw.src, jw.dst, np.ones(jw.n_flows))
    return dict(prob=prob, job=job, size=jw.size, topo=topo,
                desc=f"uniform all-to-all, fat_tree(k={k}), {n_cab // 4} cables at 25%, "
                     f"2 down")


def _tenant_flows(n, seed, moe_bytes, ar_bytes, bg_bytes, n_sub=None):
    rng = np.random.default_rng(seed)
    hosts = rng.permutation(n)
    half = n // 2
    moe_h, ar_h = np.sort(hosts[:half]), np.sort(hosts[half:])
    if n_sub is not None:
        moe_h, ar_h = moe_h[:n_sub], ar_h[:n_sub]
    moe = all_to_all(moe_h, moe_bytes, expert_load=zipf_expert_load(moe_h.size, 1.0, seed))
    ar = ring_all_reduce(ar_h, ar_bytes)
    first = ar.deps[:, 0] < 0 if ar.deps.shape[1] else np.ones(ar.n_flows, bool)
    src = [moe.src, ar.src[first]]
    dst = [moe.dst, ar.dst[first]]
    size = [moe.size, ar.size[first]]
    ten = [np.zeros(moe.n_flows, int), np.ones(int(first.sum()), int)]
    if bg_bytes:
        bg = permutation(np.arange(n), bg_bytes, seed=seed + 1)
        src.append(bg.src)
        dst.append(bg.dst)
        size.append(bg.size)
        ten.append(np.full(bg.n_flows, 2))
    return (np.concatenate(src), np.concatenate(dst), np.concatenate(size),
            np.concatenate(ten))


def scenario_multi_tenant(q, seed):
    k = 4 if q else 8
    topo = fat_tree(k, link_gbps=400, fabric_gbps=100)
    n = topo.n_hosts
    names = ("moe", "allreduce", "background")
    src, dst, size, ten = _tenant_flows(n, seed, 64e6, 4e9, 128e6)
    prob = fo.routing_problem(topo, src, dst, size / 10e-3, tenant=ten, tenant_names=names,
                              aggregate=True)       # bytes per 10 ms step -> bytes/s
    js, jd, jz, jt = _tenant_flows(n, seed, 64e6, 256e6, 0, n_sub=4 if q else 8)
    job = fo.routing_problem(topo, js, jd, np.ones(js.size), tenant=jt,
                             tenant_names=names[:2])
    return dict(prob=prob, job=job, size=jz, topo=topo, tenants=names,
                desc=f"MoE + ring all-reduce + permutation background, fat_tree(k={k}) 4:1")


def meta_topology():
    topo = meta_fabric(2, 16)
    names = np.asarray(topo.node_names).astype(str)
    ls, ld = names[topo.link_src], names[topo.link_dst]
    plane0 = np.flatnonzero(np.char.startswith(ls, "plane0/") | np.char.startswith(ld, "plane0/"))
    topo = topo.with_capacity_scaled(plane0, 0.4)
    return topo.with_failed_links([topo.link_index("pod1/fsw2", "plane2/ssw1")],
                                  bidirectional=True)


def meta_problem(topo, flows_per_pair=8):
    src, dst = np.nonzero(~np.eye(topo.n_hosts, dtype=bool))
    src, dst = np.repeat(src, flows_per_pair), np.repeat(dst, flows_per_pair)
    return fo.routing_problem(topo, src, dst, np.ones(src.size), aggregate=True)


def meta_flow_demand(prob, matrix, load=0.5):
    """Per-flow bytes/s: the matrix scaled so racks send ``load`` of their uplinks."""
    n_racks = matrix.shape[0]
    src, dst = prob.pair_src[prob.flow_pair], prob.pair_dst[prob.flow_pair]
    share = np.bincount(prob.flow_pair, minlength=prob.n_pairs)[prob.flow_pair]
    d = matrix[src, dst] / share
    uplink = 4 * gbps(100)
    return d / d.sum() * n_racks * load * uplink


def load_meta(shared):
    d = Path(shared) / SPATIALS
    files = [d / f"cluster_{c}_2_16.json" for c in "abc"]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise SystemExit(f"error: Meta traffic matrices not found ({missing[0]}); pass "
                         f"--shared pointing at the shared reference folder (default "
                         f"../shared relative to the repository)")
    return [load_rack_matrix(f)[0] for f in files]


def scenario_k16(q, seed):
    k = 8 if q else 16
    rng = np.random.default_rng(seed)
    topo = fat_tree(k, link_gbps=400, fabric_gbps=50)        # 8:1 at the edge
    topo = degrade(topo, rng, 8 if q else 64, 0.5)
    n = topo.n_hosts
    src, dst = np.nonzero(~np.eye(n, dtype=bool))

    def demand(s):
        return 1e8 * n * zipf_expert_load(n, 0.3, s)[dst]

    prob = fo.routing_problem(topo, src, dst, demand(seed), aggregate=True)
    return dict(prob=prob, topo=topo, demand=demand,
                desc=f"MoE all-to-all, Zipf 0.3, fat_tree(k={k}) {n} hosts, 8:1, "
                     f"{8 if q else 64} cables at 50%")


# ------------------------------------------------------------------ plots
def plot_scenario(plots, name, prob, run, lp, splits):
    import matplotlib.pyplot as plt

    plots.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    ax[0].plot(run.metric_history / lp.mlu, label="exact MLU / LP")
    ax[0].plot(run.loss_history / lp.mlu, label="smooth loss / LP", alpha=0.7)
    ax[0].axhline(1 + QUALITY, color="k", ls=":", label=f"LP + {QUALITY:.0%}")
    ax[0].set(xlabel="step", ylabel="relative to LP optimum", title=f"{name}: learning",
              yscale="log")
    ax[0].legend(fontsize=8)
    ok = prob.capacity > 0
    for key in ("ecmp", "spray", "learned", "lp"):
        u = prob.utilization(splits[key])[ok]
        ax[1].hist(u, bins=40, histtype="step", label=f"{key} (max {u.max():.3g})")
    ax[1].set(xlabel="link utilisation", ylabel="links", yscale="log",
              title=f"{name}: link load before/after")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plots / f"{name}.png", dpi=110)
    plt.close(fig)
    (plots / f"{name}_report.txt").write_text(
        fo.routing_report(prob, splits["learned"], before=splits["ecmp"]) + "\n")


def plot_generalisation(plots, gen, policies):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, pol in policies.items():
        ax[0].plot(pol.loss_history, label=name, alpha=0.8)
    ax[0].set(xlabel="step", ylabel="smooth MLU / spray MLU", title="policy training")
    ax[0].legend(fontsize=8)
    for name in ("mlp", "shared", "spray", "ecmp"):
        ax[1].hist(gen["gaps"][name], bins=30, histtype="step", label=name)
    ax[1].set(xlabel="held-out MLU / LP optimum - 1", ylabel="matrices",
              title="generalisation (held-out)")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plots / "meta_generalisation.png", dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------ driver
def run(args):
    q, seed = args.quick, args.seed
    steps = 600 if q else 1500
    cct_steps, events = (20, 24) if q else (40, 48)
    plots = Path(args.plots) if args.plots else None
    results, cct_rows = {}, []
    only = set(args.only.split(",")) if args.only else None

    def want(name):
        return only is None or name in only or any(name.startswith(o) for o in only)

    for name, build in (("moe_hot_experts", scenario_moe), ("failures", scenario_failures),
                        ("multi_tenant", scenario_multi_tenant)):
        if not want(name):
            continue
        sc = build(q, seed)
        prob = sc["prob"]
        row, full, lp, splits = mlu_block(prob, steps=steps, seed=seed)
        row["description"] = sc["desc"]
        if "tenants" in sc:
            w = np.array([1.0, 1.0, 0.05])   # protect the training tenants
            # Per-tenant objective, refined from the global optimum (a non-convex loss:
            # a warm start keeps the best of both).
            per = fo.optimize_routing(prob, steps=steps, tenant_weight=w, seed=seed,
                                      init=full.logits)
            arr = prob.arrays()
            for key, s in (("ecmp", splits["ecmp"]), ("learned", full.split),
                           ("lp", lp.split), ("per_tenant", per.split)):
                tm = np.asarray(fo.tenant_mlu(arr, jnp.asarray(s), 3))
                for t, tn in enumerate(sc["tenants"]):
                    row[f"tenant_mlu_{key}_{tn}"] = float(tm[t])
            row["per_tenant_weights"] = w.tolist()
            row["per_tenant_global_mlu"] = per.mlu
        cct, _ = cct_block(sc["job"], sc["size"], steps=steps, cct_steps=cct_steps,
                           events=events, seed=seed,
                           tenant_names=sc["job"].tenant_names if "tenants" in sc else None)
        row.update(cct)
        results[name] = row
        cct_rows.append(dict(scenario=name, **{k: v for k, v in cct.items()
                                               if k.count("_") <= 2}))
        if plots:
            plot_scenario(plots, name, prob, full, lp, splits)
        print(f"[{name}] done: learned {row['learned_mlu']:.4g} vs LP {row['lp_mlu']:.4g}",
              flush=True)
        if name == "failures":
            print(fo.routing_report(prob, splits["learned"], before=splits["ecmp"],
                                    top_links=5, top_pairs=2))

    if want("meta"):
        mats = load_meta(args.shared)
        topo = meta_topology()
        base = meta_problem(topo)
        for c, m in zip("abc", mats):
            name = f"meta_rack_{c}"
            prob = base.with_flow_demand(meta_flow_demand(base, m))
            row, full, lp, splits = mlu_block(prob, steps=steps, seed=seed)
            row["description"] = (f"Meta cluster {c.upper()} rack matrix (32 racks) on "
                                  f"{topo.name}, plane 0 at 40%, one cable down")
            results[name] = row
            if plots:
                plot_scenario(plots, name, prob, full, lp, splits)
            print(f"[{name}] done", flush=True)
        results["generalisation"] = generalisation(base, mats, q, seed, plots)
        print("[generalisation] done", flush=True)

    if want("fat_tree_k16"):
        sc = scenario_k16(q, seed)
        prob = sc["prob"]
        # The default HiGHS method (dual simplex) needs over 20 minutes here; its
        # interior-point method is the faster exact baseline, so the LP gets its best.
        row, full, lp, splits = mlu_block(prob, steps=steps, seed=seed,
                                          lp_method="highs-ipm")
        row["description"] = sc["desc"]
        row.update(batched_block(prob, sc["demand"], q, seed, steps))
        results["fat_tree_k16"] = row
        if plots:
            plot_scenario(plots, "fat_tree_k16", prob, full, lp, splits)
        print("[fat_tree_k16] done", flush=True)

    cols = ["scenario", "ecmp_mlu", "spray_mlu", "adaptive_mlu", "learned_mlu", "lp_mlu",
            "learned_stop_step", "learned_gap_at_stop", "learned_seconds",
            "learned_compile_seconds", "lp_seconds", "speedup_vs_lp"]
    rows = [dict(scenario=k, **v) for k, v in results.items() if "lp_mlu" in v]
    print("\nMaximum link utilisation (same candidate paths):")
    print(table(rows, cols))
    if cct_rows:
        print("\nCollective completion time under max-min sharing, seconds:")
        print(table(cct_rows, ["scenario", "cct_ecmp", "cct_spray", "cct_adaptive",
                               "cct_learned_mlu", "cct_learned", "cct_lp_split",
                               "cct_lower_bound"]))
    if "generalisation" in results:
        g = results["generalisation"]
        print("\nHeld-out generalisation (Meta matrices): gap to per-matrix LP optimum")
        print(table([dict(policy=p, mean=g[f"{p}_gap_mean"], p95=g[f"{p}_gap_p95"],
                          max=g[f"{p}_gap_max"]) for p in ("mlp", "shared", "spray", "ecmp")],
                    ["policy", "mean", "p95", "max"]))
    return results


def generalisation(base, mats, q, seed, plots):
    n_train, n_test = (128, 16) if q else (512, 64)
    stack = np.stack([m / m.sum() for m in mats])
    train = perturbed_matrices(stack, n_train, sigma=0.6, seed=seed)
    test = perturbed_matrices(stack, n_test, sigma=0.6, seed=seed + 1)

    def pair_demands(ms):
        return np.stack([base.flow_traffic(meta_flow_demand(base, m))[0] for m in ms])

    d_train, d_test = pair_demands(train), pair_demands(test)
    t0 = time.perf_counter()
    lps = np.array([fo.solve_mlu_lp(base, demand=d).mlu for d in d_test])
    lp_s = (time.perf_counter() - t0) / n_test
    shared = fo.train_routing_policy(base, d_train, kind="shared",
                                     steps=300 if q else 1500, seed=seed)
    # DOTE-style network, started from the shared logits: it learns the matrix-dependent
    # correction only.
    mlp = fo.train_routing_policy(base, d_train, kind="mlp", hidden=128, init=shared,
                                  steps=300 if q else 2000, seed=seed)
    policies = {"mlp": mlp, "shared": shared}
    out, gaps = {}, {}
    for name, pol in policies.items():
        t0 = time.perf_counter()
        splits = pol.split(d_test)
        out[f"{name}_seconds_per_matrix"] = (time.perf_counter() - t0) / n_test
        m = np.array([base.mlu(s, d) for s, d in zip(splits, d_test)])
        gaps[name] = m / lps - 1
        out[f"{name}_train_seconds"] = pol.seconds
    for name, split in (("spray", fo.spray_split(base)), ("ecmp", fo.ecmp_split(base, seed))):
        gaps[name] = np.array([base.mlu(split, d) for d in d_test]) / lps - 1
    for name, g in gaps.items():
        out.update({f"{name}_gap_mean": float(g.mean()),
                    f"{name}_gap_p95": float(np.percentile(g, 95)),
                    f"{name}_gap_max": float(g.max())})
    out.update(n_train=n_train, n_test=n_test, lp_seconds_per_matrix=lp_s, sigma=0.6)
    if plots:
        plot_generalisation(plots, dict(gaps=gaps), policies)
    return out


def batched_block(prob, demand_fn, q, seed, steps):
    """Many traffic matrices optimised at once (vmap) vs one LP each."""
    n_b = 4
    flow_d = [demand_fn(seed + 1 + i) for i in range(n_b)]
    traffic = [prob.flow_traffic(d) for d in flow_d]
    demands = np.stack([t[0] for t in traffic])
    bases = np.stack([t[1] for t in traffic])
    lps = [fo.solve_mlu_lp(prob.with_flow_demand(d), method="highs-ipm") for d in flow_d]
    lp_mlu = np.array([lp.mlu for lp in lps])
    res = fo.optimize_routing_batched(prob, demands, base_loads=bases, steps=steps,
                                      target=lp_mlu * (1 + QUALITY), check_every=10,
                                      seed=seed)
    return dict(batch_size=n_b, batched_mlu=res.mlu.tolist(), batched_lp_mlu=lp_mlu.tolist(),
                batched_gap_max=float(np.max(res.mlu / lp_mlu - 1)),
                batched_seconds=res.target_seconds if np.isfinite(res.target_seconds)
                else res.seconds,
                batched_reached=bool(np.isfinite(res.target_seconds)),
                batched_lp_seconds=float(sum(lp.seconds for lp in lps)))


def main(argv=None):
    started = time.time()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI-sized instances")
    ap.add_argument("--json", help="write results to this JSON file")
    ap.add_argument("--plots", help="write PNG figures and text reports to this folder")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared"),
                    help="shared reference folder (default: ../shared)")
    ap.add_argument("--only", help="comma-separated scenario names (prefixes)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    results = run(args)
    payload = dict(device=device_info(), quick=args.quick, seed=args.seed,
                   quality=QUALITY, plateau=list(PLATEAU), wall_seconds=time.perf_counter() - t0, **results)
    write_json(args.json, payload, started=started, inputs=vars(args))
    return payload


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
