"""Cost follows concurrency: the fluid engine on a fixed table of flow slots.

Units: sizes in bytes, times in seconds, rates and capacities in bytes/s.

:func:`fabric_jax.fluid.run` carries the state of every flow of the run in every step,
so a run of ``n`` flows over ``K`` steps costs ``O(n K)`` even when only a few hundred
flows are active at a time (open-loop Poisson traffic: hundreds of thousands of flows
over tens of milliseconds, a few hundred at once).  :func:`simulate_fluid_windowed`
runs the *same* step on a fixed number of **flow slots** (``max_active``), the way the
event-driven engine (:func:`fabric_jax.simulate_flows`, ``max_active``) keeps only the
active flows.  It is a short loop over the engine's contract, one window at a time:

* **take**: at each window boundary (on the host, NumPy over the slot columns, no loop
  over flows) flows that are **over** leave their slot -- finished, none of their bytes
  left in a queue or on a wire -- and their per-flow results (finish time, sent /
  delivered / dropped bytes, ...) are scattered into the run's ``[flows]`` arrays;
* **put**: flows that start before the end of the next window plus a **lookahead**
  (one feedback ring, see below) enter free slots with the state of a flow that has not
  started (:func:`fresh_columns`);
* **run**: :func:`fabric_jax.fluid.prepare` lays the slot table out as a problem (every
  window has the same shapes, so the run compiles once) and :func:`fabric_jax.fluid.run`
  continues it from the state the last window ended with.

The link state (flow control, maximum queues, the step counter) carries over unchanged,
and so does every per-flow record of a flow that stays; which records are per flow, and
along which axis, is what :class:`fabric_jax.fluid.FluidState` declares.

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
``tests/fluid/test_fluid_slots.py``).  What differs is floating-point summation order
(fewer terms in each link's sum): equal to round-off in float64.

Not supported (``ValueError``): dependencies between flows (``deps``), dynamic
routing (``routing``), trajectories (``save_every``) and resuming (``init_state``).
Defaults that the plain engine derives per flow (``line_rate``: the smallest capacity
on the path; ``base_rtt``: ``max(2 L_f, dt)``; host NIC links from the flows' first
hops) are derived here once for the whole run, with the same rules, and passed to each
window.  The default ``solver_iterations`` in the smooth mode is ``slots + 1``.

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

from .. import links as lk
from ..incidence import Incidence
from ..sim import prepare_flows
from .checks import check_n_steps, check_single_path, hop_entries, prepare_classes
from .options import CongestionControl, FlowControlConfig
from . import problem as fluid_problem
from .result import FluidInfo, FluidResult
from .loop import run
from .simulate import prepare_kwargs
from .state import FluidState, pack_law, ring_initial, unpack_law

__all__ = ["simulate_fluid_windowed", "SlotResult", "INERT_ARRIVAL", "fresh_columns",
           "lookahead_steps", "DEFAULT_WINDOW"]

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


def fresh_columns(name: str, leaf: np.ndarray, cols, *, size, line_rate, base_rtt,
                  law_leaf=None) -> None:
    """Writes, in place, the state of flows that have not started into columns ``cols``
    of the per-flow record ``leaf`` of state field ``name`` (the values of
    :func:`fabric_jax.fluid.init_state`).

    Args:
      name: a per-flow field of :class:`fabric_jax.fluid.FluidState`.
      leaf: the host array to modify.
      cols: ``[n]`` columns (slots) along the field's flow axis.
      size, line_rate, base_rtt: ``[n]`` the entering flows' values.
      law_leaf: ``[fields, n]`` the law's packed initial state (``pack_law(law.init)``)
        for ``law``.  The ``ring`` starts at :func:`fabric_jax.fluid.state.ring_initial`.
    """
    axis = FluidState.flow_axes()[name]
    if name == "remaining":
        val = size
    elif name in ("start", "finish"):
        val = np.full(len(cols), np.inf)
    elif name == "law":
        val = law_leaf
    elif name == "ring":
        val = np.broadcast_to(np.asarray(ring_initial(base_rtt, line_rate, leaf.dtype)),
                              (leaf.shape[0], len(cols), leaf.shape[2]))
    else:
        val = 0
    idx = [slice(None)] * leaf.ndim
    idx[axis] = np.asarray(cols)
    if name != "ring" and axis == 0 and np.ndim(val) == 1 and leaf.ndim > 1:
        val = np.asarray(val).reshape((-1,) + (1,) * (leaf.ndim - 1))
    leaf[tuple(idx)] = val


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


@dataclasses.dataclass
class _Run:
    """The run's flows as the slot table sees them (host, NumPy; per-flow constants
    derived once with the plain engine's rules)."""

    link_tab: np.ndarray     # [flows, hops] link of each hop, n_links padded
    size: np.ndarray
    arrival: np.ndarray
    delay: np.ndarray
    latency: np.ndarray
    line_rate: np.ndarray
    base_rtt: np.ndarray
    one_way: np.ndarray
    traffic_class: np.ndarray | None
    classes: object
    capacity: object
    nic: np.ndarray

    @property
    def release(self):
        return self.arrival + self.delay


