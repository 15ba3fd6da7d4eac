"""The event-driven engine: exact max-min rates recomputed at every start and completion.

One ``lax.while_loop`` over events (:func:`simulate_events`).  The active flows sit in
a table of slots (their links, weights, demand, latency, start and remaining bytes,
gathered once when a flow arrives), so an event touches per-slot arrays only; an event
seats the flows that start now, solves the active flows' max-min rates, jumps to the
next start or completion and records the completions.

Warm-started solves (``warm_start=True``, the default; exact)
-------------------------------------------------------------
Most of an event's max-min solve repeats the previous one.  Progressive filling
(Bertsekas & Gallager, *Data Networks*, 2nd ed., sec. 6.5.2) raises a common level ``s``
from 0; a flow's rate is the level at which it freezes, when one of its links
saturates (load ``= c_l``) or it reaches its demand.  Let ``P`` be the problem before
the event, ``C`` the flows that completed, ``A`` the flows that arrived and
``P' = (P - C) + A``.

*Removal.*  With ``theta_C = min_{c in C} r^P_c``, every flow ``g`` with
``r^P_g < theta_C`` has the same rate in ``Q = P - C``.  Induction over the freezing
events below ``theta_C``: if both fillings agree up to level ``s``, a link without a
flow of ``C`` carries the same load in both; a link with some ``c in C`` does not
saturate below ``theta_C`` in ``P`` (``c`` would then freeze below ``r_c``; this holds
whether ``c`` was link- or demand-limited, and covers the links that ``c`` shares with
flows that stay frozen: those froze elsewhere), and in ``Q`` it carries less, so it
does not saturate either.  Demand freezes are per flow.  So the same flows freeze at the
same levels below ``theta_C``.

*Arrival.*  If ``lambda <= min_{a in A} r^{P'}_a`` then every ``g`` with
``r^Q_g < lambda`` keeps its rate in ``P'``: the same argument with the roles swapped
(the arrivals are unfrozen in ``P'`` below ``lambda``, so their links do not saturate
there, and in ``Q`` they carry less).  A proven bound is
``lambda_a = min(d_a, min_{l: A[l, a] > 0} c_l / W_l)`` with ``W_l = sum_f A[l, f]``
over the flows of ``P'``: at level ``s`` a link carries at most ``s * W_l`` (frozen
flows sit below ``s``), so it cannot saturate below ``c_l / W_l``.  A zero-capacity
link gives ``lambda = 0``: nothing is kept, which is safe.

*Together.*  With ``theta = min(theta_C, min_a lambda_a)`` every flow of ``P`` with
``r^P_g < theta`` keeps ``r^P_g`` exactly; the others and the arrivals end at or above
``theta``.  The kept flows are frozen at the start of the solve and only the rest is
solved, on the residual capacity (:func:`fabric_jax.fairness.solve_warm`, whose
docstring proves that the residual solve gives the full solution), compacted into a
buffer sized to the open rows.  The comparison is made with a margin,
``r^P_g < (1 - WARM_START_RTOL) * theta``, so that a rate that ties ``theta``
mathematically but lies below it by round-off is re-solved rather than kept: the
result equals the from-scratch solve to float round-off, not just approximately.

*Cost per event.*  The link loads are carried from event to event: the residual
capacity and the new loads are sums over the re-solved rows only
(``solve_warm(..., load=...)``), a single completing flow's load and finish time are
removed/recorded for that slot alone, and the open rows are compacted with a prefix sum
(:func:`fabric_jax.fairness.compact_indices`).  Without dependencies every start time
is known from the outset, and an event finds its arrivals and the next start with a
pointer into the sorted start times (no pass over all flows).  There are no host round
trips or recompiles inside a run: one ``lax.while_loop``, and the warm solve's buffer
sizes are branches of one ``lax.switch``, compiled up front (where the time of an
event goes: docs/performance.md, "Where an event's time goes").

Event merging (``tolerance > 0``; off by default)
-------------------------------------------------
An event at time ``t`` then also processes every active flow ``f`` whose completion
under the current rates falls within ``tolerance * (t - start_f)`` after ``t``: relative
to the flow's own age, so a merged flow's own completion moves by at most
``tolerance`` times its FCT.  Such a flow records its own exact
completion time under those rates, so its bytes are all accounted for; what changes is
that its bandwidth is handed to the other flows up to ``tolerance`` times its age early
(each merged completion moves one reallocation by at most that much).  The event count
drops when many completions cluster in time.  The effect on *other* flows' FCTs is not
bounded by a fixed multiple of ``tolerance`` in general (max-min rates are not monotone
in the set of flows, and shifts can chain), so the error is measured, and it can be
large for short flows next to long ones, e.g. a microsecond flow sharing a link with
one whose bandwidth is released early (docs/performance.md, "Event merging's error").
``experiments/bench_flowsim.py`` reports the max relative FCT error of the merged run
against the exact one, and ``tests/sim/test_sim.py`` checks that it vanishes with
``tolerance`` and stays within ``MERGE_ERROR_FACTOR * tolerance`` on random instances.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..compiling import jit
from ..fairness import compact_indices, link_sum, solve, solve_warm
from ..incidence import Incidence
from ._prepare import FlowSimResult, flow_rows, prepare_flows, release_times

#: Initial number of slots of the event engine's active-flow table.  The cost of an
#: event grows with it; it doubles (one recompile) when more flows are active at once.
DEFAULT_MAX_ACTIVE = 256

#: Relative safety margin of the warm start: a flow keeps its previous rate only when it
#: is below ``(1 - WARM_START_RTOL) * theta`` (see "Warm-started solves"), so that rates
#: that tie ``theta`` mathematically but differ from it by round-off are re-solved.
WARM_START_RTOL = {np.dtype("float32"): 1e-4, np.dtype("float64"): 1e-9}

#: Relative tolerance (in units of the dtype's machine epsilon) within which two
#: completion times are treated as one event.
EVENT_EPS_ULPS = 4.0

#: The slot table's columns (one row per slot).
SLOT_COLUMNS = ("slot_flow", "slot_links", "slot_weight", "slot_demand", "slot_lat",
                "slot_start", "slot_rem")


def simulate_flows(incidence, capacity, arrival, size, *, deps=None, delay=None, latency=None,
                   demand=None, record_rates: bool = False, max_events: int | None = None,
                   max_active: int | None = None, warm_start: bool = True,
                   tolerance: float = 0.0) -> FlowSimResult:
    """Event-driven, exact flow-level simulation under max-min sharing.

    Each event solves the max-min rates of the flows active at that moment only: they
    sit in a table of ``max_active`` slots (a flow takes a slot when it starts and frees
    it when it completes), so the cost of an event follows the number of concurrent
    flows, not the total.  If the table overflows, the run is repeated with a table
    twice as large (jax-md's neighbour-list overflow pattern; each size compiles once).

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
      max_active: initial size of the active-flow table (default
        ``min(flows, DEFAULT_MAX_ACTIVE)``; it doubles on overflow).
      warm_start: reuse the rates an event provably leaves unchanged and solve only
        the rest (exact; see "Warm-started solves" in :mod:`fabric_jax.sim._events`).
        ``False`` solves every event from scratch (same result up to round-off).
      tolerance: bounded-error event merging, off by default (``0``, exact).  Every
        completion that falls within ``tolerance`` times the flow's age after the next
        event (relative, in time) is processed in that event; see "Event merging" in
        :mod:`fabric_jax.sim._events` for what it changes and the error bound.

    Returns:
      :class:`FlowSimResult`.

    Raises:
      ValueError: bad shapes or values (see :func:`validate_flows`), incidence entries
        out of range or with a NaN/inf/negative weight, ``max_events`` or
        ``max_active`` not a positive integer, ``tolerance`` negative or not finite.
    """
    inc, capacity, deps, flows = prepare_flows(incidence, capacity, arrival, size, deps, delay,
                                               latency, demand)
    return run_events(inc, capacity, deps, flows, max_events, max_active, record_rates,
                      warm=warm_start, tolerance=tolerance)


def _check_event_args(max_events, max_active, tolerance):
    if not isinstance(tolerance, jax.core.Tracer):
        try:
            tol = np.asarray(tolerance, float)
        except (TypeError, ValueError):
            tol = np.asarray(np.nan)
        if tol.shape != () or not np.isfinite(tol) or tol < 0:
            raise ValueError(f"tolerance must be a finite number >= 0 (relative, in time; "
                             f"0 = exact); got {tolerance!r}")
    if max_events is not None and (
            isinstance(max_events, bool) or not isinstance(max_events, (int, np.integer))
            or max_events < 1):
        raise ValueError(f"max_events must be a positive integer (default 2 * flows + 2); "
                         f"got {max_events!r}")
    if max_active is not None and (not isinstance(max_active, (int, np.integer))
                                   or max_active < 1):
        raise ValueError(f"max_active must be a positive integer; got {max_active!r}")


def run_events(inc, capacity, deps, flows, max_events, max_active, record, warm=True,
               tolerance=0.0, batched_core=None):
    """Host driver of the event engine on prepared flows (:func:`prepare_flows`): checks
    the options, lays out the rows and runs :func:`simulate_events` with a slot table
    that doubles until it holds every flow active at once.  ``batched_core``: the
    batched engine's core (``capacity`` and ``flows`` then carry a leading scenario
    axis; :mod:`fabric_jax.sim._batched`), called as :func:`simulate_events` is."""
    n = inc.n_flows
    _check_event_args(max_events, max_active if n > 0 else None, tolerance)
    if max_events is None:
        max_events = 2 * n + 2
    if max_active is None:
        max_active = min(n, DEFAULT_MAX_ACTIVE)
    if n == 0:  # nothing to simulate (the slot table would index an empty flow table)
        return _empty_result(capacity.shape[:-1], capacity.dtype, max_events, record)
    rows = flow_rows(inc)
    has_deps = (isinstance(deps, jax.core.Tracer)  # deps is validated on the host
                or bool(np.any(np.asarray(deps) >= 0)))
    width = max(1, min(int(max_active), n))
    while True:
        head = (int(max_events), width, bool(record))
        tail = dict(warm=bool(warm), tolerance=tolerance, has_deps=has_deps)
        if batched_core is not None:
            res, overflow = batched_core(*head, rows, inc.n_links, capacity, deps, flows,
                                         **tail)
            overflow = bool(jnp.any(overflow))
        else:
            res, overflow = simulate_events(*head, rows, inc.n_links, capacity, deps, flows,
                                            **tail)
            if isinstance(overflow, jax.core.Tracer):
                # Under jit/vmap (e.g. fabric_jax.sweep) the table cannot grow on the host.
                if width >= n:
                    return res
                raise ValueError(
                    "simulate_flows under jit/vmap (e.g. fabric_jax.sweep) needs "
                    f"max_active=n_flows (= {n}): the slot table of active flows cannot "
                    "grow inside a trace")
            overflow = bool(overflow)
        if not overflow or width >= n:
            return res
        width = min(2 * width, n)


def _empty_result(batch_shape, dtype, max_events, record):
    """Result of a run with no flows (``[*batch, 0]`` arrays, nothing stalled)."""
    empty = jnp.zeros((*batch_shape, 0), dtype)
    times = rates = None
    if record:
        times = jnp.full((*batch_shape, max_events), jnp.inf, dtype)
        rates = jnp.zeros((*batch_shape, max_events, 0), dtype)
    return FlowSimResult(start=empty, finish=empty, fct=empty,
                         n_events=jnp.zeros(batch_shape, jnp.int32),
                         stalled=jnp.zeros(batch_shape, bool), event_times=times,
                         rate_history=rates)


class _Run(NamedTuple):
    """What every event of one run reads: its static shape and options, the flows'
    tables, and the tolerances in the run's dtype."""

    max_events: int
    width: int                 # slots of the active-flow table
    record: bool
    n_links: int
    n_flows: int
    n_hops: int
    warm: bool
    has_deps: bool
    capacity: Any              # [links]
    deps: Any                  # [flows, max_deps]
    flows: dict                # [flows] arrival, size, delay, latency, demand
    links: Any                 # [flows, hops] the flows' rows
    weight: Any                # [flows, hops]
    slot_of_entry: Any         # [slots * hops]
    eps: Any                   # relative width of one event in time
    keep_rtol: float           # WARM_START_RTOL of the dtype
    tolerance: Any             # event merging, relative to a flow's age
    inf: Any
    start0: Any = None         # without dependencies: [flows] start times,
    order: Any = None          # the flows in start order,
    sorted_start: Any = None   # and their sorted start times


