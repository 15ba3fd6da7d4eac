"""The host side of a fluid run: ``prepare(...) -> FluidProblem``.

:func:`prepare` checks every input on the host (a ``ValueError`` naming the argument
and the fix), lays the flows out as a padded hop table, derives the delay lines and
the static choices the host can prove, and freezes all of it into a
:class:`FluidProblem`: a registered pytree whose *static* part (the law, the flow
control, the routing policy, the shapes, the loop options, the number of steps) is
the compiled program's key and whose *array* part (the network, the flows, the
parameters, ``dt``) is traced.  :func:`fabric_jax.fluid.run` takes it on the device;
the same problem runs under ``jit``, ``vmap`` (a batch of problems of one static
part, :func:`fabric_jax.fluid.stack`) and ``shard_map``
(:func:`fabric_jax.distributed.simulate_fluid_sharded`).

The fields of :class:`Net` declare their flow axis (``flow_axis`` in the field's
metadata: 0 for per-flow records, ``None`` for links, switches and scalars), read by
every driver that splits the flows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import checkpoint as ckm
from .. import faults as fm
from .. import flowcontrol as fcm
from .. import links as lk
from .. import qos
from .. import queueing as qm
from ..fairness import check_loop_options
from ..sim import prepare_flows
from . import checks
from .options import (CongestionControl, FlowControlConfig, Numerics, QoS, Receiver,
                      SaveAt, Solver, as_options)
from .state import FluidState, initial_state

__all__ = ["FluidProblem", "Net", "Static", "Shape", "prepare", "init_state", "check_state"]


@dataclasses.dataclass(frozen=True)
class Shape:
    """Static shapes of the run's state beyond flows, hops and links."""

    ring_len: int          # feedback ring, steps
    wire_depth: int        # receiver wire history, steps
    routed: bool           # a routing policy (state: route, load, mark_l, rate)
    n_classes: int = 1
    fifo_bands: int = lk.DEFAULT_FIFO_BANDS
    lossy: bool = False    # a fault schedule with lossy links (state: corrupted)


@dataclasses.dataclass(frozen=True)
class Static:
    """Static choices of a run (hashable: part of the compiled program's key)."""

    law: Any
    fc: Any
    policy: Any
    shape: Shape
    solver_iterations: Any
    solver_unroll: int = 0    # iterations of known trip count before the solves' loops
    solver_check_every: int = 1   # iterations per test of the per-step solves' loops
    rx_ooo: bool = False      # out-of-order arrivals cost (reorder=False, several paths)
    go_back_n: bool = False   # loss_recovery == "go_back_n"
    n_classes: int = 1        # traffic classes (1: the single-class model)
    levels: tuple = ()        # priority level of each class (qos.TrafficClasses.levels)
    shared: bool = False      # shared switch buffer with dynamic thresholds
    stop_when_idle: bool = False
    nic_ports: str = "check"  # "one": every flow leaves through one NIC port (host-proved)
    sweeps: int = 0           # sweeps of serve_through (0: hops per path)


def _per_flow(default=dataclasses.MISSING):
    return dataclasses.field(default=default, metadata=dict(flow_axis=0))


def _shared(default=dataclasses.MISSING):
    return dataclasses.field(default=default, metadata=dict(flow_axis=None))


