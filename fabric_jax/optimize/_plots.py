"""Figures of the tuning and localisation studies (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

__all__ = ["trajectory_figure", "ease_figure", "accuracy_figure"]


def _save(fig, path) -> str:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def trajectory_figure(results: dict, path, *, title: str = "") -> str:
    """Best objective so far against simulator evaluations, one line per method.

    Args:
      results: method -> :class:`fabric_jax.optimize.TuneResult` (or its dict).
    """
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, res in results.items():
        traj = res["trajectory"] if isinstance(res, dict) else res.trajectory
        ev = [r["evaluation"] for r in traj]
        best = [r["best"] for r in traj]
        ax.step(ev, best, where="post", label=name)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("simulator evaluations")
    ax.set_ylabel("best objective so far")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(fig, path)


def ease_figure(table: dict, path, *, title: str = "") -> str:
    """Ease-of-tuning bars per preset: default regret, risk p90, worst transfer regret."""
    presets = list(table)
    keys = [("default_regret", "default regret"), ("risk_p90", "risk p90 / optimum"),
            ("transfer_worst", "worst transfer regret")]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(keys)
    x = np.arange(len(presets))
    for i, (k, label) in enumerate(keys):
        vals = []
        for p in presets:
            row = table[p]
            if k == "transfer_worst":
                tr = [v["regret"] for v in row.get("transfer", {}).values()]
                vals.append(max(tr) if tr else np.nan)
            else:
                vals.append(row[k])
        ax.bar(x + (i - 1) * width, vals, width, label=label)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, presets)
    ax.set_ylabel("objective / tuned optimum")
    ax.set_title(title)
    ax.legend()
    return _save(fig, path)


def accuracy_figure(curves: dict, path, *, title: str = "") -> str:
    """Top-1 accuracy against fault severity (1 - capacity factor), one line per routing.

    Args:
      curves: label -> ``{"severity": [...], "top1": [...]}``.
    """
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, c in curves.items():
        ax.plot(c["severity"], c["top1"], marker="o", label=label)
    ax.set_xlabel("degradation (1 - capacity factor)")
    ax.set_ylabel("top-1 accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)
