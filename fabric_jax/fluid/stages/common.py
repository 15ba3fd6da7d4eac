"""Reductions over the flows, the same code whether the flows are on one device or split.

:func:`fabric_jax.distributed.simulate_fluid_sharded` runs the loop inside
``jax.shard_map``, each shard holding a slice of the flows; ``net.hops.axis_name``
names the mesh axis.  The hop table's link-side sums are then global by themselves
(:class:`fabric_jax.links.HopTable`); the other reductions over flows (the
incidence's link loads, the solves, flow counts, totals, "every flow ..." tests) go
through these.  ``axis_name=None``: the identity, the single-device program.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...sim import release_times

__all__ = ["over_flows", "all_flows", "solve_cap", "release", "safe_div"]


def over_flows(x, axis_name, op=jax.lax.psum):
    """``x`` reduced over the shards of the flows (``op``: ``psum`` or ``pmax``)."""
    return x if axis_name is None else op(x, axis_name)


def all_flows(pred, axis_name):
    """A scalar bool that holds on every shard (loop and ``cond`` predicates must agree)."""
    if axis_name is None:
        return pred
    return jax.lax.pmin(pred.astype(jnp.int32), axis_name) > 0


def solve_cap(n_local, axis_name):
    """``max_iter`` of the step's exact solves: their default ``flows + 1`` over every
    shard's flows (``None``, the solver's own default, unsharded)."""
    if axis_name is None:
        return None
    return n_local * jax.lax.axis_size(axis_name) + 1


def release(net, finish):
    """:func:`fabric_jax.sim.release_times` of the flows; with sharded flows a
    dependency may name a flow of another shard, so ``finish`` is gathered first."""
    axis_name = net.hops.axis_name
    if axis_name is not None and net.deps.shape[1] > 0:
        finish = jax.lax.all_gather(finish, axis_name, tiled=True)
    return release_times(net.deps, finish, net.flows["arrival"], net.flows["delay"])


def safe_div(a, b):
    pos = b > 0
    return jnp.where(pos, a / jnp.where(pos, b, 1.0), 0.0)
