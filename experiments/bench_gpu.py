"""Benchmark: the engine at GPU sizes, first call and steady state apart, GPU beside CPU.

One command (issue 24), writing ``results/gpu.json`` as each part finishes (a timeout
keeps what ran).  On a lent GPU, one call::

    PYTHONPATH=. python experiments/bench_gpu.py --session --json $OUT/gpu.json

runs :data:`SESSION_PARTS` in that order (the preflight, issue 25's 8,192-GPU target
and ``compare``'s wall time, issue 24's table, then the rest; the ``fluid`` part without
its recompile for the fusion counts, which the ``aot`` part reads from XLA:GPU's
program without a GPU) and starts nothing after ``--budget-s``
(:data:`SESSION_BUDGET_S`, inside the device call's 10 minutes); the JSON lists the
parts it left out (``skipped``, ``truncated``).  Its first part,
``preflight``, checks that the engines run and agree on that GPU with their loops kept
on it, and if not runs the other parts with every loop on the host (below), so that a
fault of XLA's command buffers does not cost the call.  JAX's preallocation of 75 % of
the GPU's memory is turned off (``XLA_PYTHON_CLIENT_PREALLOCATE=false`` unless set),
since several parts run a child process on the same GPU.  The parts:

``preflight``
    each engine (the one-off solve, a DCQCN + PFC fluid run and a batch of them, the
    event engine and a batch of it; small instances) called three times in a fresh
    process with the loops on the device (:mod:`fabric_jax.compiling`) and in another
    with every loop on the host (``FABRIC_JAX_DEVICE_LOOPS=0``): whether each runs,
    gives no NaN, repeats itself, and agrees with the other mode (within
    :data:`PREFLIGHT_RTOL`); first call and later calls timed.  A command buffer is
    recorded on the first call and updated on the next, which is where XLA's while-loop
    command buffers have had faults (OpenXLA PRs 35760 and 36135: a crash on the second
    execution).  If the device-loops process fails or disagrees, the parts after it run
    in a child process with ``FABRIC_JAX_DEVICE_LOOPS=0`` and the JSON says so
    (``device_loops_turned_off``).
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
``scale``, ``scale_32k``
    issue 25's targets: ``experiments/scale_sweep.py --gpus 8192`` (and ``32768``) as a
    user runs it (all four presets and the ideal fabric, one training step of the default
    model), in a fresh process: its wall time against the target on one H200 (60 s and
    5 minutes, :data:`SCALE_TARGETS_S`) and each preset's step time, GPU utilisation,
    p99/p50 and effective bandwidth from its JSON (written beside ``--json``).
``compare``
    ``fabric-jax compare`` on the built-in scenario as a user runs it: with an empty
    compilation cache (``cold``) and with the one it filled (``warm``), then on the CPU
    backend, with the largest relative difference of any figure of its JSON from the
    first run's (``figures_over_1pct``: how many differ by more than 1 %).
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

    PYTHONPATH=. python experiments/bench_gpu.py [--small] [--session] [--budget-s S]
        [--parts preflight,kernels,solve,fluid,events,batched,fluid_batched,unroll,
                 variants,scale,compare,scale_32k,aot]
        [--json results/gpu.json] [--baseline-rev REV] [--target h200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a file: make `experiments` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments import _hlo
from experiments._bench import device_info, write_json

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import fabric_jax as fj  # noqa: E402
from fabric_jax.paths import PathsTruncatedWarning  # noqa: E402

PARTS = ("preflight", "kernels", "solve", "fluid", "events", "batched", "fluid_batched",
         "unroll", "variants", "scale", "compare", "scale_32k", "aot")

#: the parts run without ``--parts`` or ``--session``: the engine's, timed in this process.
DEFAULT_PARTS = ("kernels", "solve", "fluid", "events", "batched", "fluid_batched", "unroll",
                 "variants")
#: ``--session``: the parts a lent GPU runs in one call, in this order: the preflight
#: (it decides how the rest run), then the two single commands with a target (issue 25's
#: 8,192-GPU point, ``compare``'s wall time; each stopped at :data:`CHILD_CAP_S`), then
#: issue 24's table (fluid, solve, events), the variants and the batches; the
#: 32,768-GPU point last, as the time left allows.
SESSION_PARTS = ("preflight", "scale", "compare", "fluid", "solve", "events", "variants",
                 "batched", "fluid_batched", "unroll", "scale_32k")
#: seconds a child process of ``scale`` or of one ``compare`` run may take before it is
#: stopped (three times the 8,192-GPU target: past that the target is missed anyway,
#: and the session goes on); ``scale_32k`` gets the time left.
CHILD_CAP_S = {"scale": 180.0, "compare": 150.0}
#: ``--session``: seconds after which no part or row is started (a row already running
#: finishes; the device call's limit is 600 s, and the session's 15 minutes of device
#: time hold the machine's start as well).
SESSION_BUDGET_S = 480.0

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
                compiled = solve_program(inc, cap)
            row.update({f"{name}_first_s": first, f"{name}_steady_s": steady,
                        "iterations": it, f"{name}_per_iteration_s": steady / max(it, 1),
                        "bytes_per_flow": _bytes(compiled, n),
                        "fusions": _hlo.kernel_counts(compiled.as_text())["fusions"]})
        rows.append(row)
        yield rows


def solve_program(inc, cap):
    """The compiled program :func:`fabric_jax.max_min_fair` runs for ``(inc, cap)`` on the
    current default device: its jitted core compiled for the arguments it got (caught
    on the way in, after the host's choices: on an accelerator a segment table and no
    compaction), not the public function jitted whole (traced, it takes the CPU's)."""
    from fabric_jax.fairness import _api
    args, _ = _hlo.caught(_api, "_max_min_fair", lambda: fj.max_min_fair(inc, cap))
    return _api._max_min_fair.lower(*args).compile()


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
        from experiments.bench_dynamics import workload
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


def _here(fn, args: str, flags: str = "", env: dict | None = None,
          timeout: float | None = None):
    """``(result, stderr)``: ``fn(<args>)`` of this file, on this code, in a fresh process
    with ``flags`` added to ``XLA_FLAGS`` and the variables ``env`` set, stopped after
    ``timeout`` seconds (:func:`_call_in_process`)."""
    env = _child_env(**(env or {}))
    env["XLA_FLAGS"] = " ".join(x for x in (env.get("XLA_FLAGS", ""), flags) if x)
    return _call_in_process("bench_gpu", fn, args, Path(__file__).resolve().parents[1], env,
                            timeout)


def part_fluid(small, backends, baseline=None, max_flows=None, ab_repeats=1, hlo=True):
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
            if hlo:   # (--session leaves the recompile out: the aot part reads the GPU's)
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
    from experiments.bench_flowsim import coupled_instance
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
    from experiments.bench_flowsim import coupled_instance
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


def batched_instance(small):
    """``(k, flows, steps, batch, incidence, capacity, kwargs, sizes [batch, flows])``:
    ``b`` load levels (flow sizes 1e5 * 4^i bytes) of the fluid part's 10^4-flow DCQCN +
    PFC instance (``--small``: 2,000 flows, 4 levels), the scenarios of
    :func:`part_fluid_batched` and of the ``aot`` part's batched row."""
    k, n, steps, b = (8, 2_000, 20, 4) if small else (16, 10_000, 50, 8)
    topo, inc, cap = pair_instance(k, n)
    kw = dict(dt=1e-6, n_steps=steps, buffer=1e6, link_latency=np.asarray(topo.latency, float),
              nic_links=topo, **FLUID_CASES["dcqcn_pfc"])
    sizes = np.stack([np.full(n, 1e5 * 4.0 ** i, np.float32) for i in range(b)])
    return k, n, steps, b, inc, cap, kw, sizes


def part_fluid_batched(small, backends):
    """:func:`fabric_jax.simulate_fluid_batched` over :func:`batched_instance`'s
    scenarios against the same scenarios run one by one: each program compiled before
    the timing, medians of 2 repetitions, the step count the fluid part's."""
    k, n, steps, b, inc, cap, kw, sizes = batched_instance(small)
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


# ---------------------------------------------------------------- preflight
#: ``preflight`` part: the modes, each run in a fresh process: (name, environment).
PREFLIGHT_MODES = (("device_loops", {}), ("host_loops", _HOST_LOOPS))
#: ``preflight``: the largest relative difference between two sums still read as the
#: same computation.  A GPU's scatter-adds are atomic, so their float32 sums may come
#: out in another order from call to call, and a step-quantised finish time may move by
#: a step; a fault of the loops (a wrong branch, a stale buffer) moves the sums by far
#: more.
PREFLIGHT_RTOL = 1e-3
#: ``preflight``: seconds a mode's process may take (small programs: a hang, not a slow
#: compile, runs past it; the verdict then fails and the session goes on).
PREFLIGHT_TIMEOUT_S = 150.0


def _fingerprint(x) -> dict:
    """A few order-free figures of an array (its size, NaNs, infinities, and the sum,
    absolute sum, minimum and maximum of its finite values), compared between calls and
    between processes by :func:`_largest_difference`."""
    a = np.asarray(x, np.float64).ravel()
    fin = a[np.isfinite(a)]
    return dict(n=int(a.size), nan=int(np.isnan(a).sum()), inf=int(np.isinf(a).sum()),
                sum=float(fin.sum()), abs_sum=float(np.abs(fin).sum()),
                min=float(fin.min()) if fin.size else 0.0,
                max=float(fin.max()) if fin.size else 0.0)


def _largest_difference(a: dict, b: dict) -> float:
    """The largest relative difference between the sums of two fingerprints (of
    :func:`_fingerprint`, or dicts of them), ``inf`` where their counts differ (the
    minimum and maximum are single values, a step-quantised time among them: kept for
    the record, not compared)."""
    if set(a) != set(b):
        return float("inf")
    worst = 0.0
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, dict):
            worst = max(worst, _largest_difference(x, y))
        elif key in ("n", "nan", "inf"):
            worst = max(worst, 0.0 if x == y else float("inf"))
        elif key in ("sum", "abs_sum"):
            worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-30))
    return worst


