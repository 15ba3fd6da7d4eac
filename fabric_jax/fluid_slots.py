"""Cost follows concurrency: the fluid engine on a fixed table of flow slots.

Units: sizes in bytes, times in seconds, rates and capacities in bytes/s.

:func:`fabric_jax.simulate_fluid` carries the state of every flow of the run in every
step, so a run of ``n`` flows over ``K`` steps costs ``O(n K)`` even when only a few
hundred flows are active at a time (open-loop Poisson traffic: hundreds of thousands
of flows over tens of milliseconds, a few hundred at once).
:func:`simulate_fluid_windowed` runs the *same* step function on a fixed number of
**flow slots** (``max_active``), the way the event-driven engine
(:func:`fabric_jax.simulate_flows`, ``max_active``) keeps only the active flows:

* time is cut into windows of ``window`` steps; each window is one call of
  :func:`fabric_jax.simulate_fluid` on the slot table, continued from the state of
  the previous window (its checkpoint/resume path, ``init_state=``).  Every window has
  the same shapes, so the run compiles once;
* at each window boundary (on the host, NumPy over the slot columns, no loop over
  flows) flows that are **over** leave their slot: finished, and none of their bytes
  left standing in a queue or on a wire (a finished flow's last crumbs still count in
  its queues, so it stays until they are gone).  Their per-flow results (finish time,
  sent / delivered / dropped bytes, ...) are scattered into the run's ``[flows]``
  arrays.  Flows that start before the end of the next window plus a **lookahead**
  (one feedback ring, see below) enter free slots with the state of a flow that has
  not started (:func:`fresh_columns`);
* the link state (flow control: pauses, pools, paused time; maximum queues; the
  step counter) carries over unchanged, and so does every per-flow leaf of a flow that
  stays (its queued bytes per hop, wire ring, feedback ring, law state): the
  per-flow leaves are gathered and scattered along their flow axis
  (:data:`FLOW_AXIS`), the other leaves are copied.

Why the result equals the plain engine's.  A flow interacts with the others only
through the links it uses, and only while it has bytes in the fabric or offers a
rate; a flow that has not started offers nothing and has no bytes anywhere, and a
flow that is over neither.  Three things in the step are *global over flows* and are
pinned: the padded hop count, the depth of the feedback and receiver rings, and the
HPCC reference time ``T = max base_rtt`` over all flows.  A few extra **pin columns**
(never released: arrival ``INERT_ARRIVAL``, zero size) copy the flows of the run with
the most hops, the longest one-way latency and the longest base RTT, so those
quantities are the whole run's in every window.  A flow that has not started still
has its feedback ring written every step (the signals of its path), and when it
starts its law reads the entries written up to one ring length earlier; the
lookahead (:func:`lookahead_steps`, one ring length) admits every flow early enough
that these entries are the same as in the plain engine (without it, flows that start
into an HPCC incast run at line rate for their first RTT:
``tests/test_fluid_slots.py``).  What differs is floating-point summation order
(fewer terms in each link's sum): equal to round-off in float64
(``tests/test_fluid_slots.py`` checks finish times and bytes against the plain
engine for several laws and flow-control modes).

Not supported (``ValueError``): dependencies between flows (``deps``), dynamic
routing (``routing``), trajectories (``save_every``) and resuming (``init_state``).
Defaults that the plain engine derives per flow (``line_rate``: the smallest capacity
on the path; ``base_rtt``: ``max(2 L_f, dt)``; host NIC links from the flows' first
hops) are derived here once for the whole run, with the same rules, and passed to each
window.  The default ``solver_iterations`` in the smooth mode is ``slots + 1`` (the
plain engine's ``flows + 1``; both are enough for the exact max-min share).

Cost: each window costs ``O(slots x window)`` device work plus a host boundary step
(``O(slots)`` NumPy and one dispatch); ``experiments/bench_fluid_slots.py`` measures
the speed-up over the plain engine.

Sources: the slot table follows the event-driven engine of this package
(:func:`fabric_jax.sim.simulate_flows`, ``max_active``) and, for the host/device
split with an overflow check, jax-md's neighbour lists (``partition.neighbor_list``:
fixed capacity, allocate on the host, error when it overflows).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from . import faults as fm
from . import flowcontrol as fcm
from . import links as lk
from .cc import base as ccbase
from .fluid import (check_fifo_bands, check_single_path, hop_entries, prepare_classes,
                    simulate_fluid)
from .fluid_step import SIGNALS, FluidInfo, FluidResult, pack_law, ring_initial, unpack_law
from .incidence import Incidence
from .sim import prepare_flows

__all__ = ["simulate_fluid_windowed", "SlotResult", "FLOW_AXIS", "GLOBAL_KEYS",
           "INERT_ARRIVAL", "fresh_columns", "lookahead_steps"]

#: Axis of the flows in each per-flow entry of the fluid state (``FluidResult.state``,
#: the carry of :func:`fabric_jax.fluid.simulate_fluid`; key -> axis, the same for every
#: leaf below the key): ``[flows, hops]`` queued / in-transit bytes per hop, the
#: ``[depth, flows]`` receiver wire, the ``[2, flows]`` receiver discard state, the
#: law's ``[fields, flows]`` state (:func:`fabric_jax.fluid_step.pack_law`), the
#: ``[ring, flows, signals]`` feedback ring, ``[flows]`` counters.
FLOW_AXIS = dict(remaining=0, x=0, xb=0, transit=0, wire=1, start=0, finish=0, done=0, sent=0,
                 passed=0, delivered=0, dropped=0, discarded=0, rx_phi=1, law=1, ring=1,
                 stranded_time=0, stranded=0)
#: Entries of the fluid state that are not per flow and carry over windows unchanged:
#: the step counter, flow-control state per link, the conservation residual, the
#: largest queue per link, the per-step solves' iteration counts, the bytes each lossy
#: link dropped (present with lossy-link faults).
GLOBAL_KEYS = frozenset({"k", "fc", "max_residual", "max_queue", "solver_iterations",
                         "corrupted"})
#: Arrival time of pin and free-slot columns, s: never released in any real run.
INERT_ARRIVAL = 1e9
#: Default window length, steps.
DEFAULT_WINDOW = 32


@dataclasses.dataclass(frozen=True)
class SlotResult(FluidResult):
    """:class:`fabric_jax.FluidResult` of a windowed run, plus the slot diagnostics.

    ``state`` is ``None`` (the slot table's carry is not a plain run's state),
    ``trajectory`` is ``None``.  ``law_state`` holds each flow's law state when it left
    its slot (the plain engine keeps stepping the law of a finished flow, which offers
    nothing; a flow never admitted has the law's initial state).

    Attributes:
      peak_active: largest number of slots in use at a window boundary (flows running,
        draining or about to start).
      max_active: the slot count of the run.
      n_windows: windows simulated (idle windows skipped on the host not counted).
      window: steps per window.
      lookahead: steps before its release that a flow enters its slot.
    """

    peak_active: int = 0
    max_active: int = 0
    n_windows: int = 0
    window: int = 0
    lookahead: int = 0


def _key(path) -> str:
    k = path[0]
    return str(getattr(k, "key", getattr(k, "name", k)))


def _classify(state):
    """``[(top-level key, leaf)]`` in flatten order and the treedef; unknown keys raise."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(state)
    out = []
    for path, leaf in leaves:
        key = _key(path)
        if key not in FLOW_AXIS and key not in GLOBAL_KEYS:
            raise ValueError(f"fluid state entry {key!r} is unknown to fabric_jax.fluid_slots: "
                             "add it to FLOW_AXIS (with its flow axis and its value for a flow "
                             "that has not started, fresh_columns) or to GLOBAL_KEYS")
        out.append((key, np.array(leaf)))   # writable host copies
    return out, treedef


def fresh_columns(key: str, leaf: np.ndarray, cols, *, size, line_rate, base_rtt,
                  law_leaf=None) -> None:
    """Writes, in place, the state of flows that have not started into columns ``cols``
    of the per-flow ``leaf`` under state entry ``key`` (the values of
    :func:`fabric_jax.fluid.simulate_fluid`'s initial carry).

    Args:
      key: top-level state entry (a key of :data:`FLOW_AXIS`).
      leaf: the host array to modify.
      cols: ``[n]`` columns (slots) along the flow axis.
      size, line_rate, base_rtt: ``[n]`` the entering flows' values.
      law_leaf: ``[fields, n]`` the law's packed initial state (``pack_law(law.init)``)
        for ``law``.
        The ``ring`` (``[ring_len, flows, signals]``) starts at
        :func:`fabric_jax.fluid_step.ring_initial` (base RTT, line rate, zeros).
    """
    axis = FLOW_AXIS[key]
    if key == "remaining":
        val = size
    elif key in ("start", "finish"):
        val = np.full(len(cols), np.inf)
    elif key == "law":
        val = law_leaf
    elif key == "ring":
        val = np.broadcast_to(np.asarray(ring_initial(base_rtt, line_rate, leaf.dtype)),
                              (leaf.shape[0], len(cols), leaf.shape[2]))
    else:
        val = 0
    idx = [slice(None)] * leaf.ndim
    idx[axis] = np.asarray(cols)
    if key not in ("ring",) and axis == 0 and np.ndim(val) == 1 and leaf.ndim > 1:
        val = np.asarray(val).reshape((-1,) + (1,) * (leaf.ndim - 1))
    leaf[tuple(idx)] = val


def _at_rest(fc_state) -> bool:
    """No pause in force or on its way (:class:`fabric_jax.flowcontrol.FlowControlState`)."""
    return not (np.any(np.asarray(fc_state.pause)) or np.any(np.asarray(fc_state.history)))


def lookahead_steps(base_rtt, dt: float, fc) -> int:
    """Steps before its release that a flow enters its slot: one feedback ring.

    While a flow waits for its release its feedback ring is written every step with
    the signals of its path (HPCC's link utilisation, marks, RTT), and its first steps
    read entries up to ``ring length - 1`` steps old (the feedback delay ``base_rtt /
    dt``, plus ``rto_steps`` for losses under ``drop``).  Entering one ring length
    (plus a margin of 4 steps for the rounding of release times to steps) early makes
    those entries the plain engine's.  (Of the built-in laws only HPCC's first steps
    read a path signal not gated by the flow's own delayed rate.)
    """
    return int(math.ceil(float(np.max(base_rtt, initial=dt)) / dt)) + fc.rto_steps + 4


def _take(leaf, axis, cols):
    return np.take(leaf, cols, axis=axis)


def simulate_fluid_windowed(incidence, capacity, size, *, dt, n_steps: int, max_active: int,
                            window: int | None = None, law="none", params=None, arrival=None,
                            delay=None, latency=None, line_rate=None, base_rtt=None,
                            flow_control="none", fc_params=None, buffer=None, smooth=None,
                            solver_iterations: int | None = None, faults=None,
                            link_latency=None, nic_links=None, reorder: bool = True,
                            loss_recovery: str = "selective", mtu: float | None = None,
                            reorder_tolerance: float = 0.0, traffic_class=None, classes=None,
                            shared_buffer=None, deps=None, routing=None,
                            save_every=None, init_state=None,
                            fifo_bands: int = lk.DEFAULT_FIFO_BANDS) -> SlotResult:
    """:func:`fabric_jax.simulate_fluid` on ``max_active`` flow slots, window by window.

    Same model, arguments and per-flow results as :func:`fabric_jax.simulate_fluid`
    (module docstring: why they agree, what is pinned); the device work follows the
    number of flows in the fabric at once instead of the number of flows of the run.

    Args:
      incidence, capacity, size, dt, n_steps, law, params, arrival, delay, latency,
        line_rate, base_rtt, flow_control, fc_params, buffer, smooth,
        solver_iterations, faults, link_latency, nic_links, reorder, loss_recovery,
        mtu, reorder_tolerance, traffic_class, classes, shared_buffer: as in
        :func:`fabric_jax.simulate_fluid` (``[flows]`` arrays over all flows of the
        run).
      max_active: number of flow slots (static): at least the number of flows that,
        at any window boundary, are running, still have bytes in the fabric, or start
        within the next ``window + lookahead`` steps.
      window: steps per window (static; default ``min(32, n_steps)``).  Shorter windows
        need fewer slots (flows leave sooner and enter later), longer ones fewer host
        round trips.  When it does not divide ``n_steps`` the last, shorter window
        compiles once more.
      deps, routing, save_every, init_state: not supported (must be ``None``).

    Returns:
      :class:`SlotResult` (a :class:`fabric_jax.FluidResult` with ``state`` and
      ``trajectory`` ``None``, plus the slot diagnostics).

    Raises:
      ValueError: the checks of :func:`fabric_jax.simulate_fluid`; ``max_active`` not a
        positive integer or too small (raised at the window boundary where more flows
        need a slot, naming the count needed); ``window`` not a positive integer;
        ``deps``, ``routing``, ``save_every`` or ``init_state`` given.
    """
    for name, val in (("deps", deps), ("routing", routing), ("save_every", save_every),
                      ("init_state", init_state)):
        if val is not None:
            raise ValueError(f"{name} is not supported by simulate_fluid_windowed (the slot "
                             f"table); use fabric_jax.simulate_fluid for runs with {name}")
    if not (isinstance(max_active, (int, np.integer)) and max_active >= 1):
        raise ValueError(f"max_active must be a positive integer (number of flow slots); "
                         f"got {max_active!r}")
    if not (isinstance(n_steps, (int, np.integer)) and n_steps >= 1):
        raise ValueError(f"n_steps must be a positive integer; got {n_steps!r}")
    if window is None:
        window = min(DEFAULT_WINDOW, int(n_steps))
    if not (isinstance(window, (int, np.integer)) and window >= 1):
        raise ValueError(f"window must be a positive integer number of steps; got {window!r}")
    window = int(min(window, n_steps))
    if isinstance(dt, jax.core.Tracer) or not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be a positive number of seconds; got {dt!r}")
    dt = float(dt)
    law = ccbase.get(law)
    if params is None:
        params = law.default_params()
    fc = fcm.FlowControl(flow_control) if isinstance(flow_control, str) else flow_control
    if not isinstance(fc, fcm.FlowControl):
        raise ValueError("flow_control must be a mode string or a FlowControl; "
                         f"got {flow_control!r}")
    n_flows_guess = np.shape(size)[0] if np.ndim(size) == 1 else None
    if arrival is None and n_flows_guess is not None:
        arrival = np.zeros(n_flows_guess)
    inc, cap, _, flows = prepare_flows(incidence, capacity, arrival, size, None, delay, latency,
                                  None)
    n_links, n_flows = inc.n_links, inc.n_flows
    check_single_path(inc)
    entry = hop_entries(inc)
    exists = entry >= 0
    link_tab = np.where(exists, np.asarray(inc.link_idx)[np.maximum(entry, 0)], n_links)
    n_hops = link_tab.shape[1]
    hops_per_flow = exists.sum(axis=1)

    # per-flow constants of the whole run, with the plain engine's default rules
    size_all = np.asarray(flows["size"], float)
    arr_all = np.asarray(flows["arrival"], float)
    delay_all = np.asarray(flows["delay"], float)
    lat_all = np.asarray(flows["latency"], float)
    one_way = lat_all + lk.path_latencies(link_latency, link_tab, n_hops, n_links)[:, 0]
    for name, val in (("line_rate", line_rate), ("base_rtt", base_rtt)):
        if val is not None:
            a = np.asarray(val, float)
            if a.shape != (n_flows,) or np.any(~(a > 0)):
                raise ValueError(f"{name} must be [flows] = [{n_flows}] values > 0")
    if line_rate is None:
        cap_ext = np.append(np.asarray(cap, float), np.inf)
        lr = cap_ext[link_tab].min(axis=1)
        line_rate = np.where(np.isfinite(lr) & (lr > 0), lr,
                             np.max(np.asarray(cap, float), initial=1.0))
    line_rate = np.asarray(line_rate, float)
    base_rtt = (np.maximum(2 * one_way, dt) if base_rtt is None
                else np.asarray(base_rtt, float))
    nic = lk.nic_links(link_tab, n_hops, n_links, nic_links)
    tc_cfg, tc_all = prepare_classes(traffic_class, classes, n_flows)
    release = arr_all + delay_all
    lookahead = lookahead_steps(base_rtt, dt, fc)

    # pin columns: the flows with the most hops, the longest one-way latency and base RTT
    pins = []
    for f in (np.argmax(hops_per_flow), np.argmax(one_way), np.argmax(base_rtt)):
        if int(f) not in pins:
            pins.append(int(f))
    n_cols = int(max_active) + len(pins)
    col_flow = np.full(n_cols, -1, np.int64)      # real flow in each column (-1: inert)
    col_src = np.full(n_cols, pins[0], np.int64)  # flow whose path / constants it copies
    col_src[max_active:] = pins

    def inputs():
        real = col_flow >= 0
        src = np.where(real, col_flow, col_src)
        rows = link_tab[src]
        valid = rows < n_links
        inc_s = Incidence(jnp.asarray(np.where(valid, rows, 0).ravel(), jnp.int32),
                          jnp.asarray(np.repeat(np.arange(n_cols), n_hops), jnp.int32),
                          jnp.asarray(valid.ravel(), cap.dtype), n_links, n_cols,
                          row_width=n_hops)
        return inc_s, dict(
            size=np.where(real, size_all[src], 0.0),
            arrival=np.where(real, arr_all[src], INERT_ARRIVAL),
            delay=np.where(real, delay_all[src], 0.0), latency=lat_all[src],
            line_rate=line_rate[src], base_rtt=base_rtt[src],
            traffic_class=None if tc_cfg is None else tc_all[src])

    extra = {} if mtu is None else dict(mtu=mtu)
    if solver_iterations is None and smooth is not None and getattr(smooth, "enabled", False):
        solver_iterations = n_cols + 1

    def run(state, steps):
        inc_s, col = inputs()
        return simulate_fluid(
            inc_s, cap, col["size"], dt=dt, n_steps=int(steps), law=law, params=params,
            arrival=col["arrival"], delay=col["delay"], latency=col["latency"],
            line_rate=col["line_rate"], base_rtt=col["base_rtt"], flow_control=fc,
            fc_params=fc_params, buffer=buffer, smooth=smooth,
            solver_iterations=solver_iterations, faults=faults, init_state=state,
            link_latency=link_latency, nic_links=nic, reorder=reorder,
            loss_recovery=loss_recovery, reorder_tolerance=reorder_tolerance,
            traffic_class=col["traffic_class"], classes=tc_cfg, shared_buffer=shared_buffer,
            fifo_bands=fifo_bands, **extra)

    # ---- the initial carry of the slot table, laid out as the engine's (FLOW_AXIS,
    # GLOBAL_KEYS), so that every window, the first included, resumes from a state:
    # one compilation.  Shapes: flows = columns, the hop table's hops, the feedback
    # ring (the engine's rule: max feedback delay in whole steps + rto + 2) and the
    # receiver wire (links.wire_taps) of the whole run (pinned).
    fdt = cap.dtype
    law_init = law.init(jnp.asarray(line_rate, fdt), params)
    law_packed = np.asarray(pack_law(law_init))            # [fields, flows]
    fb_steps = np.maximum(np.floor(base_rtt / dt + 1e-9), 1).astype(np.int64)
    ring_len = int(fb_steps.max(initial=1) + fc.rto_steps + 2)
    wire_depth = lk.wire_taps(one_way, dt)[2]
    n_units = n_links * (1 if tc_cfg is None else tc_cfg.n_classes)
    fz = lambda *shape: np.zeros(shape, fdt)  # noqa: E731
    carry = dict(k=np.zeros((), np.int32), remaining=fz(n_cols), x=fz(n_cols, n_hops),
                 xb=fz(n_cols, n_hops, check_fifo_bands(fifo_bands)),
                 transit=fz(n_cols, n_hops), wire=fz(wire_depth, n_cols), start=fz(n_cols),
                 finish=fz(n_cols), done=np.zeros(n_cols, bool), sent=fz(n_cols),
                 passed=fz(n_cols), delivered=fz(n_cols), dropped=fz(n_cols),
                 discarded=fz(n_cols), rx_phi=fz(2, n_cols),
                 law=np.zeros((law_packed.shape[0], n_cols), law_packed.dtype),
                 fc=jax.device_get(fcm.init_state(fc, n_units, fdt)),
                 ring=fz(ring_len, n_cols, len(SIGNALS)),
                 max_residual=np.zeros((), fdt), max_queue=fz(n_links),
                 solver_iterations=np.zeros(2, np.int32),
                 stranded_time=fz(n_cols), stranded=np.zeros(n_cols, bool))
    if faults is not None and fm.fault_schedule(faults, n_links, dt).loss is not None:
        carry.update(corrupted=fz(n_links))   # lossy links' drop counter (GLOBAL_KEYS)
    def adopt(state):
        """Host copies of a state's leaves (in flatten order) and its treedef."""
        return _classify(jax.device_get(state))

    leaves, treedef = adopt(carry)

    def set_fresh(cols):
        """Columns ``cols`` get the state of flows that have not started."""
        if len(cols) == 0:
            return
        real = col_flow[cols] >= 0
        src = np.where(real, col_flow[cols], col_src[cols])
        kw = dict(size=np.where(real, size_all[src], 0.0), line_rate=line_rate[src],
                  base_rtt=base_rtt[src])
        for key, leaf in leaves:
            if key in FLOW_AXIS:
                fresh_columns(key, leaf, cols, **kw,
                              law_leaf=law_packed[:, src] if key == "law" else None)

    # ---- the run's [flows] results (flows never admitted keep these defaults)
    out = dict(start=release.copy(), finish=np.full(n_flows, np.inf), sent=np.zeros(n_flows),
               delivered=np.zeros(n_flows), dropped=np.zeros(n_flows),
               discarded=np.zeros(n_flows), queued=np.zeros(n_flows),
               in_flight=np.zeros(n_flows), stranded_time=np.zeros(n_flows),
               stranded=np.zeros(n_flows, bool), done=np.zeros(n_flows, bool),
               rx_phi=np.zeros((2, n_flows)))
    law_out = np.array(law_packed)

    def col(key, cols):
        i = [kk for kk, _ in leaves].index(key)
        return _take(leaves[i][1], FLOW_AXIS[key], cols)

    def scatter(cols):
        """Per-flow results of the flows in columns ``cols`` into the run's arrays."""
        if len(cols) == 0:
            return
        f = col_flow[cols]
        start = col("start", cols)
        out["start"][f] = np.where(np.isfinite(start), start, release[f])
        for key in ("finish", "sent", "delivered", "dropped", "discarded",
                    "stranded_time", "stranded", "done"):
            out[key][f] = col(key, cols)
        out["queued"][f] = col("x", cols).sum(axis=1)
        out["in_flight"][f] = in_flight[cols]
        out["rx_phi"][:, f] = col("rx_phi", cols)
        for key, leaf in leaves:
            if key == "law":
                law_out[:, f] = _take(leaf, 1, cols)

    order = np.argsort(release, kind="stable")
    next_in = 0                       # flows order[:next_in] have been admitted
    k = 0
    peak = 0
    n_windows = 0
    slot_ids = np.arange(max_active)
    last = None
    while k < n_steps:
        steps = min(window, n_steps - k)
        if last is not None:
            # leave: finished flows with nothing left in the fabric
            live = col_flow[:max_active] >= 0
            stock = col("x", slot_ids).sum(axis=1) + in_flight[slot_ids]
            leaving = slot_ids[live & col("done", slot_ids) & (stock == 0)]
            scatter(leaving)
            col_flow[leaving] = -1
            set_fresh(leaving)
        # enter: flows released before the end of the window plus the lookahead
        stop = int(np.searchsorted(release[order], (k + steps + lookahead) * dt, side="left"))
        entering = order[next_in:stop]
        free = slot_ids[col_flow[:max_active] < 0]
        busy = max_active - free.size
        if entering.size > free.size:
            raise ValueError(
                f"max_active={max_active} is too small: at t = {k * dt * 1e6:.6g} us "
                f"{busy} flows hold a slot and {entering.size} more start within the next "
                f"{steps + lookahead} steps (window + lookahead); pass max_active >= "
                f"{busy + entering.size} (later windows may need more), or a shorter window")
        if (last is not None and faults is None and busy == 0 and entering.size == 0
                and _at_rest(last.state["fc"])):
            # nothing in the fabric, nothing to admit, flow control at rest: the window
            # would change nothing a flow sees (fluid's stop_when_idle rule); skip it
            k += steps
            keys = [key for key, _ in leaves]
            leaves[keys.index("k")][1][...] = k
            # the wires' history is indexed by step: what it holds was delivered
            leaves[keys.index("wire")][1][...] = 0
            continue
        tgt = free[:entering.size]
        col_flow[tgt] = entering
        set_fresh(tgt)
        next_in = stop
        peak = max(peak, busy + entering.size)
        state = jax.tree_util.tree_unflatten(treedef, [leaf for _, leaf in leaves])
        try:
            last = run(state, steps)
        except ValueError as err:
            if last is None and "init_state" in str(err):
                raise ValueError(f"fabric_jax.fluid_slots lays out the fluid state as "
                                 f"FLOW_AXIS / GLOBAL_KEYS say, and the engine's state "
                                 f"differs ({err}); update fluid_slots") from err
            raise
        leaves, treedef = adopt(last.state)
        in_flight = np.asarray(last.in_flight)
        n_windows += 1
        k += steps
    scatter(slot_ids[col_flow[:max_active] >= 0])

    g = {key: leaf for key, leaf in leaves if key in GLOBAL_KEYS}
    paused = np.asarray(last.info.paused_time)
    link_queue = np.asarray(last.link_queue)
    as_f = lambda a: jnp.asarray(a, fdt)  # noqa: E731
    info = FluidInfo(max_residual=as_f(g["max_residual"]), stalled=jnp.asarray(~out["done"].all()),
                     paused_time=as_f(paused), max_queue=as_f(g["max_queue"]),
                     stranded_time=as_f(out["stranded_time"]),
                     stranded=jnp.asarray(out["stranded"]), discard_mode=as_f(out["rx_phi"]),
                     solver_iterations=jnp.asarray(g["solver_iterations"]))
    law_state = unpack_law(as_f(law_out), law_init)
    return SlotResult(start=as_f(out["start"]), finish=as_f(out["finish"]),
                      fct=as_f(out["finish"] - arr_all), sent=as_f(out["sent"]),
                      delivered=as_f(out["delivered"]), dropped=as_f(out["dropped"]),
                      queued=as_f(out["queued"]), link_queue=as_f(link_queue),
                      law_state=law_state, trajectory=None, info=info, routing_state=None,
                      state=None, in_flight=as_f(out["in_flight"]),
                      discarded=as_f(out["discarded"]),
                      link_corrupted=as_f(g.get("corrupted", np.zeros(n_links))),
                      peak_active=int(peak),
                      max_active=int(max_active), n_windows=int(n_windows), window=window,
                      lookahead=lookahead)
