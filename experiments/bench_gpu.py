"""Benchmark: the engine at GPU sizes, first call and steady state apart, GPU beside CPU.

One command (issue 24), writing ``results/gpu.json`` as each part finishes (a timeout
keeps what ran).  Every part with its CPU-backend comparison may not fit one
10-minute device call (not yet timed on a GPU; on these 2 cores the CPU sides of the
solve and events parts alone take several minutes): on a lent GPU run it as two
calls, ``--parts kernels,fluid,unroll,variants --json results/gpu_a.json`` then
``--parts solve,events,batched,fluid_batched --json results/gpu_b.json``.  The parts:

``kernels``
    the fusions of the compiled ``simulate_fluid`` run on the issue's proxy instance
    (``fat_tree(8)``, ``experiments/bench_dynamics.py``; DCQCN + PFC, HPCC): in all,
    outside the loops, in one step, in each loop inside the step, and the launches one
    step costs at the measured iterations of those loops (:mod:`experiments._hlo`);
    with ``--baseline-rev`` the baseline's counts beside them.

``solve``
    exact :func:`fabric_jax.max_min_fair` on ``fat_tree(16)`` with 10^4, 10^5, 10^6
    random host pairs (one ECMP path each) and ``fat_tree(32)`` with 10^6: first call,
    steady state, iterations (the bottleneck depth), time per iteration, bytes per flow.
``fluid``
    :func:`fabric_jax.simulate_fluid` with DCQCN + PFC and with HPCC (no flow control),
    ``dt = 1 us``, on the same instances (10^4 and 10^5 flows on ``fat_tree(16)``,
    10^6 on ``fat_tree(32)`` on an accelerator): time per step (the difference of a
    ``2n`` and an ``n``-step run, so compile and fixed costs cancel), flow-steps per
    second, fusions of the compiled run and of one step, kernel launches per step (the
    step's fusions plus the per-step solves' fusions times their measured iterations,
    :mod:`experiments._hlo`), bytes per flow (XLA's memory analysis of the run: its
    arguments and temporaries over the flows).
``events``
    :func:`fabric_jax.simulate_flows` (exact, event-driven) on the coupled instances of
    ``experiments/bench_flowsim.py`` (3k, 10k flows).
``variants``
    what removes the launch cost of the fluid step, measured rather than argued: the
    ``fluid`` part's DCQCN + PFC row (10^5 flows on ``fat_tree(16)``; ``--small``: 2,000
    on ``fat_tree(8)``) rerun in a fresh process per variant (XLA reads its flags when
    the backend starts): XLA's default, ``solver_unroll=4`` (the per-step solves' first
    iterations as a loop of known trip count, :func:`fabric_jax.simulate_fluid`) and
    ``solver_check_every=8`` (their loop tested once every 8 iterations), each as
    fabric_jax compiles it (XLA:GPU command buffers extended to while loops,
    :mod:`fabric_jax.compiling`: the loops run as CUDA graph conditional nodes, no host
    round trip) and with that turned off (``host_loops*``: ``FABRIC_JAX_DEVICE_LOOPS=0``,
    XLA's default command buffers, every loop test read back by the host).  Time per
    step, its ratio to the default, and whether the variant's results equal the
    default's to the bit (``same_result``: every variant computes the same thing).  On a
    CPU the GPU option does nothing (a smoke run).
``batched``
    :func:`fabric_jax.simulate_flows_batched` over 8 seeds against the same seeds one by
    one: the cost per scenario.
``fluid_batched``
    :func:`fabric_jax.simulate_fluid_batched` over 8 load levels of the ``fluid`` part's
    10^4-flow DCQCN + PFC instance against the same runs one by one: the cost per
    scenario.
``unroll``
    ``simulate_fluid(solver_unroll=K)`` for ``K`` = 0, 4, 8 interleaved in one process
    on the ``fluid`` part's DCQCN + PFC instances: time per step and its ratio to
    ``K = 0``.  (The ``kernels`` part adds the fusion counts with ``K = 4``.)
``aot``
    XLA:GPU's own program for ``--target`` (``h200`` by default, or ``h100``), compiled
    on this host without the GPU (it needs JAX's CUDA plugin: ``experiments/_hlo.py``,
    "XLA:GPU's own program"): the proxy instance of ``kernels`` (DCQCN + PFC, HPCC) and
    the ``fluid`` part's 10^4- and 10^5-flow DCQCN + PFC instances, each as it is,
    with ``solver_unroll=K`` (``K`` above its solves' mean depth) and with
    ``solver_check_every=M``: fusions in the program, kernels in one step's body, and
    per step, at the solves' iterations measured by running the same program's CPU
    form, kernels launched and host round trips as fabric_jax compiles it (the loops
    XLA:GPU's compiler logs as recorded into command buffers run on the device,
    ``loops_on_device``) and with every loop on the host (``host_loops_*``: fabric_jax
    before :mod:`fabric_jax.compiling`, ``FABRIC_JAX_DEVICE_LOOPS=0``, or a driver
    older than CUDA 12.3) (:func:`_hlo.launch_model`; each exact
    loop's trips from each step's recorded depth ``d``, :func:`_hlo.solve_depths`:
    ``ceil(max(0, d - max(K, 1)) / M)`` for the solve, ``max(0, d - max(K, 1))`` for
    the NIC water-fill: on a GPU the first iteration of each runs outside its loop,
    :func:`_hlo.first_iterations`), and bytes per flow (XLA:GPU's memory analysis of
    the program).  Then one exact :func:`fabric_jax.max_min_fair` of 10^5 and 10^6 random pairs on ``fat_tree(16)``
    (``solve``'s instances), with ``check_every`` 1 and 8: kernels and round trips per
    solve at its measured depth.  Then :func:`fabric_jax.simulate_flows` on ``events``'
    coupled instances: its events, its loops and conditionals and how many XLA:GPU
    runs on the device.  With ``--baseline-rev`` the baseline's figures beside
    the fluid rows (its package, this part's code).  Not a timing: what a step asks of
    the GPU runtime.

Every part runs on the default backend and, when that is an accelerator, on this
machine's CPU backend too (``cpu_*`` keys), for the ratio.  ``--small``: CPU-sized
instances (a smoke run: the test suite runs it).  ``--baseline-rev REV`` also runs the
``fluid`` part on the code of git revision ``REV`` (exported to a temporary folder, run
in a subprocess) and reports the ratio of its time per step to this code's
(``baseline_step_s`` / ``step_s``), so "not slower than before" is measured in one run;
with ``--ab-repeats N`` this code and the baseline run in turn, each in a fresh process,
``N`` times (``ab_step_s``, ``baseline_step_s``: medians; ``baseline_over_new``: the
median of the paired ratios), which holds on a noisy machine where one run does not.

Usage::

    PYTHONPATH=. python experiments/bench_gpu.py [--small]
        [--parts kernels,solve,fluid,events,batched,fluid_batched,unroll,variants,aot]
        [--json results/gpu.json] [--baseline-rev REV] [--target h200]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

try:  # run as a script (experiments/ is on sys.path) or imported as experiments.<name>
    import _hlo
    from _bench import device_info, write_json
except ImportError:  # pragma: no cover
    from experiments import _hlo
    from experiments._bench import device_info, write_json

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import fabric_jax as fj  # noqa: E402
from fabric_jax.paths import PathsTruncatedWarning  # noqa: E402

PARTS = ("kernels", "solve", "fluid", "events", "batched", "fluid_batched", "unroll",
         "variants", "aot")

#: ``variants`` part: (name, environment variables set in its process,
#: ``solver_unroll``, ``solver_check_every``).
_HOST_LOOPS = {"FABRIC_JAX_DEVICE_LOOPS": "0"}
XLA_VARIANTS = (
    ("default", {}, 0, 1),
    ("unroll4", {}, 4, 1),
    ("check8", {}, 0, 8),
    ("host_loops", _HOST_LOOPS, 0, 1),
    ("host_loops_unroll4", _HOST_LOOPS, 4, 1),
    ("host_loops_check8", _HOST_LOOPS, 0, 8),
)


# ------------------------------------------------------------------ instances
def pair_instance(k: int, n_flows: int, seed: int = 0):
    """``fat_tree(k)`` and ``n_flows`` random host pairs, one seeded ECMP path each:
    ``(topology, incidence, capacity [links] B/s)``."""
    topo = fj.fat_tree(k)
    rng = np.random.default_rng(seed)
    n = topo.n_hosts
    src = rng.integers(0, n, n_flows)
    dst = (src + rng.integers(1, n, n_flows)) % n
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PathsTruncatedWarning)
        paths = fj.shortest_paths(topo, src, dst, max_paths=1, seed=seed)
    inc = fj.Incidence.from_paths(paths, np.ones((n_flows, 1)), n_links=topo.n_links)
    return topo, inc, np.asarray(topo.capacity, np.float32)


def _block(x):
    return jax.tree_util.tree_map(
        lambda a: a.block_until_ready() if hasattr(a, "block_until_ready") else a, x)


def timed(fn, repeats: int = 2):
    """``(first_s, steady_s, out)``: the first call (trace + compile + run), then the
    median of ``repeats`` calls."""
    t0 = time.perf_counter()
    out = _block(fn())
    first = time.perf_counter() - t0
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = _block(fn())
        runs.append(time.perf_counter() - t0)
    return first, float(np.median(runs)), out


def _bytes(compiled, n_flows):
    try:
        m = compiled.memory_analysis()
        return (m.argument_size_in_bytes + m.temp_size_in_bytes) / max(n_flows, 1)
    except Exception:  # pragma: no cover - backends without memory analysis
        return None


# ---------------------------------------------------------------------- parts
def part_solve(small, backends, max_flows=None, only_k=None):
    sizes = [(8, 2_000), (8, 20_000)] if small else [(16, 10_000), (16, 100_000),
                                                     (16, 1_000_000), (32, 1_000_000)]
    rows = []
    for k, n in sizes:
        if (max_flows is not None and n > max_flows) or (only_k is not None and k != only_k):
            continue
        topo, inc, cap = pair_instance(k, n)
        row = dict(k=k, links=topo.n_links, flows=n)
        for name, dev in backends.items():
            if name == "cpu" and n > 1_000_000:
                continue
            with jax.default_device(dev):
                first, steady, res = timed(lambda: fj.max_min_fair(inc, cap))
                it = int(res.info.iterations)
                compiled = jax.jit(fj.max_min_fair).lower(inc, cap).compile()
            row.update({f"{name}_first_s": first, f"{name}_steady_s": steady,
                        "iterations": it, f"{name}_per_iteration_s": steady / max(it, 1),
                        "bytes_per_flow": _bytes(compiled, n),
                        "fusions": _hlo.kernel_counts(compiled.as_text())["fusions"]})
        rows.append(row)
        yield rows


FLUID_CASES = {"dcqcn_pfc": dict(law="dcqcn", flow_control="pfc"),
               "hpcc": dict(law="hpcc", flow_control="none")}


def fluid_row(k, n, case, steps, dev, unroll=0, check_every=1):
    """One fluid measurement on device ``dev`` (also run by ``--baseline-rev``);
    ``unroll``, ``check_every``: ``simulate_fluid(solver_unroll=, solver_check_every=)``
    (only passed when set, so that a baseline without them runs)."""
    topo, inc, cap = pair_instance(k, n)
    kw = dict(dt=1e-6, buffer=np.asarray(topo.buffer, float) if np.all(
        np.isfinite(np.asarray(topo.buffer, float))) else 1e6,
        link_latency=np.asarray(topo.latency, float), nic_links=topo,
        **FLUID_CASES[case])
    if unroll:
        kw["solver_unroll"] = int(unroll)
    if check_every != 1:
        kw["solver_check_every"] = int(check_every)
    size = np.full(inc.n_flows, 1e12, np.float32)
    with jax.default_device(dev):
        def run(n_steps):
            return fj.simulate_fluid(inc, cap, size, n_steps=n_steps, **kw)
        first, t1, r1 = timed(lambda: run(steps), repeats=1)
        _, t2, r2 = timed(lambda: run(2 * steps), repeats=1)
    step_s = max(t2 - t1, 1e-9) / steps
    row = dict(k=k, flows=n, case=case, n_steps=steps, first_s=first, step_s=step_s,
               flow_steps_per_s=n / step_s, dt_s=1e-6)
    # a fingerprint of the results, to tell variants that compute the same thing
    row["result_digest"] = _digest(r2)
    it = getattr(r2.info, "solver_iterations", None)
    if it is not None:
        row["solve_iterations_per_step"] = float(np.asarray(it)[0]) / (2 * steps)
        row["nic_rounds_per_step"] = float(np.asarray(it)[1]) / (2 * steps)
    return row


def _digest(result) -> str:
    """SHA-256 of every array of a result pytree (bytes in order): equal digests mean
    results equal to the bit."""
    import hashlib
    h = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(result):
        h.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return h.hexdigest()[:16]


def fluid_program(instance, steps, target=None, depths=None, buffers=None, **kw):
    """``(compiled, result, flows)``: the fluid run on ``instance`` -- ``"proxy"`` (the
    issue's instance, ``experiments/bench_dynamics.py``: ``fat_tree(8)``, a permutation
    and a 16-to-1 incast, 1 MB flows) or ``(k, flows)`` (:func:`pair_instance`, flows
    that never finish) -- with ``kw`` (law, flow control, solver options), dt = 1 us,
    compiled for ``target`` (:func:`_hlo.compiled_fluid_run`; ``depths``: a dict it fills
    with each step's solve iterations; ``buffers``: a list it fills with XLA:GPU's
    command buffers, :func:`_hlo.compile_for`)."""
    if instance == "proxy":
        from bench_dynamics import workload
        topo, inc, cap, _ = workload(8, 16, 0, None)
        size = np.full(inc.n_flows, 1e6)
    else:
        topo, inc, cap = pair_instance(*instance)
        size = np.full(inc.n_flows, 1e12, np.float32)
    opts = {} if depths is None else {"depths": depths}
    if buffers is not None:
        opts["buffers"] = buffers
    compiled, res = _hlo.compiled_fluid_run(
        inc, cap, size, dt=1e-6, n_steps=steps, buffer=1e6,
        link_latency=np.asarray(topo.latency), nic_links=topo, target=target, **opts, **kw)
    return compiled, res, inc.n_flows


def fluid_hlo(k, n, case, steps):
    """Fusion counts and bytes per flow of the compiled fluid run."""
    compiled, _, _ = fluid_program((k, n), steps, **FLUID_CASES[case])
    return _hlo.kernel_counts(compiled.as_text()), _bytes(compiled, n)


def _here(fn, args: str, flags: str = "", env: dict | None = None):
    """``(result, stderr)``: ``fn(<args>)`` of this file, on this code, in a fresh process
    with ``flags`` added to ``XLA_FLAGS`` and the variables ``env`` set
    (:func:`_call_in_process`)."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, **(env or {}), PYTHONPATH=os.pathsep.join(
        x for x in (str(root), os.environ.get("PYTHONPATH", "")) if x))
    env["XLA_FLAGS"] = " ".join(x for x in (env.get("XLA_FLAGS", ""), flags) if x)
    return _call_in_process("bench_gpu", fn, args, root, env)


