"""Flow-level simulation under max-min sharing.

Units: sizes in bytes, times in seconds, rates and capacities in bytes/s.

A *flow* is a column of an :class:`~fabric_jax.Incidence`: it crosses some links
(possibly split over several paths) and carries ``size`` bytes.  Its life:

* it **starts** at ``start = max(arrival, max_{g in deps} finish_g) + delay``: the
  dependencies express a DAG (a collective's phases, a pipeline stage, a training step)
  and ``delay`` is the compute time between the last dependency and the send;
* while active, it is served at its **max-min fair rate** among the flows active at that
  moment (:func:`~fabric_jax.max_min_fair`, with ``demand`` as per-flow rate cap, e.g. the
  NIC line rate);
* its transfer completes when ``size`` bytes are sent; it **finishes** ``latency``
  seconds later (a propagation term that delays the finish but holds no bandwidth),
  which is when its dependants are released.  ``fct = finish - arrival``.

Two engines share these semantics:

:func:`simulate_flows` is event driven and exact: rates are recomputed whenever a flow
starts or completes, and time jumps straight to the next such event.  This is the
classic flow-level model (SimGrid's LMM model with its TCP factors switched off, m3's
flowSim), and agrees with them up to float round-off.  The loop is a
``lax.while_loop`` over events with the solver inside; :func:`simulate_flows_batched`
advances many independent scenarios at once with ``vmap``.

:func:`simulate_flows_fixed_step` advances time in steps of ``dt`` with ``lax.scan``
(the rate of every active flow is re-solved each step; starts and completions inside a
step are interpolated).  Its finish times converge to the event-driven ones as ``dt``
shrinks (error ``O(dt)``).  It is the skeleton the congestion-control dynamics extend.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .fairness import solve
from .incidence import Incidence, as_incidence

__all__ = [
    "FlowSimResult",
    "simulate_flows",
    "simulate_flows_batched",
    "simulate_flows_fixed_step",
    "validate_flows",
]

#: Relative tolerance (in units of the dtype's machine epsilon) within which two
#: completion times are treated as one event.
EVENT_EPS_ULPS = 64.0


@dataclasses.dataclass(frozen=True)
class FlowSimResult:
    """Result of a flow-level simulation (all times in seconds).

    Attributes:
      start: ``[flows]`` when each flow started sending.
      finish: ``[flows]`` when its last byte arrived (``+inf`` if it never could,
        e.g. all its paths have zero capacity; see ``stalled``).
      fct: ``[flows]`` flow completion time, ``finish - arrival``.
      n_events: number of events (event-driven) or steps (fixed-step) processed.
      stalled: ``True`` if some flow could never finish (zero-capacity path, or the
        event budget ``max_events`` ran out).
      event_times: ``[max_events]`` time of each event (``record_rates=True`` only;
        rows past ``n_events`` are padding, ``+inf``).  Row ``i`` holds the rates
        in force from ``event_times[i]`` to ``event_times[i + 1]``; the first row is
        at ``t = 0`` and the interval of the last row ends at the last transfer
        completion, ``max(finish - latency)``.
      rate_history: ``[max_events, flows]`` rate (bytes/s) of each flow from that event
        to the next (``record_rates=True`` only).
    """

    start: Any
    finish: Any
    fct: Any
    n_events: Any
    stalled: Any
    event_times: Any = None
    rate_history: Any = None


jax.tree_util.register_dataclass(FlowSimResult)


# ----------------------------------------------------------------- validation
def _float_dtype():
    return jnp.result_type(float)


def validate_flows(n_flows, *, arrival, size, deps=None, delay=None, latency=None,
                   demand=None, batched=False):
    """Validates per-flow inputs on the host; returns ``deps`` as an int32 array.

    Raises:
      ValueError: naming the argument: wrong shape, NaN/negative values, a dependency
        out of range or on itself, or a dependency cycle.
    """
    lead = 1 if batched else 0

    def check(name, x, allow_inf=False, required=False):
        if x is None:
            if required:
                raise ValueError(f"{name} is required")
            return
        shape = np.shape(x)
        if len(shape) != 1 + lead or shape[-1] != n_flows:
            want = "[batch, flows]" if batched else "[flows]"
            raise ValueError(f"{name} must have shape {want} with flows = {n_flows}; got {shape}")
        if isinstance(x, jax.core.Tracer):
            return
        a = np.asarray(x, dtype=float)
        if np.any(np.isnan(a)):
            raise ValueError(f"{name} contains NaN")
        if not allow_inf and np.any(np.isinf(a)):
            raise ValueError(f"{name} contains inf; give finite values")
        if np.any(a < 0):
            raise ValueError(f"{name} contains negative values; it must be >= 0")

    check("arrival", arrival, required=True)
    check("size", size, required=True)
    check("delay", delay)
    check("latency", latency)
    check("demand", demand, allow_inf=True)
    if deps is None:
        return np.full((n_flows, 1), -1, np.int32)
    d = np.asarray(deps)
    if d.ndim == 1:
        d = d[:, None]
    if d.ndim != 2 or d.shape[0] != n_flows:
        raise ValueError(f"deps must have shape [flows, max_deps] with flows = {n_flows} "
                         f"(-1 for no dependency); got {np.shape(deps)}")
    if d.size and not np.issubdtype(d.dtype, np.integer):
        raise ValueError(f"deps must hold integer flow indices; got dtype {d.dtype}")
    if d.size and (d.min() < -1 or d.max() >= n_flows):
        raise ValueError(f"deps contains an index outside [-1, {n_flows}); -1 means none")
    if np.any(d == np.arange(n_flows)[:, None]):
        raise ValueError("deps: a flow depends on itself")
    _check_acyclic(d)
    if d.shape[1] == 0:
        d = np.full((n_flows, 1), -1, d.dtype)
    return d.astype(np.int32)


def _check_acyclic(deps: np.ndarray):
    """Kahn's algorithm, vectorised per level: raises on a dependency cycle."""
    n = deps.shape[0]
    valid = deps >= 0
    child = np.broadcast_to(np.arange(n)[:, None], deps.shape)[valid]
    parent = deps[valid]
    indeg = np.bincount(child, minlength=n)
    done = np.zeros(n, bool)
    frontier = indeg == 0
    while frontier.any():
        done |= frontier
        sel = frontier[parent]
        np.subtract.at(indeg, child[sel], 1)
        parent, child = parent[~sel], child[~sel]
        frontier = (indeg == 0) & ~done
    if not done.all():
        raise ValueError(f"deps contains a cycle involving flows {np.flatnonzero(~done)[:5]}...")


