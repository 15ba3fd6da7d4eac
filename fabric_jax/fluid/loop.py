"""The device side of a fluid run: ``run(problem, state=None) -> FluidResult``.

:func:`run` takes a :class:`~fabric_jax.fluid.FluidProblem` from
:func:`fabric_jax.fluid.prepare` and, optionally, the :class:`FluidState` a previous run
ended with, and steps it ``problem.n_steps`` times: a ``lax.scan`` over chunks of
``problem.save_every`` steps (one snapshot per chunk when the problem keeps a
trajectory), each chunk a ``lax.scan`` of :func:`fabric_jax.fluid.step.step`.  It is
jit-compiled once per static part of the problem and traceable: ``vmap`` over a batch
of problems of one static part (:func:`stack`), ``grad`` through a run whose solves
have a fixed iteration count, ``shard_map`` with the flows split over devices
(:func:`run_body` with the mesh axis in the hop table).

With ``stop_when_idle`` a chunk whose start finds the fabric idle for good is skipped
(a ``lax.cond``), so the rest of the run costs nothing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..compiling import jit
from .problem import FluidProblem, check_state, init_state
from .result import FluidInfo, FluidResult, FluidTrajectory
from .stages.common import all_flows, over_flows, release
from .state import FluidState, unpack_law
from .step import idle_for_good, idle_snapshot, in_flight, step

__all__ = ["run", "run_body", "run_jit", "stack", "run_batched", "run_batched_jit", "varying_axes",
           "zeros_of"]


def varying_axes(aval) -> frozenset:
    """The ``shard_map`` axes an abstract value varies over (``.vma``, or in jax 0.10
    ``manual_axis_type.varying``; none outside ``shard_map``)."""
    vma = getattr(aval, "vma", None)
    if vma is None:
        mat = getattr(aval, "manual_axis_type", None)
        vma = mat.varying if mat is not None else ()
    return frozenset(vma)


def zeros_of(aval):
    """Zeros of an abstract value's shape and type, varying over the same ``shard_map``
    axes: a loop carry initialised with them has the type the loop's body gives it."""
    z = jnp.zeros(aval.shape, aval.dtype)
    vma = tuple(sorted(varying_axes(aval)))
    return jax.lax.pcast(z, vma, to="varying") if vma else z


def run_body(problem: FluidProblem, state: FluidState | None = None) -> FluidResult:
    """The whole run, unjitted (what :func:`run` compiles; traced as it is inside
    ``shard_map`` by :func:`fabric_jax.distributed.simulate_fluid_sharded`, the hop
    table's ``axis_name`` set)."""
    static, net, dt = problem.static, problem.net, problem.dt
    inner, keep_traj = problem.save_every, problem.trajectory
    f = net.flows
    axis_name = net.hops.axis_name
    if state is None:
        state = init_state(problem)

    def one(c):
        return step(problem, c)

    def simulate(c):
        if not keep_traj:
            c, _ = jax.lax.scan(lambda cc, _: (one(cc)[0], None), c, None, length=inner)
            return c, None
        # the chunk's snapshot is its last step's: carried from step to step, not
        # stacked and sliced (a row written at the loop's counter each step is a
        # dynamic-slice fusion on XLA:GPU, which keeps it from recording the chunk's
        # loop into a CUDA graph: fabric_jax.compiling)
        snap0 = jax.tree_util.tree_map(zeros_of, jax.eval_shape(one, c)[1])
        (c, snap), _ = jax.lax.scan(lambda cs, _: (one(cs[0]), None), (c, snap0), None,
                                    length=inner)
        return c, snap

    def skip(c):
        # idle: nothing is on a wire, and the wires' history (indexed by step) restarts
        c = c.replace(k=c.k + inner, wire=jnp.zeros_like(c.wire))
        return c, (idle_snapshot(problem, c) if keep_traj else None)

    # the horizon of this run (a resumed run continues from its state's step)
    t_end = (state.k + problem.n_saves * inner).astype(dt.dtype) * dt

    def chunk(c, j):
        if static.stop_when_idle:
            c, snap = jax.lax.cond(idle_for_good(net, c, t_end), skip, simulate, c)
        else:
            c, snap = simulate(c)
        if not keep_traj:
            return c, None
        totals = dict(sent=jnp.sum(c.sent), delivered=jnp.sum(c.delivered),
                      queued=jnp.sum(c.x), dropped=jnp.sum(c.dropped),
                      in_flight=jnp.sum(in_flight(net, c)), discarded=jnp.sum(c.discarded))
        return c, dict(snap, **over_flows(totals, axis_name))

    c, traj = jax.lax.scan(chunk, state, jnp.arange(problem.n_saves, dtype=jnp.int32))
    start = jnp.where(jnp.isfinite(c.start), c.start, release(net, c.finish))
    trajectory = FluidTrajectory(**traj) if keep_traj else None
    paused = c.fc.paused_time
    if static.n_classes > 1:
        paused = paused.reshape(net.hops.n_links, static.n_classes)
    info = FluidInfo(max_residual=c.max_residual,
                     stalled=~all_flows(jnp.all(c.done), axis_name),
                     paused_time=paused, max_queue=c.max_queue,
                     stranded_time=c.stranded_time, stranded=c.stranded,
                     discard_mode=c.rx_phi, solver_iterations=c.solver_iterations)
    law0 = static.law.init(net.line_rate, problem.params)
    return FluidResult(start=start, finish=c.finish, fct=c.finish - f["arrival"],
                       sent=c.sent, delivered=c.delivered, dropped=c.dropped,
                       queued=jnp.sum(c.x, axis=1),
                       link_queue=net.hops.link_sum(c.x),
                       law_state=unpack_law(c.law, law0),
                       trajectory=trajectory, info=info,
                       routing_state=c.route, state=c, in_flight=in_flight(net, c),
                       discarded=c.discarded,
                       link_corrupted=(c.corrupted if c.corrupted is not None
                                       else jnp.zeros_like(net.capacity)))