def part_fluid(small, backends, baseline=None, max_flows=None, ab_repeats=1):
    sizes = [(8, 2_000, 10), (8, 10_000, 10)] if small else [(16, 10_000, 50),
                                                             (16, 100_000, 20),
                                                             (32, 1_000_000, 10)]
    rows = []
    for case in FLUID_CASES:
        for k, n, steps in sizes:
            if max_flows is not None and n > max_flows:
                continue
            row = None
            for name, dev in backends.items():
                if name == "cpu" and n > 100_000:
                    continue
                r = fluid_row(k, n, case, steps, dev)
                if row is None:
                    row = {key: r[key] for key in ("k", "flows", "case", "n_steps", "dt_s")}
                    row.update({key: r[key] for key in r if key.endswith("per_step")})
                prefix = "" if name == "default" else "cpu_"
                row.update({prefix + key: r[key] for key in
                            ("first_s", "step_s", "flow_steps_per_s")})
            counts, bpf = fluid_hlo(k, n, case, steps)
            trips = {"allocate": row.get("solve_iterations_per_step", 1.0),
                     "nic_send": row.get("nic_rounds_per_step", 1.0)}
            per_step = _hlo.launches_per_step(counts, trips)
            row.update(fusions=counts["fusions"], fusions_outside_loops=counts["entry"],
                       step_fusions=per_step["step_fusions"],
                       launches_per_step=per_step["launches_per_step"],
                       bytes_per_flow=bpf)
            if baseline is not None and n <= 100_000 and ab_repeats > 1:
                # A/B in turn, each run in a fresh process (this code, the baseline's)
                pairs = []
                for _ in range(ab_repeats):
                    new, err = _here("fluid_row", f"{k}, {n}, {case!r}, {steps}, "
                                     "jax.devices('cpu')[0]")
                    if new is None:
                        print(err[-2000:], file=sys.stderr)
                    old = baseline("fluid_row", (k, n, case, steps))
                    if new is not None and old is not None:
                        pairs.append((new["step_s"], old["step_s"]))
                if pairs:
                    new_s, old_s = np.array(pairs).T
                    row.update(ab_pairs=len(pairs), ab_step_s=float(np.median(new_s)),
                               baseline_step_s=float(np.median(old_s)),
                               baseline_over_new=float(np.median(old_s / new_s)))
            elif baseline is not None and n <= 100_000:
                b = baseline("fluid_row", (k, n, case, steps))
                if b is not None:
                    row["baseline_step_s"] = b["step_s"]
                    row["baseline_over_new"] = b["step_s"] / row["step_s"]
            rows.append(row)
            yield rows


