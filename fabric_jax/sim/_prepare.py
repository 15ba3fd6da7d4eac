"""Host preparation of a flow-level run, and what every engine shares.

The host checks the per-flow inputs (:func:`validate_flows`, naming the argument at
fault), lays them out as device arrays (:func:`prepare_flows`) and the incidence as
padded per-flow rows (:func:`flow_rows`); on the device, every engine releases a flow
when its dependencies have finished (:func:`release_times`) and reports a
:class:`FlowSimResult`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..incidence import Incidence, as_incidence, check_entries


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
        try:
            a = np.asarray(x, dtype=float)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must hold numbers; cannot convert it to float "
                             f"({exc})") from None
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


def prepare_flows(incidence, capacity, arrival, size, deps, delay, latency, demand,
                  batched=False):
    """Host-side validation and device arrays of a flow-level run, shared by the
    simulators (:mod:`fabric_jax.fluid`, :mod:`fabric_jax.fluid_slots`): ``(inc,
    capacity, deps, flows)``.

    Raises:
      ValueError: wrong shapes, negative or NaN capacities or sizes, bad dependencies
        (each message names the argument).
    """
    inc = as_incidence(incidence)
    check_entries(inc)
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


def release_times(deps, finish, arrival, delay):
    """Start time of every flow whose dependencies have all finished (else ``+inf``).

    ``finish`` is ``+inf`` for flows whose transfer has not completed yet.
    """
    has_dep = deps >= 0
    dep_finish = jnp.where(has_dep, finish[jnp.maximum(deps, 0)], -jnp.inf)
    latest = jnp.max(dep_finish, axis=1, initial=-jnp.inf)
    return jnp.maximum(arrival, latest) + delay  # inf while any dependency is unfinished


def flow_rows(inc: Incidence):
    """Per-flow layout of an incidence: ``links``, ``weight`` ``[flows, row_width]``.

    Reuses the incidence's flow-major layout (:attr:`Incidence.row_width`); an incidence
    in arbitrary COO order is laid out on the host first (needs concrete arrays).
    """
    if any(isinstance(x, jax.core.Tracer) for x in (inc.link_idx, inc.flow_idx, inc.weight)):
        raise ValueError("simulate_flows needs a concrete incidence (it is not "
                         "differentiable); build it outside jit/grad")
    if inc.row_width is None or inc.nnz != inc.n_flows * inc.row_width:
        w = np.asarray(inc.weight)
        keep = w != 0
        inc = Incidence.flow_major(np.asarray(inc.link_idx)[keep],
                                   np.asarray(inc.flow_idx)[keep], w[keep],
                                   inc.n_links, inc.n_flows)
    shape = (inc.n_flows, inc.row_width)
    return inc.link_idx.reshape(shape), inc.weight.reshape(shape)