def preflight_row(small: bool = False, calls: int = 3) -> dict:
    """Each engine called ``calls`` times on the default device, in this process (run by
    the ``preflight`` part in a fresh process per mode): the exact one-off solve
    (:func:`fabric_jax.max_min_fair`), a DCQCN + PFC fluid run and a batch of them, the
    event engine and a batch of it (instances of the ``solve``, ``fluid`` and ``events``
    parts, smaller).  Per engine: the first call's seconds (compile included), the
    later calls' median, each call's :func:`_fingerprint`, whether the calls agree with
    the first (:data:`PREFLIGHT_RTOL`), and NaNs.  A call that raises ends the row with
    ``error`` (a crash ends the process: the part says so)."""
    from experiments.bench_flowsim import coupled_instance
    k, n, steps, n_ev = (8, 500, 20, 100) if small else (16, 10_000, 50, 1_000)
    topo, inc, cap = pair_instance(k, n)
    size = np.full(n, 1e5, np.float32)
    kw = dict(dt=1e-6, n_steps=steps, buffer=1e6, link_latency=np.asarray(topo.latency, float),
              nic_links=topo, **FLUID_CASES["dcqcn_pfc"])
    ev_inc, c, a, sz = coupled_instance(n_ev, 0)
    c, a, sz = (x.astype(np.float32) for x in (c, a, sz))
    engines = {
        "max_min_fair": lambda: {"rates": fj.max_min_fair(inc, cap).rates},
        "simulate_fluid": lambda: (lambda r: {"delivered": r.delivered, "finish": r.finish})(
            fj.simulate_fluid(inc, cap, size, **kw)),
        "simulate_fluid_batched": lambda: {"delivered": fj.simulate_fluid_batched(
            inc, cap, np.stack([size, 2 * size]), **kw).delivered},
        "simulate_flows": lambda: {"finish": fj.simulate_flows(ev_inc, c, a, sz,
                                                               max_active=n_ev).finish},
        "simulate_flows_batched": lambda: {"finish": fj.simulate_flows_batched(
            ev_inc, np.stack([c, c]), np.stack([a, a]), np.stack([sz, 2 * sz]),
            max_active=n_ev).finish},
    }
    row = dict(device=str(jax.devices()[0]), flows=n, event_flows=n_ev, calls=calls,
               device_loops=_device_loops_setting())
    if os.environ.get("BENCH_GPU_FAULT") == "device_loops" and row["device_loops"]:
        # (the tests' stand-in for a GPU on which the device loops crash)
        raise RuntimeError("BENCH_GPU_FAULT=device_loops: this process fails on purpose")
    for name, fn in engines.items():
        times, prints = [], []
        try:
            for _ in range(calls):
                t0 = time.perf_counter()
                out = _block(fn())
                times.append(time.perf_counter() - t0)
                prints.append({key: _fingerprint(v) for key, v in out.items()})
        except Exception as err:   # noqa: BLE001 - the row says what failed
            row[name] = dict(error=f"{type(err).__name__}: {err}"[-300:], calls_done=len(times))
            continue
        repeat = max((_largest_difference(prints[0], q) for q in prints[1:]), default=0.0)
        row[name] = dict(first_s=times[0], later_s=float(np.median(times[1:] or times)),
                         fingerprint=prints[0], repeat_max_rel_diff=repeat,
                         nan=sum(f["nan"] for f in prints[0].values()))
    return row