@dataclasses.dataclass(frozen=True)
class Net:
    """The run's fixed arrays: hop table, link and flow constants.  Each field's
    ``flow_axis`` metadata says whether it is per flow (0) or shared (``None``)."""

    hops: lk.HopTable = _per_flow()
    switch: Any = _shared()      # [links] 1.0 at switch ports, 0.0 at host-NIC egress
    capacity: Any = _shared()    # [links] nominal capacity
    line_rate: Any = _per_flow()   # [flows]
    base_rtt: Any = _per_flow()    # [flows]
    fb_steps: Any = _per_flow()    # [flows] feedback delay, whole steps
    fb_phi: Any = _per_flow()      # [flows] and fraction of a step
    wire_n: Any = _per_flow()      # [flows] receiver-wire delay, whole steps
    wire_phi: Any = _per_flow()    # [flows] and fraction of a step
    one_way: Any = _per_flow()     # [flows] one-way latency, s
    deps: Any = _per_flow()
    flows: Any = _per_flow()
    path_lat: Any = _per_flow(None)   # [flows, paths] latency of each candidate path, s
    mtu: Any = _shared(None)          # packet size, bytes (receiver model)
    tolerance: Any = _shared(None)    # reorder tolerance, s
    wait_pairs: Any = _shared(None)   # queueing.IngressPairs (packet-scale port waits)
    burstiness: Any = _shared(None)   # queueing burstiness kappa
    # traffic classes: "units" are links x classes (unit l * n_classes + c); with one
    # class uhops is hops and uswitch is switch
    uhops: Any = _per_flow(None)        # HopTable over units
    uswitch: Any = _shared(None)        # [units] 1.0 at switch ports
    class_weight: Any = _shared(None)   # [classes] arbitration weights
    # shared buffer (flowcontrol.SharedBuffer), per unit
    sb_size: Any = _shared(None)        # [switches] bytes
    sb_alpha: Any = _shared(None)       # [units]
    sb_egress: Any = _shared(None)      # [units] switch of the egress queue
    sb_ingress: Any = _shared(None)     # [units] switch of the ingress pool
    sb_headroom: Any = _shared(None)    # [units] PFC headroom, bytes
    sb_weight: Any = _shared(None)      # [switches] occupancy weight (rail reduction)

    @classmethod
    def flow_axes(cls) -> dict:
        """``{field: 0 or None}``: the fields split with the flows."""
        return {f.name: f.metadata["flow_axis"] for f in dataclasses.fields(cls)}


jax.tree_util.register_dataclass(Net)


@dataclasses.dataclass(frozen=True)
class FluidProblem:
    """A prepared fluid run (:func:`prepare`): what :func:`fabric_jax.fluid.run` needs.

    Static part (the compiled program's key): ``static`` (:class:`Static`), ``n_saves``
    chunks of ``save_every`` steps, ``trajectory`` (whether snapshots are kept).
    Arrays (traced): ``net`` (:class:`Net`), the law's ``params``, ``fc_params``
    (:class:`~fabric_jax.flowcontrol.FlowControlParams`), ``smooth``, ``dt`` (s), the
    routing policy's ``routing_params`` and initial ``routing_state``, the compiled
    ``faults`` schedule.
    """

    static: Static
    n_saves: int
    save_every: int
    trajectory: bool
    net: Net
    params: Any
    fc_params: Any
    smooth: Any
    dt: Any
    routing_params: Any = None
    routing_state: Any = None
    faults: Any = None

    @property
    def n_steps(self) -> int:
        """Steps of the run."""
        return self.n_saves * self.save_every

    @property
    def n_flows(self) -> int:
        return int(self.net.line_rate.shape[-1])

    @property
    def n_links(self) -> int:
        return int(self.net.hops.n_links)

    def replace(self, **changes) -> "FluidProblem":
        """A copy with ``changes`` (e.g. another ``params`` or ``capacity`` in ``net``)."""
        return dataclasses.replace(self, **changes)


jax.tree_util.register_dataclass(
    FluidProblem,
    data_fields=["net", "params", "fc_params", "smooth", "dt", "routing_params",
                 "routing_state", "faults"],
    meta_fields=["static", "n_saves", "save_every", "trajectory"])


def init_state(problem: FluidProblem) -> FluidState:
    """The state of ``problem`` before step 0 (traceable)."""
    net = problem.net
    return initial_state(problem.static.law, problem.static.fc, problem.static.shape,
                         net.hops, net.flows["size"], net.line_rate, net.base_rtt,
                         problem.params, problem.routing_state)


