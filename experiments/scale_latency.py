"""Per-message latency of a training step at scale: rings against NCCL's choice (PAT).

Units: seconds (printed in ms / us).

``fabric-jax scale`` adds to each step the latency of its collective calls
(:func:`fabric_jax.scale.collective_overhead`: NCCL's own cost model, the calls of the
default model and plan, one reduce-scatter and all-gather per Megatron gradient bucket).
That term does not change the fluid runs, so this script computes it on the host for
every size, every preset (its zero-load path latency per phase: the flows of rail 0
routed as the preset routes them, :func:`fabric_jax.scale.zero_load_latency`) and the
ideal fabric (no path latency), under ``--latency ring`` (rings only: NCCL before 2.23)
and ``nccl`` (ring or PAT per call, as NCCL >= 2.23 picks), next to the compute time:
what the data-parallel rings' ``p - 1`` steps cost as the cluster grows, and what PAT
gives back.  It runs in seconds (no simulation).

Usage::

    python experiments/scale_latency.py --gpus 16,128,1024,8192,16384,32768
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments._bench import write_json

from fabric_jax import scale as sc
from fabric_jax.fabrics import PRESETS


def main(argv=None) -> int:
    started = time.time()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="16,128,1024,8192,16384,32768",
                    help="comma-separated GPU counts (default 16 to 32,768)")
    ap.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    ap.add_argument("--plots", metavar="DIR",
                    help="write scale_latency.png (latency per step against GPUs, rings "
                         "and NCCL's choice, per preset and the ideal fabric)")
    args = ap.parse_args(argv)
    try:
        gpus = [int(x) for x in args.gpus.split(",") if x.strip()]
        if not gpus or min(gpus) < 16:
            raise ValueError
    except ValueError:
        print(f"scale_latency: error: --gpus must be GPU counts >= 16; got {args.gpus!r}",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rows = []
    for n in gpus:
        # the flows as rings (their calls carry no algorithm): each mode prices them
        topo, st, nic = sc.build_point(n, latency="ring",
                                       step_options={"dp_algorithm": "ring"})
        rail0 = st.subset(st.rail == 0)
        paths = {"ideal": {}}
        for name in PRESETS:
            flows, ps = sc.route_flows(rail0, topo, name,
                                       flow_ids=np.flatnonzero(st.rail == 0))
            paths[name] = sc.phase_latency(flows, sc.zero_load_latency(ps, topo, name))
        for name, lat in paths.items():
            row = dict(gpus=n, fabric=name, compute_time=st.compute_time,
                       dp=st.info["dp"], path_latency=lat)
            for mode in ("ring", "nccl"):
                res = sc.collective_overhead(dict(st.info, latency=mode), nic, lat)
                row[mode] = res["total"]
                row[f"{mode}_calls"] = res["calls"]
            rows.append(row)
    print(f"{'GPUs':>6} {'dp':>5} {'fabric':<11} {'path us':>7} {'ring ms':>8} "
          f"{'nccl ms':>8} {'ring/C %':>8} {'nccl/C %':>8}  dense DP call (ring -> nccl)")
    for r in rows:
        lat = r["path_latency"].get(2, 0.0)
        c = r["ring_calls"].get("dp_all_gather")
        d = r["nccl_calls"].get("dp_all_gather")
        call = (f"{c['per_call'] * 1e6:.0f} us ring -> {d['per_call'] * 1e6:.0f} us "
                f"{d['algorithm']}, x{2 * d['count']}" if c else "-")
        print(f"{r['gpus']:>6} {r['dp']:>5} {r['fabric']:<11} {lat * 1e6:>7.2f} "
              f"{r['ring'] * 1e3:>8.2f} {r['nccl'] * 1e3:>8.2f} "
              f"{100 * r['ring'] / r['compute_time']:>8.2f} "
              f"{100 * r['nccl'] / r['compute_time']:>8.2f}  {call}")
    if args.plots:
        print(f"wrote {plot(rows, args.plots)}")
    wall = time.perf_counter() - t0
    print(f"wall {wall:.1f} s", file=sys.stderr)
    write_json(args.json, dict(rows=rows, wall_s=wall), started=started,
               inputs=vars(args))
    return 0


def plot(rows, out) -> str:
    """``scale_latency.png``: per-message latency per step (ms, and as a share of the
    compute time) against GPUs (log x), rings only (dashed) and NCCL's choice (solid)."""
    from pathlib import Path

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fabric_jax.plots import save_figure
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(r["fabric"] for r in rows))
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    presets = [n for n in names if n != "ideal"]   # colours as in fabric-jax scale's
    for name in names:
        rs = [r for r in rows if r["fabric"] == name]
        g = [r["gpus"] for r in rs]
        color = "0.3" if name == "ideal" else f"C{presets.index(name)}"
        ax.plot(g, [1e3 * r["ring"] for r in rs], ls="--", color=color, marker="o", ms=3)
        ax.plot(g, [1e3 * r["nccl"] for r in rs], ls="-", color=color, marker="o", ms=3,
                label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("per-message latency per step (ms)")
    ax.set_title("rings only (dashed) and NCCL's choice, ring or PAT (solid);\n"
                 "roce and uec share switch latencies, so their lines coincide", fontsize=9)
    ax.legend(fontsize=8)
    return str(save_figure(fig, out / "scale_latency.png"))


if __name__ == "__main__":
    sys.exit(main())