@functools.partial(jit, static_argnums=(0, 1, 2, 4, 8, 10))
def simulate_events(max_events: int, width: int, record: bool, rows, n_links: int, capacity,
                    deps, flows, warm: bool = True, tolerance=0.0, has_deps: bool = True):
    """The event engine's jitted core: ``(FlowSimResult, overflow)`` of one run with a
    slot table of ``width`` slots (``overflow``: more flows were active at once; the
    run is then incomplete and :func:`run_events` repeats it with more slots).

    ``rows``: :func:`flow_rows` of the incidence; ``flows``: :func:`prepare_flows`'
    per-flow arrays; ``has_deps`` (static): some flow has a dependency (without one
    every start time is known and flows enter through a pointer into the sorted start
    times)."""
    links, weight = rows
    n_flows, n_hops = links.shape
    dt_ = capacity.dtype
    run = _Run(max_events=max_events, width=width, record=record, n_links=n_links,
               n_flows=n_flows, n_hops=n_hops, warm=warm, has_deps=has_deps,
               capacity=capacity, deps=deps, flows=flows, links=links,
               weight=weight.astype(dt_),
               slot_of_entry=jnp.repeat(jnp.arange(width, dtype=jnp.int32), n_hops),
               eps=EVENT_EPS_ULPS * jnp.finfo(dt_).eps,
               keep_rtol=WARM_START_RTOL.get(np.dtype(dt_), 1e-4),
               tolerance=jnp.asarray(tolerance, dt_), inf=jnp.asarray(jnp.inf, dt_))
    if not has_deps:
        # Every start is known from the outset: flows enter in start order, so an event
        # finds its arrivals and the next start with a pointer into the sorted start
        # times instead of passes over all flows.
        start0 = flows["arrival"] + flows["delay"]
        order = jnp.argsort(start0, stable=True).astype(jnp.int32)
        run = run._replace(start0=start0, order=order, sorted_start=start0[order])

    def cond(c):
        return (~c["all_done"]) & (c["k"] < max_events) & ~c["overflow"]

    c = jax.lax.while_loop(cond, functools.partial(_event, run), _initial_carry(run))
    stalled = c["stuck"] | (c["n_done"] < n_flows)
    arrival = flows["arrival"]
    if has_deps:
        start = jnp.where(jnp.isfinite(c["start"]), c["start"],
                          release_times(deps, c["finish"], arrival, flows["delay"]))
    else:
        start = run.start0
    result = FlowSimResult(start=start, finish=c["finish"], fct=c["finish"] - arrival,
                           n_events=c["k"], stalled=stalled,
                           event_times=c.get("times"), rate_history=c.get("rates"))
    return result, c["overflow"]