def _prepare(incidence, capacity, arrival, size, deps, delay, latency, demand, batched=False):
    inc = as_incidence(incidence)
    lead = 1 if batched else 0
    cap_shape = np.shape(capacity)
    if len(cap_shape) != 1 + lead or cap_shape[-1] != inc.n_links:
        raise ValueError(f"capacity must have shape {'[batch, links]' if batched else '[links]'}"
                         f" with links = {inc.n_links}; got {cap_shape}")
    if not isinstance(capacity, jax.core.Tracer):
        c = np.asarray(capacity, float)
        if not np.all(np.isfinite(c)) or np.any(c < 0):
            raise ValueError("capacity must be finite and >= 0 bytes/s (0 = failed link)")
    deps = validate_flows(inc.n_flows, arrival=arrival, size=size, deps=deps, delay=delay,
                          latency=latency, demand=demand, batched=batched)
    dt = _float_dtype()
    shape = np.shape(arrival)
    zeros = jnp.zeros(shape, dt)
    flows = dict(
        arrival=jnp.asarray(arrival, dt), size=jnp.asarray(size, dt),
        delay=zeros if delay is None else jnp.asarray(delay, dt),
        latency=zeros if latency is None else jnp.asarray(latency, dt),
        demand=jnp.full(shape, jnp.inf, dt) if demand is None else jnp.asarray(demand, dt))
    return inc, jnp.asarray(capacity, dt), jnp.asarray(deps), flows


