"""Time-stepped fluid dynamics of congestion control and link-level flow control.

Units: sizes and queues in bytes, times in seconds, rates and capacities in bytes/s.

This extends :func:`fabric_jax.sim.simulate_flows_fixed_step` (same flow lifecycle:
arrivals, dependency DAG, ``delay``, ``latency``) with senders whose rate is set by a
congestion-control law (:mod:`fabric_jax.cc`), finite queues, and link-level flow
control (:mod:`fabric_jax.flowcontrol`).

State.  For every flow ``f`` the hops of its path are laid out in a padded table
``[flows, hops]`` (entries of the incidence in their COO order within a flow, which is
hop order for incidences built from paths).  ``x[f, h]`` holds the bytes of flow ``f``
waiting in the egress queue of its ``h``-th link; the queue of link ``l`` is
``q_l = sum x[f, h]`` over the entries on ``l``.

One step of length ``dt``:

1. **Senders.**  Feedback generated one base RTT ago (a ring buffer of past signals,
   ``round(base_rtt / dt)`` steps deep per flow) reaches the law, which updates its state;
   the flow offers ``o_f = min(rate_f, line_rate_f, remaining_f / dt)`` while active.
2. **Flow control** fixes each link's usable capacity ``u_l``: ``C_l``, or 0 while
   paused (PFC), or the free downstream buffer per ``dt`` (credits).
3. **Queues are served first**: link ``l`` sends ``s_l = min(q_l, u_l dt)`` queued bytes,
   taken from its entries in proportion to their share of the queue (a fluid FIFO).
   Bytes leaving hop ``h`` join the queue of hop ``h + 1`` (one step per hop, store and
   forward) or are delivered at the last hop.  So a link with a backlog transmits at
   capacity until the queue drains.
4. **Fresh traffic** is cut through: the fabric delivers the max-min fair allocation
   ``a = solve(incidence, u - s/dt, demand=o)`` (:func:`fabric_jax.fairness.solve`).
5. **Excess** ``(o_f - a_f) dt`` is not lost: it waits at the flow's first hop (in path
   order) whose link is overloaded by the offered rates (``sum A o > u - s/dt``).  All
   links before it carry the flow's full offered rate, which fits by construction.
6. **Buffers**: a pool above its limit (egress queue for ``drop``/``trim``; ingress
   pool, i.e. PFC headroom overflow, for ``pfc``) drops the overflow from the step's
   arrivals.  Credits never drop (an overshoot of at most one step of traffic, from
   credits returned one step late, is kept).  Dropped bytes go back to the sender's backlog and are resent.
7. **Signals** from the new queues: per-link marking (the law's ``mark``), queueing
   delay ``q_l / C_l`` (added to the path RTT), HPCC utilisation
   ``q_l/(C_l T) + tx_l/C_l``, losses; written into the ring buffer.

Accounting (checked each step): ``sent = delivered + queued + dropped`` exactly up to
float round-off (``FluidInfo.max_residual``).  A flow finishes when all its bytes are
delivered; its finish time is interpolated inside the step, plus ``latency``.

Approximations, stated: entries of one flow form one chain (a flow split over several
paths is treated as one path through all its links); the excess of a flow waits at one
hop; queued bytes advance one hop per step; signals return after the base RTT (queueing
delay enters the RTT *signal* but not the delay line).

Transformations: the loop is a ``lax.scan`` (nested for ``save_every``), so the whole
run is jit-compiled once per shape and is reverse-mode differentiable when the rate
solver runs a fixed number of iterations (``solver_iterations``; the default in the
smooth mode).  Use ``smooth=fabric_jax.smooth.smooth(T)`` for finite gradients through
marking and pause thresholds.

Dynamic routing (``routing=``, :mod:`fabric_jax.routing`).  With a
:class:`fabric_jax.routing.Routing` each flow keeps all its candidate paths
(``[flows, paths, hops]``); its hop table is laid out path by path and queued bytes
advance along their own path (not through the other candidates).  At the start of each
step the policy sees the link state (:class:`fabric_jax.routing.RoutingView`) and sets
the flow's split over its paths; the incidence weights of the step are that split.  The
excess of a flow waits at the first overloaded hop of each of its overloaded paths (in
proportion to the split); marks, RTT and utilisation signals are split-weighted means
over paths.  Without ``routing`` the behaviour is unchanged.

Faults (``faults=``, :mod:`fabric_jax.faults`).  A schedule of events ``(time, links,
factor)`` sets each link's capacity in force, ``C_l(k) = factor_l(k) * C_l``, per step
(a piecewise-constant ``[events, links]`` table indexed by ``searchsorted`` on the step
index; an event at ``T`` applies from step ``ceil(T / dt)``).  ``C_l(k)`` replaces
``C_l`` everywhere in the step: flow control, service, marking, RTT and utilisation
signals, and the routing view.  A degraded link (``0 < factor < 1``) is simply slower.
A failed link (``factor = 0``):

* **queued bytes are dropped**: at the start of every step in which a link is down, the
  bytes in its egress queue (including bytes that reached it from upstream hops since)
  are removed, counted in ``dropped`` and returned to their sender's backlog, which
  resends them on whatever path routing then uses (as a real sender retransmits lost
  packets).  They also enter the ``loss`` signal of the congestion-control law.
  Bytes already past the failed link keep going.
* **routing** (``routing=``): a path is dead while any of its links is down; the policy
  reacts (:mod:`fabric_jax.routing`, "Link failures") and, whatever it does, the
  loop sends nothing on dead paths (the split is restricted to live paths and
  renormalised).
* **stranded flows**: a flow whose every path with weight (its only path, without
  ``routing``) is dead offers nothing (its sender is blocked) until a path recovers.
  ``FluidInfo.stranded_time`` accumulates, per flow, the time it was active and
  stranded; ``FluidInfo.stranded`` flags the flows stranded in the last step.

Conservation holds through failures and recoveries: ``sent = delivered + queued +
dropped`` per flow (fault drops included), checked each step (``max_residual``).

Checkpoint and resume (``init_state=``, :mod:`fabric_jax.checkpoint`).
``FluidResult.state`` is the complete carry of the loop after its last step (queues,
sender, law, flow-control and routing state, feedback ring, accumulated diagnostics and
the step counter ``k``).  Passing it back as ``init_state`` (in memory, or saved with
:func:`~fabric_jax.checkpoint.save_checkpoint` and read with
:func:`~fabric_jax.checkpoint.load_checkpoint`) continues the run at step ``k``: the
simulated time is ``k dt``, so arrivals, fault times and trajectory times stay absolute.
The step function is the same, so on CPU a run cut into pieces is bit-identical to the
uninterrupted run; ``n_steps`` and ``save_every`` count the steps of the call.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import checkpoint as ckm
from . import faults as fm
from . import flowcontrol as fcm
from . import smooth as sm
from .cc import base as ccbase
from .fairness import solve
from .incidence import Incidence
from .sim import _prepare, release_times

__all__ = ["simulate_fluid", "FluidResult", "FluidTrajectory", "FluidInfo", "COMPLETION_RTOL"]

#: A flow is complete when ``delivered >= size * (1 - COMPLETION_RTOL)`` (float32
#: accounting of resent bytes leaves a few ulps of a flow's size undelivered).
COMPLETION_RTOL = 1e-5


@dataclasses.dataclass(frozen=True)
class FluidInfo:
    """Diagnostics.

    Attributes:
      max_residual: max over steps of ``|sent - delivered - dqueued - dropped|`` in the
        step, bytes (float round-off only; fault drops included; over all calls of a
        resumed run).
      stalled: some flow did not finish within ``n_steps``.
      paused_time: ``[links]`` seconds each link was paused (PFC) or credit-starved
        (time-integral of ``1 - usable/C``).
      max_queue: ``[links]`` largest egress queue seen, bytes.
      stranded_time: ``[flows]`` seconds each flow was active but had no live path
        (every path it routes on crosses a failed link, ``faults=``); zeros without
        faults.
      stranded: ``[flows]`` bool, the flow was active and stranded in the last step.
    """

    max_residual: Any
    stalled: Any
    paused_time: Any
    max_queue: Any
    stranded_time: Any = None
    stranded: Any = None


@dataclasses.dataclass(frozen=True)
class FluidTrajectory:
    """Snapshots every ``save_every`` steps (leading axis ``saves``).

    Attributes:
      t: ``[saves]`` time at the end of the saved step, s.
      rate: ``[saves, flows]`` offered rate, bytes/s.
      throughput: ``[saves, flows]`` delivered bytes in the step / dt, bytes/s.
      queue: ``[saves, links]`` egress queues, bytes.
      usable: ``[saves, links]`` usable capacity (pause / credits), bytes/s.
      mark: ``[saves, flows]`` path marking probability emitted.
      law_state: the law's state pytree with a leading ``saves`` axis.
      sent, delivered, queued, dropped: ``[saves]`` totals over flows, bytes.
    """

    t: Any
    rate: Any
    throughput: Any
    queue: Any
    usable: Any
    mark: Any
    law_state: Any
    sent: Any
    delivered: Any
    queued: Any
    dropped: Any


@dataclasses.dataclass(frozen=True)
class FluidResult:
    """Result of :func:`simulate_fluid`.

    Attributes:
      start, finish, fct: ``[flows]`` seconds (``finish = inf`` if unfinished).
      sent: ``[flows]`` bytes put on the wire (including resent bytes).
      delivered: ``[flows]`` bytes delivered (goodput).
      dropped: ``[flows]`` bytes dropped or trimmed.
      queued: ``[flows]`` bytes in queues at the end.
      link_queue: ``[links]`` egress queues at the end, bytes.
      law_state: final congestion-control state.
      trajectory: :class:`FluidTrajectory` or ``None``.
      info: :class:`FluidInfo`.
      routing_state: final routing-policy state (``routing=`` runs), else ``None``.
      state: the loop's complete carry after the last step (a dict pytree of arrays,
        with the step counter ``state["k"]``): pass it as ``init_state=`` to continue the
        run, or save it with :func:`fabric_jax.checkpoint.save_checkpoint`.
    """

    start: Any
    finish: Any
    fct: Any
    sent: Any
    delivered: Any
    dropped: Any
    queued: Any
    link_queue: Any
    law_state: Any
    trajectory: Any
    info: FluidInfo
    routing_state: Any = None
    state: Any = None


for _cls in (FluidInfo, FluidTrajectory, FluidResult):
    jax.tree_util.register_dataclass(_cls)


# ----------------------------------------------------------------- host side
def _hop_table(inc: Incidence):
    """``[flows, hops]`` COO entry index of each hop (-1 padded), NumPy."""
    li = np.asarray(inc.link_idx)
    fi = np.asarray(inc.flow_idx)
    w = inc.weight
    if isinstance(w, jax.core.Tracer):
        keep = np.ones(li.shape, bool)
    else:
        keep = np.asarray(w) != 0
    e = np.flatnonzero(keep)
    order = e[np.argsort(fi[e], kind="stable")]
    counts = np.bincount(fi[order], minlength=inc.n_flows)
    n_hops = max(int(counts.max(initial=0)), 1)
    pos = np.arange(order.size) - np.repeat(np.cumsum(counts) - counts, counts)
    entry = np.full((inc.n_flows, n_hops), -1, np.int64)
    entry[fi[order], pos] = order
    return entry


def _check_positive_array(name, x, shape):
    if x is None or isinstance(x, jax.core.Tracer):
        return
    a = np.asarray(x, float)
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {list(shape)}; got {list(a.shape)}")
    if np.any(np.isnan(a)) or np.any(a <= 0):
        raise ValueError(f"{name} must be > 0 everywhere; got min {np.nanmin(a)!r}")


def simulate_fluid(incidence, capacity, size, *, dt, n_steps: int, law="none", params=None,
                   arrival=None, deps=None, delay=None, latency=None, line_rate=None,
                   base_rtt=None, flow_control="none", fc_params=None, buffer=None,
                   smooth=None, save_every: int | None = None,
                   solver_iterations: int | None = None, routing=None, faults=None,
                   init_state=None) -> FluidResult:
    """Fluid simulation of flows under congestion control and link-level flow control.

    Args:
      incidence: :class:`~fabric_jax.Incidence` or dense ``[links, flows]``; the entries
        of each flow in COO order are its hops in path order.
      capacity: ``[links]`` bytes/s.
      size: ``[flows]`` bytes.
      dt: step, seconds (e.g. 1e-6).
      n_steps: number of steps (static).
      law: a :class:`fabric_jax.cc.Law` or its name (``"none"``, ``"dcqcn"``,
        ``"ibcc"``, ``"hpcc"``, ``"swift"``, ``"nscc"``).
      params: the law's parameter pytree (default ``law.default_params()``).
      arrival, deps, delay, latency: flow lifecycle, as in
        :func:`fabric_jax.simulate_flows` (seconds; ``deps`` ``[flows, max_deps]``).
      line_rate: ``[flows]`` NIC line rate, bytes/s (default: the smallest capacity on
        the flow's path).
      base_rtt: ``[flows]`` propagation round trip, seconds: the feedback delay
        (default ``max(2 * latency, dt)``).
      flow_control: a mode of :data:`fabric_jax.flowcontrol.MODES` or a
        :class:`~fabric_jax.flowcontrol.FlowControl`.
      fc_params: :class:`~fabric_jax.flowcontrol.FlowControlParams`; default from
        ``buffer`` (PFC thresholds via :func:`~fabric_jax.flowcontrol.pfc_thresholds`
        with a reaction time of ``pause_delay * dt``).
      buffer: ``[links]`` (or scalar) buffer per link, bytes (default ``inf``).
      smooth: :class:`fabric_jax.smooth.Smoothing` (default exact).
      save_every: save a :class:`FluidTrajectory` snapshot every this many steps
        (must divide ``n_steps``); ``None``: no trajectory.
      solver_iterations: fixed iteration count of the per-step max-min solve (needed
        for reverse-mode gradients; default: exact while-loop, or ``flows + 1`` in the
        smooth mode).
      routing: a :class:`fabric_jax.routing.Routing` (policy, its params and initial
        state over a ``[flows, paths, hops]`` path table): dynamic per-step splits.
        ``None`` (default): the static routing of ``incidence``.
      faults: link faults during the run (see "Faults" above and
        :mod:`fabric_jax.faults`): a list of events ``(time_s, links, factor)`` /
        :func:`fabric_jax.faults.link_event` (factor 0 fails the links, ``0 < f < 1``
        degrades them, 1 recovers them; times in seconds of simulated time), or a
        compiled :class:`fabric_jax.faults.FaultSchedule`.  ``None``: no faults.
      init_state: continue a run: ``FluidResult.state`` of an earlier call, or a
        :class:`fabric_jax.checkpoint.Checkpoint` loaded from disk.  The other
        arguments must be those of the earlier call (only ``n_steps`` and
        ``save_every`` may change); time continues from the state's step counter, so
        ``arrival``, ``faults`` and trajectory times stay absolute.  On CPU, N steps +
        resume + M steps is bit-identical to N + M steps in one call.

    Returns:
      :class:`FluidResult`.

    Raises:
      ValueError: bad shapes or values, naming the argument (``faults``: a time not
        finite or negative, a link out of range, a factor outside ``[0, 1]``;
        ``init_state``: a structure, shape or dtype that does not match this run).
    """
    law = ccbase.get(law)
    if isinstance(flow_control, str):
        flow_control = fcm.FlowControl(flow_control)
    if not isinstance(flow_control, fcm.FlowControl):
        raise ValueError("flow_control must be a mode string or a FlowControl; "
                         f"got {flow_control!r}")
    if not (isinstance(n_steps, (int, np.integer)) and n_steps >= 1):
        raise ValueError(f"n_steps must be a positive integer; got {n_steps!r}")
    if not isinstance(dt, jax.core.Tracer) and not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be a positive number of seconds; got {dt!r}")
    if save_every is not None and not (isinstance(save_every, (int, np.integer))
                                       and save_every >= 1 and n_steps % save_every == 0):
        raise ValueError(f"save_every must be a positive integer dividing n_steps={n_steps}; "
                         f"got {save_every!r}")
    if solver_iterations is not None and not (
            isinstance(solver_iterations, (int, np.integer)) and solver_iterations >= 1):
        raise ValueError(f"solver_iterations must be a positive integer; got {solver_iterations!r}")
    smooth = sm.EXACT if smooth is None else smooth
    if not isinstance(smooth, sm.Smoothing):
        raise ValueError("smooth must be a fabric_jax.smooth.Smoothing (e.g. smooth.smooth(0.05))")
    n_flows_guess = np.shape(size)[0] if np.ndim(size) == 1 else None
    if arrival is None and n_flows_guess is not None:
        arrival = np.zeros(n_flows_guess)
    inc, capacity, deps, flows = _prepare(incidence, capacity, arrival, size, deps, delay,
                                          latency, None)
    n_links, n_flows = inc.n_links, inc.n_flows
    fdt = capacity.dtype
    if routing is None:
        entry = _hop_table(inc)
        exists = entry >= 0
        link_tab = np.where(exists, np.asarray(inc.link_idx)[np.maximum(entry, 0)], n_links)
        w_tab = jnp.where(jnp.asarray(exists), jnp.asarray(inc.weight, fdt)[np.maximum(entry, 0)],
                          0.0)
        seg, policy, rparams, rstate0 = link_tab.shape[1], None, None, None
    else:
        rlinks = np.asarray(routing.links)
        rhop = np.asarray(routing.hop_mask, bool) & (rlinks >= 0)
        if rlinks.ndim != 3 or rlinks.shape[0] != n_flows:
            raise ValueError(f"routing.links must be [flows, paths, hops] with flows = "
                             f"{n_flows}; got shape {rlinks.shape}")
        if rlinks.size and rlinks.max() >= n_links:
            raise ValueError(f"routing.links uses link {int(rlinks.max())} but capacity has "
                             f"{n_links} links")
        seg = max(rlinks.shape[2], 1)
        link_tab = np.where(rhop, rlinks, n_links).reshape(n_flows, -1)
        w_tab = jnp.asarray(rhop.reshape(n_flows, -1), fdt)
        policy, rparams, rstate0 = routing.policy, routing.params, routing.state

    _check_positive_array("line_rate", line_rate, (n_flows,))
    _check_positive_array("base_rtt", base_rtt, (n_flows,))
    if line_rate is None:
        cap_ext = np.append(np.asarray(capacity, float), np.inf)
        lr = cap_ext[link_tab].min(axis=1)
        lr = np.where(np.isfinite(lr) & (lr > 0), lr, np.max(np.asarray(capacity), initial=1.0))
        line_rate = lr
    line_rate = jnp.asarray(line_rate, fdt)
    if base_rtt is None:
        base_rtt = np.maximum(2 * np.asarray(flows["latency"]), float(dt))
    if isinstance(base_rtt, jax.core.Tracer) or isinstance(dt, jax.core.Tracer):
        raise ValueError("base_rtt and dt must be concrete: they set the delay-line length")
    fb_steps = np.maximum(np.rint(np.asarray(base_rtt, float) / float(dt)).astype(np.int32), 1)
    ring_len = int(fb_steps.max(initial=1) + flow_control.rto_steps + 1)

    if params is None:
        params = law.default_params()
    if fc_params is None:
        buf = np.inf if buffer is None else buffer
        if flow_control.mode == "pfc" and not isinstance(buf, jax.core.Tracer):
            xoff, xon = fcm.pfc_thresholds(np.asarray(capacity), buf,
                                           reaction_s=flow_control.pause_delay * float(dt))
            fc_params = fcm.flow_control_params(n_links, buffer=buf, xoff=xoff, xon=xon)
        else:
            fc_params = fcm.flow_control_params(n_links, buffer=buf)
    if save_every is None:
        n_outer, inner, keep_traj = 1, int(n_steps), False
    else:
        n_outer, inner, keep_traj = int(n_steps) // save_every, int(save_every), True
    if solver_iterations is None and smooth.enabled:
        solver_iterations = n_flows + 1
    sched = None
    if faults is not None:
        sched = fm.fault_schedule(faults, n_links, float(dt))
        sched = fm.FaultSchedule(step=jnp.asarray(sched.step, jnp.int32),
                                 factor=jnp.asarray(sched.factor, fdt))
    base_rtt = jnp.asarray(base_rtt, fdt)
    carry0 = None
    if init_state is not None:
        template = jax.eval_shape(
            functools.partial(_init_carry, law, flow_control, ring_len, policy is not None,
                              n_links, link_tab.shape[1]),
            flows["size"], line_rate, base_rtt, params, rstate0)
        carry0 = ckm.restore(init_state, template, name="init_state")
    res = _run(law, flow_control, n_outer, inner, ring_len, solver_iterations, keep_traj,
               int(seg), policy, jnp.asarray(link_tab, jnp.int32), w_tab, capacity, deps,
               flows, line_rate, base_rtt, jnp.asarray(fb_steps), params,
               fc_params, smooth, jnp.asarray(dt, fdt), rparams, rstate0, sched, carry0)
    return res


# ---------------------------------------------------------------- device side
def _seg(values, idx, n):
    """Sums ``[flows, hops]`` values into ``n + 1`` segments (the last one = padding)."""
    return jax.ops.segment_sum(values.ravel(), idx.ravel(), num_segments=n + 1)


def _ext(a, fill=0.0):
    return jnp.concatenate([a, jnp.full((1,), fill, a.dtype)])


def _init_carry(law, fc, ring_len, routed, n_links, n_hops, size, line_rate, base_rtt, params,
                rstate0):
    """The loop's carry before step 0 (``FluidResult.state`` has the same structure)."""
    n_flows = size.shape[0]
    fdt = line_rate.dtype
    sig_fields = ("mark", "rtt", "util", "rate", "loss", "rx_share")
    ring0 = {k: jnp.zeros((ring_len, n_flows), fdt) for k in sig_fields}
    ring0["rtt"] = jnp.broadcast_to(base_rtt, (ring_len, n_flows)).astype(fdt)
    ring0["rx_share"] = jnp.broadcast_to(line_rate, (ring_len, n_flows)).astype(fdt)
    inf = jnp.asarray(jnp.inf, fdt)
    zf = jnp.zeros((n_flows,), fdt)
    carry = dict(k=jnp.asarray(0, jnp.int32), remaining=jnp.asarray(size, fdt),
                 x=jnp.zeros((n_flows, n_hops), fdt),
                 start=jnp.full((n_flows,), inf), finish=jnp.full((n_flows,), inf),
                 done=jnp.zeros((n_flows,), bool), sent=zf, delivered=zf, dropped=zf,
                 law=law.init(line_rate, params), fc=fcm.init_state(fc, n_links, fdt),
                 ring=ring0, max_residual=jnp.asarray(0.0, fdt),
                 max_queue=jnp.zeros((n_links,), fdt), stranded_time=zf,
                 stranded=jnp.zeros((n_flows,), bool))
    if routed:
        carry.update(route=rstate0, load=jnp.zeros((n_links,), fdt),
                     mark_l=jnp.zeros((n_links,), fdt), rate=zf)
    return carry


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 4, 5, 6, 7, 8))
def _run(law, fc, n_outer, inner, ring_len, solver_iterations, keep_traj, seg, policy,
         link_tab, w_tab, capacity, deps, flows, line_rate, base_rtt, fb_steps, params, fcp,
         smooth, dt, rparams, rstate0, sched, carry):
    n_flows, n_hops = link_tab.shape
    n_seg = n_hops // seg  # paths per flow (1 without dynamic routing)
    n_links = capacity.shape[0]
    fdt = capacity.dtype
    arrival, size, delay, latency = (flows["arrival"], flows["size"], flows["delay"],
                                     flows["latency"])

    def per_path(a):  # [flows, hops] -> [flows, paths, hops of a path]
        return a.reshape(n_flows, n_seg, seg)

    def shift_in(a, fill):  # value of the previous hop of the same path
        a3 = per_path(a)
        pad = jnp.full((n_flows, n_seg, 1), fill, a.dtype)
        return jnp.concatenate([pad, a3[:, :, :-1]], axis=2).reshape(n_flows, n_hops)

    def shift_out(a, fill):  # value of the next hop of the same path
        a3 = per_path(a)
        pad = jnp.full((n_flows, n_seg, 1), fill, a.dtype)
        return jnp.concatenate([a3[:, :, 1:], pad], axis=2).reshape(n_flows, n_hops)

    valid = (link_tab < n_links) & (w_tab != 0)
    link_tab = jnp.where(valid, link_tab, n_links)
    prev_tab = shift_in(link_tab, n_links)
    prev_tab = jnp.where(valid, prev_tab, n_links)
    nxt_valid = shift_out(valid, False)
    last = valid & ~nxt_valid
    last_link = jnp.max(jnp.where(last, link_tab, -1), axis=1)
    last_link = jnp.where(last_link < 0, n_links, last_link)
    path_valid = jnp.any(per_path(valid), axis=2)
    hops = (jnp.sum(valid, axis=1) / jnp.maximum(jnp.sum(path_valid, axis=1), 1)).astype(fdt)
    inc = Incidence(jnp.where(valid, link_tab, 0).ravel().astype(jnp.int32),
                    jnp.repeat(jnp.arange(n_flows, dtype=jnp.int32), n_hops),
                    jnp.where(valid, w_tab, 0.0).ravel(), n_links, n_flows)
    t_hpcc = jnp.max(base_rtt, initial=dt)
    ar = jnp.arange(n_flows)
    law0 = law.init(line_rate, params)
    lossless = fc.lossless
    lossy_pool = fc.mode in ("drop", "trim")
    pool_tab = link_tab if lossy_pool else prev_tab
    loss_lag = fb_steps + (fc.rto_steps if fc.mode == "drop" else 0)

    sig_fields = ("mark", "rtt", "util", "rate", "loss", "rx_share")

    def where_started(started, new, old):
        def pick(a, b):
            s = started.reshape(started.shape + (1,) * (jnp.ndim(a) - 1))
            return jnp.where(s, a, b)
        return jax.tree_util.tree_map(pick, new, old)

    def step(c, _):
        k = c["k"]
        t = k.astype(fdt) * dt
        rel = release_times(deps, c["finish"], arrival, delay)
        start = jnp.where(jnp.isfinite(c["start"]), c["start"], rel)
        started = start < t + dt
        active = started & ~c["done"]
        # faults: this step's capacity; bytes queued on failed links go back to senders
        x_old = c["x"]
        if sched is None:
            cap_k, x = capacity, x_old
            fault_drop = jnp.zeros((n_flows,), fdt)
        else:
            cap_k = capacity * fm.capacity_factor(sched, k)
            dead_e = valid & ~_ext(cap_k > 0, True)[link_tab]
            x = jnp.where(dead_e, 0.0, x_old)
            fault_drop = jnp.sum(jnp.where(dead_e, x_old, 0.0), axis=1)
            path_ok = ~jnp.any(per_path(dead_e), axis=2)  # [flows, paths]
        cap_pos = cap_k > 0
        safe_cap = jnp.where(cap_pos, cap_k, 1.0)
        # 0. routing: the policy sets this step's split over each flow's paths
        if policy is None:
            split = jnp.ones((n_flows, 1), fdt)
            inc_k = inc
            stranded = (jnp.zeros((n_flows,), bool) if sched is None else ~path_ok[:, 0])
        else:
            q0 = _seg(x, link_tab, n_links)[:n_links]
            rview = policy.view(queue=q0, capacity=cap_k, load=c["load"],
                                mark=c["mark_l"], flow_rate=c["rate"], active=active, t=t)
            rstate = policy.step(c["route"], rview, dt, rparams)
            split = rstate.split.astype(fdt)
            if sched is None:
                stranded = jnp.zeros((n_flows,), bool)
            else:  # no traffic on dead paths, whatever the policy does
                live = jnp.where(path_ok & path_valid, split, 0.0)
                lw = jnp.sum(live, axis=1, keepdims=True)
                stranded = lw[:, 0] <= 0
                split = jnp.where(lw > 0, live / jnp.where(lw > 0, lw, 1.0), split)
            w_dyn = jnp.where(valid, jnp.repeat(split, seg, axis=1), 0.0)
            inc_k = inc.with_weight(w_dyn.ravel())
        # 1. senders, with feedback one base RTT old
        idx = (k - fb_steps) % ring_len
        lidx = (k - loss_lag) % ring_len
        ring = c["ring"]
        sig = ccbase.FlowSignals(
            mark=ring["mark"][idx, ar], rtt=ring["rtt"][idx, ar], base_rtt=base_rtt,
            util=ring["util"][idx, ar], rate=ring["rate"][idx, ar],
            loss=ring["loss"][lidx, ar], rx_share=ring["rx_share"][idx, ar],
            line_rate=line_rate, hops=hops)
        law_state = law.step(c["law"], sig, dt, params, smooth)
        law_state = where_started(started, law_state, law0)
        remaining = c["remaining"]
        offered = jnp.minimum(jnp.minimum(law_state.rate, line_rate), remaining / dt)
        offered = jnp.where(active & ~stranded, jnp.maximum(offered, 0.0), 0.0)
        # 2. flow control
        q = _seg(x, link_tab, n_links)[:n_links]
        ingress = _seg(x, prev_tab, n_links)[:n_links]
        usable = fcm.usable_capacity(fc, c["fc"], cap_k, ingress, fcp, dt, smooth)
        # 3. queues served first (fluid FIFO)
        serve = jnp.minimum(q, usable * dt)
        q_pos = q > 0
        frac = jnp.where(q_pos, serve / jnp.where(q_pos, q, 1.0), 0.0)
        drain = x * _ext(frac)[link_tab]
        fresh = jnp.maximum(usable - serve / dt, 0.0)
        # 4. fresh traffic: max-min of the offered rates
        sol = solve(inc_k, fresh, offered, iterations=solver_iterations)
        alloc = jnp.minimum(sol.rates, offered)
        # 5. excess waits at the first overloaded hop (of each overloaded path)
        excess = (offered - alloc) * dt
        load_o = inc_k.link_load(offered)
        over = load_o > fresh * (1.0 + 1e-6)
        over_e = per_path(_ext(over, False)[link_tab] & valid)
        first = jnp.argmax(over_e, axis=2)
        has_over = jnp.any(over_e, axis=2) & (split > 0)
        share = jnp.where(has_over, split, 0.0)
        tot = jnp.sum(share, axis=1, keepdims=True)
        share = jnp.where(tot > 0, share / jnp.where(tot > 0, tot, 1.0), split)
        at_first = jnp.arange(seg)[None, None, :] == first[:, :, None]
        place = jnp.where(at_first, (excess[:, None] * share)[:, :, None], 0.0)
        place = place.reshape(n_flows, n_hops)
        inflow = shift_in(drain, 0.0)
        inflow = jnp.where(valid, inflow, 0.0)
        deliv_q = jnp.sum(jnp.where(last, drain, 0.0), axis=1)
        arrivals = place + inflow
        x_new = x - drain + arrivals
        # 6. buffers
        if fc.mode in ("pfc", "drop", "trim"):
            level = _seg(x_new, pool_tab, n_links)[:n_links]
            over_b = jnp.maximum(level - fcp.buffer, 0.0)
            arr_l = _seg(arrivals, pool_tab, n_links)[:n_links]
            a_pos = arr_l > 0
            ratio = jnp.where(a_pos, jnp.minimum(over_b / jnp.where(a_pos, arr_l, 1.0), 1.0), 0.0)
            drop_e = arrivals * _ext(ratio)[pool_tab]
            x_new = x_new - drop_e
            dropped_now = jnp.sum(drop_e, axis=1)
        else:
            dropped_now = jnp.zeros((n_flows,), fdt)
        x_new = jnp.maximum(x_new, 0.0)
        sent_now = offered * dt
        deliv_now = alloc * dt + deliv_q
        dropped_now = dropped_now + fault_drop
        residual = jnp.abs(jnp.sum(sent_now) - jnp.sum(deliv_now)
                           - (jnp.sum(x_new) - jnp.sum(x_old)) - jnp.sum(dropped_now))
        delivered_old = c["delivered"]
        delivered = delivered_old + deliv_now
        remaining = jnp.maximum(remaining - sent_now + dropped_now, 0.0)
        completes = active & (delivered >= size * (1.0 - COMPLETION_RTOL))
        need = jnp.maximum(size - delivered_old, 0.0)
        got_pos = deliv_now > 0
        tfrac = jnp.clip(jnp.where(got_pos, need / jnp.where(got_pos, deliv_now, 1.0), 0.0), 0.0, 1.0)
        # A flow never finishes before it starts (a zero-byte flow released inside the
        # step completes at its release time).
        finish = jnp.where(completes, jnp.maximum(t + dt * tfrac, start) + latency,
                           c["finish"])
        done = c["done"] | completes
        # 7. signals from the new queues
        q_new = _seg(x_new, link_tab, n_links)[:n_links]
        tx = serve / dt + inc_k.link_load(alloc)
        view = ccbase.LinkView(queue=q_new, capacity=cap_k, usable=usable, tx_rate=tx,
                               buffer=fcp.buffer, base_rtt=t_hpcc)
        mark_l = law.mark(view, params, smooth)
        valid3 = per_path(valid)
        p_path = jnp.sum(split * ccbase.path_mark(per_path(_ext(mark_l)[link_tab]), valid3),
                         axis=1)
        qdel_l = jnp.where(cap_pos, q_new / safe_cap, 0.0)
        rtt = base_rtt + jnp.sum(
            split * jnp.sum(jnp.where(valid3, per_path(_ext(qdel_l)[link_tab]), 0.0), axis=2),
            axis=1)
        util_l = jnp.where(cap_pos, q_new / (safe_cap * t_hpcc) + tx / safe_cap, 0.0)
        util = jnp.sum(
            split * jnp.max(jnp.where(valid3, per_path(_ext(util_l)[link_tab]), 0.0), axis=2),
            axis=1)
        still = active & ~completes
        n_rx = jax.ops.segment_sum(still.astype(fdt), last_link, num_segments=n_links + 1)
        rx_share = 0.99 * _ext(cap_k)[last_link] / jnp.maximum(n_rx[last_link], 1.0)
        w = k % ring_len
        new_sig = dict(mark=p_path, rtt=rtt, util=util, rate=offered, loss=dropped_now / dt,
                       rx_share=rx_share)
        ring = {f: ring[f].at[w].set(new_sig[f]) for f in sig_fields}
        out = _seg(drain, prev_tab, n_links)[:n_links]
        ingress_new = _seg(x_new, prev_tab, n_links)[:n_links]
        fc_state = fcm.update(fc, c["fc"], ingress_new, out, cap_k, usable, fcp, dt, smooth)
        new = dict(c, k=k + 1, remaining=remaining, x=x_new, start=start, finish=finish,
                   done=done, sent=c["sent"] + sent_now, delivered=delivered,
                   dropped=c["dropped"] + dropped_now, law=law_state, fc=fc_state, ring=ring,
                   max_residual=jnp.maximum(c["max_residual"], residual),
                   max_queue=jnp.maximum(c["max_queue"], q_new),
                   stranded_time=c["stranded_time"] + jnp.where(active & stranded, dt, 0.0),
                   stranded=active & stranded)
        if policy is not None:
            new.update(route=rstate, load=load_o, mark_l=mark_l, rate=offered)
        snap = dict(t=t + dt, rate=offered, throughput=deliv_now / dt, queue=q_new,
                    usable=usable, mark=p_path, law_state=law_state)
        return new, snap

    if carry is None:
        carry = _init_carry(law, fc, ring_len, policy is not None, n_links, n_hops, size,
                            line_rate, base_rtt, params, rstate0)

    def chunk(c, j):
        c, snaps = jax.lax.scan(step, c, None, length=inner)
        if not keep_traj:
            return c, None
        snap = jax.tree_util.tree_map(lambda a: a[-1], snaps)
        totals = dict(sent=jnp.sum(c["sent"]), delivered=jnp.sum(c["delivered"]),
                      queued=jnp.sum(c["x"]), dropped=jnp.sum(c["dropped"]))
        return c, dict(snap, **totals)

    c, traj = jax.lax.scan(chunk, carry, jnp.arange(n_outer, dtype=jnp.int32))
    start = jnp.where(jnp.isfinite(c["start"]), c["start"],
                      release_times(deps, c["finish"], arrival, delay))
    trajectory = FluidTrajectory(**traj) if keep_traj else None
    info = FluidInfo(max_residual=c["max_residual"], stalled=~jnp.all(c["done"]),
                     paused_time=c["fc"].paused_time, max_queue=c["max_queue"],
                     stranded_time=c["stranded_time"], stranded=c["stranded"])
    return FluidResult(start=start, finish=c["finish"], fct=c["finish"] - arrival,
                       sent=c["sent"], delivered=c["delivered"], dropped=c["dropped"],
                       queued=jnp.sum(c["x"], axis=1),
                       link_queue=_seg(c["x"], link_tab, n_links)[:n_links],
                       law_state=c["law"], trajectory=trajectory, info=info,
                       routing_state=c.get("route"), state=c)
