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
job in its own class.  Assumption: every class of a fabric uses the fabric's
flow-control mode (a lossless RDMA priority beside a lossy TCP one is not expressed).

Switch memory as built (:data:`SWITCH_ASICS`): the Ethernet presets' switches have one
shared packet memory per switch of their ASIC's size with dynamic thresholds
(:class:`fabric_jax.flowcontrol.SharedBuffer`, ``alpha`` :data:`SHARED_BUFFER_ALPHA`):
``roce`` and ``uec`` a Broadcom Tomahawk 5 (165 MB), ``spectrum_x`` an NVIDIA
Spectrum-4 (160 MB); ``infiniband`` keeps the topology's per-port buffers (Quantum-2
publishes no buffer size).  Fields ``switch_buffer_mb`` and ``shared_buffer_alpha``
(``None``: static per-port pools, the topology's ``buffer``); the simulations that apply
them are the compare study (:meth:`Fabric.class_options`) and the scale study
(:meth:`Fabric.buffer_options`); a caller of :func:`fabric_jax.fabric_sim.simulate_paths`
passes ``fluid_options=fabric.buffer_options(topology)``.  ``roce``'s DCQCN marks at
``K_min``/``K_max`` = 150/1500 KB (:data:`RoCE_ECN_KB`), below PFC XOFF at the
operating point (:func:`xoff_at_operating_point`, :func:`check_ecn_below_xoff`);
:func:`roce_pfc_only` (a named variant, :data:`VARIANTS`) is the RoCE whose ECN
thresholds sit above XOFF, so PFC does the work.

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
           "ETHERNET_SWITCH_LATENCY", "NIC_LATENCY", "TENANT_CLASSES", "SwitchASIC",
           "SWITCH_ASICS", "SHARED_BUFFER_ALPHA", "RoCE_ECN_KB", "VARIANTS", "roce_pfc_only",
           "xoff_at_operating_point", "check_ecn_below_xoff", "bdp_bytes", "BDP_HOPS",
           "check_switch_buffer"]

#: A ``class_map`` that isolates the training job: it alone in class 1, every other
#: tenant and the background traffic in class 0.
TENANT_CLASSES = {"train": 1, "tenant": 0, "background": 0}

#: Device latencies, seconds (sources in the preset docstrings).
IB_SWITCH_LATENCY = 130 * NS        # NVIDIA Quantum (HDR, QM8700) data sheet, cut-through
SPECTRUM_SWITCH_LATENCY = 300 * NS  # Mellanox Spectrum (SN2000) product brief, cut-through
ETHERNET_SWITCH_LATENCY = 600 * NS  # Arista 7050X data sheet: 550-650 ns cut-through
NIC_LATENCY = 0.3 * US              # ConnectX "sub-600 ns" end to end, split over two NICs


@dataclasses.dataclass(frozen=True)
class SwitchASIC:
    """A switch ASIC's packet memory as built.

    Attributes:
      name: the ASIC.
      tbps: switching capacity, Tb/s.
      ports_400g: ports at 400 Gb/s (the topology builders' link speed).
      buffer_mb: packet memory, MB (1 MB = 10^6 B), shared by all ports with dynamic
        thresholds; ``None`` where no figure is published.
      source: where the figure comes from.
    """

    name: str
    tbps: float
    ports_400g: int
    buffer_mb: float | None
    source: str

    @property
    def buffer(self) -> float | None:
        """Packet memory, bytes."""
        return None if self.buffer_mb is None else self.buffer_mb * 1e6