def _device_loops_setting() -> bool:
    from fabric_jax import compiling
    return bool(compiling.compiler_options())


def part_preflight(small, backends, state):
    """Whether the engines run, repeat and agree on this device with their loops kept
    on it (:mod:`fabric_jax.compiling`: XLA:GPU command buffers with while loops as CUDA
    graph conditional nodes, which XLA does not turn on by default) and with every loop
    on the host (``FABRIC_JAX_DEVICE_LOOPS=0``): :func:`preflight_row` in a fresh process
    per mode (:data:`PREFLIGHT_MODES`), each engine called several times (a command
    buffer is recorded on the first call and updated on the next: where XLA has had bugs).
    The verdict goes into ``state``: ``device_loops_ok`` is false when the device-loops
    process fails, gives NaNs, disagrees with itself or with the host-loops process
    beyond :data:`PREFLIGHT_RTOL`; :func:`main` then runs the other parts with
    ``FABRIC_JAX_DEVICE_LOOPS=0`` (in a child process) and the JSON says so."""
    rows, prints = [], {}
    for mode, env in PREFLIGHT_MODES:
        t0 = time.perf_counter()
        r, err = _here("preflight_row", repr(bool(small)), env=env,
                       timeout=min(state.get("timeout") or PREFLIGHT_TIMEOUT_S,
                                   PREFLIGHT_TIMEOUT_S))
        row = dict(mode=mode, process_wall_s=time.perf_counter() - t0)
        if r is None:
            row["error"] = (err.strip().splitlines() or ["?"])[-1][-300:]
        else:
            engines = [e for e in r if isinstance(r[e], dict)]
            failed = [e for e in engines if "error" in r[e]]
            row.update(device_loops=r["device_loops"], engines=len(engines),
                       failed=",".join(failed) or None,
                       nan=sum(r[e].get("nan", 0) for e in engines),
                       repeat_max_rel_diff=max((r[e].get("repeat_max_rel_diff", 0.0)
                                                for e in engines if e not in failed),
                                               default=0.0),
                       first_s=sum(r[e]["first_s"] for e in engines if e not in failed),
                       later_s=sum(r[e]["later_s"] for e in engines if e not in failed),
                       detail=r)
            if failed:
                row["error"] = "; ".join(f"{e}: {r[e]['error']}" for e in failed)[-300:]
            prints[mode] = {e: r[e]["fingerprint"] for e in engines if e not in failed}
        rows.append(row)
        yield rows
    dev, host = rows[0], rows[1]
    diff = (_largest_difference(prints["device_loops"], prints["host_loops"])
            if set(prints) == {"device_loops", "host_loops"} else None)
    dev["max_rel_diff_vs_host_loops"] = diff
    ok = ("error" not in dev and dev["nan"] == 0
          and dev["repeat_max_rel_diff"] <= PREFLIGHT_RTOL
          and (diff is None or diff <= PREFLIGHT_RTOL))
    state["device_loops_ok"] = ok
    state["verdict"] = (
        "device loops run and agree with host loops" if ok and diff is not None else
        "device loops run (the host-loops process failed: not compared)" if ok else
        f"device loops failed or disagree ({dev.get('error') or 'NaN or difference'}); "
        f"host loops: {'ok' if 'error' not in host else host['error']}")
    yield rows


