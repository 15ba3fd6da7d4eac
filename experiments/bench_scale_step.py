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
4. **XLA:GPU's program for the scale point** (``--aot h200``; in an environment with
   JAX's CUDA plugin, ``experiments/_hlo.py``): for each GPU count of ``--gpus`` and
   each preset of ``--presets``, the scale study's run of rail 0 (``scale.scale_point``'s:
   the point built, the ideal fabric's slice time, ``scale.run_fabric`` at ``--dt-us``)
   made on this host in the accelerator form (gather tables, as it runs on a GPU), its
   program compiled by XLA:GPU for the target (the compile timed on this host), and
   read: kernels and host round trips per step and per run
   (:func:`_hlo.launch_model`, :func:`_hlo.run_launches`; the solves' loop trips from
   each simulated step's recorded depth, :func:`_hlo.solve_depths`, which also counts
   the steps simulated: the chunks the run skips as idle are not), XLA:GPU's buffer
   sizes (``memory_analysis``: arguments, outputs -- the trajectory --, temporaries)
   per flow, and the host-side times (building the point, the ideal fabric, each run's
   host work around its compiled call: routing, preparing, reading the result).
   **On paper**: what the point would take on that GPU if each kernel cost
   ``--kernel-us`` (issue 24's ~5 us) and each round trip ``--round-trip-us`` (an
   assumption: a small copy's ~5-7 us per call, Wu et al., "DualPath", arXiv
   2602.21548, sec. 5.2, plus one launch the drained queue no longer hides), with the
   host side and the compile as measured here.  Counts, not GPU times.

Usage::

    python experiments/bench_scale_step.py --json results/bench_scale_step.json
    python experiments/bench_scale_step.py --memory --gpus 1024 8192
    JAX_PLATFORMS=cpu .venv-gpu/bin/python experiments/bench_scale_step.py --aot h200 \
        --gpus 8192 32768 --presets infiniband roce spectrum_x uec
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
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


def aot_points(g: int, presets, target: str, dt: float, kernel_s: float,
               round_trip_s: float) -> list:
    """Rows of ``--aot`` for ``g`` GPUs (module docstring, item 4)."""
    from experiments import _hlo
    import jax
    from fabric_jax import fluid, segments
    from fabric_jax.fluid.options import SAVE_EVERY
    _hlo.gpu_device(target)      # first: a missing plugin stops before the work
    first = _hlo.first_iterations("cuda")
    (topo, step, nic), t_build = _timed(lambda: sc.build_point(g))
    base, t_ideal_s = _timed(lambda: sc.ideal_rails(step, nic))
    t_ideal = float(np.max(base.finish))
    rows = []
    for preset in presets:
        t0 = time.perf_counter()
        with segments.forced("gather"):
            run = sc.run_fabric(step, topo, preset, t_ideal, dt=dt)
        wall = time.perf_counter() - t0
        cpu_s = run.run_s       # inside the engine's runs (compile included)
        # each step's solve depths: the last run's problem run again, recorded
        with _hlo.solve_depths() as rec:
            jax.block_until_ready(fluid.run(run.problem))
        depths = dict(rec)
        buffers = []
        compiled, t_compile = _timed(lambda: _hlo.compiled_problem(run.problem, target,
                                                                   buffers=buffers))
        on_device = {name for b in buffers for name in b}
        text = compiled.as_text()
        mem = compiled.memory_analysis()
        n_flows = int(run.flows.n_flows)
        n_chunks = run.n_steps // SAVE_EVERY
        busy = len(depths["allocate"])    # one solve per simulated step; idle chunks skip
        trips = _hlo.run_trips(depths, first)
        share = busy / SAVE_EVERY / max(n_chunks, 1)

        def launches(prefix, device):
            """A step's and the run's kernels and round trips, and their cost on paper,
            with the loops of ``device`` on the device (named with ``prefix``)."""
            step = _hlo.launch_model(text, trips, on_device=device)
            run_ = _hlo.run_launches(text, trips, busy=share, on_device=device)
            cols = dict(kernels_per_step=step["kernels_per_step"],
                        round_trips_per_step=step["round_trips_per_step"],
                        kernels_per_run=run_["kernels_per_run"],
                        round_trips_per_run=run_["round_trips_per_run"],
                        launch_s=(run_["kernels_per_run"] * kernel_s
                                  + run_["round_trips_per_run"] * round_trip_s))
            return {prefix + k: v for k, v in cols.items()}, step["step_kernels"]
        as_compiled, step_kernels = launches("", on_device)
        row = dict(gpus=g, preset=preset, target=target, flows=n_flows, dt_s=dt,
                   n_steps=int(run.n_steps), chunks=int(n_chunks), runs=int(run.attempts),
                   busy_steps=busy,
                   solve_iterations_per_step=float(np.mean(depths["allocate"])),
                   nic_rounds_per_step=float(np.mean(depths["nic_send"])),
                   solve_depth_zero_share=float(np.mean(np.asarray(depths["allocate"]) == 0)),
                   fusions_in_program=len(_hlo._FUSION.findall(text)),
                   step_kernels=step_kernels, **as_compiled,
                   **launches("host_loops_", ())[0],
                   command_buffers=len(buffers),
                   build_s=t_build, ideal_s=t_ideal_s, prepare_s=wall - cpu_s,
                   cpu_run_s=cpu_s, compile_s=t_compile,
                   argument_bytes=int(mem.argument_size_in_bytes),
                   output_bytes=int(mem.output_size_in_bytes),
                   temp_bytes=int(mem.temp_size_in_bytes),
                   alias_bytes=int(mem.alias_size_in_bytes))
        row["state_bytes_per_flow"] = (row["argument_bytes"] + row["temp_bytes"]
                                       - row["alias_bytes"]) / n_flows
        row["bytes_per_flow"] = row["state_bytes_per_flow"] + row["output_bytes"] / n_flows
        rows.append(row)
        print(f"  {g} GPUs {preset}: {n_flows} flows, {busy} of {run.n_steps} steps "
              f"simulated, {row['kernels_per_step']:.0f} kernels and "
              f"{row['round_trips_per_step']:.1f} round trips per step, "
              f"{row['kernels_per_run']:.3g} and {row['round_trips_per_run']:.3g} per run "
              f"({row['host_loops_round_trips_per_run']:.3g} round trips with every loop "
              f"on the host), "
              f"{target} compile {t_compile:.1f} s (this host), "
              f"{row['bytes_per_flow']:.0f} B/flow", flush=True)
    return rows