def kernel_row(law, fc, unroll=0):
    """Kernel counts of the compiled fluid run on the issue-24 proxy instance
    (:func:`fluid_program`), with the per-step solves' measured iterations (also run by
    ``--baseline-rev``).  ``unroll``: ``solver_unroll`` (the unrolled iterations are in
    the step's fusions; launches per step are then not computed: the loops' trip counts
    past the unrolled ones are not recorded)."""
    steps = 200
    opts = {"solver_unroll": int(unroll)} if unroll else {}
    compiled, res, n_flows = fluid_program("proxy", steps, law=law, flow_control=fc, **opts)
    counts = _hlo.kernel_counts(compiled.as_text())
    it = getattr(res.info, "solver_iterations", None)
    trips = ({} if it is None else
             {"allocate": float(np.asarray(it)[0]) / steps,
              "nic_send": float(np.asarray(it)[1]) / steps})
    per_step = _hlo.launches_per_step(counts, trips)
    row = dict(k=8, flows=n_flows, law=law, flow_control=fc, fusions=counts["fusions"],
               fusions_outside_loops=counts["entry"], step_fusions=per_step["step_fusions"],
               inner_loops=[(lp["fusions"], lp["cond_fusions"]) for lp in per_step["inner"]],
               launches_per_step=per_step["launches_per_step"] if trips and not unroll
               else None, **{f"{key}_iterations_per_step": v for key, v in trips.items()})
    if unroll:
        row["solver_unroll"] = int(unroll)
    return row


