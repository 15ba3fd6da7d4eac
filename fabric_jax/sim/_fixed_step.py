"""The fixed-step engine: max-min rates re-solved every ``dt`` in a ``lax.scan``.

Each step ``[t, t + dt)`` solves the max-min rates of the flows active in it; starts
and completions inside a step are interpolated.  Its finish times converge to the
event-driven engine's as ``dt`` shrinks (error ``O(dt)``).  It is the skeleton the
congestion-control dynamics of :mod:`fabric_jax.fluid` extend.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..compiling import jit
from ..fairness import solve
from ._prepare import FlowSimResult, prepare_flows, release_times


def simulate_flows_fixed_step(incidence, capacity, arrival, size, *, dt, n_steps: int,
                              deps=None, delay=None, latency=None,
                              demand=None) -> FlowSimResult:
    """Fixed-step (``lax.scan``) flow-level simulation under max-min sharing.

    Each step ``[t, t + dt)`` solves the max-min rates of the flows active in it; a
    flow that starts inside the step sends only for the part of the step after its
    start, and a flow whose remaining bytes run out inside the step finishes at the
    interpolated instant.  Converges to :func:`simulate_flows` as ``dt -> 0``
    (error ``O(dt)``: a flow starting mid-step takes a full step's share).

    Args:
      dt: step length, seconds (> 0).
      n_steps: number of steps (static); flows not finished by ``n_steps * dt`` have
        ``finish = +inf`` and ``stalled`` is set.
      Other arguments: as :func:`simulate_flows`.
    """
    if not (isinstance(n_steps, (int, np.integer)) and n_steps >= 1):
        raise ValueError(f"n_steps must be a positive integer; got {n_steps!r}")
    if not isinstance(dt, jax.core.Tracer) and not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be a positive number of seconds; got {dt!r}")
    inc, capacity, deps, flows = prepare_flows(incidence, capacity, arrival, size, deps, delay,
                                               latency, demand)
    return _simulate_fixed(inc, capacity, deps, flows, jnp.asarray(dt, capacity.dtype),
                           int(n_steps))


@functools.partial(jit, static_argnums=(5,))
def _simulate_fixed(inc, capacity, deps, flows, dt, n_steps):
    arrival, size, delay = flows["arrival"], flows["size"], flows["delay"]
    latency, demand = flows["latency"], flows["demand"]
    n_flows = inc.n_flows
    dt_ = capacity.dtype
    inf = jnp.asarray(jnp.inf, dt_)

    def step(c, k):
        remaining, start, finish, done = c
        t = k.astype(dt_) * dt
        t_end = t + dt
        rel = release_times(deps, finish, arrival, delay)
        start = jnp.where(jnp.isfinite(start), start, rel)
        active = (start < t_end) & ~done
        rate = solve(inc, capacity, jnp.where(active, demand, 0.0)).rates
        begin = jnp.maximum(start, t)
        avail = jnp.where(active, t_end - begin, 0.0)
        can_send = rate * avail
        completes = active & (remaining <= can_send)
        t_done = begin + jnp.where(rate > 0, remaining / jnp.where(rate > 0, rate, 1.0), 0.0)
        finish = jnp.where(completes, t_done + latency, finish)
        remaining = jnp.where(completes, 0.0, remaining - jnp.where(active, can_send, 0.0))
        return (remaining, start, finish, done | completes), None

    carry = (size, jnp.full((n_flows,), inf, dt_), jnp.full((n_flows,), inf, dt_),
             jnp.zeros((n_flows,), bool))
    (remaining, start, finish, done), _ = jax.lax.scan(
        step, carry, jnp.arange(n_steps, dtype=jnp.int32))
    start = jnp.where(jnp.isfinite(start), start, release_times(deps, finish, arrival, delay))
    return FlowSimResult(start=start, finish=finish, fct=finish - arrival,
                         n_events=jnp.asarray(n_steps, jnp.int32), stalled=~jnp.all(done))
