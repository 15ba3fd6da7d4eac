"""Kernel counts from compiled XLA programs: the CPU proxy of GPU kernel launches.

XLA compiles a program into *fusions*; on a GPU each fusion is (about) one kernel launch,
about 5 us whatever its size, so a time step made of hundreds of small fusions is
launch-bound long before it is memory-bound.  ``compiled.as_text()`` (the optimised HLO)
shows them on any backend: this module counts the fusions of a program, of each of its
loops, and the launches one step of the outer time loop costs given the trip counts of
the loops inside it (measured, e.g. :attr:`fabric_jax.FluidInfo.solver_iterations`).

The counts are XLA-version and backend dependent (the CPU backend fuses less than the
GPU's: no multi-output sibling fusion, reductions handed to YNNPACK stand alone), so they
are compared within one run, before and after a change.

**XLA:GPU's own program, without a GPU.**  :func:`gpu_device` gives a compile-only
device of XLA's CUDA backend for an H100 or H200 (the device descriptions in
``experiments/gpu_targets/``), through JAX's CUDA plugin, which compiles without the GPU
when given the device description (``jax.experimental.topologies``); install it in an
environment of its own (``pip install "jax[cuda12]"``; on a host without a GPU run with
``JAX_PLATFORMS=cpu``).  :func:`compiled_fluid_run` with ``target="h200"`` compiles the
fluid run for it, and :func:`launch_model` reads from that program what one time step
costs the GPU runtime: kernels (fusions, copies, library calls) and **host round trips**.
A ``while`` loop whose trip count XLA does not know evaluates its condition on the
device, copies the predicate to the host and waits for it, every iteration (XLA's
``WhileThunk``); a loop with a known trip count (``fori_loop``, ``scan``) runs its body
that many times with no round trip, and so does a ``while`` recorded into a command
buffer (a CUDA graph), where a conditional node runs it on the device
(``fabric_jax.compiling``: fabric_jax's programs ask for it).  XLA:GPU decides which
thunks go into command buffers after the HLO is final and says so in its log only;
:func:`compile_for` with ``buffers=[]`` reads that log (:func:`log_command_buffers`
must run before JAX's backend starts), and :func:`launch_model` / :func:`run_launches`
take the loops it put on the device.  These are what a step costs in launches and
stalls, not its time.
"""

from __future__ import annotations

import re

__all__ = ["kernel_counts", "compiled_text", "compiled_fluid_run", "launches_per_step",
           "gpu_device", "compile_for", "launch_model", "solve_launches", "run_launches",
           "solve_depths", "loop_trips", "run_trips", "batch_trips", "EXACT_LOOPS",
           "cuda_plugin", "CUDA_PLUGINS", "GPU_TARGETS", "log_command_buffers", "DRIVER"]

#: Device descriptions for :func:`gpu_device` (``experiments/gpu_targets/<name>.txtpb``).
GPU_TARGETS = ("h100", "h200")
#: The CUDA driver and runtime version :func:`gpu_device` describes by default.  An
#: assumption about the machine: 12.9 is the CUDA runtime the ``jax[cuda12]`` 0.10 wheels
#: install, with a driver at least as new (NVIDIA: a driver supports the features of the
#: toolkits up to its own version).  XLA:GPU records ``while`` and ``conditional`` into
#: CUDA graphs only with a driver and runtime >= 12.3; without a version (``driver=None``)
#: a deviceless compile knows none (0.0.0) and keeps every loop on the host.
DRIVER = "12.9.0"
#: The environment that makes XLA:GPU's compiler log its command buffers.
_CB_LOG = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "command_buffer_conversion_pass=3"}
_CB_LINE = re.compile(r"Creating command buffer thunk with the following thunks: (.*)$", re.M)
_CB_CONFIG = "CommandBufferConfig"

_FUSION = re.compile(r"^\s*(?:ROOT )?%\S+ = .*? fusion\(", re.M)
#: Instructions that run as a kernel (or a memcpy / library call) of their own on a GPU.
_KERNEL = re.compile(r"^\s*(?:ROOT )?%\S+ = .*? (?:fusion|copy|custom-call|sort|scatter|"
                     r"all-reduce|all-gather|reduce-scatter|all-to-all)\(", re.M)
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_WHILE = re.compile(r"^\s*(?:ROOT )?%(\S+) = .*? while\(.*?condition=(%[\w.\-]+), "
                    r"body=(%[\w.\-]+)", re.M)
