"""One step of the fluid run: the stages in order.

1. clock and faults, route (:mod:`.stages.clock`);
2. offer rates (:mod:`.stages.offer`);
3. allocate, transmit and queue (:mod:`.stages.transmit`, with traffic classes
   :mod:`.stages.classes`); the NICs hold no shared backlog;
4. lossy links, the receiver, the receiver wire (:mod:`.stages.receive`);
5. accounting: ``sent = delivered + in_flight + queued + dropped + discarded`` every step
   (the largest residual is kept in :attr:`FluidState.max_residual`);
6. completions (:mod:`.stages.complete`);
7. congestion signals into the feedback ring (:mod:`.stages.signals`);
8. react: flow control sees the new ingress pools (:func:`fabric_jax.flowcontrol.update`).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from .. import faults as fm
from .. import flowcontrol as fcm
from .. import links as lk
from .problem import FluidProblem
from .stages.classes import transmit_classes
from .stages.clock import apply_faults, clock, route
from .stages.common import all_flows, over_flows, release
from .stages.complete import complete, last_bytes
from .stages.offer import offer
from .stages.receive import lossy_links, propagate, receive
from .stages.signals import emit_signals
from .stages.transmit import hold_at_sender, shared_params, transmit
from .state import FluidState, unpack_law

__all__ = ["step", "in_flight", "idle_for_good", "idle_snapshot", "per_unit_params"]


def step(problem: FluidProblem, c: FluidState):
    """``(state after the step, its snapshot)``: the stages in order (module docstring)."""
    static, net, params, fcp = problem.static, problem.net, problem.params, problem.fc_params
    smooth, dt, rparams, sched = (problem.smooth, problem.dt, problem.routing_params,
                                  problem.faults)
    hops = net.hops
    t, start, started, active = clock(net, c, dt)
    cap_k, x, transit, fault_drop, path_ok = apply_faults(net, sched, c)
    split, inc_k, stranded, rstate = route(static, net, c, x, cap_k, active, t, path_ok,
                                            rparams, dt)
    law_state, offered, law_packed = offer(static, net, c, t, start, started, active,
                                            stranded, params, smooth, dt)
    uh, n_cls = net.uhops, static.n_classes
    cap_u = cap_k if n_cls == 1 else jnp.repeat(cap_k, n_cls)
    pool = uh.pool_sum(x + transit)
    fcp_k = shared_params(static, net, fcp, pool)
    usable = fcm.usable_capacity(static.fc, c.fc, cap_u, pool, fcp_k, dt, smooth)
    # the bands sum to x after every step; only faults change x in between
    xb = c.xb if sched is None else lk.reconcile_bands(c.xb, x)
    if n_cls == 1:
        tr = transmit(static, net, xb, transit, usable, inc_k, split, offered, fcp_k, dt)
        sig_net, sig_inc, sig_params, usable_l = net, inc_k, params, usable
    else:
        tr = transmit_classes(static, net, xb, transit, usable, cap_k, inc_k, split, offered,
                               fcp_k, dt)
        sig_net = dataclasses.replace(net, hops=uh, switch=net.uswitch)
        sig_inc, usable_l = tr["vinc"], tr["usable_l"]
        sig_params = per_unit_params(params, hops.n_links, n_cls)
    x_new, xb_new, held = hold_at_sender(net, tr["x"], tr["xb"])
    dropped_now = tr["dropped"] + fault_drop
    if static.shape.lossy:
        lost, lost_l = lossy_links(net, sched, c, tr["served"], tr["alloc_p"], dt)
        dropped_now = dropped_now + lost
    else:
        lost = 0.0
    discard, rx_phi = receive(static, net, c, x_new, cap_k, split, tr["served"], tr["alloc"],
                               tr["send"], dropped_now, dt)
    transit_new = tr["transit"]
    wire, passed_now, deliv_now, discarded_now = propagate(
        net, c, tr["served"], tr["alloc"], discard, dt, lost)
    sent_now = tr["send"] * dt - held
    # accounting: sent = delivered + in flight + queued + dropped + discarded, every step
    # (per flow, then one sum over the flows; the wires' bytes summed as adds of the
    # history's rows, lk.sum_rows: a reduction over them is slow on XLA:CPU)
    stock = lambda x, tr, w, k: (jnp.sum(x, axis=1) + jnp.sum(tr, axis=1)  # noqa: E731
                                 + lk.wire_in_flight(w, k, net.wire_n, net.wire_phi,
                                                     by_rows=True))
    residual = jnp.abs(over_flows(jnp.sum(
        sent_now - deliv_now - dropped_now - discarded_now
        - (stock(x_new, transit_new, wire, c.k)
           - stock(c.x, c.transit, c.wire, c.k - 1))), hops.axis_name))
    # per queue (link, or link x class): a flow drains through its own class's queue
    last = last_bytes(sig_net, tr["served"], tr["served_l"], usable, sig_inc, tr["alloc"],
                       jnp.minimum(law_state.rate, net.line_rate), dt, tr["span"],
                       tr.get("load_cut"))
    remaining = jnp.maximum(c.remaining - sent_now + dropped_now + discarded_now, 0.0)
    in_net = jnp.sum(x_new, axis=1) + jnp.sum(transit_new, axis=1)
    passed, completes, finish = complete(net, c, t, start, active, passed_now, last, dt,
                                          remaining, in_net)
    ring, mark_l, p_path = emit_signals(static, sig_net, c, x_new, cap_u, usable,
                                         tr["tx"], split, sent_now / dt, dropped_now,
                                         active & ~completes,
                                         sig_params, fcp_k, smooth, dt,
                                         passed + c.discarded + discarded_now)
    if n_cls > 1:  # routing sees a link's worst class
        mark_l = jnp.max(mark_l.reshape(hops.n_links, n_cls), axis=1)
    # react: flow control sees the new ingress pools
    pool_new, pool_out = jnp.moveaxis(
        uh.pool_sum(jnp.stack([x_new + transit_new, tr["served"]], axis=-1)), -1, 0)
    fc_state = fcm.update(static.fc, c.fc, pool_new, pool_out, cap_u,
                          usable, shared_params(static, net, fcp, pool_new), dt, smooth)
    q_new = hops.link_sum(x_new)
    routed = dict(route=rstate, load=tr["load_o"], mark_l=mark_l,
                  rate=offered) if static.policy is not None else {}
    lossy = dict(corrupted=c.corrupted + lost_l) if static.shape.lossy else {}
    new = c.replace(k=c.k + 1,
                    remaining=remaining,
                    x=x_new, xb=xb_new, transit=transit_new,
                    wire=wire, start=start, finish=finish,
                    done=c.done | completes, sent=c.sent + sent_now, passed=passed,
                    delivered=c.delivered + deliv_now, dropped=c.dropped + dropped_now,
                    discarded=c.discarded + discarded_now, rx_phi=rx_phi,
                    law=law_packed, fc=fc_state, ring=ring,
                    max_residual=jnp.maximum(c.max_residual, residual),
                    max_queue=jnp.maximum(c.max_queue, q_new),
                    solver_iterations=c.solver_iterations + tr["rounds"].astype(jnp.int32),
                    stranded_time=c.stranded_time + jnp.where(active & stranded, dt, 0.0),
                    stranded=active & stranded, **routed, **lossy)
    # the end of the step, rounded once, as an idle chunk's snapshot computes it
    # (``t + dt`` rounds twice unless the compiler contracts it into an FMA)
    snap = dict(t=(c.k + 1).astype(dt.dtype) * dt, rate=offered,
                throughput=deliv_now / dt, queue=q_new,
                usable=usable_l, mark=p_path, law_state=law_state)
    return new, snap


def per_unit_params(params, n_links, n_classes):
    """The law's per-link parameter leaves (e.g. IB CC's ``switch_port`` mask) repeated
    for each class of the link, so that marking runs per class queue."""
    def rep(a):
        if jnp.ndim(a) == 1 and jnp.shape(a)[0] == n_links:
            return jnp.repeat(a, n_classes)
        return a
    return jax.tree_util.tree_map(rep, params)


def in_flight(net, c):
    """``[flows]`` bytes in transit between hops or on the receiver wire after the
    state's last step."""
    return jnp.sum(c.transit, axis=1) + lk.wire_in_flight(c.wire, c.k - 1,
                                                              net.wire_n, net.wire_phi)


