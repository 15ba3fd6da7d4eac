"""Stages 1-2 of a step: the clock, faults in force, and the routing policy's split.

1. **clock and faults** (:func:`clock`, :func:`apply_faults`): which flows are active;
   the capacity in force ``C_l(k)``; bytes queued on or travelling to a failed link are
   dropped and returned to their sender.
2. **route** (:func:`route`): with a routing policy, each flow's split over its paths
   (:mod:`fabric_jax.routing`), restricted to live paths; flows with no live path are
   stranded.
"""

from __future__ import annotations

import jax.numpy as jnp

from ... import faults as fm
from ...incidence import Incidence
from .common import release

__all__ = ["clock", "apply_faults", "route", "hop_count"]


def clock(net, c, dt):
    """Time of the step and which flows have started / are active."""
    t = c.k.astype(dt.dtype) * dt
    rel = release(net, c.finish)
    start = jnp.where(jnp.isfinite(c.start), c.start, rel)
    started = start < t + dt
    return t, start, started, started & ~c.done


def apply_faults(net, sched, c):
    """Capacity in force; bytes queued on / travelling to failed links are dropped."""
    hops = net.hops
    if sched is None:
        return net.capacity, c.x, c.transit, jnp.zeros_like(c.sent), None
    cap_k = net.capacity * fm.capacity_factor(sched, c.k)
    dead = hops.valid & ~hops.gather(cap_k > 0, True)
    lost = jnp.where(dead, c.x + c.transit, 0.0)
    x = jnp.where(dead, 0.0, c.x)
    transit = jnp.where(dead, 0.0, c.transit)
    path_ok = ~jnp.any(hops.per_path(dead), axis=2)  # [flows, paths]
    return cap_k, x, transit, jnp.sum(lost, axis=1), path_ok


def route(static, net, c, x, cap_k, active, t, path_ok, rparams, dt):
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
    rview = policy.view(queue=hops.link_sum(x), capacity=cap_k, load=c.load,
                        mark=c.mark_l, flow_rate=c.rate, active=active, t=t)
    rstate = policy.step(c.route, rview, dt, rparams)
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


def hop_count(hops):
    path_valid = jnp.any(hops.per_path(hops.valid), axis=2)
    n = jnp.sum(hops.valid, axis=1) / jnp.maximum(jnp.sum(path_valid, axis=1), 1)
    return n