_BRANCHES = re.compile(r"^\s*(?:ROOT )?%(\S+) = .*? conditional\(.*?(?:true_computation="
                       r"(%[\w.\-]+), false_computation=(%[\w.\-]+)|"
                       r"branch_computations=\{([^}]*)\})", re.M)


def compiled_text(fn, *args, **kwargs) -> str:
    """The optimised HLO of ``jax.jit(fn)(*args, **kwargs)`` (``fn`` may be jitted)."""
    import jax
    lowered = (fn if hasattr(fn, "lower") else jax.jit(fn)).lower(*args, **kwargs)
    return lowered.compile().as_text()


def compiled_fluid_run(*args, target: str | None = None, depths: dict | None = None,
                       buffers: list | None = None, **kwargs):
    """``(compiled, result)``: a fluid run with :func:`fabric_jax.simulate_fluid`'s
    arguments, through the engine's contract: the problem prepared on the host
    (:func:`fabric_jax.fluid.simulate.prepare_kwargs`), run (:func:`fabric_jax.fluid.run`)
    and its jitted core (``fabric_jax.fluid.loop.run_jit``) compiled for it.

    ``target``: ``None`` the default backend; a name of :data:`GPU_TARGETS`: the run is
    made on this host in the accelerator form (link-side sums as gather tables,
    ``fabric_jax.segments.forced("gather")``) and its core compiled by XLA:GPU for that
    device (:func:`gpu_device`), so the result's iteration counts go with the GPU
    program.  ``depths``: a dict filled with each step's solve iterations
    (:func:`solve_depths`; recorded during the run, compiled without).  ``buffers``
    (with a ``target``): a list filled with XLA:GPU's command buffers
    (:func:`compile_for`)."""
    import contextlib
    from fabric_jax import fluid
    if target is None:
        form = contextlib.nullcontext()
    else:
        from fabric_jax import segments
        form = segments.forced("gather")
    record = solve_depths() if depths is not None else contextlib.nullcontext({})
    with record as rec, form:
        problem = fluid.simulate.prepare_kwargs(*args, **kwargs)
        res = fluid.run(problem)
    if depths is not None:
        depths.update(rec)
    return compiled_problem(problem, target, buffers=buffers), res


def compiled_problem(problem, target: str | None = None, buffers: list | None = None):
    """The fluid engine's jitted core (``fabric_jax.fluid.loop.run_jit``) compiled for a
    :class:`fabric_jax.fluid.FluidProblem` from the start: for the default backend, or
    by XLA:GPU for ``target`` (:func:`compile_for`)."""
    from fabric_jax.fluid import loop
    if target is None:
        return loop.run_jit.lower(problem, None).compile()
    return compile_for(loop.run_jit, (), (problem, None), gpu_device(target), buffers=buffers)


def batched_program(problems):
    """``(static_args, args)`` of the batched core (``fabric_jax.fluid.loop.run_batched_jit``)
    for a list of :class:`fabric_jax.fluid.FluidProblem` of one static part, as
    :func:`fabric_jax.simulate_fluid_batched` runs them (for :func:`compile_for`)."""
    import jax
    from fabric_jax import fluid
    batch, axes = fluid.stack(problems)
    leaves, treedef = jax.tree_util.tree_flatten(batch)
    return (treedef, tuple(treedef.flatten_up_to(axes))), tuple(leaves)


def caught(module, name: str, call, keywords: tuple = ()):
    """``(args, result)``: the positional arguments of the last call of
    ``module.<name>`` made while ``call()`` ran (the attribute is wrapped meanwhile: a
    public function's jitted core, called with what the host prepared), followed by the
    values of its keyword arguments ``keywords`` in that order (for a core whose later
    parameters the caller passes by name), and the result of ``call()``."""
    orig, seen = getattr(module, name), {}

    def spy(*a, **k):
        seen["a"] = tuple(a) + tuple(k[key] for key in keywords)
        return orig(*a, **k)
    setattr(module, name, spy)
    try:
        res = call()
    finally:
        setattr(module, name, orig)
    return seen["a"], res


