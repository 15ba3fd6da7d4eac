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

Receiver (issue 14, :mod:`fabric_jax.receiver`): ``reorder`` says whether the receiving
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

Device latency per preset (issue 14): ``switch_latency`` (port to port) and
``nic_latency`` (one NIC traversal) in seconds, from the vendor documents named in each
preset; :meth:`Fabric.link_latency` adds them to a topology's per-link propagation
delay (a link leaving a switch carries that switch's latency, a link leaving or
entering a host one NIC latency).

SHARP (Graham et al., "Scalable Hierarchical Aggregation Protocol", COMHPC 2016):
switches reduce, so each host sends its ``S`` bytes once and receives the result once,
versus ``2 (n-1)/n S`` each way in a ring: :func:`all_reduce_flows` emits one flow of
``S`` per host along the ring order instead of ``2 (n-1)/n S`` (pipelined form;
:func:`fabric_jax.workloads.collectives.steady_state_all_reduce`).  The
saving on switch-to-switch links (the aggregation tree sends one copy per switch) is not
modelled, so the preset is conservative for IB.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from . import cc
from .routing import get_policy
from .units import NS, US, gbps
from .workloads.flows import Workload

__all__ = ["Fabric", "infiniband", "roce", "spectrum_x", "uec", "PRESETS", "get_fabric",
           "all_reduce_flows", "IB_SWITCH_LATENCY", "SPECTRUM_SWITCH_LATENCY",
           "ETHERNET_SWITCH_LATENCY", "NIC_LATENCY"]

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
    (each host sends and receives ``S`` once).  Leaves out: virtual lanes / service
    levels (one traffic class; QoS isolation is not modelled), subnet-manager routing
    tables beyond min-hop up/down.  Receiver: ``reorder=True`` (HCAs that support
    adaptive routing accept out-of-order packets: NVIDIA ConnectX AR documentation;
    a bounded reorder buffer, assumed large enough), ``loss_recovery="go_back_n"`` (IB
    RC transport, IBA vol. 1 sec. 9.7.5: a PSN sequence error NAK makes the requester
    resend from that PSN; matters only on fault losses, credits never drop).

    Expected behaviour (evidence in ``tests/test_cc.py``, ``tests/test_fabrics.py``):
    credits and IB CC do not slow uncongested traffic (a lone flow and a SHARP
    all-reduce alone run at line rate, CCTI stays 0).  In the compare study's training
    step the fluid all-reduce is nevertheless slower than under ``roce``: it starts
    while the skewed MoE all-to-all still congests hot receivers and spine ports, its
    flows collect BECNs there (CCTI rises ~6 per us at 50 GB/s), and after the hot spots
    drain the CCTI returns by one index per ``ccti_timer`` (30 us), so the all-reduce
    runs at ~75 % of line rate and below (measured on the default scenario's training
    job alone, 192 GPUs: mean CCTI of the active all-reduce flows ~37 with every queue
    empty, all-reduce 278 us vs 164 us with ``cc="none"``, and 86 us either way with
    no all-to-all before it).  That is IB CC's fast-
    increase / slow-decrease asymmetry with the published parameters (see
    :mod:`fabric_jax.cc.ibcc`), not an artefact of credits (credit stall 0 in that run)
    or SHARP; the max-min engine (ideal CC) ranks ``infiniband`` first.  Tune with
    ``cc_options={"ccti_timer": ...}`` or compare ``cc="none"``.  (The figures above
    were measured with a 30 us timer and marking rate 3 at 400 Gb/s; the line-rate
    defaults now give a 3 us timer and the vendor marking rate 10 at 400 Gb/s, see
    :mod:`fabric_jax.cc.ibcc`.)

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
                  reorder=True, loss_recovery="go_back_n")
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
    go-back-N window.  Leaves out: multiple priorities, PFC deadlock.

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
                  reorder=False, loss_recovery="go_back_n")
    return base.replace(**overrides)