def part_kernels(small, backends, baseline=None):
    rows = []
    for law, fc in (("dcqcn", "pfc"), ("hpcc", "none")):
        row = kernel_row(law, fc)
        if baseline is not None:
            b = baseline("kernel_row", (law, fc))
            if b is not None:
                row.update({"baseline_" + key: b[key] for key in
                            ("fusions", "fusions_outside_loops", "step_fusions",
                             "inner_loops")})
        rows.append(row)
        yield rows
    rows.append(kernel_row("dcqcn", "pfc", unroll=4))
    yield rows


def part_unroll(small, backends):
    """``solver_unroll`` 0 / 4 / 8 against each other on the default backend, the
    fluid part's DCQCN + PFC instances (10^4 and 10^5 random pairs on ``fat_tree(16)``;
    ``--small``: 2,000 on ``fat_tree(8)``), interleaved in one process (every program
    compiled first; each repetition runs the three in turn): the median time per step
    (the difference of a ``2n``- and an ``n``-step run over ``n``) and its ratio to
    ``K = 0``."""
    sizes = [(8, 2_000, 10, 3)] if small else [(16, 10_000, 50, 5), (16, 100_000, 20, 3)]
    ks = (0, 4, 8)
    rows = []
    for k, n, steps, reps in sizes:
        topo, inc, cap = pair_instance(k, n)
        kw = dict(dt=1e-6, buffer=1e6, link_latency=np.asarray(topo.latency, float),
                  nic_links=topo, **FLUID_CASES["dcqcn_pfc"])
        size = np.full(n, 1e12, np.float32)

        def run(unroll, m):
            return _block(fj.simulate_fluid(inc, cap, size, n_steps=m, solver_unroll=unroll,
                                            **kw).finish)
        for u in ks:
            run(u, steps), run(u, 2 * steps)
        per = {u: [] for u in ks}
        for _ in range(reps):
            for u in ks:
                t0 = time.perf_counter()
                run(u, steps)
                t1 = time.perf_counter()
                run(u, 2 * steps)
                per[u].append(max((time.perf_counter() - t1) - (t1 - t0), 1e-9) / steps)
        med = {u: float(np.median(per[u])) for u in ks}
        for u in ks:
            rows.append(dict(k=k, flows=n, n_steps=steps, repeats=reps, solver_unroll=u,
                             step_s=med[u], over_unroll0=med[u] / med[0]))
        yield rows


