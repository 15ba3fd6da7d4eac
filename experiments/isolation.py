"""Performance isolation: a training job beside an incast-heavy neighbour, per fabric.

Units: bytes, seconds, bytes/s; slowdowns are ratios (1 = unaffected).

Scenario (:func:`experiments._common.training_scenario`, the compare study's building
blocks: :func:`fabric_jax.compare.build_case`).  A rail-optimised leaf-spine of
``--gpus`` GPUs (8 per server).  The training job holds half of the servers (placed
round robin over the scalable units, so it shares leaves with the neighbour) and runs
one step's communication: MoE all-to-all (``--moe-mb`` per GPU) then a ring all-reduce
(``--all-reduce-mb`` per GPU; SHARP on ``infiniband``), one per rail.  The neighbour
tenant holds the other half and runs cross-rail incasts: on every rail, ``--fan-in``
servers each send ``--incast-mb`` to one NIC of another server, all at ``t = 0``.
Each preset runs in the fluid model with its routing, congestion control and flow
control (:func:`fabric_jax.compare.simulate_case`), in three **variants** (``--variants``):

``one class``               today's presets: every flow in one traffic class, static
                            per-port buffers
``classes``                 class separation (:data:`fabric_jax.fabrics.TENANT_CLASSES`):
                            the training job alone in class 1, the neighbour in class 0,
                            the preset's arbitration (IB: two VLs in the low VL-arbitration
                            table, equal weights, per-VL credits; Ethernet presets: ETS
                            50/50, per-priority PFC or per-class trimming); each class owns
                            half of a port's static buffer
``classes + shared buffer`` the same with shared switch memory and dynamic thresholds
                            (alpha 1; :class:`fabric_jax.flowcontrol.SharedBuffer`)

and each variant twice: with the neighbour, and alone
(:func:`fabric_jax.compare.alone_arrival`: neighbour flows never arrive; same arrays, so
one compilation serves both runs).  The slowdown of a variant is against its own
"alone" run.

Reported per fabric (JSON ``fabrics.<preset>``: the ``one class`` variant at the top
level, every variant under ``variants.<variant>``):

``training_slowdown``         training communication span (first start to last finish
                              of its flows) with the neighbour / alone
``training_step_slowdown``    the same for the step time (compute + communication)
``training_comm_time``, ``training_comm_time_alone``  the spans, s
``tenant_comm_time``          the neighbour's span, s
``pfc_pause_time``            link-seconds paused (PFC) or credit-starved, with the
                              neighbour
``unfinished_flows``          training flows unfinished within the horizon (0 expected)

Expectation (not asserted here): lossless fabrics with per-flow ECMP (``roce``) suffer
most (PFC pauses spread from the incast port to victim flows); adaptive routing and
telemetry CC (``spectrum_x``) and spraying with trimming (``uec``) isolate better.  Class
separation removes head-of-line blocking by another tenant's pauses or credits and
guarantees the victim its class's share of every shared link, but not of its own NICs
(the incast senders' and receivers' NICs are the neighbour's own).

Usage::

    python experiments/isolation.py --gpus 128 --json iso.json --plots figs/
    python experiments/isolation.py --quick          # 64 GPUs, one class vs classes
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
from fabric_jax import compare  # noqa: E402
from fabric_jax.fabrics import PRESETS, TENANT_CLASSES, get_fabric  # noqa: E402
from fabric_jax.fabrics import VARIANTS as FABRIC_VARIANTS  # noqa: E402
from fabric_jax.study.progress import Progress  # noqa: E402
from fabric_jax.fluid.options import save_schedule  # noqa: E402

#: Fabric overrides of each variant (module docstring).
VARIANTS = {"one class": {},
            "classes": {"class_map": TENANT_CLASSES},
            "classes + shared buffer": {"class_map": TENANT_CLASSES, "shared_buffer_alpha": 1.0}}


def _span(start, finish, idx) -> float:
    if idx.size == 0:
        return float("nan")
    return float(np.max(finish[idx]) - np.min(start[idx]))


def _metrics(case, scn, fab) -> dict:
    """One preset variant with and without the neighbour."""
    arr = case.sim_arrival
    train = np.flatnonzero(case.job_of == 0)
    tenant = np.flatnonzero(case.job_of == 1)
    # snapshots (save_schedule) let the run stop once the fabric is idle for
    # good (stop_when_idle: every flow result is the full run's), as compare's runs do
    _, save = save_schedule(scn.simulation["n_steps"], round_up=False)
    res = compare.simulate_case(case, fab, scn, arr, save_every=save)
    alone = compare.simulate_case(case, fab, scn, compare.alone_arrival(case, 0),
                                  save_every=save)
    fin, fin_alone = np.asarray(res.finish, float), np.asarray(alone.finish, float)
    t_with = _span(arr, fin, train)
    t_alone = _span(arr, fin_alone, train)
    compute = case.compute
    return dict(
        training_slowdown=t_with / t_alone if t_alone > 0 else float("nan"),
        training_step_slowdown=(compute + t_with) / (compute + t_alone),
        training_comm_time=t_with, training_comm_time_alone=t_alone,
        tenant_comm_time=_span(arr, fin, tenant),
        pfc_pause_time=float(np.sum(np.asarray(res.info.paused_time))),
        unfinished_flows=int(np.sum(~np.isfinite(fin[train]))
                             + np.sum(~np.isfinite(fin_alone[train]))))


def run(scn, presets, variants=("one class",)) -> dict:
    """Runs each preset variant with and without the neighbour; per-preset metrics
    (the first variant's at the top level, all under ``variants``)."""
    out, cases = {}, {}
    bar = Progress(len(presets) * len(variants), label="isolation")
    for name in presets:
        per = {}
        for var in variants:
            fab = get_fabric(name, **VARIANTS[var])
            if fab.sharp not in cases:
                cases[fab.sharp] = compare.build_case(scn, fab.sharp)
            per[var] = _metrics(cases[fab.sharp], scn, fab)
            bar.update(f"{name}: {var}")
        out[name] = dict(per[variants[0]], variants=per)
    return out


def plot(fabrics: dict, out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(fabrics)
    variants = list(fabrics[names[0]]["variants"])
    width = 0.8 / len(variants)
    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(names))
    for i, var in enumerate(variants):
        ax.bar(x + (i - (len(variants) - 1) / 2) * width,
               [fabrics[n]["variants"][var]["training_slowdown"] for n in names],
               width, label=var, color=f"C{i}")
    ax.set_xticks(x, names)
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_ylabel("training communication slowdown (x alone)")
    ax.set_title("Training job beside an incast-heavy neighbour")
    ax.legend(title="traffic classes")
    return [save_figure(fig, out / "isolation.png")]


def main(argv=None) -> dict:
    started = time.time()
    ap = cm.parser(__doc__)
    ap.add_argument("--gpus", type=int, default=None,
                    help="cluster size, multiple of 32 (default 128; --quick 64)")
    ap.add_argument("--all-reduce-mb", type=float, default=32.0,
                    help="training all-reduce per GPU, MB")
    ap.add_argument("--moe-mb", type=float, default=4.0, help="training all-to-all per GPU, MB")
    ap.add_argument("--incast-mb", type=float, default=4.0, help="bytes per incast sender, MB")
    ap.add_argument("--fan-in", type=int, default=None,
                    help="incast senders per rail (default: all other tenant servers)")
    ap.add_argument("--fabrics", nargs="+", default=list(PRESETS),
                    choices=list(PRESETS) + list(FABRIC_VARIANTS),
                    help="presets (default all), or named variants such as roce_pfc_only")
    ap.add_argument("--dt-us", type=float, default=0.5,
                    help="fluid step, us (default 0.5: at --quick every slowdown moves by "
                         "<= 3 %% to dt = 0.125 us; at 2 us InfiniBand's one-class case was "
                         "6 %% off; the horizon is kept, so a smaller step means more steps)")
    ap.add_argument("--variants", nargs="+", default=None, choices=list(VARIANTS),
                    help="class / buffer variants to run (default all; --quick: one class "
                         "and classes; module docstring)")
    a = ap.parse_args(argv)
    if a.variants is None:
        a.variants = list(VARIANTS)[:2] if a.quick else list(VARIANTS)
    gpus = a.gpus if a.gpus is not None else (64 if a.quick else 128)
    cm.check_positive(ap, gpus=gpus, all_reduce_mb=a.all_reduce_mb, moe_mb=a.moe_mb,
                      incast_mb=a.incast_mb, fan_in=a.fan_in, dt_us=a.dt_us)
    if gpus % 32:
        ap.error(f"--gpus must be a multiple of 32 (two halves of >= 2 servers); got {gpus}")
    n_servers = gpus // cm.NICS_PER_SERVER
    tenant = n_servers // 2
    fan_in = a.fan_in if a.fan_in is not None else tenant - 1
    scn, _ = cm.training_scenario(gpus, all_reduce_mb=a.all_reduce_mb, moe_mb=a.moe_mb,
                                  tenant_servers=tenant, tenant_fan_in=fan_in,
                                  tenant_incast_mb=a.incast_mb, seed=a.seed,
                                  presets=a.fabrics, dt_us=a.dt_us)
    fabrics = run(scn, a.fabrics, tuple(a.variants))
    results = dict(inputs=dict(gpus=gpus, training_servers=n_servers - tenant,
                               tenant_servers=tenant, fan_in=fan_in,
                               incast_bytes=a.incast_mb * 1e6,
                               all_reduce_bytes=a.all_reduce_mb * 1e6,
                               moe_bytes=a.moe_mb * 1e6, seed=a.seed),
                   fabrics=fabrics,
                   scenario=dict(topology=scn.topology, workload=scn.workload,
                                 simulation=scn.simulation))
    rows = [dict(fabric=n, variant=var, slowdown=v["training_slowdown"],
                 step_slowdown=v["training_step_slowdown"],
                 comm_us=v["training_comm_time"] * 1e6,
                 alone_us=v["training_comm_time_alone"] * 1e6,
                 tenant_us=v["tenant_comm_time"] * 1e6,
                 pause_link_us=v["pfc_pause_time"] * 1e6,
                 unfinished=v["unfinished_flows"])
            for n, f in fabrics.items() for var, v in f["variants"].items()]
    title = (f"{gpus} GPUs: training on {n_servers - tenant} servers, incast tenant on "
             f"{tenant} (fan-in {fan_in} x {a.incast_mb:g} MB per rail)")
    out = cm.plots_dir(a)
    if out is not None:
        results["plots"] = plot(fabrics, out)
    return cm.finish(results, a, rows, list(rows[0]), title, started=started)


if __name__ == "__main__":
    main()
