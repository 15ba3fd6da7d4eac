"""Stages 4-5 of a step with traffic classes (:mod:`fabric_jax.qos`).

Units are ``links x classes``: each class wants its backlog per step plus its fresh
offers, up to its own pause / credit ceiling; the link is shared among the classes by
:func:`fabric_jax.qos.arbitrate`, then inside each class as in the single-class step
(:mod:`.transmit`); what the grants leave unused goes to the other classes in a second,
work-conserving pass.
"""

from __future__ import annotations

import jax.numpy as jnp

from ... import links as lk
from ... import qos
from ...fairness import solve
from ...incidence import Incidence
from .common import over_flows, safe_div, solve_cap
from .transmit import (STEP_COMPACTION, allocate_paths, buffers, first_hops, flow_alloc,
                       nic_send, path_incidence, path_split, place_excess_paths, tail_bands)

__all__ = ["transmit_classes"]


def transmit_classes(static, net, xb, transit, ceiling, cap_k, inc_k, split, offered, fcp,
                      dt):
    """:func:`transmit` with traffic classes (the module docstring's rules).

    Each class wants ``d = min(backlog / dt + fresh offers, ceiling)`` at each link
    (``ceiling``: its per-class pause / credits); the link is shared among the classes
    by :func:`fabric_jax.qos.arbitrate`, then inside each class as before (its queue
    first, then max-min among its fresh offers on what is left of its grant); what the
    grants leave unused goes, in a second pass, first to standing queues then to fresh
    offers of any class, within each class's ceiling (work conservation).  Returns the
    dict of :func:`transmit` (``served_l`` per unit), plus ``vinc`` (the unit
    incidence) and ``usable_l`` ``[links]``.
    """
    hops, uh = net.hops, net.uhops
    n_cls, n_links = static.n_classes, hops.n_links
    n_units = uh.n_links
    ax = hops.axis_name        # sharded flows: every sum onto links is global
    vinc = Incidence(uh.link.ravel(), inc_k.flow_idx, inc_k.weight, n_units, inc_k.n_flows)
    per_link = lambda u: jnp.sum(u.reshape(n_links, n_cls), axis=1)  # noqa: E731
    per_unit = lambda l: jnp.repeat(l, n_cls)  # noqa: E731
    load_u = over_flows(vinc.link_load(offered), ax)

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
    f_k, f_u = first_hops(inc_k, uh.seg), first_hops(vinc, uh.seg)
    send1, rounds1 = nic_send(static, net.uswitch, f_u, fresh, offered, static.nic_ports,
                               axis_name=ax)
    use_u = over_flows(vinc.link_load(send1), ax)
    f2 = Incidence(jnp.concatenate([f_k.link_idx, n_links + f_u.link_idx]),
                   jnp.concatenate([f_k.flow_idx, f_u.flow_idx]),
                   jnp.concatenate([f_k.weight, f_u.weight]), n_links + n_units, inc_k.n_flows)
    send2, rounds2 = nic_send(static, switch2, f2,
                      jnp.concatenate([jnp.maximum(cap_k - per_link(served_u / dt + use_u), 0.0),
                                       jnp.maximum(ceiling - served_u / dt - use_u, 0.0)]),
                      jnp.maximum(offered - send1, 0.0), "several", axis_name=ax)
    send = jnp.minimum(send1 + send2, offered)
    r_p, _, _, tx_u, it1 = allocate_paths(static, uh, vinc, fresh, send)
    # pass 2: capacity left unused by the grants, within each class's ceiling
    used_u = served_u / dt + tx_u
    spare = jnp.maximum(cap_k - per_link(used_u), 0.0)
    room = jnp.maximum(ceiling - used_u, 0.0)
    left_u = uh.link_sum(left)
    frac = jnp.minimum(jnp.minimum(per_unit(safe_div(spare * dt, per_link(left_u))),
                                   safe_div(room * dt, left_u)), 1.0)
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
    split_p = path_split(uh, vinc)
    rest = jnp.where(split_p > 0, jnp.maximum(send[:, None] - r_p, 0.0), 0.0).ravel()
    pinc_k, pinc_v = path_incidence(hops, inc_k), path_incidence(uh, vinc)
    pinc2 = Incidence(inc2.link_idx, jnp.concatenate([pinc_k.flow_idx, pinc_v.flow_idx]),
                      jnp.concatenate([pinc_k.weight, pinc_v.weight]), n_links + n_units,
                      pinc_v.n_flows)
    sol2 = solve(pinc2, jnp.concatenate([spare, room]), rest,
                 iterations=static.solver_iterations, compaction=STEP_COMPACTION,
                 axis_name=ax, max_iter=solve_cap(pinc2.n_flows, ax),
                 unroll=static.solver_unroll, check_every=static.solver_check_every)
    r_p = r_p + jnp.minimum(sol2.rates, rest).reshape(r_p.shape)
    alloc_p = split_p * r_p
    alloc = flow_alloc(split_p, alloc_p, send)
    # the excess waits where its class's sent load exceeds the class's own grant (with
    # one active class exactly the single-class rule: load above the capacity left)
    place = place_excess_paths(uh, vinc, net.uswitch, send, alloc_p, fresh, dt)
    arrived_left = left_a + place
    x_new, dropped = buffers(static, net, uh, net.uswitch,
                              jnp.sum(left_b, axis=-1) + arrived_left, arrived_left, fcp,
                              offered)
    return dict(served=served, x=x_new, xb=tail_bands(uh, left_b, x_new), alloc=alloc,
                alloc_p=alloc_p,
                tx=served_u / dt + over_flows(pinc_v.link_load(r_p.ravel()), ax),
                served_l=served_u, load_o=per_link(load_u), dropped=dropped, span=span, transit=carry, vinc=vinc, send=send,
                usable_l=jnp.minimum(cap_k, per_link(ceiling)),
                rounds=jnp.stack([it1 + sol2.info.iterations, rounds1 + rounds2]))
