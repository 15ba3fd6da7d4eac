"""Time-stepped fluid dynamics of congestion control and link-level flow control.

Units: sizes and queues in bytes, times in seconds, rates and capacities in bytes/s.

This extends :func:`fabric_jax.sim.simulate_flows_fixed_step` (same flow lifecycle:
arrivals, dependency DAG, ``delay``) with senders whose rate is set by a
congestion-control law (:mod:`fabric_jax.cc`), finite queues, wires with latency
(:mod:`fabric_jax.links`), and link-level flow control (:mod:`fabric_jax.flowcontrol`).

The engine's contract (host prepares, device runs).  :func:`prepare` checks the inputs
on the host and freezes the run into a :class:`FluidProblem` (static choices and
shapes; traced arrays); :func:`run` steps it on the device from the start or from a
:class:`FluidState` and returns a :class:`FluidResult`.  The options are small objects
(:class:`CongestionControl`, :class:`FlowControlConfig`, :class:`Receiver`,
:class:`QoS`, :class:`Solver`, :class:`Numerics`, :class:`SaveAt`).
:func:`simulate_fluid` is the one-call form with flat keywords; the drivers are short
loops over the contract: :func:`simulate_fluid_batched` (:func:`stack`, one ``vmap``),
:func:`simulate_fluid_windowed` (flow slots, window by window), the sharded run
(:func:`fabric_jax.distributed.simulate_fluid_sharded`) and a resumed run
(``run(problem, state)``)::

    problem = fluid.prepare(inc, capacity, size, dt=1e-6, n_steps=2000,
                            cc="dcqcn", flow_control=fluid.FlowControlConfig("pfc", buffer=b))
    result = fluid.run(problem)
    more = fluid.run(problem, result.state)       # the next 2000 steps

State (:class:`FluidState`, a registered dataclass whose fields declare their flow axis;
``FluidResult.state``).  Per flow and hop of its path
(the padded hop table of :mod:`fabric_jax.links`): ``queue[f, h]``, bytes standing in
the egress queue of the hop's link, and ``transit[f, h]``, bytes on the wire towards
it at the end of a step (zero unless the route graph has cycles,
:func:`fabric_jax.links.serve_through`).  Per flow: what entered the wire to the
receiver in the last steps (``wire``, a ``[depth, flows]`` history,
:func:`fabric_jax.links.wire_step`), the sender (``remaining``; ``law``, the law's state
and the offer, :func:`pack_law`), the feedback ring (the signals emitted in the last
``ring_len`` steps, ``[ring_len, flows, signals]``), counters.  Per link: flow-control
state.  The state is laid out for few kernels per step (one array per kind of record,
written once per step; see "Kernels" below).

One step of length ``dt`` is a short sequence of stages (:func:`fabric_jax.fluid.step.step`;
the stages are the modules of :mod:`fabric_jax.fluid.stages`, in this order):

1. **clock and faults** (``stages.clock``): which flows are active; the
   capacity in force ``C_l(k)``; bytes queued on or travelling to a failed link are
   dropped and returned to their sender.
2. **route** (``stages.clock.route``): with ``routing=``, the policy sets each flow's split over
   its paths (:mod:`fabric_jax.routing`).
3. **offer rates** (``stages.offer``): the signals emitted one base RTT ago (the feedback
   ring; a delay of ``n + phi`` steps reads steps ``k - n`` and ``k - n - 1`` weighted
   ``1 - phi`` and ``phi``) reach the law, which updates
   its state; the flow offers ``o_f = min(min(rate_f, line_rate_f) p_f,
   remaining_f / dt)``, ``p_f`` the part of the step after its release (1 after its
   first step).
4. **allocate** (``stages.transmit``): flow control fixes each link's usable capacity
   ``u_l`` (``C_l``, 0 while paused, or the free downstream buffer per ``dt``).
   Queues are served first (:func:`fabric_jax.links.serve`: ``s_l = min(q_l + a_l, u_l
   dt)``), as FIFOs: the standing bytes band by band, oldest first, then the bytes
   arriving in the step (``fifo_bands`` bands per queue, see "FIFO queues" below);
   each host NIC sends its max-min share of its flows' offers, ``n = max-min over the
   NIC ports only (u - s/dt, demand=o)`` (``nic_send``; the rest of an offer is not
   sent); the sent rates share what is left on their paths, ``a =
   max-min(u - s/dt, demand=n)`` (:func:`fabric_jax.fairness.solve`) and cross the
   fabric cut-through.  With several paths per flow the max-min is over the flow's
   paths, each sending ``n_f s_fp`` (its split; ``allocate_paths``): a congested path
   does not hold back the flow's packets on the others.
5. **transmit and queue** (``stages.transmit``): the excess ``(n_f s_fp - a_fp) dt`` of each
   path waits at its first switch port (in path order) whose link is overloaded by the
   load that reaches it (``place_excess_paths``: bytes waiting at an earlier port of
   their path do not count), in that port's FIFO; a NIC keeps no shared
   backlog (``hold_at_sender``).  Buffers: a switch pool above its limit (egress queue for
   ``drop``/``trim``; ingress pool, i.e. PFC headroom overflow, for ``pfc``) drops the
   overflow from the step's arrivals; dropped bytes go back to the sender and are
   resent.  Credits never drop.
6. **receive and propagate** (``stages.receive``): bytes served at a hop
   reach the next hop in the same step (:func:`fabric_jax.links.serve_through`); at
   the last hop they go on the flow's receiver wire, which delivers them after the
   path's one-way latency.
   A receiver in go-back-N discard mode throws away a fraction of the last-hop bytes
   (``discarded``, returned to the sender and resent): after out-of-order arrivals
   when the NIC does not reorder (``reorder=False`` with a flow split over paths of
   different delay, path latency + ``sum q_l / C_l``) and after losses under
   ``loss_recovery="go_back_n"`` (model and sources: :mod:`fabric_jax.receiver`).
7. **emit signals** (``stages.signals``): from the standing queues at **switch** ports
   only: marking (the law's ``mark``), queueing delay ``q_l / C_l`` added to the base
   RTT, HPCC telemetry ``q_l/(C_l T) + tx_l/C_l``, losses, receiver credit share;
   written into the feedback ring.
8. **react** (``step.step``): flow control updates pauses and credits; accounting and
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
well mixed (each flow served in proportion to its share of it), which stretches a short
flow's last bytes behind a standing queue.  Derivatives through the
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
(``nic_send``), and what a flow could not put through stays unsent in its own send
queue (``hold_at_sender``; ``sent`` counts only bytes that left the NIC).  What it
sent beyond its cut-through allocation joins the FIFO of the first overloaded switch
port, so a flow that meets a standing queue downstream is served there in proportion
to what it sends, never starved at its NIC.  Nothing is marked, counted as queueing delay or
telemetry, dropped or trimmed at a NIC; PFC may still pause the NIC (the PAUSE comes
from the first switch), and the paused flows then send nothing.  Which links are NIC egress: ``nic_links=`` (a ``[links]`` mask or the
:class:`fabric_jax.Topology`), else derived from the flows' first hops.

Accounting (checked each step): ``sent = delivered + in_flight + queued + dropped +
discarded`` exactly up to float round-off (``FluidInfo.max_residual``).  A flow finishes when its
last byte has passed its last queue, plus ``L_f``; inside the step, queued bytes leave
first (while the last port drains what it serves) and cut-through bytes at the flow's
pacing rate where the path has room (``stages.complete.finish_in_step``), so a flow shorter than
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
(per-packet multipath); marks, RTT and utilisation signals are
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
(``stages.receive.lossy_links``).  The drops are counted in ``dropped`` (per flow) and
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
allocate stage (``stages.classes``) first shares each link among its classes
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
(``tests/dynamics/test_traffic_classes.py``).  ``FluidInfo.paused_time`` is then ``[links,
classes]``.

Shared buffer (``shared_buffer=``, :class:`fabric_jax.flowcontrol.SharedBuffer`): a
switch's memory is shared by its queues with dynamic thresholds ``alpha (B - Q)``
(Choudhury and Hahne 1998): egress queues for ``drop`` / ``trim``, ingress pools (XOFF,
credits) for ``pfc`` / ``credit``.

Checkpoint and resume (``run(problem, state)``, ``init_state=``,
:mod:`fabric_jax.checkpoint`).  ``FluidResult.state`` is the complete carry of the loop
after its last step.  Passing it back continues the run at step ``k`` (simulated time ``k dt``, so
arrivals, fault times and trajectory times stay absolute).  On CPU a run cut into
pieces is bit-identical to the uninterrupted run.

Kernels.  On a GPU each XLA fusion costs about one kernel launch (~5 us whatever its
size), so the step is laid out to compile into few of them (counted by
``experiments/bench_gpu.py --parts kernels``, budgeted by ``tests/fluid/test_kernels.py``):
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

from . import checks, loop, options, problem, result, stages, state, step
from .options import (CongestionControl, FlowControlConfig, Numerics, QoS, Receiver, SaveAt,
                      Solver)
from .problem import FluidProblem, check_state, init_state, prepare
from .result import COMPLETION_RTOL, FluidInfo, FluidResult, FluidTrajectory
from .loop import run, run_batched, stack
from .simulate import simulate_fluid, simulate_fluid_batched
from .state import FluidState
from .windowed import SlotResult, simulate_fluid_windowed

__all__ = ["prepare", "run", "stack", "run_batched", "init_state", "check_state",
           "FluidProblem", "FluidState", "FluidResult", "FluidInfo", "FluidTrajectory",
           "CongestionControl", "FlowControlConfig", "Receiver", "QoS", "Solver", "Numerics",
           "SaveAt", "simulate_fluid", "simulate_fluid_batched", "simulate_fluid_windowed",
           "SlotResult", "COMPLETION_RTOL"]
