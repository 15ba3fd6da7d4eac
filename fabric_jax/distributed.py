"""Scale out: batched scenario sweeps and multi-device (multi-host) sharding.

Units: as everywhere, bytes, seconds and bytes/s in every array.

Two ways to use more than one scenario or more than one device, both built on JAX's own
machinery (:class:`jax.sharding.Mesh`, :class:`jax.sharding.NamedSharding`,
:func:`jax.shard_map`, collectives ``psum``/``pmin``); nothing here communicates by
itself.

* :func:`sweep` -- many scenarios of the same padded shape (seeds, loads, capacities,
  failed-link sets given as capacity masks) at once.  A per-scenario function is
  ``vmap``-ed over the leading scenario axis; with more than one device (or an explicit
  ``mesh``) that axis is sharded across the devices (inputs placed with a
  :class:`~jax.sharding.NamedSharding`, ``jit`` with ``out_shardings``), after padding
  the batch to a multiple of the device count (the padding repeats the last scenario
  and is stripped from the result).  Functions that
  already take a leading batch axis (``max_min_fair`` with ``[batch, links]``
  capacities, :func:`fabric_jax.simulate_flows_batched`,
  :func:`fabric_jax.simulate_fluid_batched`, which keep host-side logic) run
  with ``batched=True``: their batched inputs are placed sharded and the functions' own
  ``jit``-ed kernels follow that placement (GSPMD sharding propagation).
* :func:`max_min_fair_sharded` -- one huge scenario: the *flow* dimension of the
  max-min solve is split across devices with :func:`jax.shard_map`.  Each device holds
  a contiguous slice of flows and their incidence rows (flow-major layout,
  ``[flows / devices, row_width]``); the two per-link reductions of an iteration (open
  weight and frozen load; the smallest target level of a link's flows) become a
  ``psum`` / ``pmin`` over the device axis, so every device sees the same per-link
  levels and freezes exactly the flows the single-device solver
  (:func:`fabric_jax.max_min_fair`, :mod:`fabric_jax.fairness`) freezes, iteration by
  iteration.  Rates agree with it up to float summation order.  Per device and
  iteration it moves ``O(nnz / devices)`` entries plus one all-reduce of ``2 x links``
  and one of ``links`` floats.
* :func:`simulate_fluid_sharded` -- one huge fluid run (:func:`fabric_jax.simulate_fluid`)
  with its flows split the same way: each device steps its slice of the flows and all
  their per-flow state; every sum of flows onto links in the step (the hop table's
  link and pool sums, :class:`fabric_jax.links.HopTable` with ``axis_name``; link
  loads; the step's max-min solves) is an all-reduce, so every device holds the same
  link state (flow control, queues per link).  Per device the state and work are
  ``1 / devices`` of the single-device run's per-flow part plus the ``[links]`` part.

Multi-host.  The same code runs on several hosts: call ``jax.distributed.initialize()``
on every process first (same program, same inputs on every process), then call these
functions unchanged; the default mesh spans ``jax.devices()`` (all processes' devices),
inputs are placed with :func:`jax.make_array_from_callback` (each process supplies its
own shards from its copy of the host arrays), and the collectives run over the global
mesh.  Results are then global :class:`jax.Array`\\ s; fetch them on a host with
``jax.experimental.multihost_utils.process_allgather``.

Memory.  How memory grows (float32 and int32, 4 bytes each; ``F`` flows, ``L`` links,
``H`` hops per path, ``P`` candidate paths per flow, ``E = F x P x H`` incidence
entries):

* :func:`fabric_jax.max_min_fair`: the incidence holds a link index, a flow index and
  a weight per entry (``12 E`` bytes); an iteration's temporaries (masks, gathers, the
  complex operand of the per-link scatter) and the compaction buffers (halving per
  level) add ``~ 22 E`` bytes (XLA ``memory_analysis``), plus ``O(F + L)``.  Measured
  on CPU (``P = 1``, ``H = 4``, 10^5 -> 10^6 flows): ``~ 40`` bytes per entry,
  ``~ 160`` bytes per flow.  Memory is linear in ``E``; links only add ``O(L)``.
* :func:`max_min_fair_sharded`: the same per entry divided by the device count, plus a
  few ``[L]`` vectors per device (capacity, the reduced sums, levels).
* :func:`fabric_jax.simulate_fluid`: the hop table ``[F, P x H]`` (link index, weight,
  queued bytes per hop) and the per-flow state (sent, delivered, dropped, rates, the
  law's state ...: ``[F]`` arrays), the max-min solve of the step (above), the
  feedback ring buffer of six signals ``[ring_len, F]`` (``24 ring_len F`` bytes;
  ``ring_len = round(max base_rtt / dt) + rto_steps + 1``),
  and with ``save_every = N`` a trajectory of ``n_steps / N`` snapshots of three ``[F]``
  and two ``[L]`` arrays plus the law state (``>= 12 F n_steps / N`` bytes).  Without
  ``save_every`` nothing grows with ``n_steps``: for long runs save every N steps.
  Measured on CPU (``H = 4``, ``ring_len = 2``, no trajectory, 10^5 -> 10^6 flows):
  ``~ 700`` bytes per flow.

Largest scenario (``H = 4``, ``P = 1``, float32; 90 % of memory usable): 24 GB of host
memory holds a max-min solve of ``~ 1.3 x 10^8`` flows (``5 x 10^8`` entries) and a
fluid run of ``~ 3 x 10^7`` flows; an H200 (141 GB) ``~ 8 x 10^8`` and ``~ 1.8 x 10^8``
flows.  These scale the CPU measurement (``experiments/bench_scale.py``); XLA:GPU
fuses differently, so check ``device_peak_bytes`` there.  Long feedback delays
(``ring_len``) and frequent snapshots add the terms above.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from .compiling import jit
from .fairness import MaxMinInfo, MaxMinResult, solve, validate_inputs
from .incidence import Incidence, as_incidence
from .sim import flow_rows

__all__ = ["sweep", "max_min_fair_sharded", "simulate_fluid_sharded", "device_mesh",
           "BATCH_AXIS", "FLOW_AXIS"]

#: Default mesh axis name for the scenario axis of :func:`sweep`.
BATCH_AXIS = "batch"
#: Default mesh axis name for the flow axis of :func:`max_min_fair_sharded`.
FLOW_AXIS = "flows"


def device_mesh(axis_name: str = BATCH_AXIS, devices=None) -> Mesh:
    """A 1-D :class:`~jax.sharding.Mesh` over ``devices`` (default: ``jax.devices()``,
    every process's devices after ``jax.distributed.initialize()``)."""
    devs = np.asarray(jax.devices() if devices is None else list(devices), dtype=object)
    if devs.size == 0:
        raise ValueError("devices must name at least one device")
    return Mesh(devs.reshape(-1), (axis_name,))


def _check_mesh(mesh) -> Mesh:
    if not isinstance(mesh, Mesh):
        raise ValueError(f"mesh must be a jax.sharding.Mesh (e.g. fabric_jax.distributed."
                         f"device_mesh()); got {type(mesh).__name__}")
    return mesh


def _place(x, sharding: NamedSharding):
    """Puts a host or device array on ``sharding``; multi-host safe (each process
    supplies its addressable shards from its own copy of ``x``)."""
    if sharding.is_fully_addressable:
        return jax.device_put(x, sharding)
    a = np.asarray(x)
    return jax.make_array_from_callback(a.shape, sharding, lambda idx: a[idx])


def _pad_rows(x, pad: int):
    """Repeats the last entry of axis 0 ``pad`` times (a valid scenario, stripped later)."""
    if pad == 0:
        return x
    tail = jnp.repeat(jnp.asarray(x)[-1:], pad, axis=0)
    return jnp.concatenate([jnp.asarray(x), tail], axis=0)


# ------------------------------------------------------------------- sweeps
def sweep(fn: Callable, *args, in_axes=0, mesh: Mesh | None = None, batched: bool = False,
          per_device: bool = False):
    """Runs ``fn`` over a batch of scenarios of the same shape, sharded over devices.

    Args:
      fn: with ``batched=False`` (default) a *per-scenario* function of ``args``
        (traceable: ``jit``/``vmap``-able, e.g. ``lambda c: fj.max_min_fair(inc, c)``);
        it is ``vmap``-ed over the leading axis of the batched arguments.  With
        ``batched=True`` a function that already takes the leading batch axis (e.g.
        :func:`fabric_jax.simulate_flows_batched`,
        :func:`fabric_jax.simulate_fluid_batched`, or ``max_min_fair`` with
        ``[batch, links]`` capacities); it is called once with the batched arguments
        placed sharded along that axis.
      *args: pytrees of arrays.  Batched ones carry the scenario axis first (size
        ``batch``, the same for all); the others are shared by every scenario.
      in_axes: ``0`` (every argument batched), or a tuple with one entry per argument,
        ``0`` (batched) or ``None`` (shared), as for :func:`jax.vmap`.
      mesh: a :class:`~jax.sharding.Mesh`; the scenario axis is split over all its
        axes.  Default: one axis over ``jax.devices()`` when there is more than one
        device, no sharding otherwise.
      batched: see ``fn``.
      per_device: with ``batched=True``, run ``fn`` under :func:`jax.shard_map`: each
        device calls it on its own slice of the batch (``fn`` must be traceable, e.g.
        ``max_min_fair`` with ``[batch, links]`` capacities, which then solves one
        block-diagonal problem per device).  Without it the batched inputs are only
        placed sharded and ``fn`` runs once (for functions with host-side logic such as
        :func:`fabric_jax.simulate_flows_batched`; XLA's sharding propagation decides
        how the work is split).

    Returns:
      ``fn``'s output with a leading ``batch`` axis on every leaf (padding stripped).

    Raises:
      ValueError: ``fn`` not callable, ``in_axes`` malformed, no batched argument, an
        empty batch or batched arguments whose leading sizes differ (named ``args[i]``).
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable; got {type(fn).__name__}")
    if not args:
        raise ValueError("sweep needs at least one argument (the batched scenarios)")
    if per_device and not batched:
        raise ValueError("per_device=True needs batched=True (fn taking the batch axis); a "
                         "per-scenario fn is vmapped and sharded already")
    axes = _normalise_in_axes(in_axes, len(args))
    n = _batch_size(args, axes)
    if mesh is None and jax.device_count() > 1:
        mesh = device_mesh(BATCH_AXIS)
    if mesh is not None:
        mesh = _check_mesh(mesh)
    n_dev = 1 if mesh is None else mesh.size
    pad = -n % n_dev
    args = tuple(jax.tree_util.tree_map(functools.partial(_pad_rows, pad=pad), a)
                 if ax == 0 else a for a, ax in zip(args, axes))
    if mesh is not None:
        shard = NamedSharding(mesh, P(mesh.axis_names))
        repl = NamedSharding(mesh, P())
        args = tuple(jax.tree_util.tree_map(
            functools.partial(_place, sharding=shard if ax == 0 else repl), a)
            if (ax == 0 or not batched) else a for a, ax in zip(args, axes))
    if batched and per_device and mesh is not None:
        out = _cached(_per_device, fn, axes, mesh)(*args)
    else:
        out = fn(*args) if batched else _cached(_vmapped, fn, axes, mesh)(*args)
    if pad:
        out = jax.tree_util.tree_map(lambda x: x[:n], out)
    return out


def _normalise_in_axes(in_axes, n_args):
    if in_axes in (0, None) and not isinstance(in_axes, bool):
        axes = (in_axes,) * n_args
    elif isinstance(in_axes, (tuple, list)):
        axes = tuple(in_axes)
    else:
        raise ValueError(f"in_axes must be 0, None or a tuple of 0/None per argument; "
                         f"got {in_axes!r}")
    if len(axes) != n_args or any(a not in (0, None) or isinstance(a, bool) for a in axes):
        raise ValueError(f"in_axes must have one entry (0 or None) per argument "
                         f"({n_args}); got {in_axes!r}")
    if all(a is None for a in axes):
        raise ValueError("in_axes marks no argument as batched (0); nothing to sweep over")
    return axes


def _batch_size(args, axes) -> int:
    n = None
    for i, (a, ax) in enumerate(zip(args, axes)):
        if ax is None:
            continue
        for leaf in jax.tree_util.tree_leaves(a):
            shape = np.shape(leaf)
            if len(shape) == 0:
                raise ValueError(f"args[{i}] is batched (in_axes 0) but holds a scalar; give "
                                 f"it a leading scenario axis or mark it None in in_axes")
            if n is None:
                n = shape[0]
            elif shape[0] != n:
                raise ValueError(f"args[{i}] has {shape[0]} scenarios on its leading axis, "
                                 f"but an earlier batched argument has {n}; they must agree")
    if n is None:
        raise ValueError("the batched arguments hold no arrays")
    if n == 0:
        raise ValueError("the batch is empty (leading axis of size 0); give >= 1 scenario")
    return int(n)


def _cached(build, fn, axes, mesh):
    """``build(fn, axes, mesh)`` from its cache (so repeated sweeps do not retrace), or
    built afresh when ``fn`` is unhashable."""
    try:
        return build(fn, axes, mesh)
    except TypeError:  # unhashable fn
        return build.__wrapped__(fn, axes, mesh)


@functools.lru_cache(maxsize=64)
def _vmapped(fn, axes, mesh):
    """``jit(vmap(fn))``; the output keeps the scenario axis sharded like the inputs."""
    out_sh = None if mesh is None else NamedSharding(mesh, P(mesh.axis_names))
    return jit(jax.vmap(fn, in_axes=axes), out_shardings=out_sh)


@functools.lru_cache(maxsize=64)
def _per_device(fn, axes, mesh):
    """``jit(shard_map(fn))`` with the batched arguments split over the mesh."""
    row, rep = P(mesh.axis_names), P()
    return jit(jax.shard_map(fn, mesh=mesh, in_specs=tuple(row if a == 0 else rep
                                                          for a in axes),
                             out_specs=row, check_vma=False))


# ----------------------------------------------------- one scenario, sharded flows
def max_min_fair_sharded(incidence, capacity, demand=None, *, mesh: Mesh | None = None,
                         max_iter: int | None = None) -> MaxMinResult:
    """:func:`fabric_jax.max_min_fair` with the flows split across devices.

    Same model, algorithm and result as :func:`fabric_jax.max_min_fair` (see
    :mod:`fabric_jax.fairness`: one iteration freezes every flow whose bottleneck link
    is at the lowest level of all its flows); the flows, their incidence rows and
    demands are sharded over the mesh with :func:`jax.shard_map`, and the per-link sums
    and minima of an iteration are ``psum``/``pmin`` all-reduces over the mesh axes.
    Like the single-device solver, each device compacts the rows of its still-open
    flows into geometrically shrinking buffers as flows freeze.  Differences: no
    fixed-``iterations`` mode (so not reverse-mode differentiable), and one scenario at
    a time (use :func:`sweep` for batches).

    Args:
      incidence: :class:`~fabric_jax.Incidence` or dense ``[links, flows]`` array,
        concrete (it is laid out flow-major and split on the host).
      capacity: ``[links]`` bytes/s, finite and non-negative.
      demand: optional ``[flows]`` rate caps, bytes/s (``+inf`` = uncapped).
      mesh: :class:`~jax.sharding.Mesh`; flows are split over all its axes.  Default:
        one axis over ``jax.devices()`` (all hosts' devices after
        ``jax.distributed.initialize()``).  Flows are padded with inactive rows to a
        multiple of the device count.
      max_iter: safety cap on iterations (default ``flows + 1``, always enough).

    Returns:
      :class:`~fabric_jax.MaxMinResult`: ``rates`` ``[flows]`` (sharded over the mesh),
      ``link_load`` and ``saturated`` ``[links]`` (replicated), ``info``.

    Raises:
      ValueError: as :func:`fabric_jax.max_min_fair`, a batched capacity, a traced
        incidence, or a ``mesh`` that is not a Mesh.
    """
    inc = as_incidence(incidence)
    validate_inputs(inc, capacity, demand)
    if np.ndim(capacity) != 1:
        raise ValueError(f"capacity must be [links] = [{inc.n_links}] for the sharded solver; "
                         f"got shape {np.shape(capacity)} (sweep batches with "
                         f"fabric_jax.distributed.sweep)")
    if demand is not None and np.ndim(demand) != 1:
        raise ValueError(f"demand must be [flows] = [{inc.n_flows}] for the sharded solver; "
                         f"got shape {np.shape(demand)}")
    if any(isinstance(x, jax.core.Tracer) for x in (inc.link_idx, inc.flow_idx, inc.weight)):
        raise ValueError("incidence must be concrete for max_min_fair_sharded (it is split "
                         "across devices on the host); build it outside jit")
    if max_iter is not None and not (isinstance(max_iter, (int, np.integer)) and max_iter >= 1):
        raise ValueError(f"max_iter must be a positive integer or None; got {max_iter!r}")
    mesh = device_mesh(FLOW_AXIS) if mesh is None else _check_mesh(mesh)
    dtype = jnp.result_type(float)
    n_flows, n_links = inc.n_flows, inc.n_links
    links, weight = flow_rows(inc)
    dem = (jnp.full((n_flows,), jnp.inf, dtype) if demand is None
           else jnp.asarray(demand, dtype))
    pad = -n_flows % mesh.size
    if pad:  # inactive rows (weight 0) with demand 0: frozen at rate 0 from the start
        links = jnp.concatenate([links, jnp.zeros((pad, links.shape[1]), links.dtype)])
        weight = jnp.concatenate([weight, jnp.zeros((pad, weight.shape[1]), weight.dtype)])
        dem = jnp.concatenate([dem, jnp.zeros((pad,), dtype)])
    rows = NamedSharding(mesh, P(mesh.axis_names))
    repl = NamedSharding(mesh, P())
    args = (_place(links, rows), _place(jnp.asarray(weight, dtype), rows),
            _place(jnp.asarray(capacity, dtype), repl), _place(dem, rows))
    res = _sharded_solver(mesh, n_links, int(n_flows + 1 if max_iter is None else max_iter))(
        *args)
    if pad:
        res = MaxMinResult(rates=res.rates[:n_flows], link_load=res.link_load,
                           saturated=res.saturated, info=res.info)
    return res


@functools.lru_cache(maxsize=32)
def _sharded_solver(mesh: Mesh, n_links: int, max_iter: int):
    axes = tuple(mesh.axis_names)
    row, rep = P(axes), P()
    out_specs = MaxMinResult(rates=row, link_load=rep, saturated=rep,
                             info=MaxMinInfo(iterations=rep, max_violation=rep, converged=rep))

    def local(li, w, capacity, demand):
        # This device's rows as a flow-major incidence; fairness.solve does the rest,
        # with its per-link reductions made global over ``axes``.
        n_local, width = li.shape
        inc = Incidence(li.reshape(-1), jnp.repeat(jnp.arange(n_local, dtype=jnp.int32), width),
                        w.reshape(-1), n_links, n_local, width)
        return solve(inc, capacity, demand, max_iter=max_iter, axis_name=axes)

    return jit(jax.shard_map(local, mesh=mesh, in_specs=(row, row, rep, row),
                             out_specs=out_specs))


# ------------------------------------------------ one fluid run, sharded flows
#: Per-flow arguments of :func:`fabric_jax.simulate_fluid` (``[flows, ...]``) and the
#: value an inert padding flow takes (``None``: derived from the given values).
_FLOW_ARGS = dict(size=0.0, arrival=0.0, delay=0.0, latency=0.0, deps=-1, line_rate=None,
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
    shares: ``psum`` / ``pmin`` per iteration, as :func:`max_min_fair_sharded`), the
    receivers' flow counts and the HPCC reference time; totals and "every flow
    ..." tests (accounting, idle detection, ``stalled``) are global too.  So every
    device sees the link state the single-device run has, step by step; results agree
    with it up to float summation order (bytes, queues and pauses to 1e-9 in float64 on
    4 devices; a round-off difference can move a flow's finish instant inside a step by
    up to one step where a port's grant ties its standing queue, the discontinuity of
    ``fabric_jax.fluid_step._finish_in_step``).  Dependencies (``deps``) may cross devices:
    each step gathers the ``[flows]`` finish times.

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
    device's whole hop table).
    ``FluidResult.state`` is the gathered carry (padding stripped): it can be saved,
    not passed back here.

    Multi-host: call ``jax.distributed.initialize()`` on every process first (same
    program and inputs everywhere); the default mesh spans every process's devices,
    and every leaf of the result is gathered to every process.

    Args:
      incidence, capacity, size, dt, n_steps: as :func:`fabric_jax.simulate_fluid`.
      mesh: :class:`~jax.sharding.Mesh`; flows are split over all its axes.  Default:
        one axis (:data:`FLOW_AXIS`) over ``jax.devices()``.
      **options: the other keyword arguments of :func:`fabric_jax.simulate_fluid`.

    Returns:
      :class:`fabric_jax.FluidResult`, as :func:`fabric_jax.simulate_fluid`.

    Raises:
      ValueError: as :func:`fabric_jax.simulate_fluid`; a ``mesh`` that is not a
        Mesh; a per-flow argument whose leading axis is not ``flows``; ``init_state``;
        a ``routing`` policy with array parameters or unlisted aux entries.
      TypeError: an option :func:`fabric_jax.simulate_fluid` does not take.
    """
    run, args, finish = _sharded_fluid_call(incidence, capacity, size, dt=dt,
                                            n_steps=n_steps, mesh=mesh, **options)
    return finish(run(args))


def _sharded_fluid_call(incidence, capacity, size, *, dt, n_steps, mesh, **options):
    """Host side of :func:`simulate_fluid_sharded`: ``(run, args, finish)``, the jitted
    sharded run, its placed arguments (``run(args)``, or ``run.lower(args)`` to trace it
    only) and the function that gathers its result and strips the padding."""
    import inspect

    from . import fluid as fl
    from . import fluid_step as fs

    mesh = device_mesh(FLOW_AXIS) if mesh is None else _check_mesh(mesh)
    bound = inspect.signature(fl.simulate_fluid).bind(incidence, capacity, size, dt=dt,
                                                      n_steps=n_steps, **options)
    bound.apply_defaults()
    kw = bound.arguments
    if kw["init_state"] is not None:
        raise ValueError("init_state= is not supported by simulate_fluid_sharded (the carry "
                         "is laid out for one device); run fabric_jax.simulate_fluid for "
                         "it, or drop init_state")
    routing = kw["routing"]
    if routing is not None:
        _check_routing_shardable(routing)
    inc = as_incidence(incidence)
    n_flows = inc.n_flows
    for name in _FLOW_ARGS:
        x = kw[name]
        if x is not None and (np.ndim(x) < 1 or np.shape(x)[0] != n_flows):
            raise ValueError(f"{name} must have flows = {n_flows} on its leading axis "
                             f"(the incidence's flows); got shape {np.shape(x)}")
    smooth = kw["smooth"]
    if kw["solver_iterations"] is None and smooth is not None and smooth.enabled:
        kw["solver_iterations"] = n_flows + 1   # the unpadded run's default
    if kw["arrival"] is None:
        kw["arrival"] = np.zeros(n_flows)
    # inert padding flows: no hop, nothing to send, released (and finished) at 0
    pad = -n_flows % mesh.size
    kw["incidence"] = Incidence(inc.link_idx, inc.flow_idx, inc.weight, inc.n_links,
                                n_flows + pad)
    for name, fill in _FLOW_ARGS.items():
        x = kw[name]
        if x is None or pad == 0:
            continue
        a = np.asarray(x)
        if fill is None:   # a positive per-flow time or rate: one the flows already have
            fill = np.min(a) if a.size else 1.0
        kw[name] = np.concatenate([a, np.full((pad,) + a.shape[1:], fill, a.dtype)])
    if routing is not None and pad:
        kw["routing"] = _pad_routing(routing, pad)
    (static, n_outer, inner, keep_traj, net, params, fcp, smooth, dt_, rparams, rstate0,
     sched, _) = fl._prepare(**kw)
    axes = tuple(mesh.axis_names)
    net = _shard_net(fs, net, axes)
    args = dict(net=net, params=params, fcp=fcp, smooth=smooth, dt=dt_, sched=sched,
                rparams=rparams, rstate0=rstate0)
    placed = jax.tree_util.tree_map(
        lambda spec, sub: jax.tree_util.tree_map(
            functools.partial(_place, sharding=NamedSharding(mesh, spec)), sub),
        _arg_specs(fs, args, axes), args, is_leaf=lambda s: isinstance(s, P))
    out_specs = _fluid_out_specs(fs, axes, keep_traj, static.shape.lossy, rstate0)
    return (_sharded_fluid(static, n_outer, inner, keep_traj, mesh), placed,
            lambda res: _gather_strip(res, out_specs, axes, n_flows))


def _check_routing_shardable(routing):
    """Host: a routing policy whose state can be split over devices (every aux entry's
    flow axis known, no per-flow parameters); ``ValueError`` otherwise."""
    from .routing import AUX_FLOW_AXIS
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
    from .routing import AUX_FLOW_AXIS
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


def _route_specs(rstate, axes):
    """The :class:`~jax.sharding.PartitionSpec` of each entry of a routing state."""
    return _map_route(lambda x, ax: P() if ax is None else P(*([None] * ax), axes), rstate)


def _shard_net(fs, net, axes):
    """``net`` for the shards: hop tables whose link sums are global over ``axes`` (and
    scatter-adds: the segment tables index the whole table); no dependency columns
    when no flow has one (so no step gathers finish times)."""
    unknown = {f.name for f in dataclasses.fields(net)} - fs.NET_PER_FLOW - fs.NET_REPLICATED
    if unknown:
        raise RuntimeError(f"fabric_jax.fluid_step._Net fields {sorted(unknown)} are in neither "
                           "NET_PER_FLOW nor NET_REPLICATED; class them there")
    hops = dataclasses.replace(net.hops, by_link=None, by_prev=None, axis_name=axes)
    # traffic classes: the hop table of links x classes units, likewise global
    uhops = hops if net.uhops is net.hops else dataclasses.replace(
        net.uhops, by_link=None, by_prev=None, axis_name=axes)
    deps = net.deps
    if not bool(np.any(np.asarray(deps) >= 0)):
        deps = jnp.zeros((deps.shape[0], 0), deps.dtype)
    return dataclasses.replace(net, hops=hops, uhops=uhops, deps=deps)


def _net_specs(fs, net, row, rep):
    """The :class:`~jax.sharding.PartitionSpec` prefix of each field of ``net``."""
    return dataclasses.replace(net, **{f.name: row if f.name in fs.NET_PER_FLOW else rep
                                       for f in dataclasses.fields(net)})


def _fluid_out_specs(fs, axes, keep_traj, lossy=False, rstate=None):
    """The :class:`~jax.sharding.PartitionSpec` prefix of each part of the
    :class:`~fabric_jax.FluidResult` of a sharded run: per-flow records split along
    their flow axis (:data:`fabric_jax.fluid_slots.FLOW_AXIS` for the carry),
    link state and totals replicated."""
    from .fluid_slots import FLOW_AXIS as CARRY_FLOW_AXIS, GLOBAL_KEYS

    row, col, rep = P(axes), P(None, axes), P()
    state = {k: P(*([None] * ax), axes) for k, ax in CARRY_FLOW_AXIS.items()}
    # (the lossy links' drop counter is in the carry only with lossy-link faults)
    state.update({k: rep for k in GLOBAL_KEYS if lossy or k != "corrupted"})
    route = None
    if rstate is not None:      # dynamic routing: the policy's state, link loads, rates
        route = _route_specs(rstate, axes)
        state.update(route=route, load=rep, mark_l=rep, rate=row)
    traj = None
    if keep_traj:
        traj = fs.FluidTrajectory(t=rep, rate=col, throughput=col, queue=rep, usable=rep,
                                  mark=col, law_state=col, sent=rep, delivered=rep,
                                  queued=rep, dropped=rep, in_flight=rep, discarded=rep)
    info = fs.FluidInfo(max_residual=rep, stalled=rep, paused_time=rep, max_queue=rep,
                        stranded_time=row, stranded=row, discard_mode=col,
                        solver_iterations=rep)
    return fs.FluidResult(start=row, finish=row, fct=row, sent=row, delivered=row,
                          dropped=row, queued=row, link_queue=rep, law_state=row,
                          trajectory=traj, info=info, routing_state=route, state=state,
                          in_flight=row, discarded=row, link_corrupted=rep)


@functools.lru_cache(maxsize=16)
def _sharded_fluid(static, n_outer, inner, keep_traj, mesh):
    """The jitted, ``shard_map``-ped fluid run (:func:`fabric_jax.fluid_step._run_body`) for
    these static choices (cached, as :func:`fabric_jax.fluid_step._run` is by ``jit``)."""
    from . import fluid_step as fs
    from .fluid_slots import FLOW_AXIS as CARRY_FLOW_AXIS

    axes = tuple(mesh.axis_names)

    def local(args):
        net, params = args["net"], args["params"]
        carry = fs._init_carry(static.law, static.fc, static.shape, net.hops,
                               net.flows["size"], net.line_rate, net.base_rtt, params,
                               args["rstate0"])
        # the per-flow records differ between shards from the start (their type in the
        # loop is "varying over the flow axis"), the link state is the same on all
        carry = {k: (jax.tree_util.tree_map(_varying, v)
                     if k in CARRY_FLOW_AXIS or k == "rate" else v)
                 for k, v in carry.items()}
        if "route" in carry:
            carry["route"] = _map_route(lambda x, ax: x if ax is None else _varying(x),
                                        carry["route"])
        return fs._run_body(static, n_outer, inner, keep_traj, net, params, args["fcp"],
                            args["smooth"], args["dt"], args["rparams"], args["rstate0"],
                            args["sched"], carry)

    def _varying(v):
        vma = fs.varying_axes(jax.typeof(v))
        missing = tuple(a for a in axes if a not in vma)
        return jax.lax.pcast(v, missing, to="varying") if missing else v

    @jit
    def run(args):
        out_specs = _fluid_out_specs(fs, axes, keep_traj, static.shape.lossy,
                                     args["rstate0"])
        return jax.shard_map(local, mesh=mesh, in_specs=(_arg_specs(fs, args, axes),),
                             out_specs=out_specs)(args)

    return run


def _arg_specs(fs, args, axes):
    """The :class:`~jax.sharding.PartitionSpec` prefix of each argument of the run."""
    rep = P()
    rstate0 = args["rstate0"]
    return dict(net=_net_specs(fs, args["net"], P(axes), rep), params=rep, fcp=rep,
                smooth=rep, dt=rep, sched=rep, rparams=rep,
                rstate0=None if rstate0 is None else _route_specs(rstate0, axes))


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