# ------------------------------------------------------------- shared pieces
def release_times(deps, finish, arrival, delay):
    """Start time of every flow whose dependencies have all finished (else ``+inf``).

    ``finish`` is ``+inf`` for flows whose transfer has not completed yet.
    """
    has_dep = deps >= 0
    dep_finish = jnp.where(has_dep, finish[jnp.maximum(deps, 0)], -jnp.inf)
    latest = jnp.max(dep_finish, axis=1, initial=-jnp.inf)
    return jnp.maximum(arrival, latest) + delay  # inf while any dependency is unfinished


# ------------------------------------------------------------- event driven
def simulate_flows(incidence, capacity, arrival, size, *, deps=None, delay=None, latency=None,
                   demand=None, record_rates: bool = False,
                   max_events: int | None = None) -> FlowSimResult:
    """Event-driven, exact flow-level simulation under max-min sharing.

    Args:
      incidence: :class:`~fabric_jax.Incidence` or dense ``[links, flows]`` matrix.
      capacity: ``[links]`` bytes/s.
      arrival: ``[flows]`` earliest start, seconds.
      size: ``[flows]`` bytes.
      deps: optional ``[flows, max_deps]`` int, -1 padded: flows that must finish first.
      delay: optional ``[flows]`` seconds between the release and the start (compute).
      latency: optional ``[flows]`` seconds from transfer completion to finish.
      demand: optional ``[flows]`` per-flow rate cap, bytes/s (e.g. NIC line rate).
      record_rates: also return the rate of every flow at every event (memory
        ``max_events * flows`` floats).
      max_events: event budget (default ``2 * flows + 2``, always enough: each event
        starts or completes at least one flow).

    Returns:
      :class:`FlowSimResult`.

    Raises:
      ValueError: bad shapes or values (see :func:`validate_flows`).
    """
    inc, capacity, deps, flows = _prepare(incidence, capacity, arrival, size, deps, delay,
                                          latency, demand)
    if max_events is None:
        max_events = 2 * inc.n_flows + 2
    return _simulate_events(inc, capacity, deps, flows, int(max_events), bool(record_rates))


def simulate_flows_batched(incidence, capacity, arrival, size, *, deps=None, delay=None,
                           latency=None, demand=None, max_events: int | None = None):
    """:func:`simulate_flows` over a batch of scenarios sharing one incidence pattern.

    ``capacity`` is ``[batch, links]``; ``arrival`` and ``size`` are ``[batch, flows]``;
    ``delay``, ``latency``, ``demand`` may be ``[batch, flows]`` or a shared ``[flows]``;
    ``deps`` is shared.  All
    scenarios advance together in one ``vmap``-ed event loop.  Returns a
    :class:`FlowSimResult` whose fields have a leading batch axis.
    """
    def per_scenario(x):  # a shared [flows] array applies to every scenario
        if x is None or np.ndim(x) != 1 or np.ndim(arrival) != 2:
            return x
        return np.broadcast_to(np.asarray(x), np.shape(arrival))

    delay, latency, demand = per_scenario(delay), per_scenario(latency), per_scenario(demand)
    inc, capacity, deps, flows = _prepare(incidence, capacity, arrival, size, deps, delay,
                                          latency, demand, batched=True)
    if capacity.shape[0] != flows["arrival"].shape[0]:
        raise ValueError(f"capacity has batch {capacity.shape[0]} but arrival has "
                         f"{flows['arrival'].shape[0]}")
    if max_events is None:
        max_events = 2 * inc.n_flows + 2
    return jax.vmap(lambda c, f: _simulate_events(inc, c, deps, f, int(max_events), False))(
        capacity, flows)