def spectrum_x(**overrides) -> Fabric:
    """NVIDIA Spectrum-X: RoCE plus per-packet global adaptive routing and telemetry CC.

    Models: PFC lossless RoCE; per-packet switch-local adaptive routing combined with
    end-to-end congestion telemetry that reaches the NIC about one RTT late
    (:func:`fabric_jax.routing.spectrum_x_ar_params`; the delay is our assumption),
    with SuperNIC reordering so spraying costs nothing; telemetry-driven congestion control modelled
    by HPCC's in-band-telemetry law (Li et al. SIGCOMM 2019) -- NVIDIA's algorithm is
    not public.  Per-tenant performance isolation is approximated by this CC plus AR
    (no per-tenant queues).  Source of the headline claim: NVIDIA Spectrum-X white
    paper (about 95 % effective bandwidth vs about 60 % for ECMP).  Receiver:
    ``reorder=True`` (SuperNIC direct data placement puts out-of-order packets in
    place, Spectrum-X white paper), ``loss_recovery="selective"`` (our assumption: a
    NIC that places out of order can resend only what is missing; losses are rare under
    PFC).  Leaves out: the real Spectrum-X CC algorithm, per-tenant queues,
    BlueField/SuperNIC offloads.

    Parameters from the NIC line rate ``nic_gbps`` (default 400 Gb/s): HPCC's
    ``R_AI = C (1 - eta)/N`` (paper rule, ``N`` = 100 our assumption), ``eta`` 0.95.
    Latency: ``switch_latency`` 300 ns (Mellanox Spectrum SN2000 product brief,
    cut-through; Spectrum-4 is announced as cut-through without a published figure we
    could confirm), ``nic_latency`` 0.3 us (assumption, as :func:`infiniband`).
    """
    base = Fabric("spectrum_x", routing="spectrum_x_ar", cc="hpcc", flow_control="pfc",
                  description="PFC + telemetry CC (HPCC-like) + per-packet AR with telemetry",
                  switch_latency=SPECTRUM_SWITCH_LATENCY, nic_latency=NIC_LATENCY,
                  reorder=True, loss_recovery="selective")
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

    Parameters from the NIC line rate ``nic_gbps`` (default 400 Gb/s): NSCC's gains
    follow each flow's BDP (:func:`fabric_jax.cc.nscc.derived_gains`), no parameter
    scales.  Latency: ``switch_latency`` 600 ns (UEC runs on commodity Ethernet
    switches; the value of :func:`roce`, assumption), ``nic_latency`` 0.3 us
    (assumption: no UEC NIC latency is published).
    """
    base = Fabric("uec", routing="spray", cc="nscc", flow_control="trim",
                  description="spraying + NSCC + lossy with trimming",
                  switch_latency=ETHERNET_SWITCH_LATENCY, nic_latency=NIC_LATENCY,
                  reorder=True, loss_recovery="selective")
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


def all_reduce_flows(hosts, size, *, sharp: bool = False, job: str = "job0",
                     name: str | None = None, arrival: float = 0.0) -> Workload:
    """Bandwidth-bound all-reduce of ``size`` bytes over ``hosts``, one flow per host.

    Ring (``sharp=False``): the pipelined ring in its steady state: every rank streams
    ``2 (n-1)/n * size`` bytes to its ring successor, all at once (the per-step flows
    of :func:`fabric_jax.workloads.ring_all_reduce` merged, keeping link loads and
    volumes, not the per-step latency).  SHARP: ``size`` bytes per rank (sent once to
    the switch, result received once), over the same host links.

    Args:
      hosts: [ranks] distinct hosts (>= 2).
      size: buffer ``S``, bytes.
      sharp: in-network reduction.
      job, name, arrival: as for the workload builders.

    Returns:
      a ``Workload`` with ``ranks`` flows and one group of kind ``all_reduce``.
    """
    from .workloads.collectives import steady_state_all_reduce
    return steady_state_all_reduce(hosts, size, sharp=sharp, job=job, name=name,
                                   arrival=arrival)
