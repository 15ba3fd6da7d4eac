"""The warm-started solve: max-min rates when some flows are known to keep their rates.

The caller (the event-driven simulator, :mod:`fabric_jax.sim`) proves which flows keep
their previous rate.  Their load folds into a residual capacity and the other flows
are solved by the progressive solve's bottleneck freezing
(:func:`~fabric_jax.fairness.solve`), compacted into the smallest of a few buffer
sizes that holds them, so an event costs in proportion to the flows it re-solves.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..incidence import Incidence
from ._common import link_sum
from ._progressive import solve_rows
from ._result import MaxMinResult, max_min_result

#: Smallest compaction bucket (rows) of :func:`solve_warm`; below it a bucket is cheap.
WARM_MIN_BUCKET = 64
#: Bucket sizes of :func:`solve_warm` shrink by this factor (one solve compiled per size).
WARM_BUCKET_FACTOR = 2


def _warm_buckets(n_flows: int) -> list[int]:
    sizes = [n_flows]
    while sizes[-1] > WARM_MIN_BUCKET:
        sizes.append(int(np.ceil(sizes[-1] / WARM_BUCKET_FACTOR)))
    return sizes


def compact_indices(mask, size: int):
    """Indices of the first ``size`` true entries of the 1-D ``mask``, padded with 0.

    Equal to ``jnp.nonzero(mask, size=size, fill_value=0)[0]`` (int32), computed with a
    parallel prefix sum (``lax.associative_scan``) and one scatter, which is cheaper
    than ``jnp.nonzero`` on CPU (the event-driven simulator compacts once per event).
    """
    n = mask.shape[0]
    pos = jax.lax.associative_scan(jnp.add, mask.astype(jnp.int32)) - 1
    return jnp.zeros((size,), jnp.int32).at[jnp.where(mask, pos, size)].set(
        jnp.arange(n, dtype=jnp.int32), mode="drop")


def solve_warm(inc: Incidence, capacity, demand, rate, frozen, *, max_iter=None,
               residual=None, load=None) -> MaxMinResult:
    """Max-min rates when the flows in ``frozen`` are known to keep ``rate`` exactly.

    The residual problem -- the open flows on the capacity left by the frozen ones,
    ``c_l - sum_{g frozen} A[l, g] r_g`` -- is solved by the same parallel bottleneck
    freezing as :func:`solve`, after compacting the open flows' rows into the smallest
    buffer of :func:`_warm_buckets` that holds them (one branch of a ``lax.switch`` per
    buffer size), so an iteration costs in proportion to the open entries, not all.

    Why this is the full solution.  Let ``r*`` be the max-min allocation of the whole
    problem and suppose ``r*_g = rate_g`` for every frozen ``g`` (the caller proves
    it: :func:`fabric_jax.sim.simulate_flows` uses the threshold argument in
    ``fabric_jax.sim._events``).  Restricted to the open set ``U``, ``r*_U`` is feasible for
    the residual capacities, and every open ``f`` still has ``r*_f = d_f`` or a link
    ``l`` that is saturated (residual load = residual capacity, since the frozen load
    was subtracted from both sides) on which ``r*_f`` is the largest rate among the
    open flows (it was the largest among all flows).  That is the bottleneck
    characterisation of the residual problem, whose max-min allocation is unique, so
    the residual solve returns exactly ``r*_U``.

    Incremental link load (``load`` given).  With ``L_l = sum_f A[l, f] rate_f`` over
    *all* flows (the open ones at their previous rates), the residual capacity is
    ``c_l - L_l + sum_{f open} A[l, f] rate_f`` and the new load is
    ``L_l + sum_{f open} A[l, f] (r*_f - rate_f)``: both are sums over the open rows
    only, so nothing in the solve costs in proportion to the frozen flows except the
    compaction's prefix sum.  When the buffer is the whole problem, both are
    recomputed from scratch instead, which also bounds the round-off that the
    incremental updates accumulate over many calls.

    Args:
      inc: flow-major incidence (``row_width`` set, ``nnz == n_flows * row_width``).
      capacity: ``[links]`` bytes/s; ``demand``: ``[flows]`` bytes/s (``+inf``: none).
      rate: ``[flows]`` rates of the frozen flows (with ``load``: the previous rates of
        all flows, the ones ``load`` was summed from; otherwise open entries are
        ignored).
      frozen: ``[flows]`` bool.
      max_iter: iteration cap of the residual solve (default ``n_flows + 1``).
      residual: optional precomputed ``[links]`` residual capacity (skips one
        scatter over the frozen entries; ignored when ``load`` is given).
      load: optional ``[links]`` link load ``sum_f A[l, f] rate_f`` of all flows at
        ``rate`` (see above); the result's ``link_load`` is then updated from it.

    Returns:
      :class:`MaxMinResult`; ``info.iterations`` counts the residual solve only.
    """
    n_flows, width = inc.n_flows, inc.row_width
    if width is None or inc.nnz != n_flows * width:
        raise ValueError("solve_warm needs a flow-major incidence (row_width set); build it "
                         "with Incidence.from_coo / from_paths on the host")
    dtype = capacity.dtype
    if max_iter is None:
        max_iter = n_flows + 1
    li = inc.link_idx.reshape(n_flows, width)
    w = inc.weight.astype(dtype).reshape(n_flows, width)
    rows = (li, w, w != 0)
    rate = jnp.asarray(rate, dtype)
    open_ = ~frozen
    count = jnp.sum(open_)
    sizes = _warm_buckets(n_flows)
    which = jnp.sum(jnp.asarray(sizes) >= count) - 1
    branches = [_bucket(size, rows, capacity, demand, rate, frozen, open_, count, max_iter,
                        residual, load) for size in sizes]
    rate, converged, it, new_load = jax.lax.switch(which, branches, None)
    if load is None:
        new_load = inc.link_load(jnp.where(jnp.isfinite(rate), rate, 0.0))
    return max_min_result(inc, capacity, rate, new_load, it, converged)


def _rows_load(rows, mask, rate, n_links):
    """``[links]`` load of the flow-major ``rows = (links, weight, active)`` in ``mask``
    at rates ``rate``."""
    li, w, act = rows
    on = act & mask[:, None]
    return link_sum(jnp.where(on, w * jnp.where(mask, rate, 0.0)[:, None], 0.0).reshape(-1),
                    li.reshape(-1), n_links, None)


def _bucket(size, rows, capacity, demand, rate, frozen, open_, count, max_iter, residual,
            load):
    """The branch of :func:`solve_warm`'s ``lax.switch`` for buffers of ``size`` rows:
    compacts the ``count`` open rows into the buffer, solves them on the residual
    capacity and returns ``(rates, converged, iterations, link load)`` (the load is
    zeros when ``load`` is ``None``: the caller sums it from scratch)."""
    li, w, _ = rows
    n_flows, width = w.shape
    n_links, dtype = capacity.shape[0], capacity.dtype

    def run(_):
        full = size == n_flows
        idx = compact_indices(open_, size)
        keep = jnp.arange(size) < count
        w_s = jnp.where(keep[:, None], w[idx], 0.0)
        li_s = li[idx]
        d_s = demand[idx]
        has = jnp.any(w_s != 0, axis=1)
        on_s = w_s != 0
        old_s = jnp.where(has, rate[idx], 0.0)

        def buffer_load(r):
            return link_sum(jnp.where(on_s, w_s * r[:, None], 0.0).reshape(-1),
                            li_s.reshape(-1), n_links, None)

        if load is not None and not full:
            res_cap = capacity - load + buffer_load(old_s)
        elif residual is not None and load is None:
            res_cap = residual
        else:
            res_cap = capacity - _rows_load(rows, frozen, rate, n_links)
        sub = Incidence(li_s.reshape(-1), jnp.repeat(jnp.arange(size), width),
                        w_s.reshape(-1), n_links, size, width)
        r, f, it = solve_rows(sub, res_cap, d_s, jnp.where(has, 0.0, d_s).astype(dtype),
                              ~has, max_iter, fine=False)
        target = jnp.where(keep, idx, n_flows)
        new_rate = jnp.where(frozen, rate, 0.0).at[target].set(r, mode="drop")
        if load is None:
            new_load = jnp.zeros((n_links,), dtype)  # computed by the caller, from scratch
        elif full:
            new_load = _rows_load(rows, jnp.ones((n_flows,), bool), new_rate, n_links)
        else:
            new_load = load + buffer_load(jnp.where(has, r, 0.0) - old_s)
        return new_rate, jnp.all(f | ~keep), it, new_load
    return run