#: JAX's CUDA plugins, as ``jax[cuda12]`` and ``jax[cuda13]`` install them (a lent machine
#: holds the CUDA 13 one; ``pip install -e ".[gpu]"`` the CUDA 12 one).
CUDA_PLUGINS = ("jax_plugins.xla_cuda12", "jax_plugins.xla_cuda13")


def cuda_plugin() -> str | None:
    """The module of the JAX CUDA plugin installed here (:data:`CUDA_PLUGINS`), or
    ``None``: whether :func:`gpu_device` can compile for a GPU on this host.  Found
    without importing it (which would start nothing, but is not needed to know)."""
    import importlib.util
    for name in CUDA_PLUGINS:
        try:
            if importlib.util.find_spec(name) is not None:
                return name
        except ModuleNotFoundError:     # no jax_plugins package at all
            return None
    return None


def gpu_device(target: str = "h200", driver: str | None = DRIVER):
    """A compile-only XLA:GPU device for ``target`` (a name of :data:`GPU_TARGETS`),
    usable on a host without that GPU (see the module docstring), with a CUDA driver and
    runtime of version ``driver`` (:data:`DRIVER`; ``None``: unknown, as a deviceless
    compile has it by default)."""
    from pathlib import Path
    if target not in GPU_TARGETS:
        raise ValueError(f"target must be one of {GPU_TARGETS}; got {target!r}")
    spec = (Path(__file__).with_name("gpu_targets") / f"{target}.txtpb").read_text()
    if driver is not None:
        version = f'  driver_version: "{driver}"\n  runtime_version: "{driver}"\n'
        spec = spec.replace("  cuda_compute_capability {", version + "  cuda_compute_capability {", 1)
    try:
        from jax.experimental import topologies
        topo = topologies.get_topology_desc(platform="cuda", topology="1x1x1",
                                            target_config=spec)
    except Exception as e:  # no CUDA plugin, or one that cannot compile deviceless
        raise RuntimeError(
            "compiling for a GPU on this host needs JAX's CUDA plugin: in an environment of "
            "its own, pip install 'jax[cuda12]' (or 'jax[cuda13]'; the jax version of "
            "this one), and run "
            f"with JAX_PLATFORMS=cpu ({type(e).__name__}: {e})") from e
    return topo.devices[0]


def compile_for(jitted, static_args, args, device, buffers: list | None = None):
    """``jitted(*static_args, *args)`` compiled for ``device`` (e.g. :func:`gpu_device`):
    the arrays of ``args`` become shape/dtype placeholders placed on it.

    ``buffers``: a list to fill with XLA:GPU's command buffers, each the list of the
    thunks (HLO instruction names) recorded into it, read from the compiler's log
    (:func:`log_command_buffers` must have run before JAX's backend started; a
    ``RuntimeError`` says so if the log is silent)."""
    import jax
    import numpy as np
    sharding = jax.sharding.SingleDeviceSharding(device)

    def spec(x):
        if isinstance(x, (jax.Array, np.ndarray, np.generic)):
            return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding)
        return x
    placeholders = jax.tree_util.tree_map(spec, tuple(args))
    platform = {"gpu": "cuda"}.get(device.platform, device.platform)
    lowered = jitted.trace(*static_args, *placeholders).lower(lowering_platforms=(platform,))
    if buffers is None:
        return lowered.compile()
    with _stderr() as log:
        compiled = lowered.compile()
    if _CB_CONFIG not in log[0]:
        raise RuntimeError("compile_for(buffers=...): XLA:GPU's compiler did not log its "
                           "command buffers; call _hlo.log_command_buffers() before JAX's "
                           "first computation (its CUDA plugin reads the setting when it "
                           "loads)")
    buffers.extend([x.strip() for x in m.group(1).split(",") if x.strip()]
                   for m in _CB_LINE.finditer(log[0]))
    return compiled


def log_command_buffers():
    """Make XLA:GPU's compiler log which thunks it records into command buffers (the
    environment of :data:`_CB_LOG`, INFO logs and the conversion pass's): call it before
    JAX's first computation, as benchmarks do first thing."""
    import os
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = _CB_LOG["TF_CPP_MIN_LOG_LEVEL"]
    vmodule = os.environ.get("TF_CPP_VMODULE", "")
    if _CB_LOG["TF_CPP_VMODULE"] not in vmodule:
        os.environ["TF_CPP_VMODULE"] = ",".join(x for x in (vmodule, _CB_LOG["TF_CPP_VMODULE"])
                                                if x)


