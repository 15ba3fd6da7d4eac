"""Benchmark of the scale study's host side and memory (issue 25): build times at 1,024 to
98,304 GPUs, fluid memory per flow, and the devices a 100k-GPU run needs.

Units: seconds, bytes.

1. **Host side** (per GPU count): the fabric (:func:`fabric_jax.scale.scale_topology`),
   the step's flows (:func:`fabric_jax.scale.step_flows`), rail 0's sub-fabric
   (:func:`fabric_jax.scale.rail_view`), rail 0's candidate paths (capped,
   :func:`fabric_jax.scale.route_flows` for ``spectrum_x``) and every rail's hashed
   ECMP paths (``roce``), each timed; the baseline in the same run is the generic
   enumeration :func:`fabric_jax.shortest_paths` of rail 0's pairs with the same cap
   (the ratio is the speed-up of the closed-form tables; up to ``--generic-max`` GPUs:
   at 32,768 on 4 planes it ran out of memory).  A GPU count beyond what the
   two-tier / multi-plane build holds at the default radix is built with 128 servers
   per scalable unit and 8 planes (``--big-spl``).
2. **Memory per flow** (``--memory``): a fresh process per (GPU count, preset) runs
   rail 0's fluid run for ``--steps`` steps; the peak resident memory during the run
   (``/proc/self/status`` polled every 20 ms) minus the resident memory before it, over
   the flows simulated (XLA's own figure is not exposed by the fluid engine, so the
   increase includes the compiler's working memory).  The slope between two sizes
   removes the fixed costs.
3. **100k GPUs on paper**: flows per rail and in all at 98,304 GPUs (12,288 HGX
   servers) times the measured bytes per flow, over 90 % of an H200's 141 GB.

Usage::

    python experiments/bench_scale_step.py --json results/bench_scale_step.json
    python experiments/bench_scale_step.py --memory --gpus 1024 8192
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import warnings

try:  # run as a script (experiments/ is on sys.path) or imported as experiments.<name>
    import _common as cm
except ImportError:  # pragma: no cover
    from experiments import _common as cm

import numpy as np  # noqa: E402

from fabric_jax import scale as sc  # noqa: E402
from fabric_jax.paths import PathsTruncatedWarning, shortest_paths  # noqa: E402

H200_BYTES = 141e9

_MEM = textwrap.dedent("""
    import gc, json, sys, threading, time, numpy as np
    from fabric_jax import scale as sc

    def rss():
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    G, preset, steps = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    topo = sc.scale_topology(G)
    mdl, plan = sc.scale_plan(n_gpus=G)
    st = sc.step_flows(mdl, plan)
    gc.collect()
    before, peak, done = rss(), [0], []

    def poll():                      # the run's peak resident memory, every 20 ms
        while not done:
            peak[0] = max(peak[0], rss())
            time.sleep(0.02)
    th = threading.Thread(target=poll)
    th.start()
    run = sc.simulate_rails(st, topo, preset, rails=(0,), dt=0.5e-6, n_steps=steps)
    done.append(1)
    th.join()
    print(json.dumps(dict(gpus=G, preset=preset, flows=int(run.flows.n_flows),
                          rss_before=before, rss_after=peak[0], wall_s=run.wall_s)))