def _initial_carry(run: _Run) -> dict:
    """The loop's carry before the first event: an empty slot table at ``t = 0``."""
    dt_, width, n_flows = run.capacity.dtype, run.width, run.n_flows
    carry = dict(t=jnp.asarray(0.0, dt_), finish=jnp.full((n_flows,), run.inf, dt_),
                 n_done=jnp.asarray(0, jnp.int32),
                 slot_flow=jnp.full((width,), -1, jnp.int32),
                 slot_links=jnp.zeros((width, run.n_hops), run.links.dtype),
                 slot_weight=jnp.zeros((width, run.n_hops), dt_),
                 slot_demand=jnp.zeros((width,), dt_), slot_lat=jnp.zeros((width,), dt_),
                 slot_start=jnp.zeros((width,), dt_), slot_rem=jnp.zeros((width,), dt_),
                 overflow=jnp.asarray(False), k=jnp.asarray(0, jnp.int32),
                 all_done=jnp.asarray(n_flows == 0), stuck=jnp.asarray(False))
    if run.has_deps:
        carry["start"] = jnp.full((n_flows,), run.inf, dt_)
        carry["slotted"] = jnp.zeros((n_flows,), bool)
    else:
        carry["ptr"] = jnp.asarray(0, jnp.int32)
    if run.warm:
        carry["slot_rate"] = jnp.zeros((width,), dt_)
        carry["theta"] = run.inf
        carry["load"] = jnp.zeros((run.n_links,), dt_)
    if run.record:
        carry["times"] = jnp.full((run.max_events,), run.inf, dt_)
        carry["rates"] = jnp.zeros((run.max_events, n_flows), dt_)
    return carry


