"""The device side of :func:`fabric_jax.fluid.simulate_fluid`: the run's state, the
stages of one step, the jitted loop over steps, and the result it returns.

Units: sizes and queues in bytes, times in seconds, rates and capacities in bytes/s.

The model (what each stage computes, its sources and where it departs from them) is
described in :mod:`fabric_jax.fluid`, which prepares the run on the host (validation,
hop table, delay lines, static choices) and calls :data:`_run`.  The stages here follow
the order of one step (:func:`_step`): clock and faults (``_clock``, ``_apply_faults``),
route (``_route``), offer (``_offer``), allocate and transmit (``_transmit``,
``_nic_send``, ``_allocate_paths``, ``_buffers``, ``_transmit_classes``), propagate and
receive (``_propagate``, ``_lossy_links``, ``_receive``), signals (``_emit_signals``),
completion (``_complete``, ``_finish_in_step``, ``_last_bytes``); then the loop
(``_run_body``).  :mod:`fabric_jax.fluid_slots` and
:mod:`fabric_jax.distributed` reuse the state layout and the loop.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .compiling import jit
from . import faults as fm
from . import flowcontrol as fcm
from . import smooth as sm
from .cc import base as ccbase
from .fairness import joining_share, solve, solve_flat, water_fill
from .incidence import Incidence
from . import links as lk
from . import qos
from . import receiver as rx
from .sim import release_times


__all__ = ["FluidResult", "FluidTrajectory", "FluidInfo", "COMPLETION_RTOL", "SIGNALS"]


#: A flow is complete when ``delivered >= size * (1 - COMPLETION_RTOL[dtype])``: float32
#: accumulation of a flow's bytes through queues and delay lines over thousands of
#: steps loses up to ~1e-5 of its size (measured: 11 B of 1 MB after 4,000 steps of a
#: 4-to-1 incast under credits), which must not leave a flow unfinished forever.  The
#: finish time moves by the time the flow needs for its last ``rtol * size`` bytes.
COMPLETION_RTOL = {np.dtype(np.float32): 3e-5, np.dtype(np.float64): 1e-6}


@dataclasses.dataclass(frozen=True)
class FluidInfo:
    """Diagnostics.

    Attributes:
      max_residual: max over steps of ``|sent - delivered - d(queued + in_flight) -
        dropped|`` in the step, bytes (float round-off only; fault drops included; over all calls of a
        resumed run).
      stalled: some flow did not finish within ``n_steps``.
      paused_time: ``[links]`` seconds each link was paused (PFC) or credit-starved
        (time-integral of ``1 - usable/C``); ``[links, classes]`` per class with
        traffic classes.
      max_queue: ``[links]`` largest egress queue seen, bytes.
      stranded_time: ``[flows]`` seconds each flow was active but had no live path
        (every path it routes on crosses a failed link, ``faults=``); zeros without
        faults.
      stranded: ``[flows]`` bool, the flow was active and stranded in the last step.
      discard_mode: ``[2, flows]`` fraction of each flow's arrivals that the receiver
        discards at the end of the run, after out-of-order arrivals (row 0) and losses
        under go-back-N (row 1) (:func:`fabric_jax.receiver.discard_step`).
      solver_iterations: ``[2]`` int32 iterations run by the per-step max-min solves
        over the run (the cut-through allocation, the NIC shares; over all calls of a
        resumed run): divided by the steps, the solves' average depth.
    """

    max_residual: Any
    stalled: Any
    paused_time: Any
    max_queue: Any
    stranded_time: Any = None
    stranded: Any = None
    discard_mode: Any = None
    solver_iterations: Any = None


@dataclasses.dataclass(frozen=True)
class FluidTrajectory:
    """Snapshots every ``save_every`` steps (leading axis ``saves``).

    Attributes:
      t: ``[saves]`` time at the end of the saved step, s.
      rate: ``[saves, flows]`` offered rate, bytes/s.
      throughput: ``[saves, flows]`` delivered bytes in the step / dt, bytes/s.
      queue: ``[saves, links]`` egress queues, bytes.
      usable: ``[saves, links]`` usable capacity (pause / credits), bytes/s.
      mark: ``[saves, flows]`` path marking probability emitted.
      law_state: the law's state pytree with a leading ``saves`` axis.
      sent, delivered, queued, dropped, in_flight, discarded: ``[saves]`` totals over
        flows, bytes.
    """

    t: Any
    rate: Any
    throughput: Any
    queue: Any
    usable: Any
    mark: Any
    law_state: Any
    sent: Any
    delivered: Any
    queued: Any
    dropped: Any
    in_flight: Any = None
    discarded: Any = None


@dataclasses.dataclass(frozen=True)
class FluidResult:
    """Result of :func:`simulate_fluid`.

    Attributes:
      start, finish, fct: ``[flows]`` seconds (``finish = inf`` if unfinished).
      sent: ``[flows]`` bytes put on the wire (including resent bytes).
      delivered: ``[flows]`` bytes that reached the receiver (goodput).
      dropped: ``[flows]`` bytes dropped or trimmed.
      queued: ``[flows]`` bytes standing in switch queues at the end (bytes a NIC
        could not send stay unsent, in ``size - sent``).
      in_flight: ``[flows]`` bytes on the wire at the end (``sent = delivered +
        in_flight + queued + dropped + discarded``).
      link_queue: ``[links]`` egress queues at the end, bytes.
      law_state: final congestion-control state.
      trajectory: :class:`FluidTrajectory` or ``None``.
      info: :class:`FluidInfo`.
      routing_state: final routing-policy state (``routing=`` runs), else ``None``.
      state: the loop's complete carry after the last step (a dict pytree of arrays,
        with the step counter ``state["k"]``): pass it as ``init_state=`` to continue the
        run, or save it with :func:`fabric_jax.checkpoint.save_checkpoint`.
      discarded: ``[flows]`` bytes that reached the receiver and were discarded
        (out of order without ``reorder``, or inside a go-back-N window after a loss)
        and resent (:mod:`fabric_jax.receiver`).
      link_corrupted: ``[links]`` bytes each link dropped as a lossy link
        (:func:`fabric_jax.faults.lossy_link`; the receiving port's error counter:
        Ethernet FCS errors, InfiniBand ``PortRcvErrors``), over all calls of a resumed
        run; zeros without lossy links.  Also counted in ``dropped`` (per flow).
    """

    start: Any
    finish: Any
    fct: Any
    sent: Any
    delivered: Any
    dropped: Any
    queued: Any
    link_queue: Any
    law_state: Any
    trajectory: Any
    info: FluidInfo
    routing_state: Any = None
    state: Any = None
    in_flight: Any = None
    discarded: Any = None
    link_corrupted: Any = None


for _cls in (FluidInfo, FluidTrajectory, FluidResult):
    jax.tree_util.register_dataclass(_cls)


# ---------------------------------------------------------------- device side
@dataclasses.dataclass(frozen=True)
class _Shape:
    ring_len: int
    wire_depth: int
    routed: bool
    n_classes: int = 1
    fifo_bands: int = lk.DEFAULT_FIFO_BANDS
    lossy: bool = False        # a fault schedule with lossy links (carry: ``corrupted``)


@dataclasses.dataclass(frozen=True)
class _Static:
    """Static choices of a run (hashable: the jit cache key)."""

    law: Any
    fc: Any
    policy: Any
    shape: _Shape
    solver_iterations: Any
    solver_unroll: int = 0    # iterations of known trip count before the solves' loops
    solver_check_every: int = 1   # iterations per test of the per-step solves' loops
    rx_ooo: bool = False      # out-of-order arrivals cost (reorder=False, several paths)
    go_back_n: bool = False   # loss_recovery == "go_back_n"
    n_classes: int = 1        # traffic classes (1: the single-class model)
    levels: tuple = ()        # priority level of each class (qos.TrafficClasses.levels)
    shared: bool = False      # shared switch buffer with dynamic thresholds
    stop_when_idle: bool = False
    nic_ports: str = "check"  # "one": every flow leaves through one NIC port (host-proved)
    sweeps: int = 0           # sweeps of serve_through (0: hops per path)


@dataclasses.dataclass(frozen=True)
class _Net:
    """The run's fixed arrays: hop table, link and flow constants."""

    hops: lk.HopTable
    switch: Any       # [links] 1.0 at switch ports, 0.0 at host-NIC egress
    capacity: Any     # [links] nominal capacity
    line_rate: Any    # [flows]
    base_rtt: Any     # [flows]
    fb_steps: Any     # [flows] feedback delay, whole steps
    fb_phi: Any       # [flows] and fraction of a step
    wire_n: Any       # [flows] receiver-wire delay, whole steps
    wire_phi: Any     # [flows] and fraction of a step
    one_way: Any      # [flows] one-way latency, s
    deps: Any
    flows: Any
    path_lat: Any = None   # [flows, paths] latency of each candidate path, s
    mtu: Any = None        # packet size, bytes (receiver model)
    tolerance: Any = None  # reorder tolerance, s
    wait_pairs: Any = None  # queueing.IngressPairs (packet-scale port waits, rx_ooo)
    burstiness: Any = None  # queueing burstiness kappa
    # traffic classes: "units" are links x classes (unit l * n_classes + c); with one
    # class uhops is hops and uswitch is switch
    uhops: Any = None          # HopTable over units
    uswitch: Any = None        # [units] 1.0 at switch ports
    class_weight: Any = None   # [classes] arbitration weights
    # shared buffer (flowcontrol.SharedBuffer), per unit
    sb_size: Any = None        # [switches] bytes
    sb_alpha: Any = None       # [units]
    sb_egress: Any = None      # [units] switch of the egress queue
    sb_ingress: Any = None     # [units] switch of the ingress pool
    sb_headroom: Any = None    # [units] PFC headroom, bytes