def check_state(problem: FluidProblem, state, *, name: str = "init_state") -> FluidState:
    """Host: ``state`` (a :class:`FluidState`, or a
    :class:`fabric_jax.checkpoint.Checkpoint` loaded from disk) checked against the
    structure, shapes and dtypes of ``problem``'s state.

    Raises:
      ValueError: naming ``name``, a structure, shape or dtype that does not match.
    """
    template = jax.eval_shape(init_state, problem)
    return ckm.restore(state, template, name=name)


def prepare(incidence, capacity, size, *, dt, n_steps: int, arrival=None, deps=None,
            delay=None, latency=None, line_rate=None, base_rtt=None, link_latency=None,
            nic_links=None, routing=None, faults=None, cc=None, flow_control=None,
            receiver=None, qos=None, solver=None, numerics=None,
            save=None) -> FluidProblem:
    """Checks and lays out a fluid run on the host (nothing is traced).

    Args:
      incidence: :class:`~fabric_jax.Incidence` or dense ``[links, flows]``; the entries
        of each flow in COO order are its hops in path order (one path per flow, weights
        0 or 1; a flow split over several paths needs ``routing``).
      capacity: ``[links]`` bytes/s.
      size: ``[flows]`` bytes.
      dt: step, seconds.
      n_steps: number of steps (static).
      arrival, deps, delay: flow lifecycle, as in :func:`fabric_jax.simulate_flows`
        (seconds; ``deps`` ``[flows, max_deps]``).
      latency: ``[flows]`` one-way latency outside the links (host/NIC processing), s.
      line_rate: ``[flows]`` NIC line rate, bytes/s (default: the smallest capacity on
        the flow's path).
      base_rtt: ``[flows]`` propagation round trip, s: the feedback delay (default
        ``max(2 L_f, dt)``, ``L_f`` the one-way latency).
      link_latency: ``[links]`` latency of each link, s; ``None``: links add none.
      nic_links: host-NIC egress links (never marked, dropped or trimmed): a ``[links]``
        bool mask or a :class:`fabric_jax.Topology`; ``None``: the flows' first hops.
      routing: a :class:`fabric_jax.routing.Routing`: dynamic per-step splits over each
        flow's candidate paths; ``None``: the static single path of ``incidence``.
      faults: link events, lossy links or a :class:`fabric_jax.faults.FaultSchedule`.
      cc, flow_control, receiver, qos, solver, numerics, save: the options
        (:mod:`fabric_jax.fluid.options`: ``CongestionControl`` or a law or its name,
        ``FlowControlConfig`` or a mode, ``Receiver``, ``QoS``, ``Solver``, ``Numerics``,
        ``SaveAt``); ``None``: each one's defaults.

    Returns:
      :class:`FluidProblem`.

    Raises:
      ValueError: bad shapes or values, each naming the argument (see
        :func:`fabric_jax.simulate_fluid` for the full list).
    """
    cc, fco, receiver, qos_o, solver, numerics, save = _options(
        cc, flow_control, receiver, qos, solver, numerics, save)
    law, flow_control = cc.law, fco.mode
    n_steps = checks.check_n_steps(n_steps)
    if not isinstance(dt, jax.core.Tracer) and not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be a positive number of seconds; got {dt!r}")
    if save.every is not None and n_steps % save.every:
        raise ValueError(f"save_every must be a positive integer dividing n_steps={n_steps}; "
                         f"got {save.every!r}")
    smooth = solver.smooth
    if isinstance(base_rtt, jax.core.Tracer) or isinstance(dt, jax.core.Tracer):
        raise ValueError("base_rtt and dt must be concrete: they set the delay-line length")
    (capacity, deps, flows, link_tab, seg, hops, nic, policy, rparams,
     rstate0) = _layout(incidence, capacity, size, arrival, deps, delay, latency, routing,
                        nic_links)
    n_links, n_flows = hops.n_links, link_tab.shape[0]
    fdt = capacity.dtype

    line_rate, path_lat, one_way, base_rtt = _flow_constants(
        capacity, link_tab, int(seg), n_links, flows, line_rate, base_rtt, link_latency,
        float(dt))
    delays = _delay_lines(base_rtt, one_way, float(dt), flow_control, numerics.delay_steps)
    params = cc.resolved_params()
    checks.check_law_params(law, params)
    tc_cfg, tc_arr = checks.prepare_classes(qos_o.traffic_class, qos_o.classes, n_flows)
    n_classes = 1 if tc_cfg is None else tc_cfg.n_classes
    sb = checks.prepare_shared(fco.shared_buffer, n_links, n_classes)
    fc_params = _fc_params(fco, flow_control, capacity, n_links, n_classes, float(dt))
    if save.every is None:
        n_outer, inner, keep_traj = 1, n_steps, False
    else:
        n_outer, inner, keep_traj = n_steps // save.every, int(save.every), True
    solver_iterations = _solver_iterations(solver, n_flows)
    sched = _schedule(faults, n_links, float(dt), fdt)
    shape = Shape(ring_len=delays["ring_len"], wire_depth=delays["wire_depth"],
                  routed=policy is not None, n_classes=n_classes,
                  fifo_bands=numerics.fifo_bands,
                  lossy=sched is not None and sched.loss is not None)
    # out-of-order arrivals need a flow split over several paths at once; ECMP and
    # flowlet switching keep each flow on one path (their split is one-hot, the model
    # would give exactly 0), so they skip the [flows, paths, paths] kernel
    rx_ooo = ((not receiver.reorder) and policy is not None and hops.n_paths > 1
              and getattr(policy, "name", None) not in ("ecmp", "flowlet"))
    net = Net(hops=hops, switch=jnp.asarray(~nic, fdt), capacity=capacity,
              line_rate=line_rate, base_rtt=jnp.asarray(base_rtt, fdt), deps=deps,
              flows=flows, **_delay_arrays(delays, one_way, path_lat, fdt),
              **_receiver_arrays(receiver, hops, rx_ooo, fdt))
    net = _class_net(net, tc_cfg, tc_arr, sb, flow_control, capacity, float(dt), fdt)
    static = Static(law=law, fc=flow_control, policy=policy, shape=shape,
                    solver_iterations=solver_iterations, solver_unroll=int(solver.unroll),
                    solver_check_every=int(solver.check_every), rx_ooo=bool(rx_ooo),
                    go_back_n=receiver.loss_recovery == "go_back_n", n_classes=n_classes,
                    levels=() if tc_cfg is None else tc_cfg.levels, shared=sb is not None,
                    stop_when_idle=bool(save.stop_when_idle),
                    nic_ports="one" if checks.one_nic_port(link_tab, int(seg), nic) else "check",
                    sweeps=checks.nic_sweeps(link_tab, int(seg), nic))
    return FluidProblem(static=static, n_saves=n_outer, save_every=inner,
                        trajectory=keep_traj, net=net, params=params, fc_params=fc_params,
                        smooth=smooth, dt=jnp.asarray(dt, fdt), routing_params=rparams,
                        routing_state=rstate0, faults=sched)