def _event(run: _Run, c: dict) -> dict:
    """One event: seat the flows that start now, solve the active flows' rates, jump to
    the next start or completion, record the completions."""
    t, finish = c["t"], c["finish"]
    # The slot table: the active flows' rows, gathered once when they arrive (an
    # event then touches per-slot arrays only, not the per-flow tables).
    table = {k: c[k] for k in SLOT_COLUMNS}
    out = dict(c)
    start, arrivals, n_new, next_start, update = _arrivals(run, c, t)
    out.update(update)
    table, overflowed, arrived, fid = _seat(run, table, arrivals, n_new, start)
    if run.has_deps:
        out["slotted"] = c["slotted"].at[jnp.where(arrived, fid, run.n_flows)].set(
            True, mode="drop")
    overflow = c["overflow"] | overflowed
    slot_flow = table["slot_flow"]
    valid = slot_flow >= 0
    rate, load = _rates(run, c, table, valid, arrived)
    t_new, stuck, completes, t_done, rem = _advance(run, t, next_start, table, valid, rate)
    n_completes = jnp.sum(completes, dtype=jnp.int32)
    finish, load, theta = _complete(run, table, finish, load, completes, n_completes,
                                    t_done, rate)
    n_done = c["n_done"] + n_completes
    out.update(table, t=t_new, slot_rem=rem, finish=finish, n_done=n_done,
               slot_flow=jnp.where(completes, -1, slot_flow), overflow=overflow,
               k=c["k"] + 1, all_done=(n_done >= run.n_flows) | stuck, stuck=stuck)
    if run.warm:
        out["slot_rate"] = jnp.where(completes | ~valid, 0.0, rate)
        out["theta"] = theta
        out["load"] = load
    if run.record:
        out["times"] = c["times"].at[c["k"]].set(t)
        out["rates"] = c["rates"].at[c["k"]].set(
            jnp.zeros((run.n_flows,), run.capacity.dtype).at[
                jnp.where(valid, slot_flow, run.n_flows)].set(rate, mode="drop"))
    return out


