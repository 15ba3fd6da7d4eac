"""Stages 4-5 of a step: allocate, transmit and queue (one traffic class).

Flow control fixes each link's usable capacity ``u_l``.  Queues are served first
(:func:`fabric_jax.links.serve_through`), as FIFOs in bands; each host NIC sends its
max-min share of its flows' offers (:func:`nic_send`); the sent rates share what is left
on their paths by max-min, each path of a flow its own entity
(:func:`allocate_paths`, :func:`fabric_jax.fairness.solve`) and cross the fabric
cut-through; the excess of each path waits at its first overloaded switch port
(:func:`place_excess_paths`); buffers drop or pause (:func:`buffers`); a NIC keeps no
shared backlog (:func:`hold_at_sender`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ... import flowcontrol as fcm
from ... import links as lk
from ...fairness import solve, solve_flat, water_fill
from ...incidence import Incidence
from .common import all_flows, over_flows, solve_cap

__all__ = ["STEP_COMPACTION", "transmit", "path_incidence", "path_split", "allocate_paths",
           "flow_alloc", "place_excess_paths", "tail_bands", "nic_send", "first_hops",
           "overloaded", "OVERLOAD_PASSES", "overloaded_along", "buffers", "shared_params",
           "hold_at_sender"]


#: Compaction of the step's max-min solve (:func:`fabric_jax.fairness.solve`): none.  A
#: step settles in a few iterations, so the levels only cost compile time
#: (``python experiments/bench_compare.py``, whose default baseline is ``"fine"``:
#: compile CPU 1.9-2.8x lower per ``compare`` preset, the same finish times).
STEP_COMPACTION = "none"


def transmit(static, net, xb, transit, usable, inc_k, split, offered, fcp, dt):
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
        send, nic_rounds = nic_send(static, net.switch, first_hops(inc_k, hops.seg), fresh,
                                     offered, static.nic_ports, hops.axis_name)
    with jax.named_scope("allocate"):
        _, alloc_p, alloc, tx_cut, solve_it = allocate_paths(static, hops, inc_k, fresh,
                                                              send)
    load_o = over_flows(inc_k.link_load(offered), hops.axis_name)
    place = place_excess_paths(hops, inc_k, net.switch, send, alloc_p, fresh, dt)
    # bytes that arrived at each queue this step and still stand there: the FIFO's tail
    arrived_left = left_a + place
    x_new, dropped = buffers(static, net, hops, net.switch, jnp.sum(left_b, axis=-1)
                              + arrived_left, arrived_left, fcp, offered)
    return dict(served=served, x=x_new, xb=tail_bands(hops, left_b, x_new, span[2]),
                alloc=alloc, alloc_p=alloc_p, tx=served_l / dt + tx_cut, served_l=served_l,
                load_o=load_o,
                dropped=dropped, transit=carry, send=send, span=span,
                rounds=jnp.stack([solve_it, nic_rounds]),
                # one path per flow: the cut-through load is the allocation's link load
                load_cut=tx_cut if hops.n_paths == 1 else None)


def path_incidence(hops, inc):
    """The incidence of the step's *paths*: entity ``f * paths + p`` is path ``p`` of
    flow ``f``, with the weights of ``inc`` (its split on its hops).  With one path per
    flow it is ``inc``."""
    n_flows, n_paths, seg = inc.n_flows, hops.n_paths, hops.seg
    sub = (jnp.arange(n_flows * n_paths, dtype=jnp.int32).reshape(n_flows, n_paths, 1)
           * jnp.ones((1, 1, seg), jnp.int32)).ravel()
    return Incidence(inc.link_idx, sub, inc.weight, inc.n_links, n_flows * n_paths, seg,
                     inc.by_link)


def path_split(hops, inc):
    """``[flows, paths]`` the split of each path (the weight of its hops in ``inc``)."""
    return jnp.max(hops.per_path(inc.weight.reshape(hops.link.shape)), axis=2)


def allocate_paths(static, hops, inc, fresh, send):
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
    congested path of the same flow (``experiments/adaptive_routing.py``,
    ``remote_congestion``)."""
    pinc = path_incidence(hops, inc)
    split = path_split(hops, inc)
    demand = jnp.where(split > 0, send[:, None], 0.0).ravel()
    axis_name = hops.axis_name
    sol = solve(pinc, fresh, demand, iterations=static.solver_iterations,
                compaction=STEP_COMPACTION, axis_name=axis_name,
                max_iter=solve_cap(pinc.n_flows, axis_name), unroll=static.solver_unroll,
                check_every=static.solver_check_every)
    r = jnp.minimum(sol.rates, demand).reshape(split.shape)
    alloc_p = split * r
    return (r, alloc_p, flow_alloc(split, alloc_p, send),
            over_flows(pinc.link_load(r.ravel()), axis_name), sol.info.iterations)