def paper_time(rows: list) -> list:
    """Per GPU count: the point on paper (module docstring, item 4): the host side and
    the compiles as measured on this host, each run's launches at the assumed costs."""
    out = []
    for g in sorted({r["gpus"] for r in rows}):
        rs = [r for r in rows if r["gpus"] == g]
        host = rs[0]["build_s"] + rs[0]["ideal_s"] + sum(r["prepare_s"] for r in rs)
        compile_s = sum(r["compile_s"] for r in rs)
        launch = sum(r["launch_s"] for r in rs)
        host_loops = sum(r.get("host_loops_launch_s", r["launch_s"]) for r in rs)
        out.append(dict(gpus=g, presets=len(rs), host_s=host, compile_s=compile_s,
                        launch_s=launch, total_s=host + compile_s + launch,
                        host_loops_launch_s=host_loops,
                        host_loops_total_s=host + compile_s + host_loops))
    return out


def main(argv=None) -> dict:
    started = time.time()
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
    ap.add_argument("--aot", choices=("h200", "h100"), default=None,
                    help="XLA:GPU's program for each of --gpus x --presets instead of the "
                         "host side (item 4; needs JAX's CUDA plugin)")
    ap.add_argument("--dt-us", type=float, default=sc.DEFAULT_DT_US,
                    help=f"--aot: fluid step, microseconds (default {sc.DEFAULT_DT_US:g})")
    ap.add_argument("--kernel-us", type=float, default=5.0,
                    help="--aot, on paper: microseconds per kernel (default 5)")
    ap.add_argument("--round-trip-us", type=float, default=12.0,
                    help="--aot, on paper: microseconds per host round trip (default 12)")
    a = ap.parse_args(argv)
    if a.aot is not None:
        from experiments import _hlo
        _hlo.log_command_buffers()   # before the backend starts: the plugin reads it on load
        for name, v in (("--dt-us", a.dt_us), ("--kernel-us", a.kernel_us),
                        ("--round-trip-us", a.round_trip_us)):
            if not np.isfinite(v) or v <= 0:
                raise SystemExit(f"{name}: a positive number of microseconds; got {v}")
        rows = [r for g in a.gpus for r in aot_points(
            g, a.presets, a.aot, a.dt_us * 1e-6, a.kernel_us * 1e-6, a.round_trip_us * 1e-6)]
        paper = paper_time(rows)
        for p in paper:
            print(f"  {p['gpus']} GPUs on paper ({a.aot}, {p['presets']} presets): host "
                  f"{p['host_s']:.1f} s + compile {p['compile_s']:.1f} s (this host) + "
                  f"launches {p['launch_s']:.1f} s = {p['total_s']:.0f} s (every loop "
                  f"on the host: launches {p['host_loops_launch_s']:.1f} s, "
                  f"{p['host_loops_total_s']:.0f} s)", flush=True)
        out = dict(aot=rows, paper=paper, kernel_us=a.kernel_us,
                   round_trip_us=a.round_trip_us, device=cm.device_info())
        return cm.finish(out, a, rows, ["gpus", "preset", "flows", "busy_steps",
                                        "solve_iterations_per_step", "kernels_per_step",
                                        "round_trips_per_step", "kernels_per_run",
                                        "round_trips_per_run", "launch_s", "compile_s",
                                        "prepare_s", "bytes_per_flow"],
                         f"XLA:GPU ({a.aot}) program of the scale point's runs", started=started)
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
                     "host side of the scale study (seconds)", started=started)


if __name__ == "__main__":
    main()