jax.tree_util.register_dataclass(_Net)

#: Fields of :class:`_Net` that are per flow (every leaf's leading axis is ``flows``):
#: split over the devices by :func:`fabric_jax.distributed.simulate_fluid_sharded`; the
#: other fields (per link or unit, per switch, scalars) are replicated.  A new field
#: must be classed here or in :data:`NET_REPLICATED` (the sharded driver checks).
NET_PER_FLOW = frozenset({"hops", "uhops", "line_rate", "base_rtt", "fb_steps", "fb_phi",
                          "wire_n", "wire_phi", "one_way", "deps", "flows", "path_lat"})
NET_REPLICATED = frozenset({"switch", "capacity", "mtu", "tolerance", "wait_pairs",
                            "burstiness", "uswitch", "class_weight", "sb_size", "sb_alpha",
                            "sb_egress", "sb_ingress", "sb_headroom"})


# ------------------------------------------------------ flows split over devices
# fabric_jax.distributed.simulate_fluid_sharded runs this loop inside jax.shard_map,
# each shard holding a slice of the flows; ``net.hops.axis_name`` names the mesh axis.
# The hop table's link-side sums are then global by themselves
# (fabric_jax.links.HopTable); the other reductions over flows (the incidence's link
# loads, the solves, flow counts, totals, "every flow ..." tests) go through these.
# ``axis_name=None`` (simulate_fluid): the identity, the single-device program.

def _over_flows(x, axis_name, op=jax.lax.psum):
    """``x`` reduced over the shards of the flows (``op``: ``psum`` or ``pmax``)."""
    return x if axis_name is None else op(x, axis_name)


def _all_flows(pred, axis_name):
    """A scalar bool that holds on every shard (loop and ``cond`` predicates must agree)."""
    if axis_name is None:
        return pred
    return jax.lax.pmin(pred.astype(jnp.int32), axis_name) > 0


def _solve_cap(n_local, axis_name):
    """``max_iter`` of the step's exact solves: their default ``flows + 1`` over every
    shard's flows (``None``, the solver's own default, unsharded)."""
    if axis_name is None:
        return None
    return n_local * jax.lax.axis_size(axis_name) + 1


def _release(net, finish):
    """:func:`fabric_jax.sim.release_times` of the flows; with sharded flows a
    dependency may name a flow of another shard, so ``finish`` is gathered first."""
    axis_name = net.hops.axis_name
    if axis_name is not None and net.deps.shape[1] > 0:
        finish = jax.lax.all_gather(finish, axis_name, tiled=True)
    return release_times(net.deps, finish, net.flows["arrival"], net.flows["delay"])

#: Per-flow congestion signals written into the feedback ring each step
#: (``_emit_signals``; shared with :mod:`fabric_jax.fluid_slots`): the ring is one
#: ``[ring_len, flows, signals]`` array, signals in this order.  ``arrived`` is the
#: running total of the flow's bytes that reached the receiver (delivered or discarded):
#: read one base RTT later it is what the sender has seen acknowledged (the ACK clock of
#: window-based laws, :func:`_offer`).
SIGNALS = ("mark", "rtt", "util", "rate", "loss", "rx_share", "arrived")


def ring_initial(base_rtt, line_rate, dtype=None):
    """``[flows, signals]`` the feedback ring's value before any signal was emitted:
    the base RTT, the line rate as receiver share, zeros otherwise (also
    :mod:`fabric_jax.fluid_slots`'s value for a flow that has not started)."""
    base_rtt, line_rate = jnp.asarray(base_rtt, dtype), jnp.asarray(line_rate, dtype)
    zero = jnp.zeros_like(base_rtt)
    vals = dict(rtt=base_rtt, rx_share=line_rate)
    return jnp.stack([vals.get(name, zero) for name in SIGNALS], axis=-1)


def _init_carry(law, fc, shape: _Shape, hops: lk.HopTable, size, line_rate, base_rtt,
                params, rstate0):
    """The loop's carry before step 0 (``FluidResult.state`` has the same structure)."""
    n_flows = size.shape[0]
    n_links = hops.n_links
    fdt = line_rate.dtype
    ring0 = jnp.broadcast_to(ring_initial(base_rtt, line_rate, fdt)[None],
                             (shape.ring_len, n_flows, len(SIGNALS)))
    inf = jnp.asarray(jnp.inf, fdt)
    zf = jnp.zeros((n_flows,), fdt)
    zh = jnp.zeros(hops.link.shape, fdt)
    carry = dict(k=jnp.asarray(0, jnp.int32), remaining=jnp.asarray(size, fdt),
                 x=zh, xb=jnp.zeros(hops.link.shape + (shape.fifo_bands,), fdt), transit=zh,
                 wire=jnp.zeros((shape.wire_depth, n_flows), fdt),
                 start=jnp.full((n_flows,), inf), finish=jnp.full((n_flows,), inf),
                 done=jnp.zeros((n_flows,), bool), sent=zf, passed=zf, delivered=zf,
                 dropped=zf, discarded=zf, rx_phi=jnp.zeros((2, n_flows), fdt),
                 law=pack_law(law.init(line_rate, params)),
                 fc=fcm.init_state(fc, n_links * shape.n_classes, fdt), ring=ring0,
                 max_residual=jnp.asarray(0.0, fdt), max_queue=jnp.zeros((n_links,), fdt),
                 solver_iterations=jnp.zeros((2,), jnp.int32),
                 stranded_time=zf, stranded=jnp.zeros((n_flows,), bool))
    if shape.routed:
        carry.update(route=rstate0, load=jnp.zeros((n_links,), fdt),
                     mark_l=jnp.zeros((n_links,), fdt), rate=zf)
    if shape.lossy:
        carry.update(corrupted=jnp.zeros((n_links,), fdt))
    return carry