def _delay_arrays(delays, one_way, path_lat, fdt) -> dict:
    """The :class:`Net` fields of the delay lines and latencies."""
    return dict(fb_steps=jnp.asarray(delays["fb_steps"]),
                fb_phi=jnp.asarray(delays["fb_phi"], fdt),
                wire_n=jnp.asarray(delays["wire_n"]),
                wire_phi=jnp.asarray(delays["wire_phi"], fdt),
                one_way=jnp.asarray(one_way, fdt), path_lat=jnp.asarray(path_lat, fdt))


def _receiver_arrays(receiver, hops, rx_ooo, fdt) -> dict:
    """The :class:`Net` fields of the receiver model (the port pairs of the packet-scale
    waits only where out-of-order arrivals are modelled)."""
    return dict(mtu=jnp.asarray(receiver.mtu, fdt),
                tolerance=jnp.asarray(receiver.reorder_tolerance, fdt),
                wait_pairs=(qm.ingress_pairs(np.asarray(hops.link), np.asarray(hops.prev),
                                             hops.n_links) if rx_ooo else None),
                burstiness=jnp.asarray(receiver.burstiness, fdt))


def _flow_constants(capacity, link_tab, seg, n_links, flows, line_rate, base_rtt,
                    link_latency, dt):
    """``(line_rate, path_lat, one_way, base_rtt)``: each flow's line rate (default the
    smallest capacity on its path), its paths' latencies, its one-way latency (the
    mean over its candidate paths, plus its own) and base RTT (default ``max(2 L_f,
    dt)``)."""
    n_flows = link_tab.shape[0]
    checks.check_positive_array("line_rate", line_rate, (n_flows,))
    checks.check_positive_array("base_rtt", base_rtt, (n_flows,))
    if line_rate is None:
        cap_ext = np.append(np.asarray(capacity, float), np.inf)
        lr = cap_ext[link_tab].min(axis=1)
        lr = np.where(np.isfinite(lr) & (lr > 0), lr, np.max(np.asarray(capacity), initial=1.0))
        line_rate = lr
    line_rate = jnp.asarray(line_rate, capacity.dtype)
    path_lat = lk.path_latencies(link_latency, link_tab, seg, n_links)
    one_way = np.asarray(flows["latency"], float) + checks.mean_over_paths(
        path_lat, link_tab, seg, n_links)
    if base_rtt is None:
        base_rtt = np.maximum(2 * one_way, dt)
    return line_rate, path_lat, one_way, base_rtt


