"""The fluid run's state: every record the loop carries from one step to the next.

:class:`FluidState` is a registered dataclass (a pytree).  Each field declares in its
metadata the axis of its flows (``flow_axis``: an int for a per-flow record, ``None``
for a record of the links or of the run, ``"routing"`` for the routing policy's state,
whose entries say their own, :data:`fabric_jax.routing.AUX_FLOW_AXIS`).  Every driver
that cuts the flows apart reads that one declaration: the sharded run splits the
per-flow records over devices (:func:`fabric_jax.distributed.simulate_fluid_sharded`),
the windowed run gathers and scatters them between flow slots
(:func:`fabric_jax.fluid.simulate_fluid_windowed`), a batch stacks them.

Layout, chosen so that a step compiles into few kernels: per flow and hop of its path
(the padded hop table of :mod:`fabric_jax.links`) the queued bytes ``x`` and their FIFO
bands ``xb``; per flow the wire to its receiver as a ``[depth, flows]`` history written
one row per step; the law's state and the offer as one ``[fields + 1, flows]`` array
(:func:`pack_law`); the feedback ring as one ``[ring_len, flows, signals]`` array
(:data:`SIGNALS`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from .. import flowcontrol as fcm

__all__ = ["FluidState", "SIGNALS", "ring_initial", "pack_law", "unpack_law",
           "initial_state", "ROUTING_AXIS"]

#: Per-flow congestion signals written into the feedback ring each step
#: (:func:`fabric_jax.fluid.stages.signals.emit_signals`): the ring is one
#: ``[ring_len, flows, signals]`` array, signals in this order.  ``arrived`` is the
#: running total of the flow's bytes that reached the receiver (delivered or discarded):
#: read one base RTT later it is what the sender has seen acknowledged (the ACK clock of
#: window-based laws, :func:`fabric_jax.fluid.stages.offer.offer`).
SIGNALS = ("mark", "rtt", "util", "rate", "loss", "rx_share", "arrived")

#: ``flow_axis`` of the routing policy's state: its entries declare their own axes.
ROUTING_AXIS = "routing"


def _field(flow_axis, default=dataclasses.MISSING):
    return dataclasses.field(default=default, metadata=dict(flow_axis=flow_axis))


@dataclasses.dataclass(frozen=True)
class FluidState:
    """The loop's carry after a step (``FluidResult.state``; pass it back to continue).

    Attributes (``flows``, ``hops``, ``links``, ``units`` = links x classes):
      k: int32 scalar, steps simulated so far (the run's clock is ``k dt``).
      remaining: ``[flows]`` bytes the sender has still to send (resends included).
      x: ``[flows, hops]`` bytes standing in the egress queue of each hop.
      xb: ``[flows, hops, fifo_bands]`` the same bytes in FIFO bands.
      transit: ``[flows, hops]`` bytes on the wire towards each hop.
      wire: ``[depth, flows]`` bytes put on the receiver wire in the last steps.
      start, finish: ``[flows]`` seconds (``inf`` before the event).
      done: ``[flows]`` bool, finished.
      sent, passed, delivered, dropped, discarded: ``[flows]`` byte counters.
      rx_phi: ``[2, flows]`` the receiver's discard state.
      law: ``[fields + 1, flows]`` the law's state and the offer (:func:`pack_law`).
      fc: :class:`fabric_jax.flowcontrol.FlowControlState` per unit.
      ring: ``[ring_len, flows, signals]`` the feedback ring.
      max_residual: scalar, the largest conservation residual so far, bytes.
      max_queue: ``[links]`` largest queue so far, bytes.
      solver_iterations: ``[2]`` int32 iterations of the step solves so far.
      stranded_time: ``[flows]`` seconds active with no live path.
      stranded: ``[flows]`` bool, stranded in the last step.
      route, load, mark_l, rate: with a routing policy: its state, the links' offered
        loads and marks, the flows' offers of the last step (``None`` otherwise).
      corrupted: with lossy links, ``[links]`` bytes each dropped (``None`` otherwise).
    """

    k: Any = _field(None)
    remaining: Any = _field(0)
    x: Any = _field(0)
    xb: Any = _field(0)
    transit: Any = _field(0)
    wire: Any = _field(1)
    start: Any = _field(0)
    finish: Any = _field(0)
    done: Any = _field(0)
    sent: Any = _field(0)
    passed: Any = _field(0)
    delivered: Any = _field(0)
    dropped: Any = _field(0)
    discarded: Any = _field(0)
    rx_phi: Any = _field(1)
    law: Any = _field(1)
    fc: Any = _field(None)
    ring: Any = _field(1)
    max_residual: Any = _field(None)
    max_queue: Any = _field(None)
    solver_iterations: Any = _field(None)
    stranded_time: Any = _field(0)
    stranded: Any = _field(0)
    route: Any = _field(ROUTING_AXIS, None)
    load: Any = _field(None, None)
    mark_l: Any = _field(None, None)
    rate: Any = _field(0, None)
    corrupted: Any = _field(None, None)

    def replace(self, **changes) -> "FluidState":
        """A copy with ``changes`` (field -> value)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def flow_axes(cls) -> dict:
        """``{field: flow axis}`` (an int, ``None`` for link / run records, or
        :data:`ROUTING_AXIS`), from the fields' declarations."""
        return {f.name: f.metadata["flow_axis"] for f in dataclasses.fields(cls)}

    def present(self) -> dict:
        """``{field: value}`` of the fields this run carries (not ``None``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) is not None}


jax.tree_util.register_dataclass(FluidState)


def ring_initial(base_rtt, line_rate, dtype=None):
    """``[flows, signals]`` the feedback ring's value before any signal was emitted:
    the base RTT, the line rate as receiver share, zeros otherwise (also the value of a
    flow slot that has not started, :mod:`fabric_jax.fluid.windowed`)."""
    base_rtt, line_rate = jnp.asarray(base_rtt, dtype), jnp.asarray(line_rate, dtype)
    zero = jnp.zeros_like(base_rtt)
    vals = dict(rtt=base_rtt, rx_share=line_rate)
    return jnp.stack([vals.get(name, zero) for name in SIGNALS], axis=-1)


def initial_state(law, fc, shape, hops, size, line_rate, base_rtt, params,
                  routing_state) -> FluidState:
    """The state before step 0 (``shape``: :class:`fabric_jax.fluid.problem.Shape`;
    ``hops``: the run's :class:`fabric_jax.links.HopTable`)."""
    n_flows = size.shape[0]
    n_links = hops.n_links
    fdt = line_rate.dtype
    ring0 = jnp.broadcast_to(ring_initial(base_rtt, line_rate, fdt)[None],
                             (shape.ring_len, n_flows, len(SIGNALS)))
    inf = jnp.asarray(jnp.inf, fdt)
    zf = jnp.zeros((n_flows,), fdt)
    zh = jnp.zeros(hops.link.shape, fdt)
    routed = dict(route=routing_state, load=jnp.zeros((n_links,), fdt),
                  mark_l=jnp.zeros((n_links,), fdt), rate=zf) if shape.routed else {}
    lossy = dict(corrupted=jnp.zeros((n_links,), fdt)) if shape.lossy else {}
    return FluidState(
        k=jnp.asarray(0, jnp.int32), remaining=jnp.asarray(size, fdt),
        x=zh, xb=jnp.zeros(hops.link.shape + (shape.fifo_bands,), fdt), transit=zh,
        wire=jnp.zeros((shape.wire_depth, n_flows), fdt),
        start=jnp.full((n_flows,), inf), finish=jnp.full((n_flows,), inf),
        done=jnp.zeros((n_flows,), bool), sent=zf, passed=zf, delivered=zf,
        dropped=zf, discarded=zf, rx_phi=jnp.zeros((2, n_flows), fdt),
        law=pack_law(law.init(line_rate, params)),
        fc=fcm.init_state(fc, n_links * shape.n_classes, fdt), ring=ring0,
        max_residual=jnp.asarray(0.0, fdt), max_queue=jnp.zeros((n_links,), fdt),
        solver_iterations=jnp.zeros((2,), jnp.int32),
        stranded_time=zf, stranded=jnp.zeros((n_flows,), bool), **routed, **lossy)


def pack_law(state, offered=None):
    """A law's state (a pytree of ``[flows]`` leaves) and the flows' offered rates as
    one ``[fields + 1, flows]`` array: the form the loop carries
    (:attr:`FluidState.law`), so that the step computes the senders in one kernel
    instead of one per field (the last row: the offer of the step that wrote it, 0 in
    an initial state)."""
    leaves = jax.tree_util.tree_leaves(state)
    if offered is None:
        offered = jnp.zeros_like(leaves[0])
    return jnp.stack(leaves + [offered])


def unpack_law(packed, template):
    """Inverse of :func:`pack_law`: the law's state with the structure (and dtypes) of
    ``template`` (e.g. ``law.init(...)``)."""
    leaves, treedef = jax.tree_util.tree_flatten(template)
    return jax.tree_util.tree_unflatten(
        treedef, [packed[i].astype(a.dtype) for i, a in enumerate(leaves)])
