"""Scaling sweep: collective completion time and effective bandwidth vs GPU count.

Units: bytes, seconds, bytes/s; efficiencies are fractions of line rate.

One representative training step per point (:func:`experiments._common.training_scenario`,
the compare study's workload builder :func:`fabric_jax.compare.build_case`): on a
rail-optimised leaf-spine of ``G`` GPUs (8 per server, 16 servers per scalable unit),
an MoE all-to-all in expert-parallel groups of 4 servers (``--moe-mb`` per GPU) then a
data-parallel ring all-reduce (``--all-reduce-mb`` per GPU; SHARP on ``infiniband``),
both hierarchical: one collective per rail (NVLink inside a server is not simulated).
``G`` doubles from 64 to ``--max-gpus`` (default 8,192; ``--quick``: 256).

Engines (the ``engine`` field of every point says which ran):

* ``fluid`` (``G <= --fluid-max-gpus``, default 256): :func:`fabric_jax.compare.run_compare`
  -- the preset's routing policy, congestion control and flow control in the fluid loop.
* ``maxmin`` (larger points, and every point with ``--quick``): the exact event-driven
  max-min flow-level simulation (:func:`fabric_jax.simulate_flows`), flows capped at
  line rate, with the preset's routing split at ``init`` (ECMP: hashed paths; adaptive
  routing and spraying: even split over the candidates) and SHARP for ``infiniband``.
  This is ideal congestion control: the presets differ only by routing and SHARP.  The
  fluid model (one max-min solve per 4 us step, 10^4-10^5 flows) is too slow on a
  2-core CPU at thousands of GPUs; on a GPU raise ``--fluid-max-gpus``.

Reported per fabric and point (JSON ``fabrics.<preset>`` lists aligned with ``gpus``):

``p99_collective_completion_time``
    99th percentile over the step's collectives (every rail's all-reduce and every
    expert-parallel group's all-to-all) of their completion time (first start to last
    finish of the collective's flows), s.
``all_reduce_completion_time``
    the slowest rail's all-reduce, s.
``effective_bandwidth``
    sum over collectives of the line-rate time (largest bytes a NIC sends or receives in
    it / line rate) over the sum of their completion times.

Usage::

    python experiments/scale_sweep.py --json scale.json --plots figs/   # 64 .. 8192
    python experiments/scale_sweep.py --quick
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as cm  # noqa: E402

from fabric_jax import compare  # noqa: E402
from fabric_jax.fabrics import PRESETS, get_fabric  # noqa: E402
from fabric_jax.incidence import Incidence  # noqa: E402
from fabric_jax.routing import make_routing  # noqa: E402
from fabric_jax.sim import simulate_flows  # noqa: E402


def collective_stats(case, start, finish) -> dict:
    """p99 / all-reduce completion and effective bandwidth of a case's collectives."""
    w = case.workload
    times, ideals, ar = [], [], []
    n_hosts = case.topology.n_hosts
    for name, idx in case.groups.items():
        idx = idx[case.job_of[idx] == 0]
        if idx.size == 0:
            continue
        t = float(np.max(finish[idx]) - np.min(start[idx]))
        sent = np.bincount(w.src[idx], weights=w.size[idx], minlength=n_hosts)
        recv = np.bincount(w.dst[idx], weights=w.size[idx], minlength=n_hosts)
        times.append(t)
        ideals.append(max(sent.max(), recv.max()) / case.line_rate)
        if "allreduce" in name.rsplit("/", 1)[-1]:
            ar.append(t)
    times = np.asarray(times)
    return dict(p99_collective_completion_time=float(np.percentile(times, 99)),
                all_reduce_completion_time=float(max(ar)) if ar else float("nan"),
                effective_bandwidth=float(np.sum(ideals) / np.sum(times)),
                n_collectives=int(times.size))


def run_maxmin(scn, fabric, cases: dict) -> tuple[dict, float]:
    """Max-min (ideal CC) event-driven run of one preset; (stats, wall seconds)."""
    if fabric.sharp not in cases:
        cases[fabric.sharp] = compare.build_case(scn, fabric.sharp)
    case = cases[fabric.sharp]
    w = case.workload
    routing = make_routing(fabric.routing, case.paths, fabric.routing_params(),
                           seed=scn.simulation["seed"])
    inc = Incidence.from_paths(case.paths, np.asarray(routing.split),
                               n_links=case.topology.n_links)
    t0 = time.perf_counter()
    res = simulate_flows(inc, case.topology.capacity, case.sim_arrival, w.size, deps=w.deps,
                         delay=w.delay, latency=case.latency,
                         demand=np.full(w.n_flows, case.line_rate))
    start, finish = np.asarray(res.start, float), np.asarray(res.finish, float)
    wall = time.perf_counter() - t0
    stats = collective_stats(case, start, finish)
    stats["unfinished_flows"] = int(np.sum(~np.isfinite(finish)))
    return stats, wall