def _schedule(faults, n_links, dt, fdt):
    """The compiled fault schedule (:func:`fabric_jax.faults.fault_schedule`) as device
    arrays, or ``None``."""
    if faults is None:
        return None
    sched = fm.fault_schedule(faults, n_links, dt)
    return fm.FaultSchedule(step=jnp.asarray(sched.step, jnp.int32),
                            factor=jnp.asarray(sched.factor, fdt),
                            loss=None if sched.loss is None else jnp.asarray(sched.loss, fdt))

def _solver_iterations(solver, n_flows):
    """The solves' fixed iteration count (``flows + 1`` in the smooth mode by default),
    the loop options checked together."""
    iterations = solver.iterations
    if iterations is None and solver.smooth.enabled:
        iterations = n_flows + 1
    check_loop_options(iterations, solver.unroll, solver.check_every,
                       names=("solver_iterations", "solver_unroll", "solver_check_every"),
                       fixed="solver_iterations or smooth")
    return iterations


def _layout(incidence, capacity, size, arrival, deps, delay, latency, routing, nic_links):
    """The flows checked (:func:`fabric_jax.sim.prepare_flows`) and laid out: ``(capacity,
    deps, flows, link_tab, seg, hops, nic, policy, rparams, rstate0)``, the hop table
    over each flow's paths and the host-NIC links."""
    n_flows_guess = np.shape(size)[0] if np.ndim(size) == 1 else None
    if arrival is None and n_flows_guess is not None:
        arrival = np.zeros(n_flows_guess)
    inc, capacity, deps, flows = prepare_flows(incidence, capacity, arrival, size, deps, delay,
                                               latency, None)
    link_tab, w_tab, seg, policy, rparams, rstate0 = _paths(inc, routing, capacity.dtype)
    hops = lk.hop_table(link_tab, w_tab, int(seg), inc.n_links)
    nic = lk.nic_links(link_tab, int(seg), inc.n_links, nic_links)
    return capacity, deps, flows, link_tab, int(seg), hops, nic, policy, rparams, rstate0


def _options(cc, flow_control, receiver, qos, solver, numerics, save) -> tuple:
    """Each option as its object (:func:`fabric_jax.fluid.options.as_options`)."""
    return (as_options(CongestionControl, cc, "cc"),
            as_options(FlowControlConfig, flow_control, "flow_control"),
            as_options(Receiver, receiver, "receiver"), as_options(QoS, qos, "qos"),
            as_options(Solver, solver, "solver"), as_options(Numerics, numerics, "numerics"),
            as_options(SaveAt, save, "save"))


