"""Scaling sweep: collective completion time and effective bandwidth vs GPU count.

Units: bytes, seconds, bytes/s; efficiencies are fractions of line rate.

One representative training step per point (:func:`experiments._common.training_scenario`,
the compare study's workload builder :func:`fabric_jax.compare.build_case`): on a
rail-optimised leaf-spine of ``G`` GPUs (8 per server, 16 servers per scalable unit),
an MoE all-to-all in expert-parallel groups of 4 servers (``--moe-mb`` per GPU) then a
data-parallel ring all-reduce (``--all-reduce-mb`` per GPU; SHARP on ``infiniband``),
both hierarchical: one collective per rail (NVLink inside a server is not simulated).
``G`` doubles from 64 to ``--max-gpus`` (default 8,192; ``--quick``: 256).

Engine of the curve (every point, every preset): :func:`fabric_jax.scaling.scaling_curves`,
the exact event-driven max-min flow simulation (:func:`fabric_jax.simulate_flows`),
flows capped at line rate, with the preset's routing split at ``init`` (ECMP: hashed
paths; adaptive routing and spraying: even split over the candidates) and SHARP for
``infiniband``: ideal congestion control, so presets differ by routing and SHARP only.
How it reaches 8,192 GPUs on a CPU (details in :mod:`fabric_jax.scaling`):

* Where the time went (``--full``, the old engine): one event simulation of all
  ``4 G`` flows costs ``events x flows`` (~``G^2``), plus a recompile every time the
  active-flow table doubled (1,024 GPUs: 4,096 flows, ~2,000 events, 13 s per run
  after 42 s of compiles).
* Exact reductions (default up to ``--exact-max-gpus``, 2,048): each flow's candidate
  paths are collapsed to its distinct links; the rails are link-disjoint, so each of
  the 8 rails is an independent event simulation (same finish times to float
  round-off: ``tests/test_scaling.py`` checks this against the full simulation); all
  rails and presets of one size share one compiled loop; presets with identical
  max-min problems (``spectrum_x`` and ``uec``) are simulated once.
* Stated approximation (above ``--exact-max-gpus``): only ``--sample-rails`` rails
  (default 1 of 8) are simulated and the statistics are taken over their collectives.
  The rails are statistically identical (same structure; hashes and expert loads
  differ), so this estimates the p99 from fewer samples; per-flow results of the
  simulated rails are exact.  ``--sample-rails 0`` or ``--exact-max-gpus`` >= the
  largest point simulates everything.  Caveat: the mixed p99 pools 8 all-reduces with
  ``G / 4`` all-to-alls (1.5 % all-reduces at 2,048 GPUs, 0.8 % at 4,096), so it
  moves from the all-reduce to the all-to-all tail between 2,048 and 4,096 GPUs.  One
  rail keeps that ratio, but at 2,048 GPUs its 65 collectives put the interpolated
  99th percentile between the all-reduce and the top all-to-all (49 us instead of
  97 us for ``infiniband``), so sampling starts at 4,096 GPUs, where sampled and exact
  both land on the all-to-all tail.  The per-kind ``all_reduce_completion_time`` and
  ``all_to_all_p99_completion_time`` are the stable curves.
* ``--full``: no decomposition at all (the reference; slow beyond 1,024 GPUs).

The fluid model (:func:`fabric_jax.compare.run_compare`: each preset's routing,
congestion control and flow control) runs only at the sizes up to
``--fluid-max-gpus`` (default 64; ``--quick``: 0) and is reported beside the curve
(JSON ``fluid``), not mixed into it: one ~10 s compile per preset and size, and one
max-min solve per 4 us step, make it too slow for thousands of GPUs on a 2-core CPU.
``vmap`` is not used: the rails' incidences differ (ECMP hashes), and a vmapped event
loop runs every member to the slowest one's end, which on a CPU costs their sum anyway.

Reported per fabric and point (JSON ``fabrics.<preset>`` lists aligned with ``gpus``):

``p99_collective_completion_time``
    99th percentile over the step's collectives (every rail's all-reduce and every
    expert-parallel group's all-to-all) of their completion time (first start to last
    finish of the collective's flows), s.
``all_reduce_completion_time``
    the slowest rail's all-reduce, s.
``all_to_all_p99_completion_time``
    99th percentile over the expert-parallel all-to-alls alone, s.
``effective_bandwidth``
    sum over collectives of the line-rate time (largest bytes a NIC sends or receives in
    it / line rate) over the sum of their completion times.
``components``, ``components_simulated``, ``wall_s``
    rails found / simulated, and seconds spent on the point.

Usage::

    python experiments/scale_sweep.py --json scale.json --plots figs/   # 64 .. 8192
    python experiments/scale_sweep.py --quick
    python experiments/scale_sweep.py --max-gpus 512 --full             # reference
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

try:  # run as a script (experiments/ is on sys.path) or imported as experiments.<name>
    import _common as cm
except ImportError:  # pragma: no cover
    from experiments import _common as cm

from fabric_jax import compare, scaling  # noqa: E402
from fabric_jax.fabrics import PRESETS  # noqa: E402

METRICS = ("p99_collective_completion_time", "all_reduce_completion_time",
           "all_to_all_p99_completion_time", "effective_bandwidth", "n_collectives",
           "unfinished_flows")


def run_fluid(scn, names) -> dict:
    """Fluid-model statistics of one point (every preset's CC and flow control)."""
    t0 = time.perf_counter()
    _, details = compare.run_compare(scn, progress=False, keep=True)
    out = {}
    for name in names:
        case, res = details[name]["case"], details[name]["result"]
        start, finish = np.asarray(res.start, float), np.asarray(res.finish, float)
        out[name] = scaling.collective_stats(case, start, finish)
        out[name]["unfinished_flows"] = int(np.sum(~np.isfinite(finish[case.job_of == 0])))
    wall = time.perf_counter() - t0
    for name in names:
        out[name]["wall_s"] = wall / len(names)
    return out


def plot(results: dict, out: Path) -> list[str]:
    from fabric_jax.plots import scaling_curve, scaling_figure
    g = results["gpus"]
    fab = results["fabrics"]
    paths = [scaling_curve({n: (g, v["p99_collective_completion_time"]) for n, v in fab.items()},
                           out / "scale_p99_completion.png")]
    paths.append(scaling_curve({n: (g, v["effective_bandwidth"]) for n, v in fab.items()},
                               out / "scale_effective_bandwidth.png",
                               ylabel="effective bandwidth (% line rate)", yscale=100.0))
    paths.append(scaling_figure(results, out / "scale_curves.png",
                                title="training step vs GPU count (max-min engine, ideal CC)"))
    return paths


def main(argv=None) -> dict:
    ap = cm.parser(__doc__)
    ap.add_argument("--max-gpus", type=int, default=None,
                    help="largest GPU count (power of two >= 64; default 8192, --quick 256)")
    ap.add_argument("--min-gpus", type=int, default=64, help="smallest GPU count (default 64)")
    ap.add_argument("--fluid-max-gpus", type=int, default=None,
                    help="also run the fluid model up to this size (default 64; --quick 0)")
    ap.add_argument("--exact-max-gpus", type=int, default=2048,
                    help="simulate every rail up to this size (default 2048)")
    ap.add_argument("--sample-rails", type=int, default=1,
                    help="rails simulated above --exact-max-gpus (default 1; 0 = all)")
    ap.add_argument("--full", action="store_true",
                    help="reference: one simulation of all flows, no decomposition")
    ap.add_argument("--all-reduce-mb", type=float, default=32.0, help="all-reduce per GPU, MB")
    ap.add_argument("--moe-mb", type=float, default=4.0, help="all-to-all per GPU, MB")
    ap.add_argument("--fabrics", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    a = ap.parse_args(argv)
    max_gpus = a.max_gpus if a.max_gpus is not None else (256 if a.quick else 8192)
    fluid_max = a.fluid_max_gpus if a.fluid_max_gpus is not None else (0 if a.quick else 64)
    cm.check_positive(ap, max_gpus=max_gpus, min_gpus=a.min_gpus,
                      all_reduce_mb=a.all_reduce_mb, moe_mb=a.moe_mb)
    if a.min_gpus < 16 or a.min_gpus % 16 or max_gpus < a.min_gpus:
        ap.error("--min-gpus must be a multiple of 16 (>= 16) and <= --max-gpus")
    if a.sample_rails < 0:
        ap.error(f"--sample-rails must be >= 0; got {a.sample_rails}")
    gpus = []
    g = a.min_gpus
    while g <= max_gpus:
        gpus.append(g)
        g *= 2
    t_start = time.perf_counter()
    scns = [cm.training_scenario(g, all_reduce_mb=a.all_reduce_mb, moe_mb=a.moe_mb,
                                 seed=a.seed, presets=a.fabrics)[0] for g in gpus]

    def progress(label):
        print(f"  {label} ({time.perf_counter() - t_start:.0f} s)", flush=True)

    curve = scaling.scaling_curves(scns, a.fabrics, seed=a.seed,
                                   sample_components=a.sample_rails or None,
                                   sample_above_gpus=a.exact_max_gpus, full=a.full,
                                   progress=progress)
    fabrics = curve["fabrics"]
    fluid = {n: {k: [] for k in METRICS + ("wall_s",)} for n in a.fabrics}
    fluid_gpus = [g for g in gpus if g <= fluid_max]
    for g, scn in zip(gpus, scns):
        if g not in fluid_gpus:
            continue
        st = run_fluid(scn, a.fabrics)
        for n in a.fabrics:
            for k in fluid[n]:
                fluid[n][k].append(st[n][k])
        progress(f"{g} GPUs fluid model")
    results = dict(gpus=gpus, engine="maxmin" + ("-full" if a.full else ""),
                   fabrics=fabrics, fluid=dict(gpus=fluid_gpus, fabrics=fluid),
                   inputs=dict(all_reduce_bytes=a.all_reduce_mb * 1e6,
                               moe_bytes=a.moe_mb * 1e6, fluid_max_gpus=fluid_max,
                               exact_max_gpus=a.exact_max_gpus, sample_rails=a.sample_rails,
                               full=a.full, seed=a.seed),
                   wall_s=time.perf_counter() - t_start)
    rows = []
    for i, g in enumerate(gpus):
        any_fab = fabrics[a.fabrics[0]]
        row = dict(gpus=g, rails=f"{any_fab['components_simulated'][i]}/"
                               f"{any_fab['components'][i]}")
        for n in a.fabrics:
            row[f"{n}_p99_us"] = 1e6 * fabrics[n]["p99_collective_completion_time"][i]
            row[f"{n}_ar_us"] = 1e6 * fabrics[n]["all_reduce_completion_time"][i]
            row[f"{n}_eff"] = fabrics[n]["effective_bandwidth"][i]
        rows.append(row)
    for i, g in enumerate(fluid_gpus):
        row = dict(gpus=g, rails="fluid")
        for n in a.fabrics:
            row[f"{n}_p99_us"] = 1e6 * fluid[n]["p99_collective_completion_time"][i]
            row[f"{n}_ar_us"] = 1e6 * fluid[n]["all_reduce_completion_time"][i]
            row[f"{n}_eff"] = fluid[n]["effective_bandwidth"][i]
        rows.append(row)
    out = cm.plots_dir(a)
    if out is not None:
        results["plots"] = plot(results, out)
    print(f"wall time {results['wall_s']:.1f} s")
    return cm.finish(results, a, rows, list(rows[0]),
                     "max-min engine (rails simulated/found) then fluid-model rows: p99 "
                     "collective completion (us), slowest all-reduce (us), effective "
                     "bandwidth (fraction)")


if __name__ == "__main__":
    main()