def run_fluid(scn, names) -> tuple[dict, float]:
    t0 = time.perf_counter()
    _, details = compare.run_compare(scn, progress=False, keep=True)
    out = {}
    for name in names:
        case, res = details[name]["case"], details[name]["result"]
        start, finish = np.asarray(res.start, float), np.asarray(res.finish, float)
        out[name] = collective_stats(case, start, finish)
        out[name]["unfinished_flows"] = int(np.sum(~np.isfinite(finish[case.job_of == 0])))
    return out, time.perf_counter() - t0


def plot(results: dict, out: Path) -> list[str]:
    from fabric_jax.plots import scaling_curve
    g = results["gpus"]
    fab = results["fabrics"]
    paths = [scaling_curve({n: (g, v["p99_collective_completion_time"]) for n, v in fab.items()},
                           out / "scale_p99_completion.png")]
    paths.append(scaling_curve({n: (g, v["effective_bandwidth"]) for n, v in fab.items()},
                               out / "scale_effective_bandwidth.png",
                               ylabel="effective bandwidth (% line rate)", yscale=100.0))
    return paths


def main(argv=None) -> dict:
    ap = cm.parser(__doc__)
    ap.add_argument("--max-gpus", type=int, default=None,
                    help="largest GPU count (power of two >= 64; default 8192, --quick 256)")
    ap.add_argument("--min-gpus", type=int, default=64, help="smallest GPU count (default 64)")
    ap.add_argument("--fluid-max-gpus", type=int, default=None,
                    help="use the fluid model up to this size (default 256; --quick 0)")
    ap.add_argument("--all-reduce-mb", type=float, default=32.0, help="all-reduce per GPU, MB")
    ap.add_argument("--moe-mb", type=float, default=4.0, help="all-to-all per GPU, MB")
    ap.add_argument("--fabrics", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    a = ap.parse_args(argv)
    max_gpus = a.max_gpus if a.max_gpus is not None else (256 if a.quick else 8192)
    fluid_max = a.fluid_max_gpus if a.fluid_max_gpus is not None else (0 if a.quick else 256)
    cm.check_positive(ap, max_gpus=max_gpus, min_gpus=a.min_gpus,
                      all_reduce_mb=a.all_reduce_mb, moe_mb=a.moe_mb)
    if a.min_gpus < 16 or a.min_gpus % 16 or max_gpus < a.min_gpus:
        ap.error("--min-gpus must be a multiple of 16 (>= 16) and <= --max-gpus")
    gpus = []
    g = a.min_gpus
    while g <= max_gpus:
        gpus.append(g)
        g *= 2
    fabrics = {n: {k: [] for k in ("p99_collective_completion_time",
                                   "all_reduce_completion_time", "effective_bandwidth",
                                   "n_collectives", "unfinished_flows", "wall_s")}
               for n in a.fabrics}
    engines = []
    for g in gpus:
        scn, _ = cm.training_scenario(g, all_reduce_mb=a.all_reduce_mb, moe_mb=a.moe_mb,
                                      seed=a.seed, presets=a.fabrics)
        if g <= fluid_max:
            engines.append("fluid")
            stats, wall = run_fluid(scn, a.fabrics)
            walls = {n: wall / len(a.fabrics) for n in a.fabrics}
        else:
            engines.append("maxmin")
            stats, walls, cases = {}, {}, {}
            for n in a.fabrics:
                stats[n], walls[n] = run_maxmin(scn, get_fabric(n), cases)
        for n in a.fabrics:
            for k in fabrics[n]:
                fabrics[n][k].append(walls[n] if k == "wall_s" else stats[n][k])
        print(f"  {g:>5} GPUs ({engines[-1]}): " + ", ".join(
            f"{n} {1e6 * stats[n]['p99_collective_completion_time']:.0f} us"
            for n in a.fabrics), flush=True)
    results = dict(gpus=gpus, engine=engines, fabrics=fabrics,
                   inputs=dict(all_reduce_bytes=a.all_reduce_mb * 1e6,
                               moe_bytes=a.moe_mb * 1e6, fluid_max_gpus=fluid_max,
                               seed=a.seed))
    rows = []
    for i, g in enumerate(gpus):
        row = dict(gpus=g, engine=engines[i])
        for n in a.fabrics:
            row[f"{n}_p99_us"] = 1e6 * fabrics[n]["p99_collective_completion_time"][i]
            row[f"{n}_eff"] = fabrics[n]["effective_bandwidth"][i]
        rows.append(row)
    out = cm.plots_dir(a)
    if out is not None:
        results["plots"] = plot(results, out)
    return cm.finish(results, a, rows, list(rows[0]),
                     "p99 collective completion (us) and effective bandwidth (fraction)")


if __name__ == "__main__":
    main()
