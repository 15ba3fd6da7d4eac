"""Convergence in dt of the scale table: two ``fabric-jax scale --json`` runs side by side.

Units: the metrics' own (relative changes are fractions, printed in %).

The scale study's figures are a time-stepped fluid model's (``docs/scale.md``,
"Convergence in dt"): a number belongs to the fabric only if it does not move when
``dt`` is halved.  This script reads the JSON of a run at ``dt`` and one at ``dt/2``
(same inputs otherwise; rows are matched by GPU count, jobs and fabric, the ideal
fabric included when both have it) and prints, per metric, the largest relative change
``|m(dt/2) / m(dt) - 1|`` over the rows both runs have, and where it is.  A metric
that is 0 in both runs is unchanged; rows where it is 0 in one run only are named.

Usage::

    fabric-jax scale --gpus 16384 --json a.json
    fabric-jax scale --gpus 16384 --dt-us 0.25 --no-ideal --json b.json
    python experiments/scale_dt.py a.json b.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: The metrics compared (``point_metrics`` keys), headline ones first.
METRICS = ("step_time", "gpu_utilization", "p50_completion", "p99_completion",
           "p99_over_p50", "effective_bandwidth", "congested_share", "pfc_pause_time",
           "background_p50_slowdown", "background_p99_slowdown")
#: Metrics only runs with background traffic have (not printed when no row has them).
OPTIONAL = ("background_p50_slowdown", "background_p99_slowdown")


def rows(results: dict) -> dict:
    """``{(gpus, jobs, fabric): metrics}`` of a scale JSON (the ideal fabric as
    ``"ideal"``)."""
    out = {}
    for pt in results["points"]:
        key = (int(pt["gpus"]), int(pt.get("jobs", 1)))
        for name, m in pt["fabrics"].items():
            out[key + (name,)] = m
        if "ideal" in pt:
            out[key + ("ideal",)] = pt["ideal"]
    return out


def largest_changes(a: dict, b: dict) -> dict:
    """``{metric: (relative change, row key, rows zero in one run only)}``: the largest
    ``|b / a - 1|`` per metric over the rows of both (``a``, ``b`` from :func:`rows`;
    rows where both are 0 are unchanged and skipped)."""
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError("the two runs have no row in common (GPU counts, jobs, fabrics)")
    out = {}
    for m in METRICS:
        best, where, one_zero = 0.0, None, []
        for k in common:
            x, y = a[k].get(m), b[k].get(m)
            if x is None or y is None or (x == 0 and y == 0):
                continue
            if x == 0 or y == 0:
                one_zero.append(k)
                continue
            r = abs(y / x - 1.0)
            if where is None or r > best:
                best, where = r, k
        out[m] = (best, where, one_zero)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("coarse", help="JSON of the run at dt")
    ap.add_argument("fine", help="JSON of the run at dt / 2")
    args = ap.parse_args(argv)
    try:
        with open(args.coarse) as fh:
            ra = json.load(fh)
        with open(args.fine) as fh:
            rb = json.load(fh)
        ch = largest_changes(rows(ra), rows(rb))
    except (OSError, ValueError, KeyError) as err:
        print(f"scale_dt: error: {err}", file=sys.stderr)
        return 2
    da, db = ra["inputs"].get("dt_us"), rb["inputs"].get("dt_us")
    print(f"largest relative change, dt = {da} us -> {db} us, over the rows both have:")
    name = lambda k: f"{k[0]} GPUs{'' if k[1] == 1 else f', {k[1]} jobs'}, {k[2]}"  # noqa
    for m, (r, k, zero) in ch.items():
        if m in OPTIONAL and k is None and not zero:
            continue
        print(f"  {m:<24} {100 * r:>7.2f} %  ({'-' if k is None else name(k)})"
              + (f"; 0 in one run only: {', '.join(name(z) for z in zero)}" if zero else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
