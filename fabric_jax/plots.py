"""Matplotlib (Agg) figures for the compare study: per-fabric bars, FCT CDFs, queue heat
maps, and the scaling curve (:func:`scaling_figure`, data from
:func:`fabric_jax.compare.scaling_study`).

Units on axes as labelled (us, Gb/s, %); inputs are SI as returned by
:func:`fabric_jax.compare.run_compare`.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["fabric_bars", "fct_cdfs", "queue_heatmaps", "scaling_curve", "scaling_figure",
           "compare_figures", "save_figure"]


def save_figure(fig, path, *, tight: bool = True) -> str:
    """Writes ``fig`` to ``path`` (PNG, 90 dpi), closes it and returns the path."""
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return str(path)


def fabric_bars(results: dict, path) -> str:
    """One bar panel per metric of :data:`fabric_jax.compare.METRICS`."""
    from .study.report import METRICS
    names = list(results)
    fig, axes = plt.subplots(3, 4, figsize=(16, 10))
    for ax, (key, label, unit, scale) in zip(axes.ravel(), METRICS):
        vals = [results[n].get(key) for n in names]
        vals = [v * scale if v is not None and np.isfinite(v) else 0.0 for v in vals]
        ax.bar(names, vals, color=["C0", "C1", "C2", "C3"][:len(names)])
        ax.set_title(f"{label} ({unit})", fontsize=9)
        ax.tick_params(axis="x", labelsize=8, rotation=20)
    for ax in axes.ravel()[len(METRICS):]:
        ax.axis("off")
    return save_figure(fig, path)


def fct_cdfs(slowdowns: dict, path) -> str:
    """CDF of FCT slowdown per fabric (``{name: [flows] slowdown}``)."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, sd in slowdowns.items():
        x = np.sort(np.asarray(sd, float)[np.isfinite(sd)])
        if x.size:
            ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("FCT slowdown (x)")
    ax.set_ylabel("CDF")
    ax.legend()
    return save_figure(fig, path)


def queue_heatmaps(trajs: dict, path) -> str:
    """Link queue (bytes, log colour) over time per fabric (``{name: FluidTrajectory}``)."""
    names = list(trajs)
    fig, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names):
        tr = trajs[name]
        q = np.asarray(tr.queue, float).T
        t = np.asarray(tr.t, float) * 1e6
        im = ax.imshow(np.log10(1.0 + q), aspect="auto", origin="lower",
                       extent=[t[0], t[-1], 0, q.shape[0]], cmap="magma")
        ax.set_title(name)
        ax.set_xlabel("time (us)")
        ax.set_ylabel("link")
    fig.colorbar(im, ax=axes[0].tolist(), label="log10(1 + queue bytes)")
    return save_figure(fig, path, tight=False)


def _curve(ax, scale: dict, ylabel: str, yscale: float):
    # distinct markers and dashes so that coinciding curves stay visible
    for i, (name, (x, y)) in enumerate(scale.items()):
        ax.plot(x, np.asarray(y, float) * yscale, marker="osD^v"[i % 5],
                ls=("-", "--", "-.", ":")[i % 4], ms=7 - i, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)


def scaling_curve(scale: dict, path, *, ylabel="p99 collective completion (us)", yscale=1e6) -> str:
    """``{fabric: (gpu_counts, values)}`` lines on log-x axes."""
    fig, ax = plt.subplots(figsize=(6, 4))
    _curve(ax, scale, ylabel, yscale)
    return save_figure(fig, path)


#: (metric of :func:`fabric_jax.scale.scaling_curves`, axis label, scale) panels
SCALING_PANELS = (("all_reduce_completion_time", "all-reduce completion (us)", 1e6),
                  ("p99_collective_completion_time", "p99 collective completion (us)", 1e6),
                  ("effective_bandwidth", "effective bandwidth (% line rate)", 100.0))


def scaling_figure(curve: dict, path, *, title: str | None = None) -> str:
    """Scaling curve: one panel per :data:`SCALING_PANELS` metric versus GPU count.

    Args:
      curve: ``{"gpus": [...], "fabrics": {preset: {metric: [...]}}}`` as returned by
        :func:`fabric_jax.scale.scaling_curves`.
    """
    g = curve["gpus"]
    fig, axes = plt.subplots(1, len(SCALING_PANELS), figsize=(5 * len(SCALING_PANELS), 4))
    for ax, (key, label, scale) in zip(axes, SCALING_PANELS):
        _curve(ax, {n: (g, v[key]) for n, v in curve["fabrics"].items()}, label, scale)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def compare_figures(results: dict, details: dict, outdir, *,
                    scaling: dict | None = None) -> list[str]:
    """All compare figures into ``outdir`` (created); returns the file paths.

    ``scaling`` (from :func:`fabric_jax.compare.scaling_study`) adds ``scaling_curve.png``.
    """
    from . import metrics as mx
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [fabric_bars(results, out / "fabric_bars.png")]
    sds, trajs = {}, {}
    for name, d in details.items():
        case, res = d["case"], d["result"]
        other = np.flatnonzero(case.job_of != 0)
        fin = np.asarray(res.finish, float)
        sds[name] = np.asarray(mx.slowdown(fin[other] - case.sim_arrival[other],
                                           case.workload.size[other], case.line_rate,
                                           case.latency[other]), float)
        if res.trajectory is not None:
            trajs[name] = res.trajectory
    paths.append(fct_cdfs(sds, out / "fct_cdf.png"))
    if trajs:
        paths.append(queue_heatmaps(trajs, out / "queue_heatmap.png"))
    if scaling is not None:
        paths.append(scaling_figure(scaling, out / "scaling_curve.png",
                                    title="all-reduce vs GPU count (collectives, fluid model per preset)"))
    return paths