def _stderr():
    """A context manager yielding ``[text]``: what the process wrote to its standard
    error (file descriptor 2, where XLA's C++ log goes) inside the block, also passed
    on to the real standard error once the block ends."""
    import contextlib
    import os
    import sys
    import tempfile

    @contextlib.contextmanager
    def block():
        out = [""]
        with tempfile.TemporaryFile() as tmp:
            sys.stderr.flush()
            saved = os.dup(2)
            os.dup2(tmp.fileno(), 2)
            try:
                yield out
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                tmp.seek(0)
                out[0] = tmp.read().decode(errors="replace")
        kept = "\n".join(line for line in out[0].splitlines()
                         if "command_buffer_conversion_pass" not in line
                         and "se_gpu_pjrt_compiler" not in line)
        if kept.strip():
            sys.stderr.write(kept + "\n")
    return block()


def _computations(text: str) -> dict:
    comps = {}
    for block in re.split(r"\n(?=\S)", text):
        head = block.split(" ", 1)[0]
        if head.startswith("%") or head == "ENTRY":
            comps[head] = block
    return comps


def _loops(comps: dict) -> list:
    """Every ``while`` of a module: ``[{"name", "parent", "cond", "body", "known"}]``
    (``name``: the instruction's; ``known``: XLA's ``known_trip_count``, or ``None``)."""
    loops = []
    for name, block in comps.items():
        for line in block.split("\n"):
            m = _WHILE.search(line)
            if m:
                known = _TRIP.search(line)
                loops.append(dict(name=m.group(1), parent=name, cond=m.group(2),
                                  body=m.group(3), known=int(known.group(1)) if known else None))
    return loops


def kernel_counts(text: str) -> dict:
    """Fusions of an optimised HLO module, in all and per loop.

    Returns:
      ``{"fusions": int, "entry": int, "loops": [{"body", "cond", "fusions",
      "cond_fusions", "parent", "depth"}], "step": the loop whose body holds the most
      fusions among the innermost time loops (see :func:`launches_per_step`)}``.
    """
    comps = _computations(text)
    total = len(_FUSION.findall(text))
    loops = [dict(body=lp["body"], cond=lp["cond"], parent=lp["parent"],
                  text=comps.get(lp["body"], ""),
                  fusions=len(_FUSION.findall(comps.get(lp["body"], ""))),
                  cond_fusions=len(_FUSION.findall(comps.get(lp["cond"], ""))))
             for lp in _loops(comps)]
    parent_of = {lp["body"]: lp["parent"] for lp in loops}
    for lp in loops:
        depth, p = 0, lp["parent"]
        while p in parent_of:
            depth, p = depth + 1, parent_of[p]
        lp["depth"] = depth
    entry = len(_FUSION.findall(comps.get("ENTRY", "")))
    return dict(fusions=total, entry=entry, loops=loops)


def launches_per_step(counts: dict, trips: dict | None = None) -> dict:
    """Kernel launches of one step of the time loop: the fusions of the step loop's body
    plus, for each loop directly inside it, ``trips x (body + condition)`` plus one
    condition (``trips`` maps a name scope found in a loop's body, e.g. ``"allocate"``,
    to that loop's mean trip count; a loop without one counts one trip).

    The step loop is the loop with the most fusions in its body (the time step).

    Returns:
      ``{"step_fusions", "inner": [{"fusions", "cond_fusions", "trips"}],
      "launches_per_step"}``.
    """
    loops = counts["loops"]
    if not loops:
        return dict(step_fusions=0, inner=[], launches_per_step=0.0)
    step = max(loops, key=lambda lp: lp["fusions"])
    inner = [lp for lp in loops if lp["parent"] == step["body"]]
    trips = trips or {}
    total = float(step["fusions"])
    out = []
    for lp in inner:
        names = [k for k in trips if k in lp["text"]]
        n = float(trips[names[0]]) if names else 1.0
        total += n * (lp["fusions"] + lp["cond_fusions"]) + lp["cond_fusions"]
        out.append(dict(fusions=lp["fusions"], cond_fusions=lp["cond_fusions"], trips=n,
                        scope=names[0] if names else None))
    return dict(step_fusions=step["fusions"], inner=out, launches_per_step=total)


