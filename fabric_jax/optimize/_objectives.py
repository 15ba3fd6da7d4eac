"""Differentiable routing objectives (device side, pure JAX).

Every objective maps a ``[pairs, paths]`` split (from :func:`masked_softmax` of logits)
to a scalar loss and an exact metric used to pick the best iterate.

* **Maximum link utilisation (MLU)**, smoothed by log-sum-exp with a *relative*
  temperature ``tau``:  ``smax(u) = m + T log sum_l exp((u_l - m) / T)`` with
  ``m = max_l u_l`` and ``T = tau m`` (scale-free: the same ``tau`` suits any load).  It lies in
  ``[max u, max u (1 + tau log L)]`` and its gradient is essentially the softmax of
  ``u / T`` (plus the small term from ``T``'s dependence on ``m``): every near-maximal
  link pushes, which is what makes descent work on a min-max.
* **Per-tenant MLU**: tenant ``t`` sees the utilisation of the links it actually uses,
  ``MLU_t = max over its pairs p and paths k with split > 0 of max_{l in k} u_l``
  (the hops of its candidate paths: on an aggregated problem the fabric links only,
  access links being fixed ``base_load``).
  Smoothed as ``smax_{p in t} sum_k split_pk smax_{l in k} u_l`` (the split-weighted
  bottleneck of each pair, so a path leaves the max as its split goes to 0); the loss is
  ``sum_t w_t MLU_t``.
* **Collective completion time (CCT) under max-min sharing**: all pairs are flows that
  start together; rates are the max-min fair allocation of the flows still running
  (:func:`fabric_jax.fairness.solve`), recomputed at each completion, exactly as the
  event-driven :func:`fabric_jax.simulate_flows`.  The differentiable route is
  *unrolling*: ``events`` completion events (``lax.scan``, rematerialised per event),
  each with a fixed-iteration max-min solve (``iterations``).  Between events the rates
  are rational functions of the split weights (each bottleneck level is
  ``(c_l - frozen load) / sum of open weights``), so the CCT is piecewise smooth and the
  unrolled gradient is its exact derivative wherever the bottleneck structure and the
  completion order are locally constant.  Bias: (1) at ties -- two links saturating at
  the same level, two flows finishing together, which is where a min-max optimum tends
  to sit -- the gradient is one one-sided derivative, not a subgradient average, so
  plain descent can zig-zag (the optimiser keeps the best iterate); (2) if ``events`` is
  smaller than the number of distinct completion times, flows still running after the
  last event are drained at their last rates, which over-estimates the CCT (survivors
  would speed up); (3) if ``iterations`` is below the bottleneck depth, unfrozen flows
  keep rate 0 for that event (``converged`` reports it).  Defaults make (2) and (3)
  exact: one event per flow, and 32 solver iterations.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..fairness import solve
from ..routing import masked_softmax
from ..incidence import Incidence
from ..sim import EVENT_EPS_ULPS

__all__ = ["masked_softmax", "device_link_load", "utilization", "smooth_max",
           "mlu_loss", "tenant_mlu_loss", "completion_times", "cct_loss"]

#: Splits below this count as "path unused" in the exact per-tenant MLU.
SPLIT_EPS = 1e-3


def device_link_load(arrays, split, demand=None):
    """``[links]`` bytes/s: ``base_load + sum demand * split`` over each path's hops."""
    d = arrays.demand if demand is None else demand
    w = (d[:, None] * split)[:, :, None] * arrays.hop_w
    load = jax.ops.segment_sum(w.ravel(), arrays.link_idx.ravel(),
                               num_segments=arrays.capacity.shape[0])
    return load + arrays.base_load


def utilization(arrays, split, demand=None):
    """``[links]`` load / capacity, 0 on zero-capacity links."""
    return device_link_load(arrays, split, demand) * arrays.inv_capacity


def smooth_max(x, mask, temperature):
    """Log-sum-exp maximum of ``x`` over ``mask`` with relative temperature.

    ``T = temperature * max(x)``; the value is within ``[max, max + T log(n)]``.  The
    shift by the maximum is not stopped in the gradient: ``T`` depends on it, so its
    derivative is part of the exact gradient.
    """
    m = jnp.max(jnp.where(mask, x, -jnp.inf))
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    t = temperature * jnp.maximum(jnp.abs(m), 1e-12)
    e = jnp.where(mask, jnp.exp(jnp.where(mask, (x - m) / t, 0.0)), 0.0)
    return m + t * jnp.log(jnp.sum(e))


def _segment_smooth_max(x, seg, n_seg, mask, temperature):
    m = jax.ops.segment_max(jnp.where(mask, x, -jnp.inf), seg, num_segments=n_seg)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    t = temperature * jnp.maximum(jnp.abs(m), 1e-12)
    e = jnp.where(mask, jnp.exp(jnp.where(mask, (x - m[seg]) / t[seg], 0.0)), 0.0)
    s = jax.ops.segment_sum(e, seg, num_segments=n_seg)
    return m + t * jnp.log(jnp.where(s > 0, s, 1.0))


def mlu_loss(arrays, split, temperature, demand=None):
    """``(smooth MLU, exact MLU)`` of a split."""
    u = utilization(arrays, split, demand)
    exact = jnp.max(jnp.where(arrays.link_ok, u, 0.0), initial=0.0)
    return smooth_max(u, arrays.link_ok, temperature), exact


