"""The forward models: the fair-share bottleneck model the inverse differentiates (split,
rates, completion times and counters) and the exact max-min observation :func:`truth`
(:mod:`fabric_jax.optimize._locate`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ...fairness import max_min_fair
from ...incidence import Incidence
from ._problem import SATURATION, LocateProblem


def path_split(prob: LocateProblem, cap, tau):
    """``[flows, paths]`` split under capacities in force ``cap`` (adaptive: in
    proportion to each path's (soft) bottleneck capacity)."""
    if prob.routing != "adaptive":
        return jnp.asarray(prob.split0, cap.dtype)
    hops = jnp.asarray(prob.path_hops)
    # padded hops and paths get a large finite capacity (inf would make NaN gradients)
    big = jnp.max(cap) * 1e6 + 1.0
    c = jnp.where(hops >= 0, cap[jnp.maximum(hops, 0)], big)
    logc = jnp.log(jnp.maximum(c, 1e-30))
    if tau is None:
        bott = jnp.min(logc, axis=-1)
    else:
        m = jnp.min(logc, axis=-1, keepdims=True)
        bott = m[..., 0] - tau * jnp.log(jnp.sum(jnp.exp(-(logc - m) / tau), axis=-1))
    w = jnp.where(jnp.asarray(prob.path_mask), jnp.exp(bott - jnp.max(bott, axis=1,
                                                                       keepdims=True)), 0.0)
    return w / jnp.sum(w, axis=1, keepdims=True)


def scaled_rates(prob: LocateProblem, cap, split, rate0, tau):
    """``r_f = r0_f softmin(1, min_l cap_l / load0_l)`` over the links the flow uses:
    each link whose capacity in force falls below its nominal load ``load0_l = sum_f
    A_lf r0_f`` slows every flow on it in proportion (log-space soft-min, temperature
    ``tau``; the hard min at ``tau -> 0``)."""
    ew = split[prob.e_flow, prob.e_path]
    load0 = jax.ops.segment_sum(ew * rate0[prob.e_flow], prob.e_link,
                                num_segments=prob.n_links)
    # each link of the flow once: a link crossed on every path (its NIC links under
    # spraying) is one constraint, not one per path (counted per path it took ~n_paths
    # times the soft-min's weight, and descent blamed the NIC links of a slow leaf's
    # hosts before the leaf's uplink that slowed them)
    x = (jnp.log(jnp.maximum(cap, 1e-30)) - jnp.log(jnp.maximum(load0, 1e-30)))[prob.u_link]
    m = jnp.minimum(jax.ops.segment_min(x, prob.u_flow, num_segments=prob.n_flows), 0.0)
    z = jax.ops.segment_sum(jnp.exp(-(x - m[prob.u_flow]) / tau), prob.u_flow,
                            num_segments=prob.n_flows) + jnp.exp(m / tau)
    return rate0 * jnp.exp(m - tau * jnp.log(z))


def _goodput(prob: LocateProblem, split, loss):
    """``[flows]`` fraction of the bytes a flow sends that arrive: ``sum_p s_fp
    prod_{l in p} (1 - p_l)`` over its paths (split ``s``), ``loss`` ``[links]``."""
    seg = prob.e_flow.astype(np.int64) * prob.n_paths + prob.e_path
    keep = jax.ops.segment_sum(jnp.log1p(-loss[prob.e_link]), seg,
                               num_segments=prob.n_flows * prob.n_paths)
    return jnp.sum(split * jnp.exp(keep).reshape(prob.n_flows, prob.n_paths), axis=1)


def forward(prob: LocateProblem, rates, split, cap, times, sat=None, loss=None):
    """Completion times ``[flows]`` and cumulative counters ``[links, samples]``:
    ``(finish, bytes, congested, dropped)`` (``loss`` ``[links]``, default none)."""
    size = jnp.asarray(prob.size, rates.dtype)
    end = size / rates
    if loss is not None:
        end = end / _goodput(prob, split, loss)
    finish = end + jnp.asarray(prob.latency, rates.dtype)
    ew = split[prob.e_flow, prob.e_path]
    t = jnp.asarray(times, rates.dtype)
    sent = jnp.minimum(t[None, :], end[prob.e_flow][:, None])          # [entries, samples]
    bytes_ = jax.ops.segment_sum((ew * rates[prob.e_flow])[:, None] * sent, prob.e_link,
                                 num_segments=prob.n_links)
    if sat is None:
        load = jax.ops.segment_sum(ew * rates[prob.e_flow], prob.e_link,
                                   num_segments=prob.n_links)
        util = load / jnp.maximum(cap, 1e-30)
        sat = jax.nn.sigmoid((util - SATURATION + 0.004) / 0.002)
    busy = jax.ops.segment_max(jnp.where(ew > 0, end[prob.e_flow], 0.0), prob.e_link,
                               num_segments=prob.n_links)
    busy = jnp.maximum(busy, 0.0)
    congested = sat[:, None] * jnp.minimum(t[None, :], busy[:, None])
    dropped = (jnp.zeros_like(bytes_) if loss is None else loss[:, None] * bytes_)
    return finish, bytes_, congested, dropped


def exact_rates(prob: LocateProblem, phi):
    """Exact weighted max-min rates ``[flows]`` at capacity factors ``phi``."""
    cap = jnp.asarray(prob.capacity * np.asarray(phi, float), jnp.result_type(float))
    split = path_split(prob, cap, None)
    inc = _merge_entries(prob.e_link, prob.e_flow,
                         np.asarray(split, float)[prob.e_flow, prob.e_path],
                         prob.n_links, prob.n_flows)
    res = max_min_fair(inc, cap)
    return jnp.maximum(res.rates, 1e-30), res, split, cap


def truth(prob: LocateProblem, phi, times=(), loss=None):
    """The exact flow-level observation (max-min rates, hard saturation): ``(finish,
    bytes, congested, dropped)`` at capacity factors ``phi`` ``[links]`` and loss
    fractions ``loss`` ``[links]`` (default none)."""
    rates, res, split, cap = exact_rates(prob, phi)
    if loss is not None:
        loss = jnp.asarray(np.asarray(loss, float), rates.dtype)
    return forward(prob, rates, split, cap, np.asarray(times, float),
                    sat=jnp.asarray(res.saturated, rates.dtype), loss=loss)


def _merge_entries(link, flow, weight, n_links, n_flows) -> Incidence:
    """One entry per (link, flow) (a sprayed flow crosses its host links on every path)."""
    key = np.asarray(flow, np.int64) * n_links + np.asarray(link)
    uniq, inv = np.unique(key, return_inverse=True)
    ww = np.zeros(uniq.size)
    np.add.at(ww, inv, np.asarray(weight, float))
    keep = ww > 0
    return Incidence.from_coo((uniq[keep] % n_links).astype(np.int32),
                              (uniq[keep] // n_links).astype(np.int32),
                              np.minimum(ww[keep], 1.0), n_links=n_links, n_flows=n_flows)