def _arrivals(run: _Run, c: dict, t):
    """The flows that start at ``t``: ``(start, arrivals, n_new, next_start, update)``.

    ``start``: ``[flows]`` start times; ``arrivals``: with dependencies the ``[flows]``
    mask of the flows that start now, without them the position in start order of the
    first one (the next ``n_new`` in start order start now); ``next_start``: the
    earliest later start; ``update``: the carry's new start times or pointer."""
    flows = run.flows
    if run.has_deps:
        rel = release_times(run.deps, c["finish"], flows["arrival"], flows["delay"])
        start = jnp.where(jnp.isfinite(c["start"]), c["start"], rel)
        new = (start <= t) & ~c["slotted"]  # a flow keeps ``slotted`` after it completes
        n_new = jnp.sum(new, dtype=jnp.int32)
        next_start = jnp.min(jnp.where(start > t, start, run.inf), initial=run.inf)
        return start, new, n_new, next_start, {"start": start}
    ptr = c["ptr"]
    ptr_new = jnp.searchsorted(run.sorted_start, t, side="right").astype(jnp.int32)
    n_new = ptr_new - ptr
    next_start = jnp.where(ptr_new < run.n_flows,
                           run.sorted_start[jnp.minimum(ptr_new, run.n_flows - 1)], run.inf)
    return run.start0, ptr, n_new, next_start, {"ptr": ptr_new}