def part_events(small, backends):
    from bench_flowsim import coupled_instance
    rows = []
    for n in ([300] if small else [3_000, 10_000]):
        inc, c, a, s = coupled_instance(n, 0)
        c, a, s = (x.astype(np.float32) for x in (c, a, s))
        row = dict(flows=n)
        for name, dev in backends.items():
            with jax.default_device(dev):
                first, steady, r = timed(lambda: fj.simulate_flows(inc, c, a, s, max_active=n),
                                         repeats=1)
            prefix = "" if name == "default" else "cpu_"
            row.update({prefix + "first_s": first, prefix + "steady_s": steady,
                        "events": int(r.n_events)})
        rows.append(row)
        yield rows


def part_batched(small, backends):
    from bench_flowsim import coupled_instance
    # (--small: the 300-flow instance of part_events, so the loop reuses its program)
    n, b = (300, 4) if small else (10_000, 8)
    inc, c, a, s = coupled_instance(n, 0)
    sizes = np.stack([coupled_instance(n, i)[3] for i in range(b)]).astype(np.float32)
    caps = np.broadcast_to(c.astype(np.float32), (b, c.size))
    arrs = np.zeros((b, n), np.float32)
    rows = []
    first, steady, _ = timed(lambda: fj.simulate_flows_batched(inc, caps, arrs, sizes,
                                                                max_active=n), repeats=1)
    t0 = time.perf_counter()
    for i in range(b):
        _block(fj.simulate_flows(inc, caps[i], arrs[i], sizes[i], max_active=n).finish)
    loop = (time.perf_counter() - t0) / b
    rows.append(dict(kind="events", flows=n, batch=b, first_s=first,
                     per_scenario_s=steady / b, loop_per_scenario_s=loop,
                     loop_over_batched=loop / (steady / b)))
    yield rows


def part_fluid_batched(small, backends):
    """:func:`fabric_jax.simulate_fluid_batched` over ``b`` load levels (sizes) of the
    fluid part's 10^4-flow DCQCN + PFC instance (``--small``: 2,000 flows, 4 levels)
    against the same scenarios run one by one: each program compiled before the timing,
    medians of 2 repetitions, the step count the fluid part's."""
    k, n, steps, b = (8, 2_000, 20, 4) if small else (16, 10_000, 50, 8)
    topo, inc, cap = pair_instance(k, n)
    kw = dict(dt=1e-6, n_steps=steps, buffer=1e6, link_latency=np.asarray(topo.latency, float),
              nic_links=topo, **FLUID_CASES["dcqcn_pfc"])
    sizes = np.stack([np.full(n, 1e5 * 4.0 ** i, np.float32) for i in range(b)])
    first, steady, _ = timed(lambda: fj.simulate_fluid_batched(inc, cap, sizes, **kw),
                             repeats=2)
    _block(fj.simulate_fluid(inc, cap, sizes[0], **kw).finish)      # compile the single run
    loops = []
    for _ in range(2):
        t0 = time.perf_counter()
        for i in range(b):
            _block(fj.simulate_fluid(inc, cap, sizes[i], **kw).finish)
        loops.append((time.perf_counter() - t0) / b)
    loop = float(np.median(loops))
    yield [dict(kind="fluid", flows=n, batch=b, n_steps=steps, first_s=first,
                per_scenario_s=steady / b, loop_per_scenario_s=loop,
                loop_over_batched=loop / (steady / b))]


def variant_row(k, n, steps, name, env, unroll, check_every=1):
    """:func:`fluid_row` (DCQCN + PFC) in a fresh process with the environment variables
    ``env``: ``dict`` or ``{"error": ...}`` when the process fails."""
    t0 = time.perf_counter()
    r, err = _here("fluid_row", f"{k}, {n}, 'dcqcn_pfc', {steps}, jax.devices()[0], "
                   f"{int(unroll)}, {int(check_every)}", env=env)
    row = dict(variant=name, env=" ".join(f"{a}={b}" for a, b in env.items()),
               solver_unroll=int(unroll), solver_check_every=int(check_every))
    if r is None:
        row["error"] = (err.strip().splitlines() or ["?"])[-1][-300:]
        return row
    row.update({key: r[key] for key in ("k", "flows", "n_steps", "first_s", "step_s",
                                        "flow_steps_per_s", "result_digest")})
    row.update({key: r[key] for key in r if key.endswith("per_step")})
    row["process_wall_s"] = time.perf_counter() - t0
    return row