def _flows(incidence, capacity, size, arrival, delay, latency, line_rate, base_rtt,
           link_latency, nic_links, traffic_class, classes, dt) -> _Run:
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
    lat = np.asarray(flows["latency"], float)
    one_way = lat + lk.path_latencies(link_latency, link_tab, link_tab.shape[1], n_links)[:, 0]
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
    base_rtt = (np.maximum(2 * one_way, dt) if base_rtt is None
                else np.asarray(base_rtt, float))
    tc_cfg, tc_all = prepare_classes(traffic_class, classes, n_flows)
    return _Run(link_tab=link_tab, size=np.asarray(flows["size"], float),
                arrival=np.asarray(flows["arrival"], float),
                delay=np.asarray(flows["delay"], float), latency=lat,
                line_rate=np.asarray(line_rate, float), base_rtt=base_rtt, one_way=one_way,
                traffic_class=tc_all, classes=tc_cfg, capacity=cap,
                nic=lk.nic_links(link_tab, link_tab.shape[1], n_links, nic_links))


class _Slots:
    """The slot table: which flow each column holds, and the state's per-flow records
    as host arrays (take: gather results of the columns that leave; put: fresh state
    into the columns that enter)."""

    def __init__(self, flows: _Run, max_active: int, law, params, fdt):
        self.flows, self.max_active = flows, max_active
        n_hops = flows.link_tab.shape[1]
        hops_per_flow = (flows.link_tab < len(flows.capacity)).sum(axis=1)
        # pin columns: the flows with the most hops, the longest one-way latency and RTT
        pins = []
        for f in (np.argmax(hops_per_flow), np.argmax(flows.one_way),
                  np.argmax(flows.base_rtt)):
            if int(f) not in pins:
                pins.append(int(f))
        n_cols = int(max_active) + len(pins)
        self.n_cols, self.n_hops = n_cols, n_hops
        self.col_flow = np.full(n_cols, -1, np.int64)    # real flow in each column (-1 inert)
        self.col_src = np.full(n_cols, pins[0], np.int64)  # flow whose path it copies
        self.col_src[max_active:] = pins
        self.law_packed = np.asarray(pack_law(law.init(jnp.asarray(flows.line_rate, fdt),
                                                       params)))
        self.slot_ids = np.arange(max_active)
        n_flows = flows.size.shape[0]
        # the run's [flows] results (flows never admitted keep these defaults)
        self.out = dict(start=flows.release.copy(), finish=np.full(n_flows, np.inf),
                        sent=np.zeros(n_flows), delivered=np.zeros(n_flows),
                        dropped=np.zeros(n_flows), discarded=np.zeros(n_flows),
                        queued=np.zeros(n_flows), in_flight=np.zeros(n_flows),
                        stranded_time=np.zeros(n_flows), stranded=np.zeros(n_flows, bool),
                        done=np.zeros(n_flows, bool), rx_phi=np.zeros((2, n_flows)))
        self.law_out = np.array(self.law_packed)
        self.order = np.argsort(flows.release, kind="stable")
        self.next_in = 0          # flows order[:next_in] have been admitted

    def entering(self, t_end: float, where: str):
        """``(entering, free, busy)``: the flows released before ``t_end`` not yet
        admitted, the free slots and the count of busy ones; ``ValueError`` when they do
        not fit (``where``: the window and horizon, for the message)."""
        stop = int(np.searchsorted(self.flows.release[self.order], t_end, side="left"))
        entering = self.order[self.next_in:stop]
        free = self.slot_ids[self.col_flow[:self.max_active] < 0]
        busy = self.max_active - free.size
        if entering.size > free.size:
            raise ValueError(
                f"max_active={self.max_active} is too small: at {where} {busy} flows hold "
                f"a slot and {entering.size} more start within the window and its "
                f"lookahead; pass max_active >= {busy + entering.size} (later windows may "
                f"need more), or a shorter window")
        return entering, free, busy, stop

    def inputs(self):
        """``(incidence, per-column arrays)`` of the table as it stands."""
        f = self.flows
        real = self.col_flow >= 0
        src = np.where(real, self.col_flow, self.col_src)
        rows = f.link_tab[src]
        n_links = len(f.capacity)
        valid = rows < n_links
        inc = Incidence(jnp.asarray(np.where(valid, rows, 0).ravel(), jnp.int32),
                        jnp.asarray(np.repeat(np.arange(self.n_cols), self.n_hops), jnp.int32),
                        jnp.asarray(valid.ravel(), f.capacity.dtype), n_links, self.n_cols,
                        row_width=self.n_hops)
        return inc, dict(
            size=np.where(real, f.size[src], 0.0),
            arrival=np.where(real, f.arrival[src], INERT_ARRIVAL),
            delay=np.where(real, f.delay[src], 0.0), latency=f.latency[src],
            line_rate=f.line_rate[src], base_rtt=f.base_rtt[src],
            traffic_class=None if f.traffic_class is None or f.classes is None
            else f.traffic_class[src])

    def problem(self, steps: int, dt: float, options: dict):
        """The window's :class:`~fabric_jax.fluid.FluidProblem`: the table as it stands,
        ``steps`` steps, the run's other options (flat, as simulate_fluid takes them)."""
        inc, col = self.inputs()
        return prepare_kwargs(inc, self.flows.capacity, col["size"], dt=dt,
                              n_steps=int(steps), arrival=col["arrival"], delay=col["delay"],
                              latency=col["latency"], line_rate=col["line_rate"],
                              base_rtt=col["base_rtt"], traffic_class=col["traffic_class"],
                              **options)

    def put(self, leaves: dict, cols) -> None:
        """Columns ``cols`` get the state of flows that have not started."""
        if len(cols) == 0:
            return
        f = self.flows
        real = self.col_flow[cols] >= 0
        src = np.where(real, self.col_flow[cols], self.col_src[cols])
        kw = dict(size=np.where(real, f.size[src], 0.0), line_rate=f.line_rate[src],
                  base_rtt=f.base_rtt[src])
        axes = FluidState.flow_axes()
        for name, leaf in leaves.items():
            if isinstance(axes.get(name), int):
                fresh_columns(name, leaf, cols, **kw,
                              law_leaf=self.law_packed[:, src] if name == "law" else None)

    def take(self, leaves: dict, in_flight, cols) -> None:
        """Per-flow results of the flows in columns ``cols`` into the run's arrays."""
        if len(cols) == 0:
            return
        out, law_out = self.out, self.law_out
        axes = FluidState.flow_axes()
        col = lambda name: np.take(leaves[name], cols, axis=axes[name])  # noqa: E731
        f = self.col_flow[cols]
        start = col("start")
        out["start"][f] = np.where(np.isfinite(start), start, self.flows.release[f])
        for name in ("finish", "sent", "delivered", "dropped", "discarded",
                     "stranded_time", "stranded", "done"):
            out[name][f] = col(name)
        out["queued"][f] = col("x").sum(axis=1)
        out["in_flight"][f] = in_flight[cols]
        out["rx_phi"][:, f] = col("rx_phi")
        law_out[:, f] = col("law")

    def over(self, leaves: dict, in_flight):
        """Slots whose flow is finished with nothing left in the fabric."""
        ids = self.slot_ids
        live = self.col_flow[:self.max_active] >= 0
        stock = leaves["x"][ids].sum(axis=1) + in_flight[ids]
        return ids[live & leaves["done"][ids] & (stock == 0)]