""")


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def host_side(g: int, big_spl: int, generic_max: int) -> dict:
    try:
        topo, t_topo = _timed(lambda: sc.scale_topology(g))
    except ValueError:
        topo, t_topo = _timed(lambda: sc.scale_topology(g, servers_per_leaf=big_spl))
    (mdl, plan), _ = _timed(lambda: sc.scale_plan(n_gpus=g))
    st, t_flows = _timed(lambda: sc.step_flows(mdl, plan))
    view, t_view = _timed(lambda: sc.rail_view(topo, [0]))
    r0 = np.flatnonzero(st.rail == 0)
    sub = st.subset(r0)
    (_, ps), t_paths = _timed(lambda: sc.route_flows(sub, topo, "spectrum_x", flow_ids=r0))
    (ecmp_flows, _), t_ecmp = _timed(lambda: sc.route_flows(st, topo, "roce"))

    def generic():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PathsTruncatedWarning)
            return shortest_paths(topo, sub.src, sub.dst, max_paths=sc.DEFAULT_MAX_PATHS)
    # the generic enumeration ran out of memory at 32,768 GPUs on 4 planes (OOM-killed
    # at 14.4 GB RSS on a 23 GB host, 2026-12-05): only up to --generic-max
    t_generic = _timed(generic)[1] if g <= generic_max else float("nan")
    return dict(gpus=g, topology=topo.name, links=topo.n_links, flows=st.n_flows,
                flows_rail0=int(r0.size), ecmp_stripes=ecmp_flows.n_flows,
                topology_s=t_topo, flows_s=t_flows, rail_view_s=t_view,
                rail0_paths_s=t_paths, all_rails_ecmp_s=t_ecmp,
                generic_paths_s=t_generic, speedup=t_generic / max(t_paths, 1e-9))


def _warm():
    """One small build first, so no size pays NumPy's and the builders' first-call
    costs (the 1,024-GPU row would otherwise)."""
    host_side(64, 64, 64)


def memory(g: int, preset: str, steps: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", _MEM, str(g), preset, str(steps)],
                          capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    r["rss_increase"] = r["rss_after"] - r["rss_before"]
    r["bytes_per_flow"] = r["rss_increase"] / r["flows"]
    return r


def main(argv=None) -> dict:
    ap = cm.parser(__doc__)
    ap.add_argument("--gpus", type=int, nargs="+", default=[1024, 8192, 32768, 98304])
    ap.add_argument("--big-spl", type=int, default=128,
                    help="servers per unit beyond the default build (default 128)")
    ap.add_argument("--generic-max", type=int, default=8192,
                    help="largest GPU count for the shortest_paths baseline (default 8192)")
    ap.add_argument("--memory", action="store_true", help="measure fluid memory per flow")
    ap.add_argument("--mem-gpus", type=int, nargs="+", default=[1024, 8192])
    ap.add_argument("--presets", nargs="+", default=["roce", "spectrum_x"])
    ap.add_argument("--steps", type=int, default=100)
    a = ap.parse_args(argv)
    rows = []
    _warm()
    for g in a.gpus:
        r = host_side(g, a.big_spl, a.generic_max)
        rows.append(r)
        print(f"  {g} GPUs: {r['flows']} flows, topology {r['topology_s']:.2f} s, flows "
              f"{r['flows_s']:.2f} s, rail-0 paths {r['rail0_paths_s']:.3f} s (generic "
              f"{r['generic_paths_s']:.2f} s), every rail's ECMP {r['all_rails_ecmp_s']:.2f} s",
              flush=True)
    out = dict(host=rows, device=cm.device_info())
    if a.memory:
        mem = [memory(g, p, a.steps) for g in a.mem_gpus for p in a.presets]
        for m in mem:
            print(f"  memory {m['gpus']} GPUs {m['preset']}: {m['flows']} flows, RSS +"
                  f"{m['rss_increase'] / 1e6:.0f} MB, {m['bytes_per_flow']:.0f} B/flow",
                  flush=True)
        slope = {}
        for p in a.presets:
            pts = sorted((m["flows"], m["rss_increase"]) for m in mem if m["preset"] == p)
            if len(pts) >= 2:
                (f0, r0), (f1, r1) = pts[0], pts[-1]
                slope[p] = (r1 - r0) / (f1 - f0)
        big = sc.scale_plan(n_gpus=98304)
        st = sc.step_flows(*big)
        per_rail = int(np.sum(st.rail == 0))
        paper = {}
        planes = 8     # 98,304 GPUs: 8 planes (host_side's build at --big-spl)
        for p, bpf in slope.items():
            # hashed routing: one stripe per plane, each one path; adaptive / spray: one
            # flow with max_paths per plane, so its hop table grows with the planes
            # (measured on one plane: bytes per flow times the planes, an upper bound)
            stripes = planes if p == "roce" else 1
            bpf = bpf if p == "roce" else bpf * planes
            one = per_rail * stripes * bpf
            every = st.n_flows * stripes * bpf
            paper[p] = dict(bytes_per_flow=bpf, rail_flows=per_rail * stripes,
                            all_flows=st.n_flows * stripes, one_rail_bytes=one,
                            all_rails_bytes=every,
                            h200_one_rail=int(np.ceil(one / (0.9 * H200_BYTES))),
                            h200_all_rails=int(np.ceil(every / (0.9 * H200_BYTES))))
        out.update(memory=mem, bytes_per_flow=slope, gpus_100k=paper)
        print(json.dumps(paper, indent=1))
    return cm.finish(out, a, rows, ["gpus", "flows", "flows_rail0", "topology_s",
                                    "flows_s", "rail_view_s", "rail0_paths_s",
                                    "generic_paths_s", "speedup", "all_rails_ecmp_s"],
                     "host side of the scale study (seconds)")


if __name__ == "__main__":
    main()
