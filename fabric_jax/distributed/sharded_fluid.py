"""One huge fluid run with its flows split over devices: a driver over the fluid contract.

:func:`simulate_fluid_sharded` prepares the run on the host
(:func:`fabric_jax.fluid.prepare`), pads the flows to a multiple of the device count,
and runs :func:`fabric_jax.fluid.loop.run_body` inside :func:`jax.shard_map`.  What is
split and what is replicated is read from the declarations of the contract's records:
:meth:`fabric_jax.fluid.problem.Net.flow_axes` for the run's arrays,
:meth:`fabric_jax.fluid.FluidState.flow_axes` for the state (and
:data:`fabric_jax.routing.AUX_FLOW_AXIS` for a routing policy's own entries).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ..compiling import jit
from ..fluid import FluidInfo, FluidResult, FluidState, FluidTrajectory, init_state
from ..fluid.problem import Net
from ..fluid.loop import run_body, varying_axes
from ..fluid.simulate import prepare_kwargs
from ..fluid.state import ROUTING_AXIS
from ..incidence import Incidence, as_incidence
from ..routing import AUX_FLOW_AXIS
from .mesh import FLOW_AXIS, check_mesh, device_mesh, place

__all__ = ["simulate_fluid_sharded", "sharded_fluid_call"]

#: Per-flow arguments of :func:`fabric_jax.simulate_fluid` (``[flows, ...]``) and the
#: value an inert padding flow takes (``None``: derived from the given values).
FLOW_ARGS = dict(size=0.0, arrival=0.0, delay=0.0, latency=0.0, deps=-1, line_rate=None,
                 base_rtt=None, traffic_class=0)


def simulate_fluid_sharded(incidence, capacity, size, *, dt, n_steps: int,
                           mesh: Mesh | None = None, **options):
    """:func:`fabric_jax.simulate_fluid` with the flows split across devices.

    Same model, step and result as :func:`fabric_jax.simulate_fluid` (see
    :mod:`fabric_jax.fluid`); the loop runs inside :func:`jax.shard_map`.  Each device
    holds a contiguous slice of the flows with every per-flow record of the step (hop
    table, queued bytes per hop and FIFO band, receiver wire, feedback ring, the law's
    state); the link state (flow control, maximum queues) is replicated.  Every
    reduction of flows onto links is an all-reduce over the mesh: the hop table's
    link and ingress-pool sums (queues, arrivals, FIFO bands, buffer occupancy), the
    link loads and both per-step max-min solves (cut-through allocation and NIC
    shares: ``psum`` / ``pmin`` per iteration, as
    :func:`fabric_jax.distributed.max_min_fair_sharded`), the receivers' flow counts
    and the HPCC reference time; totals and "every flow ..." tests (accounting, idle
    detection, ``stalled``) are global too.  So every device sees the link state the
    single-device run has, step by step; results agree with it up to float summation
    order (a round-off difference can move a flow's finish instant inside a step by up
    to one step where a port's grant ties its standing queue, the discontinuity of
    :func:`fabric_jax.fluid.stages.complete.finish_in_step`).  Dependencies (``deps``)
    may cross devices: each step gathers the ``[flows]`` finish times.

    Flows are padded to a multiple of the device count with inert flows (no link,
    zero size, released at 0: finished in step 0, nothing on any link) and the padding
    is stripped from the result.  Per device and step it moves the step's link sums
    (a few ``[links]`` and ``[links, fifo_bands]`` all-reduces, two per iteration of
    each solve) and, with ``deps``, an all-gather of ``[flows]``.

    Traffic classes (``traffic_class``, ``classes``) are sharded like the rest: the hop
    table of ``links x classes`` units sums globally too, as do the class
    arbitration's loads, both NIC shares and the work-conserving second pass's solve.

    Dynamic routing (``routing``) is sharded too: a policy's per-flow state (split,
    paths, the entries of :data:`fabric_jax.routing.AUX_FLOW_AXIS` with a flow axis)
    is split with the flows, its clocks and delay-line time stamps are replicated, and
    the link view it steers by (queues, loads, marks) is the global one.

    Departures from :func:`fabric_jax.simulate_fluid`: refused with a ``ValueError``
    are resuming (``init_state``) and a policy with array parameters (weighted ECMP's
    per-flow logits).  With multipath flows the step solves' iteration counts may
    differ from the single-device run's by one (summation order).  The link-side sums
    are scatter-adds on every backend (the accelerators' segment tables index one
    device's whole hop table).  ``FluidResult.state`` is the gathered state (padding
    stripped): it can be saved, not passed back here.

    Multi-host: call ``jax.distributed.initialize()`` on every process first (same
    program and inputs everywhere); the default mesh spans every process's devices,
    and every leaf of the result is gathered to every process.

    Args:
      incidence, capacity, size, dt, n_steps: as :func:`fabric_jax.simulate_fluid`.
      mesh: :class:`~jax.sharding.Mesh`; flows are split over all its axes.  Default:
        one axis (:data:`fabric_jax.distributed.FLOW_AXIS`) over ``jax.devices()``.
      **options: the other keyword arguments of :func:`fabric_jax.simulate_fluid`.

    Returns:
      :class:`fabric_jax.FluidResult`, as :func:`fabric_jax.simulate_fluid`.

    Raises:
      ValueError: as :func:`fabric_jax.simulate_fluid`; a ``mesh`` that is not a
        Mesh; a per-flow argument whose leading axis is not ``flows``; ``init_state``;
        a ``routing`` policy with array parameters or unlisted aux entries; an option
        :func:`fabric_jax.simulate_fluid` does not take.
    """
    run, problem, finish = sharded_fluid_call(incidence, capacity, size, dt=dt,
                                              n_steps=n_steps, mesh=mesh, **options)
    return finish(run(problem))


def sharded_fluid_call(incidence, capacity, size, *, dt, n_steps, mesh, **options):
    """Host side of :func:`simulate_fluid_sharded`: ``(run, problem, finish)``, the
    jitted sharded run, its placed :class:`~fabric_jax.fluid.FluidProblem`
    (``run(problem)``, or ``run.lower(problem)`` to trace it only) and the function that
    gathers its result and strips the padding."""
    mesh = device_mesh(FLOW_AXIS) if mesh is None else check_mesh(mesh)
    kw = dict(options)
    if kw.get("init_state") is not None:
        raise ValueError("init_state= is not supported by simulate_fluid_sharded (the state "
                         "is laid out for one device); run fabric_jax.simulate_fluid for "
                         "it, or drop init_state")
    kw.pop("init_state", None)
    routing = kw.get("routing")
    if routing is not None:
        _check_routing_shardable(routing)
    inc = as_incidence(incidence)
    n_flows = inc.n_flows
    kw["size"] = size
    for name in FLOW_ARGS:
        x = kw.get(name)
        if x is not None and (np.ndim(x) < 1 or np.shape(x)[0] != n_flows):
            raise ValueError(f"{name} must have flows = {n_flows} on its leading axis "
                             f"(the incidence's flows); got shape {np.shape(x)}")
    smooth = kw.get("smooth")
    if kw.get("solver_iterations") is None and smooth is not None and smooth.enabled:
        kw["solver_iterations"] = n_flows + 1   # the unpadded run's default
    if kw.get("arrival") is None:
        kw["arrival"] = np.zeros(n_flows)
    # inert padding flows: no hop, nothing to send, released (and finished) at 0
    pad = -n_flows % mesh.size
    padded = Incidence(inc.link_idx, inc.flow_idx, inc.weight, inc.n_links, n_flows + pad)
    for name, fill in FLOW_ARGS.items():
        x = kw.get(name)
        if x is None or pad == 0:
            continue
        a = np.asarray(x)
        if fill is None:   # a positive per-flow time or rate: one the flows already have
            fill = np.min(a) if a.size else 1.0
        kw[name] = np.concatenate([a, np.full((pad,) + a.shape[1:], fill, a.dtype)])
    if routing is not None and pad:
        kw["routing"] = _pad_routing(routing, pad)
    problem = prepare_kwargs(padded, capacity, kw.pop("size"), dt=dt, n_steps=n_steps, **kw)
    axes = tuple(mesh.axis_names)
    problem = problem.replace(net=_shard_net(problem.net, axes))
    specs = _problem_specs(problem, axes)
    placed = jax.tree_util.tree_map(
        lambda spec, sub: jax.tree_util.tree_map(
            functools.partial(place, sharding=NamedSharding(mesh, spec)), sub),
        specs, problem, is_leaf=lambda s: isinstance(s, P))
    out_specs = _result_specs(problem, axes)
    return (_sharded_fluid(mesh), placed,
            lambda res: _gather_strip(res, out_specs, axes, n_flows))


def _check_routing_shardable(routing):
    """Host: a routing policy whose state can be split over devices (every aux entry's
    flow axis known, no per-flow parameters); ``ValueError`` otherwise."""
    unknown = sorted(set(routing.state.aux) - set(AUX_FLOW_AXIS))
    if unknown:
        raise ValueError(f"routing: the policy {routing.policy.name!r} keeps aux entries "
                         f"{unknown} whose flow axis is unknown; list them in "
                         "fabric_jax.routing.AUX_FLOW_AXIS, or run fabric_jax.simulate_fluid")
    if any(np.ndim(x) > 0 for x in jax.tree_util.tree_leaves(routing.params)):
        raise ValueError(f"routing: the policy {routing.policy.name!r} has array parameters "
                         "(weighted ECMP's per-flow logits), which simulate_fluid_sharded "
                         "does not split; "
                         "run fabric_jax.simulate_fluid for it")


def _map_route(fn, rstate):
    """``rstate`` with ``fn(leaf, flow_axis)`` applied to each entry (``flow_axis``
    ``None``: not per flow): the split and paths on axis 0, the policy's aux entries as
    :data:`fabric_jax.routing.AUX_FLOW_AXIS` says."""
    top = {f: fn(getattr(rstate, f), 0) for f in ("split", "links", "hop_mask", "path_mask")}
    return dataclasses.replace(rstate, **top, aux={k: fn(v, AUX_FLOW_AXIS[k])
                                                  for k, v in rstate.aux.items()})


def _pad_routing(routing, pad):
    """``routing`` with ``pad`` inert flows appended: no path (links -1, masks False),
    zero split and zero policy state."""
    def one(x, ax):
        if ax is None:
            return x
        a = np.asarray(x)
        fill = -1 if a.dtype.kind in "iu" else (False if a.dtype == bool else 0)
        shape = list(a.shape)
        shape[ax] = pad
        return jnp.asarray(np.concatenate([a, np.full(shape, fill, a.dtype)], axis=ax))
    return dataclasses.replace(routing, state=_map_route(one, routing.state))


def _axis_spec(ax, axes):
    """The :class:`~jax.sharding.PartitionSpec` of a record split on axis ``ax``."""
    return P() if ax is None else P(*([None] * ax), axes)


def _route_specs(rstate, axes):
    """The :class:`~jax.sharding.PartitionSpec` of each entry of a routing state."""
    return _map_route(lambda x, ax: _axis_spec(ax, axes), rstate)


def _shard_net(net, axes):
    """``net`` for the shards: hop tables whose link sums are global over ``axes`` (and
    scatter-adds: the segment tables index the whole table); no dependency columns
    when no flow has one (so no step gathers finish times)."""
    hops = dataclasses.replace(net.hops, by_link=None, by_prev=None, axis_name=axes)
    # traffic classes: the hop table of links x classes units, likewise global
    uhops = hops if net.uhops is net.hops else dataclasses.replace(
        net.uhops, by_link=None, by_prev=None, axis_name=axes)
    deps = net.deps
    if not bool(np.any(np.asarray(deps) >= 0)):
        deps = jnp.zeros((deps.shape[0], 0), deps.dtype)
    return dataclasses.replace(net, hops=hops, uhops=uhops, deps=deps)


def _problem_specs(problem, axes):
    """The :class:`~jax.sharding.PartitionSpec` prefix of each part of a problem: the
    per-flow fields of its :class:`~fabric_jax.fluid.problem.Net` split (their declared
    flow axis), the routing policy's state as it declares, the rest replicated."""
    net = problem.net
    net_specs = dataclasses.replace(net, **{name: _axis_spec(ax, axes)
                                            for name, ax in Net.flow_axes().items()})
    rstate = problem.routing_state
    return problem.replace(net=net_specs, params=P(), fc_params=P(), smooth=P(), dt=P(),
                           routing_params=P(), faults=P(),
                           routing_state=None if rstate is None else _route_specs(rstate, axes))


