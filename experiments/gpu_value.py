"""GPU-hours and dollars lost to communication, per fabric preset.

Units: bytes, seconds, bytes/s inside; flags carry their unit (``_mb``, ``_ms``); JSON
values are SI except keys ending in ``_hours`` (GPU-hours) and ``_dollars``.

Model of a training run.  Every step computes for ``--compute-ms`` and then runs its
communication: a data-parallel all-reduce of ``--grad-mb`` per GPU and MoE all-to-all
of ``--moe-mb`` per GPU (hierarchical, one ring / all-to-all per rail: NVLink inside a
server is free); ``--overlap`` of the communication is hidden behind compute (default 0,
as in :mod:`fabric_jax.compare`).  The run processes ``--train-tokens`` tokens at
``--tokens-per-step`` per step on ``--gpus`` GPUs priced ``--gpu-price-per-hour``.

Simulation.  The communication time per fabric comes from
:func:`fabric_jax.compare.run_compare` on a rail-optimised leaf-spine of ``--gpus``
GPUs (the training job alone: no tenant or background traffic, unless ``--tenant``),
fluid model with the preset's routing, congestion control and flow control
(:mod:`fabric_jax.fabrics`).  One representative bucket is simulated (``--bucket-mb``
all-reduce, ``--a2a-bucket-mb`` all-to-all; defaults are those of the compare default
scenario) and its completion time is scaled linearly to the step's bytes: valid for
bandwidth-bound collectives (bucket >> bandwidth-delay product); per-message latency
is not scaled.  ``--compare-json PATH`` reuses the results of ``fabric-jax compare
--json PATH`` (made with the same bucket sizes) instead of simulating.

Reported per fabric (JSON ``fabrics.<preset>``):

``comm_time_per_step``           simulated communication per step, s
``ideal_comm_time_per_step``     the same at line rate (perfect fabric), s
``exposed_comm_time_per_step``   ``(1 - overlap) * comm``, s
``step_time``                    ``compute + exposed``, s
``gpu_utilization``              ``compute / step_time``
``gpu_hours_total``              ``gpus * steps * step_time / 3600``
``gpu_hours_lost_to_communication``  ``gpus * steps * exposed / 3600``
``dollars_lost_to_communication``    the same times the price
``dollars_lost_vs_line_rate``    excess over a line-rate fabric, dollars
``dollars_lost_vs_best``         excess over the best preset of the table, dollars
``cost_per_million_tokens``      dollars

Usage::

    python experiments/gpu_value.py --gpus 256 --gpu-price-per-hour 2.5 --json gv.json
    python experiments/gpu_value.py --quick
    fabric-jax compare --json cmp.json && python experiments/gpu_value.py --compare-json cmp.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as cm  # noqa: E402

from fabric_jax.plots import save_figure  # noqa: E402
from fabric_jax.compare import run_compare  # noqa: E402
from fabric_jax.fabrics import PRESETS  # noqa: E402

HOUR = 3600.0


def economics(sim: dict, *, gpus: int, gpu_price_per_hour: float, compute: float,
              tokens_per_step: float, train_tokens: float, grad_mb: float, moe_mb: float,
              bucket_mb: float, a2a_bucket_mb: float, ideal: dict, overlap: float = 0.0) -> dict:
    """Turns simulated collective times into GPU-hours and dollars (host arithmetic).

    Args:
      sim: ``{preset: {"collective_completion_time": s, "all_to_all_completion_time": s}}``
        for the simulated buckets.
      ideal: ``{"all_reduce": s, "all_to_all": s}`` line-rate times of the buckets.
      compute: compute per step, s.  Other arguments as the command-line flags.
    """
    steps = train_tokens / tokens_per_step
    k_ar = grad_mb / bucket_mb if bucket_mb > 0 else 0.0
    k_a2a = moe_mb / a2a_bucket_mb if a2a_bucket_mb > 0 else 0.0
    ideal_comm = k_ar * ideal["all_reduce"] + k_a2a * ideal["all_to_all"]
    out = {}
    for name, m in sim.items():
        t_ar = m.get("collective_completion_time")
        t_a2a = m.get("all_to_all_completion_time")
        t_ar = 0.0 if k_ar == 0 else (float("inf") if t_ar is None else float(t_ar))
        t_a2a = 0.0 if k_a2a == 0 else (float("inf") if t_a2a is None else float(t_a2a))
        comm = k_ar * t_ar + k_a2a * t_a2a
        exposed = (1.0 - overlap) * comm
        step = compute + exposed
        lost_h = gpus * steps * exposed / HOUR
        ideal_exposed = (1.0 - overlap) * ideal_comm
        out[name] = dict(
            comm_time_per_step=comm, ideal_comm_time_per_step=ideal_comm,
            exposed_comm_time_per_step=exposed, step_time=step,
            gpu_utilization=compute / step if step > 0 else float("nan"),
            effective_bandwidth=ideal_comm / comm if comm > 0 else float("nan"),
            steps=steps, gpu_hours_total=gpus * steps * step / HOUR,
            gpu_hours_lost_to_communication=lost_h,
            dollars_lost_to_communication=lost_h * gpu_price_per_hour,
            dollars_lost_vs_line_rate=gpus * steps * (exposed - ideal_exposed) / HOUR
            * gpu_price_per_hour,
            cost_per_million_tokens=gpu_price_per_hour / HOUR * gpus * step
            / tokens_per_step * 1e6,
            unfinished_flows=int(m.get("unfinished_flows", 0) or 0))
    best = min((v["dollars_lost_to_communication"] for v in out.values()), default=0.0)
    for v in out.values():
        v["dollars_lost_vs_best"] = v["dollars_lost_to_communication"] - best
    return out


def plot(fabrics: dict, out: Path) -> list[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(fabrics)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    axes[0].bar(names, [fabrics[n]["gpu_hours_lost_to_communication"] for n in names],
                color=[f"C{i}" for i in range(len(names))])
    axes[0].set_ylabel("GPU-hours lost to communication")
    axes[1].bar(names, [fabrics[n]["dollars_lost_to_communication"] / 1e3 for n in names],
                color=[f"C{i}" for i in range(len(names))])
    axes[1].set_ylabel("k$ lost to communication")
    for ax in axes:
        ax.tick_params(axis="x", rotation=20)
    return [save_figure(fig, out / "gpu_value.png")]


def main(argv=None) -> dict:
    ap = cm.parser(__doc__)
    ap.add_argument("--gpu-price-per-hour", type=float, default=2.5, help="dollars per GPU-hour")
    ap.add_argument("--gpus", type=int, default=None,
                    help="cluster size = training job size (default 256; --quick 64)")
    ap.add_argument("--tokens-per-step", type=float, default=4 * 1024 * 1024,
                    help="global tokens per step (default 4M)")
    ap.add_argument("--compute-ms", type=float, default=200.0, help="compute per step, ms")
    ap.add_argument("--train-tokens", type=float, default=1e12, help="tokens of the run")
    ap.add_argument("--grad-mb", type=float, default=1024.0,
                    help="all-reduce bytes per GPU per step, MB (gradient shard)")
    ap.add_argument("--moe-mb", type=float, default=256.0,
                    help="all-to-all bytes per GPU per step, MB (0: dense model)")
    ap.add_argument("--overlap", type=float, default=0.0,
                    help="fraction of communication hidden behind compute, [0, 1)")
    ap.add_argument("--bucket-mb", type=float, default=32.0,
                    help="simulated all-reduce bucket per GPU, MB")
    ap.add_argument("--a2a-bucket-mb", type=float, default=4.0,
                    help="simulated all-to-all bucket per GPU, MB")
    ap.add_argument("--fabrics", nargs="+", default=list(PRESETS), choices=list(PRESETS),
                    help="presets to compare (default all)")
    ap.add_argument("--tenant", action="store_true",
                    help="add the compare study's incast tenant (1/4 of the servers)")
    ap.add_argument("--compare-json", default=None, metavar="PATH",
                    help="use these `fabric-jax compare --json` results, no simulation")
    a = ap.parse_args(argv)
    gpus = a.gpus if a.gpus is not None else (64 if a.quick else 256)
    cm.check_positive(ap, gpu_price_per_hour=a.gpu_price_per_hour, gpus=gpus,
                      tokens_per_step=a.tokens_per_step, compute_ms=a.compute_ms,
                      train_tokens=a.train_tokens, bucket_mb=a.bucket_mb,
                      a2a_bucket_mb=a.a2a_bucket_mb)
    if a.grad_mb < 0 or a.moe_mb < 0 or a.grad_mb + a.moe_mb <= 0:
        ap.error("--grad-mb and --moe-mb must be >= 0 and not both 0")
    if not 0.0 <= a.overlap < 1.0:
        ap.error(f"--overlap must be in [0, 1); got {a.overlap}")
    if gpus % 16:
        ap.error(f"--gpus must be a multiple of 16 (servers of 8 GPUs, >= 2); got {gpus}")
    tenant = (gpus // 8) // 4 if a.tenant else 0
    scn, ideal = cm.training_scenario(
        gpus, all_reduce_mb=a.bucket_mb, moe_mb=a.a2a_bucket_mb, tenant_servers=tenant,
        compute_us=a.compute_ms * 1e3, seed=a.seed, presets=a.fabrics,
        gpu_price_per_hour=a.gpu_price_per_hour,
        tokens_per_gpu_per_step=a.tokens_per_step / gpus)
    if a.compare_json:
        path = Path(a.compare_json)
        if not path.is_file():
            ap.error(f"--compare-json: no such file {str(path)!r}")
        sim = json.loads(path.read_text())
        if not isinstance(sim, dict) or not all(isinstance(v, dict) for v in sim.values()):
            ap.error("--compare-json must hold {preset: {metric: value}} "
                     "(the output of `fabric-jax compare --json`)")
        source = f"compare results {str(path)!r}"
    else:
        sim = run_compare(scn, progress=not a.quick)
        source = "run_compare (fluid model) on the scenario under 'scenario'"
    fabrics = economics(sim, gpus=gpus, gpu_price_per_hour=a.gpu_price_per_hour,
                        compute=a.compute_ms * 1e-3, tokens_per_step=a.tokens_per_step,
                        train_tokens=a.train_tokens, grad_mb=a.grad_mb, moe_mb=a.moe_mb,
                        bucket_mb=a.bucket_mb, a2a_bucket_mb=a.a2a_bucket_mb, ideal=ideal,
                        overlap=a.overlap)
    inputs = dict(gpus=gpus, gpu_price_per_hour=a.gpu_price_per_hour,
                  tokens_per_step=a.tokens_per_step, compute_time=a.compute_ms * 1e-3,
                  train_tokens=a.train_tokens, grad_bytes=a.grad_mb * 1e6,
                  moe_bytes=a.moe_mb * 1e6, overlap=a.overlap, bucket_bytes=a.bucket_mb * 1e6,
                  a2a_bucket_bytes=a.a2a_bucket_mb * 1e6, tenant_servers=tenant, seed=a.seed)
    results = dict(inputs=inputs, source=source, fabrics=fabrics, simulated=sim,
                   scenario=dict(topology=scn.topology, workload=scn.workload,
                                 simulation=scn.simulation))
    rows = [dict(fabric=n, comm_ms=v["comm_time_per_step"] * 1e3,
                 step_ms=v["step_time"] * 1e3, gpu_util_pct=100 * v["gpu_utilization"],
                 gpu_h_lost=v["gpu_hours_lost_to_communication"],
                 usd_lost=v["dollars_lost_to_communication"],
                 usd_vs_best=v["dollars_lost_vs_best"],
                 usd_per_Mtok=v["cost_per_million_tokens"]) for n, v in fabrics.items()]
    bad = [n for n, v in fabrics.items() if v["unfinished_flows"]]
    if bad:
        print(f"warning: unfinished flows in {bad}: their times are lower bounds or inf")
    steps = a.train_tokens / a.tokens_per_step
    title = (f"{gpus} GPUs at ${a.gpu_price_per_hour}/GPU-h, {steps:,.0f} steps of "
             f"{a.compute_ms:g} ms compute; line-rate comm "
             f"{fabrics[next(iter(fabrics))]['ideal_comm_time_per_step'] * 1e3:.3g} ms/step"
             if fabrics else "no fabrics")
    out = cm.plots_dir(a)
    if out is not None and fabrics:
        results["plots"] = plot(fabrics, out)
    return cm.finish(results, a, rows, list(rows[0]) if rows else [], title)


if __name__ == "__main__":
    main()