def launch_model(text: str, trips: dict | None = None, on_device=()) -> dict:
    """What one step of the time loop costs the GPU runtime, read from a compiled
    program (best from XLA:GPU, :func:`compiled_fluid_run` with a ``target``).

    The step loop is the loop with the most fusions in its body (as
    :func:`launches_per_step`).  Kernels are the instructions that launch one (fusions,
    copies, library calls, collectives); a loop inside the step runs its trip count if
    XLA knows it (``known_trip_count``), else ``trips[scope]`` (``scope``: a name scope
    found in the loop's body, e.g. ``"allocate"``; 1 without one), and each of its
    iterations evaluates its condition; a loop without a known trip count costs a host
    round trip per evaluation of its condition (``trips + 1``), a ``conditional`` one per
    execution and the kernels of its branches in equal shares (:class:`_Program`).
    ``on_device``: the instructions XLA:GPU recorded into command buffers
    (:func:`compile_for`'s ``buffers``, flattened); a loop or ``conditional`` among them,
    or inside one, runs on the device: no round trip, one more kernel per test.

    Returns:
      ``{"kernels", "fusions_in_program", "step_kernels", "kernels_per_step",
      "round_trips_per_step", "inner": [{"scope", "trips", "known_trip_count",
      "kernels", "cond_kernels"}]}``: ``kernels`` is the program's kernel instructions,
      ``step_kernels`` the step body's own, ``kernels_per_step`` with the loops inside it
      at their trips.
    """
    prog = _Program(text, trips, on_device=on_device)
    if prog.step is None:
        return dict(kernels=prog.kernels("ENTRY"), fusions_in_program=len(_FUSION.findall(text)),
                    step_kernels=0, kernels_per_step=0.0, round_trips_per_step=0.0, inner=[])
    body = prog.step["body"]
    inner = [dict(scope=prog.scope(lp), trips=prog.trips(lp),
                  known_trip_count=lp["known"] is not None,
                  kernels=prog.kernels(lp["body"]), cond_kernels=prog.kernels(lp["cond"]))
             for lp in prog.loops if lp["parent"] == body]
    k, sync = prog.cost(body)
    return dict(kernels=len(_KERNEL.findall(text)), fusions_in_program=len(_FUSION.findall(text)),
                step_kernels=prog.kernels(body), kernels_per_step=k,
                round_trips_per_step=sync, inner=inner)