def idle_for_good(net, c, t_end):
    """Nothing left to simulate before ``t_end``: every flow finished or released only
    after it, no byte queued or on a wire, no pause in force or on its way."""
    rel = release(net, c.finish)
    flows_idle = jnp.all(c.done | (rel >= t_end))
    empty = jnp.all(c.x == 0) & jnp.all(in_flight(net, c) == 0)
    fc = c.fc
    calm = jnp.all(fc.pause == 0) & jnp.all(fc.history == 0)   # per link: the same on all
    return all_flows(flows_idle & empty, net.hops.axis_name) & calm


def idle_snapshot(problem: FluidProblem, c: FluidState):
    """The snapshot an idle chunk would end with (see ``stop_when_idle``)."""
    static, net, sched, dt = problem.static, problem.net, problem.faults, problem.dt
    fdt = c.sent.dtype
    cap = net.capacity if sched is None else net.capacity * fm.capacity_factor(sched,
                                                                                c.k - 1)
    zf = jnp.zeros_like(c.sent)   # per flow (also on a shard of the flows)
    return dict(t=c.k.astype(fdt) * dt, rate=zf, throughput=zf,
                queue=jnp.zeros_like(net.capacity), usable=cap.astype(fdt), mark=zf,
                law_state=unpack_law(c.law, static.law.init(net.line_rate, problem.params)))