def pack_law(state, offered=None):
    """A law's state (a pytree of ``[flows]`` leaves) and the flows' offered rates as
    one ``[fields + 1, flows]`` array: the form the loop carries
    (``FluidResult.state["law"]``), so that the step computes the senders in one kernel
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


def _clock(net, c, dt):
    """Time of the step and which flows have started / are active."""
    t = c["k"].astype(dt.dtype) * dt
    rel = _release(net, c["finish"])
    start = jnp.where(jnp.isfinite(c["start"]), c["start"], rel)
    started = start < t + dt
    return t, start, started, started & ~c["done"]


def _apply_faults(net, sched, c):
    """Capacity in force; bytes queued on / travelling to failed links are dropped."""
    hops = net.hops
    if sched is None:
        return net.capacity, c["x"], c["transit"], jnp.zeros_like(c["sent"]), None
    cap_k = net.capacity * fm.capacity_factor(sched, c["k"])
    dead = hops.valid & ~hops.gather(cap_k > 0, True)
    lost = jnp.where(dead, c["x"] + c["transit"], 0.0)
    x = jnp.where(dead, 0.0, c["x"])
    transit = jnp.where(dead, 0.0, c["transit"])
    path_ok = ~jnp.any(hops.per_path(dead), axis=2)  # [flows, paths]
    return cap_k, x, transit, jnp.sum(lost, axis=1), path_ok


def _route(static, net, c, x, cap_k, active, t, path_ok, rparams, dt):
    """The step's split over each flow's paths, its incidence, stranded flows."""
    hops = net.hops
    n_flows = x.shape[0]
    fdt = x.dtype
    w_static = jnp.where(hops.valid, 1.0, 0.0).astype(fdt)
    inc = Incidence(hops.link.ravel(), jnp.repeat(jnp.arange(n_flows, dtype=jnp.int32),
                                                  hops.link.shape[1]),
                    w_static.ravel(), hops.n_links, n_flows, hops.link.shape[1], hops.by_link)
    if static.policy is None:
        stranded = (jnp.zeros((n_flows,), bool) if path_ok is None else ~path_ok[:, 0])
        return jnp.ones((n_flows, 1), fdt), inc, stranded, None
    policy = static.policy
    rview = policy.view(queue=hops.link_sum(x), capacity=cap_k, load=c["load"],
                        mark=c["mark_l"], flow_rate=c["rate"], active=active, t=t)
    rstate = policy.step(c["route"], rview, dt, rparams)
    split = rstate.split.astype(fdt)
    if path_ok is None:
        stranded = jnp.zeros((n_flows,), bool)
    else:  # no traffic on dead paths, whatever the policy does
        path_valid = jnp.any(hops.per_path(hops.valid), axis=2)
        live = jnp.where(path_ok & path_valid, split, 0.0)
        lw = jnp.sum(live, axis=1, keepdims=True)
        stranded = lw[:, 0] <= 0
        split = jnp.where(lw > 0, live / jnp.where(lw > 0, lw, 1.0), split)
    w_dyn = jnp.where(hops.valid, jnp.repeat(split, hops.seg, axis=1), 0.0)
    return split, inc.with_weight(w_dyn.ravel()), stranded, rstate


def _hop_count(hops):
    path_valid = jnp.any(hops.per_path(hops.valid), axis=2)
    n = jnp.sum(hops.valid, axis=1) / jnp.maximum(jnp.sum(path_valid, axis=1), 1)
    return n


def _offer(static, net, c, t, start, started, active, stranded, params, smooth, dt):
    """Senders: delayed feedback -> law step -> offered rates ``[flows]``.

    A flow released inside the step sends only after its release: its offer is scaled
    by the part of the step it is active, ``(t + dt - start) / dt``."""
    law = static.law
    k, ring, ring_len = c["k"], c["ring"], static.shape.ring_len
    ar = jnp.arange(net.line_rate.shape[0])
    phi = net.fb_phi

    def delayed(lag):   # [flows, signals] emitted lag + phi steps ago (linear in phi)
        return ((1.0 - phi)[:, None] * ring[(k - lag) % ring_len, ar]
                + phi[:, None] * ring[(k - lag - 1) % ring_len, ar])

    got = dict(zip(SIGNALS, jnp.moveaxis(delayed(net.fb_steps), 1, 0)))
    if static.fc.mode == "drop" and static.fc.rto_steps:   # losses are seen after the RTO
        got["loss"] = delayed(net.fb_steps + static.fc.rto_steps)[:, SIGNALS.index("loss")]
    sig = ccbase.FlowSignals(
        mark=got["mark"], rtt=got["rtt"], base_rtt=net.base_rtt, util=got["util"],
        rate=got["rate"], loss=got["loss"], rx_share=got["rx_share"],
        line_rate=net.line_rate, hops=_hop_count(net.hops).astype(dt.dtype))
    law0 = law.init(net.line_rate, params)
    law_state = law.step(unpack_law(c["law"], law0), sig, dt, params, smooth)

    def pick(a, b):
        s = started.reshape(started.shape + (1,) * (jnp.ndim(a) - 1))
        return jnp.where(s, a, b)
    law_state = jax.tree_util.tree_map(pick, law_state, law0)
    live = jnp.clip((t + dt - jnp.where(started, start, t)) / dt, 0.0, 1.0)
    offered = jnp.minimum(jnp.minimum(law_state.rate, net.line_rate) * live,
                          c["remaining"] / dt)
    if law.window is not None:
        # window-based law: bytes in flight = queued or in transit in the fabric + those
        # that reached the receiver less than one base RTT ago (their ACKs are still on
        # the way back; ``arrived`` read one feedback delay ago is what is acknowledged)
        acked = got["arrived"]
        in_flight = (jnp.sum(c["x"], axis=1) + jnp.sum(c["transit"], axis=1)
                     + jnp.maximum(c["passed"] + c["discarded"] - acked, 0.0))
        # smooth mode: the cap's max and min relaxed like the laws' own (exact: as is)
        cap_rate = ccbase.window_cap(law.window(law_state, sig, params), in_flight, dt,
                                     smooth, net.line_rate * dt)
        offered = sm.minimum(offered, cap_rate, net.line_rate, smooth)
    offered = jnp.where(active & ~stranded, jnp.maximum(offered, 0.0), 0.0)
    # the senders' new state and offers in one kernel (the barrier keeps XLA from
    # reading the rows through the stack, which would split it again)
    packed = jax.lax.optimization_barrier(pack_law(law_state, offered))
    return unpack_law(packed, law0), packed[-1], packed


#: Compaction of the step's max-min solve (:func:`fabric_jax.fairness.solve`): none.  A
#: step settles in a few iterations, so the levels only cost compile time
#: (``python experiments/bench_compare.py``, whose default baseline is ``"fine"``:
#: compile CPU 1.9-2.8x lower per ``compare`` preset, the same finish times).
_STEP_COMPACTION = "none"


def _transmit(static, net, xb, transit, usable, inc_k, split, offered, fcp, dt):
    """Allocate, transmit and queue: serve the queues (standing + arriving from the wire),
    share what is left among the fresh offers (max-min), park the excess, apply buffers.

    ``xb`` ``[flows, hops, K]``: the standing queues in FIFO bands
    (:func:`fabric_jax.links.serve`).

    Returns a dict: ``served`` ``[flows, hops]`` bytes sent by each hop, ``x`` new
    standing queues and ``xb`` their bands, ``alloc`` ``[flows]`` cut-through rates,
    ``served_l`` ``[links]``, ``load_o`` ``[links]`` offered load, ``dropped``
    ``[flows]`` buffer drops.
    """
    hops = net.hops
    served, left_b, left_a, served_l, _, carry, _, span = lk.serve_through(
        hops, xb, transit, usable, dt, static.sweeps or hops.seg)
    fresh = jnp.maximum(usable - served_l / dt, 0.0)
    with jax.named_scope("nic_send"):
        send, nic_rounds = _nic_send(static, net.switch, _first_hops(inc_k, hops.seg), fresh,
                                     offered, static.nic_ports, hops.axis_name)
    with jax.named_scope("allocate"):
        _, alloc_p, alloc, tx_cut, solve_it = _allocate_paths(static, hops, inc_k, fresh,
                                                              send)
    load_o = _over_flows(inc_k.link_load(offered), hops.axis_name)
    place = _place_excess_paths(hops, inc_k, net.switch, send, alloc_p, fresh, dt)
    # bytes that arrived at each queue this step and still stand there: the FIFO's tail
    arrived_left = left_a + place
    x_new, dropped = _buffers(static, net, hops, net.switch, jnp.sum(left_b, axis=-1)
                              + arrived_left, arrived_left, fcp, offered)
    return dict(served=served, x=x_new, xb=_tail_bands(hops, left_b, x_new, span[2]),
                alloc=alloc, alloc_p=alloc_p, tx=served_l / dt + tx_cut, served_l=served_l,
                load_o=load_o,
                dropped=dropped, transit=carry, send=send, span=span,
                rounds=jnp.stack([solve_it, nic_rounds]),
                # one path per flow: the cut-through load is the allocation's link load
                load_cut=tx_cut if hops.n_paths == 1 else None)


def _path_incidence(hops, inc):
    """The incidence of the step's *paths*: entity ``f * paths + p`` is path ``p`` of
    flow ``f``, with the weights of ``inc`` (its split on its hops).  With one path per
    flow it is ``inc``."""
    n_flows, n_paths, seg = inc.n_flows, hops.n_paths, hops.seg
    sub = (jnp.arange(n_flows * n_paths, dtype=jnp.int32).reshape(n_flows, n_paths, 1)
           * jnp.ones((1, 1, seg), jnp.int32)).ravel()
    return Incidence(inc.link_idx, sub, inc.weight, inc.n_links, n_flows * n_paths, seg,
                     inc.by_link)


def _path_split(hops, inc):
    """``[flows, paths]`` the split of each path (the weight of its hops in ``inc``)."""
    return jnp.max(hops.per_path(inc.weight.reshape(hops.link.shape)), axis=2)


def _allocate_paths(static, hops, inc, fresh, send):
    """Cut-through allocation per path: ``(r [flows, paths], alloc_p [flows, paths],
    alloc [flows], tx [links])`` rates in bytes/s, and the solve's iterations.

    A flow sends ``send_f s_fp`` on path ``p`` (its split).  Each path is its own
    entity in the weighted max-min (weight ``s_fp``, demand ``send_f``): ``r_fp`` is the
    flow rate the path carries its share of, ``alloc_fp = s_fp r_fp`` crosses it
    cut-through.  At a link that all of a flow's paths cross (its NIC, its receiver's
    downlink) its paths hold a common level, as the flow-level max-min does (with one
    path per flow it *is* the flow-level max-min); where they part, each path gets
    what its own hops allow.  Per-packet multipath routing sends each packet down one
    path, so the packets on a path whose hops have room are not held back by a
    congested path of the same flow: until 2026-12-03 a flow had one rate spread by its
    split, so a standing queue on one of its paths (capacity left 0) held every path
    to 0 and the step's bytes waited in that queue, a dt-proportional error
    (``experiments/adaptive_routing.py``, ``remote_congestion``)."""
    pinc = _path_incidence(hops, inc)
    split = _path_split(hops, inc)
    demand = jnp.where(split > 0, send[:, None], 0.0).ravel()
    axis_name = hops.axis_name
    sol = solve(pinc, fresh, demand, iterations=static.solver_iterations,
                compaction=_STEP_COMPACTION, axis_name=axis_name,
                max_iter=_solve_cap(pinc.n_flows, axis_name), unroll=static.solver_unroll,
                check_every=static.solver_check_every)
    r = jnp.minimum(sol.rates, demand).reshape(split.shape)
    alloc_p = split * r
    return (r, alloc_p, _flow_alloc(split, alloc_p, send),
            _over_flows(pinc.link_load(r.ravel()), axis_name), sol.info.iterations)


def _flow_alloc(split, alloc_p, send):
    """``[flows]`` cut-through rate of each flow: the sum over its paths; a flow on no
    link (no path with a hop) is limited by nothing but its send rate, as in the
    flow-level max-min (:func:`fabric_jax.fairness.solve`)."""
    return jnp.where(jnp.any(split > 0, axis=1), jnp.sum(alloc_p, axis=1), send)


def _place_excess_paths(hops, inc, switch, send, alloc_p, fresh, dt):
    """``[flows, hops]`` where each path's unallocated bytes ``(send_f s_fp - alloc_fp)
    dt`` wait: at the first overloaded switch port of the path (the sender's NIC queue,
    returned to the sender, when there is none), ports judged by the loads of
    :func:`_overloaded_along`."""
    n_flows, n_paths = alloc_p.shape
    demand = _path_split(hops, inc) * send[:, None]
    over = _overloaded_along(hops, inc, switch, demand, alloc_p, fresh)
    over_e = hops.per_path(hops.gather(over, False) & hops.valid)
    first = jnp.argmax(over_e, axis=2)          # 0 (the first hop) when none is overloaded
    at_first = jnp.arange(hops.seg)[None, None, :] == first[:, :, None]
    excess = jnp.maximum(demand - alloc_p, 0.0) * dt
    return jnp.where(at_first, excess[:, :, None], 0.0).reshape(n_flows, hops.link.shape[1])


def _tail_bands(hops, left_b, x_new, lb_left=None):
    """The bands after the step: the standing bands left, a band freed at the tail
    (:func:`fabric_jax.links.merge_bands`) holding what joined the queue in the step."""
    return lk.reconcile_bands(lk.merge_bands(hops, left_b, lb_left), x_new)


def _nic_send(static, switch, inc, cap, offered, ports="check", axis_name=None):
    """``[flows]`` rates the host NICs put on the wire: each NIC shares its capacity
    ``cap`` (``[links]`` or ``[units]``, the capacity left at its port; 0 while paused)
    max-min among its flows' offers, whatever lies downstream.

    This is the NIC's round-robin among its queue pairs ([HPCC-NS3]
    ``qbb-net-device.cc`` ``RdmaEgressQueue::GetNextQindex``: every QP with bytes left
    whose pacing allows a packet gets its turn; the NIC does not know the fabric's
    state beyond PFC).  What a flow sends beyond its cut-through allocation queues at
    the first overloaded switch port of its path and takes its place in that FIFO;
    what it offers beyond its NIC share stays unsent with the sender
    (:func:`_hold_at_sender`).  Flows whose path starts at no NIC send their offer.
    A flow is therefore never starved at a NIC because a port downstream is saturated
    by a standing queue: it joins that queue at its NIC share, as packets do.

    Computation: when every flow leaves through at most one NIC port (all its paths'
    first hops on one link: one rail, one plane), the ports decouple and each is a
    water-fill over its flows' offers (:func:`fabric_jax.fairness.water_fill`, on
    ``[flows]`` arrays); otherwise (several ports per flow: multi-plane NICs, or the
    link + class-queue pairs of the traffic-class model) the bottleneck-freezing
    iteration over the entries in one loop (:func:`fabric_jax.fairness.solve_flat`).
    Both are the exact max-min allocation (with ``solver_iterations`` set, both run
    that many rounds, as :func:`~fabric_jax.fairness.solve` does).  ``ports``
    (static): ``"one"`` when the host proved that every flow leaves through at most one
    NIC port (:func:`_one_nic_port`), ``"several"`` when every flow may use several,
    ``"check"`` to decide on the device (a ``lax.cond``).  ``axis_name``: the mesh axis
    the flows are split over (:func:`_over_flows`), ``None`` unsharded.
    """
    li, fi = inc.link_idx, inc.flow_idx
    n_links, n_flows = inc.n_links, inc.n_flows
    at_nic = (switch[li] == 0) & (inc.weight != 0)
    w_nic = jnp.where(at_nic, inc.weight, 0.0)
    port_e, top_e = jnp.where(at_nic, li, n_links), jnp.where(at_nic, li, -1)
    if inc.row_width is not None and li.shape[0] == n_flows * inc.row_width:
        rows = lambda a: a.reshape(n_flows, inc.row_width)  # noqa: E731 (flow-major)
        weight, port, top = (jnp.sum(rows(w_nic), axis=1), jnp.min(rows(port_e), axis=1),
                             jnp.max(rows(top_e), axis=1))
    else:
        weight = jax.ops.segment_sum(w_nic, fi, num_segments=n_flows)
        port = jax.ops.segment_min(port_e, fi, num_segments=n_flows)
        top = jax.ops.segment_max(top_e, fi, num_segments=n_flows)
    iters = static.solver_iterations

    def one_port():
        return water_fill(port, weight, cap, offered, iterations=iters, with_rounds=True,
                          axis_name=axis_name, unroll=static.solver_unroll)

    def several_ports():
        nic_inc = Incidence(li, fi, w_nic, n_links, n_flows)
        if iters is not None:
            sol = solve(nic_inc, cap, offered, iterations=iters, axis_name=axis_name)
            return sol.rates, sol.info.iterations
        return solve_flat(nic_inc, cap, offered, with_rounds=True, axis_name=axis_name,
                          max_iter=_solve_cap(n_flows, axis_name))

    if ports == "one":
        rates, rounds = one_port()
    elif ports == "several":
        rates, rounds = several_ports()
    else:
        rates, rounds = jax.lax.cond(_all_flows(jnp.all(top <= port), axis_name), one_port,
                                     several_ports)
    return jnp.minimum(rates, offered), rounds


def _first_hops(inc, seg):
    """The entries of an incidence laid out as a ``[flows, hops]`` hop table (``seg``
    hops per path) at the first hop of each path: the only hops that can be a host NIC
    (so :func:`_nic_send` works on ``1/seg`` of the entries), flow-major with one entry
    per path (``row_width``)."""
    if inc.n_flows == 0 or inc.link_idx.shape[0] == 0:   # no flows: nothing to pick
        return inc
    first = lambda a: a.reshape(inc.n_flows, -1)[:, ::seg].ravel()  # noqa: E731
    li = first(inc.link_idx)
    return Incidence(li, first(inc.flow_idx), first(inc.weight), inc.n_links, inc.n_flows,
                     li.shape[0] // inc.n_flows)


def _overloaded(switch, load, fresh):
    """``[links]`` switch ports whose load exceeds the capacity left (where the excess
    of :func:`_place_excess_paths` waits; a NIC is never one: it sends only
    its share, :func:`_nic_send`)."""
    return (load > fresh * (1.0 + 1e-6)) & (switch > 0)


#: Passes of :func:`_overloaded_along` (each can only clear ports; two settle a
#: leaf-spine or fat-tree path whose congested hops lie one after the other).
_OVERLOAD_PASSES = 3


def _overloaded_along(hops, inc, switch, demand_p, alloc_p, fresh):
    """``[links]`` overloaded switch ports, counting on the hops past a path's first
    overloaded hop only what crosses that hop (``alloc_p``), not the excess that waits
    there: a port behind a congested one is not overloaded by bytes queued upstream.

    Starts from every port loaded above its capacity left by what the paths send
    (``demand_p`` ``[flows, paths]``), then recounts the loads with the excess stopped at
    the first overloaded hop of each path (:data:`_OVERLOAD_PASSES` passes; the set
    only shrinks)."""
    on = hops.valid & (inc.weight.reshape(hops.link.shape) != 0)
    per_hop = lambda a: jnp.repeat(a, hops.seg, axis=1)  # noqa: E731  [flows, hops]
    d_e, a_e = jnp.where(on, per_hop(demand_p), 0.0), jnp.where(on, per_hop(alloc_p), 0.0)
    link_sum = lambda e: _over_flows(inc.link_sum(e.ravel()), hops.axis_name)  # noqa: E731
    over = _overloaded(switch, link_sum(d_e), fresh)
    for _ in range(_OVERLOAD_PASSES - 1):
        past = lk.past_first(hops, over)
        over = _overloaded(switch, link_sum(jnp.where(past, a_e, d_e)), fresh)
    return over


def _buffers(static, net, bh, switch, x_new, arrived_left, fcp, offered):
    """Buffer limits on the step's arrivals: ``(x, dropped [flows])``.

    ``bh`` is the hop table of the queues (links, or links x classes with traffic
    classes) and ``switch`` its switch-port flags.  PFC: ingress pool overflow (headroom
    exhausted); drop / trim: egress queues at switch ports above their limit, the
    static ``buffer`` or, with a shared buffer, the dynamic threshold
    (:func:`fabric_jax.flowcontrol.dynamic_limit`)."""
    mode = static.fc.mode
    if mode in ("pfc", "drop", "trim"):
        both = jnp.stack([x_new, arrived_left], axis=-1)   # one reduction for the two
        if mode == "pfc":   # ingress pool overflow (headroom exhausted)
            level, arr_l = jnp.moveaxis(bh.pool_sum(both), -1, 0)
            room = fcp.buffer
            to_link = bh.prev
        else:               # egress tail drop / trim at switch ports only
            level, arr_l = jnp.moveaxis(bh.link_sum(both), -1, 0)
            if static.shared:
                room = fcm.dynamic_limit(level, jnp.maximum(level - arr_l, 0.0), net.sb_egress,
                                         net.sb_alpha, net.sb_size)
                room = jnp.where(switch > 0, room, jnp.inf)
            else:
                room = jnp.where(switch > 0, fcp.buffer, jnp.inf)
            to_link = bh.link
        over = jnp.maximum(level - room, 0.0)
        a_pos = arr_l > 0
        ratio = jnp.where(a_pos, jnp.minimum(over / jnp.where(a_pos, arr_l, 1.0), 1.0), 0.0)
        ratio_e = jnp.concatenate([ratio, jnp.zeros((1,), ratio.dtype)])[to_link]
        drop_e = arrived_left * ratio_e
        x_new = x_new - drop_e
        dropped = jnp.sum(drop_e, axis=1)
    else:
        dropped = jnp.zeros_like(offered)
    return jnp.maximum(x_new, 0.0), dropped


def _safe_div(a, b):
    pos = b > 0
    return jnp.where(pos, a / jnp.where(pos, b, 1.0), 0.0)


def _transmit_classes(static, net, xb, transit, ceiling, cap_k, inc_k, split, offered, fcp,
                      dt):
    """:func:`_transmit` with traffic classes (:mod:`fabric_jax.qos`).

    Units are ``links x classes``.  Each class wants ``d = min(backlog / dt + fresh
    offers, ceiling)`` at each link (``ceiling``: its per-class pause / credits); the
    link is shared among the classes by :func:`fabric_jax.qos.arbitrate`, then inside
    each class as before (its queue first, then max-min among its fresh offers on what
    is left of its grant).  What the grants leave unused (a class whose flows are
    limited elsewhere) goes, in a second pass, first to standing queues then to fresh
    offers of any class, within each class's ceiling (work conservation).

    Returns the dict of :func:`_transmit` with ``served_l`` per unit and, in addition,
    ``vinc`` (the unit incidence) and ``usable_l`` ``[links]``.
    """
    hops, uh = net.hops, net.uhops
    n_cls, n_links = static.n_classes, hops.n_links
    n_units = uh.n_links
    ax = hops.axis_name        # sharded flows: every sum onto links is global
    vinc = Incidence(uh.link.ravel(), inc_k.flow_idx, inc_k.weight, n_units, inc_k.n_flows)
    per_link = lambda u: jnp.sum(u.reshape(n_links, n_cls), axis=1)  # noqa: E731
    per_unit = lambda l: jnp.repeat(l, n_cls)  # noqa: E731
    load_u = _over_flows(vinc.link_load(offered), ax)

    def grant_of(backlog):   # backlog: [units] bytes standing + arriving in the step
        want = jnp.minimum(backlog / dt + load_u, ceiling)
        return qos.arbitrate(cap_k, want.reshape(n_links, n_cls), net.class_weight,
                             static.levels).reshape(n_units)

    served, left_b, left_a, served_u, _, carry, grant, span = lk.serve_through(
        uh, xb, transit, grant_of, dt, uh.seg)
    left = jnp.sum(left_b, axis=-1) + left_a
    fresh = jnp.maximum(grant - served_u / dt, 0.0)
    inc2 = Incidence(jnp.concatenate([inc_k.link_idx, n_links + vinc.link_idx]),
                     jnp.concatenate([inc_k.flow_idx, inc_k.flow_idx]),
                     jnp.concatenate([inc_k.weight, inc_k.weight]), n_links + n_units,
                     inc_k.n_flows)
    switch2 = jnp.concatenate([net.switch, net.uswitch])

    # the NICs' shares of the offers: on the class grants, then on what the grants
    # leave unused at the NIC port, within each class's ceiling (as pass 2 below)
    f_k, f_u = _first_hops(inc_k, uh.seg), _first_hops(vinc, uh.seg)
    send1, rounds1 = _nic_send(static, net.uswitch, f_u, fresh, offered, static.nic_ports,
                               axis_name=ax)
    use_u = _over_flows(vinc.link_load(send1), ax)
    f2 = Incidence(jnp.concatenate([f_k.link_idx, n_links + f_u.link_idx]),
                   jnp.concatenate([f_k.flow_idx, f_u.flow_idx]),
                   jnp.concatenate([f_k.weight, f_u.weight]), n_links + n_units, inc_k.n_flows)
    send2, rounds2 = _nic_send(static, switch2, f2,
                      jnp.concatenate([jnp.maximum(cap_k - per_link(served_u / dt + use_u), 0.0),
                                       jnp.maximum(ceiling - served_u / dt - use_u, 0.0)]),
                      jnp.maximum(offered - send1, 0.0), "several", axis_name=ax)
    send = jnp.minimum(send1 + send2, offered)
    r_p, _, _, tx_u, it1 = _allocate_paths(static, uh, vinc, fresh, send)
    # pass 2: capacity left unused by the grants, within each class's ceiling
    used_u = served_u / dt + tx_u
    spare = jnp.maximum(cap_k - per_link(used_u), 0.0)
    room = jnp.maximum(ceiling - used_u, 0.0)
    left_u = uh.link_sum(left)
    frac = jnp.minimum(jnp.minimum(per_unit(_safe_div(spare * dt, per_link(left_u))),
                                   _safe_div(room * dt, left_u)), 1.0)
    # from the head of each class queue: its standing bands, then the step's arrivals
    more_b = lk.fifo_take(uh, jnp.concatenate([left_b, left_a[..., None]], axis=-1),
                          left_u * frac)
    more = jnp.sum(more_b, axis=-1)
    more_u = uh.link_sum(more)
    left_b, left_a = left_b - more_b[..., :-1], left_a - more_b[..., -1]
    served, served_u = served + more, served_u + more_u
    # bytes served by this pass leave after the first pass's, up to the new end
    span = (jnp.where((span[1] <= 0) & (more > 0), uh.gather(served_u - more_u), span[0]),
            jnp.where(more > 0, uh.gather(served_u), span[1]), None)
    # bytes served by this second pass reach the next hop at the next step
    carry = carry + uh.to_next_hop(jnp.where(uh.last, 0.0, more))
    spare = jnp.maximum(spare - per_link(more_u) / dt, 0.0)
    room = jnp.maximum(room - more_u / dt, 0.0)
    split_p = _path_split(uh, vinc)
    rest = jnp.where(split_p > 0, jnp.maximum(send[:, None] - r_p, 0.0), 0.0).ravel()
    pinc_k, pinc_v = _path_incidence(hops, inc_k), _path_incidence(uh, vinc)
    pinc2 = Incidence(inc2.link_idx, jnp.concatenate([pinc_k.flow_idx, pinc_v.flow_idx]),
                      jnp.concatenate([pinc_k.weight, pinc_v.weight]), n_links + n_units,
                      pinc_v.n_flows)
    sol2 = solve(pinc2, jnp.concatenate([spare, room]), rest,
                 iterations=static.solver_iterations, compaction=_STEP_COMPACTION,
                 axis_name=ax, max_iter=_solve_cap(pinc2.n_flows, ax),
                 unroll=static.solver_unroll, check_every=static.solver_check_every)
    r_p = r_p + jnp.minimum(sol2.rates, rest).reshape(r_p.shape)
    alloc_p = split_p * r_p
    alloc = _flow_alloc(split_p, alloc_p, send)
    # the excess waits where its class's sent load exceeds the class's own grant (with
    # one active class exactly the single-class rule: load above the capacity left)
    place = _place_excess_paths(uh, vinc, net.uswitch, send, alloc_p, fresh, dt)
    arrived_left = left_a + place
    x_new, dropped = _buffers(static, net, uh, net.uswitch,
                              jnp.sum(left_b, axis=-1) + arrived_left, arrived_left, fcp,
                              offered)
    return dict(served=served, x=x_new, xb=_tail_bands(uh, left_b, x_new), alloc=alloc,
                alloc_p=alloc_p,
                tx=served_u / dt + _over_flows(pinc_v.link_load(r_p.ravel()), ax),
                served_l=served_u, load_o=per_link(load_u), dropped=dropped, span=span, transit=carry, vinc=vinc, send=send,
                usable_l=jnp.minimum(cap_k, per_link(ceiling)),
                rounds=jnp.stack([it1 + sol2.info.iterations, rounds1 + rounds2]))


def _shared_params(static, net, fcp, pool):
    """Flow-control thresholds in force: ``fcp``, or with a shared buffer under
    ``pfc``/``credit`` the dynamic ones from the ingress pools ``pool`` ``[units]``."""
    if not static.shared or static.fc.mode not in ("pfc", "credit"):
        return fcp
    free = fcm.free_buffer(pool, net.sb_ingress, net.sb_size)
    return fcm.dynamic_params(static.fc, free, net.sb_ingress, net.sb_alpha, net.sb_headroom)


def _hold_at_sender(net, x, xb):
    """Host NICs hold no shared backlog: the bytes a flow could not put through its
    NIC in the step stay in its own send queue, unsent (``(x, xb, held)``: ``x`` and
    its FIFO bands ``xb`` without them, ``held`` ``[flows]`` bytes returned to the
    sender).

    A NIC serves its flows per queue pair, round-robin among the QPs that have bytes
    left and whose pacing (rate) or window allows a packet, and builds each packet
    only when it picks that QP ([HPCC-NS3] ``qbb-net-device.cc``
    ``RdmaEgressQueue::GetNextQindex`` / ``DequeueAndTransmit``; NVIDIA ConnectX send
    queues are arbitrated the same way).  So a flow starting on a busy NIC gets its
    share of the NIC at once instead of waiting behind the bytes the other flows
    could not send: the step's max-min share of the NIC among the offers
    (:func:`_nic_send`) is that arbitration, and what exceeds it was never sent.
    Bytes that wait downstream (a switch egress queue) were sent and stay queued.
    ``x`` holds bytes at a NIC hop only where no switch port downstream took a sent
    excess (float round-off in the solve); they are returned here too.
    """
    hops = net.hops
    at_nic = hops.valid & (hops.gather(net.switch, 1.0) == 0)
    held = jnp.sum(jnp.where(at_nic, x, 0.0), axis=1)
    return jnp.where(at_nic, 0.0, x), jnp.where(at_nic[..., None], 0.0, xb), held


def _propagate(net, c, served, alloc, discard, dt, lost=0.0):
    """Bytes served at the last hop and the cut-through offers go on the receiver wire
    and arrive after the path latency, less ``lost`` ``[flows]`` (dropped by lossy
    links, :func:`_lossy_links`); the fraction ``discard`` ``[flows]`` of them the
    receiver throws away (:func:`_receive`).  (Bytes served at other hops joined the
    next hop in the same step, :func:`fabric_jax.links.serve_through`.)"""
    hops = net.hops
    arrived = alloc * dt + jnp.sum(jnp.where(hops.last, served, 0.0), axis=1) - lost
    discarded = arrived * discard
    passed = arrived - discarded
    wire, delivered = lk.wire_step(c["wire"], c["k"], net.wire_n, net.wire_phi, passed)
    return wire, passed, delivered, discarded


def _lossy_links(net, sched, c, served, alloc_p, dt):
    """Bytes that lossy links drop in the step: ``([flows], [links])``.

    Model: the bytes that crossed a path in the step (cut-through ``alloc_p dt`` plus
    those its last hop served; the loss-free fluid) lose the fraction ``p_l`` at each
    lossy link ``l`` of the path, of what reached it: hop ``h`` drops ``B p_h
    prod_{j<h} (1 - p_j)``, so ``B prod_h (1 - p_h)`` arrive.  Approximation, stated: a
    corrupted packet is dropped by the next port's ingress, but here its bytes also
    counted on the hops after the lossy link in this step (an overestimate of their
    load by at most ``p``); the retransmission (the sender's backlog grows by the
    drops) re-crosses every hop."""
    hops = net.hops
    p = jnp.where(hops.valid, hops.gather(fm.loss_fraction(sched, c["k"]).astype(served.dtype)),
                  0.0)
    log_keep = hops.per_path(jnp.log1p(-p))
    before = jnp.exp(jnp.cumsum(log_keep, axis=2) - log_keep)    # prod_{j<h} (1 - p_j)
    reach = alloc_p * dt + jnp.sum(hops.per_path(jnp.where(hops.last, served, 0.0)), axis=2)
    lost_h = (reach[:, :, None] * before * hops.per_path(p)).reshape(served.shape)
    return jnp.sum(lost_h, axis=1), hops.link_sum(lost_h)


def _receive(static, net, c, x_new, cap_k, split, served, alloc, offered, dropped, dt):
    """Receiver (:mod:`fabric_jax.receiver`): the fraction of the step's arrivals that a
    receiver in go-back-N discard mode throws away, and the next discard state.

    Events: out-of-order arrivals (``reorder=False``; mean path delays now, the
    packet-scale port waits of :mod:`fabric_jax.queueing` at the step's rates, the
    flow's sending rate) and losses (``go_back_n``; each dropped ``mtu`` is one event).
    Recovery: one base RTT after an out-of-order NAK; base RTT + ``rto`` after a loss
    (``drop`` mode's timer, as the loss signal in :func:`_offer`)."""
    phi = c["rx_phi"]
    if not (static.rx_ooo or static.go_back_n):
        return jnp.zeros_like(offered), phi
    hops = net.hops
    arrived = alloc * dt + jnp.sum(jnp.where(hops.last, served, 0.0), axis=1)
    zero = jnp.zeros_like(offered)
    if static.rx_ooo:
        delay = lk.path_delay(hops, hops.link_sum(x_new), cap_k, net.path_lat)
        rate = jnp.maximum(offered, arrived / dt)
        wait = rx.path_waits(hops, split, rate, cap_k, net.wait_pairs, net.mtu,
                             net.burstiness)
        p_ooo = rx.out_of_order_probability(split, delay, rate, net.mtu, net.tolerance,
                                            wait=wait)
        ooo_events = p_ooo * arrived / net.mtu
    else:
        ooo_events = zero
    loss_events = dropped / net.mtu if static.go_back_n else zero
    rto = static.fc.rto_steps * dt if static.fc.mode == "drop" else 0.0
    recovery = jnp.stack([net.base_rtt, net.base_rtt + rto])
    phi_step, phi_next = rx.discard_step(phi, jnp.stack([ooo_events, loss_events]), dt,
                                         recovery)
    discard = 1.0 - (1.0 - phi_step[0]) * (1.0 - phi_step[1])
    return discard, phi_next


def _emit_signals(static, net, c, x, cap_k, usable, tx, split, offered, dropped, still,
                  params, fcp, smooth, dt, arrived):
    """Congestion signals from the standing queues at switch ports -> feedback ring
    (``tx`` ``[links]``: the rate each link transmitted in the step, bytes/s;
    ``arrived`` ``[flows]``: bytes that reached the receiver so far, the ACK clock)."""
    hops, law = net.hops, static.law
    q_sw = hops.link_sum(x) * net.switch
    cap_pos = cap_k > 0
    safe_cap = jnp.where(cap_pos, cap_k, 1.0)
    t_hpcc = _over_flows(jnp.max(net.base_rtt, initial=dt), hops.axis_name, jax.lax.pmax)
    view = ccbase.LinkView(queue=q_sw, capacity=cap_k, usable=usable, tx_rate=tx,
                           buffer=fcp.buffer, base_rtt=t_hpcc, switch_port=net.switch)
    mark_l = law.mark(view, params, smooth) * net.switch
    valid3 = hops.per_path(hops.valid)
    # log(1 - p) once per link, gathered per hop (== path_mark of the gathered p)
    lg3 = hops.per_path(hops.gather(ccbase.log_unmarked(mark_l)))
    p_path = jnp.sum(split * ccbase.path_mark_from_log(lg3, valid3), axis=1)
    qdel_l = jnp.where(cap_pos, q_sw / safe_cap, 0.0)
    rtt = net.base_rtt + jnp.sum(split * jnp.sum(hops.per_path(hops.gather(qdel_l)), axis=2),
                                 axis=1)
    util_l = net.switch * jnp.where(cap_pos, q_sw / (safe_cap * t_hpcc) + tx / safe_cap, 0.0)
    util = jnp.sum(split * jnp.max(hops.per_path(hops.gather(util_l)), axis=2), axis=1)
    n_links = hops.n_links
    last_link = jnp.max(jnp.where(hops.last, hops.link, -1), axis=1)
    last_link = jnp.where(last_link < 0, n_links, last_link)
    n_rx = _over_flows(jax.ops.segment_sum(still.astype(dt.dtype), last_link,
                                           num_segments=n_links + 1), hops.axis_name)
    cap_ext = jnp.concatenate([cap_k, jnp.zeros((1,), cap_k.dtype)])
    rx_share = 0.99 * cap_ext[last_link] / jnp.maximum(n_rx[last_link], 1.0)
    new = dict(mark=p_path, rtt=rtt, util=util, rate=offered, loss=dropped / dt,
               rx_share=rx_share, arrived=arrived)
    w = c["k"] % static.shape.ring_len
    ring = c["ring"].at[w].set(jnp.stack([new[f] for f in SIGNALS], axis=1))
    return ring, mark_l, p_path


def _complete(net, c, t, start, active, passed_now, last, dt, remaining, in_net):
    """Flows whose last byte passed its last queue this step, and their finish time:
    the instant inside the step (:func:`_finish_in_step`) plus the one-way latency.

    A flow completes when the bytes that passed reach its size (to
    :data:`COMPLETION_RTOL`), or when its sender has nothing left (``remaining`` after
    the step, ``[flows]``) and none of its bytes is queued or in transit (``in_net``
    ``[flows]``, to the same tolerance): the two running float32 totals ``remaining``
    (counted down from the size) and ``passed`` (counted up) round differently, and
    over ~10^4 steps of queueing a megabyte flow's ``passed`` can end ~1e-4 of its
    size short while ``remaining`` reached 0 -- a flow that had nothing more to send
    would otherwise never finish."""
    size = net.flows["size"]
    rtol = COMPLETION_RTOL.get(np.dtype(size.dtype), 3e-5)
    passed = c["passed"] + passed_now
    counted = passed >= size * (1.0 - rtol)
    drained = (remaining <= 0.0) & (in_net <= size * rtol) & (passed_now > 0.0)
    completes = active & (counted | drained)
    need = jnp.maximum(size - c["passed"], 0.0)
    need = jnp.where(counted, need, jnp.minimum(need, passed_now))
    t_in = _finish_in_step(t, start, need, passed_now, dt, **last)
    # A flow never finishes before it starts (a zero-byte flow released inside the
    # step completes at its release time).
    finish = jnp.where(completes, jnp.maximum(t_in, start) + net.one_way, c["finish"])
    return passed, completes, finish


def _finish_in_step(t, start, need, passed_now, dt, *, queued, drain, cut, cut_rate,
                    q_lo=0.0, q_hi=1.0):
    """When inside the step ``[t, t + dt]`` a flow's last ``need`` bytes pass.

    The step moves two kinds of bytes past a flow's last queue (``passed_now`` of them
    after receiver discards): ``queued`` ``[flows]`` bytes served by its last hop,
    which a FIFO port sends first, during the ``drain`` ``[flows]`` seconds it takes to
    serve what it serves this step (``s_l / u_l``): the flow's bytes leave between the
    fractions ``q_lo`` and ``q_hi`` of that service, their FIFO positions
    (:func:`fabric_jax.links.service_span`), interleaved with the other flows'; and
    ``cut`` bytes crossing cut-through, sent from ``max(start, t)`` at ``cut_rate``:
    the flow's allocation raised by the capacity still free on every hop of its path,
    up to its pacing rate (a flow whose last step is short is not slowed to spread its
    bytes over the whole step).  Exact for a lone flow; otherwise the instant differs
    from a uniform spread of the step's bytes by less than ``dt`` (so both agree as
    ``dt -> 0``).  The link's other flows are held at their allocations when
    ``cut_rate`` is raised (an estimate: a FIFO would share the port in proportion).
    """
    got = passed_now > 0
    keep = jnp.where(got, passed_now / jnp.where(got, queued + cut, 1.0), 1.0)
    need_a = need / jnp.where(keep > 0, keep, 1.0)          # in bytes before discards
    q_pos = queued > 0
    t_q = t + drain * (q_lo + (q_hi - q_lo)
                       * jnp.clip(need_a / jnp.where(q_pos, queued, 1.0), 0.0, 1.0))
    r_pos = cut_rate > 0
    s0 = jnp.clip(start, t, t + dt)
    # bytes wanted from the cut-through part: at most what crossed (a need above
    # ``queued + cut`` is float round-off; with no cut-through bytes the last byte
    # was a queued one)
    extra = jnp.clip(need_a - queued, 0.0, cut)
    t_c = s0 + extra / jnp.where(r_pos, cut_rate, jnp.inf)
    t_in = jnp.where(need_a <= queued, t_q,
                     jnp.maximum(t + jnp.where(q_pos, drain * q_hi, 0.0), t_c))
    return jnp.clip(t_in, t, t + dt)


def _last_bytes(net, served, served_l, usable, inc_k, alloc, pace, dt, span, load=None):
    """The per-flow inputs of :func:`_finish_in_step` from the step's transmit stage
    (``span``: the FIFO positions of :func:`fabric_jax.links.service_span`)."""
    hops = net.hops
    u_pos = usable > 0
    drain_l = jnp.where(u_pos, jnp.minimum(served_l / jnp.where(u_pos, usable, 1.0), dt), dt)
    last_served = jnp.where(hops.last, served, 0.0)
    at_last = last_served > 0
    drain = jnp.max(jnp.where(at_last, hops.gather(drain_l), 0.0), axis=1)
    s_e = hops.gather(served_l)
    s_pos = s_e > 0
    lo = jnp.clip(span[0] / jnp.where(s_pos, s_e, 1.0), 0.0, 1.0)
    hi = jnp.clip(span[1] / jnp.where(s_pos, s_e, 1.0), 0.0, 1.0)
    q_lo = jnp.min(jnp.where(at_last, lo, 1.0), axis=1)
    q_hi = jnp.max(jnp.where(at_last, hi, 0.0), axis=1)
    any_last = jnp.any(at_last, axis=1)
    q_lo, q_hi = jnp.where(any_last, q_lo, 0.0), jnp.where(any_last, q_hi, 1.0)
    # the rate the flow sends its last bytes at: its share if it wanted its pacing rate
    # (the other flows at its bottleneck give way to it), not its last step's allocation
    fresh = jnp.maximum(usable - served_l / dt, 0.0)
    cut_rate = jnp.clip(joining_share(inc_k, fresh, alloc, load, axis_name=hops.axis_name),
                        alloc,
                        jnp.maximum(pace, alloc))
    return dict(queued=jnp.sum(last_served, axis=1), drain=drain, cut=alloc * dt,
                cut_rate=cut_rate, q_lo=q_lo, q_hi=q_hi)


def _step(static, net, params, fcp, smooth, dt, rparams, sched, c):
    """One step: the stages in order (module docstring)."""
    hops = net.hops
    t, start, started, active = _clock(net, c, dt)
    cap_k, x, transit, fault_drop, path_ok = _apply_faults(net, sched, c)
    split, inc_k, stranded, rstate = _route(static, net, c, x, cap_k, active, t, path_ok,
                                            rparams, dt)
    law_state, offered, law_packed = _offer(static, net, c, t, start, started, active,
                                            stranded, params, smooth, dt)
    uh, n_cls = net.uhops, static.n_classes
    cap_u = cap_k if n_cls == 1 else jnp.repeat(cap_k, n_cls)
    pool = uh.pool_sum(x + transit)
    fcp_k = _shared_params(static, net, fcp, pool)
    usable = fcm.usable_capacity(static.fc, c["fc"], cap_u, pool, fcp_k, dt, smooth)
    # the bands sum to x after every step; only faults change x in between
    xb = c["xb"] if sched is None else lk.reconcile_bands(c["xb"], x)
    if n_cls == 1:
        tr = _transmit(static, net, xb, transit, usable, inc_k, split, offered, fcp_k, dt)
        sig_net, sig_inc, sig_params, usable_l = net, inc_k, params, usable
    else:
        tr = _transmit_classes(static, net, xb, transit, usable, cap_k, inc_k, split, offered,
                               fcp_k, dt)
        sig_net = dataclasses.replace(net, hops=uh, switch=net.uswitch)
        sig_inc, usable_l = tr["vinc"], tr["usable_l"]
        sig_params = _per_unit_params(params, hops.n_links, n_cls)
    x_new, xb_new, held = _hold_at_sender(net, tr["x"], tr["xb"])
    dropped_now = tr["dropped"] + fault_drop
    if static.shape.lossy:
        lost, lost_l = _lossy_links(net, sched, c, tr["served"], tr["alloc_p"], dt)
        dropped_now = dropped_now + lost
    else:
        lost = 0.0
    discard, rx_phi = _receive(static, net, c, x_new, cap_k, split, tr["served"], tr["alloc"],
                               tr["send"], dropped_now, dt)
    transit_new = tr["transit"]
    wire, passed_now, deliv_now, discarded_now = _propagate(
        net, c, tr["served"], tr["alloc"], discard, dt, lost)
    sent_now = tr["send"] * dt - held
    # accounting: sent = delivered + in flight + queued + dropped + discarded, every step
    # (per flow, then one sum over the flows; the wires' bytes summed as adds of the
    # history's rows, lk.sum_rows: a reduction over them is slow on XLA:CPU)
    stock = lambda x, tr, w, k: (jnp.sum(x, axis=1) + jnp.sum(tr, axis=1)  # noqa: E731
                                 + lk.wire_in_flight(w, k, net.wire_n, net.wire_phi,
                                                     by_rows=True))
    residual = jnp.abs(_over_flows(jnp.sum(
        sent_now - deliv_now - dropped_now - discarded_now
        - (stock(x_new, transit_new, wire, c["k"])
           - stock(c["x"], c["transit"], c["wire"], c["k"] - 1))), hops.axis_name))
    # per queue (link, or link x class): a flow drains through its own class's queue
    last = _last_bytes(sig_net, tr["served"], tr["served_l"], usable, sig_inc, tr["alloc"],
                       jnp.minimum(law_state.rate, net.line_rate), dt, tr["span"],
                       tr.get("load_cut"))
    remaining = jnp.maximum(c["remaining"] - sent_now + dropped_now + discarded_now, 0.0)
    in_net = jnp.sum(x_new, axis=1) + jnp.sum(transit_new, axis=1)
    passed, completes, finish = _complete(net, c, t, start, active, passed_now, last, dt,
                                          remaining, in_net)
    ring, mark_l, p_path = _emit_signals(static, sig_net, c, x_new, cap_u, usable,
                                         tr["tx"], split, sent_now / dt, dropped_now,
                                         active & ~completes,
                                         sig_params, fcp_k, smooth, dt,
                                         passed + c["discarded"] + discarded_now)
    if n_cls > 1:  # routing sees a link's worst class
        mark_l = jnp.max(mark_l.reshape(hops.n_links, n_cls), axis=1)
    # react: flow control sees the new ingress pools
    pool_new, pool_out = jnp.moveaxis(
        uh.pool_sum(jnp.stack([x_new + transit_new, tr["served"]], axis=-1)), -1, 0)
    fc_state = fcm.update(static.fc, c["fc"], pool_new, pool_out, cap_u,
                          usable, _shared_params(static, net, fcp, pool_new), dt, smooth)
    q_new = hops.link_sum(x_new)
    new = dict(c, k=c["k"] + 1,
               remaining=remaining,
               x=x_new, xb=xb_new, transit=transit_new,
               wire=wire, start=start, finish=finish,
               done=c["done"] | completes, sent=c["sent"] + sent_now, passed=passed,
               delivered=c["delivered"] + deliv_now, dropped=c["dropped"] + dropped_now,
               discarded=c["discarded"] + discarded_now, rx_phi=rx_phi,
               law=law_packed, fc=fc_state, ring=ring,
               max_residual=jnp.maximum(c["max_residual"], residual),
               max_queue=jnp.maximum(c["max_queue"], q_new),
               solver_iterations=c["solver_iterations"] + tr["rounds"].astype(jnp.int32),
               stranded_time=c["stranded_time"] + jnp.where(active & stranded, dt, 0.0),
               stranded=active & stranded)
    if static.policy is not None:
        new.update(route=rstate, load=tr["load_o"], mark_l=mark_l, rate=offered)
    if static.shape.lossy:
        new.update(corrupted=c["corrupted"] + lost_l)
    # the end of the step, rounded once, as an idle chunk's snapshot computes it
    # (``t + dt`` rounds twice unless the compiler contracts it into an FMA)
    snap = dict(t=(c["k"] + 1).astype(dt.dtype) * dt, rate=offered,
                throughput=deliv_now / dt, queue=q_new,
                usable=usable_l, mark=p_path, law_state=law_state)
    return new, snap


def _per_unit_params(params, n_links, n_classes):
    """The law's per-link parameter leaves (e.g. IB CC's ``switch_port`` mask) repeated
    for each class of the link, so that marking runs per class queue."""
    def rep(a):
        if jnp.ndim(a) == 1 and jnp.shape(a)[0] == n_links:
            return jnp.repeat(a, n_classes)
        return a
    return jax.tree_util.tree_map(rep, params)


def _in_flight(net, c):
    """``[flows]`` bytes in transit between hops or on the receiver wire after the
    state's last step."""
    return jnp.sum(c["transit"], axis=1) + lk.wire_in_flight(c["wire"], c["k"] - 1,
                                                              net.wire_n, net.wire_phi)


def _idle_for_good(net, c, t_end):
    """Nothing left to simulate before ``t_end``: every flow finished or released only
    after it, no byte queued or on a wire, no pause in force or on its way."""
    rel = _release(net, c["finish"])
    flows_idle = jnp.all(c["done"] | (rel >= t_end))
    empty = jnp.all(c["x"] == 0) & jnp.all(_in_flight(net, c) == 0)
    fc = c["fc"]
    calm = jnp.all(fc.pause == 0) & jnp.all(fc.history == 0)   # per link: the same on all
    return _all_flows(flows_idle & empty, net.hops.axis_name) & calm


def _idle_snapshot(static, net, sched, c, dt, params):
    """The snapshot an idle chunk would end with (see ``stop_when_idle``)."""
    fdt = c["sent"].dtype
    cap = net.capacity if sched is None else net.capacity * fm.capacity_factor(sched,
                                                                                c["k"] - 1)
    zf = jnp.zeros_like(c["sent"])   # per flow (also on a shard of the flows)
    return dict(t=c["k"].astype(fdt) * dt, rate=zf, throughput=zf,
                queue=jnp.zeros_like(net.capacity), usable=cap.astype(fdt), mark=zf,
                law_state=unpack_law(c["law"], static.law.init(net.line_rate, params)))


def varying_axes(aval) -> frozenset:
    """The ``shard_map`` axes an abstract value varies over (``.vma``, or in jax 0.10
    ``manual_axis_type.varying``; none outside ``shard_map``)."""
    vma = getattr(aval, "vma", None)
    if vma is None:
        mat = getattr(aval, "manual_axis_type", None)
        vma = mat.varying if mat is not None else ()
    return frozenset(vma)


def _zeros_of(aval):
    """Zeros of an abstract value's shape and type, varying over the same ``shard_map``
    axes: a loop carry initialised with them has the type the loop's body gives it."""
    z = jnp.zeros(aval.shape, aval.dtype)
    vma = tuple(sorted(varying_axes(aval)))
    return jax.lax.pcast(z, vma, to="varying") if vma else z


def _run_body(static, n_outer, inner, keep_traj, net, params, fcp, smooth, dt, rparams,
              rstate0, sched, carry):
    """The whole run (:func:`_run`); traced as it is inside ``shard_map`` by
    :func:`fabric_jax.distributed.simulate_fluid_sharded` (``net.hops.axis_name`` set)."""
    f = net.flows
    axis_name = net.hops.axis_name
    if carry is None:
        carry = _init_carry(static.law, static.fc, static.shape, net.hops, f["size"],
                            net.line_rate, net.base_rtt, params, rstate0)
    step = functools.partial(_step, static, net, params, fcp, smooth, dt, rparams, sched)

    def simulate(c):
        if not keep_traj:
            c, _ = jax.lax.scan(lambda cc, _: (step(cc)[0], None), c, None, length=inner)
            return c, None
        # the chunk's snapshot is its last step's: carried from step to step, not
        # stacked and sliced (a row written at the loop's counter each step is a
        # dynamic-slice fusion on XLA:GPU, which keeps it from recording the chunk's
        # loop into a CUDA graph: fabric_jax.compiling)
        snap0 = jax.tree_util.tree_map(_zeros_of, jax.eval_shape(step, c)[1])
        (c, snap), _ = jax.lax.scan(lambda cs, _: (step(cs[0]), None), (c, snap0), None,
                                    length=inner)
        return c, snap

    def skip(c):
        # idle: nothing is on a wire, and the wires' history (indexed by step) restarts
        c = dict(c, k=c["k"] + inner, wire=jnp.zeros_like(c["wire"]))
        return c, (_idle_snapshot(static, net, sched, c, dt, params) if keep_traj else None)

    # the horizon of this run (a resumed run continues from its state's step)
    t_end = (carry["k"] + n_outer * inner).astype(dt.dtype) * dt

    def chunk(c, j):
        if static.stop_when_idle:
            c, snap = jax.lax.cond(_idle_for_good(net, c, t_end), skip, simulate, c)
        else:
            c, snap = simulate(c)
        if not keep_traj:
            return c, None
        totals = dict(sent=jnp.sum(c["sent"]), delivered=jnp.sum(c["delivered"]),
                      queued=jnp.sum(c["x"]), dropped=jnp.sum(c["dropped"]),
                      in_flight=jnp.sum(_in_flight(net, c)), discarded=jnp.sum(c["discarded"]))
        return c, dict(snap, **_over_flows(totals, axis_name))

    c, traj = jax.lax.scan(chunk, carry, jnp.arange(n_outer, dtype=jnp.int32))
    start = jnp.where(jnp.isfinite(c["start"]), c["start"], _release(net, c["finish"]))
    trajectory = FluidTrajectory(**traj) if keep_traj else None
    paused = c["fc"].paused_time
    if static.n_classes > 1:
        paused = paused.reshape(net.hops.n_links, static.n_classes)
    info = FluidInfo(max_residual=c["max_residual"],
                     stalled=~_all_flows(jnp.all(c["done"]), axis_name),
                     paused_time=paused, max_queue=c["max_queue"],
                     stranded_time=c["stranded_time"], stranded=c["stranded"],
                     discard_mode=c["rx_phi"], solver_iterations=c["solver_iterations"])
    return FluidResult(start=start, finish=c["finish"], fct=c["finish"] - f["arrival"],
                       sent=c["sent"], delivered=c["delivered"], dropped=c["dropped"],
                       queued=jnp.sum(c["x"], axis=1),
                       link_queue=net.hops.link_sum(c["x"]),
                       law_state=unpack_law(c["law"], static.law.init(net.line_rate, params)),
                       trajectory=trajectory, info=info,
                       routing_state=c.get("route"), state=c, in_flight=_in_flight(net, c),
                       discarded=c["discarded"],
                       link_corrupted=c.get("corrupted", jnp.zeros_like(net.capacity)))


#: The run, compiled once per static choice and shape.
_run = jit(_run_body, static_argnums=(0, 1, 2, 3))


@functools.partial(jit, static_argnums=(0, 1, 2, 3, 4, 5))
def _run_batched(static, n_outer, inner, keep_traj, treedef, axes, *leaves):
    """:func:`_run` over a batch of scenarios: ``leaves`` are the flattened device
    arguments (``treedef``), those with ``axes[i] == 0`` carrying the scenario axis
    first, the others shared; one ``vmap`` of the run (the per-step solves' loops run
    until every scenario's has converged)."""
    def one(*ls):
        return _run_body(static, n_outer, inner, keep_traj,
                         *jax.tree_util.tree_unflatten(treedef, ls))
    return jax.vmap(one, in_axes=axes)(*leaves)