class _Program:
    """The cost model of a compiled program (:func:`launch_model`, :func:`run_launches`):
    ``cost(name)`` is ``(kernels, host round trips)`` of one execution of computation
    ``name``: its kernel instructions; each loop inside at its trips (a known trip count,
    else ``trips[scope]``, 1 without one; :func:`_loop_cost`); each ``conditional`` a
    round trip and the kernels of the branch it takes -- the branch holding the step
    loop (the loop with the most fusions in its body) a share ``busy`` of its
    executions, the others the rest in equal shares.

    ``on_device``: names of instructions recorded into command buffers (CUDA graphs).
    A ``while`` or ``conditional`` among them, or in a computation one of them runs, is
    a conditional node of the graph: it costs no host round trip, and one kernel per
    test of its condition (XLA:GPU's CUDA command buffer sets the node's handle from the
    predicate with a kernel of its own)."""

    def __init__(self, text: str, trips: dict | None = None, busy: float = 1.0,
                 on_device=()):
        self.comps = _computations(text)
        self.trips_of = trips or {}
        self.busy = float(busy)
        self.loops = _loops(self.comps)
        self.step = max(self.loops, default=None,
                        key=lambda lp: len(_FUSION.findall(self.comps.get(lp["body"], ""))))
        self.conditionals = 0.0
        self.on_device = set(on_device)
        self.device_comps = self._device_computations()

    def _device_computations(self) -> set:
        """The computations run inside command buffers: those of the loops and
        conditionals of ``on_device``, and, inside them, every nested one."""
        device, changed = set(), True
        while changed:
            changed = False
            for name, (parent, comps, _) in self.control_flow().items():
                if (name in self.on_device or parent in device) and not set(comps) <= device:
                    device.update(comps)
                    changed = True
        return device

    def control_flow(self) -> dict:
        """Every ``while`` and ``conditional``: ``{instruction name: (parent computation,
        computations it runs, "while" or "conditional")}``."""
        flow = {lp["name"]: (lp["parent"], [lp["body"], lp["cond"]], "while")
                for lp in self.loops}
        for parent, block in self.comps.items():
            for m in _BRANCHES.finditer(block):
                flow[m.group(1)] = (parent, _branch_names(m), "conditional")
        return flow

    def runs_on_device(self, name: str, parent: str) -> bool:
        return name in self.on_device or parent in self.device_comps

    def on_device_counts(self) -> dict:
        """``{"while": (on the device, in all), "conditional": (...)}``."""
        out = {"while": [0, 0], "conditional": [0, 0]}
        for name, (parent, _, kind) in self.control_flow().items():
            out[kind][0] += self.runs_on_device(name, parent)
            out[kind][1] += 1
        return {kind: tuple(v) for kind, v in out.items()}

    def kernels(self, name):
        return len(_KERNEL.findall(self.comps.get(name, "")))

    def scope(self, lp):
        return next((s for s in self.trips_of if s in self.comps.get(lp["body"], "")), None)

    def trips(self, lp):
        if lp["known"] is not None:
            return lp["known"]
        return float(self.trips_of[self.scope(lp)]) if self.scope(lp) else 1.0

    def holds_step(self, name, seen=()):
        if self.step is None or name in seen or name not in self.comps:
            return False
        if name == self.step["body"]:
            return True
        block = self.comps[name]
        calls = set(re.findall(r"(?:body|condition|to_apply|calls)=(%[\w.\-]+)", block))
        for m in _BRANCHES.finditer(block):
            calls.update(_branch_names(m))
        return any(self.holds_step(c, seen + (name,)) for c in calls)

    def cost(self, name, weight=1.0):
        block = self.comps.get(name, "")
        k, sync = float(self.kernels(name)), 0.0
        for m in _BRANCHES.finditer(block):
            names = _branch_names(m)
            busy = [b for b in names if self.holds_step(b)]
            rest = [b for b in names if b not in busy]
            if self.runs_on_device(m.group(1), name):
                k += 1.0
            else:
                sync += 1.0
            self.conditionals += weight
            for b in names:
                share = (self.busy / len(busy) if b in busy
                         else (1.0 - self.busy * bool(busy)) / max(len(rest), 1))
                bk, bs = self.cost(b, weight * share)
                k, sync = k + share * bk, sync + share * bs
        for lp in (lp for lp in self.loops if lp["parent"] == name):
            n = self.trips(lp)
            dk, ds = _loop_cost(lp, n, self.cost(lp["body"], weight * n),
                                self.cost(lp["cond"], weight * n),
                                self.runs_on_device(lp["name"], name))
            k, sync = k + dk, sync + ds
        return k, sync


def _loop_cost(lp: dict, n: float, body: tuple, cond: tuple, device: bool = False) -> tuple:
    """``(kernels, host round trips)`` of loop ``lp`` (of :func:`_loops`) run ``n``
    trips, given one execution's of its body and of its condition: with a known trip
    count the body ``n`` times; otherwise the body ``n`` times and the condition
    ``n + 1`` times, each test a round trip (XLA:GPU's ``WhileThunk``) or, ``device``
    (a conditional node of a CUDA graph), one more kernel."""
    (bk, bs), (ck, cs) = body, cond
    if lp["known"] is not None:
        return n * bk, n * bs
    tests = n + 1
    if device:
        return n * bk + tests * (ck + 1), n * bs + tests * cs
    return n * bk + tests * ck, n * bs + tests * (cs + 1)