def part_variants(small, backends):
    k, n, steps = (8, 2_000, 10) if small else (16, 100_000, 20)
    rows = []
    for name, env, unroll, every in XLA_VARIANTS:
        row = variant_row(k, n, steps, name, env, unroll, every)
        if rows and "step_s" in row and "step_s" in rows[0]:
            row["default_over_variant"] = rows[0]["step_s"] / row["step_s"]
            row["same_result"] = row["result_digest"] == rows[0]["result_digest"]
        rows.append(row)
        yield rows


# ---------------------------------------------------------------------- aot
def aot_row(instance, case, unroll, target, steps, check_every=1):
    """One row of the ``aot`` part (also run by ``--baseline-rev``): ``instance`` is
    ``"proxy"`` (``kernels``' instance) or ``(k, flows)`` (``fluid``'s)."""
    opts = {"solver_unroll": int(unroll)} if unroll else {}
    if check_every != 1:
        opts["solver_check_every"] = int(check_every)
    depths, buffers = {}, []
    compiled, res, n_flows = fluid_program(instance, steps, target, depths, buffers,
                                           **FLUID_CASES[case], **opts)
    on_device = {name for b in buffers for name in b}
    it = np.asarray(res.info.solver_iterations, float) / steps
    mean = {"allocate": it[0], "nic_send": it[1]}
    for key, v in mean.items():   # the record is the run's own count, step by step
        if len(depths[key]) != steps or abs(np.mean(depths[key]) - v) > 1e-9 * max(v, 1):
            raise RuntimeError(f"aot_row: {key}'s recorded depths ({len(depths[key])}, "
                               f"mean {np.mean(depths[key])}) are not the run's ({v})")
    # trips of the exact while loops, step by step: after the K fixed iterations (or
    # the first one, where the code runs that one outside the loop), M per trip for
    # the solve
    first = _hlo.first_iterations("cuda")   # the program is compiled for a GPU
    trips = {"allocate": _hlo.loop_trips(depths["allocate"],
                                         max(int(unroll), first["allocate"]), check_every),
             "nic_send": _hlo.loop_trips(depths["nic_send"],
                                         max(int(unroll), first["nic_send"]))}
    text = compiled.as_text()
    model = _hlo.launch_model(text, trips, on_device=on_device)
    host = _hlo.launch_model(text, trips)
    return dict(instance="proxy" if instance == "proxy" else f"fat_tree({instance[0]})",
                flows=n_flows, case=case, solver_unroll=int(unroll),
                solver_check_every=int(check_every), target=target,
                n_steps=steps, solve_iterations_per_step=mean["allocate"],
                nic_rounds_per_step=mean["nic_send"],
                fusions_in_program=model["fusions_in_program"],
                kernels_in_program=model["kernels"], step_kernels=model["step_kernels"],
                kernels_per_step=model["kernels_per_step"],
                round_trips_per_step=model["round_trips_per_step"],
                host_loops_kernels_per_step=host["kernels_per_step"],
                host_loops_round_trips_per_step=host["round_trips_per_step"],
                command_buffers=len(buffers), loops_on_device=_on_device_share(text, on_device),
                solve_depth_max=int(max(depths["allocate"], default=0)),
                solve_depth_zero_share=float(np.mean(np.asarray(depths["allocate"]) == 0)),
                bytes_per_flow=_bytes(compiled, n_flows))


def _on_device_share(text: str, on_device) -> str:
    """``"d/n"``: of the program's ``n`` while loops, the ``d`` XLA:GPU runs on the device
    (recorded into a command buffer, or inside a loop or branch that is)."""
    d, n = _hlo._Program(text, on_device=on_device).on_device_counts()["while"]
    return f"{d}/{n}"


def aot_solve_row(k, n, target, check_every=1):
    """A row of the ``aot`` part for one exact :func:`fabric_jax.max_min_fair` of ``n``
    random pairs on ``fat_tree(k)``: XLA:GPU's program for it as ``max_min_fair`` runs it
    on an accelerator (segment tables, no compaction levels), its iterations (the
    bottleneck depth, counted by running the solve on this host)."""
    from fabric_jax import fairness, segments
    topo, inc, cap = pair_instance(k, n)
    res = fj.max_min_fair(inc, cap)
    iters = int(res.info.iterations)
    with segments.forced("gather"):
        ginc, compaction = fairness._for_backend(inc)
    dtype = jnp.result_type(float)
    args = (ginc, jnp.asarray(cap, dtype), jnp.full((inc.n_flows,), jnp.inf, dtype))
    buffers = []
    compiled = _hlo.compile_for(fairness._max_min_fair, (), args + (None, inc.n_flows + 1,
                                compaction, int(check_every)), _hlo.gpu_device(target),
                                buffers=buffers)
    on_device = {name for b in buffers for name in b}
    # a depth-d solve runs its loop ceil(d / M) times, after its first iteration where
    # the code runs that one outside the loop (:func:`_hlo.first_iterations`)
    trips = _hlo.loop_trips([iters], _hlo.first_iterations("cuda")["allocate"], check_every)
    model = _hlo.solve_launches(compiled.as_text(), trips, on_device)
    host = _hlo.solve_launches(compiled.as_text(), trips)
    return dict(instance=f"fat_tree({k})", flows=n, case="max_min_fair",
                solver_check_every=int(check_every), target=target, iterations=iters,
                compaction=compaction, fusions_in_program=len(_hlo._FUSION.findall(
                    compiled.as_text())), kernels_in_program=model["kernels"],
                loop_body_kernels=model["body_kernels"],
                loop_cond_kernels=model["cond_kernels"],
                kernels_per_solve=model["kernels_per_call"],
                round_trips_per_solve=model["round_trips_per_call"],
                host_loops_kernels_per_solve=host["kernels_per_call"],
                host_loops_round_trips_per_solve=host["round_trips_per_call"],
                loops_on_device=_on_device_share(compiled.as_text(), on_device),
                bytes_per_flow=_bytes(compiled, n))


