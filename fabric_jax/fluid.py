"""Time-stepped fluid dynamics of congestion control and link-level flow control.

Units: sizes and queues in bytes, times in seconds, rates and capacities in bytes/s.

This extends :func:`fabric_jax.sim.simulate_flows_fixed_step` (same flow lifecycle:
arrivals, dependency DAG, ``delay``) with senders whose rate is set by a
congestion-control law (:mod:`fabric_jax.cc`), finite queues, wires with latency
(:mod:`fabric_jax.links`), and link-level flow control (:mod:`fabric_jax.flowcontrol`).

State (an explicit dict pytree, ``FluidResult.state``).  Per flow and hop of its path
(the padded hop table of :mod:`fabric_jax.links`): ``queue[f, h]``, bytes standing in
the egress queue of the hop's link, and ``transit[f, h]``, bytes on the wire towards
it at the end of a step (zero unless the route graph has cycles,
:func:`fabric_jax.links.serve_through`).  Per flow: what entered the wire to the
receiver in the last steps (``wire``, a ``[depth, flows]`` history,
:func:`fabric_jax.links.wire_step`), the sender (``remaining``; ``law``, the law's state
and the offer, :func:`pack_law`), the feedback ring (the signals emitted in the last
``ring_len`` steps, ``[ring_len, flows, signals]``), counters.  Per link: flow-control
state.  The carry is laid out for few kernels per step (one array per kind of record,
written once per step; see "Kernels" below).

One step of length ``dt`` is a short sequence of stages (functions of
:mod:`fabric_jax.fluid_step`, in this order):

1. **clock and faults** (``_clock``, ``_apply_faults``): which flows are active; the
   capacity in force ``C_l(k)``; bytes queued on or travelling to a failed link are
   dropped and returned to their sender.
2. **route** (``_route``): with ``routing=``, the policy sets each flow's split over
   its paths (:mod:`fabric_jax.routing`).
3. **offer rates** (``_offer``): the signals emitted one base RTT ago (the feedback
   ring; a delay of ``n + phi`` steps reads steps ``k - n`` and ``k - n - 1`` weighted
   ``1 - phi`` and ``phi``) reach the law, which updates
   its state; the flow offers ``o_f = min(min(rate_f, line_rate_f) p_f,
   remaining_f / dt)``, ``p_f`` the part of the step after its release (1 after its
   first step).
4. **allocate** (``_transmit``): flow control fixes each link's usable capacity
   ``u_l`` (``C_l``, 0 while paused, or the free downstream buffer per ``dt``).
   Queues are served first (:func:`fabric_jax.links.serve`: ``s_l = min(q_l + a_l, u_l
   dt)``), as FIFOs: the standing bytes band by band, oldest first, then the bytes
   arriving in the step (``fifo_bands`` bands per queue, see "FIFO queues" below);
   each host NIC sends its max-min share of its flows' offers, ``n = max-min over the
   NIC ports only (u - s/dt, demand=o)`` (``_nic_send``; the rest of an offer is not
   sent); the sent rates share what is left on their paths, ``a =
   max-min(u - s/dt, demand=n)`` (:func:`fabric_jax.fairness.solve`) and cross the
   fabric cut-through.  With several paths per flow the max-min is over the flow's
   paths, each sending ``n_f s_fp`` (its split; ``_allocate_paths``): a congested path
   does not hold back the flow's packets on the others.
5. **transmit and queue** (``_transmit``): the excess ``(n_f s_fp - a_fp) dt`` of each
   path waits at its first switch port (in path order) whose link is overloaded by the
   load that reaches it (``_place_excess_paths``: bytes waiting at an earlier port of
   their path do not count), in that port's FIFO; a NIC keeps no shared
   backlog (``_hold_at_sender``).  Buffers: a switch pool above its limit (egress queue for
   ``drop``/``trim``; ingress pool, i.e. PFC headroom overflow, for ``pfc``) drops the
   overflow from the step's arrivals; dropped bytes go back to the sender and are
   resent.  Credits never drop.
6. **receive and propagate** (``_receive``, ``_propagate``): bytes served at a hop
   reach the next hop in the same step (:func:`fabric_jax.links.serve_through`); at
   the last hop they go on the flow's receiver wire, which delivers them after the
   path's one-way latency.
   A receiver in go-back-N discard mode throws away a fraction of the last-hop bytes
   (``discarded``, returned to the sender and resent): after out-of-order arrivals
   when the NIC does not reorder (``reorder=False`` with a flow split over paths of
   different delay, path latency + ``sum q_l / C_l``) and after losses under
   ``loss_recovery="go_back_n"`` (model and sources: :mod:`fabric_jax.receiver`).
7. **emit signals** (``_emit_signals``): from the standing queues at **switch** ports
   only: marking (the law's ``mark``), queueing delay ``q_l / C_l`` added to the base
   RTT, HPCC telemetry ``q_l/(C_l T) + tx_l/C_l``, losses, receiver credit share;
   written into the feedback ring.
8. **react** (``_react``): flow control updates pauses and credits; accounting and
   completions.

FIFO queues (``fifo_bands``, default 8).  A switch port sends a byte after the bytes
queued ahead of it.  Each queue entry (flow, hop) keeps its bytes in ``K`` bands
``[flows, hops, K]`` shared by the link's entries (band ``k`` is the same stretch of
the queue for all of them): the bytes that join the queue in a step enter its newest
band, the port serves the bands oldest first and the entries of one band in
proportion (:func:`fabric_jax.links.fifo_take`).  Before each step's arrivals the two
adjacent bands whose merge misplaces the fewest bytes merge
(:func:`fabric_jax.links.merge_bands`; zero cost when one is empty or both have the
same make-up), so a queue whose composition changes at most ``K - 1`` times is an
exact FIFO however long it is, and otherwise its resolution is about ``q_l / (K -
1)`` bytes.  The plain-NumPy oracle (``tests/reference/fluid_numpy.py``) is an exact
FIFO of per-step cohorts; ``experiments/queue_discipline.py`` checks the closed form
of a short flow behind a standing queue.  ``fifo_bands=1`` keeps the standing queue
well mixed (each flow served in proportion to its share of it), the model before
2026-12-03, which stretched such a flow's last bytes 4-5x.  Derivatives through the
bands: the band kernels are piecewise smooth; at a tie (a service that ends exactly at
a band boundary, e.g. a grant equal to a standing queue, common with dyadic rates and
steps) they differentiate the piece just below it, consistently across kernels, so the
bytes served move with ``min(budget, queue)`` (:func:`fabric_jax.links.fifo_take`);
the choice of the bands merged is piecewise constant.

Latency and RTT.  ``link_latency`` ``[links]`` (s; e.g. ``topology.latency``,
propagation + serialisation + switch traversal) gives each path a one-way latency
``sum_l link_latency_l`` (the mean over a flow's candidate paths with ``routing=``);
``latency`` ``[flows]`` adds host/NIC processing.  The flow's one-way latency
``L_f`` delays its deliveries (the receiver wire) and its finish time; its base RTT
defaults to ``max(2 L_f, dt)`` and is the feedback delay; the RTT signal adds the
queueing delay on the path.  Without ``link_latency`` ``L_f = latency`` (default 0).

Host NICs (``nic_links``, :func:`fabric_jax.links.nic_links`).  The first hop of a
flow leaves its host's NIC.  A NIC serves its flows (queue pairs) round-robin and builds
a packet only when it picks a flow, so it holds no shared FIFO backlog: in each step
the NIC's capacity is shared max-min among its flows' offers whatever lies downstream
(``_nic_send``), and what a flow could not put through stays unsent in its own send
queue (``_hold_at_sender``; ``sent`` counts only bytes that left the NIC).  What it
sent beyond its cut-through allocation joins the FIFO of the first overloaded switch
port, so a flow that meets a standing queue downstream is served there in proportion
to what it sends, never starved at its NIC (until 2026-12-03 the NIC let through only
what could cross the whole path cut-through, which starved such a flow while other
NICs' bytes kept the port's queue full, and made RoCE's ``compare`` effective
bandwidth move from 0.57 to 0.31 when dt went from 1 to 0.25 us).  Nothing is marked, counted as queueing delay or
telemetry, dropped or trimmed at a NIC; PFC may still pause the NIC (the PAUSE comes
from the first switch), and the paused flows then send nothing.  Which links are NIC egress: ``nic_links=`` (a ``[links]`` mask or the
:class:`fabric_jax.Topology`), else derived from the flows' first hops.

Accounting (checked each step): ``sent = delivered + in_flight + queued + dropped +
discarded`` exactly up to float round-off (``FluidInfo.max_residual``).  A flow finishes when its
last byte has passed its last queue, plus ``L_f``; inside the step, queued bytes leave
first (while the last port drains what it serves) and cut-through bytes at the flow's
pacing rate where the path has room (``_finish_in_step``), so a flow shorter than
``dt`` is not stretched to a whole step.  A flow released inside a step offers only for
the part of the step after its release.  ``delivered`` counts what has arrived at the
receiver (it lags by ``L_f``).

Approximations, stated (see also :mod:`fabric_jax.links`): the fabric is simulated in
the frame of each flow's wave front (the path latency delays delivery and feedback,
not the moment bytes of different flows meet at a hop; bytes, fresh or leaving a
queue, cross the hops below them in their step); the excess of a flow waits at one hop per path;
signals return after the base RTT whichever hop emitted them (queueing delay enters the
RTT *signal*, not the feedback delay); with ``routing=None`` each flow has one path.

Transformations: the loop is a ``lax.scan`` (nested for ``save_every``), so the whole
run is jit-compiled once per shape and is reverse-mode differentiable when the rate
solver runs a fixed number of iterations (``solver_iterations``; the default in the
smooth mode).  Use ``smooth=fabric_jax.smooth.smooth(T)`` for finite gradients through
marking and pause thresholds.

Dynamic routing (``routing=``, :mod:`fabric_jax.routing`).  Each flow keeps all its
candidate paths (``[flows, paths, hops]``); its hop table is laid out path by path and
queued bytes advance along their own path.  At the start of each step the policy sees
the link state (:class:`fabric_jax.routing.RoutingView`) and sets the flow's split over
its paths; the incidence weights of the step are that split.  Each path of a flow
gets its own cut-through share and its excess waits at its own first overloaded hop
(per-packet multipath: until 2026-12-03 a flow had one rate spread by its split, so a
standing queue on one path held back its bytes on all paths and moved them into that
queue, a dt-proportional error); marks, RTT and utilisation signals are
split-weighted means over paths.

Faults (``faults=``, :mod:`fabric_jax.faults`).  A schedule of events ``(time, links,
factor)`` sets each link's capacity in force, ``C_l(k) = factor_l(k) * C_l``, per step
(a piecewise-constant ``[events, links]`` table indexed by ``searchsorted`` on the step
index; an event at ``T`` applies from step ``ceil(T / dt)``).  ``C_l(k)`` replaces
``C_l`` everywhere in the step.  A degraded link (``0 < factor < 1``) is simply slower.
A failed link (``factor = 0``):

* **queued bytes are dropped**: at the start of every step in which a link is down, the
  bytes in its egress queue and on the wire towards it are removed, counted in
  ``dropped`` and returned to their sender's backlog, which resends them on whatever
  path routing then uses.  They also enter the ``loss`` signal of the law.  Bytes
  already past the failed link keep going.
* **routing** (``routing=``): a path is dead while any of its links is down; the policy
  reacts and, whatever it does, the loop sends nothing on dead paths (the split is
  restricted to live paths and renormalised).
* **stranded flows**: a flow whose every path with weight is dead offers nothing
  until a path recovers (``FluidInfo.stranded_time``, ``FluidInfo.stranded``).

A lossy link (:func:`fabric_jax.faults.lossy_link`, loss ``p_l(k)`` per step) keeps
its capacity and carries whatever is sent to it, retransmissions included; of the bytes
that cross a path in the step, hop ``h`` drops ``p_h prod_{j<h} (1 - p_j)``
(``_lossy_links``).  The drops are counted in ``dropped`` (per flow) and
``FluidResult.link_corrupted`` (per link), returned to the sender's backlog (selective
retransmission: the flow's goodput is ``(1 - p)`` of what it puts through the link) and
enter the law's ``loss`` signal; under ``loss_recovery="go_back_n"`` each dropped
``mtu`` also opens a discard window at the receiver.  Stated approximations: the
retransmission leaves in the next step (not after the loss is detected, one RTT
later), and dropped bytes count on the hops after the lossy link in their step.

Traffic classes (``traffic_class=``, ``classes=``, :mod:`fabric_jax.qos`).  Each flow
has a class (an IB service level mapped to a VL, an Ethernet priority); every port has
one queue per class.  The loop then works on ``links x classes`` units (unit ``l *
n_classes + c``; the hop table :func:`fabric_jax.qos.class_hops`): per unit queues,
ingress pools, flow-control state (per-priority PFC, per-VL credits:
:mod:`fabric_jax.flowcontrol`) and marking (ECN / telemetry per class queue).  The
allocate stage (:func:`_transmit_classes`) first shares each link among its classes
(:func:`fabric_jax.qos.arbitrate`: strict levels, weighted max-min inside a level; a
class wants its backlog per step plus its fresh offers, up to its own pause / credit
ceiling), then serves each class's queue and shares the rest of the class's grant
among its fresh offers by max-min; what the grants leave unused goes to the other
classes' queues and offers in a second, redistribution pass (work conservation).  The
excess of a flow waits at the first hop where its class offers more than the class's
grant.  Static per-port buffers are split evenly over the classes.  With one class
(the default) none of this runs: results are those of the single-class model.  With
every flow in one of several classes, the results equal the single-class run up to
round-off when each class gets the single-class thresholds
(``tests/test_traffic_classes.py``).  ``FluidInfo.paused_time`` is then ``[links,
classes]``.

Shared buffer (``shared_buffer=``, :class:`fabric_jax.flowcontrol.SharedBuffer`): a
switch's memory is shared by its queues with dynamic thresholds ``alpha (B - Q)``
(Choudhury and Hahne 1998): egress queues for ``drop`` / ``trim``, ingress pools (XOFF,
credits) for ``pfc`` / ``credit``.

Checkpoint and resume (``init_state=``, :mod:`fabric_jax.checkpoint`).
``FluidResult.state`` is the complete carry of the loop after its last step.  Passing
it back as ``init_state`` continues the run at step ``k`` (simulated time ``k dt``, so
arrivals, fault times and trajectory times stay absolute).  On CPU a run cut into
pieces is bit-identical to the uninterrupted run.

Kernels.  On a GPU each XLA fusion costs about one kernel launch (~5 us whatever its
size), so the step is laid out to compile into few of them (issue 24; counted by
``experiments/bench_gpu.py --parts kernels``, budgeted by ``tests/test_kernels.py``):
decisions the host can make are static (whether every flow leaves through one NIC port,
how many queue sweeps its paths need), records written together are one array (the
feedback ring, the senders' state and offers), the receiver wire is a history written
one row per step (no scatter-adds), independent link sums share one reduction, and
link-side sums over the hop table are segment tables
(:mod:`fabric_jax.segments`: gathers and row reductions on an accelerator, no atomic
adds contending on hot links; scatters on the CPU, where they are faster).  The per-step
max-min solves stay exact (a while loop to convergence; ``FluidInfo.solver_iterations``
counts their iterations); ``solver_unroll=K`` runs their first ``K`` iterations as a
loop of known trip count, the while loop's entry test being the exactness check, and
``solver_check_every=M`` tests the while loop's condition once every ``M`` iterations
(both bit-identical; for accelerators, where XLA:GPU reads a while loop's predicate
back to the host every test: ``experiments/bench_gpu.py --parts aot`` counts those round
trips per step from XLA:GPU's program, ``--parts variants`` times them on a GPU).

Sources: the fluid queue (Lindley recursion per step) and the max-min share follow the
flow-level models of SimGrid (Velho et al., ACM TOMACS 2013) and of the DCQCN fluid
model (Zhu et al., CoNEXT 2016, a delay-differential system whose delays are the
feedback RTT); PFC and credits are in :mod:`fabric_jax.flowcontrol`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect

import jax
import jax.numpy as jnp
import numpy as np

from . import checkpoint as ckm
from . import faults as fm
from . import flowcontrol as fcm
from . import smooth as sm
from .cc import base as ccbase
from .fairness import check_loop_options
from .incidence import Incidence
from . import links as lk
from . import qos
from . import queueing as qm
from . import receiver as rx
from .sim import prepare_flows

from . import fluid_step as fs
from .fluid_step import (COMPLETION_RTOL, FluidInfo, FluidResult, FluidTrajectory,
                         _init_carry, _Net, _Shape, _Static)

__all__ = ["simulate_fluid", "simulate_fluid_batched", "FluidResult", "FluidTrajectory",
           "FluidInfo", "COMPLETION_RTOL"]


# ----------------------------------------------------------------- host side
def hop_entries(inc: Incidence):
    """Host: ``[flows, hops]`` COO entry index of each hop of each flow (-1 padded),
    NumPy (the hop layout of both fluid engines, :mod:`fabric_jax.fluid_slots` too)."""
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
                   solver_iterations: int | None = None, solver_unroll: int = 0,
                   solver_check_every: int = 1, routing=None, faults=None,
                   init_state=None, link_latency=None, nic_links=None, reorder: bool = True,
                   loss_recovery: str = "selective", mtu: float = rx.DEFAULT_MTU,
                   reorder_tolerance: float = 0.0, traffic_class=None, classes=None,
                   shared_buffer=None, stop_when_idle: bool = False,
                   fifo_bands: int = lk.DEFAULT_FIFO_BANDS,
                   burstiness: float = qm.DEFAULT_BURSTINESS,
                   delay_steps: int | None = None) -> FluidResult:
    """Fluid simulation of flows under congestion control and link-level flow control.

    Args:
      incidence: :class:`~fabric_jax.Incidence` or dense ``[links, flows]``; the entries
        of each flow in COO order are its hops in path order (one path per flow, weights
        0 or 1; a flow split over several paths needs ``routing=``).
      capacity: ``[links]`` bytes/s.
      size: ``[flows]`` bytes.
      dt: step, seconds (e.g. 1e-6).
      n_steps: number of steps (static).
      law: a :class:`fabric_jax.cc.Law` or its name (``"none"``, ``"dcqcn"``,
        ``"ibcc"``, ``"hpcc"``, ``"swift"``, ``"nscc"``).
      params: the law's parameter pytree (default ``law.default_params()``); must have
        the structure of the law's own parameters.
      arrival, deps, delay: flow lifecycle, as in :func:`fabric_jax.simulate_flows`
        (seconds; ``deps`` ``[flows, max_deps]``).
      latency: ``[flows]`` one-way latency outside the links (host/NIC processing), s;
        without ``link_latency`` the whole one-way latency of the flow (default 0).
      line_rate: ``[flows]`` NIC line rate, bytes/s (default: the smallest capacity on
        the flow's path).
      base_rtt: ``[flows]`` propagation round trip, seconds: the feedback delay
        (default ``max(2 L_f, dt)`` with ``L_f`` the one-way latency, see "Latency").
      flow_control: a mode of :data:`fabric_jax.flowcontrol.MODES` or a
        :class:`~fabric_jax.flowcontrol.FlowControl`.
      fc_params: :class:`~fabric_jax.flowcontrol.FlowControlParams`; default from
        ``buffer`` (PFC thresholds via :func:`~fabric_jax.flowcontrol.pfc_thresholds`
        with a reaction time of ``pause_delay * dt``).  ``xoff``/``xon`` other than
        ``buffer`` only with ``flow_control="pfc"``.
      buffer: ``[links]`` (or scalar) buffer per link, bytes (default ``inf``).
      smooth: :class:`fabric_jax.smooth.Smoothing` (default exact).
      save_every: save a :class:`FluidTrajectory` snapshot every this many steps
        (must divide ``n_steps``); ``None``: no trajectory.
      stop_when_idle: skip the rest of the run, one ``save_every`` chunk (or the whole
        run without a trajectory: pass ``save_every``) at a time, once the fabric is
        idle for good: every flow has finished or is released only after the horizon,
        no byte stands in a queue or travels on a wire, no link is paused.  Every flow
        result is then exactly what the full run gives; the law's state and feedback
        ring stop where the last simulated chunk left them (the law would go on
        adapting with no traffic), and the skipped snapshots repeat an idle fabric
        (zero rates and queues, usable = capacity in force).  Not for reverse-mode
        gradients through ``n_steps`` (it is a ``lax.cond``; the skipped chunks have no
        gradient).  Default ``False``.
      solver_iterations: fixed iteration count of the per-step max-min solve (needed
        for reverse-mode gradients; default: exact while-loop, or ``flows + 1`` in the
        smooth mode).
      solver_unroll: iterations of each per-step max-min solve (and rounds of the NIC
        water-fill) run as a loop of known trip count before its while loop, which
        finishes what is left (:func:`fabric_jax.fairness.solve`, ``unroll``):
        bit-identical results, for accelerators, where a step that settles within them
        runs with no data-dependent stop (XLA:GPU reads no predicate back to the host for
        them).  Default 0 (the plain while loop, fastest on a CPU).  Not with
        ``solver_iterations`` or ``smooth``.
      solver_check_every: iterations of each per-step max-min solve's while loop between
        its tests "is any flow still open" (:func:`fabric_jax.fairness.solve`,
        ``check_every``): bit-identical results and iteration counts; on a GPU each test
        is a predicate read back to the host, so a deep solve (tens of iterations per
        step at 10^5 flows) waits on the host that many times less often, for at most
        ``solver_check_every - 1`` idle iterations.  Default 1.  Not with
        ``solver_iterations`` or ``smooth``.
      routing: a :class:`fabric_jax.routing.Routing` (policy, its params and initial
        state over a ``[flows, paths, hops]`` path table): dynamic per-step splits.
        Every incidence entry of a flow must be on one of its candidate paths.
        ``None`` (default): the static single path of ``incidence``.
      faults: link faults during the run (see "Faults" above and
        :mod:`fabric_jax.faults`): a list of events ``(time_s, links, factor)`` /
        :func:`fabric_jax.faults.link_event`, lossy links
        (:func:`fabric_jax.faults.lossy_link`), or a compiled
        :class:`fabric_jax.faults.FaultSchedule`.  ``None``: no faults.
      init_state: continue a run: ``FluidResult.state`` of an earlier call, or a
        :class:`fabric_jax.checkpoint.Checkpoint` loaded from disk.  The other
        arguments must be those of the earlier call (only ``n_steps`` and
        ``save_every`` may change).  On CPU, N steps + resume + M steps is
        bit-identical to N + M steps in one call.
      link_latency: ``[links]`` latency of each link (propagation + serialisation +
        switch traversal), s, e.g. ``topology.latency``; ``None``: links add none.
      nic_links: host-NIC egress links (never marked, dropped or trimmed): a
        ``[links]`` bool mask or a :class:`fabric_jax.Topology`; ``None``: derived
        from the flows' first hops (:func:`fabric_jax.links.nic_links`).
      reorder: the receiving NIC accepts out-of-order packets (default ``True``: spraying
        costs nothing).  ``False``: a flow split over paths of different delay
        (latency + queueing) loses the out-of-order arrivals and everything after them
        until a go-back-N resend arrives (:mod:`fabric_jax.receiver`; a plain RoCE NIC).
      loss_recovery: ``"selective"`` (default: only lost bytes are resent) or
        ``"go_back_n"`` (a loss also wastes what the flow sends until it is detected,
        one base RTT plus ``flow_control.rto_steps`` in ``drop`` mode).
      mtu: packet size, bytes, for the reordering and go-back-N models (default 4096).
      reorder_tolerance: path-delay difference a ``reorder=False`` NIC absorbs, s
        (default 0).
      burstiness: arrival burstiness ``kappa`` of the packet-scale port waits that
        reorder a sprayed flow (``reorder=False``; :mod:`fabric_jax.queueing`, default
        :data:`fabric_jax.queueing.DEFAULT_BURSTINESS`; 1 is the analytic model).
      traffic_class: ``[flows]`` int class of each flow (default all 0); see "Traffic
        classes" above.
      classes: :class:`fabric_jax.qos.TrafficClasses` (:func:`fabric_jax.qos.traffic_classes`:
        number of classes, ``"ets"`` / ``"strict"`` arbitration, weights); default:
        ``max(traffic_class) + 1`` classes under ETS with equal weights.  One class
        runs today's single-class model unchanged.
      fifo_bands: bands per egress FIFO (see "FIFO queues" above; default 8, the
        state grows by ``[flows, hops, fifo_bands]``); 1 keeps standing queues well
        mixed.  Gradients flow through any number of bands (see "FIFO queues";
        until 2026-12-03 they could be wrong at ties, e.g. 30.9 against the closed
        form 0.039 for a two-class ETS weight, ``tests/test_traffic_classes.py``).
      delay_steps: length of the delay lines in steps (the feedback ring and the
        receiver wires; static, part of the compiled program).  ``None`` (default):
        what this run needs, its longest feedback delay ``max(base_rtt) / dt``.  Runs
        that differ only in latencies, base RTTs or ``dt`` compile one program when
        they pass the same ``delay_steps`` (at least each run's own need; results are
        the same, the lines only get longer: ``[delay_steps, flows, 7]`` floats for
        the ring).  A value below the need is a ``ValueError`` that states the need.
      shared_buffer: :class:`fabric_jax.flowcontrol.SharedBuffer`
        (:func:`fabric_jax.flowcontrol.shared_buffer`), or a
        :class:`fabric_jax.Topology` for its defaults: switch memory shared by its
        queues with dynamic thresholds (drop / trim / PFC XOFF / credits).  ``None``
        (default): static per-port pools of ``buffer``.

    Returns:
      :class:`FluidResult`.

    Raises:
      ValueError: bad shapes or values, naming the argument (``params`` of another
        law; ``fc_params`` not a ``FlowControlParams`` or PFC thresholds without PFC;
        ``routing`` whose paths miss incidence entries; a multipath incidence without
        ``routing``; ``faults``: a time not finite or negative, a link out of range, a
        factor outside ``[0, 1]``; ``init_state``: a structure, shape or dtype that does
        not match this run; ``reorder`` not a bool, ``loss_recovery`` unknown, ``mtu``
        not > 0, ``reorder_tolerance`` < 0; ``traffic_class`` not ``[flows]`` integers
        in ``[0, n_classes)``; ``classes`` not a ``TrafficClasses``; ``shared_buffer``
        whose maps or ``alpha`` do not fit the links / classes; ``fifo_bands`` not a
        positive integer).
    """
    # every argument, as passed (the host preparation is shared with
    # fabric_jax.distributed.simulate_fluid_sharded, which runs the same loop sharded)
    return fs._run(*_prepare(**locals()))


def simulate_fluid_batched(incidence, capacity, size, *, scenarios=None,
                           **kwargs) -> FluidResult:
    """Many fluid scenarios of one shape in one compiled program: :func:`simulate_fluid`
    ``vmap``-ed over a leading scenario axis.

    Scenario ``b`` is ``simulate_fluid(incidence, capacity[b], size[b], **kwargs,
    **scenarios[b])``: a load sweep (sizes), degraded links (capacities), a tuning sweep
    (``scenarios=[{"params": ...}, ...]``), seeds of a workload (``arrival``).  Each
    scenario is checked and prepared on the host as :func:`simulate_fluid` does; they
    must share every static choice (law, flow control, routing policy, ``n_steps`` and
    ``save_every``, the NIC-port layout the host proves) and every array shape, so that
    one program runs them all.  Arrays equal in every scenario (the hop table, usually)
    are passed once, not stacked.  On an accelerator the batch shares each kernel
    launch (issue 24: a step is launch-bound, so ``B`` scenarios should cost little
    more than one; not yet measured on a GPU); on a CPU a batch is slower than running
    its scenarios one by one (1.2-1.5 x per scenario: 8 scenarios of 10^4 flows, 2
    cores, ``docs/performance.md``), so use it there for one compile, not for speed
    (``experiments/bench_gpu.py --parts fluid_batched`` measures both).  The per-step
    solves' while loops run until every scenario's has converged (``vmap`` of a loop:
    a converged scenario's state is held, and its ``info.solver_iterations`` stays its
    own); the results are its own run's up to the order of float sums (bit for bit on
    the CPU in ``tests/test_fluid_batched.py``).

    Args:
      incidence: as :func:`simulate_fluid` (shared).
      capacity: ``[scenarios, links]`` bytes/s, or ``[links]`` shared.
      size: ``[scenarios, flows]`` bytes, or ``[flows]`` shared.
      scenarios: optional list of dicts, one per scenario, of further
        :func:`simulate_fluid` keyword arguments that differ between scenarios (a key
        may not also be in ``kwargs``).
      **kwargs: :func:`simulate_fluid` keyword arguments shared by every scenario
        (``dt`` and ``n_steps`` among them).

    Returns:
      :class:`FluidResult` with a leading scenario axis on every array.

    Raises:
      ValueError: nothing batched, batch sizes that differ, a key both in ``kwargs``
        and a scenario, an unknown argument, scenarios whose static choices or array
        shapes differ (each named with its index), or any of :func:`simulate_fluid`'s.
    """
    batch = {}
    if np.ndim(capacity) == 2:
        batch["capacity"] = np.shape(capacity)[0]
    if np.ndim(size) == 2:
        batch["size"] = np.shape(size)[0]
    if scenarios is not None:
        if not (isinstance(scenarios, (list, tuple))
                and all(isinstance(sc, dict) for sc in scenarios)):
            raise ValueError("scenarios: a list of dicts of simulate_fluid keyword "
                             f"arguments, one per scenario; got {type(scenarios).__name__}")
        batch["scenarios"] = len(scenarios)
    if not batch:
        raise ValueError("simulate_fluid_batched: nothing is batched; give capacity "
                         "[scenarios, links], size [scenarios, flows] or scenarios=[...] "
                         "(one scenario: use simulate_fluid)")
    if len(set(batch.values())) > 1:
        raise ValueError(f"the batch sizes differ: {batch}; give every batched argument "
                         "the same number of scenarios")
    n = next(iter(batch.values()))
    if n < 1:
        raise ValueError("simulate_fluid_batched: the batch is empty")
    sig = inspect.signature(simulate_fluid)
    prepared = []
    for b in range(n):
        extra = {} if scenarios is None else scenarios[b]
        both = sorted(set(extra) & set(kwargs))
        if both:
            raise ValueError(f"scenarios[{b}]: {both} also given for every scenario; give "
                             "each argument one way")
        try:
            bound = sig.bind(incidence, capacity[b] if "capacity" in batch else capacity,
                             size[b] if "size" in batch else size, **kwargs, **extra)
        except TypeError as err:
            raise ValueError(f"scenarios[{b}]: {err} (arguments of simulate_fluid)") from None
        bound.apply_defaults()
        prepared.append(_prepare(**bound.arguments))
    head = prepared[0][:4]
    flat0, treedef = jax.tree_util.tree_flatten(prepared[0][4:])
    flats = [flat0]
    for b, p in enumerate(prepared[1:], 1):
        if p[:4] != head:
            raise ValueError(f"scenarios[{b}]: its static choices (law, flow control, "
                             "routing policy, n_steps / save_every, NIC ports ...) differ from "
                             "scenario 0's; one batch is one compiled program: run it apart")
        flat, tdef = jax.tree_util.tree_flatten(p[4:])
        if tdef != treedef:
            raise ValueError(f"scenarios[{b}]: its arguments differ in kind from scenario "
                             "0's (an option given in one and not the other?)")
        for x, y in zip(flat0, flat):
            if np.shape(x) != np.shape(y) or jnp.result_type(x) != jnp.result_type(y):
                raise ValueError(f"scenarios[{b}]: an array of shape {np.shape(y)} "
                                 f"({jnp.result_type(y)}) where scenario 0 has "
                                 f"{np.shape(x)} ({jnp.result_type(x)}); a batch needs one "
                                 "shape")
        flats.append(flat)
    leaves, axes = [], []
    for i, x0 in enumerate(flat0):
        xs = [f[i] for f in flats]
        if all(x is x0 or _equal(x, x0) for x in xs[1:]):
            leaves.append(x0)
            axes.append(None)
        else:
            leaves.append(jnp.stack([jnp.asarray(x) for x in xs]))
            axes.append(0)
    return fs._run_batched(*head, treedef, tuple(axes), *leaves)


def _equal(a, b) -> bool:
    """Host: two arrays equal in shape, dtype and every element (NaN equal to NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if np.issubdtype(a.dtype, np.inexact):
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def _prepare(incidence, capacity, size, *, dt, n_steps, law, params, arrival, deps, delay,
             latency, line_rate, base_rtt, flow_control, fc_params, buffer, smooth,
             save_every, solver_iterations, solver_unroll, solver_check_every, routing,
             faults, init_state, link_latency,
             nic_links, reorder, loss_recovery, mtu, reorder_tolerance, traffic_class,
             classes, shared_buffer, stop_when_idle, fifo_bands, burstiness, delay_steps):
    """Host side of :func:`simulate_fluid` (every argument as there, no defaults):
    validation and the device arrays; returns the arguments of :func:`_run`."""
    rx.check_options(reorder, loss_recovery, mtu, reorder_tolerance)
    qm.check_burstiness(burstiness)
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
    inc, capacity, deps, flows = prepare_flows(incidence, capacity, arrival, size, deps, delay,
                                          latency, None)
    n_links, n_flows = inc.n_links, inc.n_flows
    fdt = capacity.dtype
    if isinstance(base_rtt, jax.core.Tracer) or isinstance(dt, jax.core.Tracer):
        raise ValueError("base_rtt and dt must be concrete: they set the delay-line length")
    if routing is None:
        entry = hop_entries(inc)
        check_single_path(inc)
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
        _check_routing_covers(inc, rlinks, rhop)
        seg = max(rlinks.shape[2], 1)
        link_tab = np.where(rhop, rlinks, n_links).reshape(n_flows, -1)
        w_tab = jnp.asarray(rhop.reshape(n_flows, -1), fdt)
        policy, rparams, rstate0 = routing.policy, routing.params, routing.state
    hops = lk.hop_table(link_tab, w_tab, int(seg), n_links)
    nic = lk.nic_links(link_tab, int(seg), n_links, nic_links)

    _check_positive_array("line_rate", line_rate, (n_flows,))
    _check_positive_array("base_rtt", base_rtt, (n_flows,))
    if line_rate is None:
        cap_ext = np.append(np.asarray(capacity, float), np.inf)
        lr = cap_ext[link_tab].min(axis=1)
        lr = np.where(np.isfinite(lr) & (lr > 0), lr, np.max(np.asarray(capacity), initial=1.0))
        line_rate = lr
    line_rate = jnp.asarray(line_rate, fdt)
    path_lat = lk.path_latencies(link_latency, link_tab, int(seg), n_links)
    one_way = np.asarray(flows["latency"], float) + _mean_over_paths(path_lat, link_tab,
                                                                     int(seg), n_links)
    if base_rtt is None:
        base_rtt = np.maximum(2 * one_way, float(dt))
    # feedback delay base_rtt / dt = n + phi steps (at least one step): the law reads the
    # signals of steps k - n and k - n - 1, weighted 1 - phi and phi
    fb_d = np.asarray(base_rtt, float) / float(dt)
    fb_steps = np.maximum(np.floor(fb_d + 1e-9), 1).astype(np.int32)
    fb_phi = np.where(fb_d > fb_steps, np.clip(fb_d - fb_steps, 0.0, 1.0), 0.0)
    fb_phi = np.where(fb_phi < 1e-9, 0.0, fb_phi)
    ring_len = int(fb_steps.max(initial=1) + flow_control.rto_steps + 2)
    wire_n, wire_phi, wire_depth = lk.wire_taps(one_way, float(dt))
    if delay_steps is not None:
        need = int(max(fb_steps.max(initial=1), wire_n.max(initial=0)))
        if (isinstance(delay_steps, (bool, np.bool_))
                or not isinstance(delay_steps, (int, np.integer)) or delay_steps < need):
            raise ValueError(
                f"delay_steps must be an integer >= {need}, this run's longest delay in "
                f"steps (feedback: max base_rtt / dt = {np.max(fb_d, initial=1.0):.6g}; "
                f"receiver wire: {int(wire_n.max(initial=0))} steps); pass None for "
                f"exactly that, or a larger shared value; got {delay_steps!r}")
        ring_len = int(delay_steps) + flow_control.rto_steps + 2
        wire_depth = int(delay_steps) + 2

    if params is None:
        params = law.default_params()
    _check_law_params(law, params)
    tc_cfg, tc_arr = prepare_classes(traffic_class, classes, n_flows)
    n_classes = 1 if tc_cfg is None else tc_cfg.n_classes
    sb = _prepare_shared(shared_buffer, n_links, n_classes)
    if fc_params is None:
        buf = np.inf if buffer is None else buffer
        if n_classes > 1 and not isinstance(buf, jax.core.Tracer):
            # static per-port pools: the port's memory split evenly over its classes
            buf = np.asarray(buf, float) / n_classes
        if flow_control.mode == "pfc" and not isinstance(buf, jax.core.Tracer):
            xoff, xon = fcm.pfc_thresholds(np.asarray(capacity), buf,
                                           reaction_s=flow_control.pause_delay * float(dt))
            fc_params = fcm.flow_control_params(n_links, buffer=buf, xoff=xoff, xon=xon)
        else:
            fc_params = fcm.flow_control_params(n_links, buffer=buf)
    _check_fc_params(flow_control, fc_params, n_links)
    if n_classes > 1:
        fc_params = fcm.class_params(fc_params, n_links, n_classes)
    if save_every is None:
        n_outer, inner, keep_traj = 1, int(n_steps), False
    else:
        n_outer, inner, keep_traj = int(n_steps) // save_every, int(save_every), True
    if solver_iterations is None and smooth.enabled:
        solver_iterations = n_flows + 1
    check_loop_options(solver_iterations, solver_unroll, solver_check_every,
                       names=("solver_iterations", "solver_unroll", "solver_check_every"),
                       fixed="solver_iterations or smooth")
    sched = None
    if faults is not None:
        sched = fm.fault_schedule(faults, n_links, float(dt))
        sched = fm.FaultSchedule(step=jnp.asarray(sched.step, jnp.int32),
                                 factor=jnp.asarray(sched.factor, fdt),
                                 loss=None if sched.loss is None
                                 else jnp.asarray(sched.loss, fdt))
    base_rtt = jnp.asarray(base_rtt, fdt)
    shape = _Shape(ring_len=ring_len, wire_depth=wire_depth, routed=policy is not None,
                   n_classes=n_classes, fifo_bands=check_fifo_bands(fifo_bands),
                   lossy=sched is not None and sched.loss is not None)
    # out-of-order arrivals need a flow split over several paths at once; ECMP and
    # flowlet switching keep each flow on one path (their split is one-hot, the model
    # would give exactly 0), so they skip the [flows, paths, paths] kernel
    rx_ooo = ((not reorder) and policy is not None and hops.n_paths > 1
              and getattr(policy, "name", None) not in ("ecmp", "flowlet"))
    carry0 = None
    if init_state is not None:
        template = jax.eval_shape(
            functools.partial(_init_carry, law, flow_control, shape, hops),
            flows["size"], line_rate, base_rtt, params, rstate0)
        carry0 = ckm.restore(init_state, template, name="init_state")
    net = _Net(hops=hops, switch=jnp.asarray(~nic, fdt), capacity=capacity,
               line_rate=line_rate, base_rtt=base_rtt, fb_steps=jnp.asarray(fb_steps),
               fb_phi=jnp.asarray(fb_phi, fdt),
               wire_n=jnp.asarray(wire_n), wire_phi=jnp.asarray(wire_phi, fdt),
               one_way=jnp.asarray(one_way, fdt), deps=deps, flows=flows,
               path_lat=jnp.asarray(path_lat, fdt), mtu=jnp.asarray(mtu, fdt),
               tolerance=jnp.asarray(reorder_tolerance, fdt),
               wait_pairs=(qm.ingress_pairs(np.asarray(hops.link), np.asarray(hops.prev),
                                            n_links) if rx_ooo else None),
               burstiness=jnp.asarray(burstiness, fdt))
    net = _class_net(net, tc_cfg, tc_arr, sb, flow_control, capacity, float(dt), fdt)
    static = _Static(law=law, fc=flow_control, policy=policy, shape=shape,
                     solver_iterations=solver_iterations, solver_unroll=int(solver_unroll),
                     solver_check_every=int(solver_check_every),
                     rx_ooo=bool(rx_ooo),
                     go_back_n=loss_recovery == "go_back_n", n_classes=n_classes,
                     levels=() if tc_cfg is None else tc_cfg.levels, shared=sb is not None,
                     stop_when_idle=bool(stop_when_idle),
                     nic_ports="one" if _one_nic_port(link_tab, int(seg), nic) else "check",
                     sweeps=_sweeps(link_tab, int(seg), nic))
    return (static, n_outer, inner, keep_traj, net, params, fc_params, smooth,
            jnp.asarray(dt, fdt), rparams, rstate0, sched, carry0)


# ------------------------------------------------------------------ host checks
def check_fifo_bands(fifo_bands):
    """Host: ``fifo_bands`` as an int >= 1 (shared with :mod:`fabric_jax.fluid_slots`).

    Raises:
      ValueError: not a positive integer.
    """
    if isinstance(fifo_bands, bool) or not (isinstance(fifo_bands, (int, np.integer))
                                            and fifo_bands >= 1):
        raise ValueError(f"fifo_bands must be a positive integer (bands per egress FIFO, "
                         f"default {lk.DEFAULT_FIFO_BANDS}); got {fifo_bands!r}")
    return int(fifo_bands)


def _one_nic_port(link_tab, seg, nic):
    """Host: every flow's paths leave through at most one host-NIC link (their first
    hops that are NIC egress links are one link), so :func:`_nic_send` is a water-fill
    per port whatever the split."""
    n_links = nic.shape[0]
    first = np.asarray(link_tab)[:, ::seg]
    is_nic = np.append(np.asarray(nic, bool), False)[first]
    if first.size == 0:
        return True
    port = np.where(is_nic, first, n_links).min(axis=1)
    top = np.where(is_nic, first, -1).max(axis=1)
    return bool(np.all(top <= port))


def _sweeps(link_tab, seg, nic):
    """Host: sweeps :func:`fabric_jax.links.serve_through` needs: one per hop that can
    hold a standing queue along a path, i.e. ``seg - 1`` when every path starts at a
    host NIC (whose backlog stays with the sender, :func:`_hold_at_sender`), else
    ``seg``."""
    first = np.asarray(link_tab)[:, ::seg]
    n_links = nic.shape[0]
    real = first < n_links
    at_nic = np.append(np.asarray(nic, bool), False)[first]
    if seg > 1 and np.all(at_nic | ~real):
        return seg - 1
    return seg


def _mean_over_paths(per_path, link_tab, seg, n_links):
    """``[flows]`` mean of ``[flows, paths]`` values over each flow's real paths."""
    n_flows = link_tab.shape[0]
    tab = link_tab.reshape(n_flows, link_tab.shape[1] // seg, seg)
    live = (tab < n_links).any(axis=2)
    return np.where(live, per_path, 0.0).sum(axis=1) / np.maximum(live.sum(axis=1), 1)


def check_single_path(inc: Incidence):
    """Host: every flow has one path (weights 0 or 1, no link twice), as the engines
    without a routing policy need (shared with :mod:`fabric_jax.fluid_slots`).

    Raises:
      ValueError: a flow split over several paths.
    """
    w = inc.weight
    if isinstance(w, jax.core.Tracer):
        return
    w = np.asarray(w)
    li, fi = np.asarray(inc.link_idx), np.asarray(inc.flow_idx)
    nz = w != 0
    split = nz & (np.abs(w - 1.0) > 1e-6)
    code = fi[nz].astype(np.int64) * (inc.n_links + 1) + li[nz]
    if np.any(split) or np.unique(code).size != code.size:
        f = int(fi[split][0]) if np.any(split) else int(fi[nz][0])
        raise ValueError(
            "incidence splits a flow over several paths (weights other than 0/1 or a link "
            f"listed twice, first at flow {f}) but routing=None: the fluid loop would chain "
            "the paths into one; pass routing=fabric_jax.make_routing(policy, paths) or one "
            "path per flow")


def _check_routing_covers(inc: Incidence, rlinks, rhop):
    w = inc.weight
    if isinstance(w, jax.core.Tracer):
        return
    nz = np.asarray(w) != 0
    stride = inc.n_links + 1
    have = np.asarray(inc.flow_idx)[nz].astype(np.int64) * stride + np.asarray(inc.link_idx)[nz]
    fl = np.broadcast_to(np.arange(rlinks.shape[0])[:, None, None], rlinks.shape)
    cand = fl[rhop].astype(np.int64) * stride + rlinks[rhop]
    miss = ~np.isin(have, cand)
    if np.any(miss):
        code = int(have[miss][0])
        raise ValueError(f"routing does not agree with incidence: flow {code // stride} uses "
                         f"link {code % stride}, which none of its routing.links paths "
                         "contains; build both from the same PathSet")


def _check_law_params(law, params):
    ref = jax.tree_util.tree_structure(law.default_params())
    got = jax.tree_util.tree_structure(params)
    if got != ref:
        raise ValueError(f"params do not belong to law {law.name!r}: expected the structure "
                         f"of {law.name}'s default_params() ({ref}); got {got}")


def _check_fc_params(fc, fcp, n_links):
    if not isinstance(fcp, fcm.FlowControlParams):
        raise ValueError("fc_params must be a fabric_jax.flowcontrol.FlowControlParams "
                         f"(flow_control_params(...)); got {type(fcp).__name__}")
    leaves = [fcp.buffer, fcp.xoff, fcp.xon]
    if any(isinstance(v, jax.core.Tracer) for v in leaves):
        return
    for name, v in zip(("buffer", "xoff", "xon"), leaves):
        if np.shape(v) not in ((), (n_links,)):
            raise ValueError(f"fc_params.{name} must be [links] = [{n_links}] or a scalar; "
                             f"got shape {list(np.shape(v))}")
    if fc.mode != "pfc" and (np.any(np.asarray(fcp.xoff) != np.asarray(fcp.buffer))
                             or np.any(np.asarray(fcp.xon) != np.asarray(fcp.xoff))):
        raise ValueError(f"fc_params has PFC thresholds (xoff/xon below buffer) but "
                         f"flow_control={fc.mode!r}; use flow_control='pfc' or "
                         "flow_control_params(n_links, buffer=...) without xoff/xon")


def prepare_classes(traffic_class, classes, n_flows):
    """Host: ``(TrafficClasses or None, [flows] int32 classes)``; ``None`` with one class."""
    if classes is not None and not isinstance(classes, qos.TrafficClasses):
        raise ValueError("classes must be a fabric_jax.qos.TrafficClasses "
                         f"(qos.traffic_classes(n, ...)); got {type(classes).__name__}")
    if classes is None:
        tc = qos.check_traffic_class(traffic_class, n_flows, qos.MAX_CLASSES)
        n = int(tc.max(initial=0)) + 1
        classes = qos.traffic_classes(n) if n > 1 else None
    else:
        tc = qos.check_traffic_class(traffic_class, n_flows, classes.n_classes)
    if classes is not None and classes.n_classes == 1:
        classes = None
    return classes, tc


def _prepare_shared(shared_buffer, n_links, n_classes):
    """Host: a validated :class:`~fabric_jax.flowcontrol.SharedBuffer` or ``None``."""
    if shared_buffer is None:
        return None
    if not isinstance(shared_buffer, fcm.SharedBuffer):
        if hasattr(shared_buffer, "node_is_host"):
            shared_buffer = fcm.shared_buffer(shared_buffer)
        else:
            raise ValueError("shared_buffer must be a fabric_jax.flowcontrol.SharedBuffer "
                             "(flowcontrol.shared_buffer(topology, alpha=...)) or a Topology; "
                             f"got {type(shared_buffer).__name__}")
    for name in ("egress_switch", "ingress_switch"):
        if np.shape(getattr(shared_buffer, name)) != (n_links,):
            raise ValueError(f"shared_buffer.{name} must be [links] = [{n_links}]; got shape "
                             f"{list(np.shape(getattr(shared_buffer, name)))}")
    if np.ndim(shared_buffer.alpha) == 1 and np.shape(shared_buffer.alpha)[0] != n_classes:
        raise ValueError(f"shared_buffer.alpha must be a scalar or [classes] = [{n_classes}]; "
                         f"got shape {list(np.shape(shared_buffer.alpha))}")
    return shared_buffer


def _class_net(net, tc_cfg, tc_arr, sb, fc, capacity, dt, fdt):
    """Adds the ``links x classes`` unit layout and shared-buffer maps to ``net``."""
    n_links = net.hops.n_links
    n_classes = 1 if tc_cfg is None else tc_cfg.n_classes
    if tc_cfg is None:
        uhops, uswitch, weight = net.hops, net.switch, None
    else:
        uhops = qos.class_hops(net.hops, tc_arr, n_classes)
        uswitch = jnp.repeat(net.switch, n_classes)
        weight = jnp.asarray(tc_cfg.weights, fdt)
    extra = dict(uhops=uhops, uswitch=uswitch, class_weight=weight)
    if sb is not None:
        alpha = jnp.broadcast_to(jnp.asarray(sb.alpha, fdt), (n_classes,))
        rep = lambda m: jnp.repeat(jnp.asarray(m, jnp.int32), n_classes)  # noqa: E731
        headroom = fcm.pfc_headroom(np.asarray(capacity), reaction_s=fc.pause_delay * dt)
        extra.update(sb_size=jnp.asarray(sb.size, fdt), sb_alpha=jnp.tile(alpha, n_links),
                     sb_egress=rep(sb.egress_switch), sb_ingress=rep(sb.ingress_switch),
                     sb_headroom=jnp.repeat(jnp.asarray(headroom, fdt), n_classes))
    return dataclasses.replace(net, **extra)


