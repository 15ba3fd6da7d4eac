"""Real topologies: 2-tier, oversubscribed 2:1, 2-plane and 3-tier Clos at one host count.

Units: bytes, seconds, bytes/s in arrays and JSON; the table prints us and fractions.

Scenario (issue 14, "Real topologies").  ``--leaves`` x ``--hosts-per-leaf`` hosts
(default 4 x 8 = 32 NICs at ``--link-gbps`` = 400 Gb/s), four builds of
:func:`fabric_jax.topology.leaf_spine` with the same hosts and NIC bandwidth:

``2-tier``
    ``leaf_spine(L, H, H)``: non-blocking leaf-spine, H spines.
``2-tier 2:1``
    ``leaf_spine(L, H/2, H, oversubscription=2, fabric_gbps=link)``: half the
    spines, each leaf's uplink bandwidth half its downlink bandwidth.
``2-plane``
    ``leaf_spine(L, H, H, planes=2)``: every NIC split into two ports of link/2 in two
    independent leaf-spine planes (Spectrum-X Multiplane, Alibaba HPN dual-plane).
``3-tier``
    ``leaf_spine(L, H, H, tiers=3, leaves_per_pod=--leaves-per-pod)``: pods of 2
    leaves with their own H spines under a non-blocking super-spine layer (2 pods by
    default).

Workloads, all flows at ``t = 0``: a uniform all-to-all of ``--a2a-mb`` per rank
(:func:`fabric_jax.workloads.all_to_all`) and a bandwidth-bound ring all-reduce of
``--ar-mb`` (:func:`fabric_jax.workloads.steady_state_all_reduce`: every rank streams
``2 (n-1)/n S`` to its successor) over a ring that visits the leaves in turn (rank
``i`` on leaf ``i mod L``), so every ring hop crosses the fabric.

Engine: the preset's run on candidate paths, :func:`fabric_jax.fabric_sim.simulate_paths`,
as :func:`fabric_jax.study.run.simulate_case` (the ``compare`` study) makes it: the
routing policy bound to every equal-cost path (:func:`fabric_jax.paths.shortest_paths`,
all planes), congestion control with parameters at the NIC rate, flow control, buffers,
the receiver, link and device latencies -- at a fixed step ``--dt-us`` (default 1 us), for up to
``--horizon`` x the line-rate time.  Every build and workload runs in one call on the
disjoint union of the builds (no shared link, so no interaction; one compilation).
Each flow's ``line_rate`` is the whole NIC (``--link-gbps``): the engine's default, the
smallest capacity on the flow's candidate paths, would cap a multi-plane flow at one
plane's port speed (``--default-line-rate`` shows that).

Reported per build and workload: completion time of the collective (last flow), the
line-rate ideal (``bytes per rank / NIC rate``), effective bandwidth = ideal /
completion (:func:`fabric_jax.metrics.effective_bandwidth` of a rank's bytes over the
completion time at the NIC rate), bisection bandwidth of the build, switches and
links.

Expected (mechanisms, not tuning): the all-to-all sends ``(L-1) H / (L H - 1)`` of its
bytes across leaves (24/31 by default), so 2:1 oversubscription costs it up to 2x; the
cross-leaf ring is one flow per host link and every ring hop leaves the leaf, so 2:1
halves its bandwidth at best (``--cc none`` isolates congestion control's share); planes
keep the bandwidth (same bisection) with half-speed ports; the 3-tier build adds two
hops of latency but no bandwidth loss.

Measured (default run, ``python experiments/topologies.py``: spectrum_x, 32 hosts, dt =
1 us, 466 steps; 52 s CPU, 153 s wall on the shared 2-core machine)::

         build         workload  switches  links  bisection  ideal_us  completion_us  eff_bw
        2-tier       all_to_all        12    128       1.00      77.5           86.5   0.896
        2-tier  ring_all_reduce        12    128       1.00     155.0          166.5   0.931
    2-tier 2:1       all_to_all         8     96       0.50      77.5          128.5   0.603
    2-tier 2:1  ring_all_reduce         8     96       0.50     155.0          394.5   0.393
       2-plane       all_to_all        24    256       1.00      77.5           86.5   0.896
       2-plane  ring_all_reduce        24    256       1.00     155.0          166.5   0.931
        3-tier       all_to_all        36    192       1.00      77.5           91.1   0.851
        3-tier  ring_all_reduce        36    192       1.00     155.0          168.1   0.922

With ``--cc none`` (``--quick``, 16 hosts) the 2:1 ring reaches 0.476 (its bisection
bound 0.5); HPCC's reaction to the oversubscribed uplinks costs the rest.  Under
``--fabric roce`` (per-flow ECMP) a 2-plane build pins each flow to one plane's
half-speed port, so planes *hurt* unless the NIC spreads a flow over the planes
(Spectrum-X hardware plane load balancing; spraying/AR presets do).  Measured with
``--fabric roce --horizon 10`` (1550 steps of 1 us; 125 s CPU), completion us / eff_bw:
2-tier a2a 94.4 / 0.821, ring 555.4 / 0.279; 2:1 a2a 164.4 / 0.471, ring 819.4 / 0.189;
2-plane a2a 124.4 / 0.623, ring 939.4 / 0.165; 3-tier a2a 97.6 / 0.794, ring 844.6 /
0.184.

Usage::

    python experiments/topologies.py                   # spectrum_x, 32 hosts (~1 CPU-min)
    python experiments/topologies.py --fabric roce --json out.json
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments import _common as cm

from fabric_jax import metrics as mx  # noqa: E402
from fabric_jax.fabrics import get_fabric  # noqa: E402
from fabric_jax.paths import concat_paths, shortest_paths  # noqa: E402
from fabric_jax.fabric_sim import simulate_paths  # noqa: E402
from fabric_jax.topology import disjoint_union, leaf_spine  # noqa: E402
from fabric_jax.units import MB, gbps  # noqa: E402
from fabric_jax.workloads import all_to_all, concat, steady_state_all_reduce  # noqa: E402

BUILDS = ("2-tier", "2-tier 2:1", "2-plane", "3-tier")
WORKLOADS = ("all_to_all", "ring_all_reduce")


def build(kind: str, n_leaves: int, hpl: int, link_gbps: float, leaves_per_pod: int):
    """One of :data:`BUILDS` with ``n_leaves * hpl`` hosts."""
    if kind == "2-tier":
        return leaf_spine(n_leaves, hpl, hpl, link_gbps=link_gbps)
    if kind == "2-tier 2:1":
        if hpl % 2:
            raise ValueError("--hosts-per-leaf must be even for the 2:1 build")
        return leaf_spine(n_leaves, hpl // 2, hpl, oversubscription=2.0,
                          fabric_gbps=link_gbps, link_gbps=link_gbps)
    if kind == "2-plane":
        return leaf_spine(n_leaves, hpl, hpl, planes=2, link_gbps=link_gbps)
    if kind == "3-tier":
        return leaf_spine(n_leaves, hpl, hpl, tiers=3, leaves_per_pod=leaves_per_pod,
                          link_gbps=link_gbps)
    raise ValueError(f"build must be one of {BUILDS}; got {kind!r}")


def workload(name: str, n_leaves: int, hpl: int, a2a_bytes: float, ar_bytes: float):
    """``(Workload, bytes each rank sends)``."""
    n = n_leaves * hpl
    if name == "all_to_all":
        return all_to_all(np.arange(n), a2a_bytes), a2a_bytes * (n - 1) / n
    # rank i on leaf i % L: host (i % L) * hpl + i // L
    ring = (np.arange(n) % n_leaves) * hpl + np.arange(n) // n_leaves
    return steady_state_all_reduce(ring, ar_bytes), 2 * (n - 1) / n * ar_bytes


def run_all(parts, fabric, *, line_rate: float, dt: float, horizon: float, seed: int,
            nic_line_rate: bool = True):
    """One fluid run of every ``(topology, workload, bytes per rank)`` part at once.

    The parts share no link (disjoint union), so they do not interact; one run keeps
    the shapes static and compiles once.  Returns per part ``(finish [flows], wall)``.
    """
    topo, off = disjoint_union([p[0] for p in parts])
    psets = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # every equal-cost path is kept: no cap
        for t, wl, _ in parts:
            psets.append(shortest_paths(t, wl.src, wl.dst))
    paths = concat_paths(psets, off.links, off.hosts)
    wl = concat(*[dataclasses.replace(w, src=w.src + off.hosts[i], dst=w.dst + off.hosts[i])
                 for i, (_, w, _) in enumerate(parts)])
    n_steps = int(math.ceil(horizon * max(p[2] for p in parts) / line_rate / dt))
    # The preset's run as fabric_jax.study.run.simulate_case makes it, with each flow's
    # NIC line rate given explicitly (the whole NIC, all planes) or left to the engine's
    # default (the smallest capacity on the flow's candidate paths, which caps a
    # multi-plane flow at one plane's port, link/P)
    t0 = time.perf_counter()
    res = simulate_paths(topo, paths, fabric, wl.size, dt=dt, n_steps=n_steps, deps=wl.deps,
                         delay=wl.delay, seed=seed, nic_rate=line_rate,
                         line_rate=np.full(wl.n_flows, line_rate) if nic_line_rate else None,
                         fluid_options=None if nic_line_rate else dict(line_rate=None))
    finish = np.asarray(res.finish, float)
    wall = time.perf_counter() - t0
    bounds = np.cumsum([0] + [p[1].n_flows for p in parts])
    return [finish[bounds[i]:bounds[i + 1]] for i in range(len(parts))], n_steps, wall


def main(argv=None) -> dict:
    started = time.time()
    ap = cm.parser(__doc__)
    ap.add_argument("--fabric", default="spectrum_x",
                    help="fabric preset (infiniband, roce, spectrum_x, uec); default spectrum_x")
    ap.add_argument("--leaves", type=int, default=4, help="leaves (default 4)")
    ap.add_argument("--hosts-per-leaf", type=int, default=8,
                    help="hosts per leaf = spines of the 1:1 build (default 8)")
    ap.add_argument("--leaves-per-pod", type=int, default=2,
                    help="leaves per pod of the 3-tier build (default 2)")
    ap.add_argument("--link-gbps", type=float, default=400.0, help="NIC rate, Gb/s")
    ap.add_argument("--a2a-mb", type=float, default=4.0,
                    help="all-to-all bytes per rank, MB (default 4)")
    ap.add_argument("--ar-mb", type=float, default=4.0,
                    help="all-reduce buffer per rank, MB (default 4)")
    ap.add_argument("--dt-us", type=float, default=1.0, help="fluid step, us (default 1)")
    ap.add_argument("--horizon", type=float, default=3.0,
                    help="simulated time in line-rate completion times (default 3)")
    ap.add_argument("--cc", default=None,
                    help="override the preset's congestion-control law (e.g. none)")
    ap.add_argument("--builds", nargs="+", default=list(BUILDS), choices=BUILDS)
    ap.add_argument("--default-line-rate", action="store_true",
                    help="leave each flow's line rate to the engine's default (smallest "
                         "capacity on its paths: one plane's port with planes)")
    args = ap.parse_args(argv)
    cm.check_positive(ap, leaves=args.leaves, hosts_per_leaf=args.hosts_per_leaf,
                      leaves_per_pod=args.leaves_per_pod, link_gbps=args.link_gbps,
                      a2a_mb=args.a2a_mb, ar_mb=args.ar_mb, dt_us=args.dt_us,
                      horizon=args.horizon)
    if args.quick:
        args.leaves, args.hosts_per_leaf, args.leaves_per_pod = 4, 4, 2
        args.a2a_mb = args.ar_mb = 2.0
    fabric = get_fabric(args.fabric, **({} if args.cc is None else dict(cc=args.cc)))
    line = gbps(args.link_gbps)
    rows, out = [], dict(fabric=fabric.name, dt_s=args.dt_us * 1e-6,
                         n_hosts=args.leaves * args.hosts_per_leaf, line_rate=line,
                         a2a_bytes=args.a2a_mb * MB, ar_bytes=args.ar_mb * MB, runs=[])
    parts, meta = [], []
    for kind in args.builds:
        topo = build(kind, args.leaves, args.hosts_per_leaf, args.link_gbps,
                     args.leaves_per_pod)
        bis = topo.bisection_bandwidth()
        for wname in WORKLOADS:
            wl, per_rank = workload(wname, args.leaves, args.hosts_per_leaf,
                                    args.a2a_mb * MB, args.ar_mb * MB)
            parts.append((topo, wl, per_rank))
            meta.append((kind, wname, bis))
    finishes, n_steps, wall = run_all(parts, fabric, line_rate=line, dt=args.dt_us * 1e-6,
                                      horizon=args.horizon, seed=args.seed,
                                      nic_line_rate=not args.default_line_rate)
    out.update(n_steps=n_steps, wall_s=wall, nic_line_rate=not args.default_line_rate)
    for (topo, wl, per_rank), (kind, wname, bis), fin in zip(parts, meta, finishes):
        done = bool(np.all(np.isfinite(fin)))
        t = float(fin.max()) if done else math.inf
        r = dict(build=kind, topology=topo.name, workload=wname, switches=topo.n_switches,
                 links=topo.n_links, bisection=bis,
                 bisection_fraction=bis / (topo.n_hosts // 2 * line),
                 completion_s=t, ideal_s=per_rank / line,
                 effective_bandwidth=float(mx.effective_bandwidth(per_rank, t, line))
                 if done else 0.0,
                 unfinished_flows=int(np.sum(~np.isfinite(fin))), n_flows=wl.n_flows)
        out["runs"].append(r)
        rows.append(dict(build=kind, workload=wname, switches=topo.n_switches,
                         links=topo.n_links, bisection=f"{r['bisection_fraction']:.2f}",
                         ideal_us=f"{r['ideal_s'] * 1e6:.1f}",
                         completion_us=f"{t * 1e6:.1f}",
                         eff_bw=f"{r['effective_bandwidth']:.3f}",
                         unfinished=r["unfinished_flows"]))
    if any(r["unfinished_flows"] for r in out["runs"]):
        print(f"warning: flows unfinished after {n_steps} steps; raise --horizon",
              file=sys.stderr)
    title = (f"Topologies, fabric={fabric.name} (cc={fabric.cc}), {out['n_hosts']} hosts x "
             f"{args.link_gbps:g} Gb/s, all-to-all {args.a2a_mb:g} MB/rank, ring all-reduce "
             f"{args.ar_mb:g} MB, dt = {args.dt_us:g} us (bisection as a fraction of "
             f"n/2 x NIC rate; eff_bw = ideal / completion)")
    title += f"; one fluid run of {n_steps} steps, wall {wall:.1f} s"
    return cm.finish(out, args, rows, columns=list(rows[0]), title=title, started=started)


if __name__ == "__main__":
    main()