#: The run, compiled once per static part of the problem (and the state's presence).
run_jit = jit(run_body)


def run(problem: FluidProblem, state: FluidState | None = None) -> FluidResult:
    """Runs a prepared fluid problem on the device: ``problem.n_steps`` steps from
    ``state`` (the state a previous run ended with, ``FluidResult.state``, or a
    :class:`fabric_jax.checkpoint.Checkpoint`), or from the start.

    Traceable (``jit``, ``vmap``, ``grad`` through a fixed-iteration run); compiled once
    per static part of ``problem``.  A concrete ``state`` is checked against the
    problem on the host first; a resumed run continues the clock (``state.k``), so
    arrivals, faults and trajectory times stay absolute.  On CPU a run cut into pieces
    is bit-identical to the uninterrupted run.

    Raises:
      ValueError: ``problem`` not a :class:`FluidProblem`; ``state`` whose structure,
        shapes or dtypes do not match the problem's.
    """
    if not isinstance(problem, FluidProblem):
        raise ValueError("problem must be a fabric_jax.fluid.FluidProblem "
                         f"(fabric_jax.fluid.prepare(...)); got {type(problem).__name__}")
    if state is not None and not any(isinstance(x, jax.core.Tracer)
                                     for x in jax.tree_util.tree_leaves(state)):
        state = check_state(problem, state, name="state")
    return run_jit(problem, state)


def stack(problems) -> tuple[FluidProblem, FluidProblem]:
    """Host: a batch of problems of one static part as one problem with a leading
    scenario axis, and its ``in_axes`` for ``vmap``: ``(batch, axes)``.

    Arrays equal in every problem (the hop table, usually) are kept once (axis
    ``None``), the others stacked (axis 0).  ``jax.vmap(run_body, in_axes=(axes,))(
    batch)`` runs them all in one program (:func:`fabric_jax.simulate_fluid_batched`;
    :func:`fabric_jax.sweep` with ``in_axes=(axes,)``).

    Raises:
      ValueError: an empty list; problems whose static parts or array structures,
        shapes or dtypes differ (each named by its index).
    """
    problems = list(problems)
    if not problems:
        raise ValueError("stack: no problems to batch")
    for b, p in enumerate(problems):
        if not isinstance(p, FluidProblem):
            raise ValueError(f"problems[{b}] is a {type(p).__name__}, not a FluidProblem")
    flat0, treedef = jax.tree_util.tree_flatten(problems[0])
    flats = [flat0]
    for b, p in enumerate(problems[1:], 1):
        if (p.static, p.n_saves, p.save_every, p.trajectory) != (
                problems[0].static, problems[0].n_saves, problems[0].save_every,
                problems[0].trajectory):
            raise ValueError(f"scenarios[{b}]: its static choices (law, flow control, "
                             "routing policy, n_steps / save_every, NIC ports ...) differ from "
                             "scenario 0's; one batch is one compiled program: run it apart")
        flat, tdef = jax.tree_util.tree_flatten(p)
        if tdef != treedef:
            raise ValueError(f"scenarios[{b}]: its arguments differ in kind from scenario "
                             "0's (an option given in one and not the other?)")
        for x, y in zip(flat0, flat):
            if np.shape(x) != np.shape(y) or jnp.result_type(x) != jnp.result_type(y):
                raise ValueError(f"scenarios[{b}]: an array of shape {np.shape(y)} "
                                 f"({jnp.result_type(y)}) where scenario 0 has "
                                 f"{np.shape(x)} ({jnp.result_type(x)}); a batch needs one "
                                 "shape")
        flats.append(flat)
    leaves, axes = [], []
    for i, x0 in enumerate(flat0):
        xs = [f[i] for f in flats]
        if all(x is x0 or _equal(x, x0) for x in xs[1:]):
            leaves.append(x0)
            axes.append(None)
        else:
            leaves.append(jnp.stack([jnp.asarray(x) for x in xs]))
            axes.append(0)
    return (jax.tree_util.tree_unflatten(treedef, leaves),
            jax.tree_util.tree_unflatten(treedef, axes))


def _equal(a, b) -> bool:
    """Host: two arrays equal in shape, dtype and every element (NaN equal to NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if np.issubdtype(a.dtype, np.inexact):
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def run_batched(batch: FluidProblem, axes: FluidProblem) -> FluidResult:
    """Runs a batch made by :func:`stack` in one program: ``vmap`` of :func:`run_body`
    over the scenario axis (the per-step solves' loops run until every scenario's has
    converged; a converged scenario's state is held).  Every leaf of the result has the
    scenario axis first."""
    leaves, treedef = jax.tree_util.tree_flatten(batch)
    return run_batched_jit(treedef, tuple(treedef.flatten_up_to(axes)), *leaves)


def _run_batched(treedef, axes, *leaves):
    def one(*ls):
        return run_body(jax.tree_util.tree_unflatten(treedef, ls))
    return jax.vmap(one, in_axes=axes)(*leaves)


#: The batched run, compiled once per static part, batch layout and shapes (its
#: arguments: the problem's treedef, the flat ``in_axes``, then the flat leaves).
run_batched_jit = jit(_run_batched, static_argnums=(0, 1))
