"""All-reduce sweep: all-reduce completion time (p50, p99) and effective bandwidth vs GPUs.

(Issue 12's sweep, formerly ``experiments/scale_sweep.py``, which now runs ``fabric-jax
scale``, a whole training step at 16 to 32,768 GPUs: ``docs/scale.md``.)

Units: bytes, seconds, bytes/s in arrays and JSON; the table prints microseconds.

Each point: ``G`` GPUs of ``--system`` (default ``hgx_h100``: 8 GPUs, NVLink4, 8 x 400G
NICs) on a rail-optimised fabric of scalable units of ``--servers-per-leaf`` servers
(at least two units, so traffic crosses the spines), checked against
``--switch-radix`` (default 128 ports at 400G); beyond it the fabric grows a third tier
(``--beyond-radix tiers``) or planes (``--beyond-radix planes``)
(:func:`fabric_jax.scale.sweep_topology`).  One all-reduce of ``--all-reduce-mb``
per GPU runs as :mod:`fabric_jax.collectives` builds it (chunked transfer DAG with
NCCL's per-step latencies; algorithm chosen per preset the NCCL way: NVLS + tree, or
NVLS + SHARP on ``infiniband``; ``--algorithms`` / ``--protocol`` override), through
each preset's dynamics in the fluid model (routing, congestion control, flow control,
receiver; :func:`fabric_jax.scale.simulate_plan_fluid`, the compare study's engine),
next to the ideal fabric (every NIC on one non-blocking crossbar, ideal congestion
control: :func:`fabric_jax.scale.simulate_plan_ideal`).  Definitions of the metrics
are in :mod:`fabric_jax.scale`:

``p50_completion_time``, ``p99_completion_time``
    50th / 99th percentile over the ranks of the time each rank holds the result, s.
``completion_time``
    the last rank's (the collective's, as nccl-tests times it), s.
``effective_bandwidth``
    :func:`fabric_jax.metrics.collective_effective_bandwidth`: line-rate time of the
    busiest NIC over the completion time.
``ideal.<preset>``
    the same keys on the ideal fabric, for the plan that preset ran.

Step: ``--dt-us`` 0.25 by default, the step at which every headline figure of
``--quick`` moves by <= 3 % when it is quartered (README, "Scale sweep").  At 1 us the
Spectrum-X rows are off by 5-7 %: HPCC's reaction to the trees' short incasts (the
rate cut while the queue persists, then the recovery) is resolved to first order in
``dt / base RTT``, and the intra-leaf base RTT here is about 2 us.

Cost: the fluid model's cost per step grows with the transfers, about 23 per GPU with
NVLS + tree at 4 chunks, and with ``1 / dt``; ``--quick`` takes about 70 s on 2 cores
(README, "Scale sweep", for the larger runs).

Usage::

    python experiments/allreduce_sweep.py --json scale.json --plots figs/
    python experiments/allreduce_sweep.py --quick
    python experiments/allreduce_sweep.py --min-gpus 256 --max-gpus 256 --switch-radix 32
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments import _common as cm

from fabric_jax import scale  # noqa: E402
from fabric_jax.collectives import PROTOCOLS  # noqa: E402
from fabric_jax.fabrics import PRESETS  # noqa: E402
from fabric_jax.study.progress import Progress  # noqa: E402
from fabric_jax.systems import SYSTEMS  # noqa: E402

#: Default fluid step, microseconds (module docstring, "Step").
DEFAULT_DT_US = 0.25


def plot(results: dict, out: Path) -> str:
    """p50 (solid) and p99 (dashed) completion vs GPUs per preset, ideal in grey;
    effective bandwidth in a second panel."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fabric_jax.plots import save_figure
    g = results["gpus"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    seen = set()
    for i, (name, v) in enumerate(results["fabrics"].items()):
        c = f"C{i}"
        ax.plot(g, [1e6 * t for t in v["p50_completion_time"]], "o-", color=c,
                label=f"{name} p50")
        ax.plot(g, [1e6 * t for t in v["p99_completion_time"]], "s--", color=c, mfc="none",
                label=f"{name} p99")
        bx.plot(g, [100 * e for e in v["effective_bandwidth"]], "o-", color=c, label=name)
        ideal = results["ideal"][name]
        key = tuple(ideal["algorithm"])
        if key not in seen:
            style = dict(ls=(":", "-.", "--")[len(seen) % 3], color=("0.3", "0.6")[len(seen) % 2],
                         lw=2)
            seen.add(key)
            lab = "ideal fabric (" + "/".join(dict.fromkeys(ideal["algorithm"])) + ")"
            ax.plot(g, [1e6 * t for t in ideal["p99_completion_time"]], label=lab, **style)
            bx.plot(g, [100 * e for e in ideal["effective_bandwidth"]], label=lab, **style)
    for a, lab in ((ax, "all-reduce completion (us)"), (bx, "effective bandwidth (% line rate)")):
        a.set_xscale("log", base=2)
        a.set_xlabel("GPUs")
        a.set_ylabel(lab)
        a.legend(fontsize=7)
    mb = results["inputs"]["all_reduce_bytes"] / 1e6
    fig.suptitle(f"{mb:g} MB all-reduce per GPU, fluid model per preset "
                 f"(dt = {results['inputs']['dt_us']:g} us) vs ideal fabric", fontsize=10)
    return save_figure(fig, out / "allreduce_sweep.png")


def main(argv=None) -> dict:
    started = time.time()
    ap = cm.parser(__doc__)
    ap.add_argument("--min-gpus", type=int, default=16, help="smallest GPU count (default 16)")
    ap.add_argument("--max-gpus", type=int, default=None,
                    help="largest GPU count; points double from --min-gpus (default 64, "
                         "--quick 32)")
    ap.add_argument("--all-reduce-mb", type=float, default=32.0,
                    help="all-reduce buffer per GPU, MB (default 32)")
    ap.add_argument("--fabrics", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    ap.add_argument("--system", default="hgx_h100", choices=sorted(SYSTEMS))
    ap.add_argument("--algorithms", nargs="+", default=None,
                    choices=["ring", "tree", "nvls_tree", "hierarchical", "sharp"],
                    help="candidates of the NCCL-like choice (default nvls_tree, sharp)")
    ap.add_argument("--protocol", default=None, choices=sorted(PROTOCOLS),
                    help="force a protocol (default: chosen)")
    ap.add_argument("--chunks", type=int, default=scale.DEFAULT_SWEEP_CHUNKS,
                    help=f"pipeline chunks (default {scale.DEFAULT_SWEEP_CHUNKS})")
    ap.add_argument("--max-paths", type=int, default=scale.DEFAULT_SWEEP_PATHS,
                    help=f"candidate paths per host pair (default "
                         f"{scale.DEFAULT_SWEEP_PATHS})")
    ap.add_argument("--dt-us", type=float, default=DEFAULT_DT_US,
                    help=f"fluid step, us (default {DEFAULT_DT_US:g}; see the module "
                         f"docstring, 'Step')")
    ap.add_argument("--servers-per-leaf", type=int, default=16,
                    help="servers per scalable unit (default 16)")
    ap.add_argument("--switch-radix", type=int, default=128,
                    help="switch ports at the NIC speed (default 128: 128 x 400G)")
    ap.add_argument("--beyond-radix", default="tiers", choices=["tiers", "planes"],
                    help="what grows when a spine runs out of ports (default tiers)")
    a = ap.parse_args(argv)
    max_gpus = a.max_gpus if a.max_gpus is not None else (32 if a.quick else 64)
    cm.check_positive(ap, max_gpus=max_gpus, min_gpus=a.min_gpus,
                      all_reduce_mb=a.all_reduce_mb, chunks=a.chunks, max_paths=a.max_paths,
                      dt_us=a.dt_us, servers_per_leaf=a.servers_per_leaf,
                      switch_radix=a.switch_radix)
    per = SYSTEMS[a.system].gpus_per_server
    if a.min_gpus < 2 * per or a.min_gpus % per or max_gpus < a.min_gpus:
        ap.error(f"--min-gpus must be a multiple of {per} (>= {2 * per}, two servers) and "
                 f"<= --max-gpus")
    gpus, g = [], a.min_gpus
    while g <= max_gpus:
        gpus.append(g)
        g *= 2
    t_start = time.perf_counter()
    progress = Progress(1 + len(a.fabrics), label="allreduce_sweep").update  # ideal + presets

    topos = [scale.sweep_topology(g, system=a.system, servers_per_leaf=a.servers_per_leaf,
                                    switch_radix=a.switch_radix,
                                    beyond_radix=a.beyond_radix) for g in gpus]
    curve = scale.scaling_curves(
        topos, a.fabrics, a.all_reduce_mb * 1e6, dt=a.dt_us * 1e-6,
        algorithms=tuple(a.algorithms) if a.algorithms else None, protocol=a.protocol,
        n_chunks=a.chunks, max_paths=a.max_paths, seed=a.seed, progress=progress)
    results = dict(curve, inputs=dict(
        all_reduce_bytes=a.all_reduce_mb * 1e6, system=a.system, dt_us=a.dt_us,
        chunks=a.chunks, max_paths=a.max_paths, servers_per_leaf=a.servers_per_leaf,
        switch_radix=a.switch_radix, beyond_radix=a.beyond_radix,
        algorithms=a.algorithms, protocol=a.protocol, seed=a.seed),
        wall_s=time.perf_counter() - t_start)
    rows = []
    for i, g in enumerate(gpus):
        for n in a.fabrics:
            v, ideal = curve["fabrics"][n], curve["ideal"][n]
            rows.append(dict(gpus=g, fabric=n, algorithm=f"{v['algorithm'][i]}/"
                                                        f"{v['protocol'][i]}",
                             p50_us=1e6 * v["p50_completion_time"][i],
                             p99_us=1e6 * v["p99_completion_time"][i],
                             ideal_p50_us=1e6 * ideal["p50_completion_time"][i],
                             ideal_p99_us=1e6 * ideal["p99_completion_time"][i],
                             eff_bw=v["effective_bandwidth"][i],
                             ideal_eff_bw=ideal["effective_bandwidth"][i],
                             unfinished=v["unfinished_transfers"][i],
                             wall_s=v["wall_s"][i]))
    results["rows"] = rows
    out = cm.plots_dir(a)
    if out is not None:
        results["plots"] = [plot(results, out)]
    print("topologies: " + "; ".join(f"{g}: {t}" for g, t in zip(gpus, curve["topologies"])))
    print(f"wall time {results['wall_s']:.1f} s")
    return cm.finish(results, a, rows, list(rows[0]),
                     f"all-reduce of {a.all_reduce_mb:g} MB per GPU: p50/p99 over ranks of "
                     f"the completion time (us), fluid model per preset vs ideal fabric; "
                     f"effective bandwidth (fraction of line rate)", started=started)


if __name__ == "__main__":
    main()