# -------------------------------------------------------------- scale, compare
def _child_env(**extra) -> dict:
    """This process's environment, with ``extra`` and this repository first on
    ``PYTHONPATH``, for a child on the same device (JAX's preallocation is off in
    :func:`main`, so the child finds the memory the parent does not use)."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(root), env.get("PYTHONPATH", "")) if x)
    return env


def _driver(dev) -> dict:
    """The runtime's own version string (on a GPU it names the CUDA version: whether
    CUDA graph conditional nodes, CUDA >= 12.3, are there) and ``nvidia-smi``'s driver
    version and memory where it exists."""
    info = {"platform_version": str(getattr(dev.client, "platform_version", "?"))}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20)
        if smi.returncode == 0 and smi.stdout.strip():
            info["nvidia_smi"] = smi.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def _capped(left, cap):
    """The smaller of the time left (``None``: no budget) and ``cap`` (``None``: none)."""
    known = [x for x in (left, cap) if x is not None]
    return min(known) if known else None


def _run_child(cmd, env, timeout) -> dict:
    """``cmd`` in the repository's root: wall seconds, exit status (``None`` and
    ``timed_out`` when it ran past ``timeout`` seconds), the tail of its error output."""
    root = Path(__file__).resolve().parents[1]
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(wall_s=time.perf_counter() - t0, rc=None, timed_out=True)
    row = dict(wall_s=time.perf_counter() - t0, rc=out.returncode, timed_out=False)
    if out.returncode != 0:
        row["error"] = (out.stderr.strip().splitlines() or ["?"])[-1][-300:]
    return row


#: ``scale`` / ``scale_32k``: issue 25's targets on one H200 (seconds, all four presets
#: and the ideal fabric, one training step of the default model).
SCALE_TARGETS_S = {8192: 60.0, 32768: 300.0}


def part_scale(small, backends, state, gpus=8192):
    """Issue 25's scale point: ``experiments/scale_sweep.py --gpus N`` (all four presets
    and the ideal fabric, the default model and fabric) as a user runs it, in a fresh
    process on the default device, its wall time against :data:`SCALE_TARGETS_S`, and
    each preset's headline figures from its JSON (``--small``: 16 GPUs, or 32 for
    ``scale_32k``, ``roce`` only, a 20 us slice)."""
    out_dir = Path(state["json_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    n = {8192: 16, 32768: 32}.get(int(gpus), 16) if small else int(gpus)
    path = out_dir / f"scale_{n}.json"
    cmd = [sys.executable, "experiments/scale_sweep.py", "--gpus", str(n), "--quiet",
           "--json", str(path)] + (["--fabrics", "roce", "--slice-us", "20"] if small else [])
    row = dict(gpus=n, command=" ".join(["python"] + cmd[1:]), json=str(path),
               target_s=None if small else SCALE_TARGETS_S.get(n))
    cap = CHILD_CAP_S["scale"] if int(gpus) == 8192 else None
    row.update(_run_child(cmd, _child_env(), _capped(state.get("timeout"), cap)))
    if row["target_s"] is not None:
        row["within_target"] = bool(row["rc"] == 0 and row["wall_s"] <= row["target_s"])
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        yield [row]
        return
    row.update(complete=data.get("complete"), sweep_wall_s=data.get("wall_s"),
               sweep_cpu_s=data.get("cpu_s"), device=data.get("device"))
    for p in data.get("points", []):
        for name, f in list(p.get("fabrics", {}).items()) + [("ideal", p.get("ideal") or {})]:
            for key in ("step_time", "gpu_utilization", "p99_over_p50", "effective_bandwidth",
                        "wall_s", "n_steps", "simulated_flows"):
                if key in f:
                    row[f"{name}_{key}"] = f[key]
    yield [row]


def part_scale_32k(small, backends, state):
    """:func:`part_scale` at 32,768 GPUs (issue 25's 5-minute target on one H200)."""
    yield from part_scale(small, backends, state, gpus=32768)


def _numbers(x, path=""):
    """``{path: value}`` for every number of a JSON document except the run's own
    timings (keys ending in ``wall_s`` or ``cpu_s``, or named ``seconds`` or
    ``elapsed_s``)."""
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            if str(k).endswith(("wall_s", "cpu_s")) or k in ("seconds", "elapsed_s"):
                continue
            out.update(_numbers(v, f"{path}/{k}"))
        return out
    if isinstance(x, list):
        out = {}
        for i, v in enumerate(x):
            out.update(_numbers(v, f"{path}/{i}"))
        return out
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return {}
    return {path: float(x)}


def _tiny_scenario(folder: Path) -> Path:
    """``--small``'s scenario for ``compare``: a 4-server leaf-spine, ``roce`` only."""
    path = folder / "tiny.toml"
    path.write_text(
        '[topology]\nkind = "leaf_spine"\nn_servers = 4\nnics_per_server = 1\n'
        'servers_per_leaf = 2\nn_spines = 1\n\n[workload]\ntrain_servers = 2\n'
        'tenant_servers = 2\nep_servers = 2\ntenant_fan_in = 1\nbackground_load = 0.0\n\n'
        '[simulation]\nn_steps = 50\nisolation = false\n\n[fabrics]\npresets = ["roce"]\n')
    return path


def part_compare(small, backends, state):
    """``fabric-jax compare`` on the built-in scenario as a user runs it (its own
    process; ``--small``: a 4-server scenario, ``roce`` only): on the default device
    with an empty compilation cache (``cold``: the first run on a machine) and again
    with the cache it filled (``warm``: every later run), then on this machine's CPU
    backend (cold) when the default is an accelerator, with the largest relative
    difference of any figure in its JSON from the default device's (timings left out)."""
    out_dir = Path(state["json_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench_compare_"))
    extra = ["--scenario", str(_tiny_scenario(tmp))] if small else []
    accel = backends["default"].platform
    runs = [(accel, "cold"), (accel, "warm")] + ([("cpu", "cold")] if accel != "cpu" else [])
    rows, first = [], None
    for platform, cache in runs:
        path = out_dir / f"compare_{platform}_{cache}.json"
        env = _child_env(FABRIC_JAX_CACHE=str(tmp / f"cache_{platform}"))
        if platform == "cpu":
            env["JAX_PLATFORMS"] = "cpu"
        cmd = [sys.executable, "-m", "fabric_jax", "compare", "--quiet", "--json",
               str(path)] + extra
        row = dict(backend=platform, cache=cache,
                   command=" ".join(["fabric-jax"] + cmd[3:]))
        row.update(_run_child(cmd, env, _capped(state.get("timeout"), CHILD_CAP_S["compare"])))
        try:
            nums = _numbers(json.loads(path.read_text()))
        except (OSError, ValueError):
            nums = None
        if nums is not None and first is None:
            first = nums
        elif nums is not None:
            shared = set(first) & set(nums)
            rel = [abs(first[k] - nums[k]) / max(abs(first[k]), abs(nums[k]), 1e-30)
                   for k in shared]
            row.update(figures=len(shared), max_rel_diff_vs_first=max(rel, default=0.0),
                       figures_over_1pct=sum(r > 0.01 for r in rel))
        rows.append(row)
        yield rows
    shutil.rmtree(tmp, ignore_errors=True)


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
    trips = _hlo.run_trips(depths, {key: max(int(unroll), v) for key, v in first.items()},
                           check_every)
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
    from fabric_jax import segments
    from fabric_jax.fairness import _api
    topo, inc, cap = pair_instance(k, n)
    res = fj.max_min_fair(inc, cap)
    iters = int(res.info.iterations)
    with segments.forced("gather"):
        ginc, compaction = _api._for_backend(inc)
    dtype = jnp.result_type(float)
    args = (ginc, jnp.asarray(cap, dtype), jnp.full((inc.n_flows,), jnp.inf, dtype))
    buffers = []
    compiled = _hlo.compile_for(_api._max_min_fair, (), args + (None, inc.n_flows + 1,
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


def aot_batched_row(small, target):
    """The ``aot`` part's row for :func:`fabric_jax.simulate_fluid_batched` on
    :func:`batched_instance`'s scenarios: XLA:GPU's program for the batch (one ``vmap``
    of the run) against the program for one scenario alone, kernels per step from
    :func:`_hlo.launch_model` with each exact loop's trips per step.  A vmapped while
    loop runs until its deepest scenario has converged, and each scenario's depths in
    the batch are its own run's (``tests/experiments/test_launch_model.py``, step by step), so the
    batch's trips are, step by step, the deepest scenario's
    (:func:`_hlo.batch_trips`), recorded here from each scenario run alone in the
    accelerator form."""
    from fabric_jax import fluid, segments
    from fabric_jax.fluid import loop
    k, n, steps, b, inc, cap, kw, sizes = batched_instance(small)
    depths = []
    for i in range(b):
        with _hlo.solve_depths() as rec, segments.forced("gather"):
            _block(fj.simulate_fluid(inc, cap, sizes[i], **kw).finish)
        depths.append(dict(rec))
    with segments.forced("gather"):
        static, args = _hlo.batched_program(
            [fluid.simulate.prepare_kwargs(inc, cap, sizes[i], **kw) for i in range(b)])
    buffers, alone_buffers = [], []
    device = _hlo.gpu_device(target)
    text = _hlo.compile_for(loop.run_batched_jit, static, args, device,
                            buffers=buffers).as_text()
    alone, _ = _hlo.compiled_fluid_run(inc, cap, sizes[0], target=target,
                                       buffers=alone_buffers, **kw)
    alone_text = alone.as_text()
    first = _hlo.first_iterations("cuda")
    on_device = {x for buf in buffers for x in buf}
    batch = _hlo.launch_model(text, _hlo.batch_trips(depths, first), on_device=on_device)
    each = [_hlo.launch_model(alone_text, _hlo.run_trips(d, first),
                              on_device={x for buf in alone_buffers for x in buf})
            for d in depths]
    alone_kernels = float(np.mean([m["kernels_per_step"] for m in each]))
    return dict(instance=f"fat_tree({k}) batched", flows=n, case="dcqcn_pfc", batch=b,
                target=target, n_steps=steps,
                solve_iterations_per_step=float(np.mean(np.max(
                    [d["allocate"] for d in depths], axis=0))),
                fusions_in_program=len(_hlo._FUSION.findall(text)),
                alone_fusions_in_program=len(_hlo._FUSION.findall(alone_text)),
                kernels_per_step=batch["kernels_per_step"],
                kernels_per_scenario_step=batch["kernels_per_step"] / b,
                alone_kernels_per_step=alone_kernels,
                launches_alone_over_batched=alone_kernels / (batch["kernels_per_step"] / b),
                round_trips_per_step=batch["round_trips_per_step"],
                command_buffers=len(buffers), loops_on_device=_on_device_share(text, on_device))


#: The event engine's cores take these last, by name (``fabric_jax.sim._events.run_events``).
EVENT_KEYWORDS = ("warm", "tolerance", "has_deps")


def aot_events_row(n, target):
    """A row of the ``aot`` part for :func:`fabric_jax.simulate_flows` (exact events) on
    ``events``' coupled instance of ``n`` flows: its events (run on this host) and
    XLA:GPU's program for it -- its loops and conditionals, and which of them XLA:GPU
    runs on the device (recorded into command buffers).  With every loop on the host
    the event loop alone tests its condition once per event and once more at its exit
    (``host_loops_round_trips_per_run_at_least``; each event's solve loops and branches
    add theirs)."""
    from experiments.bench_flowsim import coupled_instance
    from fabric_jax.sim import _events
    inc, c, a, s = coupled_instance(n, 0)
    c, a, s = (x.astype(np.float32) for x in (c, a, s))
    args, res = _hlo.caught(_events, "simulate_events",
                            lambda: fj.simulate_flows(inc, c, a, s, max_active=n), EVENT_KEYWORDS)
    buffers = []
    compiled = _hlo.compile_for(_events.simulate_events, (), args, _hlo.gpu_device(target),
                                buffers=buffers)
    text = compiled.as_text()
    on_device = {name for b in buffers for name in b}
    counts = _hlo._Program(text, on_device=on_device).on_device_counts()
    (loops_dev, n_loops), (conds_dev, n_conds) = counts["while"], counts["conditional"]
    all_dev = loops_dev == n_loops and conds_dev == n_conds
    events = int(res.n_events)
    batched = _batched_events_program(n, 4, target)
    return dict(instance="coupled", flows=n, case="simulate_flows", target=target,
                events=events, fusions_in_program=len(_hlo._FUSION.findall(text)),
                kernels_in_program=len(_hlo._KERNEL.findall(text)),
                loops_on_device=f"{loops_dev}/{n_loops}",
                conditionals_on_device=f"{conds_dev}/{n_conds}",
                command_buffers=len(buffers),
                round_trips_per_run=0.0 if all_dev else None,
                host_loops_round_trips_per_run_at_least=events + 1,
                bytes_per_flow=_bytes(compiled, n), **batched)


def _batched_events_program(n, b, target):
    """XLA:GPU's program for :func:`fabric_jax.simulate_flows_batched` over ``b`` seeds
    of ``events``' coupled instance of ``n`` flows (``part_batched``'s scenarios): its
    loops and how many XLA:GPU runs on the device, as ``batched_*`` columns."""
    from experiments.bench_flowsim import coupled_instance
    from fabric_jax.sim import _batched
    inc, c, _, _ = coupled_instance(n, 0)
    sizes = np.stack([coupled_instance(n, i)[3] for i in range(b)]).astype(np.float32)
    caps = np.broadcast_to(c.astype(np.float32), (b, c.size))
    args, _ = _hlo.caught(_batched, "_simulate_events_batched", lambda: fj.simulate_flows_batched(
        inc, caps, np.zeros((b, n), np.float32), sizes, max_active=n), EVENT_KEYWORDS)
    buffers = []
    text = _hlo.compile_for(_batched._simulate_events_batched, (), args, _hlo.gpu_device(target),
                            buffers=buffers).as_text()
    on_device = {name for buf in buffers for name in buf}
    return dict(batched_scenarios=b, batched_fusions_in_program=len(_hlo._FUSION.findall(text)),
                batched_loops_on_device=_on_device_share(text, on_device),
                batched_command_buffers=len(buffers))


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
    if not max_flows or (2_000 if small else 10_000) <= max_flows:
        rows.append(aot_batched_row(small, target))
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


def _call_in_process(module: str, fn: str, args: str, cwd, env, timeout=None):
    """``(result, stderr)``: ``experiments/<module>.<fn>(<args>)`` run in a fresh Python
    process in ``cwd`` with ``env``, its JSON result read from the last line printed
    (``None`` when the process fails, or runs past ``timeout`` seconds)."""
    code = (f"import json, sys, jax; from experiments import {module} as b;"
            f"print(json.dumps(b.{fn}({args}), default=float))")
    try:
        out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env,
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"stopped after {timeout:.0f} s (the time left to the run)"
    if out.returncode != 0:
        return None, out.stderr or f"exit status {out.returncode}"
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="CPU-sized smoke run")
    ap.add_argument("--parts", default=None,
                    help=f"comma-separated subset of {','.join(PARTS)} (default: "
                         f"{','.join(DEFAULT_PARTS)}; with --session: "
                         f"{','.join(SESSION_PARTS)})")
    ap.add_argument("--session", action="store_true",
                    help="the one call a lent GPU gets: the session parts, most wanted "
                         "first, started within --budget-s (default "
                         f"{SESSION_BUDGET_S:.0f}); e.g. --json $OUT/gpu.json")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="start no part or row after this many seconds (a row already "
                         "running finishes; child processes are stopped at it); the "
                         "JSON lists what was left out")
    ap.add_argument("--continue-from", default=None, help=argparse.SUPPRESS)
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
    ap.add_argument("--markdown", default=None, metavar="JSON",
                    help="print issue 24's table and issue 25's targets from this JSON "
                         "(a run's) as Markdown, and exit")
    a = ap.parse_args(argv)
    if a.markdown:
        text = markdown(json.loads(Path(a.markdown).read_text()))
        print(text)
        return text
    default = SESSION_PARTS if a.session else DEFAULT_PARTS
    parts = [p for p in (a.parts.split(",") if a.parts else default) if p]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        ap.error(f"--parts: unknown {bad}; choose from {list(PARTS)}")
    budget = a.budget_s if a.budget_s is not None else (SESSION_BUDGET_S if a.session
                                                          else None)
    if budget is not None and not budget >= 0:
        ap.error(f"--budget-s: seconds >= 0; got {budget}")
    if "aot" in parts:   # before the backend starts: the CUDA plugin reads it on load
        _hlo.log_command_buffers()
    # Before the backend starts: JAX takes 75 % of a GPU's memory when it starts, and the
    # parts that run a child process on the same GPU (preflight, variants, scale,
    # compare) would find none left.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    accel = jax.devices()[0]
    backends = {"default": accel}
    if accel.platform != "cpu":
        backends["cpu"] = jax.devices("cpu")[0]
    if a.continue_from:   # the rest of a run, in a child with other settings (below)
        out = json.loads(Path(a.continue_from).read_text())
    else:
        out = dict(device=dict(device_info(), **_driver(accel)),
                   date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   small=a.small, started=time.time(), parts={})
    out.setdefault("env", {})[accel.platform if not a.continue_from else "continued"] = {
        key: os.environ.get(key) for key in ("XLA_PYTHON_CLIENT_PREALLOCATE",
                                             "FABRIC_JAX_DEVICE_LOOPS", "XLA_FLAGS")}
    out["device_loops"] = _device_loops_setting()
    baseline = baseline_runner(a.baseline_rev) if a.baseline_rev else None
    state = dict(json_dir=str(Path(a.json).resolve().parent), timeout=None)
    gens = dict(preflight=lambda: part_preflight(a.small, backends, state),
                kernels=lambda: part_kernels(a.small, backends, baseline),
                solve=lambda: part_solve(a.small, backends, a.max_flows, a.only_k),
                fluid=lambda: part_fluid(a.small, backends, baseline, a.max_flows,
                                         a.ab_repeats, hlo=not a.session),
                events=lambda: part_events(a.small, backends),
                batched=lambda: part_batched(a.small, backends),
                fluid_batched=lambda: part_fluid_batched(a.small, backends),
                unroll=lambda: part_unroll(a.small, backends),
                variants=lambda: part_variants(a.small, backends),
                scale=lambda: part_scale(a.small, backends, state),
                scale_32k=lambda: part_scale_32k(a.small, backends, state),
                compare=lambda: part_compare(a.small, backends, state),
                aot=lambda: part_aot(a.small, backends, a.target, baseline, a.max_flows))
    t0 = time.time()
    deadline = None if budget is None else t0 + budget
    if budget is not None:
        out.setdefault("budget_s", budget)

    def left():
        return None if deadline is None else deadline - time.time()

    def save():
        write_json(a.json, out, started=out.get("started", t0), inputs=vars(a))

    for i, p in enumerate(parts):
        if deadline is not None and left() <= 0:
            out.setdefault("skipped", []).append(p)
            save()
            print(f"{p}: skipped (--budget-s {budget:.0f} s spent)", flush=True)
            continue
        state["timeout"] = left()
        gen = gens[p]()
        for rows in gen:
            out["parts"][p] = rows
            out["wall_s"] = time.time() - out.get("started", t0)
            save()
            print(p, json.dumps({k: v for k, v in rows[-1].items()
                                 if not isinstance(v, dict)}, default=float), flush=True)
            if deadline is not None and left() <= 0:
                gen.close()
                out.setdefault("truncated", []).append(p)
                save()
                print(f"{p}: stopped after {len(rows)} rows (--budget-s)", flush=True)
                break
            state["timeout"] = left()
        if p == "preflight":
            out["preflight"] = {key: state.get(key) for key in ("device_loops_ok", "verdict")}
            save()
            rest = parts[i + 1:]
            if state.get("device_loops_ok") is False and _device_loops_setting() and rest:
                # the rest with every loop on the host, in a child: fabric_jax reads the
                # setting when it is imported
                out["device_loops_turned_off"] = state["verdict"]
                save()
                print(f"preflight: {state['verdict']}; the other parts run with "
                      "FABRIC_JAX_DEVICE_LOOPS=0", flush=True)
                cmd = [sys.executable, str(Path(__file__).resolve()), "--parts",
                       ",".join(rest), "--json", a.json, "--continue-from", a.json]
                cmd += (["--small"] if a.small else []) + (["--session"] if a.session else [])
                cmd += [] if deadline is None else ["--budget-s", f"{max(left(), 0.0):.1f}"]
                for flag, v in (("--max-flows", a.max_flows), ("--only-k", a.only_k),
                                ("--target", a.target), ("--baseline-rev", a.baseline_rev)):
                    cmd += [] if v is None else [flag, str(v)]
                subprocess.run(cmd, env=_child_env(FABRIC_JAX_DEVICE_LOOPS="0"))
                return json.loads(Path(a.json).read_text())
    print(summary(out))
    print(f"written to {a.json} ({out.get('wall_s', 0.0):.0f} s)")
    return out


#: The GPU issue 24 measured its "before" on and set its goals for (with JAX 0.11; the
#: same machine's 16-core CPU); the table's header names it beside the device run on,
#: which may be another (an H100), so that the columns are not read as one machine's.
ISSUE_24_DEVICE = "H200"
#: issue 24's table, as the issue measured it before, with its goals: (label, instance,
#: before on the GPU, before on the CPU, goal).
ISSUE_24_BEFORE = {
    ("solve", 16, 100_000): ("`max_min_fair` (exact)", "`fat_tree(16)`, 100k random pairs",
                             "31 ms", "314 ms", "<= 1 ms"),
    ("solve", 16, 1_000_000): ("`max_min_fair`", "`fat_tree(16)`, 1M flows", "2.0 s",
                               "12.1 s", "<= 10 ms"),
    ("solve", 32, 1_000_000): ("`max_min_fair`", "`fat_tree(32)`, 1M flows", "143 ms",
                               "5.65 s", "<= 10 ms"),
    ("fluid", 16, 100_000): ("`simulate_fluid`, DCQCN + PFC, 1 us steps",
                             "`fat_tree(16)`, 100k flows", "5.8 ms per step", "110 ms per step",
                             "<= 0.1 ms per step"),
    ("fluid", 32, 1_000_000): ("`simulate_fluid`, same", "`fat_tree(32)`, 1M flows",
                               "80 ms per step", "-", "<= 1 ms per step"),
    ("events", None, 10_000): ("`simulate_flows` (exact events)", "10k coupled flows", "7.7 s",
                               "9.3 s", ">= 10x the CPU"),
    ("events", None, 3_000): ("`simulate_flows`", "3k coupled flows", "1.49 s", "0.44 s",
                              "faster than the CPU"),
    ("compare", None, None): ("`fabric-jax compare`", "default scenario", "17 s wall",
                              "21 s wall", "<= 5 s"),
}


def _t(x) -> str:
    """Seconds as a short figure with its unit."""
    if x is None:
        return "-"
    return f"{x * 1e3:.3g} ms" if x < 1 else f"{x:.3g} s"


def markdown(out: dict) -> str:
    """Issue 24's table (before, now on this device and its CPU backend, goal) and issue
    25's targets from a ``bench_gpu.py`` JSON, as Markdown for the docs: every figure
    is the JSON's, none typed in."""
    d, parts = out["device"], out.get("parts", {})
    found = {}
    for r in parts.get("solve", []):
        found[("solve", r["k"], r["flows"])] = (_t(r.get("default_steady_s")),
                                                _t(r.get("cpu_steady_s")))
    for r in parts.get("fluid", []):
        if r.get("case") == "dcqcn_pfc":
            now = (f"{_t(r.get('step_s'))} per step "
                   f"({r.get('flow_steps_per_s', 0):.3g} flow-steps/s)")
            found[("fluid", r["k"], r["flows"])] = (now, f"{_t(r.get('cpu_step_s'))} per step"
                                                    if r.get("cpu_step_s") else "-")
    for r in parts.get("events", []):
        found[("events", None, r["flows"])] = (_t(r.get("steady_s")), _t(r.get("cpu_steady_s")))
    runs = {(r["backend"], r["cache"]): r for r in parts.get("compare", [])}
    accel = d.get("platform")
    if (accel, "cold") in runs and not out.get("small"):   # (--small: a tiny scenario)
        now = (f"{_t(runs[(accel, 'cold')]['wall_s'])} wall cold, "
               f"{_t(runs.get((accel, 'warm'), {}).get('wall_s'))} warm")
        cpu = runs.get(("cpu", "cold")) if accel != "cpu" else None
        found[("compare", None, None)] = (now, "-" if cpu is None else
                                          f"{_t(cpu['wall_s'])} wall cold")
    lines = [f"{d.get('device')} ({d.get('platform')}, {d.get('platform_version', '?')}), "
             f"jax {d.get('jax')}, {d.get('cpu_count')} CPU cores, {out.get('date')}; "
             "device loops "
             f"{'on' if out.get('device_loops') else 'off'}"
             + (f" ({out['device_loops_turned_off']})" if out.get("device_loops_turned_off")
                else ""),
             "",
             f"| kernel | instance | before: {ISSUE_24_DEVICE} | before: its CPU | now: "
             f"{d.get('device')} | now: its CPU backend | goal on the {ISSUE_24_DEVICE} |",
             "|---|---|---|---|---|---|---|"]
    for key, (label, inst, gpu0, cpu0, goal) in ISSUE_24_BEFORE.items():
        now, cpu = found.get(key, ("not run", "-"))
        lines.append(f"| {label} | {inst} | {gpu0} | {cpu0} | {now} | {cpu} | {goal} |")
    scale = parts.get("scale", []) + parts.get("scale_32k", [])
    if scale:
        lines += ["", "| GPUs | wall (all presets + ideal) | target | within |",
                  "|---|---|---|---|"]
        for r in scale:
            wall = ("stopped at " if r.get("timed_out") else "") + _t(r.get("wall_s"))
            lines.append(f"| {r['gpus']:,} | {wall} | {_t(r.get('target_s'))} | "
                         f"{r.get('within_target', '-')} |")
    left = out.get("skipped", []) + out.get("truncated", [])
    if left:
        lines += ["", f"Not run or cut short (--budget-s): {', '.join(left)}."]
    return "\n".join(lines)


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