#: Current AI switch ASICs and their shared packet memory.  Vendors rarely publish a
#: buffer size; each figure names its document, and how sure it is.
SWITCH_ASICS = {
    "tomahawk5": SwitchASIC(
        "Broadcom Tomahawk 5 (BCM78900)", 51.2, 128, 165.0,
        "Arista 7060X6 data sheet (TH5 system): 165 MB packet buffer; Broadcom's "
        "announcement (Aug 2022) says 'shared-buffer architecture' without a size"),
    "tomahawk4": SwitchASIC(
        "Broadcom Tomahawk 4 (BCM56990)", 25.6, 64, 113.0,
        "Arista 7060X5 / 7388X5 data sheets (TH4 systems): 113-114 MB shared buffer; not "
        "in Broadcom's own documents (assumption: the system figure is the ASIC's)"),
    "spectrum4": SwitchASIC(
        "NVIDIA Spectrum-4 (SN5600)", 51.2, 128, 160.0,
        "NVIDIA Spectrum SN5000 series data sheet: SN5600 160 MB buffer ('fully shared, "
        "monolithic packet buffer dynamically available to all ports', NVIDIA "
        "Spectrum-4 announcement, GTC 2022); a third-party summary quotes 128 MB"),
    "spectrum3": SwitchASIC(
        "NVIDIA Spectrum-3 (SN4000)", 12.8, 32, 64.0,
        "NVIDIA Spectrum SN4000 series data sheet: 64 MB fully shared buffer"),
    "quantum2": SwitchASIC(
        "NVIDIA Quantum-2 (QM9700, InfiniBand NDR)", 51.2, 64, None,
        "no buffer size published; credit-based per-VL buffers (IBA vol. 1 sec. 7.9): "
        "the infiniband preset keeps the topology's per-port buffers (assumption)"),
}

#: Dynamic-threshold factor of the Ethernet presets' shared buffers: 1, SONiC's
#: dynamic buffer model ``default_dynamic_th = 0`` (``alpha = 2^dynamic_th``; SONiC
#: ``doc/qos/dynamically-calculating-buffer-settings.md``), Choudhury-Hahne's first value.
SHARED_BUFFER_ALPHA = 1.0

#: DCQCN's RED thresholds in the ``roce`` preset, KB (1 KB = 1000 B): ``(K_min, K_max)``
#: = (150, 1500), NVIDIA's lossless RoCE switch configuration ("Lossless RoCE
#: Configuration for MLNX-OS Switches in DSCP-Based QoS Mode", NVIDIA/Mellanox
#: community DOC-2884 / DOC-3017: ``traffic-class 3 congestion-control ecn
#: minimum-absolute 150 maximum-absolute 1500``), absolute thresholds for every port
#: speed; ``P_max`` stays the ``"hpcc_ns3"`` set's 0.2 (NVIDIA does not publish its
#: marking probability; assumption).
RoCE_ECN_KB = (150.0, 1500.0)


def xoff_at_operating_point(buffer, alpha, ports: int) -> float:
    """PFC XOFF of a shared-buffer switch at its operating point, bytes.

    With dynamic thresholds XOFF is ``alpha (B - Q)`` and falls as the switch fills.
    The operating point: ``ports`` lossless pools each at its threshold (Choudhury and
    Hahne 1998, eq. 2): ``T = alpha B / (1 + ports alpha)``.  For a Clos switch the
    presets take ``ports`` = half the ASIC's ports (:func:`check_ecn_below_xoff`):
    one direction of the switch congested at once (a leaf's down ports under an incast
    on every host, or its up ports under an incast on every spine), assumption.  With
    every port's pool at its limit (``ports`` = all) the bound is about ``B / ports``.
    """
    b, a = float(buffer), float(alpha)
    return a * b / (1.0 + int(ports) * a)


def bdp_bytes(link_rate, rtt) -> float:
    """One bandwidth-delay product, bytes: ``link_rate`` (bytes/s) x ``rtt`` (s)."""
    return float(link_rate) * float(rtt)


#: Links each way of the round trip a buffer must cover (:func:`check_switch_buffer`):
#: a two-tier Clos path NIC-leaf-spine-leaf-NIC (assumption: the longest path of the
#: builds the studies use below three tiers).
BDP_HOPS = 4


def check_switch_buffer(topology, size, *, name="switch_buffer_mb") -> None:
    """Refuses switch memories smaller than one bandwidth-delay product (host).

    The BDP of a switch: its fastest port's rate times the round trip of
    :data:`BDP_HOPS` links each way at the topology's largest link latency.  A switch
    that cannot hold one BDP cannot absorb one RTT of a single port's line-rate burst
    (and PFC's headroom alone is about one RTT of the port).

    Raises:
      ValueError: naming ``name``, the smallest memory and the BDP it must reach.
    """
    is_host = np.asarray(topology.node_is_host, bool)
    src = np.asarray(topology.link_src)
    cap = np.asarray(topology.capacity, float)
    sw = np.flatnonzero(~is_host)
    if sw.size == 0:
        return
    node_to_sw = np.full(is_host.size, -1)
    node_to_sw[sw] = np.arange(sw.size)
    own = node_to_sw[src]
    fastest = np.zeros(sw.size)
    np.maximum.at(fastest, own[own >= 0], cap[own >= 0])
    rtt = 2 * BDP_HOPS * float(np.max(np.asarray(topology.latency, float), initial=0.0))
    need = fastest * rtt
    size = np.broadcast_to(np.asarray(size, float), (sw.size,))
    bad = size < need
    if np.any(bad):
        i = int(np.argmax(need - size))
        raise ValueError(f"{name}: a switch memory of {size[i] / 1e6:.4g} MB is smaller than "
                         f"one bandwidth-delay product of its port ({need[i] / 1e6:.4g} MB = "
                         f"{fastest[i] * 8 / 1e9:g} Gb/s x {rtt * 1e6:g} us round trip); "
                         f"give at least {need[i] / 1e6:.4g} MB")