def _host(state: FluidState) -> dict:
    """Writable host copies of a state's fields (the ``fc`` record stays a pytree)."""
    out = {}
    for name, value in state.present().items():
        out[name] = jax.tree_util.tree_map(np.array, jax.device_get(value))
    return out


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

    Same model, arguments and per-flow results (module docstring: why they agree); the
    device work follows the flows in the fabric at once, not the flows of the run.

    Args:
      incidence, capacity, size, dt, n_steps, law, params, arrival, delay, latency,
        line_rate, base_rtt, flow_control, fc_params, buffer, smooth,
        solver_iterations, faults, link_latency, nic_links, reorder, loss_recovery,
        mtu, reorder_tolerance, traffic_class, classes, shared_buffer, fifo_bands: as in
        :func:`fabric_jax.simulate_fluid` (``[flows]`` arrays over all flows of the run).
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
    n_steps, window, dt = _check_arguments(n_steps, max_active, window, dt, deps=deps,
                                           routing=routing, save_every=save_every,
                                           init_state=init_state)
    cc = CongestionControl(law, params)
    fc = FlowControlConfig(flow_control).mode
    flows = _flows(incidence, capacity, size, arrival, delay, latency, line_rate, base_rtt,
                   link_latency, nic_links, traffic_class, classes, dt)
    fdt = flows.capacity.dtype
    table = _Slots(flows, int(max_active), cc.law, cc.resolved_params(), fdt)
    lookahead = lookahead_steps(flows.base_rtt, dt, fc)
    if solver_iterations is None and smooth is not None and getattr(smooth, "enabled", False):
        solver_iterations = table.n_cols + 1
    options = dict(law=cc.law, params=cc.resolved_params(), flow_control=fc,
                   fc_params=fc_params, buffer=buffer, smooth=smooth,
                   solver_iterations=solver_iterations, faults=faults,
                   link_latency=link_latency, nic_links=flows.nic, reorder=reorder,
                   loss_recovery=loss_recovery, reorder_tolerance=reorder_tolerance,
                   classes=flows.classes, shared_buffer=shared_buffer,
                   fifo_bands=fifo_bands, **({} if mtu is None else dict(mtu=mtu)))

    k, peak, n_windows = 0, 0, 0
    leaves, in_flight, last = None, None, None
    while k < n_steps:
        steps = min(window, n_steps - k)
        if last is not None:          # take: the flows that are over leave their slot
            leaving = table.over(leaves, in_flight)
            table.take(leaves, in_flight, leaving)
            table.col_flow[leaving] = -1
            table.put(leaves, leaving)
        # put: flows released before the end of the window plus the lookahead
        entering, free, busy, stop = table.entering(
            (k + steps + lookahead) * dt,
            f"t = {k * dt * 1e6:.6g} us (the next {steps + lookahead} steps)")
        if (last is not None and faults is None and busy == 0 and entering.size == 0
                and _at_rest(leaves["fc"])):
            # nothing in the fabric, nothing to admit, flow control at rest: the window
            # would change nothing a flow sees (the stop_when_idle rule); skip it
            k += steps
            leaves["k"][...] = k
            leaves["wire"][...] = 0   # the wires' history is indexed by step
            continue
        table.col_flow[free[:entering.size]] = entering
        table.next_in = stop
        peak = max(peak, busy + entering.size)
        problem = table.problem(steps, dt, options)
        if leaves is None:            # the first window: every column a fresh flow
            leaves = _host(fluid_problem.init_state(problem))
        table.put(leaves, free[:entering.size])
        last = run(problem, FluidState(**leaves))   # run: the window, from the state
        leaves = _host(last.state)
        in_flight = np.asarray(last.in_flight)
        n_windows += 1
        k += steps
    table.take(leaves, in_flight, table.slot_ids[table.col_flow[:table.max_active] >= 0])
    law_state = unpack_law(jnp.asarray(table.law_out, fdt), cc.law.init(
        jnp.asarray(flows.line_rate, fdt), cc.resolved_params()))
    return _slot_result(table.out, leaves, last, law_state, flows, fdt, peak=int(peak),
                        max_active=int(max_active), n_windows=int(n_windows), window=window,
                        lookahead=lookahead)


