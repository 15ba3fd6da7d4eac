"""Closed-form max-min on one link at a time: the water-fill and the joining share.

When every flow crosses at most one link the links decouple and progressive filling
(Bertsekas & Gallager, *Data Networks*, 2nd ed., sec. 6.5.2) on a link is a water
level found in a few rounds (:func:`water_fill`: the fluid engine's NIC share).
:func:`joining_share` applies the same one-link filling to a solved allocation: the
rate a flow could take at once if it raised its demand.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..incidence import Incidence
from ._common import any_shard, check_loop_options, on_accelerators
from ._precision import saturation_rtol


def joining_share(inc: Incidence, capacity, rates, load=None, *, axis_name=None):
    """``[flows]`` the rate each flow would get if it alone raised its demand, link by link.

    Given a max-min allocation ``rates`` (e.g. :func:`solve`'s, with some flows held
    below their share by their demand), the share a flow ``f`` could take at once if it
    wanted more: on every link ``l`` it crosses (``w = A[l, f] > 0``, load ``L_l``,
    spare ``S_l = c_l - L_l``, top rate ``lam_l = max_{g on l} r_g`` carried with weight
    ``W_l = sum_{g on l, r_g = lam_l} A[l, g]``)

    * a link with spare capacity gives it ``r_f + S_l / w``;
    * a saturated link on which ``f`` is below the top shares with the flows at the
      top (those bottlenecked there): progressive filling from the current loads
      (Bertsekas & Gallager, *Data Networks*, 2nd ed., sec. 6.5.2) brings ``f`` and
      them to the common level ``(S_l + lam_l W_l + w r_f) / (W_l + w)``;
    * a saturated link on which ``f`` is at the top gives it ``r_f`` (it is already
      bottlenecked there);

    and the share is the smallest of these over its links (at least ``r_f``; ``+inf``
    for a flow that crosses no link).  It is the exact max-min rate of ``f`` with its
    demand raised to ``+inf`` when that rate is set by one link on which the other
    flows keep their rates or drop to the common level (e.g. any single link whose
    flows below the top stay below the new level); otherwise a one-link estimate (the
    others' rates elsewhere are held).

    Use: the fluid loop's last step of a flow (:mod:`fabric_jax.fluid`), where the
    flow offers only ``remaining / dt``, is allocated that, and would otherwise be
    taken to send it over the whole step; it sends at this share and finishes early in
    the step (the other flows take the rest of the step's capacity, so the step's
    bytes per flow are unchanged).

    Args:
      inc: :class:`~fabric_jax.Incidence` ``[links, flows]``.
      capacity: ``[links]`` capacity the allocation ``rates`` was computed for, bytes/s.
      rates: ``[flows]`` the allocation, bytes/s.
      load: optional ``[links]`` ``link_load(rates)`` when the caller has it (over
        all shards with ``axis_name``).
      axis_name: as :func:`solve`: inside ``shard_map`` with the flows split over that
        mesh axis, the per-link maxima and sums are ``pmax`` / ``psum`` over it.

    Returns:
      ``[flows]`` bytes/s, ``>= rates``.
    """
    dtype = jnp.result_type(rates)
    rtol = saturation_rtol(dtype)
    on = inc.active
    w = jnp.where(on, inc.weight.astype(dtype), 1.0)
    r_e = rates[inc.flow_idx]
    lam = inc.link_max(jnp.where(on, r_e, 0.0))
    if axis_name is not None:
        lam = jax.lax.pmax(lam, axis_name)
    lam_e = lam[inc.link_idx]
    top = on & (r_e >= lam_e * (1.0 - rtol))
    top_w = inc.link_sum(jnp.where(top, w, 0.0))
    if load is None:
        load = inc.link_load(rates)
        if axis_name is not None:
            top_w, load = jax.lax.psum((top_w, load), axis_name)
    elif axis_name is not None:
        top_w = jax.lax.psum(top_w, axis_name)
    top_w = top_w[inc.link_idx]
    spare = jnp.maximum(capacity - load, 0.0)
    spare_e = spare[inc.link_idx]
    saturated = (spare <= rtol * jnp.abs(capacity))[inc.link_idx]
    level = (spare_e + lam_e * top_w + w * r_e) / (top_w + w)
    per_entry = jnp.where(saturated, jnp.where(top, r_e, jnp.maximum(level, r_e)),
                          r_e + spare_e / w)
    return jnp.maximum(inc.flow_min(per_entry, on), rates)


def water_fill(link, weight, capacity, demand, *, iterations=None, with_rounds: bool = False,
               axis_name=None, unroll: int = 0):
    """Weighted max-min fair rates when every flow crosses at most one link: a water-fill
    per link.

    Model: flow ``f`` puts ``weight[f] * r_f`` on link ``link[f]`` and is capped by
    ``demand[f]``.  With one link per flow the links decouple, and progressive filling
    (Bertsekas & Gallager, *Data Networks*, 2nd ed., sec. 6.5.2) on link ``l`` raises a
    common water level ``lam_l`` until ``sum_f weight_f min(d_f, lam_l) = c_l``; each
    flow gets ``r_f = min(d_f, lam_l)`` (``lam_l = +inf`` when the link's total demand
    fits).  It is :func:`max_min_fair` on that incidence.

    Given the set ``D_l`` of the link's demand-limited flows the level is closed form,

        lam_l = (c_l - sum_{f in D_l} w_f d_f) / sum_{f not in D_l} w_f,

    and ``D_l`` is found by elimination: start from the level of an empty ``D_l``, add
    every flow whose demand is at most the level, recompute, until no flow joins.  The
    level never decreases (the flows that join were below it), so the set only grows
    and the last level is exact; every link is done at once, the number of rounds is
    the largest number of distinct demand levels below a link's water line (a few in a
    fluid step: most offers sit at the line rate or at one law's rate).  Each round is
    two segment sums over the flows.  (A sort of the flows by link and demand would
    find ``D_l`` in one pass, but XLA's CPU sort and the segmented prefix sums it needs
    cost more than these rounds, to run and to compile: docs/performance.md, "Max-min
    solver".)

    Args:
      link: ``[flows]`` int link of each flow; a value outside ``[0, links)`` means the
        flow crosses no link (it gets its demand).
      weight: ``[flows]`` fraction of the flow's rate on its link (``A[l, f]``, > 0; a
        flow with weight <= 0 crosses no link).
      capacity: ``[links]`` bytes/s, >= 0 (may be ``+inf``).
      demand: ``[flows]`` bytes/s, >= 0 (may be ``+inf``).
      iterations: ``None`` (default): rounds until no flow joins (a
        ``lax.while_loop``: ``jit``, ``vmap`` and forward-mode autodiff).  An int: that
        many rounds in a ``lax.fori_loop`` (reverse mode too; exact when it is at least
        the number of rounds needed, which is at most ``flows + 1``).
      with_rounds: also return the number of rounds run (int32 scalar).
      axis_name: as :func:`solve`: inside ``shard_map`` with the flows split over that
        mesh axis, a link's sums are ``psum`` over it and every shard runs the rounds
        until no flow joins on any shard (the same levels and rounds as unsharded).
      unroll: (static, with ``iterations=None``) rounds run as a loop of known trip
        count before the while loop, which finishes the rest (none when one of those
        rounds already changed nothing): the same rates and round count as without.
        The first round always runs, so in a program compiled for an accelerator it
        always runs this way (``unroll=0`` is ``unroll=1`` there,
        :func:`on_accelerators`): on a GPU the while loop's first test would be a host
        round trip whose answer is known.

    Returns:
      ``[flows]`` rates, bytes/s, in the dtype of ``capacity`` (and the rounds with
      ``with_rounds``).
    """
    capacity = jnp.asarray(capacity)
    dtype = capacity.dtype
    n_links = capacity.shape[0]
    demand = jnp.asarray(demand, dtype)
    link = jnp.asarray(link, jnp.int32)
    weight = jnp.asarray(weight, dtype)
    on = (link >= 0) & (link < n_links) & (weight > 0)
    seg = jnp.where(on, link, n_links)            # flows on no link: one extra segment
    w = jnp.where(on, weight, 0.0)
    cap = jnp.concatenate([capacity, jnp.full((1,), jnp.inf, dtype)])

    def level(limited):
        """``[links + 1]`` the water level of each link given its limited flows."""
        sums = jax.ops.segment_sum(
            jnp.stack([jnp.where(limited, w * jnp.where(limited, demand, 0.0), 0.0),
                       jnp.where(limited, 0.0, w)], axis=1), seg, num_segments=n_links + 1)
        if axis_name is not None:
            sums = jax.lax.psum(sums, axis_name)
        open_w = sums[:, 1]
        has_open = open_w > 0
        safe_w = jnp.where(has_open, open_w, 1.0)   # double-where: no NaN/inf gradients
        return jnp.where(has_open, jnp.maximum(cap - sums[:, 0], 0.0) / safe_w, jnp.inf)

    def join(limited):
        return limited | (demand <= level(limited)[seg])

    limited = ~on          # a flow on no link takes its demand
    check_loop_options(iterations, unroll)
    if iterations is None:
        limited, rounds = _join_until_settled(join, limited, axis_name, unroll)
    else:
        limited = jax.lax.fori_loop(0, int(iterations), lambda i, lim: join(lim), limited)
        rounds = jnp.asarray(int(iterations), jnp.int32)
    lam = level(limited)[seg]
    rates = jnp.where(limited, demand, jnp.minimum(lam, demand))
    return (rates, rounds) if with_rounds else rates


def _join_until_settled(join, limited, axis_name, unroll):
    """:func:`water_fill`'s exact loop: rounds of ``join`` until no flow joins on any
    shard, the first ``unroll`` of them in a loop of known trip count (the first one on
    accelerators with ``unroll=0``).  Returns ``(limited, rounds run)``."""
    def body(c):
        new = join(c[0])
        return new, any_shard(jnp.any(new != c[0]), axis_name), c[2] + 1

    def fixed(_, c):   # the rounds the loop would run, while it would run
        new = join(c[0])
        return (new, c[1] & any_shard(jnp.any(new != c[0]), axis_name),
                c[2] + c[1].astype(jnp.int32))

    def run(c, k):
        """``k`` rounds in a loop of known trip count, then the loop."""
        if k:
            c = jax.lax.fori_loop(0, k, fixed, c)
        return jax.lax.while_loop(lambda c: c[1], body, c)

    c = (limited, jnp.asarray(True), jnp.asarray(0, jnp.int32))
    if unroll:
        limited, _, rounds = run(c, int(unroll))
    else:   # the first round always runs: on an accelerator, outside the loop
        limited, _, rounds = on_accelerators(lambda c: run(c, 1), lambda c: run(c, 0), c)
    return limited, rounds