def flow_alloc(split, alloc_p, send):
    """``[flows]`` cut-through rate of each flow: the sum over its paths; a flow on no
    link (no path with a hop) is limited by nothing but its send rate, as in the
    flow-level max-min (:func:`fabric_jax.fairness.solve`)."""
    return jnp.where(jnp.any(split > 0, axis=1), jnp.sum(alloc_p, axis=1), send)


def place_excess_paths(hops, inc, switch, send, alloc_p, fresh, dt):
    """``[flows, hops]`` where each path's unallocated bytes ``(send_f s_fp - alloc_fp)
    dt`` wait: at the first overloaded switch port of the path (the sender's NIC queue,
    returned to the sender, when there is none), ports judged by the loads of
    :func:`overloaded_along`."""
    n_flows, n_paths = alloc_p.shape
    demand = path_split(hops, inc) * send[:, None]
    over = overloaded_along(hops, inc, switch, demand, alloc_p, fresh)
    over_e = hops.per_path(hops.gather(over, False) & hops.valid)
    first = jnp.argmax(over_e, axis=2)          # 0 (the first hop) when none is overloaded
    at_first = jnp.arange(hops.seg)[None, None, :] == first[:, :, None]
    excess = jnp.maximum(demand - alloc_p, 0.0) * dt
    return jnp.where(at_first, excess[:, :, None], 0.0).reshape(n_flows, hops.link.shape[1])


def tail_bands(hops, left_b, x_new, lb_left=None):
    """The bands after the step: the standing bands left, a band freed at the tail
    (:func:`fabric_jax.links.merge_bands`) holding what joined the queue in the step."""
    return lk.reconcile_bands(lk.merge_bands(hops, left_b, lb_left), x_new)