@functools.partial(jax.jit, static_argnums=(4, 5))
def _simulate_events(inc: Incidence, capacity, deps, flows, max_events: int,
                     record: bool) -> FlowSimResult:
    arrival, size, delay = flows["arrival"], flows["size"], flows["delay"]
    latency, demand = flows["latency"], flows["demand"]
    n_flows = inc.n_flows
    dt_ = capacity.dtype
    eps = EVENT_EPS_ULPS * jnp.finfo(dt_).eps
    inf = jnp.asarray(jnp.inf, dt_)

    def rates_of(active):
        return solve(inc, capacity, jnp.where(active, demand, 0.0)).rates

    def cond(c):
        return (~c["all_done"]) & (c["k"] < max_events)

    def body(c):
        t, remaining, start, finish, done = c["t"], c["remaining"], c["start"], c["finish"], c["done"]
        rel = release_times(deps, finish, arrival, delay)
        start = jnp.where(jnp.isfinite(start), start, rel)
        active = (start <= t) & ~done
        rate = rates_of(active)
        serving = active & (rate > 0)
        tau = jnp.where(serving, remaining / jnp.where(serving, rate, 1.0), inf)
        # Zero-byte active flows complete now.
        tau = jnp.where(active & (remaining <= 0), 0.0, tau)
        next_start = jnp.min(jnp.where(start > t, start, inf), initial=inf)
        next_done = jnp.min(tau, initial=inf)
        t_next = jnp.minimum(t + next_done, next_start)
        step = t_next - t
        stuck = ~jnp.isfinite(t_next)
        step = jnp.where(stuck, 0.0, step)
        # Completions: every active flow whose completion falls at t_next (within eps).
        completes = active & ~stuck & (tau <= step * (1 + eps) + eps * jnp.abs(t_next))
        sent = jnp.where(active, rate * step, 0.0)
        remaining = jnp.where(completes, 0.0, jnp.maximum(remaining - sent, 0.0))
        t_new = jnp.where(stuck, t, t_next)
        finish = jnp.where(completes, t_new + latency, finish)
        done = done | completes
        out = dict(c, t=t_new, remaining=remaining, start=start, finish=finish, done=done,
                   k=c["k"] + 1, all_done=jnp.all(done) | stuck, stuck=stuck)
        if record:
            out["times"] = c["times"].at[c["k"]].set(t)
            out["rates"] = c["rates"].at[c["k"]].set(jnp.where(active, rate, 0.0))
        return out

    carry = dict(t=jnp.asarray(0.0, dt_),
                 remaining=size, start=jnp.full((n_flows,), inf, dt_),
                 finish=jnp.full((n_flows,), inf, dt_), done=jnp.zeros((n_flows,), bool),
                 k=jnp.asarray(0, jnp.int32), all_done=jnp.asarray(n_flows == 0),
                 stuck=jnp.asarray(False))
    if record:
        carry["times"] = jnp.full((max_events,), inf, dt_)
        carry["rates"] = jnp.zeros((max_events, n_flows), dt_)
    c = jax.lax.while_loop(cond, body, carry)
    stalled = c["stuck"] | ~jnp.all(c["done"])
    start = jnp.where(jnp.isfinite(c["start"]), c["start"],
                      release_times(deps, c["finish"], arrival, delay))
    return FlowSimResult(start=start, finish=c["finish"], fct=c["finish"] - arrival,
                         n_events=c["k"], stalled=stalled,
                         event_times=c.get("times"), rate_history=c.get("rates"))


# --------------------------------------------------------------- fixed step
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
    inc, capacity, deps, flows = _prepare(incidence, capacity, arrival, size, deps, delay,
                                          latency, demand)
    return _simulate_fixed(inc, capacity, deps, flows, jnp.asarray(dt, capacity.dtype),
                           int(n_steps))


@functools.partial(jax.jit, static_argnums=(5,))
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