def aot_events_row(n, target):
    """A row of the ``aot`` part for :func:`fabric_jax.simulate_flows` (exact events) on
    ``events``' coupled instance of ``n`` flows: its events (run on this host) and
    XLA:GPU's program for it -- its loops and conditionals, and which of them XLA:GPU
    runs on the device (recorded into command buffers).  With every loop on the host
    the event loop alone tests its condition once per event and once more at its exit
    (``host_loops_round_trips_per_run_at_least``; each event's solve loops and branches
    add theirs)."""
    from bench_flowsim import coupled_instance
    import fabric_jax.sim as sim
    inc, c, a, s = coupled_instance(n, 0)
    c, a, s = (x.astype(np.float32) for x in (c, a, s))
    seen = {}
    orig = sim._simulate_events

    def spy(*args, **kw):
        seen["args"] = tuple(args) + (kw["warm"], kw["tolerance"], kw["has_deps"])
        return orig(*args, **kw)
    sim._simulate_events = spy
    try:
        res = fj.simulate_flows(inc, c, a, s, max_active=n)
    finally:
        sim._simulate_events = orig
    buffers = []
    compiled = _hlo.compile_for(orig, (), seen["args"], _hlo.gpu_device(target),
                                buffers=buffers)
    text = compiled.as_text()
    on_device = {name for b in buffers for name in b}
    counts = _hlo._Program(text, on_device=on_device).on_device_counts()
    (loops_dev, n_loops), (conds_dev, n_conds) = counts["while"], counts["conditional"]
    all_dev = loops_dev == n_loops and conds_dev == n_conds
    events = int(res.n_events)
    return dict(instance="coupled", flows=n, case="simulate_flows", target=target,
                events=events, fusions_in_program=len(_hlo._FUSION.findall(text)),
                kernels_in_program=len(_hlo._KERNEL.findall(text)),
                loops_on_device=f"{loops_dev}/{n_loops}",
                conditionals_on_device=f"{conds_dev}/{n_conds}",
                command_buffers=len(buffers),
                round_trips_per_run=0.0 if all_dev else None,
                host_loops_round_trips_per_run_at_least=events + 1,
                bytes_per_flow=_bytes(compiled, n))


def part_aot(small, backends, target="h200", baseline=None, max_flows=None):
    rows = []
    # (instance, case, solver_unroll, steps, solver_check_every)
    cases = [("proxy", "dcqcn_pfc", 0, 200, 1), ("proxy", "hpcc", 0, 200, 1),
             ("proxy", "dcqcn_pfc", 4, 200, 1)]
    cases += ([((8, 2_000), "dcqcn_pfc", 0, 10, 1), ((8, 2_000), "dcqcn_pfc", 16, 10, 1),
               ((8, 2_000), "dcqcn_pfc", 0, 10, 4)] if small
              else [((16, 10_000), "dcqcn_pfc", 0, 30, 1),
                    ((16, 10_000), "dcqcn_pfc", 24, 30, 1),
                    ((16, 10_000), "dcqcn_pfc", 0, 30, 4),
                    ((16, 100_000), "dcqcn_pfc", 0, 30, 1),
                    ((16, 100_000), "dcqcn_pfc", 48, 30, 1),
                    ((16, 100_000), "dcqcn_pfc", 0, 30, 4),
                    ((16, 100_000), "dcqcn_pfc", 0, 30, 8)])
    for inst, case, unroll, steps, every in cases:
        if max_flows and inst != "proxy" and inst[1] > max_flows:
            continue
        row = aot_row(inst, case, unroll, target, steps, every)
        if baseline is not None and not unroll and every == 1:
            b = baseline("aot_row", (inst, case, unroll, target, steps))
            if b is not None:
                for key in ("fusions_in_program", "kernels_per_step", "round_trips_per_step",
                            "bytes_per_flow"):
                    row["baseline_" + key] = b[key]
        rows.append(row)
        yield rows
    solves = [(8, 2_000)] if small else [(16, 100_000), (16, 1_000_000)]
    for k, n in solves:
        if max_flows and n > max_flows:
            continue
        for every in (1, 8):
            rows.append(aot_solve_row(k, n, target, every))
            yield rows
    for n in ([300] if small else [3_000, 10_000]):
        if max_flows and n > max_flows:
            continue
        rows.append(aot_events_row(n, target))
        yield rows


