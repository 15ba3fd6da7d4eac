"""Output of the compare study: the metrics table and the JSON file.

Units: results are SI (bytes, seconds, bytes/s, fractions); the table converts (us,
ms, Gb/s, %) and says so in each row.  JSON keys of a result (one entry per preset, and
``"ideal"`` for the ideal-fabric baseline of :func:`fabric_jax.study.run.simulate_ideal`):

=============================  =====================================================
``effective_bandwidth``        the training step's two collectives (all-to-all, then
                               all-reduce, each over every rail): ideal time on a
                               non-blocking fabric at NIC line rate over actual
                               completion time, pooled
                               (:func:`fabric_jax.metrics.collective_effective_bandwidth`);
                               fraction
``collective_completion_time`` all-reduce completion time (first start to last
                               finish), s
``all_to_all_completion_time`` MoE all-to-all completion time, s
``bus_bandwidth``              all-reduce bus bandwidth (nccl-tests), bytes/s per NIC
``fct_slowdown_p50/_p99``      FCT / ideal FCT of tenant + background flows
``isolation``                  worst job's completion time with neighbours / alone
``pfc_pause_time``             link-seconds paused (PFC) or credit-starved, summed
``gpu_utilization``            compute / step time of the training job, fraction
``training_step_time``         s
``cost_per_million_tokens``    dollars
``unfinished_flows``           flows not done within ``n_steps`` (0 expected)
``paths_dropped``              equal-cost paths left out by a ``max_paths`` cap
=============================  =====================================================
"""

from __future__ import annotations

import json
import math
from pathlib import Path

__all__ = ["METRICS", "format_table", "write_json"]

# (key, label, unit, scale) rows of the table
METRICS = (
    ("effective_bandwidth", "Effective bandwidth", "% line rate", 100.0),
    ("collective_completion_time", "All-reduce completion", "us", 1e6),
    ("all_to_all_completion_time", "All-to-all completion", "us", 1e6),
    ("bus_bandwidth", "All-reduce bus bandwidth", "Gb/s", 8e-9),
    ("fct_slowdown_p50", "FCT slowdown p50", "x", 1.0),
    ("fct_slowdown_p99", "FCT slowdown p99", "x", 1.0),
    ("isolation", "Worst-job isolation", "x alone", 1.0),
    ("pfc_pause_time", "PFC pause / credit stall", "link-us", 1e6),
    ("gpu_utilization", "GPU utilisation", "%", 100.0),
    ("training_step_time", "Training step time", "ms", 1e3),
    ("cost_per_million_tokens", "Cost per million tokens", "$", 1.0),
)


def _fmt(v, scale):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    x = v * scale
    return f"{x:,.0f}" if abs(x) >= 1000 else (f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}")


def format_table(results: dict) -> str:
    """The metrics table: rows = metrics (with units), columns = presets (and ``ideal``,
    the ideal-fabric baseline, when present).  A footer line says how many equal-cost
    paths a ``max_paths`` cap dropped, when it dropped any."""
    names = list(results)
    rows = [(f"{label} ({unit})", [_fmt(results[n].get(key), scale) for n in names])
            for key, label, unit, scale in METRICS]
    unfinished = [results[n].get("unfinished_flows", 0) for n in names]
    if any(unfinished):
        rows.append(("Unfinished flows (count)", [str(u) for u in unfinished]))
    w0 = max(len(r[0]) for r in rows)
    wc = [max(len(n), *(len(r[1][i]) for r in rows)) for i, n in enumerate(names)]
    lines = [" " * w0 + "  " + "  ".join(n.rjust(wc[i]) for i, n in enumerate(names))]
    lines.append("-" * len(lines[0]))
    for label, vals in rows:
        lines.append(label.ljust(w0) + "  " + "  ".join(v.rjust(wc[i]) for i, v in enumerate(vals)))
    dropped = max((int(results[n].get("paths_dropped", 0) or 0) for n in names), default=0)
    if dropped:
        lines.append(f"note: the max_paths cap dropped {dropped} equal-cost paths (summed over "
                     f"flows); set simulation.max_paths = 0 to keep them all")
    return "\n".join(lines)


def write_json(results: dict, path) -> None:
    """Writes ``{preset: {metric: value}, "ideal": {...}}`` (non-finite values as null)."""
    def clean(v):
        return None if isinstance(v, float) and not math.isfinite(v) else v
    out = {n: {k: clean(v) for k, v in m.items()} for n, m in results.items()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