def solve_launches(text: str, trips: float, on_device=()) -> dict:
    """Kernels and host round trips of one call of a program made of straight-line code
    and while loops of unknown trip count (a one-off max-min solve): ``trips`` is how
    many times the loops' bodies run in all (the solver's one loop; with compaction
    levels, one loop per level, counted together).

    Returns ``{"kernels": kernels in the program, "loops": loops of unknown trip count,
    "body_kernels", "cond_kernels": per loop (their mean), "kernels_per_call",
    "round_trips_per_call"}`` (a loop's condition runs, and is read back, once per trip
    and once more at its exit; ``on_device`` as :func:`launch_model`'s: a loop recorded
    into a command buffer is read back never, and its tests cost a kernel each).
    """
    comps = _computations(text)
    loops = [lp for lp in _loops(comps) if lp["known"] is None]
    n = max(len(loops), 1)
    body = sum(len(_KERNEL.findall(comps.get(lp["body"], ""))) for lp in loops) / n
    cond = sum(len(_KERNEL.findall(comps.get(lp["cond"], ""))) for lp in loops) / n
    total = len(_KERNEL.findall(text))
    if not loops:   # straight-line (or known trip counts only): no round trip
        return dict(kernels=total, loops=0, body_kernels=0.0, cond_kernels=0.0,
                    kernels_per_call=float(total), round_trips_per_call=0.0)
    outside = total - len(loops) * (body + cond)
    tests = trips + len(loops)
    device = sum(lp["name"] in set(on_device) for lp in loops) / len(loops)
    return dict(kernels=total, loops=len(loops), body_kernels=body, cond_kernels=cond,
                kernels_per_call=outside + trips * body + tests * (cond + device),
                round_trips_per_call=tests * (1.0 - device))


def run_launches(text: str, trips: dict | None = None, busy: float = 1.0,
                 on_device=()) -> dict:
    """Kernels and host round trips of one whole run of a compiled fluid program (the
    time loop's chunks included), where :func:`launch_model` gives one step's.

    The loops count as there (a known trip count: that many bodies; otherwise
    ``trips[scope]`` bodies and one host round trip per test of the condition).  Each
    ``conditional`` costs a host round trip (XLA:GPU reads its predicate back) and the
    kernels of the branch it takes: the branch holding the step loop (the loop with the
    most fusions in its body) a share ``busy`` of its executions, the others the rest
    in equal shares -- for ``simulate_fluid``'s chunks, ``busy`` is the share of chunks
    simulated rather than skipped as idle (``stop_when_idle``).  ``on_device`` as
    :func:`launch_model`'s.

    Returns ``{"kernels_per_run", "round_trips_per_run", "conditionals"}``.
    """
    if not 0.0 <= float(busy) <= 1.0:
        raise ValueError(f"busy: a share in [0, 1]; got {busy!r}")
    prog = _Program(text, trips, busy, on_device)
    k, sync = prog.cost("ENTRY")
    return dict(kernels_per_run=k, round_trips_per_run=sync, conditionals=prog.conditionals)


def _branch_names(m) -> list:
    if m.group(4) is not None:
        return [x.strip() for x in m.group(4).split(",") if x.strip()]
    return [m.group(2), m.group(3)]


def solve_depths():
    """A context manager recording, while a fluid run is made inside it, each exact
    solve's iterations, per step: ``{"allocate": [...], "nic_send": [...]}`` (one entry
    per call of the step's max-min solve, ``solve`` in
    :mod:`fabric_jax.fluid.stages.transmit` and ``.classes``, and of its NIC share,
    ``nic_send``: the counts ``FluidInfo.solver_iterations`` sums).

    It wraps those functions (instrumentation of the stages, the one place a benchmark
    reaches inside the engine) with a ``jax.debug.callback`` while the block runs and
    clears the jitted runs' caches (one run and a batch) on the way in and out, so the
    traces with callbacks serve no other call (the program compiled for a GPU is traced
    after the block, without them).  In a batch (``vmap``) each call records one entry
    per scenario, in an order the runtime picks.  For the launch model: a loop's trips
    per step are a function of each step's depth (:func:`loop_trips`), not of the mean
    depth alone."""
    import contextlib

    @contextlib.contextmanager
    def block():
        import jax
        from fabric_jax.fluid import loop
        from fabric_jax.fluid.stages import classes, transmit
        rec = {key: [] for key in EXACT_LOOPS}
        orig_solve, orig_nic = transmit.solve, transmit.nic_send

        def solve(*a, **k):
            sol = orig_solve(*a, **k)
            jax.debug.callback(lambda i: rec["allocate"].append(int(i)), sol.info.iterations)
            return sol

        def nic(*a, **k):
            out = orig_nic(*a, **k)
            jax.debug.callback(lambda i: rec["nic_send"].append(int(i)), out[1])
            return out
        def patch(solve_fn, nic_fn):
            for mod in (transmit, classes):
                mod.solve, mod.nic_send = solve_fn, nic_fn
            loop.run_jit.clear_cache()
            loop.run_batched_jit.clear_cache()
        patch(solve, nic)
        try:
            yield rec
        finally:
            patch(orig_solve, orig_nic)
    return block()