# ----------------------------------------------------------------- baseline
def baseline_runner(rev: str):
    """A function running :func:`fluid_row` on the code of git revision ``rev`` (in a
    subprocess, on the CPU backend), or ``None`` if the revision cannot be exported."""
    root = Path(__file__).resolve().parents[1]
    tmp = Path(tempfile.mkdtemp(prefix="bench_baseline_"))
    try:
        archive = subprocess.run(["git", "-C", str(root), "archive", rev], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    except (subprocess.CalledProcessError, FileNotFoundError) as err:
        print(f"baseline: cannot export {rev}: {err}", file=sys.stderr)
        return None
    # this file's instances and timing, applied to the baseline's package
    (tmp / "experiments" / "_bench_gpu_here.py").write_text(Path(__file__).read_text())
    for name in ("_hlo.py", "gpu_targets/h100.txtpb", "gpu_targets/h200.txtpb"):
        (tmp / "experiments" / name).parent.mkdir(exist_ok=True)
        (tmp / "experiments" / name).write_text((Path(__file__).parent / name).read_text())

    def run(fn, args):
        extra = ", jax.devices('cpu')[0]" if fn == "fluid_row" else ""
        # (the aot rows read XLA:GPU's log of its command buffers: asked for at start)
        out, err = _call_in_process("_bench_gpu_here", fn, f"*{tuple(args)!r}{extra}", tmp,
                                    dict(os.environ, PYTHONPATH=str(tmp), **_hlo._CB_LOG))
        if out is None:
            print(err[-2000:], file=sys.stderr)
        return out
    return run


def _call_in_process(module: str, fn: str, args: str, cwd, env):
    """``(result, stderr)``: ``experiments/<module>.<fn>(<args>)`` run in a fresh Python
    process in ``cwd`` with ``env``, its JSON result read from the last line printed
    (``None`` when the process fails)."""
    code = (f"import json, sys, jax; sys.path.insert(0, 'experiments'); import {module} as b;"
            f"print(json.dumps(b.{fn}({args}), default=float))")
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="CPU-sized smoke run")
    ap.add_argument("--parts", default=",".join(p for p in PARTS if p != "aot"),
                    help=f"comma-separated subset of {','.join(PARTS)} (default: all but aot)")
    ap.add_argument("--json", default="results/gpu.json")
    ap.add_argument("--baseline-rev", default=None,
                    help="also run the kernels and fluid parts on this git revision's code (CPU)")
    ap.add_argument("--ab-repeats", type=int, default=1,
                    help="fluid part with --baseline-rev: time this code and the baseline "
                         "in turn, each in a fresh process, this many times (medians and "
                         "the median of the paired ratios)")
    ap.add_argument("--max-flows", type=int, default=None,
                    help="skip instances with more flows (e.g. 100000 on a CPU)")
    ap.add_argument("--target", default="h200", choices=_hlo.GPU_TARGETS,
                    help="aot part: the GPU XLA compiles for (no GPU needed)")
    ap.add_argument("--only-k", type=int, default=None,
                    help="solve part: only the fat_tree(k) instances of this k (e.g. 16)")
    a = ap.parse_args(argv)
    parts = [p for p in a.parts.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        ap.error(f"--parts: unknown {bad}; choose from {list(PARTS)}")
    if "aot" in parts:   # before the backend starts: the CUDA plugin reads it on load
        _hlo.log_command_buffers()
    accel = jax.devices()[0]
    backends = {"default": accel}
    if accel.platform != "cpu":
        backends["cpu"] = jax.devices("cpu")[0]
    out = dict(device=device_info(), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               small=a.small, parts={})
    baseline = baseline_runner(a.baseline_rev) if a.baseline_rev else None
    gens = dict(kernels=lambda: part_kernels(a.small, backends, baseline),
                solve=lambda: part_solve(a.small, backends, a.max_flows, a.only_k),
                fluid=lambda: part_fluid(a.small, backends, baseline, a.max_flows,
                                         a.ab_repeats),
                events=lambda: part_events(a.small, backends),
                batched=lambda: part_batched(a.small, backends),
                fluid_batched=lambda: part_fluid_batched(a.small, backends),
                unroll=lambda: part_unroll(a.small, backends),
                variants=lambda: part_variants(a.small, backends),
                aot=lambda: part_aot(a.small, backends, a.target, baseline, a.max_flows))
    t0 = time.time()
    for p in parts:
        for rows in gens[p]():
            out["parts"][p] = rows
            out["wall_s"] = time.time() - t0
            write_json(a.json, out)
            print(p, json.dumps(rows[-1], default=float), flush=True)
    print(summary(out))
    print(f"written to {a.json} ({out.get('wall_s', 0.0):.0f} s)")
    return out


def summary(out: dict) -> str:
    """The parts as plain tables (one per part; every key a column, floats to 4
    significant digits), after the device line."""
    d = out["device"]
    lines = [f"device {d.get('platform')} ({d.get('device')}), jax {d.get('jax')}, "
             f"{d.get('cpu_count')} CPU cores, {out['date']}"]
    for part, rows in out["parts"].items():
        keys = list(dict.fromkeys(k for r in rows for k in r if not isinstance(r[k], dict)))

        def cell(v):
            if v is None:
                return "-"
            return f"{v:.4g}" if isinstance(v, float) else str(v)
        table = [keys] + [[cell(r.get(k)) for k in keys] for r in rows]
        width = [max(len(row[i]) for row in table) for i in range(len(keys))]
        lines.append(f"\n[{part}]")
        lines += ["  ".join(c.rjust(w) for c, w in zip(row, width)) for row in table]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
