"""Fabric presets: named bundles of routing, congestion control and flow control.

Units: bytes, seconds, bytes/s (convenience arguments carry their unit in the name).

A :class:`Fabric` says which mechanisms run in the fluid fabric
(:func:`fabric_jax.fluid.simulate_fluid`): a routing policy (:mod:`fabric_jax.routing`),
a congestion-control law (:mod:`fabric_jax.cc`), a link-level flow-control mode
(:mod:`fabric_jax.flowcontrol`) and features (SHARP in-network reduction).  The four
presets are starting points; override any field::

    fab = roce(routing="spray")                 # RoCE with packet spraying
    fab = infiniband(sharp=False)
    fab = uec(cc_options={"rccc": True})        # NSCC + RCCC receiver credit

========== ============ ======= ======== ======= ========== ============================
preset     routing      cc      flow ctl reorder loss rec.  features
========== ============ ======= ======== ======= ========== ============================
infiniband ``ib_ar``    ibcc    credit   yes     go_back_n  SHARP all-reduce
roce       ``ecmp``     dcqcn   pfc      no      go_back_n  --
spectrum_x ``spectrum_x_ar`` hpcc pfc    yes     selective  SuperNIC placement
uec        ``spray``    nscc    trim     yes     selective  REPS / RCCC optional
========== ============ ======= ======== ======= ========== ============================

Receiver (:mod:`fabric_jax.receiver`): ``reorder`` says whether the receiving
NIC accepts out-of-order packets; without it, a flow sprayed over paths of different
delay loses goodput to go-back-N resends.  ``loss_recovery`` (``"selective"`` |
``"go_back_n"``) says what a loss costs.  RoCE with per-packet spraying and a plain
(non-reordering) NIC is the named configuration ``roce(routing="spray")`` (in a
scenario file: ``[fabrics.roce]`` with ``routing = "spray"``); ``roce(routing="spray",
reorder=True)`` is the same with a reordering NIC.

Congestion-control parameters follow the NIC line rate ``nic_gbps`` (default 400 Gb/s,
the topology builders' default link speed): :meth:`Fabric.law_params` calls
:func:`fabric_jax.cc.params_for` (rules and sources: ``docs/cc_parameters.md``), and a
case builder that knows the topology passes its rate, ``law_params(line_rate=...)``.

Device latency per preset: ``switch_latency`` (port to port) and
``nic_latency`` (one NIC traversal) in seconds, from the vendor documents named in each
preset; :meth:`Fabric.link_latency` adds them to a topology's per-link propagation
delay (a link leaving a switch carries that switch's latency, a link leaving or
entering a host one NIC latency).

Traffic classes and isolation (:mod:`fabric_jax.qos`): each preset documents
its port classes (IB: SL-to-VL mapping and VL arbitration with per-VL credits; RoCE and
Spectrum-X: 802.1p priorities under ETS with per-priority PFC; UEC: ETS classes) in
``class_names`` / ``class_weights`` / ``class_levels``.  ``class_map`` assigns tenants
or traffic types (the job names of the compare study: ``"train"``, ``"tenant"``,
``"background"``) to classes; it is empty by default, so every flow is in one class and
the presets run today's single-class model.  :data:`TENANT_CLASSES` puts the training
job in its own class.  ``shared_buffer_alpha`` (default ``None``: static per-port pools)
turns the switches' memory into one shared pool per switch with dynamic thresholds
(:class:`fabric_jax.flowcontrol.SharedBuffer`).  Assumption: every class of a fabric
uses the fabric's flow-control mode (a lossless RDMA priority beside a lossy TCP one is
not expressed).

SHARP (Graham et al., "Scalable Hierarchical Aggregation Protocol", COMHPC 2016):
switches reduce, so each host sends its ``S`` bytes once and receives the result once,
versus ``2 (n-1)/n S`` each way in a ring:
:func:`fabric_jax.workloads.steady_state_all_reduce` with ``sharp=True`` emits one flow of
``S`` per host along the ring order instead of ``2 (n-1)/n S`` (pipelined form).  The
saving on switch-to-switch links (the aggregation tree sends one copy per switch) is not
modelled, so the preset is conservative for IB.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import cc
from .routing import get_policy
from .units import NS, US, gbps

__all__ = ["Fabric", "infiniband", "roce", "spectrum_x", "uec", "PRESETS", "get_fabric",
           "IB_SWITCH_LATENCY", "SPECTRUM_SWITCH_LATENCY",
           "ETHERNET_SWITCH_LATENCY", "NIC_LATENCY", "TENANT_CLASSES"]

#: A ``class_map`` that isolates the training job: it alone in class 1, every other
#: tenant and the background traffic in class 0.
TENANT_CLASSES = {"train": 1, "tenant": 0, "background": 0}

#: Device latencies, seconds (sources in the preset docstrings).
IB_SWITCH_LATENCY = 130 * NS        # NVIDIA Quantum (HDR, QM8700) data sheet, cut-through
SPECTRUM_SWITCH_LATENCY = 300 * NS  # Mellanox Spectrum (SN2000) product brief, cut-through
ETHERNET_SWITCH_LATENCY = 600 * NS  # Arista 7050X data sheet: 550-650 ns cut-through
NIC_LATENCY = 0.3 * US              # ConnectX "sub-600 ns" end to end, split over two NICs


@dataclasses.dataclass(frozen=True)
class Fabric:
    """A bundle of fabric mechanisms.

    Attributes:
      name: preset name.
      routing: routing policy name (:data:`fabric_jax.routing.POLICIES`).
      routing_options: keyword overrides of the policy's ``default_params``.
      cc: congestion-control law name (:data:`fabric_jax.cc.LAWS`).
      cc_options: keyword overrides of the law's parameter builder.
      flow_control: mode of :data:`fabric_jax.flowcontrol.MODES`.
      sharp: SHARP in-network reduction for all-reduce.
      description: what the preset models and leaves out.
      nic_gbps: NIC line rate, Gb/s, from which the congestion-control defaults are
        derived (:func:`fabric_jax.cc.params_for`).
      switch_latency: switch port-to-port latency, s (added per switch hop by
        :meth:`link_latency`).
      nic_latency: latency of one NIC traversal (send or receive), s.
      reorder: the receiving NIC accepts out-of-order packets (``False``: out-of-order
        arrivals trigger go-back-N resends, :mod:`fabric_jax.receiver`).
      loss_recovery: ``"selective"`` or ``"go_back_n"``
        (:data:`fabric_jax.receiver.LOSS_RECOVERY`).
      class_map: tenant / traffic-type name -> traffic class id (e.g.
        :data:`TENANT_CLASSES`); names not listed go to class 0; empty (default): one
        class.
      class_weights: per class arbitration weight (ETS bandwidth share, IB VL-arbitration
        table weight); its length is the number of classes.
      class_levels: per class priority level (higher served first; default all 0).
      class_names: per class label (the port's priority / VL).
      shared_buffer_alpha: dynamic-threshold factor of a shared switch buffer
        (:func:`fabric_jax.flowcontrol.shared_buffer`), or ``None`` (default): static
        per-port pools.
    """

    name: str
    routing: str
    cc: str
    flow_control: str
    routing_options: dict = dataclasses.field(default_factory=dict)
    cc_options: dict = dataclasses.field(default_factory=dict)
    sharp: bool = False
    description: str = ""
    nic_gbps: float = 400.0
    switch_latency: float = 0.0
    nic_latency: float = 0.0
    reorder: bool = True
    loss_recovery: str = "selective"
    class_map: dict = dataclasses.field(default_factory=dict)
    class_weights: tuple = (1.0, 1.0)
    class_levels: tuple = ()
    class_names: tuple = ()
    shared_buffer_alpha: float | None = None

    def __post_init__(self):
        get_policy(self.routing)
        if self.cc not in cc.LAWS:
            raise ValueError(f"cc must be one of {sorted(cc.LAWS)}; got {self.cc!r}")
        for name, bound, unit in (("nic_gbps", "> 0", "Gb/s"), ("switch_latency", ">= 0", "s"),
                                  ("nic_latency", ">= 0", "s")):
            v = getattr(self, name)
            ok = (isinstance(v, (int, float, np.floating, np.integer)) and not isinstance(v, bool)
                  and np.isfinite(v) and (v > 0 if bound == "> 0" else v >= 0))
            if not ok:
                raise ValueError(f"{name} must be a finite number {bound} ({unit}); got {v!r}")
        from .flowcontrol import MODES
        if self.flow_control not in MODES:
            raise ValueError(f"flow_control must be one of {MODES}; got {self.flow_control!r}")
        from .receiver import check_options
        check_options(self.reorder, self.loss_recovery)
        self.traffic_classes()  # validates class_weights / class_levels / class_names
        n = len(self.class_weights)
        if not isinstance(self.class_map, dict) or any(
                not isinstance(k, str) or not isinstance(v, (int, np.integer))
                or isinstance(v, bool) or not 0 <= v < n for k, v in self.class_map.items()):
            raise ValueError(f"class_map must map job names to class ids in [0, {n}) "
                             f"(len(class_weights) classes); got {self.class_map!r}")
        a = self.shared_buffer_alpha
        if a is not None and not (isinstance(a, (int, float, np.floating, np.integer))
                                  and not isinstance(a, bool) and np.isfinite(a) and a > 0):
            raise ValueError(f"shared_buffer_alpha must be None or a finite number > 0; "
                             f"got {a!r}")

    def traffic_classes(self):
        """The port classes as a :class:`fabric_jax.qos.TrafficClasses`."""
        from . import qos
        n = len(self.class_weights)
        return qos.traffic_classes(n, weights=self.class_weights,
                                   levels=self.class_levels or None,
                                   names=self.class_names or None)

    def class_options(self, job_of, job_names, topology=None) -> dict:
        """Keyword arguments of :func:`fabric_jax.fluid.simulate_fluid` for traffic
        classes and shared buffers: ``{}`` for a single-class fabric with static pools.

        Args:
          job_of: ``[flows]`` job id of each flow.
          job_names: job id -> name (a dict or sequence), matched against ``class_map``.
          topology: the :class:`fabric_jax.Topology` (for ``shared_buffer_alpha``).
        """
        out = {}
        if self.class_map:
            names = job_names if isinstance(job_names, dict) else dict(enumerate(job_names))
            ids = np.asarray(job_of)
            lut = {j: int(self.class_map.get(names.get(int(j), ""), 0)) for j in np.unique(ids)}
            out.update(traffic_class=np.array([lut[int(j)] for j in ids], np.int32),
                       classes=self.traffic_classes())
        if self.shared_buffer_alpha is not None:
            if topology is None:
                raise ValueError("shared_buffer_alpha needs the topology (switch memory map)")
            from .flowcontrol import shared_buffer
            out["shared_buffer"] = shared_buffer(topology, alpha=self.shared_buffer_alpha)
        return out

    def receiver_options(self) -> dict:
        """``reorder`` and ``loss_recovery`` as keyword arguments of
        :func:`fabric_jax.fluid.simulate_fluid`."""
        return dict(reorder=self.reorder, loss_recovery=self.loss_recovery)

    def replace(self, **overrides) -> "Fabric":
        """A copy with fields replaced (``routing``, ``cc``, ``sharp`` ...)."""
        bad = set(overrides) - {f.name for f in dataclasses.fields(self)}
        if bad:
            raise ValueError(f"unknown Fabric field(s) {sorted(bad)}; accepted: "
                             f"{[f.name for f in dataclasses.fields(self)]}")
        return dataclasses.replace(self, **overrides)

    def law(self):
        return cc.get(self.cc)

    def law_params(self, line_rate=None):
        """The congestion-control parameter pytree at a line rate, plus ``cc_options``.

        Args:
          line_rate: NIC line rate, bytes/s (default ``nic_gbps``); a case builder passes
            its topology's host link rate here.

        Returns:
          :func:`fabric_jax.cc.params_for` ``(self.cc, line_rate, **cc_options)``.

        Raises:
          ValueError: ``cc_options`` the law's builder refuses, or a bad line rate.
        """
        rate = gbps(self.nic_gbps) if line_rate is None else line_rate
        try:
            return cc.params_for(self.cc, rate, **self.cc_options)
        except (TypeError, ValueError) as err:
            raise ValueError(f"cc_options {self.cc_options} not accepted by {self.cc}: "
                             f"{err}") from None

    def link_latency(self, topology, propagation=None) -> np.ndarray:
        """``[links]`` latency, s: propagation plus this fabric's device latencies.

        A link leaving a switch adds ``switch_latency`` (the port-to-port traversal of
        the switch it leaves); a link leaving a host and a link entering a host each
        add ``nic_latency`` (send and receive side).  So a path of ``h`` links through
        ``h - 1`` switches adds ``(h - 1) switch_latency + 2 nic_latency``.

        Args:
          topology: a :class:`fabric_jax.topology.Topology`.
          propagation: ``[links]`` propagation delay, s (default ``topology.latency``,
            which the builders set to the cable delay only when given so -- their
            default 1 us per link is the HPCC simulations' link delay).

        Returns:
          float64 ``[links]`` seconds.
        """
        prop = np.asarray(topology.latency if propagation is None else propagation, float)
        if prop.shape != (topology.n_links,) or not np.all(np.isfinite(prop)) or np.any(prop < 0):
            raise ValueError(f"propagation must be a [links] = ({topology.n_links},) array "
                             f"of finite delays >= 0, seconds")
        is_host = np.asarray(topology.node_is_host, bool)
        from_host = is_host[np.asarray(topology.link_src)]
        to_host = is_host[np.asarray(topology.link_dst)]
        return (prop + np.where(from_host, self.nic_latency, self.switch_latency)
                + np.where(to_host, self.nic_latency, 0.0))

    def with_latency(self, topology, propagation=None):
        """``topology`` with its link latencies replaced by :meth:`link_latency`."""
        return dataclasses.replace(topology, latency=self.link_latency(topology, propagation))

    def routing_params(self):
        """The routing policy's parameter pytree (defaults + ``routing_options``)."""
        try:
            return get_policy(self.routing).default_params(**self.routing_options)
        except TypeError as err:
            raise ValueError(f"routing_options {self.routing_options} not accepted by "
                             f"{self.routing}: {err}") from None


def infiniband(**overrides) -> Fabric:
    """InfiniBand: credit-based lossless links, IB CC, adaptive routing, SHARP.

    Models: credit flow control (IBA vol. 1 sec. 7.9), IB CC (annex A10, FECN/BECN/CCTI
    with the default table of :func:`fabric_jax.cc.ibcc_params`), switch adaptive
    routing deciding per packet from each switch's *own* egress queues only, no
    knowledge of congestion two hops away (:func:`fabric_jax.routing.ib_ar_params`,
    NVIDIA AR documentation), SHARP all-reduce
    (each host sends and receives ``S`` once).  Leaves out: subnet-manager routing
    tables beyond min-hop up/down.

    Traffic classes (used when ``class_map`` is set): two data VLs, ``VL0`` and
    ``VL1``; the SL-to-VL table maps SL0 -> VL0 and SL1 -> VL1 (IBA vol. 1 sec. 7.6.6;
    OpenSM ``qos_sl2vl``), a tenant picks its SL.  VL arbitration (IBA sec. 7.6.9,
    OpenSM ``QoS_management_in_OpenSM.txt`` sec. 7): both VLs in the low-priority table
    with equal weights (64 each, in 64-byte units: ``class_weights=(64, 64)``), high
    table empty (assumption: an operator's even split; OpenSM ships no QoS tables by
    default).  Credits are per VL (sec. 7.9), each VL owns an equal part of the port's
    buffer (assumption).  Receiver: ``reorder=True`` (HCAs that support
    adaptive routing accept out-of-order packets: NVIDIA ConnectX AR documentation;
    a bounded reorder buffer, assumed large enough), ``loss_recovery="go_back_n"`` (IB
    RC transport, IBA vol. 1 sec. 9.7.5: a PSN sequence error NAK makes the requester
    resend from that PSN; matters only on fault losses, credits never drop).

    Expected behaviour (evidence in ``tests/dynamics/test_cc.py``, ``tests/fabrics/test_fabrics.py``):
    credits and IB CC do not slow uncongested traffic (a lone flow and a SHARP
    all-reduce alone run at line rate, CCTI stays 0).  In the compare study's training
    step the fluid all-reduce is nevertheless slower than under ``roce``: it starts
    while the skewed MoE all-to-all still congests hot receivers and spine ports, its
    flows collect BECNs there (CCTI rises ~6 per us at 50 GB/s), and after the hot spots
    drain the CCTI returns by one index per ``ccti_timer``, so the all-reduce runs below
    line rate for a while (``docs/history.md``, ``fabric_jax.fabrics``: the figures of
    that diagnosis).  That is IB CC's fast-
    increase / slow-decrease asymmetry with the published parameters (see
    :mod:`fabric_jax.cc.ibcc`), not an artefact of credits (credit stall 0 in that run)
    or SHARP; the max-min engine (ideal CC) ranks ``infiniband`` first.  Tune with
    ``cc_options={"ccti_timer": ...}`` or compare ``cc="none"``.

    Parameters from the NIC line rate ``nic_gbps`` (default 400 Gb/s, NDR; assumption:
    every HCA runs at the fabric's host link rate): IB CC per
    :func:`fabric_jax.cc.ibcc_params`.  Latency: ``switch_latency`` 130 ns (NVIDIA
    Quantum HDR QM8700 data sheet, cut-through; the NDR Quantum-2 figure is not
    published in a form we could confirm, third-party pages quote 130-330 ns),
    ``nic_latency`` 0.3 us (ConnectX "sub-600 ns" end-to-end latency split over the two
    NICs; our assumption).
    """
    base = Fabric("infiniband", routing="ib_ar", cc="ibcc", flow_control="credit", sharp=True,
                  description="credit lossless + IB CC + local adaptive routing + SHARP",
                  switch_latency=IB_SWITCH_LATENCY, nic_latency=NIC_LATENCY,
                  reorder=True, loss_recovery="go_back_n", class_weights=(64.0, 64.0),
                  class_names=("VL0", "VL1"))
    return base.replace(**overrides)


def roce(**overrides) -> Fabric:
    """RoCEv2: PFC lossless Ethernet, ECN + DCQCN, ECMP hashing.

    Models: PFC pause with XOFF/XON thresholds (:func:`fabric_jax.flowcontrol.pfc_thresholds`,
    [HPCC-NS3] switch MMU), RED/ECN marking and DCQCN (Zhu et al. SIGCOMM 2015, fluid
    model CoNEXT 2016; default gains of :func:`fabric_jax.cc.dcqcn_params`), per-flow
    5-tuple ECMP with distinct per-tier seeds.  Receiver: a plain RoCE NIC,
    ``reorder=False`` and ``loss_recovery="go_back_n"``: it discards out-of-order
    packets and NAKs, the sender goes back N (Mittal et al., "Revisiting Network Support
    for RDMA" (IRN), SIGCOMM 2018, sec. 2: ConnectX RoCE NICs use go-back-N; newer
    ConnectX generations add selective repeat, not assumed here).  With ECMP every flow
    has one path, so reordering costs nothing; ``roce(routing="spray")`` is RoCE with
    per-packet spraying on such a NIC, and pays for it.  Losses happen only on PFC
    headroom overflow, faults or ``flow_control="drop"`` (lossy RoCE), each then costs a
    go-back-N window.  Leaves out: PFC deadlock.

    Traffic classes (used when ``class_map`` is set): two traffic classes, ``TC0``
    (priority 0, default traffic) and ``TC3`` (priority 3, the lossless RoCE priority of
    NVIDIA's RoCE configuration guides, with CNPs on priority 6, not modelled), under
    ETS (IEEE 802.1Qaz) with 50 % / 50 % (assumption), PFC per priority (IEEE
    802.1Qbb).  Switch buffer: ``shared_buffer_alpha`` (e.g. 1, SONiC's default
    ``dynamic_th = 0``) for the shared-buffer MMU of commodity switches.

    Parameters from the NIC line rate ``nic_gbps`` (default 400 Gb/s): DCQCN's
    ``"hpcc_ns3"`` set (HPCC authors' ns-3 "Mellanox" DCQCN: K_min/K_max, R_AI and
    R_HAI in proportion to the rate, timers 4/1/300 us; assumptions: the ECN thresholds
    follow the NIC rate, not each port's, and NVIDIA's unpublished increase-stage
    firmware values equal these).  Latency: ``switch_latency`` 600 ns (a commodity
    shared-buffer Ethernet switch: Arista 7050X data sheet, 550-650 ns cut-through;
    an older generation, our assumption for today's), ``nic_latency`` 0.3 us (as
    :func:`infiniband`: same ConnectX silicon, assumption).
    """
    base = Fabric("roce", routing="ecmp", cc="dcqcn", flow_control="pfc",
                  description="PFC + ECN/DCQCN + ECMP",
                  switch_latency=ETHERNET_SWITCH_LATENCY, nic_latency=NIC_LATENCY,
                  reorder=False, loss_recovery="go_back_n", class_weights=(50.0, 50.0),
                  class_names=("TC0", "TC3"))
    return base.replace(**overrides)


def spectrum_x(**overrides) -> Fabric:
    """NVIDIA Spectrum-X: RoCE plus per-packet global adaptive routing and telemetry CC.

    Models: PFC lossless RoCE; per-packet switch-local adaptive routing combined with
    end-to-end congestion telemetry that reaches the NIC about one RTT late
    (:func:`fabric_jax.routing.spectrum_x_ar_params`; the delay is our assumption),
    with SuperNIC reordering so spraying costs nothing; telemetry-driven congestion control modelled
    by HPCC's in-band-telemetry law (Li et al. SIGCOMM 2019) -- NVIDIA's algorithm is
    not public.  Per-tenant performance isolation comes from this CC plus AR, and
    with ``class_map`` from per-tenant queues (below).  Source of the headline claim: NVIDIA Spectrum-X white
    paper (about 95 % effective bandwidth vs about 60 % for ECMP).  Receiver:
    ``reorder=True`` (SuperNIC direct data placement puts out-of-order packets in
    place, Spectrum-X white paper), ``loss_recovery="selective"`` (our assumption: a
    NIC that places out of order can resend only what is missing; losses are rare under
    PFC).  Leaves out: the real Spectrum-X CC algorithm,
    BlueField/SuperNIC offloads.

    Traffic classes (used when ``class_map`` is set, e.g. :data:`TENANT_CLASSES` for
    per-tenant queues): as :func:`roce`, ``TC0`` and the lossless RoCE priority
    ``TC3`` under ETS 50 % / 50 % (assumption) with per-priority PFC; Spectrum switches
    have a shared buffer with a per-queue alpha (``shared_buffer_alpha``; NVIDIA
    Spectrum shared-buffer documentation, SONiC ``dynamic_th``).

    Parameters from the NIC line rate ``nic_gbps`` (default 400 Gb/s): HPCC's
    ``R_AI = C (1 - eta)/N`` (paper rule, ``N`` = 100 our assumption), ``eta`` 0.95.
    Latency: ``switch_latency`` 300 ns (Mellanox Spectrum SN2000 product brief,
    cut-through; Spectrum-4 is announced as cut-through without a published figure we
    could confirm), ``nic_latency`` 0.3 us (assumption, as :func:`infiniband`).
    """
    base = Fabric("spectrum_x", routing="spectrum_x_ar", cc="hpcc", flow_control="pfc",
                  description="PFC + telemetry CC (HPCC-like) + per-packet AR with telemetry",
                  switch_latency=SPECTRUM_SWITCH_LATENCY, nic_latency=NIC_LATENCY,
                  reorder=True, loss_recovery="selective", class_weights=(50.0, 50.0),
                  class_names=("TC0", "TC3"))
    return base.replace(**overrides)


def uec(**overrides) -> Fabric:
    """Ultra Ethernet (UEC 1.0): packet spraying, NSCC (RCCC optional), trimming.

    Models: even packet spraying over all candidate paths (``routing_options={"reps":
    True}`` for REPS-like steering), NSCC sender CC with the htsim parameter scaling
    (:func:`fabric_jax.cc.nscc_params`; ``cc_options={"rccc": True}`` adds receiver
    credit), lossy links with packet trimming and NACK-driven resend.  Receiver:
    ``reorder=True`` and ``loss_recovery="selective"`` (UEC 1.0 specification, packet
    delivery sublayer: unordered reliable delivery, selective ACK bitmaps, a trimmed
    packet's NACK resends that packet only).  Leaves out:
    link-level retry, credit-based link flow control option, the speculative first
    burst.

    Traffic classes (used when ``class_map`` is set): UEC 1.0 carries its traffic
    classes on Ethernet priorities (DSCP / 802.1p) with the switch's ETS scheduler;
    two classes ``TC0`` / ``TC1`` at 50 % / 50 % (assumption); trimming per class
    queue.

    Parameters from the NIC line rate ``nic_gbps`` (default 400 Gb/s): NSCC's gains
    follow each flow's BDP (:func:`fabric_jax.cc.nscc.derived_gains`), no parameter
    scales.  Latency: ``switch_latency`` 600 ns (UEC runs on commodity Ethernet
    switches; the value of :func:`roce`, assumption), ``nic_latency`` 0.3 us
    (assumption: no UEC NIC latency is published).
    """
    base = Fabric("uec", routing="spray", cc="nscc", flow_control="trim",
                  description="spraying + NSCC + lossy with trimming",
                  switch_latency=ETHERNET_SWITCH_LATENCY, nic_latency=NIC_LATENCY,
                  reorder=True, loss_recovery="selective", class_weights=(50.0, 50.0),
                  class_names=("TC0", "TC1"))
    return base.replace(**overrides)


#: Preset builders by name.
PRESETS = {"infiniband": infiniband, "roce": roce, "spectrum_x": spectrum_x, "uec": uec}


def get_fabric(fabric, **overrides) -> Fabric:
    """A :class:`Fabric` from a preset name (with overrides) or a Fabric."""
    if isinstance(fabric, Fabric):
        return fabric.replace(**overrides) if overrides else fabric
    if fabric not in PRESETS:
        raise ValueError(f"fabric must be one of {sorted(PRESETS)}; got {fabric!r}")
    return PRESETS[fabric](**overrides)