def _check_arguments(n_steps, max_active, window, dt, **unsupported):
    """``(n_steps, window, dt)`` checked (``window`` defaulted and capped at the run);
    ``ValueError`` for an argument the slot table does not support."""
    for name, val in unsupported.items():
        if val is not None:
            raise ValueError(f"{name} is not supported by simulate_fluid_windowed (the slot "
                             f"table); use fabric_jax.simulate_fluid for runs with {name}")
    if not (isinstance(max_active, (int, np.integer)) and max_active >= 1):
        raise ValueError(f"max_active must be a positive integer (number of flow slots); "
                         f"got {max_active!r}")
    n_steps = check_n_steps(n_steps)
    if window is None:
        window = min(DEFAULT_WINDOW, n_steps)
    if not (isinstance(window, (int, np.integer)) and window >= 1):
        raise ValueError(f"window must be a positive integer number of steps; got {window!r}")
    if isinstance(dt, jax.core.Tracer) or not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be a positive number of seconds; got {dt!r}")
    return n_steps, int(min(window, n_steps)), float(dt)


def _slot_result(out, leaves, last, law_state, flows, fdt, **diagnostics) -> SlotResult:
    """The run's :class:`SlotResult` from its ``[flows]`` arrays ``out``, the slot table's
    last state (``leaves``, the link and run records) and the last window's result."""
    as_f = lambda a: jnp.asarray(a, fdt)  # noqa: E731
    info = FluidInfo(max_residual=as_f(leaves["max_residual"]),
                     stalled=jnp.asarray(~out["done"].all()),
                     paused_time=as_f(np.asarray(last.info.paused_time)),
                     max_queue=as_f(leaves["max_queue"]),
                     stranded_time=as_f(out["stranded_time"]),
                     stranded=jnp.asarray(out["stranded"]), discard_mode=as_f(out["rx_phi"]),
                     solver_iterations=jnp.asarray(leaves["solver_iterations"]))
    corrupted = leaves.get("corrupted", np.zeros(len(flows.capacity)))
    return SlotResult(start=as_f(out["start"]), finish=as_f(out["finish"]),
                      fct=as_f(out["finish"] - flows.arrival), sent=as_f(out["sent"]),
                      delivered=as_f(out["delivered"]), dropped=as_f(out["dropped"]),
                      queued=as_f(out["queued"]), link_queue=as_f(np.asarray(last.link_queue)),
                      law_state=law_state, trajectory=None, info=info, routing_state=None,
                      state=None, in_flight=as_f(out["in_flight"]),
                      discarded=as_f(out["discarded"]), link_corrupted=as_f(corrupted),
                      peak_active=diagnostics["peak"],
                      **{k: v for k, v in diagnostics.items() if k != "peak"})

def _at_rest(fc_state) -> bool:
    """No pause in force or on its way (:class:`fabric_jax.flowcontrol.FlowControlState`)."""
    return not (np.any(np.asarray(fc_state.pause)) or np.any(np.asarray(fc_state.history)))
