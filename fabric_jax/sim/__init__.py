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
``lax.while_loop`` over events with the solver inside, warm-started from the previous
event's rates (exact; the proof is in ``_events``); :func:`simulate_flows_batched`
advances many independent scenarios at once with ``vmap``.

:func:`simulate_flows_fixed_step` advances time in steps of ``dt`` with ``lax.scan``
(the rate of every active flow is re-solved each step; starts and completions inside a
step are interpolated).  Its finish times converge to the event-driven ones as ``dt``
shrinks (error ``O(dt)``).  It is the skeleton the congestion-control dynamics extend.

Where each piece lives:

* ``_prepare``: host checks and device arrays of the flows (:func:`prepare_flows`,
  :func:`validate_flows`, :func:`flow_rows`), :func:`release_times`,
  :class:`FlowSimResult`;
* ``_events``: the event-driven engine (:func:`simulate_flows`), its warm-started
  solves and event merging;
* ``_batched``: :func:`simulate_flows_batched`;
* ``_fixed_step``: :func:`simulate_flows_fixed_step`.
"""

from ._batched import simulate_flows_batched
from ._events import DEFAULT_MAX_ACTIVE, EVENT_EPS_ULPS, WARM_START_RTOL, simulate_flows
from ._fixed_step import simulate_flows_fixed_step
from ._prepare import FlowSimResult, flow_rows, prepare_flows, release_times, validate_flows

__all__ = [
    "FlowSimResult",
    "simulate_flows",
    "simulate_flows_batched",
    "simulate_flows_fixed_step",
    "validate_flows",
]
