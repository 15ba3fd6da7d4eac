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
(:func:`fabric_jax.fairness.compact_indices`).  The slot table carries the active
flows' rows (links, weights, demand, latency, start, remaining bytes), gathered once
when a flow arrives, so an event touches per-slot arrays only; without dependencies
every start time is known from the outset, and an event finds its arrivals and the
next start with a pointer into the sorted start times (no pass over all flows).  There
are no host round trips or recompiles inside a run: one ``lax.while_loop``, and the
warm solve's buffer sizes are branches of one ``lax.switch``, compiled up front.

Profile (SimGrid-style coupled instance, 10,000 flows, x64, process CPU time, 2-core
CPU under load; ``experiments/bench_flowsim.py``).  Before the slot table carried its
rows, an event cost ~1.2 ms, ~0.19 ms of it outside the solve (gathering the active
flows' rows and ``[slots, hops]`` passes); that part is now ~0.04 ms, and the rest is
the residual solve: on average ~20% of the active flows (~1,000) are above the keep
threshold, and their bottleneck freezing takes ~9.5 iterations (4.9 at 3,000 flows;
up to ~70), so the total grows faster than ``N^2`` (``N^2.2`` in CPU time from 1k to
10k flows, against SimGrid's ``N^1.9`` in the same run).  A tighter keep rule could save
little: at 10,000 flows ~60% of the re-solved flows do change rate (~25% at 3,000), and
keeping flows outside the connected part of the re-solved set buys nothing (on these
instances it is one component).  Finer compaction inside the residual solve (down to
64-256 rows) measured slower: the extra compaction passes cost more than the row
iterations they save.

Event merging (``tolerance > 0``; off by default)
-------------------------------------------------
An event at time ``t`` then also processes every active flow ``f`` whose completion
under the current rates falls within ``tolerance * (t - start_f)`` after ``t``: relative
to the flow's own age, so a merged flow's own completion moves by at most
``tolerance`` times its FCT.  Such a flow records its own exact
completion time under those rates, so its bytes are all accounted for; what changes is
that its bandwidth is handed to the other flows up to ``tolerance`` times its age early
(each merged completion moves one reallocation by at most that much).  The event count drops when many completions cluster in time.  The effect on
*other* flows' FCTs is not bounded by a fixed multiple of ``tolerance`` in general
(max-min rates are not monotone in the set of flows, and shifts can chain), so the
error is measured, and it can be large for short flows next to long ones: at
``tolerance=1e-3`` the max relative FCT error was 1.0e-3 / 1.7e-3 on the coupled
instances (3k / 10k flows) but 0.41 on the Poisson web-search case (0.59 with a window
relative to the absolute clock instead of the age), where a microsecond flow shares a
link with one whose bandwidth is released early.  ``experiments/bench_flowsim.py`` reports the max relative FCT error
of the merged run against the exact one, and ``tests/test_sim.py`` checks that it
vanishes with ``tolerance`` and stays within ``MERGE_ERROR_FACTOR * tolerance`` on
random instances.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .compiling import jit
from .fairness import compact_indices, link_sum, solve, solve_warm
from .incidence import Incidence, as_incidence, check_entries

__all__ = [
    "FlowSimResult",
    "simulate_flows",
    "simulate_flows_batched",
    "simulate_flows_fixed_step",
    "validate_flows",
]

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
        inc = Incidence._flow_major(np.asarray(inc.link_idx)[keep],
                                    np.asarray(inc.flow_idx)[keep], w[keep],
                                    inc.n_links, inc.n_flows)
    shape = (inc.n_flows, inc.row_width)
    return inc.link_idx.reshape(shape), inc.weight.reshape(shape)


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
        the rest (exact; see "Warm-started solves" in the module docstring).
        ``False`` solves every event from scratch (same result up to round-off).
      tolerance: bounded-error event merging, off by default (``0``, exact).  Every
        completion that falls within ``tolerance`` times the flow's age after the next
        event (relative, in time) is processed in that event; see "Event merging" in the
        module docstring for what it changes and the error bound.

    Returns:
      :class:`FlowSimResult`.

    Raises:
      ValueError: bad shapes or values (see :func:`validate_flows`), incidence entries
        out of range or with a NaN/inf/negative weight, ``max_events`` or
        ``max_active`` not a positive integer, ``tolerance`` negative or not finite.
    """
    inc, capacity, deps, flows = prepare_flows(incidence, capacity, arrival, size, deps, delay,
                                          latency, demand)
    return _run_events(inc, capacity, deps, flows, max_events, max_active, record_rates,
                       batched=False, warm=warm_start, tolerance=tolerance)


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
    still about 2-4x faster than solving from scratch (``experiments/bench_flowsim.py``,
    2-core CPU), but on CPU the batch runs slower per scenario than a loop of
    :func:`simulate_flows` calls, so prefer the loop there.
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
    return _run_events(inc, capacity, deps, flows, max_events, max_active, False, batched=True,
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


def _run_events(inc, capacity, deps, flows, max_events, max_active, record, batched,
                warm=True, tolerance=0.0):
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
        if batched:
            res, overflow = _simulate_events_batched(*head, rows, inc.n_links, capacity, deps,
                                                     flows, **tail)
            overflow = bool(jnp.any(overflow))
        else:
            res, overflow = _simulate_events(*head, rows, inc.n_links, capacity, deps, flows,
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


@functools.partial(jit, static_argnums=(0, 1, 2, 4, 8, 10))
def _simulate_events(max_events: int, width: int, record: bool, rows, n_links: int, capacity,
                     deps, flows, warm: bool = True, tolerance=0.0, has_deps: bool = True):
    arrival, size, delay = flows["arrival"], flows["size"], flows["delay"]
    latency, demand = flows["latency"], flows["demand"]
    ell_links, ell_weight = rows
    n_flows, n_hops = ell_links.shape
    dt_ = capacity.dtype
    ell_weight = ell_weight.astype(dt_)
    eps = EVENT_EPS_ULPS * jnp.finfo(dt_).eps
    keep_rtol = WARM_START_RTOL.get(np.dtype(dt_), 1e-4)
    inf = jnp.asarray(jnp.inf, dt_)
    tolerance = jnp.asarray(tolerance, dt_)
    slot_of_entry = jnp.repeat(jnp.arange(width, dtype=jnp.int32), n_hops)
    if not has_deps:
        # Every start is known from the outset: flows enter in start order, so an event
        # finds its arrivals and the next start with a pointer into the sorted start
        # times instead of passes over all flows.
        start0 = arrival + delay
        order = jnp.argsort(start0, stable=True).astype(jnp.int32)
        sorted_start = start0[order]

    def take(table, idx):  # rows of a per-flow table; ``idx`` is always in range
        return jnp.take(table, idx, axis=0, mode="clip")

    def cond(c):
        return (~c["all_done"]) & (c["k"] < max_events) & ~c["overflow"]

    def body(c):
        t, finish = c["t"], c["finish"]
        # The slot table: the active flows' rows, gathered once when they arrive (an
        # event then touches per-slot arrays only, not the per-flow tables).
        table = {k: c[k] for k in ("slot_flow", "slot_links", "slot_weight", "slot_demand",
                                   "slot_lat", "slot_start", "slot_rem")}
        out = dict(c)
        if has_deps:
            rel = release_times(deps, finish, arrival, delay)
            start = jnp.where(jnp.isfinite(c["start"]), c["start"], rel)
            new = (start <= t) & ~c["slotted"]  # a flow keeps ``slotted`` after it completes
            n_new = jnp.sum(new, dtype=jnp.int32)
            next_start = jnp.min(jnp.where(start > t, start, inf), initial=inf)
            out["start"] = start
        else:
            start = start0
            ptr = c["ptr"]
            ptr_new = jnp.searchsorted(sorted_start, t, side="right").astype(jnp.int32)
            n_new = ptr_new - ptr
            next_start = jnp.where(ptr_new < n_flows,
                                   sorted_start[jnp.minimum(ptr_new, n_flows - 1)], inf)
            out["ptr"] = ptr_new

        def insert(table):  # only on events with arrivals: O(slots) compaction
            free = table["slot_flow"] < 0
            rank = jnp.cumsum(free, dtype=jnp.int32) - 1
            if has_deps:  # the new flows, in flow order
                cands, first = compact_indices(new, n_flows), 0
            else:  # the next n_new flows in start order
                cands, first = order, ptr
            arrived = free & (rank < n_new)
            fid = jnp.where(arrived, take(cands, first + rank), 0)
            table = dict(table, slot_flow=jnp.where(arrived, fid, table["slot_flow"]))
            for key, src in (("slot_links", ell_links), ("slot_weight", ell_weight)):
                table[key] = jnp.where(arrived[:, None], take(src, fid), table[key])
            for key, src in (("slot_demand", demand), ("slot_lat", latency),
                             ("slot_start", start), ("slot_rem", size)):
                table[key] = jnp.where(arrived, take(src, fid), table[key])
            return table, n_new > jnp.sum(free, dtype=jnp.int32), arrived, fid

        table, overflowed, arrived, fid = jax.lax.cond(
            n_new > 0, insert,
            lambda tb: (tb, jnp.asarray(False), jnp.zeros((width,), bool),
                        jnp.zeros((width,), jnp.int32)), table)
        if has_deps:
            out["slotted"] = c["slotted"].at[jnp.where(arrived, fid, n_flows)].set(
                True, mode="drop")
        overflow = c["overflow"] | overflowed
        slot_flow, slot_links, slot_weight = (table["slot_flow"], table["slot_links"],
                                              table["slot_weight"])
        valid = slot_flow >= 0
        # Max-min rates of the active flows only (the slot table's incidence).  Rows of
        # empty slots keep their last flow's entries: they are frozen at rate 0.
        sub = Incidence(slot_links.reshape(-1), slot_of_entry, slot_weight.reshape(-1),
                        n_links, width, n_hops)
        if warm:
            keep = _kept_rates(sub, capacity, table["slot_demand"], c["slot_rate"],
                               c["theta"], valid, arrived, keep_rtol)
            # Link loads are carried from event to event and updated over the re-solved
            # rows only (solve_warm's ``load``).
            solved = solve_warm(sub, capacity, table["slot_demand"], c["slot_rate"], keep,
                                load=c["load"])
            rate, load = solved.rates, solved.link_load
        else:  # from scratch, COO layout (the engine before warm starts)
            masked = Incidence(sub.link_idx, sub.flow_idx,
                               jnp.where(valid[:, None], slot_weight, 0.0).reshape(-1),
                               n_links, width, None)
            rate = solve(masked, capacity, jnp.where(valid, table["slot_demand"], 0.0)).rates
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
        window = eps * jnp.abs(t_new) + tolerance * age
        completes = valid & ~stuck & (tau <= step * (1 + eps) + window)
        # A merged completion keeps its own exact time under the current rates.
        t_done = jnp.where(tau > step, t + tau, t_new)
        rem = jnp.where(completes, 0.0,
                        jnp.maximum(rem - jnp.where(valid, rate * step, 0.0), 0.0))
        n_completes = jnp.sum(completes, dtype=jnp.int32)

        # Record the completions and drop their load: usually a single flow, so the
        # common case touches one slot, not the whole table.
        def one(args):
            finish, load = args
            i = jnp.argmax(completes)
            if warm:
                w_i = slot_weight[i]
                load = load.at[slot_links[i]].add(-jnp.where(w_i != 0, w_i * rate[i], 0.0))
            return finish.at[slot_flow[i]].set(t_done[i] + table["slot_lat"][i]), load, rate[i]

        def many(args):
            finish, load = args
            finish = finish.at[jnp.where(completes, slot_flow, n_flows)].set(
                t_done + table["slot_lat"], mode="drop")
            if warm:
                on = completes[:, None] & (slot_weight != 0)
                load = load - link_sum(jnp.where(on, slot_weight * rate[:, None], 0.0)
                                       .reshape(-1), slot_links.reshape(-1), n_links, None)
            return finish, load, jnp.min(jnp.where(completes, rate, inf), initial=inf)

        load0 = load if warm else jnp.zeros((n_links,), dt_)
        finish, load, theta = jax.lax.switch(
            jnp.minimum(n_completes, 2),
            [lambda a: (*a, inf), one, many], (finish, load0))
        n_done = c["n_done"] + n_completes
        out.update(table, t=t_new, slot_rem=rem, finish=finish, n_done=n_done,
                   slot_flow=jnp.where(completes, -1, slot_flow), overflow=overflow,
                   k=c["k"] + 1, all_done=(n_done >= n_flows) | stuck, stuck=stuck)
        if warm:
            out["slot_rate"] = jnp.where(completes | ~valid, 0.0, rate)
            out["theta"] = theta
            out["load"] = load
        if record:
            out["times"] = c["times"].at[c["k"]].set(t)
            out["rates"] = c["rates"].at[c["k"]].set(
                jnp.zeros((n_flows,), dt_).at[jnp.where(valid, slot_flow, n_flows)].set(
                    rate, mode="drop"))
        return out

    carry = dict(t=jnp.asarray(0.0, dt_), finish=jnp.full((n_flows,), inf, dt_),
                 n_done=jnp.asarray(0, jnp.int32),
                 slot_flow=jnp.full((width,), -1, jnp.int32),
                 slot_links=jnp.zeros((width, n_hops), ell_links.dtype),
                 slot_weight=jnp.zeros((width, n_hops), dt_),
                 slot_demand=jnp.zeros((width,), dt_), slot_lat=jnp.zeros((width,), dt_),
                 slot_start=jnp.zeros((width,), dt_), slot_rem=jnp.zeros((width,), dt_),
                 overflow=jnp.asarray(False), k=jnp.asarray(0, jnp.int32),
                 all_done=jnp.asarray(n_flows == 0), stuck=jnp.asarray(False))
    if has_deps:
        carry["start"] = jnp.full((n_flows,), inf, dt_)
        carry["slotted"] = jnp.zeros((n_flows,), bool)
    else:
        carry["ptr"] = jnp.asarray(0, jnp.int32)
    if warm:
        carry["slot_rate"] = jnp.zeros((width,), dt_)
        carry["theta"] = inf
        carry["load"] = jnp.zeros((n_links,), dt_)
    if record:
        carry["times"] = jnp.full((max_events,), inf, dt_)
        carry["rates"] = jnp.zeros((max_events, n_flows), dt_)
    c = jax.lax.while_loop(cond, body, carry)
    stalled = c["stuck"] | (c["n_done"] < n_flows)
    if has_deps:
        start = jnp.where(jnp.isfinite(c["start"]), c["start"],
                          release_times(deps, c["finish"], arrival, delay))
    else:
        start = start0
    result = FlowSimResult(start=start, finish=c["finish"], fct=c["finish"] - arrival,
                           n_events=c["k"], stalled=stalled,
                           event_times=c.get("times"), rate_history=c.get("rates"))
    return result, c["overflow"]


@functools.partial(jit, static_argnums=(0, 1, 2, 4, 8, 10))
def _simulate_events_batched(max_events: int, width: int, record: bool, rows, n_links: int,
                             capacity, deps, flows, warm: bool = True, tolerance=0.0,
                             has_deps: bool = True):
    """:func:`_simulate_events` over a batch: ``capacity`` and ``flows`` carry a leading
    scenario axis, ``rows`` and ``deps`` are shared.  One ``vmap`` inside one jitted
    program of its own, so that it is compiled with :mod:`fabric_jax.compiling`'s
    options (its event and solve loops on the GPU); a ``vmap`` of the jitted engine
    called from the host would be a transformation around it, compiled without them
    (every loop test a host round trip there)."""
    def run(c, f):
        return _simulate_events(max_events, width, record, rows, n_links, c, deps, f,
                                warm=warm, tolerance=tolerance, has_deps=has_deps)
    return jax.vmap(run)(capacity, flows)


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
