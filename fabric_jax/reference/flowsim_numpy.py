"""Event-driven flow-level simulator in plain NumPy: the oracle for ``fabric_jax.sim``.

Model (units: bytes, seconds, bytes per second)
-----------------------------------------------
A fabric is a set of ``links`` with ``capacity[l]`` and a set of ``flows``. Flow ``f``
puts the fraction ``A[l, f]`` of its rate on link ``l`` (1 on every hop of a single
path; split weights for multipath), so link ``l`` carries ``sum_f A[l, f] * rate[f]``.

* Flow ``f`` becomes active ("starts") at
  ``start[f] = max(arrival[f], max_{g in deps[f]} finish[g]) + delay[f]``
  (no dependencies: ``start = arrival + delay``).
* While active it transfers ``size[f]`` bytes at its max-min fair rate among the flows
  active at that moment, capped by ``demand[f]`` (default unbounded). Rates are
  recomputed at every event: a flow starts, or a flow's transfer completes. Between
  events rates are constant, so the simulation is exact (no time step).
* A flow of size 0, or with no links (zero column) and no demand cap, completes its
  transfer at its start.
* ``finish[f] = transfer completion + latency[f]``: latency is a propagation term that
  delays the finish but holds no bandwidth. Dependants are released at ``finish``.

Max-min fairness is computed by the classic progressive filling (water filling)
algorithm (Bertsekas & Gallager, *Data Networks*, 2nd ed., sec. 6.5.2): all unfrozen
flows rise together to a common level; the level stops at the first link that
saturates or the first demand cap reached; the flows crossing that link (or capped)
freeze; repeat.

This module is deliberately plain Python loops: it is a test oracle and benchmark
baseline, not a kernel.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

# Relative tolerance for "this link is saturated" / "this transfer completes now".
_REL_TOL = 1e-12


def _as_matrix(A):
    """Dense float64 array, or a CSC sparse matrix for large benchmark instances (the
    algorithm is the same; only the products are sparse)."""
    if sp.issparse(A):
        return sp.csc_array(A, dtype=np.float64)
    return np.asarray(A, dtype=np.float64)


def max_min_rates(A, capacity, demand):
    """Max-min fair rates by sequential progressive filling.

    Args:
        A: [links, flows] nonnegative weights (only the active flows' columns).
        capacity: [links] link capacities, bytes/s.
        demand: [flows] per-flow rate caps, bytes/s (``inf`` for none).

    Returns:
        [flows] rates, bytes/s. A flow that crosses no link and has no cap gets ``inf``.
    """
    A = _as_matrix(A)
    capacity = np.asarray(capacity, dtype=np.float64)
    demand = np.asarray(demand, dtype=np.float64)
    n_flows = A.shape[1]
    rate = np.zeros(n_flows)
    frozen = np.zeros(n_flows, dtype=bool)
    while not frozen.all():
        free = ~frozen
        used = A @ np.where(frozen, rate, 0.0)
        residual = np.maximum(capacity - used, 0.0)
        weight = A @ free.astype(np.float64)
        # Level at which each link that still carries a free flow saturates.
        link_level = np.full(len(capacity), np.inf)
        busy = weight > 0
        link_level[busy] = residual[busy] / weight[busy]
        level = min(link_level.min(initial=np.inf), demand[free].min(initial=np.inf))
        if np.isinf(level):
            # Remaining free flows touch no link and have no cap.
            rate[free] = np.inf
            break
        rate[free] = level
        tight = busy & (link_level <= level * (1 + _REL_TOL))
        newly = free & (demand <= level * (1 + _REL_TOL))
        newly |= free & ((A.T @ tight.astype(np.float64)) > 0)
        frozen |= newly
    return rate


def _validate(A, capacity, arrival, size, deps, delay, latency, demand):
    if A.ndim != 2:
        raise ValueError(f"A must be [links, flows], got shape {A.shape}")
    n_links, n_flows = A.shape
    for name, arr, n in (
        ("capacity", capacity, n_links),
        ("arrival", arrival, n_flows),
        ("size", size, n_flows),
        ("delay", delay, n_flows),
        ("latency", latency, n_flows),
        ("demand", demand, n_flows),
    ):
        if arr.shape != (n,):
            raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
        if np.isnan(arr).any():
            raise ValueError(f"{name} contains NaN")
    values = A.data if sp.issparse(A) else A
    if (values < 0).any() or not np.isfinite(values).all():
        raise ValueError("A must be finite and nonnegative")
    for name, arr in (("capacity", capacity), ("size", size), ("delay", delay),
                      ("latency", latency), ("demand", demand)):
        if (arr < 0).any():
            raise ValueError(f"{name} must be nonnegative")
    if deps.ndim != 2 or deps.shape[0] != n_flows:
        raise ValueError(f"deps must be [flows, max_deps], got {deps.shape}")
    if ((deps < -1) | (deps >= n_flows)).any():
        raise ValueError("deps entries must be -1 (padding) or flow indices")
    # Kahn's algorithm: every flow must be reachable from the roots.
    indeg = (deps >= 0).sum(axis=1)
    children = [[] for _ in range(n_flows)]
    for f in range(n_flows):
        for g in deps[f]:
            if g >= 0:
                children[g].append(f)
    queue = [f for f in range(n_flows) if indeg[f] == 0]
    seen = 0
    while queue:
        g = queue.pop()
        seen += 1
        for f in children[g]:
            indeg[f] -= 1
            if indeg[f] == 0:
                queue.append(f)
    if seen != n_flows:
        raise ValueError("deps contain a cycle")


def _checked_inputs(A, capacity, arrival, size, deps, delay, latency, demand):
    """The arguments of :func:`simulate_flows_reference` as float64 arrays (``deps``
    int64 ``[flows, max_deps]``), defaults filled in, validated."""
    A = _as_matrix(A)
    n_flows = A.shape[1] if A.ndim == 2 else 0
    capacity = np.asarray(capacity, dtype=np.float64)
    arrival = np.asarray(arrival, dtype=np.float64)
    size = np.asarray(size, dtype=np.float64)
    delay = np.zeros(n_flows) if delay is None else np.asarray(delay, dtype=np.float64)
    latency = np.zeros(n_flows) if latency is None else np.asarray(latency, dtype=np.float64)
    demand = np.full(n_flows, np.inf) if demand is None else np.asarray(demand, dtype=np.float64)
    deps = (np.full((n_flows, 0), -1, dtype=np.int64) if deps is None
            else np.asarray(deps, dtype=np.int64))
    if deps.ndim == 1:
        deps = deps[:, None]
    _validate(A, capacity, arrival, size, deps, delay, latency, demand)
    return A, capacity, arrival, size, deps, delay, latency, demand


def _release_ready(start, finish, arrival, delay, deps):
    """Set ``start`` (in place) of every flow not yet started whose dependencies have
    all finished: the latest of its arrival and their finishes, plus its delay."""
    for f in range(start.size):
        if np.isnan(start[f]):
            ds = deps[f][deps[f] >= 0]
            if np.all(~np.isnan(finish[ds])):
                released = max([arrival[f]] + [finish[g] for g in ds])
                start[f] = released + delay[f]


def _complete(flows, t, state, remaining, transfer_end, finish, latency):
    """Mark the transfers of ``flows`` done at time ``t`` (in place): finish at
    ``t + latency``."""
    state[flows] = 2
    remaining[flows] = 0.0
    transfer_end[flows] = t
    finish[flows] = t + latency[flows]


def simulate_flows_reference(A, capacity, arrival, size, *, deps=None, delay=None,
                             latency=None, demand=None):
    """Exact event-driven flow-level simulation (see the module docstring).

    Args:
        A: [links, flows] fraction of each flow's rate carried by each link.
        capacity: [links] bytes/s.
        arrival: [flows] seconds.
        size: [flows] bytes.
        deps: [flows, max_deps] int, indices of flows that must finish first, -1 padded.
        delay: [flows] seconds added after release (compute time), default 0.
        latency: [flows] seconds added to the finish (propagation), default 0.
        demand: [flows] rate cap in bytes/s, default ``inf``.

    Returns:
        dict with ``start``, ``finish``, ``fct`` (= finish - arrival), ``transfer_end``
        ([flows] seconds), ``n_events`` (number of distinct event times at which the
        active set changed and rates were recomputed), ``event_times`` [n_events] and
        ``rate_history`` [n_events, flows]: the rates in force from ``event_times[k]``
        until the next event (all zero at the last one; instantly completed flows
        show 0). A flow that can never finish
        (zero-capacity bottleneck) gets ``finish = inf``.

    Raises:
        ValueError: on inconsistent shapes, NaN, negative values, bad or cyclic deps.
    """
    A, capacity, arrival, size, deps, delay, latency, demand = _checked_inputs(
        A, capacity, arrival, size, deps, delay, latency, demand)
    n_flows = A.shape[1]

    start = np.full(n_flows, np.nan)
    transfer_end = np.full(n_flows, np.nan)
    finish = np.full(n_flows, np.nan)
    remaining = size.copy()
    # 0 = waiting (start unknown or in the future), 1 = transferring, 2 = transfer done.
    state = np.zeros(n_flows, dtype=np.int8)
    n_events = 0
    t = None
    event_times, rate_history = [], []

    _release_ready(start, finish, arrival, delay, deps)
    while (state != 2).any():
        pending = (state == 0) & ~np.isnan(start)
        if t is None:
            t = start[pending].min()
            n_events += 1
        # Activate, then complete instantaneous transfers; repeat until nothing changes
        # at time t (a zero-latency instant finish can release a dependant at t).
        while True:
            state[(state == 0) & (start <= t)] = 1
            active = np.flatnonzero(state == 1)
            rate = np.zeros(n_flows)
            if active.size:
                rate[active] = max_min_rates(A[:, active], capacity, demand[active])
            instant = active[(remaining[active] <= 0) | np.isinf(rate[active])]
            if instant.size == 0:
                break
            _complete(instant, t, state, remaining, transfer_end, finish, latency)
            _release_ready(start, finish, arrival, delay, deps)
        event_times.append(t)
        rate_history.append(rate.copy())
        if not (state != 2).any():
            break
        pending = (state == 0) & ~np.isnan(start)
        next_start = start[pending].min(initial=np.inf)
        moving = active[rate[active] > 0]
        time_left = remaining[moving] / rate[moving]
        next_done = t + time_left.min(initial=np.inf)
        t_next = min(next_start, next_done)
        if np.isinf(t_next):
            # Stalled (zero-capacity bottleneck): the rest never finishes.
            stuck = state != 2
            transfer_end[stuck] = np.inf
            finish[stuck] = np.inf
            start[stuck & np.isnan(start)] = np.inf
            break
        dt = t_next - t
        remaining[active] -= rate[active] * dt
        # A completion that rounds onto t_next (t + time_left == t_next in float64,
        # possible when time_left is below t's ulp) completes now: else dt stays 0.
        done = moving[(time_left <= dt * (1 + _REL_TOL)) | (t + time_left <= t_next)]
        _complete(done, t_next, state, remaining, transfer_end, finish, latency)
        _release_ready(start, finish, arrival, delay, deps)
        t = t_next
        n_events += 1
    if len(event_times) < n_events:
        # The last completions ended the loop: record the final, all-idle event.
        event_times.append(t)
        rate_history.append(np.zeros(n_flows))

    return {
        "start": start,
        "finish": finish,
        "fct": finish - arrival,
        "transfer_end": transfer_end,
        "n_events": n_events,
        "event_times": np.asarray(event_times),
        "rate_history": np.asarray(rate_history).reshape(len(event_times), n_flows),
    }