def check_ecn_below_xoff(fabric, *, port_buffer=None, capacity=None, reaction_s=None,
                         line_rate=None, ports=None, name="cc_options['k_max']") -> None:
    """Refuses DCQCN marking thresholds at or above the PFC XOFF of the port (host).

    ECN must mark before PFC pauses (Zhu et al., DCQCN, SIGCOMM 2015 sec. 3: the ECN
    threshold is set below the PFC threshold so that DCQCN reacts before PAUSE frames
    spread congestion): ``K_max`` (the top of the RED ramp) below XOFF.  XOFF: with a
    shared buffer (``fabric.shared_buffer_alpha``) the operating point of
    :func:`xoff_at_operating_point` with half the switch's ports (``ports``, default the
    ASIC's ports at the NIC rate ``fabric.nic_gbps``); with static pools
    ``port_buffer - headroom`` (:func:`fabric_jax.flowcontrol.pfc_thresholds` at
    ``capacity`` bytes/s and ``reaction_s``).  Nothing to check for another law or
    flow control.

    Raises:
      ValueError: naming ``name`` with K_max, the XOFF and the fix.
    """
    if fabric.flow_control != "pfc" or fabric.cc != "dcqcn":
        return
    _, k_max = fabric.ecn_thresholds(line_rate)
    if fabric.shared_buffer_alpha is not None:
        asic = SWITCH_ASICS.get(fabric.switch_asic)
        if ports is None:
            if asic is None:
                raise ValueError("check_ecn_below_xoff: ports (the switch's port count) is "
                                 "needed without a switch_asic")
            ports = int(round(asic.tbps * 1e3 / fabric.nic_gbps))
        if fabric.switch_buffer_mb is not None:
            size = fabric.switch_buffer_mb * 1e6
        elif port_buffer is not None:
            size = float(np.max(port_buffer)) * ports
        else:
            raise ValueError("check_ecn_below_xoff: port_buffer is needed without "
                             "switch_buffer_mb")
        xoff = xoff_at_operating_point(size, fabric.shared_buffer_alpha, max(ports // 2, 1))
        where = (f"the shared-buffer XOFF at the operating point ({size / 1e6:g} MB, alpha "
                 f"{fabric.shared_buffer_alpha:g}, {max(ports // 2, 1)} congested pools)")
    else:
        if port_buffer is None or capacity is None or reaction_s is None:
            return
        from .flowcontrol import pfc_headroom
        xoff = float(np.min(np.asarray(port_buffer, float) - pfc_headroom(
            capacity, reaction_s=reaction_s)))
        where = "the static pool's XOFF (buffer - PFC headroom)"
    if k_max >= xoff:
        raise ValueError(f"{name}: DCQCN K_max {k_max / 1e3:g} KB is not below {where} "
                         f"{xoff / 1e3:.4g} KB, so PFC pauses before ECN marks; lower K_max "
                         f"below {xoff / 1e3:.4g} KB or give a larger buffer")


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
      switch_buffer_mb: packet memory of every switch, MB (1 MB = 10^6 B), shared by its
        ports with dynamic thresholds ``shared_buffer_alpha`` (an ASIC of
        :data:`SWITCH_ASICS`); ``None`` (default): each switch's memory is the sum of
        its ports' ``topology.buffer``.
      switch_asic: the :data:`SWITCH_ASICS` key the switch memory comes from (a label:
        ``switch_buffer_mb`` is what runs), ``""``: none.
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
    switch_buffer_mb: float | None = None
    switch_asic: str = ""

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
        m = self.switch_buffer_mb
        if m is not None:
            if not (isinstance(m, (int, float, np.floating, np.integer)) and not isinstance(
                    m, bool) and np.isfinite(m) and m > 0):
                raise ValueError(f"switch_buffer_mb must be None or a finite number > 0 (MB "
                                 f"per switch); got {m!r}")
            if a is None:
                raise ValueError("switch_buffer_mb needs shared_buffer_alpha (the switch's "
                                 "memory is shared with dynamic thresholds); set "
                                 "shared_buffer_alpha, e.g. 1, or switch_buffer_mb=None")
        if self.switch_asic and self.switch_asic not in SWITCH_ASICS:
            raise ValueError(f"switch_asic must be '' or one of {sorted(SWITCH_ASICS)}; got "
                             f"{self.switch_asic!r}")

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
        out.update(self.buffer_options(topology))
        return out

    def buffer_options(self, topology, weight=None) -> dict:
        """Keyword arguments of :func:`fabric_jax.fluid.simulate_fluid` for the switches'
        memory: ``{}`` with static per-port pools, else ``{"shared_buffer":
        SharedBuffer}`` of ``switch_buffer_mb`` per switch (default: the sum of its
        ports' ``topology.buffer``) with ``shared_buffer_alpha``.

        Args:
          topology: the :class:`fabric_jax.Topology`.
          weight: ``[switches]`` occupancy weights
            (:class:`fabric_jax.flowcontrol.SharedBuffer`; the rail reduction's).

        Raises:
          ValueError: no topology, or a switch memory smaller than one bandwidth-delay
            product of its fastest port (:func:`check_switch_buffer`).
        """
        if self.shared_buffer_alpha is None:
            return {}
        if topology is None:
            raise ValueError("shared_buffer_alpha needs the topology (switch memory map)")
        from .flowcontrol import shared_buffer
        size = None if self.switch_buffer_mb is None else self.switch_buffer_mb * 1e6
        sb = shared_buffer(topology, alpha=self.shared_buffer_alpha, size=size, weight=weight)
        check_switch_buffer(topology, np.asarray(sb.size), name="switch_buffer_mb"
                            if self.switch_buffer_mb is not None else "topology.buffer")
        return {"shared_buffer": sb}

    def ecn_thresholds(self, line_rate=None):
        """``(K_min, K_max)`` of DCQCN's RED ramp, bytes (``None`` for another law)."""
        if self.cc != "dcqcn":
            return None
        p = self.law_params(line_rate)
        return float(np.max(np.asarray(p.k_min))), float(np.max(np.asarray(p.k_max)))

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
    802.1Qbb).

    Switch memory: a Broadcom Tomahawk 5 per switch (:data:`SWITCH_ASICS`, 165 MB,
    51.2 Tb/s = 128 x 400G; assumption: a commodity RoCE fabric of 400G ports is built
    of today's merchant 51.2T ASIC), one shared pool with dynamic thresholds ``alpha``
    = 1 (SONiC's ``default_dynamic_th`` 0); PFC XOFF is ``alpha`` times the free memory
    with a static headroom per pool (:func:`fabric_jax.flowcontrol.dynamic_params`).
    ECN: DCQCN's RED ramp from ``K_min`` 150 KB to ``K_max`` 1500 KB (NVIDIA's lossless
    RoCE switch configuration, :data:`RoCE_ECN_KB`), fixed in bytes at every port
    speed, below XOFF at the operating point (2.54 MB with half the ASIC's 128 ports'
    pools at their limit, :func:`xoff_at_operating_point`), so DCQCN marks before PFC
    pauses (Zhu et al. 2015 sec. 3).  ``cc_options`` given to this builder keep these
    thresholds unless they name ``k_min`` / ``k_max`` (with another ``cc`` the thresholds
    are not set).  :func:`roce_pfc_only` is the
    variant with static 1 MB pools and the ``"hpcc_ns3"`` thresholds (1.6/6.4 MB at
    400 Gb/s, above XOFF).

    Parameters from the NIC line rate ``nic_gbps`` (default 400 Gb/s): DCQCN's
    ``"hpcc_ns3"`` set (HPCC authors' ns-3 "Mellanox" DCQCN: R_AI and R_HAI in
    proportion to the rate, timers 4/1/300 us, P_max 0.2; assumption: NVIDIA's
    unpublished increase-stage firmware values equal these), with the ECN thresholds
    above.  Latency: ``switch_latency`` 600 ns (a commodity
    shared-buffer Ethernet switch: Arista 7050X data sheet, 550-650 ns cut-through;
    an older generation, our assumption for today's), ``nic_latency`` 0.3 us (as
    :func:`infiniband`: same ConnectX silicon, assumption).
    """
    ecn = _roce_ecn() if overrides.get("cc", "dcqcn") == "dcqcn" else {}  # DCQCN's RED
    base = Fabric("roce", routing="ecmp", cc="dcqcn", flow_control="pfc",
                  description="PFC + ECN/DCQCN + ECMP",
                  switch_latency=ETHERNET_SWITCH_LATENCY, nic_latency=NIC_LATENCY,
                  reorder=False, loss_recovery="go_back_n", class_weights=(50.0, 50.0),
                  class_names=("TC0", "TC3"), cc_options=ecn,
                  shared_buffer_alpha=SHARED_BUFFER_ALPHA,
                  switch_buffer_mb=SWITCH_ASICS["tomahawk5"].buffer_mb,
                  switch_asic="tomahawk5")
    if "cc_options" in overrides:   # the ECN thresholds stay unless given
        overrides = dict(overrides, cc_options={**ecn, **overrides["cc_options"]})
    return base.replace(**overrides)


def _roce_ecn() -> dict:
    return dict(k_min=RoCE_ECN_KB[0] * 1e3, k_max=RoCE_ECN_KB[1] * 1e3)


def roce_pfc_only(**overrides) -> Fabric:
    """RoCEv2 with PFC doing the work: :func:`roce` with the ECN thresholds of the
    ``"hpcc_ns3"`` set (K_min/K_max 100/400 KB per 25 Gb/s: 1.6/6.4 MB at 400 Gb/s,
    above the port's XOFF) and static per-port pools (the topology's ``buffer``, 1 MB
    by default: XOFF about 950 KB), so DCQCN hardly ever marks and PFC pauses instead.
    Some production fabrics run RoCE this way (ECN off or thresholds above PFC; e.g.
    the PFC-only RoCE of Guo et al., "RDMA over Commodity Ethernet at Scale", SIGCOMM
    2016, sec. 2, before DCQCN was deployed).  Not in :data:`PRESETS`; reachable by
    name through :func:`get_fabric` (:data:`VARIANTS`)."""
    base = roce(shared_buffer_alpha=None, switch_buffer_mb=None, switch_asic="",
                description="PFC (ECN above XOFF) + DCQCN + ECMP")
    return dataclasses.replace(base, name="roce_pfc_only", cc_options={}).replace(**overrides)


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
    Spectrum shared-buffer documentation, SONiC ``dynamic_th``).  Switch memory: an
    NVIDIA Spectrum-4 per switch (:data:`SWITCH_ASICS`, 160 MB, fully shared), ``alpha``
    1 (SONiC's default).

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
                  class_names=("TC0", "TC3"), shared_buffer_alpha=SHARED_BUFFER_ALPHA,
                  switch_buffer_mb=SWITCH_ASICS["spectrum4"].buffer_mb,
                  switch_asic="spectrum4")
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

    Switch memory: a Broadcom Tomahawk 5 per switch (165 MB, shared, ``alpha`` 1; the
    commodity switch of :func:`roce`, assumption): a trimmed packet is one whose egress
    queue exceeds its dynamic threshold (:func:`fabric_jax.flowcontrol.dynamic_limit`).

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
                  class_names=("TC0", "TC1"), shared_buffer_alpha=SHARED_BUFFER_ALPHA,
                  switch_buffer_mb=SWITCH_ASICS["tomahawk5"].buffer_mb,
                  switch_asic="tomahawk5")
    return base.replace(**overrides)


#: Preset builders by name.
PRESETS = {"infiniband": infiniband, "roce": roce, "spectrum_x": spectrum_x, "uec": uec}
#: Named variants, reachable by :func:`get_fabric` (and ``--fabrics``), not run by default.
VARIANTS = {"roce_pfc_only": roce_pfc_only}


def get_fabric(fabric, **overrides) -> Fabric:
    """A :class:`Fabric` from a preset or variant name (with overrides) or a Fabric."""
    if isinstance(fabric, Fabric):
        return fabric.replace(**overrides) if overrides else fabric
    builders = {**PRESETS, **VARIANTS}
    if fabric not in builders:
        raise ValueError(f"fabric must be one of {sorted(builders)}; got {fabric!r}")
    return builders[fabric](**overrides)