def _state_specs(problem, axes):
    """A :class:`~fabric_jax.fluid.FluidState` of partition specs for this problem's
    state (its fields as declared; ``None`` where the run carries no such field)."""
    present = set(FluidState.flow_axes())
    if not problem.static.shape.routed:
        present -= {"route", "load", "mark_l", "rate"}
    if not problem.static.shape.lossy:
        present -= {"corrupted"}
    specs = {}
    for name, ax in FluidState.flow_axes().items():
        if name not in present:
            specs[name] = None
        elif ax == ROUTING_AXIS:
            specs[name] = _route_specs(problem.routing_state, axes)
        else:
            specs[name] = _axis_spec(ax, axes)
    return FluidState(**specs)


def _result_specs(problem, axes):
    """The :class:`~jax.sharding.PartitionSpec` prefix of each part of the
    :class:`~fabric_jax.FluidResult` of a sharded run: per-flow records split along
    their flow axis, link state and totals replicated."""
    row, col, rep = P(axes), P(None, axes), P()
    state = _state_specs(problem, axes)
    traj = None
    if problem.trajectory:
        traj = FluidTrajectory(t=rep, rate=col, throughput=col, queue=rep, usable=rep,
                               mark=col, law_state=col, sent=rep, delivered=rep,
                               queued=rep, dropped=rep, in_flight=rep, discarded=rep)
    info = FluidInfo(max_residual=rep, stalled=rep, paused_time=rep, max_queue=rep,
                     stranded_time=row, stranded=row, discard_mode=col,
                     solver_iterations=rep)
    return FluidResult(start=row, finish=row, fct=row, sent=row, delivered=row,
                       dropped=row, queued=row, link_queue=rep, law_state=row,
                       trajectory=traj, info=info, routing_state=state.route, state=state,
                       in_flight=row, discarded=row, link_corrupted=rep)