def nic_send(static, switch, inc, cap, offered, ports="check", axis_name=None):
    """``[flows]`` rates the host NICs put on the wire: each NIC shares its capacity
    ``cap`` (``[links]`` or ``[units]``, the capacity left at its port; 0 while paused)
    max-min among its flows' offers, whatever lies downstream.

    This is the NIC's round-robin among its queue pairs ([HPCC-NS3]
    ``qbb-net-device.cc`` ``RdmaEgressQueue::GetNextQindex``: every QP with bytes left
    whose pacing allows a packet gets its turn; the NIC does not know the fabric's
    state beyond PFC).  What a flow sends beyond its cut-through allocation queues at
    the first overloaded switch port of its path and takes its place in that FIFO;
    what it offers beyond its NIC share stays unsent with the sender
    (:func:`hold_at_sender`).  Flows whose path starts at no NIC send their offer.
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
    NIC port (:func:`fabric_jax.fluid.checks.one_nic_port`), ``"several"`` when every flow may use several,
    ``"check"`` to decide on the device (a ``lax.cond``).  ``axis_name``: the mesh axis
    the flows are split over (:func:`over_flows`), ``None`` unsharded.
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
                          max_iter=solve_cap(n_flows, axis_name))

    if ports == "one":
        rates, rounds = one_port()
    elif ports == "several":
        rates, rounds = several_ports()
    else:
        rates, rounds = jax.lax.cond(all_flows(jnp.all(top <= port), axis_name), one_port,
                                     several_ports)
    return jnp.minimum(rates, offered), rounds


def first_hops(inc, seg):
    """The entries of an incidence laid out as a ``[flows, hops]`` hop table (``seg``
    hops per path) at the first hop of each path: the only hops that can be a host NIC
    (so :func:`nic_send` works on ``1/seg`` of the entries), flow-major with one entry
    per path (``row_width``)."""
    if inc.n_flows == 0 or inc.link_idx.shape[0] == 0:   # no flows: nothing to pick
        return inc
    first = lambda a: a.reshape(inc.n_flows, -1)[:, ::seg].ravel()  # noqa: E731
    li = first(inc.link_idx)
    return Incidence(li, first(inc.flow_idx), first(inc.weight), inc.n_links, inc.n_flows,
                     li.shape[0] // inc.n_flows)


def overloaded(switch, load, fresh):
    """``[links]`` switch ports whose load exceeds the capacity left (where the excess
    of :func:`place_excess_paths` waits; a NIC is never one: it sends only
    its share, :func:`nic_send`)."""
    return (load > fresh * (1.0 + 1e-6)) & (switch > 0)


#: Passes of :func:`overloaded_along` (each can only clear ports; two settle a
#: leaf-spine or fat-tree path whose congested hops lie one after the other).
OVERLOAD_PASSES = 3


def overloaded_along(hops, inc, switch, demand_p, alloc_p, fresh):
    """``[links]`` overloaded switch ports, counting on the hops past a path's first
    overloaded hop only what crosses that hop (``alloc_p``), not the excess that waits
    there: a port behind a congested one is not overloaded by bytes queued upstream.

    Starts from every port loaded above its capacity left by what the paths send
    (``demand_p`` ``[flows, paths]``), then recounts the loads with the excess stopped at
    the first overloaded hop of each path (:data:`OVERLOAD_PASSES` passes; the set
    only shrinks)."""
    on = hops.valid & (inc.weight.reshape(hops.link.shape) != 0)
    per_hop = lambda a: jnp.repeat(a, hops.seg, axis=1)  # noqa: E731  [flows, hops]
    d_e, a_e = jnp.where(on, per_hop(demand_p), 0.0), jnp.where(on, per_hop(alloc_p), 0.0)
    link_sum = lambda e: over_flows(inc.link_sum(e.ravel()), hops.axis_name)  # noqa: E731
    over = overloaded(switch, link_sum(d_e), fresh)
    for _ in range(OVERLOAD_PASSES - 1):
        past = lk.past_first(hops, over)
        over = overloaded(switch, link_sum(jnp.where(past, a_e, d_e)), fresh)
    return over


def buffers(static, net, bh, switch, x_new, arrived_left, fcp, offered):
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
                                         net.sb_alpha, net.sb_size, weight=net.sb_weight)
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


def shared_params(static, net, fcp, pool):
    """Flow-control thresholds in force: ``fcp``, or with a shared buffer under
    ``pfc``/``credit`` the dynamic ones from the ingress pools ``pool`` ``[units]``."""
    if not static.shared or static.fc.mode not in ("pfc", "credit"):
        return fcp
    free = fcm.free_buffer(pool, net.sb_ingress, net.sb_size, net.sb_weight)
    return fcm.dynamic_params(static.fc, free, net.sb_ingress, net.sb_alpha, net.sb_headroom)


def hold_at_sender(net, x, xb):
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
    (:func:`nic_send`) is that arbitration, and what exceeds it was never sent.
    Bytes that wait downstream (a switch egress queue) were sent and stay queued.
    ``x`` holds bytes at a NIC hop only where no switch port downstream took a sent
    excess (float round-off in the solve); they are returned here too.
    """
    hops = net.hops
    at_nic = hops.valid & (hops.gather(net.switch, 1.0) == 0)
    held = jnp.sum(jnp.where(at_nic, x, 0.0), axis=1)
    return jnp.where(at_nic, 0.0, x), jnp.where(at_nic[..., None], 0.0, xb), held
