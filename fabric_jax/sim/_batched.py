"""The event-driven engine over a batch of scenarios that share one incidence pattern:
every scenario advances in one ``vmap``-ed event loop, compiled as one program."""

from __future__ import annotations

import functools

import jax
import numpy as np

from ..compiling import jit
from ._events import run_events, simulate_events
from ._prepare import prepare_flows


def simulate_flows_batched(incidence, capacity, arrival, size, *, deps=None, delay=None,
                           latency=None, demand=None, max_events: int | None = None,
                           max_active: int | None = None, warm_start: bool = True,
                           tolerance: float = 0.0):
    """:func:`simulate_flows` over a batch of scenarios sharing one incidence pattern.

    ``capacity`` is ``[batch, links]``; ``arrival`` and ``size`` are ``[batch, flows]``;
    ``delay``, ``latency``, ``demand`` may be ``[batch, flows]`` or a shared ``[flows]``;
    ``deps`` is shared.  All scenarios advance together in one ``vmap``-ed event loop.
    ``warm_start`` and ``tolerance`` as in :func:`simulate_flows`.  Under ``vmap`` the
    warm solve's choice of buffer size becomes a select that runs every size; it is
    still faster than solving from scratch, but on CPU the batch runs slower per
    scenario than a loop of :func:`simulate_flows` calls, so prefer the loop there
    (docs/performance.md, "Where an event's time goes").
    Returns a :class:`FlowSimResult` whose fields have a leading batch axis.
    """
    def per_scenario(x):  # a shared [flows] array applies to every scenario
        if x is None or np.ndim(x) != 1 or np.ndim(arrival) != 2:
            return x
        return np.broadcast_to(np.asarray(x), np.shape(arrival))

    delay, latency, demand = per_scenario(delay), per_scenario(latency), per_scenario(demand)
    inc, capacity, deps, flows = prepare_flows(incidence, capacity, arrival, size, deps, delay,
                                               latency, demand, batched=True)
    if capacity.shape[0] != flows["arrival"].shape[0]:
        raise ValueError(f"capacity has batch {capacity.shape[0]} but arrival has "
                         f"{flows['arrival'].shape[0]}")
    return run_events(inc, capacity, deps, flows, max_events, max_active, False,
                      warm=warm_start, tolerance=tolerance,
                      batched_core=_simulate_events_batched)


@functools.partial(jit, static_argnums=(0, 1, 2, 4, 8, 10))
def _simulate_events_batched(max_events: int, width: int, record: bool, rows, n_links: int,
                             capacity, deps, flows, warm: bool = True, tolerance=0.0,
                             has_deps: bool = True):
    """:func:`simulate_events` over a batch: ``capacity`` and ``flows`` carry a leading
    scenario axis, ``rows`` and ``deps`` are shared.  One ``vmap`` inside one jitted
    program of its own, so that it is compiled with :mod:`fabric_jax.compiling`'s
    options (its event and solve loops on the GPU); a ``vmap`` of the jitted engine
    called from the host would be a transformation around it, compiled without them
    (every loop test a host round trip there)."""
    def run(c, f):
        return simulate_events(max_events, width, record, rows, n_links, c, deps, f,
                               warm=warm, tolerance=tolerance, has_deps=has_deps)
    return jax.vmap(run)(capacity, flows)