def _paths(inc, routing, fdt):
    """``(link_tab, w_tab, seg, policy, rparams, rstate0)``: the flows' hop table over
    their paths (one path per flow, or the routing policy's candidate paths)."""
    n_links, n_flows = inc.n_links, inc.n_flows
    if routing is None:
        entry = checks.hop_entries(inc)
        checks.check_single_path(inc)
        exists = entry >= 0
        link_tab = np.where(exists, np.asarray(inc.link_idx)[np.maximum(entry, 0)], n_links)
        w_tab = jnp.where(jnp.asarray(exists), jnp.asarray(inc.weight, fdt)[np.maximum(entry, 0)],
                          0.0)
        return link_tab, w_tab, link_tab.shape[1], None, None, None
    rlinks = np.asarray(routing.links)
    rhop = np.asarray(routing.hop_mask, bool) & (rlinks >= 0)
    if rlinks.ndim != 3 or rlinks.shape[0] != n_flows:
        raise ValueError(f"routing.links must be [flows, paths, hops] with flows = "
                         f"{n_flows}; got shape {rlinks.shape}")
    if rlinks.size and rlinks.max() >= n_links:
        raise ValueError(f"routing.links uses link {int(rlinks.max())} but capacity has "
                         f"{n_links} links")
    checks.check_routing_covers(inc, rlinks, rhop)
    seg = max(rlinks.shape[2], 1)
    link_tab = np.where(rhop, rlinks, n_links).reshape(n_flows, -1)
    w_tab = jnp.asarray(rhop.reshape(n_flows, -1), fdt)
    return link_tab, w_tab, seg, routing.policy, routing.params, routing.state


def _delay_lines(base_rtt, one_way, dt, flow_control, delay_steps) -> dict:
    """The feedback delay ``base_rtt / dt = n + phi`` steps (at least one step: the law
    reads the signals of steps ``k - n`` and ``k - n - 1`` weighted ``1 - phi`` and
    ``phi``), the receiver wire taps, and the lengths of both lines."""
    fb_d = np.asarray(base_rtt, float) / dt
    fb_steps = np.maximum(np.floor(fb_d + 1e-9), 1).astype(np.int32)
    fb_phi = np.where(fb_d > fb_steps, np.clip(fb_d - fb_steps, 0.0, 1.0), 0.0)
    fb_phi = np.where(fb_phi < 1e-9, 0.0, fb_phi)
    ring_len = int(fb_steps.max(initial=1) + flow_control.rto_steps + 2)
    wire_n, wire_phi, wire_depth = lk.wire_taps(one_way, dt)
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
    return dict(fb_steps=fb_steps, fb_phi=fb_phi, ring_len=ring_len, wire_n=wire_n,
                wire_phi=wire_phi, wire_depth=wire_depth)


def _fc_params(fco, flow_control, capacity, n_links, n_classes, dt):
    """The flow-control thresholds in force: given, or from the buffers (static
    per-port pools split evenly over the classes; PFC thresholds with a reaction time
    of ``pause_delay * dt``)."""
    fc_params = fco.params
    if fc_params is None:
        buf = np.inf if fco.buffer is None else fco.buffer
        if n_classes > 1 and not isinstance(buf, jax.core.Tracer):
            # static per-port pools: the port's memory split evenly over its classes
            buf = np.asarray(buf, float) / n_classes
        if flow_control.mode == "pfc" and not isinstance(buf, jax.core.Tracer):
            xoff, xon = fcm.pfc_thresholds(np.asarray(capacity), buf,
                                           reaction_s=flow_control.pause_delay * dt)
            fc_params = fcm.flow_control_params(n_links, buffer=buf, xoff=xoff, xon=xon)
        else:
            fc_params = fcm.flow_control_params(n_links, buffer=buf)
    checks.check_fc_params(flow_control, fc_params, n_links)
    if n_classes > 1:
        fc_params = fcm.class_params(fc_params, n_links, n_classes)
    return fc_params


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
                     sb_headroom=jnp.repeat(jnp.asarray(headroom, fdt), n_classes),
                     sb_weight=None if sb.weight is None else jnp.asarray(sb.weight, fdt))
    return dataclasses.replace(net, **extra)