def tenant_mlu(arrays, split, n_tenants, temperature=None, demand=None):
    """Per-tenant MLU ``[tenants]``: exact, or smoothed when ``temperature`` is given."""
    d = arrays.demand if demand is None else demand
    u = utilization(arrays, split, demand)
    hop_u = u[arrays.link_idx]                                    # [P, K, H]
    hop_ok = arrays.hop_w > 0
    used = (d > 0)
    if temperature is None:
        path_b = jnp.max(jnp.where(hop_ok, hop_u, 0.0), axis=-1)
        path_b = jnp.where(arrays.path_mask & (split > SPLIT_EPS), path_b, 0.0)
        pair_b = jnp.where(used, jnp.max(path_b, axis=-1), 0.0)
        return jax.ops.segment_max(pair_b, arrays.tenant, num_segments=n_tenants)
    # Smooth: per path LSE over hops, split-weighted per pair, LSE over the tenant.
    m = jnp.max(jnp.where(hop_ok, hop_u, 0.0), axis=-1, keepdims=True)
    t = temperature * jnp.maximum(m, 1e-12)
    e = jnp.where(hop_ok, jnp.exp(jnp.where(hop_ok, (hop_u - m) / t, 0.0)), 0.0)
    s = jnp.sum(e, axis=-1, keepdims=True)
    path_b = (m + t * jnp.log(jnp.where(s > 0, s, 1.0)))[..., 0]
    pair_b = jnp.sum(jnp.where(arrays.path_mask, split * path_b, 0.0), axis=-1)
    return _segment_smooth_max(pair_b, arrays.tenant, n_tenants, used, temperature)


def tenant_mlu_loss(arrays, split, temperature, tenant_weight, demand=None):
    """``(sum_t w_t smooth MLU_t, sum_t w_t exact MLU_t)``."""
    n = tenant_weight.shape[0]
    smooth = tenant_mlu(arrays, split, n, temperature, demand)
    exact = tenant_mlu(arrays, split, n, None, demand)
    return jnp.sum(tenant_weight * smooth), jnp.sum(tenant_weight * exact)


def _incidence(arrays, split):
    n_pairs, n_paths, n_hops = arrays.link_idx.shape
    flow = jnp.broadcast_to(jnp.arange(n_pairs, dtype=jnp.int32)[:, None, None],
                            arrays.link_idx.shape)
    weight = split[:, :, None] * arrays.hop_w
    return Incidence(arrays.link_idx.ravel(), flow.ravel(), weight.ravel(),
                     int(arrays.capacity.shape[0]), int(n_pairs))


def completion_times(arrays, split, size, *, events: int, iterations: int = 32):
    """Finish time of every pair's flow under max-min sharing (unrolled, differentiable).

    All flows start at time 0 with ``size`` bytes; see the module docstring for the
    model and its bias.

    Args:
      arrays: :class:`~fabric_jax.optimize.ProblemArrays`.
      split: ``[pairs, paths]`` split weights (may be traced).
      size: ``[pairs]`` bytes (0: finishes at 0).
      events: number of completion events unrolled (static).
      iterations: max-min solver iterations per event (static).

    Returns:
      ``(finish [pairs] seconds, info)`` with ``info`` a dict of ``converged`` (every
      solve froze every flow) and ``drained`` (flows left after the last event).
    """
    inc = _incidence(arrays, split)
    cap = arrays.capacity
    dtype = cap.dtype
    eps = EVENT_EPS_ULPS * jnp.finfo(dtype).eps
    inf = jnp.asarray(jnp.inf, dtype)
    size = jnp.asarray(size, dtype)

    def rates(done):
        res = solve(inc, cap, jnp.where(done, 0.0, inf), iterations=iterations)
        return res.rates, res.info.converged

    @jax.checkpoint
    def event(carry, _):
        t, remaining, finish, done, ok = carry
        rate, conv = rates(done)
        serving = ~done & (rate > 0)
        tau = jnp.where(serving, remaining / jnp.where(serving, rate, 1.0), inf)
        dt = jnp.min(tau, initial=inf)
        dt = jnp.where(jnp.isfinite(dt), dt, 0.0)
        completes = serving & (tau <= dt * (1 + eps))
        remaining = jnp.where(completes, 0.0,
                              jnp.where(done, remaining, remaining - rate * dt))
        t = t + dt
        finish = jnp.where(completes, t, finish)
        return (t, remaining, finish, done | completes, ok & (conv | jnp.all(done))), None

    done0 = size <= 0
    carry = (jnp.zeros((), dtype), size, jnp.where(done0, 0.0, inf), done0,
             jnp.asarray(True))
    (t, remaining, finish, done, ok), _ = jax.lax.scan(event, carry, None, length=events)
    # Flows still running: drained at their current rates (upper-bias; see docstring).
    rate, conv = rates(done)
    left = ~done
    tail = jnp.where(left & (rate > 0), remaining / jnp.where(left & (rate > 0), rate, 1.0),
                     jnp.where(left, inf, 0.0))
    finish = jnp.where(done, finish, t + tail)
    return finish, dict(converged=ok, drained=jnp.sum(left))


def cct_loss(arrays, split, size, *, events, iterations, tenant_weight=None,
             reduce: str = "max"):
    """``(loss, exact)``: collective completion time (``max`` finish), or mean FCT
    (``reduce="mean"``), per tenant weighted when ``tenant_weight`` is given."""
    finish, _ = completion_times(arrays, split, size, events=events, iterations=iterations)
    if tenant_weight is None:
        v = jnp.max(finish) if reduce == "max" else jnp.mean(finish)
        return v, v
    n = tenant_weight.shape[0]
    if reduce == "max":
        per = jax.ops.segment_max(finish, arrays.tenant, num_segments=n)
    else:
        tot = jax.ops.segment_sum(finish, arrays.tenant, num_segments=n)
        cnt = jax.ops.segment_sum(jnp.ones_like(finish), arrays.tenant, num_segments=n)
        per = tot / jnp.maximum(cnt, 1.0)
    per = jnp.where(jnp.isfinite(per), per, 0.0)
    v = jnp.sum(tenant_weight * per)
    return v, v