@functools.lru_cache(maxsize=16)
def _sharded_fluid(mesh):
    """The jitted, ``shard_map``-ped fluid run (:func:`fabric_jax.fluid.loop.run_body`) on
    ``mesh`` (compiled once per static part of the problem, as
    :func:`fabric_jax.fluid.run` is)."""
    axes = tuple(mesh.axis_names)

    def _varying(v):
        vma = varying_axes(jax.typeof(v))
        missing = tuple(a for a in axes if a not in vma)
        return jax.lax.pcast(v, missing, to="varying") if missing else v

    def local(problem):
        state = init_state(problem)
        # the per-flow records differ between shards from the start (their type in the
        # loop is "varying over the flow axis"), the link state is the same on all
        flow_axes = FluidState.flow_axes()
        changes = {}
        for name, value in state.present().items():
            ax = flow_axes[name]
            if ax == ROUTING_AXIS:
                changes[name] = _map_route(lambda x, a: x if a is None else _varying(x), value)
            elif ax is not None:
                changes[name] = jax.tree_util.tree_map(_varying, value)
        return run_body(problem, state.replace(**changes))

    @jit
    def run(problem):
        return jax.shard_map(local, mesh=mesh, in_specs=(_problem_specs(problem, axes),),
                             out_specs=_result_specs(problem, axes))(problem)

    return run


def _gather_strip(res, out_specs, axes, n_flows):
    """Every leaf of ``res`` whole on this process (gathered from the other processes'
    devices when the mesh spans several) with the padding flows stripped from its flow
    axis (the position of ``axes`` in its spec)."""
    from jax.experimental import multihost_utils

    def strip(spec, sub):
        # PartitionSpec spells one axis as its name, several as a tuple
        entries = [e if isinstance(e, tuple) else (e,) for e in spec]
        ax = entries.index(axes) if axes in entries else None

        def one(x):
            if isinstance(x, jax.Array) and not x.is_fully_addressable:
                x = multihost_utils.process_allgather(x, tiled=True)
            if ax is None:
                return jnp.asarray(x)
            # on the host: a device-side slice of a sharded array is one more program
            # with a cross-device gather (on host CPU devices it raced the run's own
            # collectives when two sharded runs followed each other)
            return jnp.asarray(np.asarray(x)[(slice(None),) * ax + (slice(0, n_flows),)])
        return jax.tree_util.tree_map(one, sub)

    return jax.tree_util.tree_map(strip, out_specs, res, is_leaf=lambda s: isinstance(s, P))