def loop_trips(depths, fixed: int = 0, every: int = 1) -> float:
    """Mean trips of an exact solve's ``while`` loop over steps of these ``depths``
    (iterations per call) when ``fixed`` iterations run before it in a loop of known
    trip count (``solver_unroll``, or a first round the code always runs there) and each
    trip runs ``every`` iterations (``solver_check_every``):
    ``mean(ceil(max(0, depth - fixed) / every))``."""
    import numpy as np
    d = np.asarray(depths, float)
    if d.size == 0:
        return 0.0
    return float(np.mean(np.ceil(np.maximum(d - int(fixed), 0.0) / int(every))))


#: The fluid step's exact ``while`` loops, as :func:`solve_depths` records them: the
#: per-step max-min solve and the NIC water-fill.
EXACT_LOOPS = ("allocate", "nic_send")


def run_trips(depths: dict, fixed: dict, every: int = 1) -> dict:
    """Mean trips per step of a run's exact loops (``{"allocate": ..., "nic_send":
    ...}``, :func:`loop_trips` of each) from its :func:`solve_depths` record.
    ``fixed``: iterations before each loop, per key (:func:`first_iterations`, or
    ``solver_unroll`` where larger); ``every``: the solve's iterations per trip
    (``solver_check_every``; the water-fill tests every round)."""
    return {key: loop_trips(depths[key], fixed[key], every if key == "allocate" else 1)
            for key in EXACT_LOOPS}


def batch_trips(depths: list, fixed: dict, every: int = 1) -> dict:
    """:func:`run_trips` of a vmapped run from each scenario's depths per step
    (``depths``: one :func:`solve_depths` record per scenario, steps aligned): a
    vmapped ``while`` loop runs until every scenario's has stopped, so a step's trips
    are its deepest scenario's."""
    import numpy as np
    deepest = {}
    for key in EXACT_LOOPS:
        rows = [d[key] for d in depths]
        if len({len(r) for r in rows}) != 1:
            raise ValueError(f"batch_trips: the scenarios recorded different step counts "
                             f"for {key!r} ({sorted({len(r) for r in rows})}); pass one "
                             "record per scenario of the same run length")
        deepest[key] = np.max(np.asarray(rows, float), axis=0) if rows else []
    return run_trips(deepest, fixed, every)


def first_iterations(platform: str = "cuda") -> dict:
    """Iterations the fluid step's exact solves run before their ``while`` loops with
    ``solver_unroll=0`` in a program lowered for ``platform`` (``"cuda"``, ``"cpu"``):
    ``{"allocate": 0 or 1, "nic_send": 0 or 1}``, 1 where ``unroll=0`` lowers to as
    many loops as ``unroll=1`` (the first iteration, which always runs, run outside the
    loop: ``fairness.solve`` with one level and ``fairness.water_fill`` do so on
    accelerators, ``fairness.on_accelerators``), 0 where it lowers to one loop (on the
    CPU, and in older code, as ``--baseline-rev`` runs).  Lowering needs no GPU."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from fabric_jax import Incidence
    from fabric_jax.fairness import solve, water_fill
    link = np.array([0, 1, 0, 1], np.int32)
    args = (np.ones(4, np.float32), np.ones(2, np.float32), np.ones(4, np.float32))

    def loops(fn):
        lowered = jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,))
        return lowered.as_text().count("stablehlo.while")

    def solved(k):
        def fn(w, cap, dem):
            inc = Incidence(jnp.asarray(link), jnp.arange(4), w, 2, 4, 1)
            return solve(inc, cap, dem, compaction="none", unroll=k).rates
        return fn

    def filled(k):
        return lambda w, cap, dem: water_fill(link, w, cap, dem, with_rounds=True, unroll=k)
    return {"allocate": int(loops(solved(0)) == loops(solved(1))),
            "nic_send": int(loops(filled(0)) == loops(filled(1)))}