def _take(table, idx):
    """Rows of a per-flow table; ``idx`` is always in range."""
    return jnp.take(table, idx, axis=0, mode="clip")


def _seat(run: _Run, table: dict, arrivals, n_new, start):
    """Seats the ``n_new`` arriving flows (:func:`_arrivals`) in free slots, gathering
    their rows; only on events with arrivals (an O(slots) compaction).  Returns the
    table, whether it overflowed, the ``[slots]`` mask of the seated flows and their
    ``[slots]`` flow ids."""
    flows = run.flows

    def insert(table):
        free = table["slot_flow"] < 0
        rank = jnp.cumsum(free, dtype=jnp.int32) - 1
        if run.has_deps:  # the new flows, in flow order
            cands, first = compact_indices(arrivals, run.n_flows), 0
        else:  # the next n_new flows in start order
            cands, first = run.order, arrivals
        arrived = free & (rank < n_new)
        fid = jnp.where(arrived, _take(cands, first + rank), 0)
        table = dict(table, slot_flow=jnp.where(arrived, fid, table["slot_flow"]))
        for key, src in (("slot_links", run.links), ("slot_weight", run.weight)):
            table[key] = jnp.where(arrived[:, None], _take(src, fid), table[key])
        for key, src in (("slot_demand", flows["demand"]), ("slot_lat", flows["latency"]),
                         ("slot_start", start), ("slot_rem", flows["size"])):
            table[key] = jnp.where(arrived, _take(src, fid), table[key])
        return table, n_new > jnp.sum(free, dtype=jnp.int32), arrived, fid

    return jax.lax.cond(
        n_new > 0, insert,
        lambda tb: (tb, jnp.asarray(False), jnp.zeros((run.width,), bool),
                    jnp.zeros((run.width,), jnp.int32)), table)


def _rates(run: _Run, c: dict, table: dict, valid, arrived):
    """``(rate, load)``: the max-min rates of the active flows only (the slot table's
    incidence) and, warm-started, the links' load (``None`` from scratch).  Rows of
    empty slots keep their last flow's entries: they are frozen at rate 0."""
    slot_links, slot_weight = table["slot_links"], table["slot_weight"]
    sub = Incidence(slot_links.reshape(-1), run.slot_of_entry, slot_weight.reshape(-1),
                    run.n_links, run.width, run.n_hops)
    if run.warm:
        keep = _kept_rates(sub, run.capacity, table["slot_demand"], c["slot_rate"],
                           c["theta"], valid, arrived, run.keep_rtol)
        # Link loads are carried from event to event and updated over the re-solved
        # rows only (solve_warm's ``load``).
        solved = solve_warm(sub, run.capacity, table["slot_demand"], c["slot_rate"], keep,
                            load=c["load"])
        return solved.rates, solved.link_load
    # from scratch, COO layout
    masked = Incidence(sub.link_idx, sub.flow_idx,
                       jnp.where(valid[:, None], slot_weight, 0.0).reshape(-1),
                       run.n_links, run.width, None)
    return solve(masked, run.capacity, jnp.where(valid, table["slot_demand"], 0.0)).rates, None


def _advance(run: _Run, t, next_start, table: dict, valid, rate):
    """Jumps from ``t`` to the next start or completion: ``(t_new, stuck, completes,
    t_done, rem)`` (``stuck``: no flow can progress; ``completes``: ``[slots]`` the flows
    that complete in this event, at ``t_done``; ``rem``: the remaining bytes)."""
    inf = run.inf
    rem = table["slot_rem"]  # remaining bytes of each slot's flow
    serving = valid & (rate > 0)
    tau = jnp.where(serving, rem / jnp.where(serving, rate, 1.0), inf)
    tau = jnp.where(valid & (rem <= 0), 0.0, tau)  # zero-byte flows complete now
    t_next = jnp.minimum(t + jnp.min(tau, initial=inf), next_start)
    stuck = ~jnp.isfinite(t_next)
    step = jnp.where(stuck, 0.0, t_next - t)
    t_new = jnp.where(stuck, t, t_next)
    # Completions: every active flow whose completion falls at t_next (within eps),
    # or, with a tolerance, within tolerance * (its age at t_next) after it.
    age = jnp.maximum(t_new - table["slot_start"], 0.0)
    window = run.eps * jnp.abs(t_new) + run.tolerance * age
    completes = valid & ~stuck & (tau <= step * (1 + run.eps) + window)
    # A merged completion keeps its own exact time under the current rates.
    t_done = jnp.where(tau > step, t + tau, t_new)
    rem = jnp.where(completes, 0.0,
                    jnp.maximum(rem - jnp.where(valid, rate * step, 0.0), 0.0))
    return t_new, stuck, completes, t_done, rem


