"""Shared benchmark harness: compile vs steady-state timing, device info, results files.

Every benchmark times the first call (trace + compile + run) separately from the
steady state (median of ``repeats`` calls), calls ``block_until_ready`` on the outputs,
and compares against a baseline timed in the same run, so ratios are meaningful on
noisy machines (brax ``test_utils.benchmark`` style).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path

import jax

from fabric_jax.results import write_results

ROOT = Path(__file__).resolve().parents[1]


def block(x):
    return jax.tree_util.tree_map(
        lambda a: a.block_until_ready() if hasattr(a, "block_until_ready") else a, x)


def time_jax(fn, *args, repeats: int = 5, **kwargs):
    """Returns ``(first_call_s, steady_median_s, output)``."""
    t0 = time.perf_counter()
    out = block(fn(*args, **kwargs))
    first = time.perf_counter() - t0
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = block(fn(*args, **kwargs))
        runs.append(time.perf_counter() - t0)
    return first, statistics.median(runs), out


def time_host(fn, *args, repeats: int = 1, **kwargs):
    """Median wall time of a host (NumPy) function; returns ``(seconds, output)``."""
    runs = []
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), out


def device_info() -> dict:
    dev = jax.devices()[0]
    return {"platform": dev.platform, "device": str(getattr(dev, "device_kind", dev)),
            "n_devices": jax.device_count(), "cpu_count": os.cpu_count(),
            "machine": platform.machine(), "jax": jax.__version__,
            "x64": bool(jax.config.jax_enable_x64)}


def write_json(path, results: dict, *, started: float | None = None, inputs=None):
    """Writes ``results`` to ``path`` with :func:`fabric_jax.results.write_results` (its
    ``run`` record takes ``started``, a ``time.time()``, and ``inputs``) and says so;
    nothing without a path (no ``--json``)."""
    if path:
        write_results(path, results, started=started, inputs=inputs)
        print(f"wrote {path}")


def table(rows, columns) -> str:
    """Plain-text table of dict rows."""
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)
    widths = [max(len(c), *(len(fmt(r.get(c, ""))) for r in rows)) for c in columns]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    for r in rows:
        lines.append("  ".join(fmt(r.get(c, "")).rjust(w) for c, w in zip(columns, widths)))
    return "\n".join(lines)