def _complete(run: _Run, table: dict, finish, load, completes, n_completes, t_done, rate):
    """Records the completions' finish times and, warm-started, drops their load:
    ``(finish, load, theta)``, ``theta`` the smallest rate among them (``+inf`` for
    none).  Usually a single flow completes, so the common case touches one slot, not
    the whole table."""
    slot_flow, slot_links, slot_weight = (table["slot_flow"], table["slot_links"],
                                          table["slot_weight"])

    def one(args):
        finish, load = args
        i = jnp.argmax(completes)
        if run.warm:
            w_i = slot_weight[i]
            load = load.at[slot_links[i]].add(-jnp.where(w_i != 0, w_i * rate[i], 0.0))
        return finish.at[slot_flow[i]].set(t_done[i] + table["slot_lat"][i]), load, rate[i]

    def many(args):
        finish, load = args
        finish = finish.at[jnp.where(completes, slot_flow, run.n_flows)].set(
            t_done + table["slot_lat"], mode="drop")
        if run.warm:
            on = completes[:, None] & (slot_weight != 0)
            load = load - link_sum(jnp.where(on, slot_weight * rate[:, None], 0.0)
                                   .reshape(-1), slot_links.reshape(-1), run.n_links, None)
        return finish, load, jnp.min(jnp.where(completes, rate, run.inf), initial=run.inf)

    load0 = load if run.warm else jnp.zeros((run.n_links,), run.capacity.dtype)
    return jax.lax.switch(jnp.minimum(n_completes, 2),
                          [lambda a: (*a, run.inf), one, many], (finish, load0))


def _kept_rates(sub: Incidence, capacity, demand, old_rate, theta_done, valid, arrived,
                keep_rtol):
    """Slots whose rate is proven unchanged by this event (see the module docstring,
    "Warm-started solves"): flows present before the event (not ``arrived``) whose
    previous rate is below ``(1 - keep_rtol) * theta``, ``theta`` the smaller of the
    completed flows' smallest previous rate and every arrival's rate lower bound
    ``min(d_a, min_{l in a} c_l / W_l)``.  Empty slots count as kept (rate 0)."""
    # W_l: the weight every active flow puts on link l (arrivals included).
    n_links = sub.n_links
    n_slots, width = sub.n_flows, sub.row_width
    li = sub.link_idx.reshape(n_slots, width)

    def arrival_bound(_):
        w = jnp.where(valid[:, None], sub.weight.reshape(n_slots, width), 0.0)  # empty slots
        total = jax.ops.segment_sum(w.reshape(-1), sub.link_idx, num_segments=n_links)
        share = jnp.where(total > 0, capacity / jnp.where(total > 0, total, 1.0), jnp.inf)
        per_flow = jnp.min(jnp.where(w > 0, jnp.take(share, li, mode="clip"), jnp.inf),
                           axis=1, initial=jnp.inf)
        bound = jnp.minimum(per_flow, demand)
        return jnp.min(jnp.where(arrived & valid, bound, jnp.inf), initial=jnp.inf)

    theta_new = jax.lax.cond(jnp.any(arrived & valid), arrival_bound,
                             lambda _: jnp.asarray(jnp.inf, capacity.dtype), None)
    theta = jnp.minimum(theta_done, theta_new)
    return ~valid | (~arrived & (old_rate < theta * (1 - keep_rtol)))
